package nsd_test

import (
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/nsd/stanza"
)

func vols() []api.Volume {
	return []api.Volume{
		{Name: "vol0", UUID: "u0", Device: "/dev/nvme1n1", State: "optimal"},
		{Name: "scratch-01", UUID: "u1", Device: "/dev/nvme2n1", State: "degraded"},
		{Name: "gpfs1", UUID: "u2", Device: "/dev/nvme3n1", State: "optimal"},
		{Name: "vol#a=b", UUID: "u3", Device: "/dev/nvme4n1", State: "optimal"},
		{Name: "down", UUID: "u4", State: "stopped"},
	}
}

// TestStanzaParsesByIBMGrammar: what the writer produces reads back, by a
// reader written from IBM's grammar, as one valid %nsd stanza per volume
// with the requested clauses and nothing else.
func TestStanzaParsesByIBMGrammar(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    stanza.Options
		want []map[string]string
	}{
		{"defaults", stanza.Options{Volumes: []string{"vol0", "scratch-01", "gpfs1", "vol#a=b"}}, []map[string]string{
			{"device": "/dev/nvme1n1", "nsd": "vol0", "usage": "dataAndMetadata", "failureGroup": "1"},
			{"device": "/dev/nvme2n1", "nsd": "scratch_01", "usage": "dataAndMetadata", "failureGroup": "1"},
			{"device": "/dev/nvme3n1", "nsd": "fab_gpfs1", "usage": "dataAndMetadata", "failureGroup": "1"},
			{"device": "/dev/nvme4n1", "nsd": "vol_a_b", "usage": "dataAndMetadata", "failureGroup": "1"},
		}},
		{"everything", stanza.Options{Volumes: []string{"scratch-01"}, Usage: "dataOnly", Pool: "fast", FailureGroup: "-1", Servers: []string{"n1", "n2.site"}},
			[]map[string]string{{"device": "/dev/nvme2n1", "nsd": "scratch_01", "usage": "dataOnly", "failureGroup": "-1", "pool": "fast", "servers": "n1,n2.site"}}},
		{"system pool metadata", stanza.Options{Volumes: []string{"vol0"}, Usage: "metadataOnly", Pool: "system", FailureGroup: "4000"},
			[]map[string]string{{"device": "/dev/nvme1n1", "nsd": "vol0", "usage": "metadataOnly", "failureGroup": "4000", "pool": "system"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := stanza.Build(vols(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := stanza.Write(&b, st); err != nil {
				t.Fatal(err)
			}
			got, err := parseIBMStanzas(b.String())
			if err != nil {
				t.Fatalf("%v in\n%s", err, b.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d stanzas, want %d:\n%s", len(got), len(tc.want), b.String())
			}
			for i, s := range got {
				if err := checkIBMNSD(s); err != nil {
					t.Errorf("stanza %d: %v", i, err)
				}
				if len(s.Clauses) != len(tc.want[i]) {
					t.Errorf("stanza %d: clauses %v, want %v", i, s.Clauses, tc.want[i])
				}
				for k, v := range tc.want[i] {
					if s.Clauses[k] != v {
						t.Errorf("stanza %d: %s=%q, want %q", i, k, s.Clauses[k], v)
					}
				}
			}
		})
	}
}

// TestIBMGrammarReader: the test's reader follows IBM's rules (so a pass
// above means something): clauses across lines, inline comments, end of
// stanza at a blank line, refusal of clauses outside a stanza.
func TestIBMGrammarReader(t *testing.T) {
	got, err := parseIBMStanzas("# c\n%nsd: device=/dev/sdb nsd=d1 # inline\n  usage=dataOnly\n\n%nsd: device=/dev/sdc\n nsd=d2 failureGroup=2\n")
	if err != nil || len(got) != 2 || got[0].Clauses["usage"] != "dataOnly" || got[1].Clauses["failureGroup"] != "2" || len(got[0].Clauses) != 3 {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{
		"%nsd: device=/dev/sdb\n\nnsd=orphan\n",   // a blank line ended the stanza
		"%nsd: device=/dev/sdb nsd\n",             // not Attribute=value
		"%nsd device=/dev/sdb\n",                  // identifier without ':'
		"%nsd: device=/dev/sdb\nsdb:::dataOnly\n", // old disk descriptor
		"%nsd: nsd=a nsd=b device=/dev/x\n",       // twice
	} {
		if _, err := parseIBMStanzas(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	for _, bad := range []map[string]string{
		{"device": "/dev/x", "nsd": "gpfs1nsd"}, {"device": "/dev/x", "nsd": "a-b"}, {"device": "/dev/x", "usage": "data"},
		{"device": "/dev/x", "failureGroup": "4001"}, {"nsd": "a"}, {"device": "/dev/x", "thin": "yes"},
	} {
		if err := checkIBMNSD(ibmStanza{Kind: "nsd", Clauses: bad}); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
}

// TestStanzaRefusals: every refusal names what is wrong, and nothing is
// written for it.
func TestStanzaRefusals(t *testing.T) {
	withCollision := append(vols(), api.Volume{Name: "scratch.01", Device: "/dev/nvme5n1"})
	for _, tc := range []struct {
		vols []api.Volume
		o    stanza.Options
		want string
	}{
		{vols(), stanza.Options{Volumes: []string{"nope"}}, `volume "nope": no such volume`},
		{vols(), stanza.Options{Volumes: []string{"down"}}, `volume "down": no consumer device on this node (state stopped)`},
		{vols(), stanza.Options{}, `volume "down": no consumer device`}, // all volumes: the stopped one too
		{withCollision, stanza.Options{Volumes: []string{"scratch-01"}}, `volumes "scratch-01", "scratch.01" all map to NSD name scratch_01`},
		{vols(), stanza.Options{Usage: "data"}, `usage "data": want one of dataAndMetadata`},
		{vols(), stanza.Options{Pool: "fast"}, `pool "fast" with usage dataAndMetadata: only the system pool may hold metadata`},
		{vols(), stanza.Options{Pool: "fa-st", Usage: "dataOnly"}, `pool "fa-st": want 1-255 letters`},
		{vols(), stanza.Options{FailureGroup: "4001"}, `failure group "4001": want auto or an integer -1..4000`},
		{vols(), stanza.Options{FailureGroup: "x"}, `failure group "x"`},
		{vols(), stanza.Options{Servers: []string{"a b"}}, `server "a b"`},
		{nil, stanza.Options{}, "no volumes on this node"},
	} {
		_, err := stanza.Build(tc.vols, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
