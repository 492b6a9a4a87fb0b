// Package stanza writes the NSD stanza file that IBM Storage Scale's
// `mmcrnsd -F FILE` reads, one %nsd stanza per fabraid volume.
//
// The format (IBM, "Stanza files" and mmcrnsd): a stanza starts with the
// identifier "%nsd:" as the first token of a line and is a series of
// whitespace-separated Attribute=value clauses that may span lines; it ends
// at the next stanza, a blank line, or a non-comment line without '='.
// Lines starting with '#' are comments. The clauses written here:
// device=/dev/nvmeXnY (the consumer device on the node that runs mmcrnsd),
// nsd=NAME (nsd/name), servers=n1,n2 only when asked for (omitted, every
// node opens its own head), usage=, failureGroup=, pool= when given.
//
// device= and servers= (IBM, mmcrnsd): without servers=, device= is the
// name on the node that runs mmcrnsd, and Scale takes the disk to be
// reachable from every node; with servers=, device= must be the name on
// the first server, which writes the NSD descriptor. Other nodes may name
// the disk differently: Scale finds an NSD by that descriptor. So the
// stanzas are written on the node that runs mmcrnsd, and with --servers
// that node must be listed first (said in a comment of the stanza).
package stanza

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/nsd/name"
)

// Usages are the values of usage= that mmcrnsd accepts.
var Usages = []string{"dataAndMetadata", "dataOnly", "metadataOnly", "descOnly", "localCache"}

// FailureGroupAuto is the failure group of --failure-group auto: every
// fabraid NSD in one group, because fabraid's parity already spreads each
// volume over the nodes (docs/storage-scale.md).
const FailureGroupAuto = 1

// Failure group range mmcrnsd accepts for a simple integer.
const (
	MinFailureGroup = -1
	MaxFailureGroup = 4000
)

// MaxServers is how many NSD servers mmcrnsd takes in servers=.
const MaxServers = 8

// Options are the choices of `fabraid nsd stanza`.
type Options struct {
	Volumes      []string // volume names; empty: every volume
	Usage        string   // empty: dataAndMetadata
	Pool         string   // empty: not written (Scale's default, system)
	FailureGroup string   // "auto" (or empty) or an integer
	Servers      []string // NSD servers; empty: not written
}

// Stanza is one %nsd stanza.
type Stanza struct {
	Volume       string // fabraid volume (comment)
	UUID         string // its UUID (comment)
	Device       string
	NSD          string
	Servers      []string
	Usage        string
	FailureGroup int
	Pool         string
}

var (
	poolRE   = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)
	serverRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

func (o Options) check() (usage string, fg int, err error) {
	usage = o.Usage
	if usage == "" {
		usage = "dataAndMetadata"
	}
	known := false
	for _, u := range Usages {
		known = known || u == usage
	}
	if !known {
		return "", 0, fmt.Errorf("usage %q: want one of %s", usage, strings.Join(Usages, ", "))
	}
	if o.Pool != "" {
		if !poolRE.MatchString(o.Pool) {
			return "", 0, fmt.Errorf("pool %q: want 1-255 letters, digits or '_'", o.Pool)
		}
		// Only the system pool holds metadata (IBM, storage pools).
		if o.Pool != "system" && usage != "dataOnly" && usage != "localCache" {
			return "", 0, fmt.Errorf("pool %q with usage %s: only the system pool may hold metadata; use --usage dataOnly", o.Pool, usage)
		}
	}
	switch o.FailureGroup {
	case "", "auto":
		fg = FailureGroupAuto
	default:
		fg, err = strconv.Atoi(o.FailureGroup)
		if err != nil || fg < MinFailureGroup || fg > MaxFailureGroup {
			return "", 0, fmt.Errorf("failure group %q: want auto or an integer %d..%d", o.FailureGroup, MinFailureGroup, MaxFailureGroup)
		}
	}
	// IBM (mmcrnsd, servers=): at most MaxServers, and the first one
	// writes the NSD descriptor, so its order matters and is kept.
	if len(o.Servers) > MaxServers {
		return "", 0, fmt.Errorf("servers: %d given, mmcrnsd takes at most %d", len(o.Servers), MaxServers)
	}
	for i, s := range o.Servers {
		if !serverRE.MatchString(s) {
			return "", 0, fmt.Errorf("server %q: want a node name", s)
		}
		if slices.Contains(o.Servers[:i], s) {
			return "", 0, fmt.Errorf("server %q given twice", s)
		}
	}
	return usage, fg, nil
}

