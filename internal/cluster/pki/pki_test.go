package pki

import (
	"crypto/tls"
	"net"
	"os"
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
	js, err := f.JoinServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	raw := js.Certificates[0].Certificate
	if err := VerifyPinned(Fingerprint(ca.Cert))(raw, nil); err != nil {
		t.Errorf("pinned CA refused: %v", err)
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
