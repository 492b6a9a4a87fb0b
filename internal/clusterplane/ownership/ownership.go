// Package ownership decides what one node does about one volume's
// ownership in one reconcile: Decide is a pure function of the facts the
// node read (the volume record, the owner key, liveness, lapses, storage
// fence, hand-over state) and returns one Action. It does no I/O; the
// cluster plane's executor (internal/clusterplane/owner.go) gathers the facts
// and carries the action out against etcd and the volume manager
// (docs/cluster.md, "Failover").
package ownership

import (
	"fmt"
	"time"
)

// OwnerGrace is how long a ready volume may have no owner key while its
// record owner is alive before another node takes it over (an owner that
// keeps its node lease but cannot hold the volume: it cannot import its
// members, or it exports nothing, or it was fenced and does not come
// back). A live owner re-acquires within one reconcile of the deletion
// (the watch kicks it). It is longer than the node lease TTL
// (node_lease_ttl, 10 s), so a dead owner is taken over through its alive
// key's expiry (or its lapse), never through the grace.
const OwnerGrace = 15 * time.Second

// PrepareWait is how long an owner asked to move a volume (a move
// record) keeps serving it while the target imports the volume's
// members ahead (Prepare); then it drains whatever the target's state,
// as it does for a hand-over without a move record.
const PrepareWait = 30 * time.Second

// Key is where the volume's owner key is, as this node sees it.
type Key int

const (
	NoKey         Key = iota // no owner key: nobody may run the volume
	HeldHere                 // on this node's current owner lease
	HeldPrevious             // this node's name on a previous (fenced) lease, not expired at the server yet
	HeldElsewhere            // another node's
)

func (k Key) String() string {
	return [...]string{"none", "held here", "held on this node's previous lease", "held elsewhere"}[k]
}

// Handover is this node's hand-over of a volume it held (a planned move,
// or a record naming another live node).
type Handover int

const (
	NoHandover Handover = iota
	Draining            // asked to drain; the engine is not frozen yet
	Frozen              // drained: export inaccessible, engine frozen at the held epoch
)

// Facts are what one node knows about one volume in one reconcile.
type Facts struct {
	Self string // this node
	// Deleted: there is no volume record, only an owner key of this
	// node's current lease (Key is HeldHere).
	Deleted     bool
	RecordOwner string // the record's owner: the desired one ("" when unset)
	Ready       bool   // the record's state is ready
	// OwnerAlive: the record owner's alive key exists (node registry).
	OwnerAlive bool
	// OwnerLapsed: the record owner's owner session was seen to end
	// (its published session key gone or replaced, owner.Lapses; for a
	// node that published none, its key vanished with its lease gone at
	// the server) within the lapse window: it froze before its key could
	// expire, so it counts as dead for the takeover, and its own
	// acknowledgement of the new epoch is not waited for.
	OwnerLapsed bool
	// AbsentSince is when this node first saw the volume without an
	// owner key while its record owner was alive (zero: not watched).
	AbsentSince time.Time
	Now         time.Time

	Key      Key
	KeyNode  string // the key's holder ("" without a key)
	KeyEpoch uint64 // the key's epoch (its create revision)
	// FencedEpoch is the epoch whose storage fence this node saw
	// acknowledged by every live exporter on its current lease (0: none).
	FencedEpoch uint64

	// CanExport: this node exports volumes (under require_auth a node
	// without DH-HMAC-CHAP exports nothing and must own nothing).
	CanExport bool
	// FailoverChoice is the node failover gives the volume when its
	// owner is gone (plan.ChooseOwner over the nodes alive for the
	// takeover: lapsed ones dead, drained and non-exporting ones out);
	// the same answer on every node.
	FailoverChoice string

	Handover Handover
	// MayUnexport: a frozen hand-over's export may go (the new owner
	// serves at a newer epoch and every live consumer has its path, or
	// consumerWait has passed; the daemon's mayUnexport).
	MayUnexport bool

	// Move is the volume's planned move (a move record not over).
	Move Move
}

