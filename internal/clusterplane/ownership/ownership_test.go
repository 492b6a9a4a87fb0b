package ownership

import (
	"testing"
	"time"
)

// TestDecide is every case of a node's ownership decision for one
// volume, from the daemon's reconcile and the failover, partition, move
// and drain scenarios: node b decides about volume v, whose record owner
// is a (unless a row says otherwise).
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	base := Facts{Self: "b", RecordOwner: "a", Ready: true, OwnerAlive: true, Now: t0, CanExport: true, FailoverChoice: "b"}
	mod := func(m func(*Facts)) Facts {
		f := base
		m(&f)
		return f
	}
	held := func(f *Facts) { f.Key, f.KeyNode, f.KeyEpoch = HeldHere, "b", 12 }
	elsewhere := func(f *Facts) { f.Key, f.KeyNode, f.KeyEpoch = HeldElsewhere, "a", 12 }
	mine := func(f *Facts) { f.RecordOwner = "b" }
	dead := func(f *Facts) { f.OwnerAlive = false }
	moveAway := func(f *Facts) { f.Move = Move{From: "b", To: "a", Requested: true, Seen: t0.Add(-time.Second)} }
	moveHere := func(f *Facts) { mine(f); elsewhere(f); f.Move = Move{From: "a", To: "b", Requested: true, Seen: t0} }
	handedHere := func(f *Facts) {
		mine(f)
		f.Move = Move{From: "a", To: "b", Prepared: true, Released: true, Seen: t0}
	}
	for _, c := range []struct {
		name string
		f    Facts
		want Action
	}{
		// The record owner: acquire the free key, fence, run.
		{"record owner, no key: acquire", mod(mine), Action{Kind: Acquire, Fence: true}},
		{"record owner exporting nothing (require_auth): no acquire", mod(func(f *Facts) { mine(f); f.CanExport = false }),
			Action{Kind: Wait, Why: CannotExport}},
		{"record owner of a creating volume: acquire (it formats it)", mod(func(f *Facts) { mine(f); f.Ready = false }),
			Action{Kind: Acquire, Fence: true}},
		{"record owner, key of another node (lost race): stop", mod(func(f *Facts) { mine(f); elsewhere(f) }), Action{Kind: Stop}},
		// Held here.
		{"held and fenced: keep running", mod(func(f *Facts) { mine(f); held(f); f.FencedEpoch = 12 }), Action{Kind: Keep, Epoch: 12}},
		{"held, fence acks missing: fence before running", mod(func(f *Facts) { mine(f); held(f) }),
			Action{Kind: Fence, Epoch: 12, Fence: true}},
		{"held, fenced only at an older epoch: fence again", mod(func(f *Facts) { mine(f); held(f); f.FencedEpoch = 9 }),
			Action{Kind: Fence, Epoch: 12, Fence: true}},
		{"held after a takeover while the record still names the dead owner: keep", mod(func(f *Facts) { held(f); dead(f); f.FencedEpoch = 12 }),
			Action{Kind: Keep, Epoch: 12}},
		{"held, record owner another live node (a move): drain", mod(func(f *Facts) { held(f); f.FencedEpoch = 12 }),
			Action{Kind: Drain, Epoch: 12, BeginHandover: true}},
		{"held, the drain asked already: drain on", mod(func(f *Facts) { held(f); f.FencedEpoch = 12; f.Handover = Draining }),
			Action{Kind: Drain, Epoch: 12}},
		{"held, move right after the acquire, fence pending: fence, run, drain", mod(held), Action{Kind: Drain, Epoch: 12, Fence: true, BeginHandover: true}},
		{"held, record owner elsewhere but the volume is creating: keep", mod(func(f *Facts) { held(f); f.FencedEpoch = 12; f.Ready = false }),
			Action{Kind: Keep, Epoch: 12}},
		{"held, the record came back before the drain froze: keep, drop the drain",
			mod(func(f *Facts) { mine(f); held(f); f.FencedEpoch = 12; f.Handover = Draining }), Action{Kind: Keep, Epoch: 12, DropHandover: true}},
		{"held, drained and frozen: resign", mod(func(f *Facts) { held(f); f.FencedEpoch = 12; f.Handover = Frozen }), Action{Kind: Resign, Epoch: 12}},
		{"held, frozen although the record came back: resign (no thaw at its own epoch)",
			mod(func(f *Facts) { mine(f); held(f); f.Handover = Frozen }), Action{Kind: Resign, Epoch: 12}},
		// A planned move away (b to a): b serves while a imports the members.
		{"held, moving to a, a imports the members: keep serving", mod(func(f *Facts) { held(f); f.FencedEpoch = 12; moveAway(f) }),
			Action{Kind: Keep, Epoch: 12, Why: TargetPreparing}},
		{"held, moving to a right after the acquire: fence, keep serving", mod(func(f *Facts) { held(f); moveAway(f) }),
			Action{Kind: Fence, Epoch: 12, Fence: true, Why: TargetPreparing}},
		{"held, moving to a, a prepared: drain", mod(func(f *Facts) { held(f); f.FencedEpoch = 12; moveAway(f); f.Move.Prepared = true }),
			Action{Kind: Drain, Epoch: 12, BeginHandover: true}},
		{"held, moving to a, not prepared after PrepareWait: drain", mod(func(f *Facts) {
			held(f)
			f.FencedEpoch = 12
			moveAway(f)
			f.Move.Seen = t0.Add(-PrepareWait)
		}), Action{Kind: Drain, Epoch: 12, BeginHandover: true}},
		{"held, the drain begun: no more waiting", mod(func(f *Facts) { held(f); f.FencedEpoch = 12; moveAway(f); f.Handover = Draining }),
			Action{Kind: Drain, Epoch: 12}},
		{"held, a move record to another node than the record owner: drain", mod(func(f *Facts) {
			held(f)
			f.FencedEpoch = 12
			moveAway(f)
			f.Move.To = "c"
		}), Action{Kind: Drain, Epoch: 12, BeginHandover: true}},
		{"held, the move past phase requested: drain", mod(func(f *Facts) { held(f); f.FencedEpoch = 12; moveAway(f); f.Move.Requested = false }),
			Action{Kind: Drain, Epoch: 12, BeginHandover: true}},
		{"held, the record came back although a move record names a: keep", mod(func(f *Facts) { mine(f); held(f); f.FencedEpoch = 12; moveAway(f) }),
			Action{Kind: Keep, Epoch: 12}},
		// A planned move here (a to b): b imports the members, runs nothing.
		{"moving here, a holds the key: prepare", mod(moveHere), Action{Kind: Prepare}},
		{"moving here, a prepared already: prepare on", mod(func(f *Facts) { moveHere(f); f.Move.Prepared = true }), Action{Kind: Prepare}},
		{"moving here, a resigned but its key still listed: prepare", mod(func(f *Facts) { moveHere(f); f.Move.Requested = false }), Action{Kind: Prepare}},
		{"moving here, the key held by another node than the move's From: stop", mod(func(f *Facts) { moveHere(f); f.KeyNode = "c" }), Action{Kind: Stop}},
		{"moving here, the record names another node now: stop", mod(func(f *Facts) { moveHere(f); f.RecordOwner = "c" }), Action{Kind: Stop}},
		{"moving here, volume not ready: stop", mod(func(f *Facts) { moveHere(f); f.Ready = false }), Action{Kind: Stop}},
		{"moving here, a drain of this node not frozen: prepare, drop the drain", mod(func(f *Facts) { moveHere(f); f.Handover = Draining }),
			Action{Kind: Prepare, DropHandover: true}},
		// a's key gone (a to b): b acquires; the storage fence only when
		// a's hand-over was not clean (b prepared, a released).
		{"moving here, a released and resigned, b prepared: acquire, no fence", mod(handedHere), Action{Kind: Acquire, Clean: true}},
		{"moving here, a released, its key gone before the phase says resigned: acquire, no fence",
			mod(func(f *Facts) { handedHere(f); f.Move.Requested = true }), Action{Kind: Acquire, Clean: true}},
		{"moving here, a resigned without releasing its imports: acquire, fence", mod(func(f *Facts) { handedHere(f); f.Move.Released = false }),
			Action{Kind: Acquire, Fence: true}},
		{"moving here, b not prepared: acquire, fence", mod(func(f *Facts) { handedHere(f); f.Move.Prepared = false }),
			Action{Kind: Acquire, Fence: true}},
		{"a move record to another node, the record names b: acquire, fence", mod(func(f *Facts) { handedHere(f); f.Move.To = "c" }),
			Action{Kind: Acquire, Fence: true}},
		{"a move record from b itself: acquire, fence", mod(func(f *Facts) { handedHere(f); f.Move.From = "b" }),
			Action{Kind: Acquire, Fence: true}},
		{"moving here while a hand-over of b is frozen: acquire, fence, thaw", mod(func(f *Facts) { handedHere(f); f.Handover = Frozen }),
			Action{Kind: Acquire, Fence: true, Undrain: true}},
		{"moving here, a drain of b not frozen: acquire, fence, drop the drain", mod(func(f *Facts) { handedHere(f); f.Handover = Draining }),
			Action{Kind: Acquire, Fence: true, DropHandover: true}},
		// Another lease's key.
		{"key of this node's previous, fenced lease: wait", mod(func(f *Facts) { mine(f); f.Key, f.KeyNode = HeldPrevious, "b" }),
			Action{Kind: Wait, Why: PreviousLease}},
		{"key of another node: stop", mod(elsewhere), Action{Kind: Stop}},
		{"key of another node, a drain not frozen: stop, drop the drain", mod(func(f *Facts) { elsewhere(f); f.Handover = Draining }),
			Action{Kind: Stop, DropHandover: true}},
		{"key of another node while a frozen hand-over waits: hold the export", mod(func(f *Facts) { mine(f); elsewhere(f); f.Handover = Frozen }),
			Action{Kind: Hold, Why: KeyElsewhere}},
		// No key, record owner another node: grace, failover.
		{"no key, record owner alive, not watched yet: wait for it", base, Action{Kind: Wait, Why: OwnerAcquires}},
		{"no key, record owner alive, within the grace", mod(func(f *Facts) { f.AbsentSince = t0.Add(-OwnerGrace + time.Second) }),
			Action{Kind: Wait, Why: OwnerAcquires}},
		{"no key, record owner alive past the grace: take over", mod(func(f *Facts) { f.AbsentSince = t0.Add(-OwnerGrace) }),
			Action{Kind: TakeOver, Fence: true}},
		{"no key, owner gone: take over, fence every exporter", mod(dead), Action{Kind: TakeOver, Fence: true}},
		{"no key, owner gone, two candidates: the other is chosen", mod(func(f *Facts) { dead(f); f.FailoverChoice = "c" }),
			Action{Kind: Wait, Why: OtherChosen}},
		{"no key, owner gone, no node may own it", mod(func(f *Facts) { dead(f); f.FailoverChoice = "" }), Action{Kind: Wait, Why: OtherChosen}},
		{"no key, owner lapsed (alive key left): take over at once, its ack not waited for", mod(func(f *Facts) { f.OwnerLapsed = true }),
			Action{Kind: TakeOver, Fence: true, SkipAck: "a"}},
		{"no key, owner lapsed and dead: take over, its ack not waited for", mod(func(f *Facts) { dead(f); f.OwnerLapsed = true }),
			Action{Kind: TakeOver, Fence: true, SkipAck: "a"}},
		{"no key, no record owner: take over", mod(func(f *Facts) { f.RecordOwner = "" }), Action{Kind: TakeOver, Fence: true}},
		{"no key, owner gone, volume creating: wait", mod(func(f *Facts) { dead(f); f.Ready = false }), Action{Kind: Wait, Why: NotReady}},
		{"no key, a drain not frozen: the drain ends", mod(func(f *Facts) { f.Handover = Draining }),
			Action{Kind: Wait, Why: OwnerAcquires, DropHandover: true}},
		// The old owner's frozen hand-over (b handed v to a).
		{"hand-over, the new owner has not acquired: hold", mod(func(f *Facts) { f.Handover = Frozen }), Action{Kind: Hold, Why: NotServedYet}},
		{"hand-over, the new owner holds it, not served yet: hold", mod(func(f *Facts) { elsewhere(f); f.Handover = Frozen }),
			Action{Kind: Hold, Why: NotServedYet}},
		{"hand-over, served and every path moved: finish", mod(func(f *Facts) { elsewhere(f); f.Handover = Frozen; f.MayUnexport = true }),
			Action{Kind: Finish}},
		{"hand-over, the new owner died before acquiring, failover chose this node: take back",
			mod(func(f *Facts) { dead(f); f.Handover = Frozen }), Action{Kind: TakeOver, Fence: true, Undrain: true}},
		{"hand-over, the new owner lapsed: take back at once, its ack not waited for",
			mod(func(f *Facts) { f.OwnerLapsed = true; f.Handover = Frozen }), Action{Kind: TakeOver, Fence: true, SkipAck: "a", Undrain: true}},
		{"hand-over, the new owner died, failover chose another: hold until it serves",
			mod(func(f *Facts) { dead(f); f.Handover = Frozen; f.FailoverChoice = "c" }), Action{Kind: Hold, Why: NotServedYet}},
		{"hand-over, the record came back to this node: acquire, thaw", mod(func(f *Facts) { mine(f); f.Handover = Frozen }),
			Action{Kind: Acquire, Fence: true, Undrain: true}},
		// A key of this node's lease without a record.
		{"record deleted, key held here: resign", Facts{Self: "b", Deleted: true, Key: HeldHere, KeyNode: "b", KeyEpoch: 7},
			Action{Kind: Resign, Epoch: 7, Why: RecordDeleted}},
	} {
		if got := Decide(c.f); got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.name, got, c.want)
		}
	}
}

