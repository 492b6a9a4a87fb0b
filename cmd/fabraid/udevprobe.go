package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/spf13/cobra"
)

// udev-probe is run by udev (IMPORT{program}, packaging/udev/) for every
// block device add/change event. It must be fast and must never block for
// long: it reads the superblock area only (MetaEnd bytes, one read), talks to
// nobody and prints KEY=VALUE lines that udev imports only on exit 0. The
// rule runs it only on the device types the drive inventory can claim;
// udev_probe = false in the configuration stops it before it reads.

// headLookupTimeout bounds the daemon lookup of udev-probe --volume: udev
// must not wait on a daemon that is busy or not running.
const headLookupTimeout = 3 * time.Second

func newUdevProbeCmd() *cobra.Command {
	var volume string
	cmd := &cobra.Command{
		Use:   "udev-probe DEVNODE | udev-probe --volume UUID",
		Short: "Print a fabraid member's superblock as udev KEY=VALUE lines (for udev rules)",
		Long: `Read the fabraid superblock of DEVNODE (both copies; the newer valid one wins)
and print FABRAID_MEMBER=1, FABRAID_VOLUME_UUID, FABRAID_VOLUME_NAME,
FABRAID_SLOT, FABRAID_MEMBER_UUID, FABRAID_DOMAIN and FABRAID_EVENTS as
KEY=VALUE lines for udev's IMPORT{program}. Values contain only
[A-Za-z0-9._+-] (other bytes become '_'); a value that would be empty, "." or
".." is left out. Reads only the first 20 KiB of the device.

With udev_probe = false in the configuration (--config) it reads nothing and
exits 1: udev then sees no member.

Exit codes: 0 a member (lines printed), 1 not a fabraid member, unreadable or
udev_probe = false (nothing printed, the reason on stderr), 2 bad usage.

With --volume UUID (for a volume's consumer device, the NVMe head whose
namespace UUID is the volume UUID) it asks fabraidd, for at most 3 s, for
the volume's name and prints FABRAID_VOLUME_UUID and FABRAID_VOLUME_NAME;
exit 1 when the daemon does not know the volume or does not answer in time.`,
		Example: `  IMPORT{program}="/usr/bin/fabraid udev-probe $devnode"
  IMPORT{program}="/usr/bin/fabraid udev-probe --volume $attr{uuid}"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if volume != "" {
				if len(args) != 0 {
					return &exitError{code: 2, err: errors.New("udev-probe: DEVNODE and --volume exclude each other")}
				}
				return probeHead(cmd, volume)
			}
			if len(args) != 1 {
				return &exitError{code: 2, err: errors.New("udev-probe: want one DEVNODE")}
			}
			path, _ := cmd.Flags().GetString("config")
			if !udevProbeEnabled(cmd, path) {
				return &exitError{code: 1, err: fmt.Errorf("udev-probe: udev_probe = false in %s: %s not read", path, args[0])}
			}
			sb, err := probeDevice(args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			_, err = io.WriteString(cmd.OutOrStdout(), strings.Join(probeLines(sb), "\n")+"\n")
			return err
		},
	}
	cmd.Flags().StringVar(&volume, "volume", "", "print the name of the volume with this UUID (asks fabraidd)")
	cmd.Flags().String("config", config.DefaultPath, "configuration file (udev_probe; api_socket)")
	cmd.Flags().String("socket", "", "fabraidd API socket (default: api_socket from the configuration)")
	return cmd
}

// udevProbeEnabled reports the udev_probe key of the configuration at path
// (true when the file is missing). A file that does not parse for another
// reason still has its udev_probe line honoured: an admin's "no probing"
// must not turn into probing over a typo elsewhere.
func udevProbeEnabled(cmd *cobra.Command, path string) bool {
	c, err := config.LoadOrDefault(path)
	if err == nil {
		return c.UdevProbe
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "udev-probe: %v (reading udev_probe alone)\n", err)
	v, found, lerr := config.Lookup(path, "udev_probe")
	if lerr != nil || !found {
		return true
	}
	c, err = config.Parse(strings.NewReader("udev_probe = "+v+"\n"), path)
	return err != nil || c.UdevProbe
}

// probeHead prints the UUID and name of volume uuid as fabraidd knows it.
// The daemon is asked in a goroutine so that a busy socket cannot hold the
// udev worker beyond headLookupTimeout.
func probeHead(cmd *cobra.Command, uuid string) error {
	u, err := volid.ParseUUID(uuid)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	c, err := apiClient(cmd)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	type answer struct {
		info api.Volume
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		in, err := c.Volume(volid.Format(u))
		ch <- answer{in, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-time.After(headLookupTimeout):
		return &exitError{code: 1, err: fmt.Errorf("volume %s: fabraidd did not answer in %v", uuid, headLookupTimeout)}
	}
	if a.err != nil {
		return &exitError{code: 1, err: fmt.Errorf("volume %s: %w", uuid, a.err)}
	}
	name := udevSafe(a.info.Name)
	if name == "" {
		return &exitError{code: 1, err: fmt.Errorf("volume %s: no usable name", uuid)}
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "FABRAID_VOLUME_UUID=%s\nFABRAID_VOLUME_NAME=%s\n", volid.Format(u), name)
	return err
}

// probeDevice reads the superblock area of path and returns its newer valid
// copy (superblock.ReadCopies). It tries O_DIRECT first, so a member written
// by another node is not answered from a stale page cache, and falls back to
// a buffered read where O_DIRECT is refused (regular files on tmpfs).
func probeDevice(path string) (*superblock.Superblock, error) {
	area, err := readMetaArea(path, syscall.O_DIRECT)
	if errors.Is(err, syscall.EINVAL) {
		area, err = readMetaArea(path, 0)
	}
	if err != nil {
		return nil, err
	}
	sb, err := superblock.ReadCopies(bytes.NewReader(area))
	if err != nil {
		return nil, fmt.Errorf("%s: not a fabraid member: %w", path, err)
	}
	return sb, nil
}

// readMetaArea reads up to superblock.MetaEnd bytes from offset 0 of path
// into a 4 KiB-aligned buffer (what O_DIRECT needs). A shorter device
// returns what it has; ReadCopies then rejects it.
func readMetaArea(path string, flags int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|flags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const align = 4096
	raw := make([]byte, superblock.MetaEnd+align)
	off := int(uintptr(unsafe.Pointer(&raw[0])) & (align - 1))
	if off != 0 {
		off = align - off
	}
	buf := raw[off : off+superblock.MetaEnd]
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return buf[:n], nil
}

// probeLines formats sb as udev KEY=VALUE lines. Every value is
// udevSafe; optional values that are empty after that are left out.
func probeLines(sb *superblock.Superblock) []string {
	lines := []string{
		"FABRAID_MEMBER=1",
		"FABRAID_VOLUME_UUID=" + volid.Format(sb.VolumeUUID),
	}
	if n := udevSafe(sb.Name); n != "" {
		lines = append(lines, "FABRAID_VOLUME_NAME="+n)
	}
	lines = append(lines,
		"FABRAID_SLOT="+strconv.Itoa(sb.Slot),
		"FABRAID_MEMBER_UUID="+volid.Format(sb.MemberUUID),
	)
	if sb.Slot >= 0 && sb.Slot < len(sb.Members) {
		if d := udevSafe(sb.Members[sb.Slot].Domain); d != "" {
			lines = append(lines, "FABRAID_DOMAIN="+d)
		}
	}
	return append(lines, "FABRAID_EVENTS="+strconv.FormatUint(sb.Events, 10))
}

// udevSafe maps s to a value that is safe unquoted in udev's IMPORT parser,
// in a shell and as one path component of a symlink: only [A-Za-z0-9._+-]
// remain, every other byte becomes '_'. "", "." and ".." map to "".
func udevSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == '+', c == '-':
		default:
			b[i] = '_'
		}
	}
	if out := string(b); out != "." && out != ".." {
		return out
	}
	return ""
}
