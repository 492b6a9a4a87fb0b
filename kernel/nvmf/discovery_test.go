package nvmf

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleLog() DiscoveryLog {
	e := DiscoveryEntry{TrType: 3, AdrFam: 1, Subtype: SubtypeNVM, TReq: 4, PortID: 18001, CntlID: 0xffff, ASQSZ: 32,
		TrSvcID: "4420", SubNQN: testNQN, TrAddr: "169.254.77.1"}
	d := e
	d.Subtype, d.SubNQN, d.TrSvcID = SubtypeCurrentDiscovery, DiscoveryNQN, "8009"
	t := e
	t.TSAS[0], t.TLSSecure, t.TReq = 2, true, 1
	return DiscoveryLog{GenCtr: 7, Entries: []DiscoveryEntry{e, d, t}}
}

func TestDiscoveryLogRoundTrip(t *testing.T) {
	l := sampleLog()
	b, err := MarshalDiscoveryLog(l)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 1024+3*1024 {
		t.Fatalf("len %d", len(b))
	}
	// Spot-check the wire layout against struct nvmf_disc_rsp_page_entry.
	e := b[1024:]
	if e[0] != 3 || e[1] != 1 || e[2] != 2 || e[4] != 0x51 || e[5] != 0x46 || string(e[32:36]) != "4420" ||
		string(e[256:256+len(testNQN)]) != testNQN || string(e[512:524]) != "169.254.77.1" {
		t.Fatalf("entry layout wrong: % x", e[:64])
	}
	got, err := ParseDiscoveryLog(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, l) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, l)
	}
	if got.Entries[0].Transport() != TCP || got.Entries[0].Family() != "ipv4" || !got.Entries[2].TLSSecure {
		t.Fatalf("names: %v %v", got.Entries[0].Transport(), got.Entries[0].Family())
	}
}

func TestDiscoveryLogErrors(t *testing.T) {
	b, _ := MarshalDiscoveryLog(sampleLog())
	if _, err := ParseDiscoveryLog(b[:100]); !errors.Is(err, ErrTruncated) {
		t.Errorf("short header: %v", err)
	}
	if _, err := ParseDiscoveryLog(b[:len(b)-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("short entries: %v", err)
	}
	huge := bytes.Clone(b[:1024])
	huge[15] = 0x7f // numrec enormous
	if _, err := ParseDiscoveryLog(huge); err == nil {
		t.Errorf("enormous numrec accepted")
	}
	// Space padding and trailing garbage are tolerated.
	pad := bytes.Clone(b)
	copy(pad[1024+512+12:], "   ")
	l, err := ParseDiscoveryLog(append(pad, 1, 2, 3))
	if err != nil || l.Entries[0].TrAddr != "169.254.77.1" {
		t.Errorf("padded: %v %q", err, l.Entries[0].TrAddr)
	}
	if _, err := MarshalDiscoveryLog(DiscoveryLog{Entries: []DiscoveryEntry{{TrSvcID: string(make([]byte, 40))}}}); err == nil {
		t.Error("oversized trsvcid marshalled")
	}
}

// FuzzDiscoveryLog: the parser never panics, errors and results agree,
// and parse -> marshal -> parse is the identity.
func FuzzDiscoveryLog(f *testing.F) {
	b, _ := MarshalDiscoveryLog(sampleLog())
	f.Add(b)
	e, _ := MarshalDiscoveryLog(DiscoveryLog{GenCtr: 1})
	f.Add(e)
	f.Add(make([]byte, 1024))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseDiscoveryLog(b)
		if err != nil {
			if len(l.Entries) != 0 {
				t.Fatal("entries returned with an error")
			}
			return
		}
		m, err := MarshalDiscoveryLog(l)
		if err != nil {
			t.Fatalf("marshal of a parsed log: %v", err)
		}
		l2, err := ParseDiscoveryLog(m)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if !reflect.DeepEqual(l, l2) {
			t.Fatalf("round trip changed the log:\n%+v\n%+v", l, l2)
		}
		m2, _ := MarshalDiscoveryLog(l2)
		if !bytes.Equal(m, m2) {
			t.Fatal("marshal not deterministic")
		}
	})
}

func TestParseConnectReply(t *testing.T) {
	i, c, err := parseConnectReply("instance=3,cntlid=17\n")
	if err != nil || i != 3 || c != 17 {
		t.Fatalf("= %d %d %v", i, c, err)
	}
	if _, _, err := parseConnectReply("instance=-1,cntlid=-1,transport=%s"); err == nil {
		t.Fatal("option list taken for a reply")
	}
}

func TestParseSupportedOptions(t *testing.T) {
	// As printed by Linux 6.12 (fabrics.c __nvmf_concat_opt_tokens).
	m := parseSupportedOptions("instance=-1,cntlid=-1,transport=%s,traddr=%s,trsvcid=%s,nqn=%s,queue_size=%d,nr_io_queues=%d,reconnect_delay=%d,ctrl_loss_tmo=%d,keep_alive_tmo=%d,hostnqn=%s,host_traddr=%s,host_iface=%s,hostid=%s,duplicate_connect,disable_sqflow,hdr_digest,data_digest,nr_write_queues=%d,nr_poll_queues=%d,tos=%d,keyring=%d,tls_key=%d,fast_io_fail_tmo=%d,discovery,dhchap_secret=%s,dhchap_ctrl_secret=%s,tls\n")
	for _, k := range []string{"transport", "dhchap_secret", "tls", "fast_io_fail_tmo", "discovery"} {
		if !m[k] {
			t.Errorf("missing %s", k)
		}
	}
	if m["instance"] || m["cntlid"] {
		t.Error("instance/cntlid listed as options")
	}
}
