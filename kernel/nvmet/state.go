package nvmet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DefaultRoot is where configfs exposes nvmet.
const DefaultRoot = "/sys/kernel/config/nvmet"

// State is the actual configuration read back from configfs: every object
// under the root (owned or not) and the kernel features.
type State struct {
	Spec
	Features Features
}

// Read reads the whole nvmet configuration under root. Secrets (DH-HMAC-CHAP
// keys) are read too: treat the result as sensitive.
func Read(root string) (State, error) {
	var st State
	if _, err := os.Stat(root); err != nil {
		return st, fmt.Errorf("read nvmet configuration: %w (try: modprobe nvmet; mount -t configfs none /sys/kernel/config)", err)
	}
	names, err := dirNames(root, "hosts")
	if err != nil {
		return st, err
	}
	for _, n := range names {
		rel := filepath.Join("hosts", n)
		h := Host{NQN: n}
		h.DHCHAPKey, _ = readAttr(root, rel, "dhchap_key")
		h.DHCHAPCtrlKey, _ = readAttr(root, rel, "dhchap_ctrl_key")
		var ok bool
		if h.DHCHAPHash, ok = readAttr(root, rel, "dhchap_hash"); ok {
			st.Features.Auth = true
		}
		h.DHCHAPDHGroup, _ = readAttr(root, rel, "dhchap_dhgroup")
		st.Hosts = append(st.Hosts, h)
	}

	if names, err = dirNames(root, "subsystems"); err != nil {
		return st, err
	}
	for _, n := range names {
		rel := filepath.Join("subsystems", n)
		s := Subsystem{NQN: n}
		s.Serial, _ = readAttr(root, rel, "attr_serial")
		s.Serial = strings.TrimRight(s.Serial, " ") // padded to 20 bytes
		s.Model, _ = readAttr(root, rel, "attr_model")
		var ok bool
		if s.Firmware, ok = readAttr(root, rel, "attr_firmware"); ok {
			st.Features.Firmware = true
		}
		if v, ok := readAttr(root, rel, "attr_cntlid_min"); ok {
			n, _ := strconv.ParseUint(v, 10, 16)
			s.CntlIDMin = uint16(n)
		}
		if v, ok := readAttr(root, rel, "attr_cntlid_max"); ok {
			n, _ := strconv.ParseUint(v, 10, 16)
			s.CntlIDMax = uint16(n)
		}
		if s.CntlIDMin == 1 && s.CntlIDMax == MaxCntlID {
			s.CntlIDMin, s.CntlIDMax = 0, 0 // the kernel's default reads as unset
		}
		if v, _ := readAttr(root, rel, "attr_allow_any_host"); v == "1" {
			s.AllowAnyHost = true
		}
		if _, err := os.Stat(filepath.Join(root, rel, "passthru")); err == nil {
			st.Features.Passthru = true
		}
		if s.AllowedHosts, err = dirNames(root, filepath.Join(rel, "allowed_hosts")); err != nil {
			return st, err
		}
		nsNames, err := dirNames(root, filepath.Join(rel, "namespaces"))
		if err != nil {
			return st, err
		}
		for _, nn := range nsNames {
			id, err := strconv.ParseUint(nn, 10, 32)
			if err != nil {
				continue // not written by us; the kernel also accepts 0x.. names
			}
			nrel := filepath.Join(rel, "namespaces", nn)
			ns := Namespace{NSID: uint32(id)}
			ns.DevicePath, _ = readAttr(root, nrel, "device_path")
			ns.UUID, _ = readAttr(root, nrel, "device_uuid")
			ns.NGUID, _ = readAttr(root, nrel, "device_nguid")
			if v, ok := readAttr(root, nrel, "ana_grpid"); ok {
				g, _ := strconv.ParseUint(v, 10, 32)
				ns.ANAGroup = uint32(g)
			}
			if v, _ := readAttr(root, nrel, "enable"); v != "1" {
				ns.Disabled = true
			}
			s.Namespaces = append(s.Namespaces, ns)
		}
		st.Subsystems = append(st.Subsystems, s)
	}

	if names, err = dirNames(root, "ports"); err != nil {
		return st, err
	}
	for _, n := range names {
		id, err := strconv.ParseUint(n, 10, 16)
		if err != nil {
			continue
		}
		rel := filepath.Join("ports", n)
		p := Port{ID: uint16(id)}
		tr, _ := readAttr(root, rel, "addr_trtype")
		p.Transport = Transport(tr)
		p.Family, _ = readAttr(root, rel, "addr_adrfam")
		p.Address, _ = readAttr(root, rel, "addr_traddr")
		p.ServiceID, _ = readAttr(root, rel, "addr_trsvcid")
		if v, ok := readAttr(root, rel, "addr_tsas"); ok {
			st.Features.TLS = true
			p.TLS = v == "tls1.3"
			if t, _ := readAttr(root, rel, "addr_treq"); p.TLS {
				p.TLSOptional = strings.HasPrefix(t, "not required")
			}
		}
		if _, ok := readAttr(root, rel, "param_max_queue_size"); ok {
			st.Features.MaxQueueSize = true
		}
		if p.Subsystems, err = dirNames(root, filepath.Join(rel, "subsystems")); err != nil {
			return st, err
		}
		if p.Referrals, err = dirNames(root, filepath.Join(rel, "referrals")); err != nil {
			return st, err
		}
		groups, err := dirNames(root, filepath.Join(rel, "ana_groups"))
		if err != nil {
			return st, err
		}
		for _, g := range groups {
			gid, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				continue
			}
			v, _ := readAttr(root, filepath.Join(rel, "ana_groups", g), "ana_state")
			if p.ANAStates == nil {
				p.ANAStates = map[uint32]ANAState{}
			}
			p.ANAStates[uint32(gid)] = ANAState(v)
		}
		st.Ports = append(st.Ports, p)
	}
	st.Spec = sortSpec(st.Spec)
	return st, nil
}

// dirNames lists the entries (directories or symlinks) of root/rel, sorted;
// a missing directory is empty.
func dirNames(root, rel string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(root, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, newError("read", rel, "", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// readAttr reads one attribute and trims the trailing newline; ok is false
// when the attribute does not exist (feature absent) or cannot be read.
func readAttr(root, rel, name string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(root, rel, name))
	if err != nil {
		return "", false
	}
	return strings.TrimRight(string(b), "\n"), true
}
