package daemon

import (
	"reflect"
	"testing"
)

func TestHeadsToRetrigger(t *testing.T) {
	names := map[string]string{"u1": "db", "u2": "scratch"}
	heads := []volumeHead{
		{dev: "nvme0n1", uuid: "u1", link: "nvme0n1"}, // linked
		{dev: "nvme1n1", uuid: "u2"},                  // no link
		{dev: "nvme2n1", uuid: "u1", link: "nvme0n1"}, // the link points elsewhere
		{dev: "nvme3n1", uuid: "u9"},                  // a volume the daemon does not know
	}
	tries := map[string]int{"nvme0n1": 2}
	for round := 1; round <= maxHeadRetriggers+1; round++ {
		got := headsToRetrigger(heads, names, tries)
		want := []string{"nvme1n1", "nvme2n1"}
		if round > maxHeadRetriggers {
			want = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: %v, want %v", round, got, want)
		}
	}
	if _, ok := tries["nvme0n1"]; ok {
		t.Error("a head with its link kept its count")
	}
	// Once the link is right the head is forgotten; if it goes missing
	// again, it gets its tries again.
	heads[1].link = "nvme1n1"
	headsToRetrigger(heads, names, tries)
	heads[1].link = ""
	if got := headsToRetrigger(heads, names, tries); !reflect.DeepEqual(got, []string{"nvme1n1"}) {
		t.Errorf("after the link came and went: %v", got)
	}
}

func TestAllLinked(t *testing.T) {
	names := map[string]string{"u1": "db"}
	for _, c := range []struct {
		heads []volumeHead
		want  bool
	}{
		{nil, true},
		{[]volumeHead{{dev: "nvme0n1", uuid: "u1", link: "nvme0n1"}}, true},
		{[]volumeHead{{dev: "nvme0n1", uuid: "u1"}}, false},                  // no link
		{[]volumeHead{{dev: "nvme1n1", uuid: "u1", link: "nvme0n1"}}, false}, // elsewhere
		{[]volumeHead{{dev: "nvme2n1", uuid: "u2"}}, false},                  // a volume not in the last list
	} {
		if got := allLinked(c.heads, names); got != c.want {
			t.Errorf("allLinked(%v) = %v, want %v", c.heads, got, c.want)
		}
	}
}
