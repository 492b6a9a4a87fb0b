package logging

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

type sent struct {
	msg    string
	prio   journal.Priority
	fields map[string]string
}

// recorder is a SendFunc that keeps what it was given.
type recorder struct {
	entries []sent
	err     error
}

func (r *recorder) send(msg string, p journal.Priority, f map[string]string) error {
	if r.err != nil {
		return r.err
	}
	r.entries = append(r.entries, sent{msg, p, f})
	return nil
}

func (r *recorder) only(t *testing.T) sent {
	t.Helper()
	if len(r.entries) != 1 {
		t.Fatalf("got %d journal entries, want 1: %+v", len(r.entries), r.entries)
	}
	return r.entries[0]
}

func newTest(o Options) (*recorder, *slog.Logger) {
	r := &recorder{}
	if o.Identifier == "" {
		o.Identifier = "fabraidd"
	}
	return r, slog.New(NewJournalHandler(r.send, nil, o))
}

func TestJournalFieldsAreFilterable(t *testing.T) {
	r, log := newTest(Options{})
	log.With("volume", "scratch").Error("member failed", "slot", 3, "err", errors.New("input/output error"))
	e := r.only(t)
	want := map[string]string{"VOLUME": "scratch", "SLOT": "3", "ERR": "input/output error", "SYSLOG_IDENTIFIER": "fabraidd"}
	for k, v := range want {
		if e.fields[k] != v {
			t.Errorf("field %s = %q, want %q (all: %v)", k, e.fields[k], v, e.fields)
		}
	}
	if e.prio != journal.PriErr {
		t.Errorf("priority %d, want %d (err)", e.prio, journal.PriErr)
	}
	// Plain journalctl shows only MESSAGE: it must carry the attributes.
	if want := `member failed volume=scratch slot=3 err="input/output error"`; e.msg != want {
		t.Errorf("MESSAGE %q, want %q", e.msg, want)
	}
}

func TestGroupsQualifyFieldNames(t *testing.T) {
	r, log := newTest(Options{})
	log.WithGroup("task").With("kind", "rebuild").Info("progress",
		slog.Group("rate", "bytes", 1<<20), slog.Group("empty"), "done", 0.5)
	e := r.only(t)
	for k, v := range map[string]string{"TASK_KIND": "rebuild", "TASK_RATE_BYTES": "1048576", "TASK_DONE": "0.5"} {
		if e.fields[k] != v {
			t.Errorf("field %s = %q, want %q (all: %v)", k, e.fields[k], v, e.fields)
		}
	}
	if strings.Contains(e.msg, "empty") {
		t.Errorf("an empty group appears in MESSAGE %q", e.msg)
	}
	if want := "progress task.kind=rebuild task.rate.bytes=1048576 task.done=0.5"; e.msg != want {
		t.Errorf("MESSAGE %q, want %q", e.msg, want)
	}
}

func TestAttributesNeverOverrideJournalFields(t *testing.T) {
	r, log := newTest(Options{})
	log.Warn("m", "message", "x", "priority", "0", "syslog_identifier", "evil", "1st", "a", "_trusted", "b", "a-b.c", "d")
	e := r.only(t)
	if e.prio != journal.PriWarning {
		t.Errorf("priority %d, want warning", e.prio)
	}
	if e.fields["SYSLOG_IDENTIFIER"] != "fabraidd" {
		t.Errorf("SYSLOG_IDENTIFIER overridden: %q", e.fields["SYSLOG_IDENTIFIER"])
	}
	for k, v := range map[string]string{"ATTR_MESSAGE": "x", "ATTR_PRIORITY": "0", "ATTR_SYSLOG_IDENTIFIER": "evil", "ATTR_1ST": "a", "TRUSTED": "b", "A_B_C": "d"} {
		if e.fields[k] != v {
			t.Errorf("field %s = %q, want %q (all: %v)", k, e.fields[k], v, e.fields)
		}
	}
	for k := range e.fields {
		if !validField(k) {
			t.Errorf("invalid journal field name %q", k)
		}
	}
}

// validField is journald's rule for a field a client may set.
func validField(n string) bool {
	if n == "" || len(n) > 64 || n[0] == '_' || (n[0] >= '0' && n[0] <= '9') {
		return false
	}
	for _, c := range n {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func FuzzFieldName(f *testing.F) {
	for _, s := range []string{"volume", "", "_", "9x", "ü", "message", strings.Repeat("a", 100)} {
		f.Add(s, "k")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, n := range []string{FieldName(a), FieldName(a, b)} {
			if !validField(n) || reserved[n] {
				t.Fatalf("FieldName(%q, %q) = %q: not a valid client field", a, b, n)
			}
		}
	})
}

func TestPriorities(t *testing.T) {
	for _, c := range []struct {
		l    slog.Level
		want journal.Priority
	}{{slog.LevelDebug, journal.PriDebug}, {slog.LevelInfo, journal.PriInfo}, {slog.LevelWarn, journal.PriWarning}, {slog.LevelWarn + 1, journal.PriWarning}, {slog.LevelError, journal.PriErr}, {slog.LevelError + 4, journal.PriErr}} {
		if got := Priority(c.l); got != c.want {
			t.Errorf("Priority(%v) = %d, want %d", c.l, got, c.want)
		}
	}
}

func TestLevelFiltersAndSource(t *testing.T) {
	r, log := newTest(Options{Level: slog.LevelWarn, AddSource: true})
	log.Info("hidden")
	log.Warn("shown")
	e := r.only(t)
	if !strings.HasSuffix(e.fields["CODE_FILE"], "logging_test.go") || e.fields["CODE_LINE"] == "" || !strings.Contains(e.fields["CODE_FUNC"], "TestLevelFiltersAndSource") {
		t.Errorf("source fields wrong: %v", e.fields)
	}
}

func TestRefusedRecordsGoToFallback(t *testing.T) {
	r := &recorder{err: errors.New("journal socket gone")}
	var buf bytes.Buffer
	log := slog.New(NewJournalHandler(r.send, &buf, Options{}))
	log.With("volume", "scratch").Error("engine exited", "at", time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	if out := buf.String(); !strings.Contains(out, "engine exited") || !strings.Contains(out, "volume=scratch") {
		t.Errorf("fallback got %q, want the record as text", out)
	}
}

func TestNewWritesTextOffTheJournal(t *testing.T) {
	var buf bytes.Buffer
	New(&buf, Options{}).Info("claimed", "drive", "/dev/vdb")
	if out := buf.String(); !strings.Contains(out, "level=INFO") || !strings.Contains(out, "drive=/dev/vdb") {
		t.Errorf("text output %q", out)
	}
}
