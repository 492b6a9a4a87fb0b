//go:build linux

package ublk

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fabraid/fabraid/internal/vmtest"
)

// TestIntegrationUblkKernel7 runs the data-path core of TestIntegrationUblk
// on Debian sid's 7.x kernel (7.2.13 in December 2026), in one boot: the
// feature mask with the flags 6.12 lacks, O_DIRECT integrity with several
// queues and with USER_COPY, flush/FUA/discard, an engine volume whose
// member fails, and kill -9 + user recovery. The rest of
// TestIntegrationUblk (teardown paths, busy IDs) stays on 6.12 only, to
// keep make test short.
func TestIntegrationUblkKernel7(t *testing.T) {
	vmtest.RequireCaps(t, vmtest.Kernel7, "Ublk", "IOUring")
	vmtest.Run(t, vmtest.Options{
		Timeout: 6 * time.Minute,
		Guests: []vmtest.GuestConfig{{
			Name: "a7", Kernel: vmtest.Kernel7, Modules: []string{"ublk_drv"}, CPUs: 2,
			Files: map[string]string{"/usr/bin/fabraid": vmtest.BuildBinary(t, fabraidPkg)},
		}},
	}, func(t *testing.T, g *vmtest.Env) {
		ctl, err := OpenControl()
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		t.Run("Features", func(t *testing.T) { testFeatures7(t, ctl) })
		t.Run("IntegrityQueues2Depth4", func(t *testing.T) {
			testIntegrity(t, ctl, &Config{ID: AnyID, Queues: 2, Depth: 4, MaxIOBytes: 128 << 10, IOMin: 64 << 10, IOOpt: 128 << 10}, 4, 60)
		})
		t.Run("IntegrityUserCopyAsync", func(t *testing.T) {
			testIntegrity(t, ctl, &Config{ID: AnyID, Queues: 2, Depth: 16, UserCopy: true, Async: true}, 3, 60)
		})
		t.Run("FlushFUADiscard", func(t *testing.T) { testFlushFUADiscard(t, ctl) })
		t.Run("EngineVolumeMemberFails", func(t *testing.T) { testEngineVolume(t, ctl) })
		t.Run("RecoveryAfterKill", func(t *testing.T) {
			const size = 16 << 20
			img := "/tmp/ublk-recovery7.img"
			os.Remove(img)
			recoverRounds(t, fmt.Sprintf("file:%s:%d", img, size), size, 2)
		})
		if ids, _ := List(); len(ids) != 0 {
			t.Errorf("devices left behind: %v", ids)
		}
	})
}

// testFeatures7 checks the mask of a 7.x kernel: what fabraid uses today
// and the newer flags (zero copy with automatic buffer registration,
// online resize, quiesce) that it names.
func testFeatures7(t *testing.T, ctl *Control) {
	f := ctl.Features()
	t.Logf("GET_FEATURES: %#x %s", uint64(f), f)
	for _, want := range []Features{
		FeatureUserRecovery, FeatureRecoveryReissue, FeatureIoctlEncode, FeatureUserCopy, FeatureRecoveryFailIO,
		FeatureZeroCopy, FeatureUpdateSize, FeatureAutoBufReg, FeatureQuiesce, FeaturePerIODaemon, FeatureBufRegOffDaemon,
	} {
		if f&want == 0 {
			t.Errorf("7.x lacks %s", want)
		}
	}
	if err := HaveFeatures(FeatureAutoBufReg | FeatureUpdateSize | FeatureRecoveryFailIO); err != nil {
		t.Errorf("HaveFeatures: %v", err)
	}
	// The CLI (and so fabraid doctor, which uses the same names) names them.
	out, err := exec.Command("/usr/bin/fabraid", "ublk", "features").CombinedOutput()
	if err != nil {
		t.Fatalf("fabraid ublk features: %v\n%s", err, out)
	}
	t.Logf("fabraid ublk features: %s", strings.TrimSpace(string(out)))
	for _, name := range []string{"ZERO_COPY", "USER_COPY", "UPDATE_SIZE", "AUTO_BUF_REG", "QUIESCE", "PER_IO_DAEMON", "BUF_REG_OFF_DAEMON"} {
		if !strings.Contains(string(out), name) {
			t.Errorf("fabraid ublk features does not name %s: %s", name, out)
		}
	}
}
