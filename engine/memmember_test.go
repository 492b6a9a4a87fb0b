package engine

import (
	"bytes"
	"testing"
)

// TestMemMemberFUA: an FUA write survives a crash that drops every
// unflushed write, an earlier unflushed write to the same bytes cannot
// bring their old contents back, and the member's other unflushed writes
// stay volatile.
func TestMemMemberFUA(t *testing.T) {
	m := NewMemMember(16 << 10)
	old := bytes.Repeat([]byte{1}, 8192)
	other := bytes.Repeat([]byte{2}, 4096)
	fua := bytes.Repeat([]byte{3}, 4096)
	if _, err := m.WriteAt(old, 0); err != nil { // [0, 8K), unflushed
		t.Fatal(err)
	}
	if _, err := m.WriteAt(other, 12288); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteAtFUA(fua, 4096); err != nil { // over the second half of old
		t.Fatal(err)
	}
	m.Crash(func() bool { return true }) // every unflushed write survives
	m.Reopen()
	got := make([]byte, 16<<10)
	if _, err := m.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want := append(append(append(bytes.Clone(old[:4096]), fua...), make([]byte, 4096)...), other...)
	if !bytes.Equal(got, want) {
		t.Fatal("keeping every write: an earlier unflushed write undid the FUA write")
	}

	m = NewMemMember(16 << 10)
	if _, err := m.WriteAt(other, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteAtFUA(fua, 8192); err != nil {
		t.Fatal(err)
	}
	m.Crash(nil) // every unflushed write lost
	m.Reopen()
	if _, err := m.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want = append(make([]byte, 8192), append(bytes.Clone(fua), make([]byte, 4096)...)...)
	if !bytes.Equal(got, want) {
		t.Fatal("dropping every unflushed write: the FUA write was lost or the other write kept")
	}
}
