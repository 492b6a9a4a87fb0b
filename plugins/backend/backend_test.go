package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// The test binary doubles as the plugin: with testPluginEnv set, TestMain
// serves a memory backend (or misbehaves, by mode) instead of testing.
const testPluginEnv = "FABRAID_BACKEND_TEST_PLUGIN"

// testMarkerEnv names the file the "block-once" List creates.
const testMarkerEnv = "FABRAID_BACKEND_TEST_MARKER"

const testSecret = "DHHC-1:00:c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1iZS1sb2dnZWQhIQ==:"

func TestMain(m *testing.M) {
	switch os.Getenv(testPluginEnv) {
	case "":
		os.Exit(m.Run())
	case "memory":
		log := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Debug})
		Serve(&memory{log: log, exports: map[string]Export{}}, log)
	case "version2":
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  Handshake,
			VersionedPlugins: map[int]plugin.PluginSet{2: {pluginName: &GRPCPlugin{Impl: &memory{}}}},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	case "cookie":
		hs := Handshake
		hs.MagicCookieValue = "someone-else"
		plugin.Serve(&plugin.ServeConfig{HandshakeConfig: hs, VersionedPlugins: versionedPlugins(&memory{}), GRPCServer: plugin.DefaultGRPCServer})
	}
	os.Exit(0)
}

// memory is a Backend in memory whose inputs select its errors.
type memory struct {
	log     hclog.Logger
	mu      sync.Mutex
	exports map[string]Export
}

func (b *memory) Features(context.Context) (Features, error) {
	return Features{Name: "memory", Auth: true, ANA: true, Transports: []string{"tcp"}}, nil
}

func (b *memory) Apply(_ context.Context, req ApplyRequest) (ApplyResult, error) {
	// Logging the whole request is what a careless plugin does: the
	// Secret fields must still print redacted.
	b.log.Info("apply", "request", fmt.Sprintf("%+v", req), "first", req)
	b.mu.Lock()
	defer b.mu.Unlock()
	var res ApplyResult
	for _, e := range req.Exports {
		if !strings.HasPrefix(e.NQN, req.Scope) {
			return res, fmt.Errorf("export %s outside scope %s: %w", e.NQN, req.Scope, ErrInvalid)
		}
		if strings.HasSuffix(e.NQN, ":conflict") {
			return res, fmt.Errorf("export %s: serial fixed once a host connected: %w", e.NQN, ErrConflict)
		}
		if fmt.Sprint(b.exports[e.NQN]) != fmt.Sprint(e) {
			b.exports[e.NQN] = e
			res.Changed = true
			res.Ops = append(res.Ops, "set "+e.NQN)
		}
	}
	return res, nil
}

