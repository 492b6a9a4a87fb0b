// Package pki is the cluster's certificate authority: the CA made by
// "fabraid cluster init", the node certificates it signs, and the TLS
// configurations of etcd's peer and client traffic and of the join
// service.
//
// # Keys and certificates
//
// Every key is ECDSA P-256 made with crypto/rand. The CA certificate is
// self-signed, valid for 10 years, and may sign only leaf certificates
// (MaxPathLen 0). A node certificate names the node (CN and a DNS SAN) and
// its cluster IP address (an IP SAN), is valid for server and client
// authentication alike (it serves etcd's client port and authenticates
// the node as an etcd client), and lasts 10 years too: renewal is not
// implemented yet.
//
// # Member certificates
//
// A node that runs an etcd member also has a member certificate
// (member.crt, member.key): CN MemberCN, the node name as DNS SAN, its
// cluster IP as IP SAN, server and client authentication. etcd's peer
// (raft) port accepts only certificates with CN MemberCN (etcd's
// TLSInfo.AllowedCNs in package store, checked by etcd both ways), and the join service presents it
// (VerifyPinned requires it), so a node that holds only a node
// certificate can neither speak raft nor pose as a join service.
// Invariant: only a holder of the CA key makes member certificates
// (EnsureMember), and Issue never signs a node certificate whose CN is
// MemberCN.
//
// # Files
//
// Files lays out a node's directory: ca.crt, node.crt and node.key, and
// ca.key, member.crt and member.key on the nodes that run an etcd member
// (they can sign certificates for joining nodes). Keys are written 0600 in
// a 0700 directory.
//
// # Pinning
//
// A joining node has no CA yet: the join token carries Fingerprint(CA)
// and the joiner accepts the join service's certificate only when its
// chain ends at a CA with that fingerprint and its leaf is a member
// certificate (VerifyPinned). It then takes the reply's CA certificate
// and its own node certificate only when the CA has that fingerprint and
// the certificate chains to it for the joiner's name, address and key
// (VerifyIssued).
//
// # Token key
//
// TokenKey derives from the CA key the key that authenticates join token
// records in etcd (package token): only the etcd members, which hold the
// CA key, can make a record the join service accepts.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of the CA and of node certificates.
const Validity = 10 * 365 * 24 * time.Hour

// CA is the cluster certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
	KeyPEM  []byte
}

// NewCA makes a CA for the cluster named cluster.
func NewCA(cluster string, now time.Time) (*CA, error) {
	key, keyPEM, err := NewKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "fabraid cluster CA " + cluster, Organization: []string{"fabraid"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: make CA: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key, KeyPEM: keyPEM}, nil
}

// LoadCA parses a CA from its PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("pki: CA key does not match the CA certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key, KeyPEM: keyPEM}, nil
}

// MemberCN is the common name of every member certificate, the identity
// etcd's peer port requires (AllowedCNs). It has spaces, which no node
// name has, and Issue refuses it as a node name.
const MemberCN = "fabraid etcd member"

// Issue signs a node certificate for pub, naming node and its IPs. It
// refuses the node name MemberCN: a node certificate must never pass for
// a member certificate.
func (ca *CA) Issue(pub crypto.PublicKey, node string, ips []net.IP, now time.Time) ([]byte, error) {
	if node == MemberCN {
		return nil, fmt.Errorf("pki: %q is reserved for member certificates, not a node name", node)
	}
	return ca.issue(pub, node, node, ips, now)
}

// IssueMember signs the member certificate of node (see MemberCN).
func (ca *CA) IssueMember(pub crypto.PublicKey, node string, ips []net.IP, now time.Time) ([]byte, error) {
	return ca.issue(pub, MemberCN, node, ips, now)
}

// TokenKey is the key that authenticates join token records (package
// token), derived from the CA key with HKDF-SHA256: every holder of the
// CA key (the etcd members) gets the same key, nobody else can.
func (ca *CA) TokenKey() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: token key: %w", err)
	}
	k, err := hkdf.Key(sha256.New, der, nil, "fabraid join token records v1", 32)
	if err != nil {
		return nil, fmt.Errorf("pki: token key: %w", err)
	}
	return k, nil
}

func (ca *CA) issue(pub crypto.PublicKey, cn, node string, ips []net.IP, now time.Time) ([]byte, error) {
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"fabraid"}},
		DNSNames:     []string{node},
		IPAddresses:  ips,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: issue certificate for %s: %w", node, err)
	}
	return pemBlock("CERTIFICATE", der), nil
}

