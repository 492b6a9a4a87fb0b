package store

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestEtcdLogger: warnings and errors reach the slog logger with their
// fields, info does not, a repeated message is cut to logBurst a tick,
// and fields that could carry a secret are left out.
func TestEtcdLogger(t *testing.T) {
	var buf bytes.Buffer
	zl := EtcdLogger(slog.New(slog.NewTextHandler(&buf, nil))).With(zap.String("local-member-id", "abc"))
	zl.Info("starting an etcd server")
	zl.Warn("failed to publish local member to cluster through raft", zap.Duration("publish-timeout", 0), zap.String("value", "s3cret"))
	zl.Error("raft stalled", zap.Int("term", 7))
	for range 10 {
		zl.Warn("peer became inactive", zap.String("peer-id", "def"))
	}
	zl.Warn("simple token is not cryptographically signed")
	out := buf.String()
	t.Log(out)
	for _, want := range []string{
		`level=WARN msg="etcd: failed to publish local member to cluster through raft" local-member-id=abc publish-timeout=0s`,
		`level=ERROR msg="etcd: raft stalled" local-member-id=abc term=7`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if strings.Contains(out, "starting an etcd server") || strings.Contains(out, "simple token") {
		t.Error("info or a quiet warning logged")
	}
	if strings.Contains(out, "s3cret") {
		t.Error("a value field was logged")
	}
	if n := strings.Count(out, "peer became inactive"); n != logBurst {
		t.Errorf("a message repeated 10 times logged %d times, want %d", n, logBurst)
	}
}
