package ublk

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
)

// ErrNotSupported is wrapped by errors that name a missing kernel feature:
// errors.Is(err, ErrNotSupported) means the kernel cannot do what was asked,
// and the message says what is required.
var ErrNotSupported = errors.New("not supported")

// Features is a set of UBLK_F_* feature flags, as GET_FEATURES reports them
// and as a device was created with.
type Features uint64

// Feature flags (include/uapi/linux/ublk_cmd.h), with the first mainline
// kernel that has them.
const (
	FeatureZeroCopy        Features = ublksys.UBLK_F_SUPPORT_ZERO_COPY      // functional from 6.15
	FeatureCompInTask      Features = ublksys.UBLK_F_URING_CMD_COMP_IN_TASK // 6.0
	FeatureNeedGetData     Features = ublksys.UBLK_F_NEED_GET_DATA          // 6.0
	FeatureUserRecovery    Features = ublksys.UBLK_F_USER_RECOVERY          // 6.1
	FeatureRecoveryReissue Features = ublksys.UBLK_F_USER_RECOVERY_REISSUE  // 6.1
	FeatureUnprivileged    Features = ublksys.UBLK_F_UNPRIVILEGED_DEV       // 6.3
	FeatureIoctlEncode     Features = ublksys.UBLK_F_CMD_IOCTL_ENCODE       // 6.3
	FeatureUserCopy        Features = ublksys.UBLK_F_USER_COPY              // 6.5
	FeatureZoned           Features = ublksys.UBLK_F_ZONED                  // 6.6
	FeatureRecoveryFailIO  Features = ublksys.UBLK_F_USER_RECOVERY_FAIL_IO  // 6.13

	// Newer flags (UBLK_F_* bits 10-19 of the uapi header). fabraid uses
	// AUTO_BUF_REG (zero-copy reads, Config.NoZeroCopy); the others it
	// names when the kernel reports them (fabraid ublk features, fabraid
	// doctor).
	FeatureUpdateSize      Features = 1 << 10 // UPDATE_SIZE: UBLK_U_CMD_UPDATE_SIZE resizes a live device; 6.16
	FeatureAutoBufReg      Features = 1 << 11 // AUTO_BUF_REG: the request buffer is registered in the server's io_uring before delivery (zero copy without register/unregister commands); 6.16
	FeatureQuiesce         Features = 1 << 12 // QUIESCE: UBLK_U_CMD_QUIESCE_DEV (server upgrade with the device kept); 6.16
	FeaturePerIODaemon     Features = 1 << 13 // PER_IO_DAEMON: each (queue, tag) may have its own server task; 6.17
	FeatureBufRegOffDaemon Features = 1 << 14 // BUF_REG_OFF_DAEMON: zero-copy buffers (un)registered from any task; 6.17
	FeatureBatchIO         Features = 1 << 15 // BATCH_IO: fetch and commit many requests per command; 7.0
	FeatureIntegrity       Features = 1 << 16 // INTEGRITY: requests with integrity (PI) buffers; 7.0
	FeatureSafeStopDev     Features = 1 << 17 // SAFE_STOP_DEV: UBLK_U_CMD_TRY_STOP_DEV (stop only without openers); 7.0
	FeatureNoAutoPartScan  Features = 1 << 18 // NO_AUTO_PART_SCAN: no partition scan at START_DEV; 7.0
	FeatureShmemZC         Features = 1 << 19 // SHMEM_ZC: zero copy through registered shared memory (UBLK_U_CMD_REG_BUF); 7.1
)

var featureNames = []struct {
	f       Features
	name    string
	version string
}{
	{FeatureZeroCopy, "ZERO_COPY", "6.15"},
	{FeatureCompInTask, "URING_CMD_COMP_IN_TASK", "6.0"},
	{FeatureNeedGetData, "NEED_GET_DATA", "6.0"},
	{FeatureUserRecovery, "USER_RECOVERY", "6.1"},
	{FeatureRecoveryReissue, "USER_RECOVERY_REISSUE", "6.1"},
	{FeatureUnprivileged, "UNPRIVILEGED_DEV", "6.3"},
	{FeatureIoctlEncode, "CMD_IOCTL_ENCODE", "6.3"},
	{FeatureUserCopy, "USER_COPY", "6.5"},
	{FeatureZoned, "ZONED", "6.6"},
	{FeatureRecoveryFailIO, "USER_RECOVERY_FAIL_IO", "6.13"},
	{FeatureUpdateSize, "UPDATE_SIZE", "6.16"},
	{FeatureAutoBufReg, "AUTO_BUF_REG", "6.16"},
	{FeatureQuiesce, "QUIESCE", "6.16"},
	{FeaturePerIODaemon, "PER_IO_DAEMON", "6.17"},
	{FeatureBufRegOffDaemon, "BUF_REG_OFF_DAEMON", "6.17"},
	{FeatureBatchIO, "BATCH_IO", "7.0"},
	{FeatureIntegrity, "INTEGRITY", "7.0"},
	{FeatureSafeStopDev, "SAFE_STOP_DEV", "7.0"},
	{FeatureNoAutoPartScan, "NO_AUTO_PART_SCAN", "7.0"},
	{FeatureShmemZC, "SHMEM_ZC", "7.1"},
}

// String lists the flags by their uapi names: "USER_RECOVERY|USER_COPY".
// Unknown bits print as hex.
func (f Features) String() string {
	var parts []string
	rest := f
	for _, n := range featureNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
			rest &^= n.f
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint64(rest)))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// Names returns the uapi names of the set flags (without the UBLK_F_ prefix).
func (f Features) Names() []string {
	var out []string
	for _, n := range featureNames {
		if f&n.f != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// missingError describes the first flag of want that have lacks.
func missingError(want, have Features) error {
	miss := want &^ have
	if miss == 0 {
		return nil
	}
	bit := Features(1) << bits.TrailingZeros64(uint64(miss))
	for _, n := range featureNames {
		if n.f == bit {
			return fmt.Errorf("ublk feature %s: %w (requires Linux >= %s, or a distribution kernel that backports it)", n.name, ErrNotSupported, n.version)
		}
	}
	return fmt.Errorf("ublk feature %#x: %w", uint64(bit), ErrNotSupported)
}