// Fingerprint is the hex SHA-256 of a certificate's DER bytes.
func Fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
}

// NewKey makes an ECDSA P-256 key and its PEM (PKCS #8).
func NewKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: make key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return k, pemBlock("PRIVATE KEY", der), nil
}

// PublicPEM encodes a public key (PKIX).
func PublicPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("pki: encode public key: %w", err)
	}
	return pemBlock("PUBLIC KEY", der), nil
}

// ParsePublic parses a PEM public key; only ECDSA P-256 is accepted.
func ParsePublic(b []byte) (crypto.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("pki: not a PEM public key")
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: public key: %w", err)
	}
	if k, ok := pub.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		return nil, errors.New("pki: public key is not ECDSA P-256")
	}
	return pub, nil
}

// ParseCert parses one PEM certificate.
func ParseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("pki: not a PEM certificate")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate: %w", err)
	}
	return c, nil
}

// ParseKey parses a PEM PKCS #8 private key.
func ParseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("pki: not a PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("pki: private key cannot sign")
	}
	return s, nil
}

// VerifyPinned returns a tls.Config VerifyPeerCertificate function that
// accepts a server whose leaf certificate is a member certificate (CN
// MemberCN) signed by the CA with the given fingerprint, that CA being
// sent in the chain: only etcd members serve joins, and a node with only a
// node certificate cannot pose as one to take a joiner's token. Use it
// with InsecureSkipVerify (the usual verification needs a CA the client
// does not have yet).
func VerifyPinned(fingerprint string) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		var certs []*x509.Certificate
		for _, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("pki: server certificate: %w", err)
			}
			certs = append(certs, c)
		}
		if len(certs) == 0 {
			return errors.New("pki: server sent no certificate")
		}
		for _, ca := range certs[1:] {
			if Fingerprint(ca) != fingerprint {
				continue
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				return fmt.Errorf("pki: server certificate not signed by the pinned CA: %w", err)
			}
			if certs[0].Subject.CommonName != MemberCN {
				return fmt.Errorf("pki: the server's certificate (%q) is not an etcd member's: only members serve joins", certs[0].Subject.CommonName)
			}
			return nil
		}
		return fmt.Errorf("pki: the server's CA is not the one in the join token (want SHA-256 %s)", fingerprint)
	}
}

// VerifyIssued checks what a join service sent back (the joiner's side):
// caPEM must be the CA with the pinned fingerprint, and certPEM a node
// certificate it signed, for node (CN and the only DNS SAN) and ip (the
// only IP SAN), for client and server authentication, of the public key
// pub the joiner sent. It returns the CA certificate.
func VerifyIssued(caPEM, certPEM []byte, fingerprint, node string, ip net.IP, pub crypto.PublicKey) (*x509.Certificate, error) {
	ca, err := ParseCert(caPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	if got := Fingerprint(ca); got != fingerprint {
		return nil, fmt.Errorf("pki: the CA certificate has SHA-256 %s, the join token pins %s", got, fingerprint)
	}
	if !ca.IsCA {
		return nil, errors.New("pki: the CA certificate is not a CA")
	}
	c, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: node certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return nil, fmt.Errorf("pki: node certificate not signed by the pinned CA: %w", err)
		}
	}
	if c.Subject.CommonName != node || len(c.DNSNames) != 1 || c.DNSNames[0] != node {
		return nil, fmt.Errorf("pki: node certificate names %q (DNS %q), this node is %q", c.Subject.CommonName, c.DNSNames, node)
	}
	if len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(ip) {
		return nil, fmt.Errorf("pki: node certificate names IPs %v, this node's cluster address is %s", c.IPAddresses, ip)
	}
	if !publicEqual(c.PublicKey, pub) {
		return nil, errors.New("pki: node certificate is not for the key this node sent")
	}
	return ca, nil
}

// Files is a node's certificate directory.
type Files struct{ Dir string }

// Paths of the files in a Files directory.
func (f Files) CACert() string   { return filepath.Join(f.Dir, "ca.crt") }
func (f Files) CAKey() string    { return filepath.Join(f.Dir, "ca.key") }
func (f Files) NodeCert() string { return filepath.Join(f.Dir, "node.crt") }
func (f Files) NodeKey() string  { return filepath.Join(f.Dir, "node.key") }