// Build returns the stanzas for the volumes o selects out of vols (every
// volume of this node). It refuses, naming the volumes: unknown volumes,
// volumes without a consumer device on this node, names that do not map,
// and volumes whose NSD names would collide with another volume's.
func Build(vols []api.Volume, o Options) ([]Stanza, error) {
	usage, fg, err := o.check()
	if err != nil {
		return nil, err
	}
	var all []string
	byName := map[string]api.Volume{}
	for _, v := range vols {
		all = append(all, v.Name)
		byName[v.Name] = v
	}
	pick := o.Volumes
	if len(pick) == 0 {
		pick = all
	}
	if len(pick) == 0 {
		return nil, fmt.Errorf("no volumes on this node (fabraid volume create first)")
	}
	coll := name.Collisions(all)
	var out []Stanza
	seen := map[string]bool{}
	for _, vn := range pick {
		if seen[vn] {
			continue
		}
		seen[vn] = true
		v, ok := byName[vn]
		if !ok {
			return nil, fmt.Errorf("volume %q: no such volume", vn)
		}
		n, err := name.Map(vn)
		if err != nil {
			return nil, err
		}
		if c := coll[n]; c != nil {
			return nil, fmt.Errorf("volumes %s all map to NSD name %s: only one of them can be an NSD under that name", strings.Join(quote(c), ", "), n)
		}
		if v.Device == "" {
			return nil, fmt.Errorf("volume %q: no consumer device on this node (state %s); fabraid wait --volumes %s", vn, v.State, vn)
		}
		out = append(out, Stanza{Volume: vn, UUID: v.UUID, Device: v.Device, NSD: n, Servers: o.Servers,
			Usage: usage, FailureGroup: fg, Pool: o.Pool})
	}
	return out, nil
}

func quote(s []string) []string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return q
}

// Write writes stanzas as a stanza file: a header comment, then each
// stanza's clauses on their own indented lines, stanzas separated by a
// blank line.
func Write(w io.Writer, stanzas []Stanza) error {
	var b strings.Builder
	b.WriteString("# NSD stanzas for fabraid volumes (fabraid nsd stanza): mmcrnsd -F FILE on this node.\n")
	b.WriteString("# device= is this node's consumer device; other nodes may name it differently\n")
	b.WriteString("# (Scale finds NSDs by the ID it writes on the disk).\n")
	for _, s := range stanzas {
		// A comment line carries the volume name: it may hold characters
		// (such as '#' or '=') that mean something in a clause.
		fmt.Fprintf(&b, "\n# fabraid volume %s %s\n", strconv.Quote(s.Volume), s.UUID)
		if len(s.Servers) > 0 {
			// IBM: with servers=, device= must be the device name on the
			// first server, which writes the NSD descriptor.
			fmt.Fprintf(&b, "# mmcrnsd writes this NSD from %s, the first server: device= must be its name on %s (this node's)\n",
				s.Servers[0], s.Servers[0])
		}
		fmt.Fprintf(&b, "%%nsd:\n  device=%s\n  nsd=%s\n", s.Device, s.NSD)
		if len(s.Servers) > 0 {
			fmt.Fprintf(&b, "  servers=%s\n", strings.Join(s.Servers, ","))
		}
		fmt.Fprintf(&b, "  usage=%s\n  failureGroup=%d\n", s.Usage, s.FailureGroup)
		if s.Pool != "" {
			fmt.Fprintf(&b, "  pool=%s\n", s.Pool)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
