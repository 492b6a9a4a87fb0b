package pki

import (
	"bytes"
	"crypto/tls"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestIssueVerifyPin(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadCA(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, keyPEM, _ := NewKey()
	pubPEM, _ := PublicPEM(key.Public())
	pub, err := ParsePublic(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := back.Issue(pub, "node1", []net.IP{net.ParseIP("127.0.0.1")}, now)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{Dir: t.TempDir() + "/pki"}
	if err := f.Write(ca.CertPEM, certPEM, keyPEM, ca.KeyPEM); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.NodeKey(), f.CAKey()} {
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, st.Mode().Perm())
		}
	}
	if _, err := f.JoinServerTLS(); err == nil {
		t.Error("join service configured without a member certificate")
	}
	if err := f.EnsureMember("node1", net.ParseIP("127.0.0.1"), now); err != nil {
		t.Fatal(err)
	}
	js, err := f.JoinServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	raw := js.Certificates[0].Certificate
	if err := VerifyPinned(Fingerprint(ca.Cert))(raw, nil); err != nil {
		t.Errorf("pinned CA refused: %v", err)
	}
	// A node certificate of the pinned CA (any client-only node has one)
	// does not pass for a join service.
	nc, _ := ParseCert(certPEM)
	if err := VerifyPinned(Fingerprint(ca.Cert))([][]byte{nc.Raw, ca.Cert.Raw}, nil); err == nil || !strings.Contains(err.Error(), "not an etcd member's") {
		t.Errorf("a node certificate as join service: %v, want refused", err)
	}
	other, _ := NewCA("other", now)
	if err := VerifyPinned(Fingerprint(other.Cert))(raw, nil); err == nil {
		t.Error("a server of another CA was accepted")
	}
	// A chain that claims the pinned CA but whose leaf another CA signed.
	okey, _, _ := NewKey()
	forged, _ := other.Issue(okey.Public(), "node1", nil, now)
	fc, _ := ParseCert(forged)
	if err := VerifyPinned(Fingerprint(ca.Cert))([][]byte{fc.Raw, ca.Cert.Raw}, nil); err == nil {
		t.Error("a leaf not signed by the pinned CA was accepted")
	}
	if _, err := f.ServerTLS(); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.ServerTLS(); s.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Error("server does not require client certificates")
	}
}

// TestMemberCertificates: member certificates carry MemberCN and are made
// only with the CA key; no node certificate can carry MemberCN; an
// existing member certificate is kept; the token key is the CA's.
func TestMemberCertificates(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("test", now)
	key, keyPEM, _ := NewKey()
	if _, err := ca.Issue(key.Public(), MemberCN, nil, now); err == nil {
		t.Error("a node certificate named MemberCN was issued")
	}
	certPEM, _ := ca.Issue(key.Public(), "c1", nil, now)

	// A client-only node: no CA key, no member certificate.
	client := Files{Dir: t.TempDir() + "/pki"}
	if err := client.Write(ca.CertPEM, certPEM, keyPEM, nil); err != nil {
		t.Fatal(err)
	}
	if err := client.EnsureMember("c1", nil, now); err == nil {
		t.Error("a node without the CA key made a member certificate")
	}

	m := Files{Dir: t.TempDir() + "/pki"}
	if err := m.Write(ca.CertPEM, certPEM, keyPEM, ca.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if err := m.EnsureMember("m1", net.ParseIP("10.0.0.1"), now); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(m.MemberCert())
	c, err := ParseCert(first)
	if err != nil || c.Subject.CommonName != MemberCN || len(c.DNSNames) != 1 || c.DNSNames[0] != "m1" || !c.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) {
		t.Fatalf("member certificate %+v %v", c, err)
	}
	if st, _ := os.Stat(m.MemberKey()); st.Mode().Perm() != 0o600 {
		t.Errorf("member key mode %v, want 0600", st.Mode().Perm())
	}
	if err := m.EnsureMember("m1", net.ParseIP("10.0.0.1"), now); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(m.MemberCert()); !bytes.Equal(again, first) {
		t.Error("EnsureMember replaced a valid member certificate")
	}
	if _, err := m.MemberTLS(); err != nil {
		t.Fatal(err)
	}

	k1, err := ca.TokenKey()
	if err != nil || len(k1) != 32 {
		t.Fatalf("token key %x %v", k1, err)
	}
	back, _ := LoadCA(ca.CertPEM, ca.KeyPEM)
	k2, _ := back.TokenKey()
	other, _ := NewCA("test", now)
	k3, _ := other.TokenKey()
	if !bytes.Equal(k1, k2) || bytes.Equal(k1, k3) {
		t.Error("token key: want equal for one CA key, different for another")
	}
}
