// Package token makes and redeems cluster join tokens.
//
// A token is "fbj1.<id>.<secret>.<ca>": a 6-byte id and a 16-byte secret
// from crypto/rand (hex), and the SHA-256 fingerprint of the cluster CA
// (hex), which the joiner pins when it connects to the join service (see
// pki.VerifyPinned). etcd stores only the id and the SHA-256 of the secret
// (keys.Token(id), a Record), attached to a lease that ends an hour after
// the token expires so that late uses still get a clear answer.
//
// Redeem checks the secret with a constant-time comparison and marks the
// record used in a transaction conditioned on its revision, so two joins
// racing with one token cannot both win: a token is single-use.
//
// # Records only members can make
//
// Every node can write etcd (no RBAC yet), so a record's presence proves
// nothing. An unused record is accepted only with a MAC (HMAC-SHA256
// under the token key, pki.CA.TokenKey, which only the holders of the CA
// key, the etcd members, can derive) over the token id, the secret's
// hash, its creation and expiry, the key's etcd create revision and Seq,
// the etcd version of the key at which the record is unused. etcd raises
// a key's version at every write and resets it only by a delete, which
// gives the key a new create revision, so:
//
//   - a node without the token key cannot make a record the join service
//     accepts (no valid MAC);
//   - a used record set back to unused by a write is refused (its
//     version is past Seq), and so is an old unused value written again;
//   - a record deleted and written again is refused (new create
//     revision), and so is a value copied to another id.
//
// Issue writes the record in two steps: created (version 1), then the
// MAC'd value with Seq 2. Release writes a fresh MAC for the next version.
package token

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

// Version is the schema version of Record.
const Version = 1

// Errors of Redeem; each is wrapped with details.
var (
	ErrMalformed = errors.New("malformed join token")
	ErrUnknown   = errors.New("unknown join token")
	ErrWrong     = errors.New("wrong join token secret")
	ErrUsed      = errors.New("join token already used")
	ErrExpired   = errors.New("join token expired")
	// ErrForged: the record has no valid MAC; no etcd member made it.
	ErrForged = errors.New("join token record not made by an etcd member of this cluster")
)

// Token is a parsed join token. String and LogValue redact the secret;
// Encode gives the whole token.
type Token struct {
	ID     string
	Secret string
	CA     string // SHA-256 fingerprint of the cluster CA, hex
}

const prefix = "fbj1"

// New makes a token for the cluster whose CA has fingerprint ca.
func New(ca string) (Token, error) {
	var id [6]byte
	var sec [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Token{}, fmt.Errorf("token: %w", err)
	}
	if _, err := rand.Read(sec[:]); err != nil {
		return Token{}, fmt.Errorf("token: %w", err)
	}
	return Token{ID: hex.EncodeToString(id[:]), Secret: hex.EncodeToString(sec[:]), CA: ca}, nil
}