// Move is a volume's planned move (a move record that is not over) as
// a node sees it; zero without one.
type Move struct {
	From, To string
	// Requested: phase requested (From has not resigned yet).
	Requested bool
	// Prepared: To has imported every member of a live node.
	Prepared bool
	// Released: From ended its own imports of the members (its engine
	// frozen and flushed) and checked that no controller is left.
	Released bool
	// Seen is when this node first saw the move record.
	Seen time.Time
}

// Kind is what the node does.
type Kind int

const (
	// Wait: nothing this pass; an engine of the volume here stays as it
	// is (frozen, exported, requests queued). Why says for what.
	Wait Kind = iota
	// Acquire the free owner key (the record names this node), wait for
	// the storage fence at its epoch (Fence; not after a clean
	// hand-over: Clean), then run the volume.
	Acquire
	// TakeOver: the owner is gone and failover chose this node: CAS the
	// record's owner to this node, Acquire, fence (without SkipAck),
	// run.
	TakeOver
	// Fence: the key is held here but its epoch's storage fence was not
	// seen acknowledged: wait for it (bounded), then run.
	Fence
	// Keep running the volume at the held, fenced epoch.
	Keep
	// Drain: held here while the record names another live node: run
	// it this pass (after the fence if Action.Fence), then drain it
	// (export inaccessible, engine frozen) and resign.
	Drain
	// Resign the key of a frozen hand-over (its export stays, linked
	// and inaccessible), or of a deleted volume.
	Resign
	// Hold: a frozen hand-over keeps its export linked and inaccessible
	// (ClusterPlan.Drain); the engine stays frozen. Why says why.
	Hold
	// Stop: another node holds the key: unexport and stop an engine of
	// the volume here.
	Stop
	// Finish a hand-over: the new owner serves; remove the export, stop
	// the engine, end the move.
	Finish
	// Prepare: another node holds the key and moves the volume to this
	// node (PrepareHere): import its members ahead, run no engine
	// (an engine here stops, as for Stop). Importing writes nothing: this
	// node writes the members only once it holds the key and the storage
	// fence at that epoch is acknowledged or the hand-over was clean
	// (CleanHandover).
	Prepare
)

func (k Kind) String() string {
	return [...]string{"wait", "acquire", "take over", "fence", "keep", "drain", "resign", "hold", "stop", "finish", "prepare"}[k]
}

// Reason says why a volume waits or holds (or resigns).
type Reason int

const (
	NoReason Reason = iota
	// PreviousLease: the key is this node's previous (fenced) lease's.
	PreviousLease
	// CannotExport: the record names this node, which exports nothing.
	CannotExport
	// OwnerAcquires: no key; the record owner is alive and acquires
	// (another node takes over after OwnerGrace).
	OwnerAcquires
	// OtherChosen: no key, the owner is gone; failover chose another node.
	OtherChosen
	// NotReady: no key and the volume is not ready (creating or deleting).
	NotReady
	// NotServedYet: a frozen hand-over waits for the new owner to serve
	// and for every consumer's path to it.
	NotServedYet
	// KeyElsewhere: a frozen hand-over while another node holds the key;
	// its export goes only when the hand-over finishes.
	KeyElsewhere
	// RecordDeleted: a key of this node's lease whose record is gone.
	RecordDeleted
	// TargetPreparing: a planned move's target imports the members;
	// this node serves until it is prepared or PrepareWait passed.
	TargetPreparing
)

func (r Reason) String() string {
	return [...]string{
		"",
		"this node's previous, fenced owner lease still holds the key; the frozen engine waits until it expires",
		"the record names this node, which exports nothing; a node that can export takes the volume over",
		"no owner key; the record owner is alive and acquires it (another node takes over after the owner grace)",
		"no owner key and the owner is gone; failover chose another node",
		"no owner key; the volume is not ready",
		"hand-over: the export stays inaccessible until the new owner serves and every consumer has a path to it",
		"hand-over: another node holds the key; the export stays inaccessible until the hand-over ends",
		"the volume record is gone",
		"planned move: the target imports the members; this node serves until it is prepared",
	}[r]
}

