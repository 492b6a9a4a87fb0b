package spdk

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// exchange is one line of testdata/rpc-transcript.jsonl: how a real SPDK
// v26.05 nvmf_tgt answered one request.
type exchange struct {
	Seq         int             `json:"seq"`
	Note        string          `json:"note"`
	Outcome     string          `json:"outcome"`
	RawRequest  string          `json:"raw_request"`
	RawResponse *string         `json:"raw_response"`
	Request     any             `json:"request"` // an array for the batch exchange
	Response    json.RawMessage `json:"response"`
}

type transcript struct {
	ex []exchange
	// accepted: per method, every parameter path with its JSON type that
	// a request the target answered with a result carried.
	accepted map[string]map[string]bool
	noParams map[string]bool // methods answered with a result without params
}

func loadTranscript(t *testing.T) *transcript {
	t.Helper()
	f, err := os.Open("testdata/rpc-transcript.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := &transcript{accepted: map[string]map[string]bool{}, noParams: map[string]bool{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var e exchange
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		tr.ex = append(tr.ex, e)
		if e.Outcome != "result" || e.RawRequest == "" {
			continue
		}
		rq, _ := e.Request.(map[string]any)
		m, _ := rq["method"].(string)
		p, ok := rq["params"].(map[string]any)
		if !ok || len(p) == 0 {
			tr.noParams[m] = true
			continue
		}
		if tr.accepted[m] == nil {
			tr.accepted[m] = map[string]bool{}
		}
		for _, k := range paths("", p) {
			tr.accepted[m][k] = true
		}
	}
	// The one parameter taken from SPDK's documentation (doc/jsonrpc.md,
	// nvmf_subsystem_add_ns: "nguid", 16-byte NGUID as 32 hex digits)
	// instead of a recorded request: without it a volume exported from
	// two SPDK nodes would show hosts two NGUIDs and native multipath
	// would not join the paths. Nothing else is accepted unrecorded.
	tr.accepted["nvmf_subsystem_add_ns"]["namespace.nguid:string"] = true
	if len(tr.ex) != 119 {
		t.Fatalf("transcript has %d exchanges, want 119", len(tr.ex))
	}
	return tr
}

// paths lists "a.b:type" for every leaf of a JSON object.
func paths(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		switch v := v.(type) {
		case map[string]any:
			out = append(out, paths(prefix+k+".", v)...)
		default:
			out = append(out, fmt.Sprintf("%s%s:%T", prefix, k, v))
		}
	}
	return out
}

// byNote returns the recorded exchange with the note.
func (tr *transcript) byNote(t *testing.T, note string) exchange {
	for _, e := range tr.ex {
		if e.Note == note {
			return e
		}
	}
	t.Fatalf("no recorded exchange %q", note)
	return exchange{}
}

// recordedError returns the error object the target sent in exchange note.
func (tr *transcript) recordedError(t *testing.T, note string) json.RawMessage {
	var r struct{ Error json.RawMessage }
	if err := json.Unmarshal(tr.byNote(t, note).Response, &r); err != nil || r.Error == nil {
		t.Fatalf("exchange %q has no error: %v", note, err)
	}
	return r.Error
}

func (tr *transcript) recordedResult(t *testing.T, note string) json.RawMessage {
	var r struct{ Result json.RawMessage }
	if err := json.Unmarshal(tr.byNote(t, note).Response, &r); err != nil || r.Result == nil {
		t.Fatalf("exchange %q has no result: %v", note, err)
	}
	return r.Result
}

// double is a unix-socket SPDK stand-in. Every request must be one the
// real target answered: a method it listed and only parameters (names and
// JSON types) it accepted in a recorded request. Its answers are the
// recorded ones: results in the recorded shape, errors copied verbatim
// from the exchange recording that refusal. Anything else fails the test.
type double struct {
	t    *testing.T
	tr   *transcript
	sock string

	mu         sync.Mutex
	transport  bool
	bdevs      map[string]string // name -> file
	subs       []*dsub
	log        []string // methods received, in order
	mutations  int
	errorsSent []string
}

type dsub struct {
	NQN, Serial, Model string
	AnyHost, ANA       bool
	Hosts              []string
	NS                 []dns
	Listeners          []address
	States             map[string]map[uint32]string // listener key -> group -> state
}

type dns struct {
	NSID       uint32
	Bdev, UUID string
	NGUID      string
	ANAGroup   uint32
}

