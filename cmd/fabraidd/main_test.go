package main

import (
	"log/slog"
	"testing"
)

// The engine child's --owner-domain flag is optional (an older daemon's
// command line parses) and read as given.
func TestEngineOwnerDomainFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--uuid", "u", "--members", "/dev/a", "--ublk-id", "1", "--socket", "/s"}, ""},
		{[]string{"--uuid", "u", "--members", "/dev/a", "--ublk-id", "1", "--socket", "/s", "--owner-domain", "rack1"}, "rack1"},
	} {
		cmd := newEngineCmd(slog.New(slog.DiscardHandler))
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if got, err := cmd.Flags().GetString("owner-domain"); err != nil || got != c.want {
			t.Fatalf("%q: owner domain %q (%v), want %q", c.args, got, err, c.want)
		}
	}
}
