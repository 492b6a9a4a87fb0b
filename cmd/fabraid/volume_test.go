package main

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// fakeAPI serves GET /v1/volumes/v1 with info and records the volume
// operations posted.
func fakeAPI(t *testing.T, info volmgr.Info, ops map[string]api.OpRequest) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/volumes/v1", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(info) })
	mux.HandleFunc("POST /v1/volumes/v1/{op}", func(w http.ResponseWriter, r *http.Request) {
		var q api.OpRequest
		json.NewDecoder(r.Body).Decode(&q)
		ops[r.PathValue("op")] = q
		w.Write([]byte("null"))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// volume show says why a member failed and how to bring it back; fail
// --force and re-add reach the API.
func TestVolumeFailedMemberCLI(t *testing.T) {
	ops := map[string]api.OpRequest{}
	sock := fakeAPI(t, volmgr.Info{Name: "v1", State: "degraded", K: 2, M: 1, Groups: 1, Members: []volmgr.MemberInfo{
		{Slot: 0, Device: "(missing)", Role: "failed", Failure: "admin"},
		{Slot: 1, Device: "/dev/nvme1n1", Role: "active"},
		{Slot: 2, Device: "/dev/nvme2n1", Role: "active"},
	}}, ops)
	out, errOut, code := runCLI(t, "volume", "show", "v1", "--socket", sock)
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{"failed (admin)",
		`slot 0 failed (failed by request): bring it back with "fabraid volume re-add v1 0"`,
		`"fabraid volume replace v1 0 DRIVE"`} {
		if !strings.Contains(out, want) {
			t.Errorf("volume show lacks %q:\n%s", want, out)
		}
	}
	if _, errOut, code := runCLI(t, "volume", "fail", "v1", "1", "--socket", sock); code != 0 {
		t.Fatal(errOut)
	}
	if q, ok := ops["fail"]; !ok || q.Slot != 1 || q.Force {
		t.Errorf("fail without --force posted %+v (%v)", q, ok)
	}
	if _, errOut, code := runCLI(t, "volume", "fail", "v1", "1", "--force", "--socket", sock); code != 0 {
		t.Fatal(errOut)
	}
	if q := ops["fail"]; q.Slot != 1 || !q.Force {
		t.Errorf("fail --force posted %+v", q)
	}
	if _, errOut, code := runCLI(t, "volume", "re-add", "v1", "0", "--rate", "100M", "--socket", sock); code != 0 {
		t.Fatal(errOut)
	}
	if q, ok := ops["re-add"]; !ok || q.Slot != 0 || q.Rate != 100<<20 {
		t.Errorf("re-add posted %+v (%v)", q, ok)
	}
}

// volume show names an unreachable member as coming back by itself, and
// prints the last resync's bytes against the member's size.
func TestVolumeShowUnreachableResync(t *testing.T) {
	sock := fakeAPI(t, volmgr.Info{Name: "v1", State: "degraded", K: 2, M: 1, Groups: 1, Members: []volmgr.MemberInfo{
		{Slot: 0, Device: "/dev/nvme3n1", Role: "failed", Failure: "unreachable"},
		{Slot: 1, Device: "/dev/nvme1n1", Role: "active"},
		{Slot: 2, Device: "/dev/nvme2n1", Role: "active"},
	}, Rebuild: &volmgr.RebuildBytes{Partial: true, Regions: 3, CoverBytes: 3 << 20, Bytes: 3 << 20, MemberBytes: 32 << 20}}, map[string]api.OpRequest{})
	out, errOut, code := runCLI(t, "volume", "show", "v1", "--socket", sock)
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{"failed (unreachable)",
		"slot 0 failed (unreachable: its path or device was lost): it comes back by itself",
		"resync (last): 3 bitmap region(s), 3.0 MiB of 3.0 MiB written; member data 32.0 MiB (to write: 9.4% of it)"} {
		if !strings.Contains(out, want) {
			t.Errorf("volume show lacks %q:\n%s", want, out)
		}
	}
}