// Action is Decide's answer.
type Action struct {
	Kind  Kind
	Epoch uint64 // the held key's epoch (Fence, Keep, Drain, Resign)
	// Fence: wait for the storage fence at the epoch before the volume
	// runs (Acquire, TakeOver, Fence; Drain when not fenced yet).
	Fence bool
	// SkipAck is the exporter whose acknowledgement the fence does not
	// wait for: a lapsed old owner (TakeOver), frozen and the only writer
	// of its own drives.
	SkipAck string
	// BeginHandover: Drain starts this node's hand-over of the volume.
	BeginHandover bool
	// DropHandover: a hand-over not frozen yet ends (the key was lost
	// before the drain froze the engine, or the record came back).
	DropHandover bool
	// Undrain: Acquire or TakeOver of a volume this node was handing
	// over: the frozen engine thaws at the new epoch, its export turns
	// optimized.
	Undrain bool
	// Clean: Acquire after a clean hand-over (CleanHandover): the
	// executor acquires only while the move record and the volume
	// record are still as read (one transaction) and then runs without
	// the storage fence; when they changed it acquires with the fence.
	Clean bool
	Why   Reason
}

func (a Action) String() string {
	s := a.Kind.String()
	if a.Epoch != 0 {
		s += fmt.Sprintf(" epoch %d", a.Epoch)
	}
	for _, f := range []struct {
		on   bool
		text string
	}{{a.Fence, "after the storage fence"}, {a.SkipAck != "", "not waiting for " + a.SkipAck + "'s acknowledgement"},
		{a.BeginHandover, "hand-over begins"}, {a.DropHandover, "hand-over dropped"}, {a.Undrain, "hand-over ends: thaw"},
		{a.Clean, "clean hand-over: no storage fence while the move record stands"}} {
		if f.on {
			s += ", " + f.text
		}
	}
	if a.Why != NoReason {
		s += ": " + a.Why.String()
	}
	return s
}

// OwnerGone says whether a volume without an owner key is to be taken
// over: its record owner is unset, dead or lapsed, or the key has been
// absent for OwnerGrace while this node watched.
func OwnerGone(f Facts) bool {
	if f.RecordOwner == "" || !f.OwnerAlive || f.OwnerLapsed {
		return true
	}
	return !f.AbsentSince.IsZero() && f.Now.Sub(f.AbsentSince) >= OwnerGrace
}

// WatchAbsence says whether the absence of the owner key counts towards
// OwnerGrace in this state (the caller keeps AbsentSince: started when
// this turns true, cleared when a key appears or the record names self).
func WatchAbsence(f Facts) bool {
	return f.Key == NoKey && f.Ready && f.RecordOwner != f.Self && f.RecordOwner != "" && f.OwnerAlive && !f.OwnerLapsed
}

// Preparing says whether this node, asked to move the volume to the
// record owner, still serves it while the target imports the members:
// until the target is prepared or PrepareWait has passed since this
// node saw the move.
func Preparing(f Facts) bool {
	m := f.Move
	return m.From == f.Self && m.To == f.RecordOwner && m.Requested && !m.Prepared && f.Now.Sub(m.Seen) < PrepareWait
}

// PrepareHere says whether this node imports the volume's members ahead:
// a planned move from the key's holder to this node, which the record
// names.
func PrepareHere(f Facts) bool {
	return f.Move.To == f.Self && f.Move.From == f.KeyNode && f.Key == HeldElsewhere && f.RecordOwner == f.Self && f.Ready
}

// CleanHandover says whether this node, the record owner without a key,
// takes the volume from a planned move whose old owner handed it over
// cleanly: the move is to this node, this node imported every member
// ahead (Prepared), and From ended its own member imports after its
// engine froze and flushed (Released, written while From still held
// the key). Then no writer but this node is left: From writes its own
// drives only through its engine, frozen for good at its epoch (it
// thaws only by acquiring again, which clears Released first), holds no
// controller to the others' drives and makes none without the key. The
// storage fence (exporters dropping From) adds nothing before this node
// writes; the exporters still drop From when they see the new key. The
// executor checks in the acquire's transaction that the move record and
// the volume record are still as read, the volume record not written
// after the move record (From cleared no release, nobody took the
// volume over since).
func CleanHandover(f Facts) bool {
	m := f.Move
	return m.To == f.Self && m.From != "" && m.From != f.Self && m.Prepared && m.Released &&
		f.Key == NoKey && f.RecordOwner == f.Self && f.Handover == NoHandover
}

