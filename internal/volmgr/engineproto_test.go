package volmgr

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fabraid/fabraid/engine"
)

// protoEngine is an engine double: it answers Status and records the
// other calls.
type protoEngine struct {
	mu    sync.Mutex
	calls []string
	fails []engineReq
}

func (f *protoEngine) record(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }
func (f *protoEngine) Status() (EngineStatus, error) {
	return EngineStatus{Engine: engine.Status{Name: "v"}, PID: 42, UblkPath: "/dev/ublkb3"}, nil
}
func (f *protoEngine) Fail(slot int, force bool) error {
	f.mu.Lock()
	f.fails = append(f.fails, engineReq{Slot: slot, Force: force})
	f.mu.Unlock()
	return nil
}
func (f *protoEngine) ReAdd(int, string, int64) error   { f.record("readd"); return nil }
func (f *protoEngine) Replace(int, string, int64) error { f.record("replace"); return nil }
func (f *protoEngine) Rebuild(int64) error              { f.record("rebuild"); return nil }
func (f *protoEngine) Scrub(bool, int64) error          { f.record("scrub"); return nil }
func (f *protoEngine) Flush() error                     { f.record("flush"); return nil }
func (f *protoEngine) Freeze() error                    { f.record("freeze"); return nil }
func (f *protoEngine) Thaw(uint64) error                { f.record("thaw"); return nil }
func (f *protoEngine) HandOff() error                   { f.record("handoff"); return nil }
func (f *protoEngine) Stop() error                      { f.record("stop"); return nil }
func (f *protoEngine) Removed(int) error                { f.record("removed"); return nil }

// serveSocket serves h on a unix socket and returns its path and the
// request paths it saw.
func serveSocket(t *testing.T, h http.Handler) (string, func() []string) {
	t.Helper()
	return serveSocketAt(t, filepath.Join(t.TempDir(), "e.sock"), h)
}

func serveSocketAt(t *testing.T, sock string, h http.Handler) (string, func() []string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		h.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
}

// versionDouble is an engine of another version: it reports ev and
// answers every other request with an empty status (which a daemon would
// misread as an engine without members).
func versionDouble(ev EngineVersion) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"protocol":` + itoa(ev.Protocol) + `,"min_protocol":` + itoa(ev.MinProtocol) +
			`,"version":"` + ev.Version + `","pid":` + itoa(ev.PID) + `,"features":["x"]}`))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"pid":7,"new_field":{"x":1}}`)) })
	return mux
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestEngineProtocolCurrent(t *testing.T) {
	f := &protoEngine{}
	sock, seen := serveSocket(t, engineMux(f, "v1.2.3", func() {}, func() {}))
	c := newChild(sock)
	st, err := c.Status()
	if err != nil || st.PID != 42 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if err := c.Fail(2, true); err != nil {
		t.Fatal(err)
	}
	if want := []engineReq{{Slot: 2, Force: true}}; !slices.Equal(f.fails, want) {
		t.Fatalf("engine got fails %+v, want %+v", f.fails, want)
	}
	want := []string{"GET /v1/version", "GET /v1/status", "POST /v1/fail"}
	if got := seen(); !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q (one handshake, then /v1/ paths)", got, want)
	}
}

