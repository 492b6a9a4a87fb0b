// Package manpage adds a hidden "man" command to a cobra command tree that
// writes one roff man page per visible command (cobra/doc), so that
// packages ship man pages generated from the same definitions as --help.
// The page date is SOURCE_DATE_EPOCH when set (reproducible builds).
package manpage

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
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
			hdr := &doc.GenManHeader{Section: section, Source: source, Manual: "fabraid manual"}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return nil
		},
	}
}
