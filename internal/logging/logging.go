package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

// Options configure New and NewJournalHandler.
type Options struct {
	// Level is the minimum level logged; default slog.LevelInfo.
	Level slog.Leveler
	// Identifier is the journal's SYSLOG_IDENTIFIER; default the program
	// name (base name of os.Args[0]).
	Identifier string
	// AddSource adds CODE_FILE, CODE_LINE and CODE_FUNC (journal) or
	// source= (text).
	AddSource bool
}

// New returns a logger writing to w: journald-native when w is os.Stderr
// and stderr is connected to the journal, logfmt text on w otherwise.
func New(w io.Writer, o Options) *slog.Logger {
	if f, ok := w.(*os.File); ok && f == os.Stderr && stderrIsJournal() {
		return slog.New(NewJournalHandler(sendToJournal, os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: o.Level, AddSource: o.AddSource}))
}

func stderrIsJournal() bool {
	ok, err := journal.StderrIsJournalStream()
	return ok && err == nil && journal.Enabled()
}

// SendFunc delivers one journal entry: its MESSAGE, PRIORITY and the other
// fields. journal.Send has this shape.
type SendFunc func(message string, priority journal.Priority, fields map[string]string) error

func sendToJournal(message string, priority journal.Priority, fields map[string]string) error {
	return journal.Send(message, priority, fields)
}

// JournalHandler is a slog.Handler that turns records into journal entries.
type JournalHandler struct {
	send     SendFunc
	fallback io.Writer
	opts     Options
	attrs    []field // from WithAttrs, already qualified by their groups
	groups   []string
}

// field is one attribute flattened to a journal field name and a value,
// plus its logfmt key for the MESSAGE text.
type field struct {
	name, key, value string
}

// NewJournalHandler returns a handler that sends every record with send;
// a record send refuses is written as text to fallback (may be nil).
func NewJournalHandler(send SendFunc, fallback io.Writer, o Options) *JournalHandler {
	if o.Level == nil {
		o.Level = slog.LevelInfo
	}
	if o.Identifier == "" {
		o.Identifier = filepath.Base(os.Args[0])
	}
	return &JournalHandler{send: send, fallback: fallback, opts: o}
}

// Enabled implements slog.Handler.
func (h *JournalHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.opts.Level.Level()
}

// WithAttrs implements slog.Handler.
func (h *JournalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	c := *h
	c.attrs = slices.Clip(h.attrs)
	for _, a := range as {
		c.attrs = appendAttr(c.attrs, h.groups, a)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *JournalHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.groups = append(slices.Clip(h.groups), name)
	return &c
}

// Handle implements slog.Handler.
func (h *JournalHandler) Handle(_ context.Context, r slog.Record) error {
	fs := slices.Clip(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		fs = appendAttr(fs, h.groups, a)
		return true
	})
	msg, prio, vars := h.entry(r, fs)
	err := h.send(msg, prio, vars)
	if err != nil && h.fallback != nil {
		_, err = fmt.Fprintf(h.fallback, "time=%s level=%s msg=%s\n", r.Time.Format(time.RFC3339Nano), r.Level, msg)
	}
	return err
}

// entry builds the journal entry of r with its flattened attributes.
func (h *JournalHandler) entry(r slog.Record, fs []field) (string, journal.Priority, map[string]string) {
	vars := make(map[string]string, len(fs)+4)
	var msg strings.Builder
	msg.WriteString(r.Message)
	for _, f := range fs {
		vars[f.name] = f.value
		msg.WriteByte(' ')
		msg.WriteString(f.key)
		msg.WriteByte('=')
		msg.WriteString(logfmtValue(f.value))
	}
	vars["SYSLOG_IDENTIFIER"] = h.opts.Identifier
	if h.opts.AddSource && r.PC != 0 {
		fr, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		vars["CODE_FILE"], vars["CODE_LINE"], vars["CODE_FUNC"] = fr.File, strconv.Itoa(fr.Line), fr.Function
	}
	return msg.String(), Priority(r.Level), vars
}

// Priority maps a slog level to a syslog priority: below Info is debug,
// below Warn info, below Error warning, Error and above err.
func Priority(l slog.Level) journal.Priority {
	switch {
	case l < slog.LevelInfo:
		return journal.PriDebug
	case l < slog.LevelWarn:
		return journal.PriInfo
	case l < slog.LevelError:
		return journal.PriWarning
	default:
		return journal.PriErr
	}
}

// appendAttr flattens a (possibly a group) under groups and appends it.
func appendAttr(fs []field, groups []string, a slog.Attr) []field {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return fs
	}
	if a.Value.Kind() == slog.KindGroup {
		sub := a.Value.Group()
		if len(sub) == 0 {
			return fs
		}
		if a.Key != "" {
			groups = append(slices.Clip(groups), a.Key)
		}
		for _, s := range sub {
			fs = appendAttr(fs, groups, s)
		}
		return fs
	}
	path := append(slices.Clip(groups), a.Key)
	return append(fs, field{name: FieldName(path...), key: strings.Join(path, "."), value: valueString(a.Value)})
}

func valueString(v slog.Value) string {
	if v.Kind() == slog.KindTime {
		return v.Time().Format(time.RFC3339Nano)
	}
	return v.String()
}

// reserved are fields journald or journalctl interpret; attributes never
// set them.
var reserved = map[string]bool{
	"MESSAGE": true, "MESSAGE_ID": true, "PRIORITY": true, "CODE_FILE": true, "CODE_LINE": true,
	"CODE_FUNC": true, "ERRNO": true, "INVOCATION_ID": true, "USER_INVOCATION_ID": true,
	"SYSLOG_FACILITY": true, "SYSLOG_IDENTIFIER": true, "SYSLOG_PID": true,
	"SYSLOG_TIMESTAMP": true, "SYSLOG_RAW": true, "DOCUMENTATION": true, "TID": true,
	"UNIT": true, "USER_UNIT": true, "COREDUMP_UNIT": true, "OBJECT_PID": true,
}

// FieldName turns an attribute key path into a valid journal field name:
// upper case, [A-Z0-9_] only, not starting with '_' or a digit, at most 64
// bytes, never one of the reserved fields.
func FieldName(path ...string) string {
	var b strings.Builder
	for i, p := range path {
		if i > 0 {
			b.WriteByte('_')
		}
		for _, c := range p {
			switch {
			case c >= 'a' && c <= 'z':
				b.WriteRune(c - 'a' + 'A')
			case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
				b.WriteRune(c)
			default:
				b.WriteByte('_')
			}
		}
	}
	n := strings.TrimLeft(b.String(), "_")
	switch {
	case n == "":
		n = "ATTR"
	case n[0] >= '0' && n[0] <= '9', reserved[n]:
		n = "ATTR_" + n
	}
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// logfmtValue quotes v the way slog's text handler does when it must.
func logfmtValue(v string) string {
	if v == "" || strings.ContainsAny(v, " =\"\\") || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return strconv.Quote(v)
	}
	return v
}
