package nvmet

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/fabraid/fabraid/kernel/internal/nvmesys"
)

// OpKind is one kind of configfs operation.
type OpKind uint8

const (
	OpMkdir  OpKind = iota + 1 // create an object directory
	OpRmdir                    // remove an object directory
	OpWrite                    // write an attribute
	OpLink                     // symlink Path -> Target (port subsystems, allowed hosts)
	OpUnlink                   // remove the symlink Path
)

var opNames = [...]string{OpMkdir: "mkdir", OpRmdir: "rmdir", OpWrite: "write", OpLink: "link", OpUnlink: "unlink"}

func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return "op(" + strconv.Itoa(int(k)) + ")"
}

// Op is one configfs operation. Paths are slash-separated and relative to
// the nvmet root.
type Op struct {
	Kind   OpKind
	Path   string
	Value  string // OpWrite
	Target string // OpLink: the object linked to, relative to the root
	// Secret marks a value never to print (DH-HMAC-CHAP keys).
	Secret bool
	// Optional marks a cosmetic write to skip when the attribute does not
	// exist on this kernel (attr_firmware before 6.2).
	Optional bool
}

func (o Op) String() string {
	switch o.Kind {
	case OpWrite:
		v := strconv.Quote(o.Value)
		if o.Secret && o.Value != "" {
			v = "<secret>"
		}
		return "write " + o.Path + " = " + v
	case OpLink:
		return "link " + o.Path + " -> " + o.Target
	}
	return o.Kind.String() + " " + o.Path
}

// Plan is an ordered list of operations that converges configfs to a
// desired Spec. An empty Plan means converged.
type Plan []Op

