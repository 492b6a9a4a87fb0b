package config

import (
	"slices"
	"strings"
	"testing"
)

// TestNVMeTLS: nvme_tls is off by default, takes off, on and required,
// and anything else is an error that names the file, line, key and the
// values it takes; Keys lists it.
func TestNVMeTLS(t *testing.T) {
	if m := Default().Cluster.NVMeTLS; m != "off" {
		t.Fatalf("nvme_tls defaults to %q, want off", m)
	}
	for in, want := range map[string]string{"": "off", "nvme_tls = off\n": "off", "nvme_tls = on\n": "on", "nvme_tls = required\n": "required"} {
		c, err := Parse(strings.NewReader(in), "t.conf")
		if err != nil || c.Cluster.NVMeTLS != want || len(c.Warnings) > 0 {
			t.Errorf("%q: nvme_tls %q, err %v, warnings %v; want %q", in, c.Cluster.NVMeTLS, err, c.Warnings, want)
		}
	}
	for _, bad := range []string{"true", "yes", "Required", "tls1.3", ""} {
		_, err := Parse(strings.NewReader("\nnvme_tls = "+bad+"\n"), "t.conf")
		if err == nil || !strings.Contains(err.Error(), "t.conf:2: nvme_tls:") || !strings.Contains(err.Error(), "want off, on") {
			t.Errorf("nvme_tls = %q: %v", bad, err)
		}
	}
	if !slices.Contains(Keys(), "nvme_tls") {
		t.Errorf("Keys() lacks nvme_tls: %v", Keys())
	}
}
