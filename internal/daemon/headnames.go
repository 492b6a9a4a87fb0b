package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/volid"
)

// A volume head's /dev/fabraid/<name> link comes from the udev rule, which
// asks this daemon for the name (fabraid udev-probe --volume, at most 3 s).
// A head that appeared while the daemon could not answer (starting, its
// first reconcile, the cluster view not read yet) has no link, and no
// event would bring one. After each reconcile the daemon looks for such
// heads and asks udev again (a "change" uevent): level-triggered, so the
// names converge whatever the order of boot.

// volumeHead is an NVMe block device whose subsystem is a fabraid volume.
type volumeHead struct {
	dev  string // block device name, e.g. nvme0n1
	uuid string // namespace UUID: the volume's UUID
	link string // where /dev/fabraid/<name> points now ("" when absent)
}

// maxHeadRetriggers bounds the change events for one head whose link stays
// missing (udev rules not installed, a lookup that keeps failing): after
// that the daemon leaves it alone until the link was seen right once.
const maxHeadRetriggers = 3

// headsToRetrigger returns the heads whose link is missing or wrong, for
// volumes the daemon knows by name (names: UUID -> name), and counts the
// attempt in tries (head -> change events sent); a head whose link is
// right is forgotten from tries.
func headsToRetrigger(heads []volumeHead, names map[string]string, tries map[string]int) []string {
	var out []string
	for _, h := range heads {
		if names[h.uuid] == "" {
			continue // not a volume this daemon can name: udev-probe would fail again
		}
		if h.link == h.dev {
			delete(tries, h.dev)
			continue
		}
		if tries[h.dev] >= maxHeadRetriggers {
			continue
		}
		tries[h.dev]++
		out = append(out, h.dev)
	}
	return out
}

// headNamer finds volume heads in sysfs and re-triggers those whose link
// is missing. Only the daemon's loop uses it (no locking).
type headNamer struct {
	sysBlock string // /sys/block
	devDir   string // /dev
	tries    map[string]int
	names    map[string]string // volume UUID -> name, from the last list read
	log      *slog.Logger
}

func newHeadNamer(log *slog.Logger) *headNamer {
	return &headNamer{sysBlock: "/sys/block", devDir: "/dev", tries: map[string]int{}, log: log}
}

// nvmeHeadName matches namespace block devices, not the per-path
// nvmeXcYnZ devices of a multipath head.
var nvmeHeadName = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)

// heads lists the volume heads with the targets of their name links.
func (n *headNamer) heads(names map[string]string) []volumeHead {
	ents, err := os.ReadDir(n.sysBlock)
	if err != nil {
		return nil
	}
	var out []volumeHead
	for _, e := range ents {
		dev := e.Name()
		if !nvmeHeadName.MatchString(dev) {
			continue
		}
		nqn := readAttr(filepath.Join(n.sysBlock, dev, "device", "subsysnqn"))
		if !strings.HasPrefix(nqn, volid.NQNPrefix) {
			continue
		}
		h := volumeHead{dev: dev, uuid: readAttr(filepath.Join(n.sysBlock, dev, "uuid"))}
		if name := names[h.uuid]; volid.CheckName(name) == nil {
			if target, err := os.Readlink(filepath.Join(n.devDir, "fabraid", name)); err == nil {
				h.link = filepath.Base(target)
			}
		}
		out = append(out, h)
	}
	return out
}

func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// allLinked reports whether every head has its link under the names known
// (then there is nothing to do, and the volume list need not be read).
func allLinked(heads []volumeHead, names map[string]string) bool {
	for _, h := range heads {
		if names[h.uuid] == "" || h.link != h.dev {
			return false
		}
	}
	return true
}

// converge sends a change uevent to every head whose link is missing. It
// reads the volume list (list) only when a head is not linked under the
// names of the last list: a volume's name does not change, so in the
// steady state a round reads sysfs and /dev alone.
func (n *headNamer) converge(list func() ([]api.Volume, error)) {
	if heads := n.heads(n.names); allLinked(heads, n.names) {
		for _, h := range heads {
			delete(n.tries, h.dev)
		}
		return
	}
	vols, err := list()
	if err != nil {
		return
	}
	n.names = map[string]string{}
	for _, v := range vols {
		n.names[v.UUID] = v.Name
	}
	for _, dev := range headsToRetrigger(n.heads(n.names), n.names, n.tries) {
		n.log.Info("volume head has no /dev/fabraid link; asking udev again", "device", "/dev/"+dev, "try", n.tries[dev])
		if err := os.WriteFile(filepath.Join(n.sysBlock, dev, "uevent"), []byte("change"), 0); err != nil {
			n.log.Warn("cannot re-trigger volume head", "device", "/dev/"+dev, "err", err)
		}
	}
}

// convergeHeadNames runs the head namer over the volumes this daemon can
// name (the cluster's in a cluster); it skips the round when that list
// cannot be had.
func (d *Daemon) convergeHeadNames(ctx context.Context) {
	d.heads.converge(func() ([]api.Volume, error) { return d.volumes().List(ctx) })
}
