package drive

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabraid/fabraid/internal/durable"
	"github.com/fabraid/fabraid/internal/volid"
)

// Host names the places a drive's state is read from; the zero value is not
// valid, use System or set every field (tests point them at fake trees).
type Host struct {
	SysBlock  string // /sys/block
	Dev       string // /dev
	MountInfo string // /proc/self/mountinfo
	Swaps     string // /proc/swaps
	StateDir  string // <state_dir>; claims live in StateDir/drives
	// opened, when set, is told of every device node the inventory
	// opens to probe it (tests count the probes).
	opened func(path string)
}

// System returns the Host of the running system with claims under stateDir.
func System(stateDir string) Host {
	return Host{SysBlock: "/sys/block", Dev: "/dev", MountInfo: "/proc/self/mountinfo", Swaps: "/proc/swaps", StateDir: stateDir}
}

// Drive is one local drive as the inventory sees it.
type Drive struct {
	Name       string   `json:"name"` // "nvme0n1", "vda"
	Path       string   `json:"path"` // "/dev/nvme0n1"
	ID         string   `json:"id"`   // stable id: serial, else wwid, else name
	Model      string   `json:"model,omitempty"`
	Serial     string   `json:"serial,omitempty"`
	Size       int64    `json:"size"`
	DevNum     string   `json:"devnum"` // "major:minor"
	Partitions []string `json:"partitions,omitempty"`
	Holders    []string `json:"holders,omitempty"`
	// State is "claimed" (recorded in the state dir), "available" (no
	// reason to refuse it) or "in-use" (see Reasons).
	State   string   `json:"state"`
	Reasons []string `json:"reasons,omitempty"`
	// Spare: a claimed drive kept for replacements (Claim.Spare).
	Spare bool `json:"spare,omitempty"`
}

// Claim is the record of a claimed drive.
type Claim struct {
	ID      string    `json:"id"`
	Path    string    `json:"path"` // path at claim time
	Serial  string    `json:"serial,omitempty"`
	Model   string    `json:"model,omitempty"`
	Size    int64     `json:"size"`
	Forced  bool      `json:"forced,omitempty"`
	Claimed time.Time `json:"claimed"`
	// Spare: the drive is kept for replacements (a failed member's, a
	// down node's) and gets no new volume's member.
	Spare bool `json:"spare,omitempty"`
}

// ErrRefused is wrapped by Claim when a drive may not be claimed.
var ErrRefused = errors.New("drive refused")

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// NotDrivePrefixes are the /sys/block name prefixes the inventory never
// lists: loop, ram, zram, dm, md, fabraid's own ublk devices, optical, nbd,
// floppy. packaging/udev/69-fabraid.rules probes none of them either
// (cmd/fabraid's rule test checks it against this list).
var NotDrivePrefixes = []string{"loop", "ram", "zram", "dm-", "md", "ublkb", "sr", "nbd", "fd"}

// skip reports whether a /sys/block entry is not a drive fabraid may use:
// a NotDrivePrefixes name, a hidden device (an NVMe multipath path) or one
// of fabraid's exported volumes. Partitions are never listed (only
// /sys/block entries are).
func (h Host) skip(name string) bool {
	for _, p := range NotDrivePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	if readTrim(filepath.Join(h.SysBlock, name, "hidden")) == "1" {
		return true
	}
	// fabraid's own exported volumes (multipath heads of our subsystems).
	for _, p := range []string{"device/subsysnqn", "device/device/subsysnqn"} {
		if strings.HasPrefix(readTrim(filepath.Join(h.SysBlock, name, p)), volid.NQNPrefix) {
			return true
		}
	}
	return false
}

// Inventory lists the drives with their state.
func (h Host) Inventory() ([]Drive, error) {
	ents, err := os.ReadDir(h.SysBlock)
	if err != nil {
		return nil, fmt.Errorf("drive inventory: %w", err)
	}
	claims, err := h.Claims()
	if err != nil {
		return nil, err
	}
	mounts := h.mountedDevs()
	var out []Drive
	for _, e := range ents {
		if h.skip(e.Name()) {
			continue
		}
		d := h.read(e.Name())
		d.Reasons = h.reasons(d, mounts, 1)
		switch {
		case claims[d.ID] != nil:
			d.State, d.Spare = "claimed", claims[d.ID].Spare
		case len(d.Reasons) == 0:
			d.State = "available"
		default:
			d.State = "in-use"
		}
		out = append(out, d)
	}
	return out, nil
}

