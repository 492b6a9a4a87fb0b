package volmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/layout"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/drive"
)

// lockManager is a Manager without a host (no exports), with claims
// under an empty fake tree.
func lockManager(t *testing.T, start StartFunc) *Manager {
	dir := t.TempDir()
	for _, f := range []string{"mountinfo", "swaps"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.StateDir = dir
	return &Manager{log: slog.New(slog.DiscardHandler),
		opts: Options{Config: cfg, Start: start, Kick: func() {},
			Drives: drive.Host{SysBlock: dir, Dev: dir, MountInfo: filepath.Join(dir, "mountinfo"), Swaps: filepath.Join(dir, "swaps"), StateDir: dir}},
		engines: map[[16]byte]Engine{}, names: map[[16]byte]string{}, errs: map[[16]byte]error{}, heads: map[[16]byte]string{}}
}

// completeVolume is a 2+1 volume with every member's drive present.
func completeVolume(u [16]byte, name string) *onDisk {
	members := make([]superblock.Member, 3)
	for i := range members {
		members[i] = superblock.Member{UUID: [16]byte{u[0], byte(i + 1)}, Role: superblock.RoleActive}
	}
	var found []scanned
	for s := range members {
		sb := &superblock.Superblock{VolumeUUID: u, Name: name, Events: 5, Slot: s, MemberUUID: members[s].UUID,
			Geometry: layout.Geometry{K: 2, M: 1, Groups: 1, ChunkSize: 4096, Rows: 16},
			Members:  append([]superblock.Member(nil), members...)}
		found = append(found, scanned{fmt.Sprintf("/dev/%s%d", name, s), sb})
	}
	return groupVolumes(found)[u]
}

// heldEngine answers Status after release is closed; entered gets a
// value each time a Status call begins.
type heldEngine struct {
	Engine
	name    string
	entered chan struct{}
	release chan struct{}
}

func (h *heldEngine) Status() (EngineStatus, error) {
	if h.entered != nil {
		h.entered <- struct{}{}
	}
	if h.release != nil {
		<-h.release
	}
	return EngineStatus{Engine: engine.Status{Name: h.name}, UblkPath: "/dev/ublkb-" + h.name}, nil
}

// await fails the test when ch does not deliver: the schedule the test
// drives did not happen (a lock held, calls made one after the other).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen", what)
		panic("unreachable")
	}
}

// Reconcile starts the engines of two volumes concurrently: the second
// start begins while the first is still running (it returns only once
// both have begun).
func TestReconcileStartsEnginesConcurrently(t *testing.T) {
	begun := make(chan [16]byte, 2)
	release := make(chan struct{})
	m := lockManager(t, func(_ context.Context, s EngineSpec) (Engine, error) {
		begun <- s.UUID
		<-release
		return &heldEngine{name: s.Name}, nil
	})
	a, b := [16]byte{1}, [16]byte{2}
	vols := map[[16]byte]*onDisk{a: completeVolume(a, "a"), b: completeVolume(b, "b")}
	done := make(chan []error, 1)
	go func() { done <- m.startEngines(t.Context(), vols, nil) }()
	got := map[[16]byte]bool{await(t, begun, "the first start"): true}
	got[await(t, begun, "a second start while the first runs")] = true
	if !got[a] || !got[b] {
		t.Fatalf("starts began for %v, want both volumes", got)
	}
	close(release)
	if errs := await(t, done, "reconcile's end"); len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if len(m.engineSnapshot()) != 2 {
		t.Fatalf("engines %v, want 2", m.engineSnapshot())
	}
}

// While an engine's Status hangs, under a reconcile (which holds op) and
// under a free-drive lookup (Create, Replace), Info of another volume
// answers: no Manager lock is held across an engine call.
func TestInfoAnswersWhileAnEngineHangs(t *testing.T) {
	m := lockManager(t, nil)
	a, b := [16]byte{1}, [16]byte{2}
	hung := &heldEngine{name: "a", entered: make(chan struct{}, 4), release: make(chan struct{})}
	m.engines[a], m.names[a] = hung, "a"
	m.engines[b], m.names[b] = &heldEngine{name: "b"}, "b"

	reconciled := make(chan []error, 1)
	go func() {
		m.op.Lock()
		defer m.op.Unlock()
		reconciled <- m.startEngines(t.Context(), map[[16]byte]*onDisk{a: completeVolume(a, "a")}, nil)
	}()
	await(t, hung.entered, "reconcile's status call")
	freed := make(chan error, 1)
	go func() {
		_, err := m.freeDrives(nil)
		freed <- err
	}()
	await(t, hung.entered, "the free-drive lookup's status call")

	info := make(chan api.Volume, 1)
	go func() {
		in, err := m.Info("b")
		if err != nil {
			t.Error(err)
		}
		info <- in
	}()
	if in := await(t, info, "Info of another volume while an engine hangs"); in.Name != "b" || in.State != "optimal" {
		t.Fatalf("info %+v", in)
	}
	close(hung.release)
	if errs := await(t, reconciled, "reconcile's end"); len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if err := await(t, freed, "the free-drive lookup's end"); err != nil {
		t.Fatal(err)
	}
}
