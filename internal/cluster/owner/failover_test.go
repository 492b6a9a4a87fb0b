package owner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
)

// watchedMember records every write to a member (the members are shared
// by the two "nodes" of the test, as drives reachable from both are).
type watchedMember struct {
	*engine.MemMember
	afterFence *atomic.Bool
	issued     *atomic.Int64 // writes issued by the old owner after its fence
	oldOwner   bool
}

func (m *watchedMember) WriteAt(p []byte, off int64) (int, error) {
	if m.oldOwner && m.afterFence.Load() {
		m.issued.Add(1)
	}
	return m.MemMember.WriteAt(p, off)
}

func (m *watchedMember) WriteAtFUA(p []byte, off int64) (int, error) {
	if m.oldOwner && m.afterFence.Load() {
		m.issued.Add(1)
	}
	return m.MemMember.WriteAtFUA(p, off)
}

// The failover sequence in one process, with the real etcd edge and the
// real engine: owner a runs a volume at its epoch under a writer; a's etcd
// link is cut; a's Session fences and OnFence freezes the engine; from
// then on a issues no member write; b acquires a larger epoch only after
// that and assembles the members with it; every write a acknowledged reads
// back on b; a, back on etcd with a new lease and an even larger epoch,
// cannot thaw (a newer owner ran the volume).
func TestFailoverSequence(t *testing.T) {
	addr := startEtcd(t)
	ctx := ctxT(t)
	p := newProxy(t, addr, 0)
	cliA := client(t, p.addr())
	cliB := client(t, addr)
	const vol = "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	var afterFence atomic.Bool
	var issued atomic.Int64
	mems := make([]*engine.MemMember, 3)
	devsA := make([]engine.Member, 3)
	for i := range mems {
		mems[i] = engine.NewMemMember(4 << 20)
		devsA[i] = &watchedMember{MemMember: mems[i], afterFence: &afterFence, issued: &issued, oldOwner: true}
	}
	var v *engine.Volume
	fenced := make(chan struct{})
	sess, err := NewSession(ctx, cliA, Options{TTL: 3 * time.Second, StopBudget: time.Second, OnFence: func() {
		<-fenced // v is set before the cut
		v.Freeze()
		afterFence.Store(true)
	}})
	if err != nil {
		t.Fatal(err)
	}
	eA, err := Acquire(ctx, sess, vol, "a")
	if err != nil {
		t.Fatal(err)
	}
	v, err = engine.Create(engine.Config{Name: "v", K: 2, M: 1, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: 256 << 10, AssumeZeroed: true},
		devsA, nil, engine.Options{Logger: quiet, Epoch: uint64(eA)})
	if err != nil {
		t.Fatal(err)
	}
	close(fenced)

	// The writer: block i%8 gets value i; the last acknowledged value of
	// each block is remembered.
	var mu sync.Mutex
	acked := map[int64]int{}
	var werr error
	var nacked atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			off := int64(i%8) * 4096
			if _, err := v.WriteAt(block(i), off); err != nil {
				werr = err
				return
			}
			mu.Lock()
			acked[off] = i
			mu.Unlock()
			nacked.Add(1)
		}
	}()
	for nacked.Load() < 100 { // some writes acknowledged before the cut
		runtime.Gosched()
	}
	p.cut.Store(true)
	<-sess.Fenced()
	if !v.Frozen() {
		t.Fatal("fenced but not frozen")
	}

	other, err := NewSession(ctx, cliB, Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var eB Epoch
	for {
		if err := WaitFree(ctx, cliB, vol); err != nil {
			t.Fatal(err)
		}
		if eB, err = Acquire(ctx, other, vol, "b"); err == nil {
			break
		} else if !errors.Is(err, ErrHeld) {
			t.Fatal(err)
		}
	}
	if eB <= eA {
		t.Fatalf("takeover epoch %d not above %d", eB, eA)
	}
	devsB := make([]engine.Member, 3)
	for i := range mems {
		devsB[i] = mems[i]
	}
	vb, err := engine.Assemble(devsB, nil, engine.Options{Logger: quiet, Epoch: uint64(eB)})
	if err != nil {
		t.Fatal(err)
	}
	if st := vb.Status(); st.Epoch != uint64(eB) {
		t.Fatalf("new owner at epoch %d, want %d", st.Epoch, eB)
	}
	mu.Lock()
	for off, i := range acked {
		got := make([]byte, 4096)
		if _, err := vb.ReadAt(got, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, block(i)) {
			t.Fatalf("block at %d: acknowledged value %d by the old owner, the new owner reads %q", off, i, bytes.TrimRight(got, "\x00"))
		}
	}
	mu.Unlock()
	if _, err := vb.WriteAt(block(-1), 0); err != nil {
		t.Fatal(err)
	}
	if n := issued.Load(); n != 0 {
		t.Fatalf("the old owner issued %d member writes after its fence", n)
	}

	// a comes back: a new session, and after b gives the volume up a
	// larger epoch; Thaw still refuses, b ran the volume meanwhile.
	if err := vb.Flush(); err != nil {
		t.Fatal(err)
	}
	vb.Abandon() // b stops (the members stay open: they are shared with a here)
	if err := other.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p.cut.Store(false)
	cliA2 := client(t, p.addr())
	sessA2, err := NewSession(ctx, cliA2, Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sessA2.Close(ctx)
	if err := WaitFree(ctx, cliA2, vol); err != nil {
		t.Fatal(err)
	}
	eA2, err := Acquire(ctx, sessA2, vol, "a")
	if err != nil || eA2 <= eB {
		t.Fatalf("a's new epoch %d (%v), b's %d", eA2, err, eB)
	}
	if err := v.Thaw(uint64(eA2)); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("the old owner's thaw after a newer owner ran: %v, want %v", err, engine.ErrFenced)
	}
	<-done
	if werr == nil {
		t.Fatal("the old owner's held write was acknowledged")
	}
	if n := issued.Load(); n != 0 {
		t.Fatalf("the old owner issued %d member writes after its fence", n)
	}
	v.Abandon()
}

func block(i int) []byte {
	b := make([]byte, 4096)
	copy(b, fmt.Sprintf("value %d", i))
	return b
}
