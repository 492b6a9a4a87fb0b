package volmgr

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabraid/fabraid/internal/fabrictls"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/kernel/nvmetls"
	"github.com/fabraid/fabraid/kernel/nvmf"
	"github.com/fabraid/fabraid/plugins/backend"
)

// NVMe/TCP TLS on the volume paths (nvme_tls; internal/fabrictls;
// docs/cluster.md "Security")
//
// The volume ports offer what the node's drive ports offer
// (ClusterPlan.TLS, the daemon's one decision per reconcile), and each
// consumer connection uses TLS or not, or is refused, as the daemon
// decides it from the owner's registry record (Consumer.TLS, Refused).
// Both ends put the pair key of each (host NQN, volume NQN) pair into the
// .nvme keyring before a port or connection needs it: fabrictls.PairKey
// of the host's DH-HMAC-CHAP secret, the derivation of the drive paths.
// After each cluster reconcile the volume keys (subsystem volid.NQNPrefix)
// that neither the pass nor a controller of this host still uses are
// revoked; the drive exporter's and the member importer's keys (drive
// subsystems) are theirs.

// WithTLS makes every listener of exports take TLS as ports says
// (fabrictls.PortsOptional: TLS or plain; PortsRequired: TLS only;
// PortsPlain: unchanged). Pure (exports are modified in place).
func WithTLS(exports []backend.Export, ports string) []backend.Export {
	if ports == fabrictls.PortsPlain {
		return exports
	}
	for i := range exports {
		for j := range exports[i].Listeners {
			l := &exports[i].Listeners[j]
			l.TLS, l.TLSOptional = true, ports == fabrictls.PortsOptional
		}
	}
	return exports
}

// ExportKeys are the pair keys of exports under ports (none when plain):
// one per export and allowed host that has a secret in hosts. A host
// without one gets no key (it cannot connect with TLS; an optional port
// takes it plain); a pair whose key cannot be derived is left out and
// named in the error. Pure.
func ExportKeys(exports []backend.Export, hosts []ExportHost, ports string) ([]nvmetls.Derived, error) {
	if ports == fabrictls.PortsPlain {
		return nil, nil
	}
	secret := map[string]nvmf.SecretText{}
	for _, h := range hosts {
		secret[h.NQN] = h.Secret
	}
	var keys []nvmetls.Derived
	var errs []error
	for _, e := range exports {
		for _, h := range e.Hosts {
			if secret[h.NQN] == "" {
				continue
			}
			k, err := fabrictls.PairKey(secret[h.NQN], h.NQN, e.NQN)
			if err != nil {
				errs = append(errs, fmt.Errorf("volume export %s: %w", e.NQN, err))
				continue
			}
			keys = append(keys, k)
		}
	}
	return keys, errors.Join(errs...)
}

// ConsumerKeys are the pair keys of the TLS connections of desired, from
// this host's secret; a connection whose key cannot be derived is left
// out and named in the error. Pure.
func ConsumerKeys(desired []nvmf.Options, secret nvmf.SecretText) ([]nvmetls.Derived, error) {
	var keys []nvmetls.Derived
	var errs []error
	for _, o := range desired {
		if !o.TLS {
			continue
		}
		k, err := fabrictls.PairKey(secret, o.HostNQN, o.NQN)
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s at %s: %w", o.NQN, o.Address, err))
			continue
		}
		keys = append(keys, k)
	}
	return keys, errors.Join(errs...)
}

// refusedNQNs are the subsystem NQNs of the refused consumers of cs.
func refusedNQNs(cs []Consumer) map[string]bool {
	out := map[string]bool{}
	for _, c := range cs {
		if c.Refused != "" {
			out[volid.NQN(c.UUID)] = true
		}
	}
	return out
}

// keepControllers drops from disconnect the controllers of ctrls whose
// subsystem is in keep. Pure.
func keepControllers(disconnect []string, ctrls []nvmf.Controller, keep map[string]bool) []string {
	if len(keep) == 0 {
		return disconnect
	}
	kept := map[string]bool{}
	for _, c := range ctrls {
		kept[c.Name] = keep[c.SubsystemNQN]
	}
	return slices.DeleteFunc(disconnect, func(name string) bool { return kept[name] })
}

// tlsKeys is where the volume paths' pair keys go: keys, or the kernel's
// .nvme keyring.
func (x *exporter) tlsKeys() fabrictls.Keys {
	if x.keys != nil {
		return x.keys
	}
	return fabrictls.KernelKeys{}
}

// insertTLSKeys puts the pair keys of spec's exports and of desired's TLS
// connections where the kernel finds them and returns them. An error
// names the pairs left without a key; the others are in place.
func (x *exporter) insertTLSKeys(spec []backend.Export, desired []nvmf.Options, p *ClusterPlan) ([]nvmetls.Derived, error) {
	keys, xerr := ExportKeys(spec, p.Hosts, p.TLS)
	mine, cerr := ConsumerKeys(desired, p.Secret)
	keys = append(keys, mine...)
	err := errors.Join(xerr, cerr)
	if ierr := fabrictls.InsertKeys(x.tlsKeys(), keys); ierr != nil {
		err = errors.Join(err, ierr)
	}
	if err != nil {
		return keys, fmt.Errorf("volume paths: %w", err)
	}
	return keys, nil
}

// pruneTLSKeys revokes the volume subsystems' pair keys that keep (this
// pass's) does not hold, except this host's keys of subsystems it still
// has a controller to (a kept controller looks its key up again on each
// reconnect). Without a host NQN nothing is pruned.
func (x *exporter) pruneTLSKeys(keep []nvmetls.Derived) error {
	if x.id.NQN == "" {
		return nil
	}
	ctrls, err := x.sysfs.Controllers()
	if err != nil {
		return fmt.Errorf("volume paths: list controllers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range ctrls {
		if c.HostNQN == x.id.NQN || c.HostNQN == "" { // "": unreadable, assume ours
			used[c.SubsystemNQN] = true
		}
	}
	owned := func(h, s string) bool { return strings.HasPrefix(s, volid.NQNPrefix) && !(h == x.id.NQN && used[s]) }
	if _, err := fabrictls.PruneKeys(x.tlsKeys(), keep, owned); err != nil {
		return fmt.Errorf("volume paths: %w", err)
	}
	return nil
}
