// Package discover lists the devices fabraid offers to IBM Storage Scale's
// NSD discovery: the lines of the /var/mmfs/etc/nsddevices user exit.
//
// The contract (IBM, "NSD disk discovery" and nsddevices.sample): one line
// per device, "deviceName deviceType", the name relative to /dev; NVMe
// disks are type "generic"; on Linux every device must appear in
// /proc/partitions. A fabraid volume's consumer device is the NVMe native
// multipath head /dev/nvmeXnY; its hidden per-path nodes nvmeXcYnZ are not
// in /proc/partitions and are never listed.
package discover

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/fabraid/fabraid/internal/api"
)

// Type is the Scale device type of every fabraid device.
const Type = "generic"

// Lister returns the node's volumes; *api.Client is one.
type Lister interface {
	Volumes() ([]api.Volume, error)
}

// Device is one nsddevices line.
type Device struct {
	Name   string // relative to /dev: "nvme3n1"
	Type   string // always Type
	Volume string // the fabraid volume it belongs to (not printed)
}

// Line is the device as the user exit prints it.
func (d Device) Line() string { return d.Name + " " + d.Type }

// headRE matches an NVMe multipath head (or a non-multipath namespace),
// never a hidden path node nvmeXcYnZ or a partition nvmeXnYpZ.
var headRE = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)

// Partitions reads /proc/partitions-formatted text into the set of its
// device names.
func Partitions(r io.Reader) (map[string]bool, error) {
	out := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// "major minor #blocks name"; the header and blank lines have no
		// numeric first field.
		if len(f) == 4 && f[0] != "major" {
			out[f[3]] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	return out, nil
}

// Env is where Devices looks on this node.
type Env struct {
	Partitions string // default /proc/partitions
	Dev        string // default /dev
}

func (e Env) partitions() string {
	if e.Partitions == "" {
		return "/proc/partitions"
	}
	return e.Partitions
}

func (e Env) dev() string {
	if e.Dev == "" {
		return "/dev"
	}
	return e.Dev
}

// Select returns the devices of vols whose consumer device is an NVMe head
// present in parts and as a block device under dev, sorted by name. The
// others are returned as reasons (volume -> why it is not listed).
func Select(vols []api.Volume, parts map[string]bool, dev string) ([]Device, map[string]string) {
	var out []Device
	skipped := map[string]string{}
	for _, v := range vols {
		name, ok := strings.CutPrefix(v.Device, "/dev/")
		switch {
		case v.Device == "":
			skipped[v.Name] = fmt.Sprintf("no consumer device (state %s)", v.State)
		case !ok || !headRE.MatchString(name):
			skipped[v.Name] = fmt.Sprintf("consumer device %s is not an NVMe head /dev/nvmeXnY", v.Device)
		case !parts[name]:
			skipped[v.Name] = fmt.Sprintf("%s is not in /proc/partitions", name)
		default:
			st, err := os.Stat(filepath.Join(dev, name))
			if err != nil || st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
				skipped[v.Name] = fmt.Sprintf("%s is not a block device", filepath.Join(dev, name))
				continue
			}
			out = append(out, Device{Name: name, Type: Type, Volume: v.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, skipped
}

// Devices asks l for the volumes and returns the listable devices of this
// node (see Select) and why the others are not listed.
func Devices(l Lister, env Env) ([]Device, map[string]string, error) {
	vols, err := l.Volumes()
	if err != nil {
		return nil, nil, fmt.Errorf("list volumes: %w", err)
	}
	f, err := os.Open(env.partitions())
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	parts, err := Partitions(f)
	if err != nil {
		return nil, nil, err
	}
	devs, skipped := Select(vols, parts, env.dev())
	return devs, skipped, nil
}
