package spdk

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/plugins/backend"
)

const (
	scope = "nqn.2026-11.io.fabraid:vol:"
	host1 = "nqn.2014-08.org.nvmexpress:uuid:2b7a6f4e-3c1d-4e8a-9f55-0123456789ab"
	host2 = "nqn.2014-08.org.nvmexpress:uuid:7c0c1a2b-0000-4e8a-9f55-0123456789ab"
)

func device(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "vol0.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func desired(dev string) backend.Export {
	return backend.Export{
		NQN: scope + "v0", Serial: "fabraid0001", Model: "fabraid volume",
		Namespaces: []backend.Namespace{{NSID: 1, Device: dev, UUID: "3b1f0e5c-8a5d-4c1e-9a0b-1c2d3e4f5a6b", NGUID: "3b1f0e5c8a5d4c1e9a0b1c2d3e4f5a6b"}},
		Listeners:  []backend.Listener{{Transport: "tcp", Address: "127.0.0.1", ServiceID: "4420", ANAStates: map[uint32]string{1: "optimized"}}},
		Hosts:      []backend.Host{{NQN: host1}},
	}
}

// TestApplyAgainstRecordedTarget: create, re-apply (nothing sent that
// changes state), change, remove; every request is one the recorded
// target answered (the double fails the test otherwise).
func TestApplyAgainstRecordedTarget(t *testing.T) {
	d := newDouble(t)
	b := New(d.sock)
	ctx := context.Background()
	dev := device(t)
	want := desired(dev)

	res, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{want}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	wantOps := []string{"create transport TCP", "create subsystem " + want.NQN, "create bdev", "add namespace 1", "allow host " + host1, "add listener 127.0.0.1:4420", "set ANA group 1"}
	if len(res.Ops) != len(wantOps) {
		t.Fatalf("create ops %q, want %q", res.Ops, wantOps)
	}
	for i, w := range wantOps {
		if !strings.HasPrefix(res.Ops[i], w) {
			t.Fatalf("create op %d = %q, want %q...", i, res.Ops[i], w)
		}
	}
	if d.sub(want.NQN).AnyHost || !d.sub(want.NQN).ANA {
		t.Fatal("subsystem created with allow_any_host or without ana_reporting")
	}

	before := d.mutations
	res, err = b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{want}})
	if err != nil || res.Changed || d.mutations != before {
		t.Fatalf("re-apply: %+v, %v, %d state-changing requests; want none", res, err, d.mutations-before)
	}

	got, err := b.List(ctx, scope)
	if err != nil || len(got) != 1 {
		t.Fatalf("List = %+v, %v", got, err)
	}
	g := got[0]
	if g.Serial != want.Serial || g.Namespaces[0].UUID != want.Namespaces[0].UUID || g.Namespaces[0].NGUID != want.Namespaces[0].NGUID || g.Listeners[0].ANAStates[1] != "optimized" || g.Hosts[0].NQN != host1 {
		t.Fatalf("List = %+v", g)
	}

	// Change: other host, group 1 inaccessible, a second listener port.
	want.Hosts = []backend.Host{{NQN: host2}}
	want.Listeners = []backend.Listener{{Transport: "tcp", Address: "127.0.0.1", ServiceID: "4421", ANAStates: map[uint32]string{1: "inaccessible"}}}
	res, err = b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{want}})
	if err != nil {
		t.Fatalf("change: %v", err)
	}
	if len(res.Ops) != 5 {
		t.Fatalf("change ops %q", res.Ops)
	}
	got, _ = b.List(ctx, scope)
	if got[0].Hosts[0].NQN != host2 || got[0].Listeners[0].ServiceID != "4421" || got[0].Listeners[0].ANAStates[1] != "inaccessible" || len(got[0].Listeners) != 1 {
		t.Fatalf("after change List = %+v", got[0])
	}
	if err := b.SetANAState(ctx, backend.ANARequest{NQN: want.NQN, Listener: want.Listeners[0], State: "non-optimized"}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetANAState(ctx, backend.ANARequest{NQN: want.NQN, Listener: backend.Listener{Transport: "tcp", Address: "127.0.0.1", ServiceID: "4999"}, State: "optimized"}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("ANA on a missing listener: %v, want ErrNotFound", err)
	}

	// A changed device is a new bdev in namespace 1, the old one deleted.
	want.Namespaces[0].Device = device(t)
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{want}}); err != nil {
		t.Fatal(err)
	}
	if len(d.bdevs) != 1 || d.bdevs[bdevName(want.NQN, 1, want.Namespaces[0].Device)] == "" {
		t.Fatalf("bdevs after device change: %v", d.bdevs)
	}

	// A changed NGUID is a new namespace carrying it (SPDK cannot change
	// the NGUID of a namespace in place).
	want.Namespaces[0].NGUID = "5e0b1c2d3e4f5a6b3b1f0e5c8a5d4c1e"
	res, err = b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{want}})
	if err != nil || !slices.ContainsFunc(res.Ops, func(o string) bool { return strings.HasPrefix(o, "add namespace 1") }) {
		t.Fatalf("NGUID change: %q, %v", res.Ops, err)
	}
	if got, _ = b.List(ctx, scope); got[0].Namespaces[0].NGUID != want.Namespaces[0].NGUID {
		t.Fatalf("after NGUID change List = %+v", got[0].Namespaces)
	}
	bad := want
	bad.Namespaces = []backend.Namespace{{NSID: 1, Device: want.Namespaces[0].Device, NGUID: "3b1f0e5c-8a5d-4c1e-9a0b-1c2d3e4f5a6b"}}
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{bad}}); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("dashed NGUID: %v, want ErrInvalid", err)
	}

	// Remove, and an empty desired state of the scope leaves foreign
	// subsystems alone.
	d.subs = append(d.subs, &dsub{NQN: "nqn.2016-06.io.spdk:foreign", States: map[string]map[uint32]string{}})
	if err := b.Remove(ctx, want.NQN); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, want.NQN); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("second Remove: %v, want ErrNotFound", err)
	}
	if res, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope}); err != nil || res.Changed {
		t.Fatalf("empty apply: %+v %v", res, err)
	}
	if len(d.bdevs) != 0 || d.sub("nqn.2016-06.io.spdk:foreign") == nil {
		t.Fatalf("after remove: bdevs %v, foreign kept %v", d.bdevs, d.sub("nqn.2016-06.io.spdk:foreign") != nil)
	}
}