func (h Host) read(name string) Drive {
	dir := filepath.Join(h.SysBlock, name)
	d := Drive{Name: name, Path: filepath.Join(h.Dev, name), DevNum: readTrim(filepath.Join(dir, "dev"))}
	if n, err := strconv.ParseInt(readTrim(filepath.Join(dir, "size")), 10, 64); err == nil {
		d.Size = n * 512 // sysfs size is in 512-byte sectors regardless of the block size
	}
	d.Model = readTrim(filepath.Join(dir, "device/model"))
	for _, p := range []string{"device/serial", "serial"} {
		if s := readTrim(filepath.Join(dir, p)); s != "" {
			d.Serial = s
			break
		}
	}
	wwid := readTrim(filepath.Join(dir, "wwid"))
	if wwid == "" {
		wwid = readTrim(filepath.Join(dir, "device/wwid"))
	}
	switch {
	case d.Serial != "":
		d.ID = sanitize(d.Serial)
	case wwid != "":
		d.ID = sanitize(wwid)
	default:
		d.ID = name
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "partition")); err == nil {
				d.Partitions = append(d.Partitions, e.Name())
			}
		}
	}
	for _, sub := range append([]string{""}, d.Partitions...) {
		if ents, err := os.ReadDir(filepath.Join(dir, sub, "holders")); err == nil {
			for _, e := range ents {
				d.Holders = append(d.Holders, e.Name())
			}
		}
	}
	return d
}

// sanitize makes an id usable as a file name and in an NQN.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// mountedDevs returns the major:minor of every mounted or swapped-on device.
func (h Host) mountedDevs() map[string]string {
	out := map[string]string{}
	if b, err := os.ReadFile(h.MountInfo); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 {
				out[f[2]] = f[4]
			}
		}
	}
	if b, err := os.ReadFile(h.Swaps); err == nil {
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 0 {
				if st := readTrim(filepath.Join(h.SysBlock, filepath.Base(f[0]), "dev")); st != "" {
					out[st] = "swap"
				}
			}
		}
	}
	return out
}

func (h Host) mountedAt(d Drive, mounts map[string]string) string {
	if m, ok := mounts[d.DevNum]; ok {
		return m
	}
	for _, p := range d.Partitions {
		if m, ok := mounts[readTrim(filepath.Join(h.SysBlock, d.Name, p, "dev"))]; ok {
			return m
		}
	}
	return ""
}

// reasons lists why d may not be claimed. The first reason, when the drive is
// mounted, starts with "mounted".
//
// The exclusive open is tried up to tries times (openExclusive).
func (h Host) reasons(d Drive, mounts map[string]string, tries int) []string {
	var r []string
	if m := h.mountedAt(d, mounts); m != "" {
		r = append(r, "mounted at "+m)
	}
	if len(d.Partitions) > 0 {
		r = append(r, "has partitions "+strings.Join(d.Partitions, ","))
	}
	if len(d.Holders) > 0 {
		r = append(r, "held by "+strings.Join(d.Holders, ","))
	}
	if h.opened != nil {
		h.opened(d.Path)
	}
	f, err := openExclusive(d.Path, os.O_RDONLY, tries)
	switch {
	case err == nil:
		for _, s := range Detect(f, d.Size) {
			desc := s.Type
			if s.Detail != "" {
				desc = s.Detail
			}
			r = append(r, fmt.Sprintf("%s signature at byte %d", desc, s.Offset))
		}
		f.Close()
	case errors.Is(err, os.ErrNotExist):
		r = append(r, "no device node "+d.Path)
	default:
		// EBUSY: a mounted filesystem, md, dm or another O_EXCL opener.
		r = append(r, fmt.Sprintf("%s (%v)", busyReason, unwrapPath(err)))
	}
	return r
}

