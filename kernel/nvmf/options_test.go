package nvmf

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const (
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9a9"
	testHostID  = "0c6f5e92-5fe1-4c4f-9d43-cd8b3a19a9a9"
	testNQN     = "nqn.2026-11.io.fabraid:drive:S4EWNX0R123456"
)

func member() *Timeouts { t, _ := Profile(ProfileMember); return &t }

func baseOptions() Options {
	return Options{Transport: TCP, Address: "169.254.77.1", ServiceID: "4420", NQN: testNQN, HostNQN: testHostNQN, HostID: testHostID}
}

func TestOptionsString(t *testing.T) {
	secret := Secret{Key: make([]byte, 32)}.Reveal()
	tests := []struct {
		name   string
		modify func(*Options)
		want   string
	}{
		{"minimal", func(*Options) {}, "transport=tcp,traddr=169.254.77.1,trsvcid=4420,nqn=" + testNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID},
		{"member profile", func(o *Options) { o.Timeouts = member() }, "transport=tcp,traddr=169.254.77.1,trsvcid=4420,nqn=" + testNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID + ",keep_alive_tmo=2,reconnect_delay=2,ctrl_loss_tmo=60,fast_io_fail_tmo=0"},
		{"discovery", func(o *Options) { o.NQN = ""; o.Discovery = true; o.ServiceID = "8009" }, "transport=tcp,traddr=169.254.77.1,trsvcid=8009,nqn=" + DiscoveryNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID + ",discovery"},
		{"loop", func(o *Options) { o.Transport, o.Address, o.ServiceID = Loop, "", "" }, "transport=loop,nqn=" + testNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID},
		{"tls with keyring and key", func(o *Options) { o.TLS, o.Keyring, o.TLSKey = true, 0x1234, 0x5678 }, "transport=tcp,traddr=169.254.77.1,trsvcid=4420,nqn=" + testNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID + ",keyring=4660,tls_key=22136,tls"},
		{"everything", func(o *Options) {
			o.HostAddress, o.HostIface, o.QueueSize, o.IOQueues, o.WriteQueues, o.PollQueues = "169.254.77.2", "eth0", 256, 4, 2, 1
			o.DuplicateConnect, o.HeaderDigest, o.DataDigest, o.DHCHAPSecret, o.DHCHAPCtrlSecret, o.TLS = true, true, true, secret, secret, true
		}, "transport=tcp,traddr=169.254.77.1,trsvcid=4420,nqn=" + testNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID +
			",host_traddr=169.254.77.2,host_iface=eth0,queue_size=256,nr_io_queues=4,nr_write_queues=2,nr_poll_queues=1,duplicate_connect,hdr_digest,data_digest,dhchap_secret=" + secret + ",dhchap_ctrl_secret=" + secret + ",tls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := baseOptions()
			tt.modify(&o)
			if err := o.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := o.Reveal(); got != tt.want {
				t.Fatalf("Reveal:\n got %s\nwant %s", got, tt.want)
			}
			back, err := ParseOptions(o.Reveal())
			if err != nil {
				t.Fatalf("ParseOptions: %v", err)
			}
			if back.Reveal() != o.Reveal() {
				t.Fatalf("round trip:\n got %s\nwant %s", back.Reveal(), o.Reveal())
			}
			if r := o.Redacted(); o.DHCHAPSecret != "" && strings.Contains(r, o.DHCHAPSecret) {
				t.Fatalf("Redacted leaks the secret: %s", r)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Options)
		want   string
	}{
		{"unknown transport", func(o *Options) { o.Transport = "udp" }, "unknown transport"},
		{"no transport", func(o *Options) { o.Transport = "" }, "no transport"},
		{"bad address", func(o *Options) { o.Address = "10.0.0.300" }, "traddr"},
		{"hostname address", func(o *Options) { o.Address = "node1" }, "traddr"},
		{"bad port", func(o *Options) { o.ServiceID = "70000" }, "trsvcid"},
		{"leading zero port", func(o *Options) { o.ServiceID = "04420" }, "trsvcid"},
		{"bad nqn", func(o *Options) { o.NQN = "drive1" }, "invalid NQN"},
		{"injected option", func(o *Options) { o.NQN = testNQN + ",ctrl_loss_tmo=1" }, "invalid NQN"},
		{"no hostnqn", func(o *Options) { o.HostNQN = "" }, "hostnqn"},
		{"bad hostid", func(o *Options) { o.HostID = "abc" }, "hostid"},
		{"queue size low", func(o *Options) { o.QueueSize = 8 }, "queue_size"},
		{"queue size high", func(o *Options) { o.QueueSize = 2048 }, "queue_size"},
		{"negative queues", func(o *Options) { o.IOQueues = -1 }, "nr_io_queues"},
		{"kato 0", func(o *Options) { o.Timeouts = &Timeouts{KeepAlive: 0, ReconnectDelay: 1, CtrlLoss: 1, FastIOFail: 0} }, "keep_alive_tmo"},
		{"reconnect 0", func(o *Options) { o.Timeouts = &Timeouts{KeepAlive: 1, ReconnectDelay: 0, CtrlLoss: 1, FastIOFail: 0} }, "reconnect_delay"},
		{"ctrl loss -2", func(o *Options) { o.Timeouts = &Timeouts{KeepAlive: 1, ReconnectDelay: 1, CtrlLoss: -2, FastIOFail: 0} }, "ctrl_loss_tmo"},
		{"fast fail after loss", func(o *Options) { o.Timeouts = &Timeouts{KeepAlive: 1, ReconnectDelay: 1, CtrlLoss: 5, FastIOFail: 10} }, "exceeds"},
		{"bad secret", func(o *Options) { o.DHCHAPSecret = "DHHC-1:00:AAAA:" }, "dhchap_secret"},
		{"ctrl secret alone", func(o *Options) { o.DHCHAPCtrlSecret = Secret{Key: make([]byte, 32)}.Reveal() }, "needs dhchap_secret"},
		{"iface injection", func(o *Options) { o.HostIface = "eth0,tls" }, "host_iface"},
		{"tls on rdma", func(o *Options) { o.Transport = RDMA; o.TLS = true }, "tls"},
		{"keyring without tls", func(o *Options) { o.Keyring = 5 }, "need tls"},
		{"negative tls_key", func(o *Options) { o.TLS, o.TLSKey = true, -1 }, "serials"},
		{"loop with address", func(o *Options) { o.Transport = Loop }, "loop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := baseOptions()
			tt.modify(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("error %v does not wrap ErrInvalidOptions", err)
			}
		})
	}
}

