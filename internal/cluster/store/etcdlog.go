package store

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Rate limit of EtcdLogger: per message text, the first logBurst entries
// in each logTick go through and the rest of that tick is dropped.
const (
	logTick  = 30 * time.Second
	logBurst = 3
)

// EtcdLogger is a zap logger for etcd's server and client that passes
// their warnings and errors to log as "etcd: <message>" with etcd's
// fields, rate-limited per message (a member that cannot reach a peer
// warns several times a second). Info and debug are dropped. etcd itself
// writes requests with values replaced by their sizes; fields that could
// still carry a secret (see redacted) are left out here as well.
func EtcdLogger(log *slog.Logger) *zap.Logger {
	core := zapcore.NewSamplerWithOptions(&slogCore{log: log}, logTick, logBurst, 0)
	return zap.New(core)
}

// quiet are etcd warnings of every start that say nothing about a stall
// (fabraid serves gRPC and HTTP on one port and uses no etcd auth).
//
// Also quiet: etcd's per-request slowness warnings. On a CPU-starved host
// (TCG guests) they come several times a second, say only that requests
// are slow, and are written synchronously from etcd's own goroutines
// (the raft loop among them), so a slow log sink would slow etcd further.
// A stalled start is reported by the member's own progress line instead.
var quiet = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
	"apply request took too long":                                                          true,
	"request stats":                                                                        true,
	"waiting for ReadIndex response took too long, retrying":                               true,
	"ignored out-of-date read index response; local node read indexes queueing up and waiting to be in sync with leader": true,
	"leader failed to send out heartbeat on time; took too long, leader is overloaded likely from slow disk":             true,
	"retrying of unary invoker failed": true,
}

// redacted are zap field keys never passed on: they are not needed to
// see why a member stalls and could carry key values or credentials.
var redacted = map[string]bool{"value": true, "password": true, "token": true, "simple-token": true}

// slogCore is a zapcore.Core writing to an slog.Logger. fields are the
// ones added by With, in order.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	if quiet[e.Message] {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field(nil), c.fields...), fs...) {
		if !redacted[f.Key] {
			f.AddTo(enc)
		}
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	lvl := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		lvl = slog.LevelError
	}
	c.log.LogAttrs(context.Background(), lvl, "etcd: "+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
