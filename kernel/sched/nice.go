//go:build linux

// Package sched sets the CPU scheduling priority of this process.
//
// Linux keeps the nice value per thread: setpriority(PRIO_PROCESS, pid)
// changes only the thread whose id is pid, and a new thread inherits the
// value of the thread that creates it. A Go process has several threads
// by the time main runs, so Renice walks /proc/self/task and sets each;
// threads created later inherit it from their creator.
package sched

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Renice sets the nice value of every thread of this process to n
// (-20..19; lowering it below the current value needs CAP_SYS_NICE).
func Renice(n int) error {
	if n < -20 || n > 19 {
		return fmt.Errorf("sched: nice %d: want -20..19", n)
	}
	// Until a pass finds every thread at n: a thread created while a pass
	// ran may have copied the value of a thread not set yet.
	var errs []error
	for range 20 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("sched: %w", err)
		}
		errs = errs[:0]
		changed := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if p, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil && 20-p == n {
				continue
			}
			changed = true
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("sched: thread %d: nice %d: %w", tid, n, err))
			}
		}
		if !changed || len(errs) > 0 {
			break
		}
	}
	return errors.Join(errs...)
}

// Nice is the nice value of the calling thread.
func Nice() (int, error) {
	// getpriority returns 20 - nice for PRIO_PROCESS (the raw syscall).
	p, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0, fmt.Errorf("sched: %w", err)
	}
	return 20 - p, nil
}
