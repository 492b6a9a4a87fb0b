// Package logging builds the slog loggers of fabraid's programs.
//
// Under systemd, a program whose stderr is connected to the journal
// (systemd sets JOURNAL_STREAM for it) logs through journald's native
// protocol: every record is one journal entry whose attributes are journal
// fields, so an admin can filter with them:
//
//	journalctl -u 'fabraid-engine@*' VOLUME=scratch PRIORITY=3
//	journalctl -o json -u fabraidd
//
// The entry's MESSAGE is the record's message followed by its attributes in
// logfmt (key=value), so plain journalctl output stays readable. Attribute
// keys become field names in upper case, groups joined with '_' ("engine"
// in group "task" -> TASK_ENGINE); characters journald does not accept become
// '_'; a key that would collide with a field journald or journalctl give a
// meaning to (MESSAGE, PRIORITY, CODE_FILE, ...) is prefixed with "ATTR_".
//
// Everywhere else (a terminal, a log file, a pipe) records are logfmt text
// on the writer (slog.TextHandler). If the journal refuses a record, it is
// written as text to stderr instead, so nothing is lost.
package logging
