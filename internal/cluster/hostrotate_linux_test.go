//go:build linux

package cluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rotateHostKeyUnderIO is the host key rotation step of
// TestIntegrationClusterVolume, on a (the owner: its member imports from b
// and c authenticate with a's host key): it writes the scratch window
// through a's volume device without pause while "fabraid cluster
// rotate-keys --host" runs. It fails on a write error, a node that did not
// acknowledge, a member controller that is gone or presents the old
// dhchap_secret afterwards, or a volume that is not optimal with every
// member active.
func rotateHostKeyUnderIO(t *testing.T, start time.Time, dev string) {
	t.Helper()
	before := memberSecrets(t)
	if len(before) == 0 {
		t.Fatal("a has no member controllers to b and c")
	}
	stop := make(chan struct{})
	werr := make(chan error, 1)
	writes := 0
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				werr <- nil
				return
			default:
			}
			if _, err := writeAt(dev, int64(windowOff+(i%4)*(64<<10)), 64<<10, uint64(2000+i)); err != nil {
				werr <- err
				return
			}
			writes++
		}
	}()
	t0 := time.Now()
	out, err := fabraid(t, "cluster", "rotate-keys", "--host")
	close(stop)
	if werr := <-werr; werr != nil {
		t.Fatalf("a write through %s failed during the host key rotation: %v", dev, werr)
	}
	if err != nil {
		t.Fatalf("rotate-keys --host: %v: %s", err, out)
	}
	if strings.Contains(out, "not acknowledged") {
		t.Fatalf("rotate-keys --host: %s; want every node's acknowledgement", out)
	}
	step(t, start, "host key rotated in %.1f s under %d writes of 64 KiB through %s, none failed: %s", time.Since(t0).Seconds(), writes, dev, strings.TrimSpace(out))
	after := memberSecrets(t)
	for name, old := range before {
		now, ok := after[name]
		if !ok || now == old {
			t.Errorf("member controller %s after the rotation: live %v, new dhchap_secret %v", name, ok, now != old)
		}
	}
	in := showVolume(t)
	for _, m := range in.Members {
		if m.Role != "active" {
			t.Errorf("member %d (%s) is %s (%s) after the host key rotation", m.Slot, m.Domain, m.Role, m.Failure)
		}
	}
	if in.State != "optimal" {
		t.Fatalf("volume %s after the host key rotation", in.State)
	}
	step(t, start, "%d member controllers kept, each re-keyed; volume optimal, every member active", len(before))
}

// memberSecrets are the dhchap_secret attributes of this node's live
// controllers to drive exports, by controller name (sysfs).
func memberSecrets(t *testing.T) map[string]string {
	t.Helper()
	dirs, err := filepath.Glob("/sys/class/nvme/nvme*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range dirs {
		nqn, _ := os.ReadFile(filepath.Join(d, "subsysnqn"))
		state, _ := os.ReadFile(filepath.Join(d, "state"))
		sec, err := os.ReadFile(filepath.Join(d, "dhchap_secret"))
		if err != nil || !strings.Contains(string(nqn), ":drive:") || strings.TrimSpace(string(state)) != "live" {
			continue
		}
		out[filepath.Base(d)] = strings.TrimSpace(string(sec))
	}
	return out
}
