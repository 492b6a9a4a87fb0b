package ublk

import (
	"errors"
	"strings"
	"testing"
)

// The mask Debian's 7.2.13 answers to GET_FEATURES (0xfffff) decodes to
// every flag by its uapi name, the newer ones included, in bit order.
func TestFeatures72(t *testing.T) {
	f := Features(0xfffff)
	want := []string{"ZERO_COPY", "URING_CMD_COMP_IN_TASK", "NEED_GET_DATA", "USER_RECOVERY", "USER_RECOVERY_REISSUE",
		"UNPRIVILEGED_DEV", "CMD_IOCTL_ENCODE", "USER_COPY", "ZONED", "USER_RECOVERY_FAIL_IO",
		"UPDATE_SIZE", "AUTO_BUF_REG", "QUIESCE", "PER_IO_DAEMON", "BUF_REG_OFF_DAEMON",
		"BATCH_IO", "INTEGRITY", "SAFE_STOP_DEV", "NO_AUTO_PART_SCAN", "SHMEM_ZC"}
	if got := f.Names(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Names() = %v\nwant %v", got, want)
	}
	if got := f.String(); got != strings.Join(want, "|") {
		t.Errorf("String() = %q", got)
	}
	// Each name is its uapi bit (include/uapi/linux/ublk_cmd.h).
	for bit, name := range map[uint]string{10: "UPDATE_SIZE", 11: "AUTO_BUF_REG", 12: "QUIESCE", 13: "PER_IO_DAEMON", 14: "BUF_REG_OFF_DAEMON", 19: "SHMEM_ZC"} {
		if got := Features(1 << bit).String(); got != name {
			t.Errorf("bit %d = %q, want %s", bit, got, name)
		}
	}
	// 6.12's mask has none of them; asking for one names its kernel.
	if err := missingError(FeatureAutoBufReg, 0x1fe); !errors.Is(err, ErrNotSupported) ||
		!strings.Contains(err.Error(), "AUTO_BUF_REG") || !strings.Contains(err.Error(), "6.16") {
		t.Errorf("missingError(AUTO_BUF_REG) on 6.12: %v", err)
	}
	if got := Features(1 << 20).String(); got != "0x100000" {
		t.Errorf("bit 20 (unknown): %q", got)
	}
}
