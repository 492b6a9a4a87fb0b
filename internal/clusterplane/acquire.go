package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/owner"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	decision "github.com/fabraid/fabraid/internal/clusterplane/ownership"
)

// A planned move's target takes the owner key as soon as the old owner
// resigns it, and without the storage fence when the hand-over was clean
// (decision.CleanHandover: the target prepared, the old owner released
// its imports; docs/cluster.md, "Planned move"):
//
//   - the watch's deletion of the owner key of a volume this node
//     prepares (targets) acquires it at once (acquireOnResign), outside
//     the pass, and kicks one; the pass adopts the epoch as fenced
//     (adoptEarly);
//   - a pass that decides Acquire with Clean acquires the same way
//     (acquire), or, when the records no longer say clean, as any
//     acquire, fenced.
//
// Both read the volume record and the move record, decide on them and
// acquire in one transaction with both records' mod revisions as read,
// the volume record's not newer than the move record's: the old owner
// cleared no release and nobody took the volume over since it released.
// A write between the reads and the transaction (the old owner's phase
// resigned) makes them read again.

// earlyAcquires is the state the watch's acquire shares with the pass;
// its maps under ownership.mu.
type earlyAcquires struct {
	targets map[string]bool        // prepared here, move not over, not held yet, this node exporting
	early   map[string]owner.Epoch // acquired by the watch, not adopted by a pass yet
	// beforeTxn runs between cleanAcquire's reads and its transaction
	// (tests: a write in between).
	beforeTxn func()
}