func TestProfiles(t *testing.T) {
	for _, name := range []string{ProfileMember, ProfileVolumePath, ProfileKernelDefault} {
		p, err := Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}
	m, _ := Profile(ProfileMember)
	if m.FastIOFail < 0 || m.KeepAlive > 5 || m.CtrlLoss < 0 {
		t.Errorf("member profile %+v must fail I/O fast and give up eventually", m)
	}
	v, _ := Profile(ProfileVolumePath)
	if v.FastIOFail != Forever || v.CtrlLoss != Forever {
		t.Errorf("volume-path profile %+v must queue I/O through a failover", v)
	}
	if _, err := Profile("fast"); err == nil {
		t.Error("unknown profile accepted")
	}
}

func TestParseOptionsErrors(t *testing.T) {
	for _, s := range []string{
		"", "traddr=1.2.3.4", "transport=tcp,transport=tcp", "transport=tcp,bogus=1",
		"transport=tcp,queue_size=x", "transport=tcp,queue_size=+5", "transport=tcp,tls=1",
		"transport=tcp,keep_alive_tmo=1", "transport=tcp,nqn=",
	} {
		if _, err := ParseOptions(s); err == nil {
			t.Errorf("ParseOptions(%q) accepted", s)
		}
	}
}

// FuzzOptions checks that any option string ParseOptions accepts and
// Validate passes renders back to an equivalent string (render, parse,
// render is stable) and that validated options never contain a second
// value for any key (no injection).
func FuzzOptions(f *testing.F) {
	o := baseOptions()
	f.Add(o.Reveal())
	o.Timeouts = member()
	o.DHCHAPSecret = Secret{Key: make([]byte, 48)}.Reveal()
	f.Add(o.Reveal())
	f.Add("transport=loop,nqn=" + testNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID + ",discovery")
	f.Add("transport=tcp,traddr=::1,trsvcid=8009,nqn=" + DiscoveryNQN + ",hostnqn=" + testHostNQN + ",hostid=" + testHostID + ",keep_alive_tmo=1,reconnect_delay=1,ctrl_loss_tmo=-1,fast_io_fail_tmo=-1")
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseOptions(s)
		if err != nil {
			return
		}
		r1 := o.Reveal()
		o2, err := ParseOptions(r1)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", r1, err)
		}
		if r2 := o2.Reveal(); r1 != r2 {
			t.Fatalf("render not stable:\n%q\n%q", r1, r2)
		}
		if o.Validate() != nil {
			return
		}
		seen := map[string]bool{}
		for _, kv := range strings.Split(r1, ",") {
			k, _, _ := strings.Cut(kv, "=")
			if seen[k] {
				t.Fatalf("validated options render %q twice in %q", k, r1)
			}
			seen[k] = true
			if strings.ContainsAny(kv, "\n") {
				t.Fatalf("newline in %q", r1)
			}
		}
	})
}

// TestOptionsNeverPrintSecret: fmt and slog print Options (alone or in a
// struct, as a value or a pointer) without its DH-HMAC-CHAP secrets; only
// Reveal, what Connect writes to the kernel, has them.
func TestOptionsNeverPrintSecret(t *testing.T) {
	o := baseOptions()
	o.DHCHAPSecret = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:"
	o.DHCHAPCtrlSecret = o.DHCHAPSecret
	if !strings.Contains(o.Reveal(), o.DHCHAPSecret) {
		t.Fatalf("Reveal has no secret: %s", o.Reveal())
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	log.Info("connect", "options", o, "ptr", &o)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("connect", "options", o)
	wrapped := struct {
		Name string
		Opts Options
	}{"x", o}
	for what, s := range map[string]string{
		"%v": fmt.Sprintf("%v", o), "%+v": fmt.Sprintf("%+v", o), "%s": fmt.Sprintf("%s", &o), "%#v": fmt.Sprintf("%#v", o),
		"struct %+v": fmt.Sprintf("%+v", wrapped), "slog": logged.String(), "error": fmt.Errorf("connect %v: failed", o).Error(),
	} {
		if strings.Contains(s, "AAAAAAAA") {
			t.Errorf("%s prints the secret: %s", what, s)
		}
	}
}