func (p Plan) String() string {
	var b strings.Builder
	for _, o := range p {
		b.WriteString(o.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Diff computes the Plan that turns actual into desired, touching only
// objects own owns. It is pure: no I/O. The order is the one the kernel
// needs:
//
//  1. unlink subsystems from ports (for removed or changed ports, removed
//     subsystems or removed links);
//  2. remove ports (referrals and ANA groups first);
//  3. disable and remove namespaces, disable namespaces whose identity
//     changes, unlink allowed hosts, remove subsystems;
//  4. remove hosts no longer wanted;
//  5. create/update hosts, then subsystems (identity attributes first,
//     allowed hosts, namespaces: path, ids, ANA group, enable);
//  6. create/update ports (address attributes only while unlinked), ANA
//     groups and states, and link subsystems last.
//
// Re-running Diff on the state a partial Apply left behind yields the rest
// of the work, so Apply is safe to repeat after a crash.
func Diff(desired Spec, actual State, own Ownership) (Plan, error) {
	if err := desired.Validate(own); err != nil {
		return nil, err
	}
	d := sortSpec(desired)
	a := sortSpec(actual.Spec)
	var p Plan
	add := func(o Op) { p = append(p, o) }

	dSubs := map[string]*Subsystem{}
	for i := range d.Subsystems {
		dSubs[d.Subsystems[i].NQN] = &d.Subsystems[i]
	}
	aSubs := map[string]*Subsystem{}
	for i := range a.Subsystems {
		aSubs[a.Subsystems[i].NQN] = &a.Subsystems[i]
	}
	dPorts := map[uint16]*Port{}
	for i := range d.Ports {
		dPorts[d.Ports[i].ID] = &d.Ports[i]
	}
	aPorts := map[uint16]*Port{}
	for i := range a.Ports {
		aPorts[a.Ports[i].ID] = &a.Ports[i]
	}
	dHosts := map[string]*Host{}
	for i := range d.Hosts {
		dHosts[d.Hosts[i].NQN] = &d.Hosts[i]
	}

	removedSub := func(nqn string) bool { return own.ownsSubsystem(nqn) && dSubs[nqn] == nil }

	// configfs cannot clear a DH-HMAC-CHAP key: an empty write never
	// reaches the kernel's store function, and "\n" is rejected. A host
	// whose key must go is recreated: unlinked, removed, made again.
	foreignLinks := map[string]bool{}
	ownLinks := map[string]bool{}
	for _, as := range a.Subsystems {
		for _, h := range as.AllowedHosts {
			if own.ownsSubsystem(as.NQN) {
				ownLinks[h] = true
			} else {
				foreignLinks[h] = true
			}
		}
	}
	recreate := map[string]bool{}
	for _, ah := range a.Hosts {
		dh := dHosts[ah.NQN]
		if dh == nil {
			continue
		}
		if ah.DHCHAPKey != "" && dh.DHCHAPKey == "" || ah.DHCHAPCtrlKey != "" && dh.DHCHAPCtrlKey == "" {
			if foreignLinks[ah.NQN] {
				return nil, fmt.Errorf("host %s: %w", ah.NQN, ErrKeyClearBlocked)
			}
			recreate[ah.NQN] = true
		}
	}

	// 1 + 2: ports.
	addrChanged := map[uint16]bool{}
	for _, ap := range a.Ports {
		pdir := portDir(ap.ID)
		if !own.ownsPort(ap.ID) {
			for _, nqn := range ap.Subsystems {
				if removedSub(nqn) {
					add(Op{Kind: OpUnlink, Path: path.Join(pdir, "subsystems", nqn)})
				}
			}
			continue
		}
		dp := dPorts[ap.ID]
		if dp == nil {
			for _, nqn := range ap.Subsystems {
				add(Op{Kind: OpUnlink, Path: path.Join(pdir, "subsystems", nqn)})
			}
			for _, r := range ap.Referrals {
				add(Op{Kind: OpRmdir, Path: path.Join(pdir, "referrals", r)})
			}
			for _, g := range sortedGroups(ap.ANAStates) {
				if g > 1 {
					add(Op{Kind: OpRmdir, Path: anaDir(ap.ID, g)})
				}
			}
			add(Op{Kind: OpRmdir, Path: pdir})
			continue
		}
		if portAddrDiffers(*dp, ap, actual.Features) {
			addrChanged[ap.ID] = true
			for _, nqn := range ap.Subsystems {
				add(Op{Kind: OpUnlink, Path: path.Join(pdir, "subsystems", nqn)})
			}
			continue
		}
		for _, nqn := range ap.Subsystems {
			if !slices.Contains(dp.Subsystems, nqn) && (own.ownsSubsystem(nqn) || dSubs[nqn] != nil) {
				add(Op{Kind: OpUnlink, Path: path.Join(pdir, "subsystems", nqn)})
			}
		}
	}

	// 3: subsystems.
	nsReenable := map[string]bool{} // "nqn/nsid" disabled here for an identity change
	for _, as := range a.Subsystems {
		if !own.ownsSubsystem(as.NQN) {
			continue
		}
		sdir := subDir(as.NQN)
		ds := dSubs[as.NQN]
		for _, ans := range as.Namespaces {
			var dns *Namespace
			if ds != nil {
				dns = findNS(ds.Namespaces, ans.NSID)
			}
			ndir := nsDir(as.NQN, ans.NSID)
			switch {
			case dns == nil:
				if !ans.Disabled {
					add(Op{Kind: OpWrite, Path: path.Join(ndir, "enable"), Value: "0"})
				}
				add(Op{Kind: OpRmdir, Path: ndir})
			case !ans.Disabled && nsIdentityDiffers(*dns, ans):
				add(Op{Kind: OpWrite, Path: path.Join(ndir, "enable"), Value: "0"})
				nsReenable[ndir] = true
			}
		}
		for _, h := range as.AllowedHosts {
			if ds == nil || !slices.Contains(ds.AllowedHosts, h) || recreate[h] {
				add(Op{Kind: OpUnlink, Path: path.Join(sdir, "allowed_hosts", h)})
			}
		}
		if ds == nil {
			add(Op{Kind: OpRmdir, Path: sdir})
		}
	}

	// 4: hosts.
	for _, ah := range a.Hosts {
		if recreate[ah.NQN] {
			add(Op{Kind: OpRmdir, Path: path.Join("hosts", ah.NQN)})
			continue
		}
		if dHosts[ah.NQN] != nil || foreignLinks[ah.NQN] {
			continue
		}
		remove := ownLinks[ah.NQN] || ah.NQN == own.SubsystemPrefix+"probe"
		if own.Host != nil {
			remove = own.Host(ah.NQN)
		}
		if remove {
			add(Op{Kind: OpRmdir, Path: path.Join("hosts", ah.NQN)})
		}
	}

	// 5: hosts, subsystems, namespaces.
	aHosts := map[string]*Host{}
	for i := range a.Hosts {
		aHosts[a.Hosts[i].NQN] = &a.Hosts[i]
	}
	for _, dh := range d.Hosts {
		hdir := path.Join("hosts", dh.NQN)
		ah := aHosts[dh.NQN]
		if ah == nil || recreate[dh.NQN] {
			add(Op{Kind: OpMkdir, Path: hdir})
			ah = &Host{}
		}
		// Hash and group before the keys, as nvme-cli does.
		if dh.DHCHAPHash != "" && dh.DHCHAPHash != ah.DHCHAPHash {
			add(Op{Kind: OpWrite, Path: path.Join(hdir, "dhchap_hash"), Value: dh.DHCHAPHash})
		}
		if dh.DHCHAPDHGroup != "" && dh.DHCHAPDHGroup != ah.DHCHAPDHGroup {
			add(Op{Kind: OpWrite, Path: path.Join(hdir, "dhchap_dhgroup"), Value: dh.DHCHAPDHGroup})
		}
		if dh.DHCHAPKey != ah.DHCHAPKey {
			add(Op{Kind: OpWrite, Path: path.Join(hdir, "dhchap_key"), Value: dh.DHCHAPKey, Secret: true})
		}
		if dh.DHCHAPCtrlKey != ah.DHCHAPCtrlKey {
			add(Op{Kind: OpWrite, Path: path.Join(hdir, "dhchap_ctrl_key"), Value: dh.DHCHAPCtrlKey, Secret: true})
		}
	}
	for _, ds := range d.Subsystems {
		sdir := subDir(ds.NQN)
		as := aSubs[ds.NQN]
		created := as == nil
		if created {
			add(Op{Kind: OpMkdir, Path: sdir})
			as = &Subsystem{}
		}
		if as.AllowAnyHost {
			add(Op{Kind: OpWrite, Path: path.Join(sdir, "attr_allow_any_host"), Value: "0"})
		}
		if ds.Serial != "" && ds.Serial != as.Serial {
			add(Op{Kind: OpWrite, Path: path.Join(sdir, "attr_serial"), Value: ds.Serial})
		}
		if ds.Model != "" && ds.Model != as.Model {
			add(Op{Kind: OpWrite, Path: path.Join(sdir, "attr_model"), Value: ds.Model})
		}
		if ds.Firmware != "" && ds.Firmware != as.Firmware && (created || actual.Features.Firmware) {
			add(Op{Kind: OpWrite, Path: path.Join(sdir, "attr_firmware"), Value: ds.Firmware, Optional: true})
		}
		if ds.CntlIDMin != 0 && (ds.CntlIDMin != cntlMin(as) || ds.CntlIDMax != cntlMax(as)) {
			// The kernel refuses min > max at every write (EINVAL):
			// raise max first when the new range lies above the old.
			wmin := Op{Kind: OpWrite, Path: path.Join(sdir, "attr_cntlid_min"), Value: strconv.Itoa(int(ds.CntlIDMin))}
			wmax := Op{Kind: OpWrite, Path: path.Join(sdir, "attr_cntlid_max"), Value: strconv.Itoa(int(ds.CntlIDMax))}
			if ds.CntlIDMin > cntlMax(as) {
				add(wmax)
				add(wmin)
			} else {
				add(wmin)
				add(wmax)
			}
		}
		for _, h := range ds.AllowedHosts {
			if !slices.Contains(as.AllowedHosts, h) || recreate[h] {
				add(Op{Kind: OpLink, Path: path.Join(sdir, "allowed_hosts", h), Target: path.Join("hosts", h)})
			}
		}
		for _, dns := range ds.Namespaces {
			ndir := nsDir(ds.NQN, dns.NSID)
			ans := findNS(as.Namespaces, dns.NSID)
			enabled := ans != nil && !ans.Disabled && !nsReenable[ndir]
			if ans == nil {
				add(Op{Kind: OpMkdir, Path: ndir})
				ans = &Namespace{Disabled: true}
			}
			if dns.DevicePath != ans.DevicePath {
				if enabled {
					add(Op{Kind: OpWrite, Path: path.Join(ndir, "enable"), Value: "0"})
					enabled = false
				}
				add(Op{Kind: OpWrite, Path: path.Join(ndir, "device_path"), Value: dns.DevicePath})
			}
			if dns.UUID != "" && !sameID(dns.UUID, ans.UUID) {
				add(Op{Kind: OpWrite, Path: path.Join(ndir, "device_uuid"), Value: canonID(dns.UUID)})
			}
			if dns.NGUID != "" && !sameID(dns.NGUID, ans.NGUID) {
				add(Op{Kind: OpWrite, Path: path.Join(ndir, "device_nguid"), Value: canonID(dns.NGUID)})
			}
			if g := max(dns.ANAGroup, 1); g != max(ans.ANAGroup, 1) {
				add(Op{Kind: OpWrite, Path: path.Join(ndir, "ana_grpid"), Value: strconv.FormatUint(uint64(g), 10)})
			}
			switch {
			case !dns.Disabled && !enabled:
				add(Op{Kind: OpWrite, Path: path.Join(ndir, "enable"), Value: "1"})
			case dns.Disabled && enabled:
				add(Op{Kind: OpWrite, Path: path.Join(ndir, "enable"), Value: "0"})
			}
		}
	}

	// 6: ports.
	for _, dp := range d.Ports {
		pdir := portDir(dp.ID)
		ap := aPorts[dp.ID]
		fresh := ap == nil || addrChanged[dp.ID]
		if ap == nil {
			add(Op{Kind: OpMkdir, Path: pdir})
			ap = &Port{}
		}
		if fresh {
			add(Op{Kind: OpWrite, Path: path.Join(pdir, "addr_trtype"), Value: string(dp.Transport)})
			if f := dp.family(); f != "" {
				add(Op{Kind: OpWrite, Path: path.Join(pdir, "addr_adrfam"), Value: f})
			}
			if dp.Address != "" {
				add(Op{Kind: OpWrite, Path: path.Join(pdir, "addr_traddr"), Value: dp.Address})
			}
			if dp.ServiceID != "" {
				add(Op{Kind: OpWrite, Path: path.Join(pdir, "addr_trsvcid"), Value: dp.ServiceID})
			}
			if dp.TLS {
				// The kernel sets treq "required" with tsas tls1.3;
				// write it anyway so the port says what the Spec says.
				add(Op{Kind: OpWrite, Path: path.Join(pdir, "addr_tsas"), Value: "tls1.3"})
				add(Op{Kind: OpWrite, Path: path.Join(pdir, "addr_treq"), Value: dp.treq()})
			}
		}
		for _, g := range sortedGroups(ap.ANAStates) {
			if _, ok := dp.ANAStates[g]; !ok && g > 1 {
				add(Op{Kind: OpRmdir, Path: anaDir(dp.ID, g)})
			}
		}
		for _, g := range sortedGroups(dp.ANAStates) {
			cur, exists := ap.ANAStates[g]
			if ap.ANAStates == nil { // new port: group 1 exists, optimized
				cur, exists = Optimized, g == 1
				if g != 1 {
					cur = ""
				}
			}
			if !exists && g > 1 {
				add(Op{Kind: OpMkdir, Path: anaDir(dp.ID, g)})
				cur = Inaccessible
			}
			if cur != dp.ANAStates[g] {
				add(Op{Kind: OpWrite, Path: path.Join(anaDir(dp.ID, g), "ana_state"), Value: string(dp.ANAStates[g])})
			}
		}
		for _, nqn := range dp.Subsystems {
			if fresh || !slices.Contains(ap.Subsystems, nqn) {
				add(Op{Kind: OpLink, Path: path.Join(pdir, "subsystems", nqn), Target: subDir(nqn)})
			}
		}
	}
	return p, nil
}

func portAddrDiffers(d, a Port, f Features) bool {
	if string(d.Transport) != string(a.Transport) {
		return true
	}
	if d.Transport == Loop {
		return false // loop ignores the address; a left-over one is harmless
	}
	if fam := d.family(); fam != "" && fam != a.Family {
		return true
	}
	if d.Address != a.Address || d.ServiceID != a.ServiceID {
		return true
	}
	return d.TLS != a.TLS && (d.TLS || f.TLS) || d.TLS && d.TLSOptional != a.TLSOptional
}

// treq is the addr_treq value of a TLS port.
func (p Port) treq() string {
	if p.TLSOptional {
		return "not required"
	}
	return "required"
}

func nsIdentityDiffers(d, a Namespace) bool {
	return d.DevicePath != a.DevicePath ||
		d.UUID != "" && !sameID(d.UUID, a.UUID) ||
		d.NGUID != "" && !sameID(d.NGUID, a.NGUID)
}

func findNS(list []Namespace, id uint32) *Namespace {
	for i := range list {
		if list[i].NSID == id {
			return &list[i]
		}
	}
	return nil
}

func sameID(a, b string) bool {
	x, err1 := nvmesys.ParseUUID(a)
	y, err2 := nvmesys.ParseUUID(b)
	return err1 == nil && err2 == nil && x == y
}

func canonID(s string) string {
	u, err := nvmesys.ParseUUID(s)
	if err != nil {
		return s
	}
	return u.String()
}

func sortedGroups(m map[uint32]ANAState) []uint32 {
	var g []uint32
	for k := range m {
		g = append(g, k)
	}
	slices.Sort(g)
	return g
}

func subDir(nqn string) string { return path.Join("subsystems", nqn) }
func nsDir(nqn string, id uint32) string {
	return path.Join("subsystems", nqn, "namespaces", strconv.FormatUint(uint64(id), 10))
}
func portDir(id uint16) string { return path.Join("ports", strconv.Itoa(int(id))) }
func anaDir(id uint16, g uint32) string {
	return path.Join(portDir(id), "ana_groups", strconv.FormatUint(uint64(g), 10))
}

// cntlMin and cntlMax are a subsystem's controller id range with the
// kernel's defaults for 0.
func cntlMin(s *Subsystem) uint16 {
	if s.CntlIDMin == 0 {
		return 1
	}
	return s.CntlIDMin
}

func cntlMax(s *Subsystem) uint16 {
	if s.CntlIDMax == 0 {
		return MaxCntlID
	}
	return s.CntlIDMax
}