func (b *memory) List(_ context.Context, scope string) ([]Export, error) {
	switch scope {
	case "transient":
		return nil, fmt.Errorf("target restarting: %w", ErrTransient)
	case "block":
		b.log.Info("blocking list")
		select {}
	case "block-once":
		// The first process to get here blocks (and is killed); the
		// marker file makes the restarted one answer.
		marker := os.Getenv(testMarkerEnv)
		if _, err := os.Stat(marker); err != nil {
			if err := os.WriteFile(marker, nil, 0o600); err != nil {
				return nil, err
			}
			b.log.Info("blocking list")
			select {}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Export
	for _, e := range b.exports {
		if strings.HasPrefix(e.NQN, scope) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (b *memory) SetANAState(_ context.Context, req ANARequest) error {
	if req.State == "change" {
		return fmt.Errorf("ANA state %q: %w", req.State, ErrNotSupported)
	}
	return nil
}

func (b *memory) Remove(_ context.Context, nqn string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.exports[nqn]; !ok {
		return fmt.Errorf("export %s: %w", nqn, ErrNotFound)
	}
	delete(b.exports, nqn)
	return nil
}

// logSink collects the host logger's output (go-plugin forwards the
// plugin's stderr into it) and signals when a line contains want.
type logSink struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	hit  chan struct{}
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if s.want != "" && strings.Contains(s.buf.String(), s.want) {
		s.want = ""
		close(s.hit)
	}
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func startRunner(t *testing.T, mode string, sink *logSink) *Runner {
	t.Helper()
	t.Setenv(testPluginEnv, mode)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunnerConfig{Path: exe, Args: []string{"-test.run=^$"}}
	if sink != nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: sink, Level: hclog.Debug})
	}
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

const scope = "nqn.2026-11.io.fabraid:vol:"

func sample(name string) Export {
	return Export{
		NQN:    scope + name,
		Serial: "fabraid0001",
		Namespaces: []Namespace{{NSID: 1, Device: "/dev/ublkb0",
			UUID: "3b1f0e5c-8a5d-4c1e-9a0b-1c2d3e4f5a6b", NGUID: "3b1f0e5c8a5d4c1e9a0b1c2d3e4f5a6b"}},
		Listeners: []Listener{{Transport: "tcp", Address: "127.0.0.1", ServiceID: "4420", ANAStates: map[uint32]string{1: "optimized"}}},
		Hosts:     []Host{{NQN: "nqn.2014-08.org.nvmexpress:uuid:2b7a6f4e-3c1d-4e8a-9f55-0123456789ab", DHCHAPKey: testSecret}},
	}
}

// TestWireRoundTripAndTypedErrors runs every method through a real plugin
// process and checks each typed error arrives as the same sentinel.
func TestWireRoundTripAndTypedErrors(t *testing.T) {
	sink := &logSink{}
	r := startRunner(t, "memory", sink)
	ctx := context.Background()
	be, err := r.Backend()
	if err != nil {
		t.Fatal(err)
	}
	f, err := be.Features(ctx)
	if err != nil || f.Name != "memory" || !f.Auth {
		t.Fatalf("Features = %+v, %v", f, err)
	}
	req := ApplyRequest{Scope: scope, Exports: []Export{sample("a")}}
	res, err := be.Apply(ctx, req)
	if err != nil || !res.Changed {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if res, err := be.Apply(ctx, req); err != nil || res.Changed {
		t.Fatalf("re-Apply = %+v, %v; want no change", res, err)
	}
	got, err := be.List(ctx, scope)
	if err != nil || len(got) != 1 || got[0].Hosts[0].DHCHAPKey.Reveal() != testSecret || got[0].Listeners[0].ANAStates[1] != "optimized" {
		t.Fatalf("List = %+v, %v", got, err)
	}
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"not found", func() error { return be.Remove(ctx, scope+"nosuch") }, ErrNotFound},
		{"conflict", func() error {
			_, err := be.Apply(ctx, ApplyRequest{Scope: scope, Exports: []Export{sample("conflict")}})
			return err
		}, ErrConflict},
		{"not supported", func() error { return be.SetANAState(ctx, ANARequest{NQN: scope + "a", State: "change"}) }, ErrNotSupported},
		{"transient", func() error { _, err := be.List(ctx, "transient"); return err }, ErrTransient},
		{"invalid", func() error {
			_, err := be.Apply(ctx, ApplyRequest{Scope: scope, Exports: []Export{{NQN: "nqn.2016-06.io.spdk:x"}}})
			return err
		}, ErrInvalid},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v does not wrap %v", c.name, err, c.want)
		}
		for _, other := range []error{ErrNotFound, ErrConflict, ErrNotSupported, ErrTransient, ErrInvalid} {
			if other != c.want && errors.Is(err, other) {
				t.Errorf("%s: error %v also wraps %v", c.name, err, other)
			}
		}
	}
	if err := be.Remove(ctx, scope+"a"); err != nil {
		t.Fatal(err)
	}
	r.Close() // flushes the forwarded stderr
	logs := sink.String()
	if !strings.Contains(logs, "apply") || !strings.Contains(logs, "<secret>") {
		t.Fatalf("plugin log lines not forwarded as expected:\n%s", logs)
	}
	if strings.Contains(logs, testSecret) || strings.Contains(logs, "c2VjcmV0") {
		t.Fatalf("a DH-HMAC-CHAP key reached the host log:\n%s", logs)
	}
}

func TestSecretRedactedInEveryVerb(t *testing.T) {
	s := Secret(testSecret)
	h := Host{NQN: "nqn.x", DHCHAPKey: s}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x", s, h, h, s, s, s)} {
		if strings.Contains(out, "c2VjcmV0") {
			t.Fatalf("secret printed: %s", out)
		}
	}
	if Secret("").String() != "" || s.Reveal() != testSecret {
		t.Fatal("Reveal or empty String wrong")
	}
}

