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
package token

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
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
}

func hash(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

// grace is how long a used or expired token's record outlives its expiry.
const grace = time.Hour

// Issue stores t's record, valid for ttl from now.
func Issue(ctx context.Context, cli *clientv3.Client, t Token, ttl time.Duration, now time.Time) error {
	if ttl <= 0 {
		return fmt.Errorf("token: ttl %v, want > 0", ttl)
	}
	rec := Record{Version: Version, Hash: hash(t.Secret), Created: now.UTC(), Expires: now.Add(ttl).UTC()}
	b, _ := json.Marshal(rec)
	lease, err := cli.Grant(ctx, int64((ttl+grace)/time.Second))
	if err != nil {
		return fmt.Errorf("token: lease: %w", err)
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(keys.Token(t.ID)), "=", 0)).
		Then(clientv3.OpPut(keys.Token(t.ID), string(b), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil {
		return fmt.Errorf("token: store: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("token: id %s exists already", t.ID)
	}
	return nil
}

// Check returns nil when t would be redeemed now, or the error Redeem
// would return; it changes nothing.
func Check(ctx context.Context, kv clientv3.KV, t Token, now time.Time) error {
	_, _, err := load(ctx, kv, t, now)
	return err
}

// Redeem marks t used by node, once: every later Redeem of t fails with
// ErrUsed. It returns ErrUnknown, ErrWrong, ErrUsed or ErrExpired (wrapped)
// for tokens that cannot join.
func Redeem(ctx context.Context, kv clientv3.KV, t Token, node string, now time.Time) error {
	rec, rev, err := load(ctx, kv, t, now)
	if err != nil {
		return err
	}
	rec.UsedBy, rec.UsedAt = node, now.UTC()
	b, _ := json.Marshal(rec)
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(keys.Token(t.ID)), "=", rev)).
		Then(clientv3.OpPut(keys.Token(t.ID), string(b), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return fmt.Errorf("token: redeem: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w (by a concurrent join)", ErrUsed)
	}
	return nil
}

// Release makes a token redeemed by node usable again, for a join that
// failed after Redeem; a token used by another node is left alone.
func Release(ctx context.Context, kv clientv3.KV, t Token, node string) error {
	resp, err := kv.Get(ctx, keys.Token(t.ID))
	if err != nil || len(resp.Kvs) == 0 {
		return err
	}
	var rec Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.UsedBy != node {
		return err
	}
	rec.UsedBy, rec.UsedAt = "", time.Time{}
	b, _ := json.Marshal(rec)
	_, err = kv.Txn(context.WithoutCancel(ctx)).
		If(clientv3.Compare(clientv3.ModRevision(keys.Token(t.ID)), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(keys.Token(t.ID), string(b), clientv3.WithIgnoreLease())).
		Commit()
	return err
}

func load(ctx context.Context, kv clientv3.KV, t Token, now time.Time) (Record, int64, error) {
	resp, err := kv.Get(ctx, keys.Token(t.ID))
	if err != nil {
		return Record{}, 0, fmt.Errorf("token: read: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, 0, fmt.Errorf("%w %s (never issued, or expired more than %v ago)", ErrUnknown, t.ID, grace)
	}
	var rec Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return Record{}, 0, fmt.Errorf("token: record %s: %w", t.ID, err)
	}
	if rec.Version != Version {
		return Record{}, 0, fmt.Errorf("token: record %s has schema version %d, this fabraid reads %d", t.ID, rec.Version, Version)
	}
	want, err := hex.DecodeString(rec.Hash)
	if err != nil {
		return Record{}, 0, fmt.Errorf("token: record %s: %w", t.ID, err)
	}
	got := sha256.Sum256([]byte(t.Secret))
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return Record{}, 0, fmt.Errorf("%w for token %s", ErrWrong, t.ID)
	}
	if rec.UsedBy != "" {
		return Record{}, 0, fmt.Errorf("%w by node %s at %s; make a new one with fabraid cluster token", ErrUsed, rec.UsedBy, rec.UsedAt.Format(time.RFC3339))
	}
	if !now.Before(rec.Expires) {
		return Record{}, 0, fmt.Errorf("%w at %s; make a new one with fabraid cluster token", ErrExpired, rec.Expires.Format(time.RFC3339))
	}
	return rec, resp.Kvs[0].ModRevision, nil
}
