package main

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
)

// fakeAPI serves GET /v1/volumes/v1 with info and records the volume
// operations posted.
func fakeAPI(t *testing.T, info api.Volume, ops map[string]api.OpRequest) string {
	t.Helper()
	return serveMux(t, func(mux *http.ServeMux) {
		mux.HandleFunc("GET /v1/volumes/v1", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(info) })
		mux.HandleFunc("POST /v1/volumes/v1/{op}", func(w http.ResponseWriter, r *http.Request) {
			var q api.OpRequest
			json.NewDecoder(r.Body).Decode(&q)
			ops[r.PathValue("op")] = q
			w.Write([]byte("null"))
		})
	})
}

// volume show says why a member failed and how to bring it back; fail
// --force and re-add reach the API.
func TestVolumeFailedMemberCLI(t *testing.T) {
	ops := map[string]api.OpRequest{}
	sock := fakeAPI(t, api.Volume{Name: "v1", State: "degraded", K: 2, M: 1, Groups: 1, Members: []api.Member{
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
	sock := fakeAPI(t, api.Volume{Name: "v1", State: "degraded", K: 2, M: 1, Groups: 1, Members: []api.Member{
		{Slot: 0, Device: "/dev/nvme3n1", Role: "failed", Failure: "unreachable"},
		{Slot: 1, Device: "/dev/nvme1n1", Role: "active"},
		{Slot: 2, Device: "/dev/nvme2n1", Role: "active"},
	}, Rebuild: &api.RebuildBytes{Partial: true, Regions: 3, CoverBytes: 3 << 20, Bytes: 3 << 20, MemberBytes: 32 << 20}}, map[string]api.OpRequest{})
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

// volume show on a non-owner says where the engine runs and the owner's
// epoch, the chunk size and journal the owner published, never an engine
// pid 0 or a chunk of 0 B; with the owner's status unknown it prints no
// journal line.
func TestVolumeShowNonOwner(t *testing.T) {
	in := api.Volume{Name: "v1", State: "optimal", K: 4, M: 2, Groups: 1, ChunkSize: 64 << 10, Owner: "node2", Epoch: 41, Journal: true, JournalBytes: 9<<20 - 48<<10, OwnerJournal: 2}
	out, errOut, code := runCLI(t, "volume", "show", "v1", "--socket", fakeAPI(t, in, map[string]api.OpRequest{}))
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{"chunk 64.0 KiB", "ublk:     none on this node (node2 runs the engine)", "owner:    node2 (owner epoch 41)", "journal:  on, 9.0 MiB per member (9388032 bytes;"} {
		if !strings.Contains(out, want) {
			t.Errorf("volume show lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"engine pid 0", "chunk 0 B", "format version 1"} {
		if strings.Contains(out, bad) {
			t.Errorf("volume show prints %q:\n%s", bad, out)
		}
	}
	in = api.Volume{Name: "v1", State: "unknown", K: 4, M: 2, Groups: 1, Owner: "node2", Error: "owner node2 publishes no status (down?)"}
	out, errOut, code = runCLI(t, "volume", "show", "v1", "--socket", fakeAPI(t, in, map[string]api.OpRequest{}))
	if code != 0 {
		t.Fatal(errOut)
	}
	if strings.Contains(out, "journal:") || !strings.Contains(out, "chunk unknown") {
		t.Errorf("volume show with the owner's status unknown:\n%s", out)
	}
}

// scrub --wait on a node whose owner answers 202 (accepted, not finished
// in the daemon's wait) follows the request until the owner carried it
// out and prints the scrub's result; a request the owner refuses ends
// with the owner's error and a non-zero exit.
func TestVolumeWaitFollowsRequest(t *testing.T) {
	for _, c := range []struct {
		name     string
		final    int // status of the last GET of the request
		wantOut  string
		wantCode int
	}{
		{"done", http.StatusOK, "scrub: 9 stripes, 0 mismatches", 0},
		{"refused", http.StatusConflict, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			polls := 0
			sock := serveMux(t, func(mux *http.ServeMux) {
				mux.HandleFunc("POST /v1/volumes/v1/scrub", func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusAccepted)
					json.NewEncoder(w).Encode(api.OpReply{Request: "r1", Owner: "n3", State: "pending", Message: "request r1 accepted"})
				})
				mux.HandleFunc("GET /v1/volumes/v1/requests/r1", func(w http.ResponseWriter, r *http.Request) {
					if polls++; polls < 2 {
						w.WriteHeader(http.StatusAccepted)
						json.NewEncoder(w).Encode(api.OpReply{Request: "r1", Owner: "n3", State: "running"})
						return
					}
					if c.final != http.StatusOK {
						w.WriteHeader(c.final)
						json.NewEncoder(w).Encode(map[string]string{"error": "slot 0 is busy"})
						return
					}
					w.Write([]byte("null"))
				})
				mux.HandleFunc("GET /v1/volumes/v1", func(w http.ResponseWriter, r *http.Request) {
					json.NewEncoder(w).Encode(api.Volume{Name: "v1", LastTask: &api.TaskResult{Kind: "scrub", Scrub: &engine.ScrubReport{Stripes: 9}}})
				})
			})
			out, errOut, code := runCLI(t, "volume", "scrub", "v1", "--wait", "--socket", sock)
			if code != c.wantCode || !strings.Contains(out, c.wantOut) || polls != 2 {
				t.Errorf("exit %d (want %d), %d polls, out %q, err %q", code, c.wantCode, polls, out, errOut)
			}
			if c.wantCode != 0 && !strings.Contains(errOut, "slot 0 is busy") {
				t.Errorf("refusal not printed: %q", errOut)
			}
		})
	}
}

// serveMux serves the handlers routes adds on a unix socket.
func serveMux(t *testing.T, routes func(*http.ServeMux)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	routes(mux)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// volume show says when the exports are unauthenticated (a target
// without DH-HMAC-CHAP) and, in JSON, export_auth says it too.
func TestVolumeShowExportAuth(t *testing.T) {
	for _, tc := range []struct{ auth, want string }{
		{api.ExportAuthHostNQN, "WARNING:  exports unauthenticated: allowed by host NQN alone"},
		{api.ExportAuthDHCHAP, "exports:  DH-HMAC-CHAP"},
		{api.ExportAuthRefused, "WARNING:  exports refused: the target has no DH-HMAC-CHAP and require_auth is on"},
	} {
		sock := fakeAPI(t, api.Volume{Name: "v1", State: "optimal", K: 2, M: 1, Groups: 1, Owner: "a", ExportAuth: tc.auth}, map[string]api.OpRequest{})
		out, errOut, code := runCLI(t, "volume", "show", "v1", "--socket", sock)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("export auth %s: volume show (%d, %s) lacks %q:\n%s", tc.auth, code, errOut, tc.want, out)
		}
		js, _, _ := runCLI(t, "volume", "show", "v1", "--json", "--socket", sock)
		if !strings.Contains(js, `"export_auth":"`+tc.auth+`"`) {
			t.Errorf("volume show --json lacks export_auth %s:\n%s", tc.auth, js)
		}
	}
}

// volume show names the volume's nodes that export nothing (require_auth
// without DH-HMAC-CHAP) with their reason, in text and JSON.
func TestVolumeShowExportRefused(t *testing.T) {
	sock := fakeAPI(t, api.Volume{Name: "v1", State: "degraded", K: 2, M: 1, Groups: 1, Owner: "a",
		ExportRefused: []string{"c: exports refused: no DH-HMAC-CHAP"}}, map[string]api.OpRequest{})
	out, errOut, code := runCLI(t, "volume", "show", "v1", "--socket", sock)
	if want := "WARNING:  exports nothing: node c: exports refused: no DH-HMAC-CHAP"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("volume show (%d, %s) lacks %q:\n%s", code, errOut, want, out)
	}
	js, _, _ := runCLI(t, "volume", "show", "v1", "--json", "--socket", sock)
	if !strings.Contains(js, `"export_refused":["c: exports refused: no DH-HMAC-CHAP"]`) {
		t.Errorf("volume show --json lacks export_refused:\n%s", js)
	}
}

// volume create --journal posts the parsed size (the --chunk parser's
// syntax) and refuses a size that does not parse with exit code 2.
func TestVolumeCreateJournal(t *testing.T) {
	var got api.CreateRequest
	sock := serveMux(t, func(mux *http.ServeMux) {
		mux.HandleFunc("POST /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
			json.NewDecoder(r.Body).Decode(&got)
			json.NewEncoder(w).Encode(api.Volume{Name: got.Name})
		})
	})
	if _, errOut, code := runCLI(t, "volume", "create", "v1", "--data", "4", "--parity", "2", "--journal", "8M", "--socket", sock); code != 0 {
		t.Fatal(errOut)
	}
	if got.JournalBytes != 8<<20 || got.K != 4 || got.M != 2 {
		t.Errorf("posted %+v, want journal 8 MiB", got)
	}
	got = api.CreateRequest{}
	if _, errOut, code := runCLI(t, "volume", "create", "v1", "--data", "4", "--parity", "2", "--journal", "lots", "--socket", sock); code != 2 || !strings.Contains(errOut, "--journal") {
		t.Errorf("--journal lots: exit %d, %q; want 2 naming --journal", code, errOut)
	}
	if got.Name != "" {
		t.Errorf("--journal lots posted %+v", got)
	}
}
