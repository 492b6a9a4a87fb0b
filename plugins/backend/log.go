package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// SlogLogger returns an hclog.Logger (what go-plugin logs with, plugin
// stderr lines included) whose records go to log: one slog record per
// line, at the hclog level, with the line's fields as attributes.
func SlogLogger(log *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: &slogWriter{log: log}, JSONFormat: true, Level: hclog.Info})
}

// slogWriter turns hclog's JSON lines into slog records.
type slogWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *slogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

var slogLevels = map[string]slog.Level{"trace": slog.LevelDebug, "debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

func (w *slogWriter) line(b []byte) {
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		w.log.Info(strings.TrimSpace(string(b)))
		return
	}
	lvl, _ := rec["@level"].(string)
	msg, _ := rec["@message"].(string)
	var attrs []any
	if m, ok := rec["@module"].(string); ok {
		attrs = append(attrs, "module", m)
	}
	for _, k := range slices.Sorted(maps.Keys(rec)) {
		if !strings.HasPrefix(k, "@") {
			attrs = append(attrs, k, rec[k])
		}
	}
	w.log.Log(context.Background(), slogLevels[lvl], msg, attrs...)
}
