package config

import (
	"slices"
	"strings"
	"testing"
)

// TestRequireAuth: require_auth is on by default (a node without
// DH-HMAC-CHAP in its target refuses to export), false is the opt-out,
// anything else is an error that names the key, and Keys lists it.
func TestRequireAuth(t *testing.T) {
	if !Default().Cluster.RequireAuth {
		t.Fatal("require_auth is off by default")
	}
	for in, want := range map[string]bool{"": true, "require_auth = true\n": true, "require_auth = false\n": false} {
		c, err := Parse(strings.NewReader(in), "t.conf")
		if err != nil || c.Cluster.RequireAuth != want || len(c.Warnings) > 0 {
			t.Errorf("%q: require_auth %v, err %v, warnings %v; want %v", in, c.Cluster.RequireAuth, err, c.Warnings, want)
		}
	}
	if _, err := Parse(strings.NewReader("require_auth = no\n"), "t.conf"); err == nil || !strings.Contains(err.Error(), "t.conf:1: require_auth:") {
		t.Errorf("require_auth = no: %v", err)
	}
	if !slices.Contains(Keys(), "require_auth") {
		t.Errorf("Keys() lacks require_auth: %v", Keys())
	}
}