// An engine from before versioning (no /v1/version) is spoken to with
// its unversioned paths; a daemon from before versioning still reaches a
// current engine (downgrade).
func TestEngineProtocolUnversionedPeers(t *testing.T) {
	legacy := http.NewServeMux()
	legacy.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"pid":9}`)) })
	sock, seen := serveSocket(t, legacy)
	st, err := newChild(sock).Status()
	if err != nil || st.PID != 9 {
		t.Fatalf("status of a legacy engine: %+v, %v", st, err)
	}
	if got, want := seen(), []string{"GET /v1/version", "GET /status"}; !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q", got, want)
	}

	f := &protoEngine{}
	sock, _ = serveSocket(t, engineMux(f, "v", func() {}, func() {}))
	uc := newChildProto(sock, protoRange{0, 0}, nil).uc
	var old EngineStatus
	if err := uc.Do("GET", "/status", nil, &old); err != nil || old.PID != 42 {
		t.Fatalf("unversioned status from a current engine: %+v, %v", old, err)
	}
	if err := uc.Do("POST", "/fail", engineReq{Slot: 1}, nil); err != nil || len(f.fails) != 1 {
		t.Fatalf("unversioned fail: %v, %+v", err, f.fails)
	}
}

// An engine older than the daemon's oldest protocol gets nothing but the
// version request, and the error says how to restart it.
func TestEngineProtocolEngineTooOld(t *testing.T) {
	sock, seen := serveSocket(t, versionDouble(EngineVersion{Protocol: 1, MinProtocol: 1, Version: "v0.9", PID: 5}))
	c := newChildProto(sock, protoRange{2, 3}, func(EngineVersion) string { return "`systemctl restart fabraid-engine@v`" })
	_, err := c.Status()
	if !errors.Is(err, ErrEngineProtocol) {
		t.Fatalf("status of a too old engine: %v, want ErrEngineProtocol", err)
	}
	want := "engine protocol 1 (binary v0.9) is older than this fabraidd supports (2..3): restart the engine with `systemctl restart fabraid-engine@v` — a ublk recovery, consumers pause"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	if err := c.Fail(0, false); !errors.Is(err, ErrEngineProtocol) {
		t.Fatalf("fail on a too old engine: %v", err)
	}
	if got := seen(); slices.ContainsFunc(got, func(r string) bool { return r != "GET /v1/version" }) {
		t.Fatalf("the daemon sent %q to an engine it cannot speak to", got)
	}
}

// An engine whose oldest protocol is newer than the daemon's newest gets
// nothing but the version request; the starters do not start a second
// engine next to it.
func TestEngineProtocolEngineTooNew(t *testing.T) {
	ev := EngineVersion{Protocol: EngineProtocol + 4, MinProtocol: EngineProtocol + 3, Version: "v9", PID: 5}
	sock, seen := serveSocket(t, versionDouble(ev))
	_, err := newChild(sock).Status()
	if !errors.Is(err, ErrEngineProtocol) || !strings.Contains(err.Error(), "is newer than this fabraidd understands") ||
		!strings.Contains(err.Error(), "`kill 5`") {
		t.Fatalf("status of a too new engine: %v", err)
	}
	dir := t.TempDir()
	u := [16]byte{1}
	_, seen2 := serveSocketAt(t, EngineSocket(dir, u), versionDouble(ev))
	start := ChildStarter("/nonexistent/fabraidd", dir, slog.New(slog.DiscardHandler), nil)
	if _, err := start(t.Context(), EngineSpec{UUID: u, Name: "v"}); !errors.Is(err, ErrEngineProtocol) {
		t.Fatalf("starter next to a too new engine: %v, want ErrEngineProtocol (and no second engine)", err)
	}
	for _, got := range [][]string{seen(), seen2()} {
		if slices.ContainsFunc(got, func(r string) bool { return r != "GET /v1/version" }) {
			t.Fatalf("the daemon sent %q to an engine it cannot speak to", got)
		}
	}
}

// Unknown JSON fields are ignored both ways: in a request to the engine
// and in its answer.
func TestEngineProtocolUnknownFields(t *testing.T) {
	f := &protoEngine{}
	sock, _ := serveSocket(t, engineMux(f, "v", func() {}, func() {}))
	uc := newChild(sock).uc
	if err := uc.Do("POST", "/v1/fail", map[string]any{"slot": 1, "force": true, "future": map[string]int{"x": 1}}, nil); err != nil {
		t.Fatalf("request with an unknown field: %v", err)
	}
	if want := []engineReq{{Slot: 1, Force: true}}; !slices.Equal(f.fails, want) {
		t.Fatalf("engine got %+v, want %+v", f.fails, want)
	}
	sock, _ = serveSocket(t, versionDouble(EngineVersion{Protocol: EngineProtocol, MinProtocol: EngineProtocolMin}))
	st, err := newChild(sock).Status()
	if err != nil || st.PID != 7 {
		t.Fatalf("answer with unknown fields: %+v, %v", st, err)
	}
}

// volume show of a volume whose running engine speaks no protocol of
// this daemon says so and how to restart it; the reconcile starts no
// second engine.
func TestEngineProtocolErrorInVolumeShow(t *testing.T) {
	dir := t.TempDir()
	u := [16]byte{3}
	_, seen := serveSocketAt(t, EngineSocket(dir, u), versionDouble(EngineVersion{Protocol: 9, MinProtocol: 9, Version: "v9", PID: 77}))
	m := lockManager(t, ChildStarter("/nonexistent/fabraidd", dir, slog.New(slog.DiscardHandler), nil))
	errs := m.startEngines(t.Context(), map[[16]byte]*onDisk{u: completeVolume(u, "c")}, nil)
	if len(errs) != 1 || !errors.Is(errs[0], ErrEngineProtocol) {
		t.Fatalf("reconcile errors %v, want one ErrEngineProtocol", errs)
	}
	in, err := m.Info("c")
	if err != nil {
		t.Fatal(err)
	}
	if in.State != "stopped" || !strings.Contains(in.Error, "engine protocol 9..9 (binary v9) is newer than this fabraidd understands") ||
		!strings.Contains(in.Error, "`kill 77`") {
		t.Fatalf("volume show: state %q, error %q", in.State, in.Error)
	}
	if got := seen(); slices.ContainsFunc(got, func(r string) bool { return r != "GET /v1/version" }) {
		t.Fatalf("the daemon sent %q to an engine it cannot speak to", got)
	}
}
