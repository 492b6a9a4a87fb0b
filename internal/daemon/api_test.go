package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func testDaemon(t *testing.T) *Daemon {
	dir := t.TempDir()
	c := config.Default()
	c.NodeName = "n1"
	c.StateDir = filepath.Join(dir, "state")
	c.APISocket = filepath.Join(dir, "run/api.sock")
	d, err := New(Options{Config: c, Version: "test", HostDir: filepath.Join(dir, "nvme"), EngineBinary: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAPI(t *testing.T) {
	d := testDaemon(t)
	h := d.Handler()
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"GET", "/v1/node", "", 200, `"name":"n1"`},
		{"GET", "/v1/volumes", "", 200, `[]`},
		{"GET", "/v1/volumes/nope", "", 404, `no such volume`},
		{"DELETE", "/v1/volumes/nope", "", 404, `no such volume`},
		{"POST", "/v1/volumes/nope/fail", `{"slot":1}`, 404, `no such volume`},
		{"POST", "/v1/volumes/nope/fail", `{`, 400, `bad request`},
		{"POST", "/v1/volumes/nope/re-add", `{"slot":1}`, 404, `no such volume`},
		{"POST", "/v1/volumes/nope/explode", `{}`, 400, `unknown operation`},
		{"POST", "/v1/volumes", `{"name":"v","k":1,"m":1}`, 400, `want --data >= 2`},
		{"POST", "/v1/volumes", `{"name":"bad name","k":2,"m":1}`, 400, `volume name`},
		{"POST", "/v1/volumes", `{"name":"v","k":2,"m":1}`, 400, `need 3 claimed, unused drives, have 0`},
		{"PUT", "/v1/volumes", ``, 405, ``},
	} {
		req := httptest.NewRequest(tc.method, tc.path, bytes.NewBufferString(tc.body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s %s %s: %d %s, want %d containing %q", tc.method, tc.path, tc.body, rec.Code, rec.Body, tc.code, tc.want)
		}
		if tc.code != 405 && rec.Code != 405 {
			var v any
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Errorf("%s %s: reply is not JSON: %s", tc.method, tc.path, rec.Body)
			}
		}
	}
	_ = http.StatusOK
}

// The API socket serves the daemon's profiles (it is root-only).
func TestAPIProfiles(t *testing.T) {
	h := testDaemon(t).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/goroutine?debug=1", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "goroutine profile") {
		t.Fatalf("GET /debug/pprof/goroutine: %d %.200s", rec.Code, rec.Body)
	}
}

func TestMetricsNoVolumes(t *testing.T) {
	d := testDaemon(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: d})
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Fatalf("metrics: %d %v", n, err)
	}
	d.errors.Add(2)
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP fabraid_reconcile_errors_total Reconcile runs that ended with an error.\n# TYPE fabraid_reconcile_errors_total counter\nfabraid_reconcile_errors_total 2\n")); err != nil {
		t.Fatal(err)
	}
}