// exclusiveTries and exclusiveWait bound how long a claim waits out
// another exclusive opener: the inventory's own probes (fabraidd's drive
// scan, another claim) open every drive O_EXCL for a moment, while md, dm,
// a mount or a running member hold it for good. Scans try once: drives
// held by running members would cost them the whole wait.
const (
	exclusiveTries = 25
	exclusiveWait  = 20 * time.Millisecond
)

// openExclusive opens a block device with O_EXCL (refused while anything
// holds it exclusively), trying up to tries times exclusiveWait apart
// while it is refused with EBUSY.
func openExclusive(path string, flag, tries int) (*os.File, error) {
	for try := 1; ; try++ {
		f, err := os.OpenFile(path, flag|os.O_EXCL, 0)
		if err == nil || !errors.Is(err, syscall.EBUSY) || try >= tries {
			return f, err
		}
		time.Sleep(exclusiveWait)
	}
}

// busyReason starts the reason of a drive another opener holds
// exclusively.
const busyReason = "cannot open exclusively"

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Find returns the drive named by dev: "/dev/vda", "vda" or a drive id.
func (h Host) Find(dev string) (Drive, error) {
	ds, err := h.Inventory()
	if err != nil {
		return Drive{}, err
	}
	name := dev
	if p, err := filepath.EvalSymlinks(dev); err == nil {
		name = p
	}
	name = filepath.Base(name)
	for _, d := range ds {
		if d.Name == name || d.ID == dev {
			return d, nil
		}
	}
	return Drive{}, fmt.Errorf("drive %s: not found among local drives (see fabraid drive list)", dev)
}

// Claim claims the drive dev for fabraid. See the package documentation.
func (h Host) Claim(dev string, force bool) (Claim, error) {
	return h.ClaimSpare(dev, force, false)
}

// ClaimSpare is Claim, recording the drive as a spare when spare. A drive
// claimed already keeps its claim (SetSpare changes it).
func (h Host) ClaimSpare(dev string, force, spare bool) (Claim, error) {
	d, err := h.Find(dev)
	if err != nil {
		return Claim{}, err
	}
	if d.State == "claimed" {
		c, err := h.claim(d.ID)
		if err != nil {
			return Claim{}, err
		}
		return *c, nil
	}
	if slices.ContainsFunc(d.Reasons, func(r string) bool { return strings.HasPrefix(r, busyReason) }) {
		// The scan tried once; a claim waits out a probe's momentary hold.
		d.Reasons = h.reasons(d, h.mountedDevs(), exclusiveTries)
	}
	if len(d.Reasons) > 0 {
		if strings.HasPrefix(d.Reasons[0], "mounted") {
			return Claim{}, fmt.Errorf("%w: %s: %s (never claimed, even with --force)", ErrRefused, d.Path, strings.Join(d.Reasons, "; "))
		}
		if !force {
			return Claim{}, fmt.Errorf("%w: %s: %s (--force claims it anyway and wipes it)", ErrRefused, d.Path, strings.Join(d.Reasons, "; "))
		}
	}
	if err := wipe(d.Path, d.Size, force); err != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", d.Path, err)
	}
	c := Claim{ID: d.ID, Path: d.Path, Serial: d.Serial, Model: d.Model, Size: d.Size, Forced: force && len(d.Reasons) > 0, Claimed: time.Now().UTC(),
		Spare: spare}
	b, _ := json.MarshalIndent(c, "", "  ")
	dir := filepath.Join(h.StateDir, "drives")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", d.Path, err)
	}
	if err := durable.SyncDir(h.StateDir); err != nil { // the drives directory's entry
		return Claim{}, fmt.Errorf("claim %s: %w", d.Path, err)
	}
	// Durable: a claim lost in a power cut leaves the drive's members
	// unexported after the boot.
	if err := durable.WriteFile(filepath.Join(dir, d.ID+".json"), b, 0o600); err != nil {
		return Claim{}, fmt.Errorf("claim %s: %w", d.Path, err)
	}
	return c, nil
}