// Decide is the node's ownership decision for one volume in one reconcile.
func Decide(f Facts) Action {
	if f.Deleted {
		if f.Key == HeldHere {
			return Action{Kind: Resign, Epoch: f.KeyEpoch, Why: RecordDeleted}
		}
		return Action{Kind: Wait, Why: RecordDeleted}
	}
	h := f.Handover
	drop := false
	if h == Draining && f.Key != HeldHere {
		h, drop = NoHandover, true // lost the key before the drain froze the engine
	}
	a := decide(f, h)
	a.DropHandover = a.DropHandover || drop
	return a
}

func decide(f Facts, h Handover) Action {
	self := f.RecordOwner == f.Self
	takeBack := f.Key == NoKey && f.Ready && OwnerGone(f) && f.FailoverChoice == f.Self
	switch {
	case h == Frozen && f.Key == HeldHere:
		// Frozen at this epoch, the key not resigned yet: a frozen
		// engine never thaws at its own epoch, so the hand-over goes
		// on whatever the record says now.
		return Action{Kind: Resign, Epoch: f.KeyEpoch}
	case h == Frozen && !self && !takeBack:
		if f.MayUnexport {
			return Action{Kind: Finish}
		}
		return Action{Kind: Hold, Why: NotServedYet}
	case f.Key == HeldHere:
		fence := f.FencedEpoch != f.KeyEpoch
		k := Keep
		if fence {
			k = Fence
		}
		if !self && f.Ready && f.OwnerAlive {
			if h == NoHandover && Preparing(f) {
				// A planned move's target imports the members while
				// this node still serves: the pause starts only once
				// it has them.
				return Action{Kind: k, Epoch: f.KeyEpoch, Fence: fence, Why: TargetPreparing}
			}
			// The desired owner is another live node: hand it over.
			// This pass still runs it; the drain follows the manager's
			// reconcile.
			return Action{Kind: Drain, Epoch: f.KeyEpoch, Fence: fence, BeginHandover: h == NoHandover}
		}
		// A drain not frozen yet ends: the record came back.
		return Action{Kind: k, Epoch: f.KeyEpoch, Fence: fence, DropHandover: h == Draining}
	case f.Key == HeldPrevious:
		// This node's previous lease, fenced here but not expired at the
		// server yet: its engine stays as it is (frozen, exported,
		// requests queued) until the key goes and this node acquires
		// again (thaw at the new epoch) or another node does (stop).
		return Action{Kind: Wait, Why: PreviousLease}
	case f.Key == HeldElsewhere:
		if h == Frozen {
			// A frozen hand-over's export goes only through Finish.
			return Action{Kind: Hold, Why: KeyElsewhere}
		}
		if PrepareHere(f) {
			return Action{Kind: Prepare}
		}
		return Action{Kind: Stop}
	}
	// No owner key: nobody may run the volume, and an engine of it here
	// (frozen by this node's self-fence) stays as it is, exported with
	// its requests queued: stopping it would take its consumers' only
	// path before another one exists.
	switch {
	case self && !f.CanExport:
		return Action{Kind: Wait, Why: CannotExport}
	case self && CleanHandover(f):
		return Action{Kind: Acquire, Clean: true}
	case self:
		return Action{Kind: Acquire, Fence: true, Undrain: h == Frozen}
	case !f.Ready:
		return Action{Kind: Wait, Why: NotReady}
	case takeBack:
		a := Action{Kind: TakeOver, Fence: true, Undrain: h == Frozen}
		if f.OwnerLapsed {
			// The old owner's session ended: it froze before its key
			// could expire, and only it writes its own drives.
			a.SkipAck = f.RecordOwner
		}
		return a
	case OwnerGone(f):
		return Action{Kind: Wait, Why: OtherChosen}
	}
	return Action{Kind: Wait, Why: OwnerAcquires}
}
