package nvmf

import (
	"slices"
	"strings"
)

// ConnectionPlan is what the importer must do to turn the controllers it
// has into the connections it wants. Computed by PlanConnections, pure.
type ConnectionPlan struct {
	// Connect lists desired connections with no controller.
	Connect []Options
	// Retime lists live controllers whose timeouts differ from the desired
	// profile; ctrl_loss_tmo, reconnect_delay and fast_io_fail_tmo are
	// writable in sysfs, keep_alive_tmo is not (a KeepAlive mismatch is
	// ignored: reconnect to change it).
	Retime []Retime
	// Rekey lists controllers that authenticate with a DH-HMAC-CHAP
	// secret other than the desired one (Host.Rekey: the kernel
	// re-authenticates the live controller and reconnects with it). Only
	// a controller connected with a secret of that kind can change it
	// (the kernel refuses otherwise): one connected without a controller
	// secret keeps host-only authentication until it reconnects.
	Rekey []Rekey
	// Disconnect lists owned controllers nobody wants any more (names).
	// Deleting a controller whose target is unreachable can block for the
	// admin timeout (60 s): run these off the reconcile loop.
	Disconnect []string
}

// Retime is one timeout update of an existing controller.
type Retime struct {
	Name     string
	Timeouts Timeouts
}

// Rekey is one secret change of an existing controller: Attr is
// AttrDHCHAPSecret (the host's secret) or AttrDHCHAPCtrlSecret (the
// controller's).
type Rekey struct {
	Name   string
	Attr   string
	Secret SecretText
}

// Empty reports whether nothing is to be done.
func (p ConnectionPlan) Empty() bool {
	return len(p.Connect) == 0 && len(p.Retime) == 0 && len(p.Rekey) == 0 && len(p.Disconnect) == 0
}

// connKey identifies a connection: one controller per subsystem, target
// address and host.
type connKey struct{ transport, traddr, trsvcid, nqn, hostnqn string }

func keyOf(o Options) connKey {
	return connKey{string(o.Transport), o.Address, o.ServiceID, o.NQN, o.HostNQN}
}

func ctrlKey(c Controller) connKey {
	return connKey{c.Transport, c.Address.TrAddr, c.Address.TrSvcID, c.SubsystemNQN, c.HostNQN}
}

// PlanConnections compares the desired connections with the controllers
// sysfs shows (Sysfs.Controllers). A controller is owned, and may be
// disconnected, when its subsystem NQN starts with ownedPrefix (for
// example "nqn.2026-11.io.fabraid:"); discovery controllers and controllers
// already being deleted are ignored. A controller that is reconnecting
// still counts as present: the kernel is on it.
func PlanConnections(desired []Options, actual []Controller, ownedPrefix string) ConnectionPlan {
	var p ConnectionPlan
	have := map[connKey]Controller{}
	for _, c := range actual {
		if c.Type == "discovery" || c.SubsystemNQN == DiscoveryNQN || strings.HasPrefix(c.State, "deleting") {
			continue
		}
		if _, dup := have[ctrlKey(c)]; dup && ownedPrefix != "" && strings.HasPrefix(c.SubsystemNQN, ownedPrefix) {
			p.Disconnect = append(p.Disconnect, c.Name) // a duplicate: keep the first
			continue
		}
		have[ctrlKey(c)] = c
	}
	want := map[connKey]bool{}
	for _, o := range desired {
		k := keyOf(o)
		if want[k] {
			continue
		}
		want[k] = true
		c, ok := have[k]
		if !ok {
			p.Connect = append(p.Connect, o)
			continue
		}
		if t := o.Timeouts; t != nil && c.Timeouts.ReconnectDelay != 0 {
			if c.Timeouts.ReconnectDelay != t.ReconnectDelay || c.Timeouts.CtrlLoss != t.effectiveCtrlLoss() ||
				c.Timeouts.FastIOFail != t.FastIOFail {
				p.Retime = append(p.Retime, Retime{Name: c.Name, Timeouts: *t})
			}
		}
		// One secret per reconcile, the controller's first: each write
		// re-authenticates at once with the pair the kernel then has.
		switch {
		case o.DHCHAPCtrlSecret != "" && c.DHCHAPCtrlSecret != "" && SecretText(o.DHCHAPCtrlSecret) != c.DHCHAPCtrlSecret:
			p.Rekey = append(p.Rekey, Rekey{Name: c.Name, Attr: AttrDHCHAPCtrlSecret, Secret: SecretText(o.DHCHAPCtrlSecret)})
		case o.DHCHAPSecret != "" && c.DHCHAPSecret != "" && SecretText(o.DHCHAPSecret) != c.DHCHAPSecret:
			p.Rekey = append(p.Rekey, Rekey{Name: c.Name, Attr: AttrDHCHAPSecret, Secret: SecretText(o.DHCHAPSecret)})
		}
	}
	for k, c := range have {
		if !want[k] && ownedPrefix != "" && strings.HasPrefix(c.SubsystemNQN, ownedPrefix) {
			p.Disconnect = append(p.Disconnect, c.Name)
		}
	}
	slices.Sort(p.Disconnect)
	return p
}

// effectiveCtrlLoss is ctrl_loss_tmo as sysfs reports it: the kernel keeps
// a number of reconnect attempts, ceil(ctrl_loss_tmo / reconnect_delay),
// and shows that times reconnect_delay.
func (t Timeouts) effectiveCtrlLoss() int {
	if t.CtrlLoss < 0 || t.ReconnectDelay <= 0 {
		return t.CtrlLoss
	}
	return (t.CtrlLoss + t.ReconnectDelay - 1) / t.ReconnectDelay * t.ReconnectDelay
}