// TestApplyRefusals: errors the target sends reach the caller typed.
func TestApplyRefusals(t *testing.T) {
	d := newDouble(t)
	b := New(d.sock)
	ctx := context.Background()
	e := desired(filepath.Join(t.TempDir(), "missing.img"))
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{e}}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("missing device: %v, want ErrNotFound", err)
	}
	e = desired(device(t))
	e.Listeners[0].Address = "192.0.2.1"
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{e}}); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("address not on this host: %v, want ErrInvalid", err)
	}
	e = desired(device(t))
	e.Hosts[0].DHCHAPKey = "DHHC-1:00:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0:"
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{e}}); !errors.Is(err, backend.ErrNotSupported) || strings.Contains(err.Error(), "c2Vj") {
		t.Fatalf("DH-HMAC-CHAP key: %v, want ErrNotSupported without the key", err)
	}
	e = desired(device(t))
	e.CntlIDMin, e.CntlIDMax = 1000, 1998
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{e}}); !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), "controller id range") {
		t.Fatalf("controller id range: %v, want ErrNotSupported naming it", err)
	}
	e = desired(device(t))
	e.Serial = "changed"
	if _, err := b.Apply(ctx, backend.ApplyRequest{Scope: scope, Exports: []backend.Export{e}}); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("changed serial of an existing subsystem: %v, want ErrConflict", err)
	}
	os.Remove(d.sock)
	if _, err := b.List(ctx, scope); err == nil {
		b.RPC.Close()
	}
	b2 := New(d.sock)
	if _, err := b2.Features(ctx); !errors.Is(err, backend.ErrTransient) {
		t.Fatalf("target socket gone: %v, want ErrTransient", err)
	}
}