// noteTargets records the volumes this node prepares as a planned move's
// target in this pass (the decision Prepare), when it may export, and
// keeps those of the last passes whose move to this node is not over and
// that it does not hold yet: a pass that saw the key gone before the
// watch told of it does not take the watch's turn.
func (o *ownership) noteTargets(v *clusterView, prepare []string, held map[string]uint64) {
	t := map[string]bool{}
	if o.canExport(v) {
		for _, u := range prepare {
			t[u] = true
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for u := range o.early.targets {
		sm, moving := v.Moves[u]
		if _, h := held[u]; moving && !sm.Over() && sm.To == o.self && !h && o.canExport(v) {
			t[u] = true
		}
	}
	o.early.targets = t
}

// ownerDeleted is the volume whose owner key ev deletes.
func ownerDeleted(ev *clientv3.Event) (string, bool) {
	k := string(ev.Kv.Key)
	if ev.Type != clientv3.EventTypeDelete || !strings.HasPrefix(k, keys.OwnersPrefix) {
		return "", false
	}
	return strings.TrimPrefix(k, keys.OwnersPrefix), true
}

// adoptEarly counts the epochs the watch acquired cleanly as fenced (the
// pass's storage fence state); called by the pass before it decides.
func (o *ownership) adoptEarly() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for u, e := range o.early.early {
		o.fenced[u] = e
	}
	clear(o.early.early)
}

// takeEarly returns the epoch the watch acquired uuid at, and forgets it.
func (o *ownership) takeEarly(uuid string) (owner.Epoch, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.early.early[uuid]
	delete(o.early.early, uuid)
	return e, ok
}

// acquireOnResign is the watch's reaction to the deletion of uuid's owner
// key: a volume this node prepared is acquired now when the hand-over
// was clean, and a pass is kicked to run it. Anything else is the pass's.
func (o *ownership) acquireOnResign(cli *clientv3.Client, uuid string) {
	o.mu.Lock()
	s, target := o.sess, o.early.targets[uuid]
	o.mu.Unlock()
	if !target || s == nil || cli == nil {
		return
	}
	select {
	case <-s.Fenced():
		return
	default:
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(s.Ctx(), etcdTimeout)
	defer cancel()
	e, why, err := o.cleanAcquire(ctx, cli, s, uuid)
	if err != nil || why != "" {
		o.log.Info("planned move: not acquired on the resign; the next pass decides", "uuid", uuid, "why", why, "err", err)
		return
	}
	o.mu.Lock()
	if o.early.early == nil {
		o.early.early = map[string]owner.Epoch{}
	}
	o.early.early[uuid] = e
	o.mu.Unlock()
	o.log.Info("planned move: acquired on the old owner's resign, clean hand-over (no storage fence)",
		"uuid", uuid, "epoch", e, "seconds", time.Since(t0).Seconds())
	o.kick()
}

// acquire takes vol's free owner key for the pass's decision Acquire:
// cleanly when clean and the records still say so (then no fence is
// needed: the epoch is recorded as fenced), else as any acquire (fence
// true).
func (o *ownership) acquire(ctx context.Context, cli *clientv3.Client, s *owner.Session, vol model.Volume, clean bool) (e owner.Epoch, fence bool, err error) {
	if clean {
		e, why, err := o.cleanAcquire(ctx, cli, s, vol.UUID)
		if held := (*owner.HeldError)(nil); errors.As(err, &held) && held.Node == o.self {
			// The watch acquired it cleanly during this pass (or before
			// it, and this pass's keys are behind).
			if ee, early := o.takeEarly(vol.UUID); (early && ee == held.Epoch) || o.fenced[vol.UUID] == held.Epoch {
				o.fenced[vol.UUID] = held.Epoch
				return held.Epoch, false, nil
			}
		}
		if err != nil {
			return 0, true, err
		}
		if why == "" {
			o.fenced[vol.UUID] = e
			o.log.Info("planned move: acquired after a clean hand-over (no storage fence)", "volume", vol.Name, "epoch", e)
			return e, false, nil
		}
		o.log.Info("planned move: acquiring with the storage fence", "volume", vol.Name, "why", why)
	}
	e, err = owner.Acquire(ctx, s, vol.UUID, o.self)
	return e, true, err
}

// cleanAcquireTries is how often cleanAcquire reads and decides again when
// the records changed between its reads and its transaction: the old
// owner writes the phase resigned right after its resign, which is when
// the target acquires.
const cleanAcquireTries = 3

// errRecordsChanged is cleanAcquireOnce's why when the transaction found
// the records changed since read.
const errRecordsChanged = "the records changed since read"

// cleanAcquire reads uuid's volume record and move record, and acquires
// the key when decision.Decide says Acquire with Clean on them, in one
// transaction with both records unchanged; when they changed meanwhile
// it tries again (cleanAcquireTries). why says why it did not acquire
// ("" when it did; an error says nothing more).
func (o *ownership) cleanAcquire(ctx context.Context, cli *clientv3.Client, s *owner.Session, uuid string) (e owner.Epoch, why string, err error) {
	for range cleanAcquireTries {
		if e, why, err = o.cleanAcquireOnce(ctx, cli, s, uuid); why != errRecordsChanged {
			break
		}
	}
	return e, why, err
}

// cleanAcquireOnce is one read, decision and transaction of cleanAcquire.
func (o *ownership) cleanAcquireOnce(ctx context.Context, cli *clientv3.Client, s *owner.Session, uuid string) (e owner.Epoch, why string, err error) {
	vol, vrev, found, err := volumes.Get(ctx, cli, uuid)
	if err != nil || !found {
		return 0, "no volume record", err
	}
	sm, mrev, moving, err := volumes.GetMove(ctx, cli, uuid)
	if err != nil || !moving || sm.Over() {
		return 0, "no move under way", err
	}
	f := decision.Facts{Self: o.self, RecordOwner: vol.Owner, Ready: vol.State == model.VolumeReady, OwnerAlive: true,
		Now: time.Now(), CanExport: true, Move: moveOf(sm.Move, time.Time{})}
	if a := decision.Decide(f); a.Kind != decision.Acquire || !a.Clean {
		return 0, fmt.Sprintf("not a clean hand-over to this node (%s; move %s to %s, prepared %v, released %v)",
			a, sm.From, sm.To, sm.Prepared, sm.Released), nil
	}
	if vrev > mrev {
		return 0, "the volume record was written after the move record", nil
	}
	if o.early.beforeTxn != nil {
		o.early.beforeTxn()
	}
	e, err = owner.AcquireIf(ctx, s, uuid, o.self,
		clientv3.Compare(clientv3.ModRevision(keys.Move(uuid)), "=", mrev),
		clientv3.Compare(clientv3.ModRevision(keys.Volume(uuid)), "=", vrev))
	if errors.Is(err, owner.ErrConditions) {
		return 0, errRecordsChanged, nil
	}
	if err != nil {
		return 0, "", err
	}
	return e, "", nil
}