// Parse parses an encoded token.
func Parse(s string) (Token, error) {
	f := strings.Split(strings.TrimSpace(s), ".")
	if len(f) != 4 || f[0] != prefix || !isHex(f[1], 12) || !isHex(f[2], 32) || !isHex(f[3], 64) {
		return Token{}, fmt.Errorf("%w: want fbj1.<12 hex>.<32 hex>.<64 hex> as printed by fabraid cluster token", ErrMalformed)
	}
	return Token{ID: f[1], Secret: f[2], CA: f[3]}, nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Encode is the whole token, to give to the joining node.
func (t Token) Encode() string { return prefix + "." + t.ID + "." + t.Secret + "." + t.CA }

// String is the token with its secret redacted.
func (t Token) String() string { return prefix + "." + t.ID + ".<redacted>." + t.CA }

// LogValue keeps the secret out of slog output.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Record is what etcd holds for a token.
type Record struct {
	Version int       `json:"version"`
	Hash    string    `json:"sha256"` // of the secret, hex
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	UsedBy  string    `json:"used_by,omitempty"`
	UsedAt  time.Time `json:"used_at,omitzero"`
	// Seq is the etcd version of the key at which this record is unused,
	// MAC its HMAC-SHA256 under the token key (hex; see the package
	// documentation). A used record keeps them; they no longer match.
	Seq int64  `json:"seq,omitempty"`
	MAC string `json:"mac,omitempty"`
}

// mac is the MAC of an unused record of token id at create revision
// createRev. Every field is length-delimited or fixed-width, so two
// different inputs never encode alike.
func mac(key []byte, id string, rec Record, createRev int64) string {
	h := hmac.New(sha256.New, key)
	for _, f := range []string{"fabraid join token v1", id, rec.Hash, rec.Created.UTC().Format(time.RFC3339Nano),
		rec.Expires.UTC().Format(time.RFC3339Nano), strconv.FormatInt(createRev, 10), strconv.FormatInt(rec.Seq, 10)} {
		h.Write([]byte(strconv.Itoa(len(f)) + ":" + f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hash(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

// grace is how long a used or expired token's record outlives its expiry.
const grace = time.Hour

// Issue stores t's record, valid for ttl from now (at most
// model.MaxTokenTTL), authenticated with key (pki.CA.TokenKey: only etcd
// members have it).
func Issue(ctx context.Context, cli *clientv3.Client, key []byte, t Token, ttl time.Duration, now time.Time) error {
	if ttl <= 0 || ttl > model.MaxTokenTTL {
		return fmt.Errorf("token: ttl %v, want more than 0 and at most %v (the cap of a join token's validity)", ttl, model.MaxTokenTTL)
	}
	if len(key) == 0 {
		return errors.New("token: no token key (join tokens are made on etcd members)")
	}
	rec := Record{Version: Version, Hash: hash(t.Secret), Created: now.UTC(), Expires: now.Add(ttl).UTC()}
	b, _ := json.Marshal(rec)
	lease, err := cli.Grant(ctx, int64((ttl+grace)/time.Second))
	if err != nil {
		return fmt.Errorf("token: lease: %w", err)
	}
	k := keys.Token(t.ID)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(b), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil {
		return fmt.Errorf("token: store: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("token: id %s exists already", t.ID)
	}
	// The create revision is known only now: the MAC'd value is the
	// key's second version.
	created := resp.Header.Revision
	rec.Seq = 2
	rec.MAC = mac(key, t.ID, rec, created)
	b, _ = json.Marshal(rec)
	resp, err = cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", created)).
		Then(clientv3.OpPut(k, string(b), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return fmt.Errorf("token: store: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("token: record %s changed while it was made", t.ID)
	}
	return nil
}

// Check returns nil when t would be redeemed now, or the error Redeem
// would return; it changes nothing.
func Check(ctx context.Context, kv clientv3.KV, key []byte, t Token, now time.Time) error {
	_, err := load(ctx, kv, key, t, now)
	return err
}

// Redeemed is a token record as Redeem left it, for Release.
type Redeemed struct {
	id        string
	rec       Record
	createRev int64
	modRev    int64
	version   int64
}

// Redeem marks t used by node, once: every later Redeem of t fails with
// ErrUsed. It returns ErrUnknown, ErrWrong, ErrUsed, ErrExpired or
// ErrForged (wrapped) for tokens that cannot join.
func Redeem(ctx context.Context, kv clientv3.KV, key []byte, t Token, node string, now time.Time) (Redeemed, error) {
	l, err := load(ctx, kv, key, t, now)
	if err != nil {
		return Redeemed{}, err
	}
	rec := l.rec
	rec.UsedBy, rec.UsedAt = node, now.UTC()
	b, _ := json.Marshal(rec)
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(keys.Token(t.ID)), "=", l.modRev)).
		Then(clientv3.OpPut(keys.Token(t.ID), string(b), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return Redeemed{}, fmt.Errorf("token: redeem: %w", err)
	}
	if !resp.Succeeded {
		return Redeemed{}, fmt.Errorf("%w (by a concurrent join)", ErrUsed)
	}
	return Redeemed{id: t.ID, rec: rec, createRev: l.createRev, modRev: resp.Header.Revision, version: l.version + 1}, nil
}

// Release makes a token that Redeem marked used usable again, for a join
// that failed after Redeem. The record is rewritten from r (never from
// what etcd holds now, which any node may have changed) with a MAC for
// its next version, and only when it is still what Redeem wrote: a
// record changed since stays used.
func Release(ctx context.Context, kv clientv3.KV, key []byte, r Redeemed) error {
	if r.id == "" {
		return nil
	}
	rec := r.rec
	rec.UsedBy, rec.UsedAt = "", time.Time{}
	rec.Seq = r.version + 1
	rec.MAC = mac(key, r.id, rec, r.createRev)
	b, _ := json.Marshal(rec)
	resp, err := kv.Txn(context.WithoutCancel(ctx)).
		If(clientv3.Compare(clientv3.ModRevision(keys.Token(r.id)), "=", r.modRev)).
		Then(clientv3.OpPut(keys.Token(r.id), string(b), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return fmt.Errorf("token: release %s: %w", r.id, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("token: release %s: the record changed since it was redeemed; it stays used", r.id)
	}
	return nil
}

type loaded struct {
	rec                        Record
	createRev, modRev, version int64
}

func load(ctx context.Context, kv clientv3.KV, key []byte, t Token, now time.Time) (loaded, error) {
	resp, err := kv.Get(ctx, keys.Token(t.ID))
	if err != nil {
		return loaded{}, fmt.Errorf("token: read: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return loaded{}, fmt.Errorf("%w %s (never issued, or expired more than %v ago)", ErrUnknown, t.ID, grace)
	}
	kvs := resp.Kvs[0]
	var rec Record
	if err := json.Unmarshal(kvs.Value, &rec); err != nil {
		return loaded{}, fmt.Errorf("token: record %s: %w", t.ID, err)
	}
	if rec.Version != Version {
		return loaded{}, fmt.Errorf("token: record %s has schema version %d, this fabraid reads %d", t.ID, rec.Version, Version)
	}
	want, err := hex.DecodeString(rec.Hash)
	if err != nil {
		return loaded{}, fmt.Errorf("token: record %s: %w", t.ID, err)
	}
	got := sha256.Sum256([]byte(t.Secret))
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return loaded{}, fmt.Errorf("%w for token %s", ErrWrong, t.ID)
	}
	if rec.UsedBy != "" {
		return loaded{}, fmt.Errorf("%w by node %s at %s; make a new one with fabraid cluster token", ErrUsed, rec.UsedBy, rec.UsedAt.Format(time.RFC3339))
	}
	// Invariant: nothing below accepts a record whose MAC does not match
	// under the token key, for this key's create revision and version.
	if len(key) == 0 {
		return loaded{}, errors.New("token: no token key (join tokens are checked on etcd members)")
	}
	if rec.MAC == "" || !hmac.Equal([]byte(rec.MAC), []byte(mac(key, t.ID, rec, kvs.CreateRevision))) {
		return loaded{}, fmt.Errorf("%w (token %s: its MAC does not match); make a new one with fabraid cluster token on a member", ErrForged, t.ID)
	}
	if kvs.Version != rec.Seq {
		return loaded{}, fmt.Errorf("%w (token %s: its record was rewritten after it was issued); make a new one with fabraid cluster token", ErrUsed, t.ID)
	}
	if !now.Before(rec.Expires) {
		return loaded{}, fmt.Errorf("%w at %s; make a new one with fabraid cluster token", ErrExpired, rec.Expires.Format(time.RFC3339))
	}
	return loaded{rec: rec, createRev: kvs.CreateRevision, modRev: kvs.ModRevision, version: kvs.Version}, nil
}