// wipe zeroes the first and last MiB of the device.
func wipe(path string, size int64, force bool) error {
	f, err := openExclusive(path, os.O_WRONLY, exclusiveTries)
	if force { // --force: claim even when someone holds it open
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
	}
	if err != nil {
		return err
	}
	zero := make([]byte, min(size, ScanBytes))
	if _, err := f.WriteAt(zero, 0); err != nil {
		f.Close()
		return fmt.Errorf("wipe: %w", err)
	}
	if _, err := f.WriteAt(zero, size-int64(len(zero))); err != nil {
		f.Close()
		return fmt.Errorf("wipe: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("wipe: %w", err)
	}
	return f.Close()
}

func (h Host) claim(id string) (*Claim, error) {
	b, err := os.ReadFile(filepath.Join(h.StateDir, "drives", id+".json"))
	if err != nil {
		return nil, err
	}
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("claim record %s: %w", id, err)
	}
	return &c, nil
}

// Claims returns the recorded claims by drive id.
func (h Host) Claims() (map[string]*Claim, error) {
	out := map[string]*Claim{}
	ents, err := os.ReadDir(filepath.Join(h.StateDir, "drives"))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(id, ".") {
			continue
		}
		c, err := h.claim(id)
		if err != nil {
			return nil, err
		}
		out[id] = c
	}
	return out, nil
}

// SetSpare marks claimed drive id as a spare (on) or as an ordinary free
// drive (off). A spare is never placed as a new volume's member; a
// replacement takes it first.
func (h Host) SetSpare(id string, on bool) error {
	c, err := h.claim(id)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("drive %s is not claimed (fabraid drive claim --spare DEV)", id)
	}
	if err != nil {
		return err
	}
	if c.Spare == on {
		return nil
	}
	c.Spare = on
	b, _ := json.MarshalIndent(c, "", "  ")
	if err := durable.WriteFile(filepath.Join(h.StateDir, "drives", id+".json"), b, 0o600); err != nil {
		return fmt.Errorf("drive %s: spare: %w", id, err)
	}
	return nil
}

// Release removes the claim of drive id (the drive's data is left alone).
// A drive that carries a fabraid member superblock, or that is held open
// exclusively (a running engine holds its members so), is a volume member:
// it is refused unless force.
func (h Host) Release(id string, force bool) error {
	if !force {
		if ds, err := h.Inventory(); err == nil {
			for _, d := range ds {
				if d.ID != id {
					continue
				}
				if why := h.memberReason(d); why != "" {
					return fmt.Errorf("%w: drive %s (%s) %s; delete its volume first (--force releases it anyway)", ErrRefused, id, d.Path, why)
				}
			}
		}
	}
	err := os.Remove(filepath.Join(h.StateDir, "drives", id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("drive %s is not claimed", id)
	}
	return err
}

// ClaimedDrives returns the claimed drives present now, sorted by path.
// It reads sysfs only: a claimed drive's state is its claim, so no device
// node is opened, no superblock read and no mount table parsed (the
// daemon calls it several times per reconcile pass); its drives carry no
// Reasons (Inventory lists those).
func (h Host) ClaimedDrives() ([]Drive, error) {
	ents, err := os.ReadDir(h.SysBlock)
	if err != nil {
		return nil, fmt.Errorf("claimed drives: %w", err)
	}
	claims, err := h.Claims()
	if err != nil {
		return nil, err
	}
	var out []Drive
	if len(claims) == 0 {
		return out, nil
	}
	for _, e := range ents {
		if h.skip(e.Name()) {
			continue
		}
		if d := h.read(e.Name()); claims[d.ID] != nil {
			d.State, d.Spare = "claimed", claims[d.ID].Spare
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Drive) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// memberReason says why d looks like a volume member, or "".
func (h Host) memberReason(d Drive) string {
	f, err := openExclusive(d.Path, os.O_RDONLY, 1)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "is held open exclusively (a running volume's member?)"
	}
	if err == nil {
		f.Close()
	}
	f, err = os.Open(d.Path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, s := range Detect(f, d.Size) {
		if s.Type == "fabraid" {
			return "carries a fabraid member superblock"
		}
	}
	return ""
}
