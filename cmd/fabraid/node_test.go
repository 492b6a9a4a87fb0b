package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
)

// fabraid node drain asks fabraidd to drain the node (with --wait in the
// body) and prints what it still owns and its moves; undrain asks the
// same path.
func TestNodeDrainCLI(t *testing.T) {
	var got []api.DrainRequest
	sock := fakeClusterAPI(t, "/v1/nodes/n2/drain", func(body []byte) any {
		var q api.DrainRequest
		json.Unmarshal(body, &q)
		got = append(got, q)
		return api.DrainReply{Node: "n2", Drained: true, Owned: []string{"v1"},
			Moves: []api.MoveReply{{Volume: "u1", From: "n2", To: "n3", Phase: "resigned"}},
			Stuck: []string{"volume v9: no other live, exporting, undrained node may own it"}}
	})
	out, errOut, code := runCLI(t, "node", "drain", "n2", "--wait", "--socket", sock)
	if code != 0 {
		t.Fatalf("drain: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"node n2 drained: it still owns 1 volume(s)", "u1: move to n3 resigned", "volume v9: no other"} {
		if !strings.Contains(out, want) {
			t.Errorf("drain output lacks %q:\n%s", want, out)
		}
	}
	if len(got) != 1 || !got[0].Wait {
		t.Errorf("requests %+v, want one with wait", got)
	}
	out, errOut, code = runCLI(t, "node", "undrain", "n2", "--socket", sock)
	if code != 0 || !strings.Contains(out, "node n2: not drained") {
		t.Errorf("undrain: exit %d, %q %q", code, out, errOut)
	}
}
