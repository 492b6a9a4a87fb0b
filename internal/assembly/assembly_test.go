package assembly

import (
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

func input(present string, waited time.Duration) Input {
	// 2 groups of 2+1: slots 0-2 group 0, 3-5 group 1; all expected.
	g := layout.Geometry{K: 2, M: 1, Groups: 2, ChunkSize: 4096, Rows: 8}
	in := Input{Geometry: g, FirstSeen: time.Unix(1000, 0)}
	in.Now = in.FirstSeen.Add(waited)
	for _, c := range present {
		in.Present = append(in.Present, c == '1')
		in.Expected = append(in.Expected, true)
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
		{"111111", 0, Start, "all expected"},
		{"110111", 0, Wait, "missing slot(s) 2"},
		{"110111", 29 * time.Second, Wait, "29s of 30s"},
		{"110111", 30 * time.Second, StartDegraded, "starting degraded"},
		{"110110", time.Hour, StartDegraded, "missing slot(s) 2,5"},
		{"100111", 0, Wait, "missing slot(s) 1,2"},
		{"100111", time.Hour, Refuse, "group 0 has 1 of the 2"},
		{"000111", time.Hour, Refuse, "never starting with fewer"},
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

// A slot not expected (failed in the newest superblock) is not waited for,
// and a group short of K without any expected member is refused at once.
func TestDecideNotExpected(t *testing.T) {
	in := input("110111", 0)
	in.Expected[2] = false
	if d := Decide(in); d.Action != Start {
		t.Fatalf("failed slot awaited: %v %q", d.Action, d.Reason)
	}
	in = input("100111", 0)
	in.Expected[1], in.Expected[2] = false, false
	if d := Decide(in); d.Action != Refuse {
		t.Fatalf("short group without expected members: %v %q", d.Action, d.Reason)
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