// TestKilledPluginIsTransientAndRestarted kills -9 the plugin while a call
// is inside it: the call fails with ErrTransient, the next call runs on a
// new process.
func TestKilledPluginIsTransientAndRestarted(t *testing.T) {
	sink := &logSink{want: "blocking list", hit: make(chan struct{})}
	r := startRunner(t, "memory", sink)
	if _, err := r.Backend(); err != nil {
		t.Fatal(err)
	}
	pid := r.Pid()
	if pid == 0 {
		t.Fatal("no plugin pid")
	}
	errc := make(chan error, 1)
	go func() {
		errc <- r.Do(func(b Backend) error { _, err := b.List(context.Background(), "block"); return err })
	}()
	<-sink.hit // the plugin is inside List
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrTransient) {
		t.Fatalf("call into a killed plugin: %v, want ErrTransient", err)
	}
	err := r.Do(func(b Backend) error { _, err := b.Features(context.Background()); return err })
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if r.Starts() != 2 || r.Pid() == pid || r.Pid() == 0 {
		t.Fatalf("starts %d, pid %d (old %d): want a second process", r.Starts(), r.Pid(), pid)
	}
}

// TestRunnerRetriesOnRestartedPlugin: a plugin killed -9 inside a call
// made through the Runner's Backend methods is restarted and the call is
// run again on the new process, so the caller sees no error.
func TestRunnerRetriesOnRestartedPlugin(t *testing.T) {
	t.Setenv(testMarkerEnv, t.TempDir()+"/blocked")
	sink := &logSink{want: "blocking list", hit: make(chan struct{})}
	r := startRunner(t, "memory", sink)
	if _, err := r.Apply(context.Background(), ApplyRequest{Scope: scope, Exports: []Export{sample("a")}}); err != nil {
		t.Fatal(err)
	}
	pid := r.Pid()
	errc := make(chan error, 1)
	go func() { _, err := r.List(context.Background(), "block-once"); errc <- err }()
	<-sink.hit // the first plugin is inside List
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("List through the Runner across a plugin kill: %v", err)
	}
	if r.Starts() != 2 || r.Pid() == pid {
		t.Fatalf("starts %d, pid %d (old %d): want a second process", r.Starts(), r.Pid(), pid)
	}
}

func TestWrongVersionOrCookieRefused(t *testing.T) {
	for mode, want := range map[string]string{"version2": "protocol 1", "cookie": "handshake"} {
		r := startRunner(t, mode, nil)
		_, err := r.Backend()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one mentioning %q", mode, err, want)
		}
	}
}

func TestCheckBinaryRefusesWritableOrSymlink(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/fabraid-plugin-x"
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(p); err != nil {
		t.Fatalf("0755 own file refused: %v", err)
	}
	if err := os.Chmod(p, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(p); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("group-writable accepted: %v", err)
	}
	if err := os.Symlink(p, dir+"/link"); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(dir + "/link"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("symlink accepted: %v", err)
	}
	// A directory anybody in the group can write to: the binary could be
	// replaced by a rename.
	sub := dir + "/plugins"
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	q := sub + "/fabraid-plugin-y"
	if err := os.WriteFile(q, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(q); err != nil {
		t.Fatalf("plugin in a 0755 directory refused: %v", err)
	}
	if err := os.Chmod(sub, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(q); err == nil || !strings.Contains(err.Error(), "directory "+sub) {
		t.Fatalf("plugin in a group-writable directory: %v, want a refusal naming the directory", err)
	}
	if err := CheckBinary("fabraid-plugin-y"); err == nil {
		t.Fatal("relative path accepted")
	}
}

// TestClosedRunnerStartsNothing: a call that comes after Close (a
// reconcile still running while its daemon stops) returns ErrClosed and
// starts no plugin process that nobody would stop.
func TestClosedRunnerStartsNothing(t *testing.T) {
	r := startRunner(t, "memory", nil)
	if _, err := r.Features(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := r.List(context.Background(), scope); !errors.Is(err, ErrClosed) {
		t.Fatalf("List after Close: %v, want ErrClosed", err)
	}
	if r.Starts() != 1 || r.Pid() != 0 {
		t.Fatalf("after Close: starts %d, pid %d; want 1 start and no process", r.Starts(), r.Pid())
	}
}