// TestRecordedErrorsMapped maps every error response in the transcript
// to its typed error.
func TestRecordedErrorsMapped(t *testing.T) {
	tr := loadTranscript(t)
	want := map[string]error{
		"expect-error: duplicate TCP transport":                               backend.ErrConflict,
		"expect-error: RDMA transport not compiled in":                        backend.ErrInvalid,
		"expect-error: unknown trtype string":                                 backend.ErrInvalid,
		"bdev_malloc_create without name (auto-named)":                        backend.ErrConflict,
		"expect-error: duplicate bdev name":                                   backend.ErrConflict,
		"expect-error: bad block_size":                                        backend.ErrInvalid,
		"expect-error: bdev_aio_create on missing file":                       backend.ErrNotFound,
		"expect-error: bdev_get_bdevs unknown name":                           backend.ErrNotFound,
		"expect-error: duplicate NQN":                                         backend.ErrConflict,
		"expect-error: bad NQN syntax (no nqn. prefix)":                       backend.ErrConflict,
		"expect-error: NQN too long (>223 bytes)":                             backend.ErrConflict,
		"expect-error: serial_number too long (>20)":                          backend.ErrInvalid,
		"expect-error: missing nqn param":                                     backend.ErrInvalid,
		"expect-error: unknown param key":                                     backend.ErrInvalid,
		"expect-error: nqn wrong JSON type":                                   backend.ErrInvalid,
		"expect-error: unknown bdev":                                          backend.ErrInvalid,
		"expect-error: same bdev already claimed by ns":                       backend.ErrInvalid,
		"expect-error: nsid already in use":                                   backend.ErrInvalid,
		"expect-error: unknown subsystem NQN":                                 backend.ErrInvalid,
		"expect-error: duplicate listener":                                    backend.ErrInvalid,
		"expect-error: listener on transport that does not exist":             backend.ErrInvalid,
		"expect-error: listener on address not on this host":                  backend.ErrInvalid,
		"expect-error: bad adrfam":                                            backend.ErrInvalid,
		"listener without trsvcid/adrfam":                                     backend.ErrInvalid,
		"duplicate add_host":                                                  backend.ErrConflict,
		"add_host with bad host NQN":                                          backend.ErrConflict,
		"expect-error: add_host to unknown subsystem":                         backend.ErrInvalid,
		"expect-error: nvmf_get_subsystems unknown nqn":                       backend.ErrNotFound,
		"set_ana_state on subsystem WITHOUT ana_reporting":                    backend.ErrNotSupported,
		"expect-error: bad ana_state string":                                  backend.ErrInvalid,
		"expect-error: set_ana_state on listener the subsystem does not have": backend.ErrNotSupported,
		"expect-error: startup-only RPC at runtime":                           backend.ErrNotSupported,
		"expect-error: unknown method":                                        backend.ErrNotSupported,
		"params as JSON array (positional)":                                   backend.ErrInvalid,
		"expect-error: wrong jsonrpc version":                                 backend.ErrInvalid,
		"remove_host again (not present)":                                     backend.ErrNotFound,
		"expect-error: remove_ns again":                                       backend.ErrInvalid,
		"remove_listener again":                                               backend.ErrInvalid,
		"expect-error: delete already-deleted subsystem":                      backend.ErrInvalid,
		"expect-error: delete missing malloc bdev":                            backend.ErrNotFound,
	}
	seen := 0
	for _, e := range tr.ex {
		if !strings.HasPrefix(e.Outcome, "error") {
			continue
		}
		seen++
		kind, ok := want[e.Note]
		if !ok {
			t.Errorf("recorded error %q (seq %d) has no expected mapping", e.Note, e.Seq)
			continue
		}
		var r struct {
			Error struct {
				Code    int
				Message string
			}
		}
		if err := json.Unmarshal(e.Response, &r); err != nil {
			t.Fatal(err)
		}
		rq, _ := e.Request.(map[string]any)
		method, _ := rq["method"].(string)
		err := classify(&RPCError{Method: method, Code: r.Error.Code, Message: r.Error.Message})
		if !errors.Is(err, kind) {
			t.Errorf("%q: %v, want %v", e.Note, err, kind)
		}
	}
	if seen != len(want) {
		t.Errorf("%d recorded errors, %d expected mappings", seen, len(want))
	}
}
