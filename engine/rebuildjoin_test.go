package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/fabraid/fabraid/engine/superblock"
)

// cancelAfter is a path member that cancels a rebuild once at bytes of
// data writes have reached it.
type cancelAfter struct {
	*pathMember
	at     int64
	cancel context.CancelFunc
}

func (c *cancelAfter) WriteAt(p []byte, off int64) (int, error) {
	n, err := c.pathMember.WriteAt(p, off)
	c.maybeCancel()
	return n, err
}

func (c *cancelAfter) WriteAtFUA(p []byte, off int64) (int, error) {
	n, err := c.pathMember.WriteAtFUA(p, off)
	c.maybeCancel()
	return n, err
}

func (c *cancelAfter) maybeCancel() {
	if c.cancel != nil && c.bytes.Load() >= c.at {
		c.cancel()
	}
}

// Two members of one node come back one after the other: the second is
// re-added while the first one's resync runs, which stops it, and one
// rebuild then covers both. Rows the first member already got (below its
// checkpoint) are passed again for the second one alone: the first is
// not written there a second time, and both end up holding the data.
func TestRebuildRestartedForSecondMember(t *testing.T) {
	const dataOff = 256 << 10
	mm, _ := memMembers(6, 4<<20)
	first := &cancelAfter{pathMember: newPathMember(mm[1], dataOff)}
	second := newPathMember(mm[2], dataOff)
	devs := []Member{mm[0], first, second, mm[3], mm[4], mm[5]}
	v, err := Create(Config{Name: "join", K: 4, M: 2, ChunkSize: 4096, RegionSize: 64 << 10, DataOffset: dataOff},
		devs, []string{"m0", "m1", "m2", "m3", "m4", "m5"}, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	model := bytes.Repeat([]byte{0x11}, int(v.Size()))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second flush clears the idle bits
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The node of slots 1 and 2 goes away; everything is written again.
	first.cut.Store(true)
	second.cut.Store(true)
	copy(model, bytes.Repeat([]byte{0x22}, len(model)))
	if _, err := v.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	for _, slot := range []int{1, 2} {
		if st := v.Status().Members[slot]; st.Role != superblock.RoleFailed || st.Failure != superblock.FailUnreachable {
			t.Fatalf("slot %d after its path was lost: %s (%s)", slot, st.Role, st.Failure)
		}
	}
	full := v.geo.Rows * int64(v.geo.ChunkSize)

	// Slot 1 is back first; its resync is stopped halfway.
	first.cut.Store(false)
	if err := v.ReAdd(first, "m1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first.at, first.cancel = full/2, cancel
	first.bytes.Store(0)
	if err := v.Rebuild(ctx, RebuildOptions{Workers: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("first rebuild: %v, want it cancelled", err)
	}
	first.cancel = nil
	cp := v.slots[1].checkpoint.Load()
	if cp == 0 || cp >= v.geo.Rows {
		t.Fatalf("slot 1's checkpoint after the stopped resync: row %d of %d", cp, v.geo.Rows)
	}

	// Slot 2 is back: one rebuild takes both.
	second.cut.Store(false)
	if err := v.ReAdd(second, "m2"); err != nil {
		t.Fatal(err)
	}
	first.bytes.Store(0)
	second.bytes.Store(0)
	if err := v.Rebuild(context.Background(), RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := first.bytes.Load(), (v.geo.Rows-cp)*int64(v.geo.ChunkSize); got != want {
		t.Errorf("the joint rebuild wrote %d bytes to slot 1, want %d (its rows from its checkpoint %d of %d only)",
			got, want, cp, v.geo.Rows)
	}
	if got := second.bytes.Load(); got != full {
		t.Errorf("the joint rebuild wrote %d bytes to slot 2, want all %d", got, full)
	}
	if lr := v.Status().LastRebuild; lr == nil || len(lr.Slots) != 2 || lr.Bytes != first.bytes.Load()+second.bytes.Load() {
		t.Errorf("last rebuild in status: %+v, want slots 1 and 2 and the bytes written to them", lr)
	}
	for slot := 0; slot < 6; slot++ {
		if r := v.Status().Members[slot].Role; r != superblock.RoleActive {
			t.Fatalf("slot %d after the joint rebuild: %s", slot, r)
		}
	}
	// Read back from the returned members and two others only.
	for _, slot := range []int{0, 3} {
		if err := v.FailMember(slot); err != nil {
			t.Fatal(err)
		}
	}
	back := make([]byte, v.Size())
	if _, err := v.ReadAt(back, 0); err != nil || !bytes.Equal(back, model) {
		t.Fatalf("read without slots 0 and 3: %v (equal %v)", err, bytes.Equal(back, model))
	}
}
