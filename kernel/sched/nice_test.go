//go:build linux

package sched

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRenice: every thread of the process gets the value, including one
// created afterwards (it inherits it), and an out-of-range value is
// refused. Raising the nice value needs no privilege.
func TestRenice(t *testing.T) {
	before, err := Nice()
	if err != nil {
		t.Fatal(err)
	}
	if before >= 19 {
		t.Skip("already at nice 19")
	}
	want := before + 1
	// Hold a few threads so there are several.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); runtime.LockOSThread(); <-stop }()
	}
	defer func() { close(stop); wg.Wait() }()
	if err := Renice(want); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // gone meanwhile
		}
		if got := 20 - p; got != want {
			t.Errorf("thread %d: nice %d, want %d", tid, got, want)
		}
	}
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		n, _ := Nice()
		done <- n
	}()
	if n := <-done; n != want {
		t.Errorf("a thread after Renice: nice %d, want %d", n, want)
	}
	if err := Renice(20); err == nil {
		t.Error("Renice(20) accepted")
	}
}
