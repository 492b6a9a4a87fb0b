package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"golang.org/x/sys/unix"
)

// ErrNoSpace is wrapped by Start when the file system of the member's
// directory has too little free space for a new member.
var ErrNoSpace = errors.New("not enough free space for a new etcd member")

// ErrPanicked is wrapped by Start when etcd panicked while starting.
var ErrPanicked = errors.New("etcd panicked while starting")

// databaseBytes is the room a new member needs beside its first WAL
// segment: the backend database and its first snapshot files.
const databaseBytes = 16_000_000

// newMemberBytes is the free space a new member needs: etcd preallocates
// the WAL's first segment (wal.SegmentSizeBytes, 64 MB) when it creates
// it, and panics when it cannot.
func newMemberBytes() uint64 { return uint64(wal.SegmentSizeBytes) + databaseBytes }

// checkSpace refuses to start a new member (no WAL in dir yet: an init or
// a join) on a file system with less than newMemberBytes free (what df
// calls available) that allocates space on fallocate. On one that does
// not (ext2, ramfs) etcd makes the WAL segment a sparse file instead, and
// a member that restarts has its WAL: neither preallocates anything to
// start, so neither is refused.
func checkSpace(dir string) error {
	if wal.Exist(filepath.Join(dir, "member", "wal")) {
		return nil
	}
	free, at, err := freeBytes(dir)
	if err != nil {
		return fmt.Errorf("store: free space for the etcd member in %s: %w", dir, err)
	}
	need := newMemberBytes()
	if free >= need {
		return nil
	}
	alloc, err := preallocates(at)
	if err != nil {
		return fmt.Errorf("store: free space for the etcd member in %s: %w", dir, err)
	}
	if !alloc {
		return nil
	}
	return needSpace(dir, at, free, need)
}

// preallocates says whether the file system of directory dir allocates
// space on fallocate, what etcd's fileutil.Preallocate tries first for a
// WAL segment (it truncates to the size instead on ENOTSUP or EINTR).
func preallocates(dir string) (bool, error) {
	f, err := os.CreateTemp(dir, ".fabraid-fallocate-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	err = unix.Fallocate(int(f.Fd()), 0, 0, 4096)
	switch {
	case err == nil, errors.Is(err, unix.ENOSPC):
		return true, nil
	case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EINTR):
		return false, nil
	}
	return false, fmt.Errorf("fallocate in %s: %w", dir, err)
}

// needSpace is checkSpace's verdict on free bytes available at at, the
// directory dir or its nearest existing parent.
func needSpace(dir, at string, free, need uint64) error {
	if free >= need {
		return nil
	}
	where := dir
	if at != dir {
		where = fmt.Sprintf("%s (on the file system of %s)", dir, at)
	}
	return fmt.Errorf("store: %s has %s free; a new etcd member needs %s there (%s preallocated for its write-ahead log, %s for its database): %w",
		where, mb(free), mb(need), mb(uint64(wal.SegmentSizeBytes)), mb(need-min(need, uint64(wal.SegmentSizeBytes))), ErrNoSpace)
}

// freeBytes is the space available to unprivileged users on the file
// system of dir, or of its nearest existing parent (at) when dir does not
// exist yet (etcd makes it).
func freeBytes(dir string) (free uint64, at string, err error) {
	at = filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(at, &st)
		if err == nil {
			return st.Bavail * uint64(st.Bsize), at, nil
		}
		parent := filepath.Dir(at)
		if !errors.Is(err, unix.ENOENT) || parent == at {
			return 0, at, fmt.Errorf("statfs %s: %w", at, err)
		}
		at = parent
	}
}

// mb formats n bytes in decimal megabytes, etcd's unit for the WAL.
func mb(n uint64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// startEtcd is embed.StartEtcd with a panic in it (etcd panics in the
// calling goroutine on some bootstrap failures, e.g. "failed to create
// WAL") returned as an error wrapping ErrPanicked, so that the daemon
// survives it. etcd closes what it opened only when it returns an error:
// after a panic the member's listeners and files stay open until the
// process ends.
func startEtcd(cfg *embed.Config, log *slog.Logger) (e *embed.Etcd, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("cluster: etcd panicked while starting", "member", cfg.Name, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			e, err = nil, fmt.Errorf("%v (the daemon log has etcd's error; its ports stay bound until fabraidd restarts): %w", r, ErrPanicked)
		}
	}()
	return embed.StartEtcd(cfg)
}
