package doctor

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText prints the report for a human: one line per check, the fix
// under each problem, and a summary.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "kernel %s\n", r.Kernel)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Healthy() {
		_, err := fmt.Fprintln(w, "this node has everything fabraid needs")
		return err
	}
	_, err := fmt.Fprintln(w, "this node is missing required pieces (see fix lines above)")
	return err
}
