package token

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/cluster/etcdtest"
	"github.com/fabraid/fabraid/internal/cluster/keys"
)

func TestParseEncodeRedact(t *testing.T) {
	tok, err := New(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(" " + tok.Encode() + "\n")
	if err != nil || back != tok {
		t.Fatalf("round trip: %+v %v, want %+v", back, err, tok)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("made", "token", tok)
	for name, out := range map[string]string{"String": tok.String(), "%v": fmt.Sprintf("%v", tok), "slog": logged.String()} {
		if strings.Contains(out, tok.Secret) || !strings.Contains(out, "<redacted>") {
			t.Errorf("%s shows the secret or no redaction: %s", name, out)
		}
	}
	for _, bad := range []string{"", tok.Encode() + ".x", strings.Replace(tok.Encode(), "fbj1", "fbj2", 1),
		tok.Encode()[:len(tok.Encode())-1], strings.Replace(tok.Encode(), tok.Secret, strings.Repeat("g", 32), 1)} {
		if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("fbj1.000000000000.00000000000000000000000000000000." + strings.Repeat("0", 64))
	f.Add("fbj1...")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(tok.Encode())
		if err != nil || again != tok {
			t.Fatalf("%q: re-parse %+v %v", s, again, err)
		}
	})
}

// TestRecordsOnlyMembersMake: against a real etcd, a record is accepted
// only with a MAC under the token key, for the key's create revision and
// its version, so a node that can write etcd but lacks the key (every
// client-only node) can neither make a token nor reuse or copy one.
func TestRecordsOnlyMembersMake(t *testing.T) {
	ctx := context.Background()
	cli := etcdtest.Start(t)
	key, other := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	now := time.Now()
	ca := strings.Repeat("ab", 32)
	issue := func(k []byte) Token {
		t.Helper()
		tk, err := New(ca)
		if err != nil {
			t.Fatal(err)
		}
		if err := Issue(ctx, cli, k, tk, time.Hour, now); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	record := func(tk Token) (Record, int64) {
		t.Helper()
		resp, err := cli.Get(ctx, keys.Token(tk.ID))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("record %s: %v %v", tk.ID, resp, err)
		}
		var r Record
		json.Unmarshal(resp.Kvs[0].Value, &r)
		return r, resp.Kvs[0].Version
	}
	write := func(tk Token, r Record) {
		t.Helper()
		b, _ := json.Marshal(r)
		if _, err := cli.Put(ctx, keys.Token(tk.ID), string(b)); err != nil {
			t.Fatal(err)
		}
	}

	// Made and redeemed with the key; given back and redeemed again.
	tk := issue(key)
	if err := Check(ctx, cli, key, tk, now); err != nil {
		t.Fatalf("check of a fresh token: %v", err)
	}
	if err := Check(ctx, cli, other, tk, now); !errors.Is(err, ErrForged) {
		t.Errorf("check under another key: %v, want ErrForged", err)
	}
	r, err := Redeem(ctx, cli, key, tk, "a", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Redeem(ctx, cli, key, tk, "b", now); !errors.Is(err, ErrUsed) {
		t.Errorf("second redeem: %v, want ErrUsed", err)
	}
	if err := Release(ctx, cli, key, r); err != nil {
		t.Fatalf("release: %v", err)
	}
	r, err = Redeem(ctx, cli, key, tk, "b", now)
	if err != nil {
		t.Fatalf("redeem after release: %v", err)
	}

	// A used record written back as unused, with its issued value (MAC
	// and all): refused, its version is past Seq.
	used, _ := record(tk)
	used.UsedBy, used.UsedAt = "", time.Time{}
	write(tk, used)
	if err := Check(ctx, cli, key, tk, now); !errors.Is(err, ErrUsed) || !strings.Contains(err.Error(), "rewritten") {
		t.Errorf("record set back to unused: %v, want ErrUsed (rewritten)", err)
	}
	// Release of a record changed since its redeem does nothing.
	if err := Release(ctx, cli, key, r); err == nil {
		t.Error("release of a record changed since its redeem succeeded")
	}

	// Deleted and written again with the same value: new create revision.
	tk2 := issue(key)
	v2, _ := record(tk2)
	if _, err := cli.Delete(ctx, keys.Token(tk2.ID)); err != nil {
		t.Fatal(err)
	}
	write(tk2, v2)
	if err := Check(ctx, cli, key, tk2, now); !errors.Is(err, ErrForged) {
		t.Errorf("record deleted and written again: %v, want ErrForged", err)
	}
	// Copied to another id (the secret is the same).
	tk3 := issue(key)
	v3, ver := record(tk3)
	if ver != 2 || v3.Seq != 2 {
		t.Errorf("fresh record at version %d, seq %d; want 2 and 2", ver, v3.Seq)
	}
	cp := tk3
	cp.ID = "0123456789ab"
	write(cp, v3)
	if err := Check(ctx, cli, key, cp, now); !errors.Is(err, ErrForged) {
		t.Errorf("record copied to another id: %v, want ErrForged", err)
	}
	// Made by a node without the key (a record like the ones Issue wrote
	// before MACs, or under a key of its own).
	if err := Check(ctx, cli, key, issue(other), now); !errors.Is(err, ErrForged) {
		t.Errorf("record made with another key: %v, want ErrForged", err)
	}
	plain, _ := New(ca)
	write(plain, Record{Version: Version, Hash: hash(plain.Secret), Created: now, Expires: now.Add(time.Hour)})
	if err := Check(ctx, cli, key, plain, now); !errors.Is(err, ErrForged) {
		t.Errorf("record without a MAC: %v, want ErrForged", err)
	}
	// A forged expiry breaks the MAC.
	tk4 := issue(key)
	v4, _ := record(tk4)
	v4.Expires = v4.Expires.Add(24 * time.Hour)
	write(tk4, v4)
	if err := Check(ctx, cli, key, tk4, now); !errors.Is(err, ErrForged) {
		t.Errorf("record with a later expiry: %v, want ErrForged", err)
	}
	if err := Issue(ctx, cli, nil, tk4, time.Hour, now); err == nil {
		t.Error("Issue without a key succeeded")
	}
}
