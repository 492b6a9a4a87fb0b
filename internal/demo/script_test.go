package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The guests' scripts parse (sh -n): a syntax error would show only when
// make demo has booted its guests, minutes in.
func TestScriptsParse(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this host")
	}
	for name, text := range map[string]string{"cluster": clusterScript, "node": guestScript + nodeScript} {
		cmd := exec.Command(sh, "-n")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s script: %v\n%s", name, err, out)
		}
	}
}
