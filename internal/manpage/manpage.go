// Package manpage adds a hidden "man" command to a cobra command tree that
// writes one roff man page per visible command (cobra/doc), so that
// packages ship man pages generated from the same definitions as --help.
// fabraidd's tree also gets what no help text holds: fabraidd(8) gains
// operation, systemd, signals, exit status, files and environment
// sections, and fabraid.conf(5) is written from the configuration file the
// package installs (package packaging). The page date is SOURCE_DATE_EPOCH
// when set (reproducible builds).
package manpage

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/fabraid/fabraid/packaging"
)

// Command returns the hidden command "man DIR": it writes the man pages of
// its root command, in the given manual section ("1" for user commands,
// "8" for daemons), into DIR. source names the program and version in the
// page footer.
func Command(section, source string) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write the man pages of every command into DIR (used by packaging)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.DisableAutoGenTag = true
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			date := pageDate()
			hdr := &doc.GenManHeader{Section: section, Source: source, Manual: "fabraid manual", Date: &date}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			if root.Name() != "fabraidd" {
				return nil
			}
			return writeDaemonPages(args[0], section, date, source)
		},
	}
}

// writeDaemonPages completes fabraidd(8) and writes fabraid.conf(5).
func writeDaemonPages(dir, section string, date time.Time, source string) error {
	page := filepath.Join(dir, "fabraidd."+section)
	b, err := os.ReadFile(page)
	if err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	if err := os.WriteFile(page, withDaemonSections(b), 0o644); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fabraid.conf.5"), ConfPage(packaging.DefaultConfig, date, source), 0o644); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	return nil
}

// pageDate is SOURCE_DATE_EPOCH when set, else now.
func pageDate() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Now().UTC()
}
