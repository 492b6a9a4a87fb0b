package assembly

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// input is 2 groups of 2+1 (slots 0-2 group 0, 3-5 group 1), all expected
// and in sync; present[i] == '1' marks slot i present.
func input(present string, waited time.Duration) Input {
	g := layout.Geometry{K: 2, M: 1, Groups: 2, ChunkSize: 4096, Rows: 8}
	in := Input{Geometry: g, FirstSeen: time.Unix(1000, 0)}
	in.Now = in.FirstSeen.Add(waited)
	for i, c := range present {
		in.Slots = append(in.Slots, Slot{Member: fmt.Sprintf("m%d", i), Expected: true, Present: c == '1', InSync: c == '1'})
	}
	return in
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		present string
		waited  time.Duration
		want    Action
		reason  string
	}{
		{"111111", 0, Start, "all 6 expected members present"},
		{"110111", 0, Wait, "waiting for 1 of 6 members (slot 2, member m2); starts degraded in 30s"},
		{"110111", 18 * time.Second, Wait, "starts degraded in 12s"},
		{"110111", 30 * time.Second, StartDegraded, "1 of 6 members missing after the 30s last-resort timeout (slot 2, member m2)"},
		{"110110", time.Hour, StartDegraded, "(slot 2 member m2; slot 5 member m5)"},
		{"100111", 0, Refuse, "cannot start: group 0 has 1 of 3 members present, 2 needed; waiting for 2 of 6 members"},
		{"100111", time.Hour, Refuse, "cannot start: group 0 has 1 of 3"},
		{"000111", time.Hour, Refuse, "group 0 has 0 of 3"},
	} {
		d := Decide(input(c.present, c.waited))
		if d.Action != c.want || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("%s after %v: %v %q, want %v containing %q", c.present, c.waited, d.Action, d.Reason, c.want, c.reason)
		}
		if d.Action == Wait && d.Retry != 30*time.Second-c.waited {
			t.Errorf("%s after %v: retry %v", c.present, c.waited, d.Retry)
		}
	}
}

// One group: the reason counts members of the volume.
func TestDecideOneGroup(t *testing.T) {
	g := layout.Geometry{K: 4, M: 2, Groups: 1, ChunkSize: 4096, Rows: 8}
	in := Input{Geometry: g, Now: time.Unix(1000, 0), FirstSeen: time.Unix(1000, 0)}
	for i := range 6 {
		in.Slots = append(in.Slots, Slot{Member: fmt.Sprint(i), Expected: true, Present: i < 3, InSync: i < 3})
	}
	want := "cannot start: 3 of 6 members present, 4 needed; waiting for 3 of 6 members"
	if d := Decide(in); d.Action != Refuse || !strings.HasPrefix(d.Reason, want) {
		t.Fatalf("%v %q, want refuse %q", d.Action, d.Reason, want)
	}
}

// A slot not expected (failed in the newest superblock) is not waited for,
// and a group short of K without any expected member is refused at once.
func TestDecideNotExpected(t *testing.T) {
	in := input("110111", 0)
	in.Slots[2].Expected = false
	if d := Decide(in); d.Action != Start {
		t.Fatalf("failed slot awaited: %v %q", d.Action, d.Reason)
	}
	in = input("100111", 0)
	in.Slots[1].Expected, in.Slots[2].Expected = false, false
	if d := Decide(in); d.Action != Refuse || !strings.Contains(d.Reason, "no other member is expected") {
		t.Fatalf("short group without expected members: %v %q", d.Action, d.Reason)
	}
}

// A present member that is not in sync (rebuilding, or returning after it
// was missing) is not waited for but does not count towards K.
func TestDecideNotInSync(t *testing.T) {
	in := input("111111", time.Hour)
	in.Slots[1].InSync, in.Slots[2].InSync = false, false
	if d := Decide(in); d.Action != Refuse || !strings.Contains(d.Reason, "group 0 has 1 of 3") {
		t.Fatalf("%v %q", d.Action, d.Reason)
	}
	in.Slots[2].InSync = true
	if d := Decide(in); d.Action != Start {
		t.Fatalf("%v %q", d.Action, d.Reason)
	}
}

// Fewer than K in a group never starts, whatever the wait.
func TestDecideNeverBelowK(t *testing.T) {
	for mask := 0; mask < 64; mask++ {
		p := make([]byte, 6)
		for i := range p {
			p[i] = '0' + byte(mask>>i&1)
		}
		g0 := int(p[0]-'0') + int(p[1]-'0') + int(p[2]-'0')
		g1 := int(p[3]-'0') + int(p[4]-'0') + int(p[5]-'0')
		for _, w := range []time.Duration{0, time.Minute, 1000 * time.Hour} {
			d := Decide(input(string(p), w))
			started := d.Action == Start || d.Action == StartDegraded
			if started != (g0 >= 2 && g1 >= 2 && (w >= DefaultTimeout || g0+g1 == 6)) {
				t.Errorf("%s after %v: %v %q", p, w, d.Action, d.Reason)
			}
		}
	}
}