func newDouble(t *testing.T) *double {
	d := &double{t: t, tr: loadTranscript(t), sock: filepath.Join(t.TempDir(), "spdk.sock"), bdevs: map[string]string{}}
	l, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go d.serve(c)
		}
	}()
	return d
}

func (d *double) serve(c net.Conn) {
	defer c.Close()
	dec := json.NewDecoder(c)
	for {
		var req map[string]any
		if err := dec.Decode(&req); err != nil {
			return // SPDK closes on malformed JSON too
		}
		resp := d.answer(req)
		b, _ := json.Marshal(resp)
		if _, err := c.Write(append(b, '\n')); err != nil {
			return
		}
	}
}

type reply struct {
	Version string          `json:"jsonrpc"`
	ID      any             `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

func (d *double) answer(req map[string]any) reply {
	d.mu.Lock()
	defer d.mu.Unlock()
	method, _ := req["method"].(string)
	params, _ := req["params"].(map[string]any)
	d.log = append(d.log, method)
	r := reply{Version: "2.0", ID: req["id"]}
	if !d.known(method, params) {
		d.t.Errorf("request no recorded exchange covers: %v", req)
		r.Error = d.tr.recordedError(d.t, "expect-error: unknown method")
		return r
	}
	res, errNote := d.model(method, params)
	if errNote != "" {
		d.errorsSent = append(d.errorsSent, errNote)
		r.Error = d.tr.recordedError(d.t, errNote)
		if strings.HasPrefix(errNote, "expect-error: duplicate NQN") {
			r.Error = json.RawMessage(fmt.Sprintf(`{"code":-32603,"message":"Unable to create subsystem %s"}`, params["nqn"]))
		}
		return r
	}
	r.Result = res
	return r
}

// known: the method is in the recorded rpc_get_methods list and every
// parameter path is one a recorded successful request used.
func (d *double) known(method string, params map[string]any) bool {
	var methods []string
	_ = json.Unmarshal(d.tr.recordedResult(d.t, "rpc_get_methods current=true (full list)"), &methods)
	if !slices.Contains(methods, method) && method != "rpc_get_methods" {
		return false
	}
	if len(params) == 0 {
		return d.tr.noParams[method]
	}
	for _, p := range paths("", params) {
		if !d.tr.accepted[method][p] {
			d.t.Logf("%s: parameter %s never sent to the real target", method, p)
			return false
		}
	}
	return true
}

func (d *double) sub(nqn any) *dsub {
	for _, s := range d.subs {
		if s.NQN == nqn {
			return s
		}
	}
	return nil
}

func str(v any) string { s, _ := v.(string); return s }

func num(v any) uint32 { f, _ := v.(float64); return uint32(f) }

func lkey(a address) string {
	return strings.ToLower(a.Trtype + "|" + a.Adrfam + "|" + a.Traddr + "|" + a.Trsvcid)
}

func toAddr(v any) address {
	m, _ := v.(map[string]any)
	return address{Trtype: str(m["trtype"]), Adrfam: str(m["adrfam"]), Traddr: str(m["traddr"]), Trsvcid: str(m["trsvcid"])}
}

// model applies one request to the state; it returns the result or the
// note of the recorded exchange whose error the target sent for it.
func (d *double) model(method string, p map[string]any) (any, string) {
	t := d.t
	if !strings.HasPrefix(method, "nvmf_get") && !strings.HasPrefix(method, "bdev_get") && method != "rpc_get_methods" && method != "spdk_get_version" && method != "nvmf_subsystem_get_listeners" {
		d.mutations++
	}
	switch method {
	case "spdk_get_version":
		return d.tr.recordedResult(t, "spdk_get_version"), ""
	case "rpc_get_methods":
		return d.tr.recordedResult(t, "rpc_get_methods current=true (full list)"), ""
	case "nvmf_get_transports":
		if !d.transport {
			return d.tr.recordedResult(t, "nvmf_get_transports before any transport"), ""
		}
		return d.tr.recordedResult(t, "nvmf_get_transports after create"), ""
	case "nvmf_create_transport":
		if d.transport {
			return nil, "expect-error: duplicate TCP transport"
		}
		d.transport = true
		return true, ""
	case "bdev_get_bdevs":
		if _, ok := d.bdevs[str(p["name"])]; !ok {
			return nil, "expect-error: bdev_get_bdevs unknown name"
		}
		return []map[string]any{{"name": p["name"], "block_size": 4096}}, ""
	case "bdev_uring_create", "bdev_aio_create":
		name := str(p["name"])
		if _, ok := d.bdevs[name]; ok {
			return nil, "expect-error: duplicate bdev name"
		}
		if _, err := os.Stat(str(p["filename"])); err != nil {
			return nil, "expect-error: bdev_aio_create on missing file"
		}
		d.bdevs[name] = str(p["filename"])
		return name, ""
	case "bdev_uring_delete", "bdev_aio_delete":
		if _, ok := d.bdevs[str(p["name"])]; !ok {
			return nil, "expect-error: delete missing malloc bdev"
		}
		delete(d.bdevs, str(p["name"]))
		return true, ""
	case "nvmf_create_subsystem":
		if d.sub(p["nqn"]) != nil {
			return nil, "expect-error: duplicate NQN"
		}
		if len(str(p["serial_number"])) > 20 {
			return nil, "expect-error: serial_number too long (>20)"
		}
		s := &dsub{NQN: str(p["nqn"]), Serial: str(p["serial_number"]), Model: str(p["model_number"]), AnyHost: p["allow_any_host"] == true, ANA: p["ana_reporting"] == true, States: map[string]map[uint32]string{}}
		if s.Serial == "" {
			s.Serial = "00000000000000000000"
		}
		if s.Model == "" {
			s.Model = "SPDK bdev Controller"
		}
		d.subs = append(d.subs, s)
		return true, ""
	case "nvmf_delete_subsystem":
		s := d.sub(p["nqn"])
		if s == nil {
			return nil, "expect-error: delete already-deleted subsystem"
		}
		d.subs = slices.DeleteFunc(d.subs, func(x *dsub) bool { return x == s })
		return true, ""
	case "nvmf_get_subsystems":
		return d.subsystemsJSON(), ""
	}
	s := d.sub(p["nqn"])
	switch method {
	case "nvmf_subsystem_add_ns":
		ns, _ := p["namespace"].(map[string]any)
		if s == nil {
			return nil, "expect-error: unknown subsystem NQN"
		}
		bdev := str(ns["bdev_name"])
		if _, ok := d.bdevs[bdev]; !ok {
			return nil, "expect-error: unknown bdev"
		}
		for _, o := range d.subs {
			for _, n := range o.NS {
				if n.Bdev == bdev {
					return nil, "expect-error: same bdev already claimed by ns"
				}
			}
		}
		id := num(ns["nsid"])
		if slices.ContainsFunc(s.NS, func(n dns) bool { return n.NSID == id }) {
			return nil, "expect-error: nsid already in use"
		}
		if id == 0 {
			id = uint32(len(s.NS) + 1)
		}
		u := str(ns["uuid"])
		if u == "" {
			u = "463de09e-f5eb-4b58-ab5e-10af33c65995"
		}
		g := "C448BDC32CE94058A7C740311F2AFADF" // the recorded target's pick
		if v, ok := ns["nguid"]; ok {
			// SPDK decodes exactly 32 hex digits; anything else fails to
			// decode, answered like every decode failure.
			if b, err := hex.DecodeString(str(v)); err != nil || len(b) != 16 {
				return nil, "expect-error: unknown param key"
			}
			g = strings.ToUpper(str(v))
		}
		s.NS = append(s.NS, dns{NSID: id, Bdev: bdev, UUID: u, NGUID: g, ANAGroup: num(ns["anagrpid"])})
		return id, ""
	case "nvmf_subsystem_remove_ns":
		if s == nil || !slices.ContainsFunc(s.NS, func(n dns) bool { return n.NSID == num(p["nsid"]) }) {
			return nil, "expect-error: remove_ns again"
		}
		s.NS = slices.DeleteFunc(s.NS, func(n dns) bool { return n.NSID == num(p["nsid"]) })
		return true, ""
	case "nvmf_subsystem_add_listener":
		a := toAddr(p["listen_address"])
		if s == nil {
			return nil, "expect-error: unknown subsystem NQN"
		}
		if a.Traddr != "127.0.0.1" {
			return nil, "expect-error: listener on address not on this host"
		}
		if !strings.EqualFold(a.Trtype, "tcp") || !d.transport {
			return nil, "expect-error: listener on transport that does not exist"
		}
		if slices.ContainsFunc(s.Listeners, func(x address) bool { return lkey(x) == lkey(a) }) {
			return nil, "expect-error: duplicate listener"
		}
		s.Listeners = append(s.Listeners, address{Trtype: "TCP", Adrfam: "IPv4", Traddr: a.Traddr, Trsvcid: a.Trsvcid})
		return true, ""
	case "nvmf_subsystem_remove_listener":
		a := toAddr(p["listen_address"])
		if s == nil || !slices.ContainsFunc(s.Listeners, func(x address) bool { return lkey(x) == lkey(a) }) {
			return nil, "remove_listener again"
		}
		s.Listeners = slices.DeleteFunc(s.Listeners, func(x address) bool { return lkey(x) == lkey(a) })
		delete(s.States, lkey(a))
		return true, ""
	case "nvmf_subsystem_add_host":
		if s == nil {
			return nil, "expect-error: add_host to unknown subsystem"
		}
		if slices.Contains(s.Hosts, str(p["host"])) {
			return nil, "duplicate add_host"
		}
		s.Hosts = append(s.Hosts, str(p["host"]))
		return true, ""
	case "nvmf_subsystem_remove_host":
		if s == nil || !slices.Contains(s.Hosts, str(p["host"])) {
			return nil, "remove_host again (not present)"
		}
		s.Hosts = slices.DeleteFunc(s.Hosts, func(h string) bool { return h == str(p["host"]) })
		return true, ""
	case "nvmf_subsystem_allow_any_host":
		s.AnyHost = p["allow_any_host"] == true
		return true, ""
	case "nvmf_subsystem_listener_set_ana_state":
		a := toAddr(p["listen_address"])
		if s == nil || !s.ANA {
			return nil, "set_ana_state on subsystem WITHOUT ana_reporting"
		}
		if !slices.ContainsFunc(s.Listeners, func(x address) bool { return lkey(x) == lkey(a) }) {
			return nil, "expect-error: set_ana_state on listener the subsystem does not have"
		}
		st := str(p["ana_state"])
		if st != "optimized" && st != "non_optimized" && st != "inaccessible" {
			return nil, "expect-error: bad ana_state string"
		}
		if s.States[lkey(a)] == nil {
			s.States[lkey(a)] = map[uint32]string{}
		}
		s.States[lkey(a)][max(num(p["anagrpid"]), 1)] = st
		return true, ""
	case "nvmf_subsystem_get_listeners":
		if s == nil {
			return nil, "expect-error: nvmf_get_subsystems unknown nqn"
		}
		var out []map[string]any
		for _, a := range s.Listeners {
			l := map[string]any{"address": a}
			if s.ANA {
				var states []map[string]any
				for g := uint32(1); g <= 32; g++ {
					st := s.States[lkey(a)][g]
					if st == "" {
						st = "optimized"
					}
					states = append(states, map[string]any{"ana_group": g, "ana_state": st})
				}
				l["ana_states"] = states
			}
			out = append(out, l)
		}
		return out, ""
	}
	d.t.Errorf("double has no model for %s", method)
	return nil, "expect-error: unknown method"
}

// subsystemsJSON renders the state in the recorded nvmf_get_subsystems
// shape (the discovery subsystem first).
func (d *double) subsystemsJSON() []map[string]any {
	out := []map[string]any{{"nqn": "nqn.2014-08.org.nvmexpress.discovery", "subtype": "Discovery", "listen_addresses": []any{}, "allow_any_host": true, "hosts": []any{}}}
	subs := slices.Clone(d.subs)
	sort.Slice(subs, func(i, j int) bool { return subs[i].NQN < subs[j].NQN })
	for _, s := range subs {
		hosts := []map[string]any{}
		for _, h := range s.Hosts {
			hosts = append(hosts, map[string]any{"nqn": h})
		}
		ns := []map[string]any{}
		for _, n := range s.NS {
			m := map[string]any{"nsid": n.NSID, "bdev_name": n.Bdev, "name": n.Bdev, "nguid": n.NGUID, "uuid": n.UUID}
			if n.ANAGroup > 1 {
				m["anagrpid"] = n.ANAGroup
			}
			ns = append(ns, m)
		}
		la := []address{}
		la = append(la, s.Listeners...)
		out = append(out, map[string]any{"nqn": s.NQN, "subtype": "NVMe", "listen_addresses": la, "allow_any_host": s.AnyHost,
			"hosts": hosts, "serial_number": s.Serial, "model_number": s.Model, "max_namespaces": 32, "passthrough": false,
			"min_cntlid": 1, "max_cntlid": 65519, "dmrsl": 2097152, "wzsl": 12, "namespaces": ns})
	}
	return out
}
