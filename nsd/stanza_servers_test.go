package nsd_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/nsd/stanza"
)

// TestStanzaServersAndDevice checks the device=/servers= rule of IBM's
// mmcrnsd text: without servers=, device= is the name on the node that
// runs mmcrnsd (every node is taken to see the disk, which holds for
// fabraid: each node opens its own head) and no servers= is written; with
// servers= (at most 8), the first server writes the NSD descriptor and
// device= must be its name there, so the order given is kept and the file
// says which node that is; more than 8 or repeated servers are refused.
func TestStanzaServersAndDevice(t *testing.T) {
	write := func(o stanza.Options) (string, error) {
		st, err := stanza.Build(vols(), o)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		err = stanza.Write(&b, st)
		return b.String(), err
	}
	out, err := write(stanza.Options{Volumes: []string{"vol0"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseIBMStanzas(out)
	if err != nil || len(got) != 1 || got[0].Clauses["device"] != "/dev/nvme1n1" || got[0].Clauses["servers"] != "" ||
		strings.Contains(out, "first server") {
		t.Errorf("no servers: %+v %v\n%s", got, err, out)
	}

	// The order is IBM's meaning: n2 first means n2 writes the descriptor.
	out, err = write(stanza.Options{Volumes: []string{"vol0"}, Servers: []string{"n2", "n1"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err = parseIBMStanzas(out)
	if err != nil || len(got) != 1 || got[0].Clauses["servers"] != "n2,n1" || checkIBMNSD(got[0]) != nil {
		t.Errorf("servers n2,n1: %+v %v\n%s", got, err, out)
	}
	if !strings.Contains(out, "# mmcrnsd writes this NSD from n2, the first server: device= must be its name on n2") {
		t.Errorf("the file does not say that device= is the first server's name:\n%s", out)
	}

	eight := make([]string, stanza.MaxServers)
	for i := range eight {
		eight[i] = fmt.Sprintf("n%d", i+1)
	}
	if _, err := write(stanza.Options{Volumes: []string{"vol0"}, Servers: eight}); err != nil {
		t.Errorf("8 servers: %v", err)
	}
	for _, tc := range []struct {
		servers []string
		want    string
	}{
		{append(eight, "n9"), "servers: 9 given, mmcrnsd takes at most 8"},
		{[]string{"n1", "n2", "n1"}, `server "n1" given twice`},
	} {
		if _, err := write(stanza.Options{Volumes: []string{"vol0"}, Servers: tc.servers}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("servers %v: %v, want %q", tc.servers, err, tc.want)
		}
	}
	// The IBM reader applies the same limit (so the writer's and the
	// reader's rules are one).
	if err := checkIBMNSD(ibmStanza{Kind: "nsd", Clauses: map[string]string{"device": "/dev/x", "servers": strings.Join(append(eight, "n9"), ",")}}); err == nil {
		t.Error("IBM reader accepted 9 servers")
	}
}