// TestWatchAbsence: the grace runs only while a live, unlapsed record
// owner other than this node should acquire a ready volume's free key.
func TestWatchAbsence(t *testing.T) {
	base := Facts{Self: "b", RecordOwner: "a", Ready: true, OwnerAlive: true}
	for _, c := range []struct {
		name string
		mod  func(*Facts)
		want bool
	}{
		{"owner alive, no key", func(*Facts) {}, true},
		{"a key", func(f *Facts) { f.Key = HeldElsewhere }, false},
		{"record owner self", func(f *Facts) { f.RecordOwner = "b" }, false},
		{"no record owner", func(f *Facts) { f.RecordOwner = "" }, false},
		{"owner dead", func(f *Facts) { f.OwnerAlive = false }, false},
		{"owner lapsed", func(f *Facts) { f.OwnerLapsed = true }, false},
		{"not ready", func(f *Facts) { f.Ready = false }, false},
	} {
		f := base
		c.mod(&f)
		if got := WatchAbsence(f); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Every kind and reason has a text (logs, volume show).
func TestStrings(t *testing.T) {
	for k := Wait; k <= Prepare; k++ {
		if k.String() == "" {
			t.Errorf("kind %d has no name", k)
		}
	}
	for r := PreviousLease; r <= TargetPreparing; r++ {
		if r.String() == "" {
			t.Errorf("reason %d has no text", r)
		}
	}
	if s := (Action{Kind: Wait, Why: OwnerAcquires}).String(); s != "wait: "+OwnerAcquires.String() {
		t.Errorf("%q", s)
	}
}