// MemberCert and MemberKey are the member certificate and its key (etcd
// members only).
func (f Files) MemberCert() string { return filepath.Join(f.Dir, "member.crt") }
func (f Files) MemberKey() string  { return filepath.Join(f.Dir, "member.key") }

// Write stores the CA certificate, the node certificate and key, and the
// CA key when caKey is not nil. Keys are 0600, the directory 0700.
func (f Files) Write(caCert, nodeCert, nodeKey, caKey []byte) error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	files := []struct {
		path string
		b    []byte
		mode os.FileMode
	}{{f.CACert(), caCert, 0o644}, {f.NodeCert(), nodeCert, 0o644}, {f.NodeKey(), nodeKey, 0o600}}
	if caKey != nil {
		files = append(files, struct {
			path string
			b    []byte
			mode os.FileMode
		}{f.CAKey(), caKey, 0o600})
	}
	for _, w := range files {
		if err := writeFile(w.path, w.b, w.mode); err != nil {
			return err
		}
	}
	return nil
}

// LoadCA reads the CA with its key (nodes that run an etcd member only).
func (f Files) LoadCA() (*CA, error) {
	c, err := os.ReadFile(f.CACert())
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	k, err := os.ReadFile(f.CAKey())
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return LoadCA(c, k)
}

// ServerTLS is the configuration of a server that requires client
// certificates signed by the cluster CA.
func (f Files) ServerTLS() (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// ClientTLS is the configuration of a client that presents the node
// certificate and trusts only the cluster CA.
func (f Files) ClientTLS() (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// JoinServerTLS is the join service's configuration: the member
// certificate with the CA appended to the chain (joiners pin the CA by
// fingerprint and require a member certificate), and no client
// certificate required (the join token authenticates).
func (f Files) JoinServerTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.MemberCert(), f.MemberKey())
	if err != nil {
		return nil, fmt.Errorf("pki: member certificate: %w", err)
	}
	ca, err := os.ReadFile(f.CACert())
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	blk, _ := pem.Decode(ca)
	if blk == nil {
		return nil, errors.New("pki: bad ca.crt")
	}
	cert.Certificate = append(cert.Certificate, blk.Bytes)
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// MemberTLS is the client configuration of a member on etcd's peer port:
// the member certificate, trusting only the cluster CA (tests; etcd makes
// its own from MemberTLSInfo).
func (f Files) MemberTLS() (*tls.Config, error) {
	_, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.MemberCert(), f.MemberKey())
	if err != nil {
		return nil, fmt.Errorf("pki: member certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// EnsureMember makes the member certificate of node at ip with the CA key
// when there is none (init, a member's join, and a member whose state
// predates member certificates at its start); an existing one that parses
// and names MemberCN is kept. It fails on a node without the CA key: only
// members make member certificates.
func (f Files) EnsureMember(node string, ip net.IP, now time.Time) error {
	if b, err := os.ReadFile(f.MemberCert()); err == nil {
		if c, err := ParseCert(b); err == nil && c.Subject.CommonName == MemberCN {
			if _, err := tls.LoadX509KeyPair(f.MemberCert(), f.MemberKey()); err == nil {
				return nil
			}
		}
	}
	ca, err := f.LoadCA()
	if err != nil {
		return fmt.Errorf("pki: member certificate needs the CA key: %w", err)
	}
	key, keyPEM, err := NewKey()
	if err != nil {
		return err
	}
	var ips []net.IP
	if ip != nil {
		ips = []net.IP{ip}
	}
	cert, err := ca.IssueMember(key.Public(), node, ips, now)
	if err != nil {
		return err
	}
	// The key first: a certificate is only ever next to its key.
	if err := writeFile(f.MemberKey(), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(f.MemberCert(), cert, 0o644)
}

func (f Files) load() (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(f.NodeCert(), f.NodeKey())
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("pki: node certificate: %w", err)
	}
	ca, err := os.ReadFile(f.CACert())
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("pki: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return tls.Certificate{}, nil, fmt.Errorf("pki: %s holds no certificate", f.CACert())
	}
	return cert, pool, nil
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func publicEqual(a, b crypto.PublicKey) bool {
	da, err1 := x509.MarshalPKIXPublicKey(a)
	db, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(da, db)
}
