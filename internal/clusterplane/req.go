package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// Engine operations in a cluster (fail, re-add, rebuild, scrub, replace)
// work on every node. Refusals that need no engine (unknown volume or
// operation, a slot out of range, a volume not ready, no live owner) are
// given by the node asked. On the owner, fail, re-add, rebuild and scrub
// call the volume manager directly, as in the one-node mode: the answer
// does not wait for an etcd round trip nor for the request worker. On
// any other node they become a request in etcd (volumes.Submit) that the
// owner's request worker carries out once; the asking node waits up to
// opWait for its result and answers with the owner's error text and HTTP
// code, or, when the wait ends first, 202 with the request's id.
//
// Replace goes through etcd on every node, the owner too, because the
// volume record must change: the new member (plan.Replacement, or the
// --node/--drive given) goes into the record with its UUID cleared, the
// drive claims move and the request is written, all in one transaction
// (volumes.SubmitReplace). The owner's reconcile then imports the new
// drive (the drive's node exports it to the owner), replaceMembers hands
// it to the engine (volmgr.ReplacePlanned: replace and rebuild), records
// the new member UUID and finishes the request.

// opWait bounds how long a non-owner waits for the owner's result of
// fail, re-add, rebuild or scrub (each only starts a task); replaceWait
// is replace's (the new drive must be exported and imported first).
const (
	opWait      = 60 * time.Second
	replaceWait = 2 * time.Minute
)

// Lifetimes of requests: a pending one not carried out within
// requestPendingTTL fails (it is not carried out any more); any request
// is deleted requestTTL after it was made, and at once when its volume
// is gone.
const (
	requestPendingTTL = 10 * time.Minute
	requestTTL        = time.Hour
)

// ErrVolumeState (409) is wrapped by refusals because of the volume's
// state: not ready, no status of the slot, a slot changed meanwhile.
var ErrVolumeState = errors.New("not now")

// ownerError is the owner's error of a request, with its HTTP status.
type ownerError struct {
	code int
	msg  string
}

func (e *ownerError) Error() string { return e.msg }

// Op carries out (or has the owner carry out) engine operation op
// of volume ref; a nil reply with a nil error is done.
func (pl *Plane) Op(ctx context.Context, ref, op string, q api.OpRequest) (*api.OpReply, error) {
	if !slices.Contains(volumes.RequestOps, op) {
		return nil, fmt.Errorf("%w: unknown operation %q", ErrBadRequest, op)
	}
	if q.Slot < 0 || q.Rate < 0 {
		return nil, fmt.Errorf("%w: slot %d, rate %d", volmgr.ErrInvalid, q.Slot, q.Rate)
	}
	v, vol, err := pl.viewVolume(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := opUsable(v, vol, op, q.Slot); err != nil {
		return nil, err
	}
	if op == "replace" {
		return pl.clusterReplace(ctx, v, vol, q)
	}
	if vol.Owner == v.Self {
		return nil, pl.engineOp(vol.UUID, op, q)
	}
	r := model.Request{ID: volumes.NewRequestID(), Volume: vol.UUID, Op: op, Slot: q.Slot, Force: q.Force, Repair: q.Repair, Rate: q.Rate,
		RequestedBy: v.Self, Created: time.Now().UTC()}
	sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	err = volumes.Submit(sctx, pl.cluster.Client(), r, func(cur model.Volume) error {
		return opUsable(v, cur, op, q.Slot)
	})
	cancel()
	if err != nil {
		return nil, requestError(err)
	}
	pl.log.Info("volume request written; the owner carries it out", "volume", vol.Name, "op", op, "slot", q.Slot, "request", r.ID, "owner", vol.Owner)
	return pl.waitRequest(ctx, vol, r.ID, opWait)
}

// opUsable gives the refusals of op that need no engine: a volume that is
// not ready, without a live owner, or a slot out of range.
func opUsable(v *clusterView, vol model.Volume, op string, slot int) error {
	if vol.State != model.VolumeReady {
		return fmt.Errorf("%w: volume %q is %s: %s waits until it is ready", ErrVolumeState, vol.Name, vol.State, op)
	}
	if vol.Owner == "" {
		return fmt.Errorf("%w: volume %q has no owner now (failover in progress): try again", ErrNotOwner, vol.Name)
	}
	if n, ok := v.node(vol.Owner); !ok || !n.Alive {
		return fmt.Errorf("%w: volume %q: its owner %s is down: nothing runs its engine", ErrNotOwner, vol.Name, vol.Owner)
	}
	if (op == "fail" || op == "re-add" || op == "replace") && slot >= len(vol.Members) {
		return fmt.Errorf("%w: volume %q has slots 0..%d, not %d", volmgr.ErrInvalid, vol.Name, len(vol.Members)-1, slot)
	}
	return nil
}

// requestError maps the store's refusals to the API's.
func requestError(err error) error {
	switch {
	case errors.Is(err, volumes.ErrNotFound):
		return fmt.Errorf("%w: %w", volmgr.ErrNotFound, err)
	case errors.Is(err, volumes.ErrNotReady), errors.Is(err, volumes.ErrExists):
		return fmt.Errorf("%w: %w", ErrVolumeState, err)
	case errors.Is(err, volumes.ErrInvalid), errors.Is(err, plan.ErrNoReplacement):
		return fmt.Errorf("%w: %w", volmgr.ErrInvalid, err)
	}
	return err
}

// requestPoll bounds one GET of a request (Request): the reply
// is its result, or 202 with its state when it is not done by then.
const requestPoll = 30 * time.Second

// Request waits up to requestPoll for the result of request id of
// volume ref: what the operation's own reply would have been.
func (pl *Plane) Request(ctx context.Context, ref, id string) (*api.OpReply, error) {
	_, vol, err := pl.viewVolume(ctx, ref)
	if err != nil {
		return nil, err
	}
	out, err := pl.waitRequest(ctx, vol, id, requestPoll)
	if errors.Is(err, volumes.ErrRequestGone) {
		return nil, fmt.Errorf("%w: %w", volmgr.ErrNotFound, err)
	}
	return out, err
}

// waitRequest waits up to wait for the owner's result of request id.
func (pl *Plane) waitRequest(ctx context.Context, vol model.Volume, id string, wait time.Duration) (*api.OpReply, error) {
	pl.kick() // a request on the owner itself (replace) is carried out by its reconcile
	pl.loop.req.mu.Lock()
	if pl.loop.req.wait != 0 {
		wait = pl.loop.req.wait
	}
	pl.loop.req.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r, err := volumes.WaitRequest(wctx, pl.cluster.Client(), vol.UUID, id)
	switch {
	case err == nil && r.State == model.RequestFailed:
		code := r.Code
		if code == 0 {
			code = http.StatusInternalServerError
		}
		return nil, &ownerError{code: code, msg: r.Error}
	case err == nil:
		return nil, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		st := r.State
		if st == "" {
			st = model.RequestPending
		}
		return &api.OpReply{Request: id, Owner: vol.Owner, State: st,
			Message: fmt.Sprintf("request %s accepted, owner %s is carrying it out (not finished after %s; follow it with fabraid volume show %s)", id, vol.Owner, wait, vol.Name)}, nil
	}
	return nil, err
}

// engineOp runs op on this node's engine of volume uuid.
func (pl *Plane) engineOp(uuid, op string, q api.OpRequest) error {
	known, err := pl.mgr.EngineOp(uuid, op, q)
	if !known {
		err = fmt.Errorf("%w: operation %q is not an engine call", ErrBadRequest, op)
	}
	pl.kick()
	return err
}

// clusterReplace moves slot q.Slot of vol to a new drive in etcd and
// waits for the owner to replace it.
func (pl *Plane) clusterReplace(ctx context.Context, v *clusterView, vol model.Volume, q api.OpRequest) (*api.OpReply, error) {
	var err error
	st, has := v.Status[vol.UUID]
	if !has {
		return nil, fmt.Errorf("%w: volume %q: owner %s publishes no status: cannot tell whether slot %d failed", ErrVolumeState, vol.Name, vol.Owner, q.Slot)
	}
	i := slices.IndexFunc(st.Members, func(m model.VolumeMemberStatus) bool { return m.Slot == q.Slot })
	switch {
	case i < 0:
		return nil, fmt.Errorf("%w: volume %q: owner %s reports no state of slot %d (volume %s %s)", ErrVolumeState, vol.Name, vol.Owner, q.Slot, st.State, st.Error)
	case st.Members[i].Role == "active":
		return nil, fmt.Errorf("%w: volume %q slot %d is active: fail it first (fabraid volume fail %s %d)", volmgr.ErrInvalid, vol.Name, q.Slot, vol.Name, q.Slot)
	}
	old := vol.Members[q.Slot]
	var m model.VolumeMember
	if old.UUID == "" && (q.Node != "" || q.Drive != "") && (q.Node == "" || q.Node == old.Node) && (q.Drive == "" || q.Drive == old.Drive) {
		m = old // the drive the record names already: the owner tries again
	} else if m, err = plan.Replacement(v.View, vol, q.Slot, q.Node, q.Drive); err != nil {
		return nil, fmt.Errorf("%w: %w", volmgr.ErrInvalid, err)
	}
	r := model.Request{ID: volumes.NewRequestID(), Volume: vol.UUID, Op: "replace", Slot: q.Slot, Rate: q.Rate, Node: m.Node, Drive: m.Drive,
		RequestedBy: v.Self, Created: time.Now().UTC()}
	sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	_, err = volumes.SubmitReplace(sctx, pl.cluster.Client(), r, func(cur *model.Volume) error {
		if err := opUsable(v, *cur, "replace", q.Slot); err != nil {
			return err
		}
		if cur.Members[q.Slot] != old {
			return fmt.Errorf("%w: volume %q slot %d changed meanwhile (now %s:%s): ask again", ErrVolumeState, cur.Name, q.Slot, cur.Members[q.Slot].Node, cur.Members[q.Slot].Drive)
		}
		cur.Members[q.Slot] = m
		return nil
	})
	cancel()
	if err != nil {
		return nil, requestError(err)
	}
	pl.log.Info("volume member moved to a new drive; the owner replaces it", "volume", vol.Name, "slot", q.Slot,
		"old", old.Node+":"+old.Drive, "new", m.Node+":"+m.Drive, "request", r.ID, "owner", vol.Owner)
	out, err := pl.waitRequest(ctx, vol, r.ID, replaceWait)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = &api.OpReply{Owner: vol.Owner, State: model.RequestDone}
	}
	out.Node, out.Drive = m.Node, m.Drive
	return out, nil
}

// requestWorker carries out the requests of the volumes this node owns,
// one at a time, on etcd watch events of the request keys and on every
// reconcile (requestHook).
type requestWorker struct {
	mu      sync.Mutex
	watched *clientv3.Client // the client the worker's watch runs on
	kick    chan struct{}
	swept   time.Time // last CleanupRequests
	// refused: the engine refused the replace of volume/slot/node/drive
	// (replaceMembers); retried only on a new request.
	refused map[string]bool
	// wait, when not 0, replaces opWait and replaceWait (tests).
	wait time.Duration
	// unfinished are the results of requests this process carried out
	// whose Finish write failed (etcd slow or without a leader); every
	// pass writes them again. A request this node left running that is
	// not here was not carried out by this process (fabraidd restarted,
	// or the claim's answer was lost): it fails.
	unfinished map[string]unfinishedRequest
}

// unfinishedRequest is a request carried out and its result.
type unfinishedRequest struct {
	req  volumes.StoredRequest
	code int
	err  error
}

// requestHook starts the request worker on cli (once per client) and has
// it look at the requests now; it returns at once.
func (pl *Plane) requestHook(cli *clientv3.Client) {
	w := &pl.loop.req
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kick == nil {
		w.kick = make(chan struct{}, 1)
	}
	if w.watched != cli {
		w.watched = cli
		go pl.requestWorker(cli, w.kick)
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// requestWorker runs until cli's watch ends (the client closed or
// replaced); a later requestHook starts another.
func (pl *Plane) requestWorker(cli *clientv3.Client, kick chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), keys.RequestsPrefix, clientv3.WithPrefix())
	for {
		if err := pl.carryOutRequests(ctx, cli); err != nil {
			pl.log.Warn("volume requests", "err", err)
		}
		select {
		case _, open := <-wch:
			if !open {
				w := &pl.loop.req
				w.mu.Lock()
				if w.watched == cli {
					w.watched = nil
				}
				w.mu.Unlock()
				return
			}
		case <-kick:
		}
	}
}

// carryOutRequests carries out every pending request (but replace, see
// replaceMembers) of the volumes this node owns, in the order they were
// made, after writing the results of those it carried out earlier that
// are not written yet. Requests this node left running that it did not
// carry out fail (see requestWorker.unfinished).
func (pl *Plane) carryOutRequests(ctx context.Context, cli *clientv3.Client) error {
	rctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	self := pl.cfg.NodeName
	finishing := pl.finishUnfinished(rctx, cli)
	// Idle cost, every reconcile: one read of the request keys (usually
	// none); the records only when there are requests, the whole view
	// only when one is carried out.
	rs, lerr := volumes.Requests(rctx, cli)
	if lerr == nil && len(rs) == 0 {
		return nil
	}
	var errs []error
	if lerr != nil {
		errs = append(errs, lerr)
	}
	vols, err := volumes.List(rctx, cli)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	owned := map[string]model.Volume{}
	for _, vol := range vols {
		if vol.Owner == self {
			owned[vol.UUID] = vol
		}
	}
	now := time.Now()
	var mine, todo []volumes.StoredRequest
	for _, r := range rs {
		if _, ok := owned[r.Volume]; ok && !finishing[r.ID] {
			mine = append(mine, r)
			if r.State == model.RequestPending && r.Op != "replace" && now.Sub(r.Created) <= requestPendingTTL {
				todo = append(todo, r)
			}
		}
	}
	if err := volumes.FailStale(rctx, cli, mine, self, now, requestPendingTTL); err != nil {
		errs = append(errs, err)
	}
	w := &pl.loop.req
	w.mu.Lock()
	sweep := now.Sub(w.swept) > time.Minute
	if sweep {
		w.swept = now
	}
	w.mu.Unlock()
	if sweep {
		if n, err := volumes.CleanupRequests(rctx, cli, rs, vols, now, requestTTL); err != nil {
			errs = append(errs, err)
		} else if n > 0 {
			pl.log.Info("volume requests expired", "deleted", n)
		}
	}
	if len(todo) == 0 {
		return errors.Join(errs...)
	}
	v, err := readView(rctx, cli, self)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, r := range todo {
		vol := owned[r.Volume]
		c, ok, err := volumes.Claim(rctx, cli, r, self)
		if err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		q := api.OpRequest{Slot: r.Slot, Force: r.Force, Repair: r.Repair, Rate: r.Rate}
		opErr := pl.engineOp(vol.UUID, r.Op, q)
		// The status goes out before the result: a requester that waits
		// for the task (--wait) sees it started, not the previous one.
		if err := pl.publishStatus(rctx, cli, v); err != nil {
			errs = append(errs, err)
		}
		if _, _, err := volumes.Finish(rctx, cli, c, ErrorCode(opErr), opErr, time.Now()); err != nil {
			errs = append(errs, err)
			w.mu.Lock()
			if w.unfinished == nil {
				w.unfinished = map[string]unfinishedRequest{}
			}
			w.unfinished[c.ID] = unfinishedRequest{c, ErrorCode(opErr), opErr}
			w.mu.Unlock()
		}
		pl.log.Info("volume request carried out", "volume", vol.Name, "op", r.Op, "slot", r.Slot, "request", r.ID, "by", r.RequestedBy, "err", opErr)
	}
	return errors.Join(errs...)
}

// finishUnfinished writes the results in requestWorker.unfinished again
// and returns the IDs that were there: their records may still read
// running in a list made before the write.
func (pl *Plane) finishUnfinished(ctx context.Context, cli *clientv3.Client) map[string]bool {
	w := &pl.loop.req
	w.mu.Lock()
	todo := maps.Clone(w.unfinished)
	w.mu.Unlock()
	ids := map[string]bool{}
	for id, u := range todo {
		ids[id] = true
		_, _, err := volumes.Finish(ctx, cli, u.req, u.code, u.err, time.Now())
		if err != nil {
			pl.log.Warn("volume request result not written yet", "request", id, "err", err)
			continue
		}
		w.mu.Lock()
		delete(w.unfinished, id) // written, or the record changed (ok false): nothing to write
		w.mu.Unlock()
	}
	return ids
}

// replaceMembers is the owner's part of replace, each reconcile: every
// member slot of a ready owned volume whose record has no member UUID (a
// replace moved it to a new drive) and whose new drive the importer has
// found goes to the engine (replace and rebuild, once), its member UUID
// into the record, and the pending replace request of that slot, if
// any, gets the result.
func (pl *Plane) replaceMembers(ctx context.Context, cli *clientv3.Client, imp plan.Import, paths map[[16]byte][]string) []error {
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	w := &pl.loop.req
	var errs []error
	var rs []volumes.StoredRequest
	read := false
	for _, o := range imp.Volumes {
		if o.Volume.State != model.VolumeReady {
			continue
		}
		for _, s := range o.Slots {
			p := paths[o.UUID][s.Slot]
			if s.Known || p == "" {
				continue
			}
			if !read {
				var err error
				if rs, err = volumes.Requests(ctx, cli); err != nil {
					errs = append(errs, err)
				}
				read = true
			}
			var req *volumes.StoredRequest
			for i, r := range rs {
				if r.Volume == o.Volume.UUID && r.Op == "replace" && r.Slot == s.Slot && r.Node == s.Node && r.Drive == s.Drive && !r.Done() {
					req = &rs[i]
				}
			}
			// A replace the engine refused is tried again only when asked
			// again (a new request of the same drive), not every reconcile.
			try := o.Volume.UUID + "/" + strconv.Itoa(s.Slot) + "/" + s.Node + "/" + s.Drive
			rate := int64(0)
			w.mu.Lock()
			refused := w.refused[try]
			w.mu.Unlock()
			if req != nil {
				rate = req.Rate
			} else if refused {
				continue
			}
			mu, started, err := pl.mgr.ReplacePlanned(o.UUID, s.Slot, p, rate)
			if errors.Is(err, volmgr.ErrNotRunning) {
				// The engine is not started yet (start gate, restart): the
				// request waits for it (up to requestPendingTTL).
				errs = append(errs, fmt.Errorf("volume %s: replace slot %d with %s:%s: %w", o.Volume.Name, s.Slot, s.Node, s.Drive, err))
				continue
			}
			w.mu.Lock()
			if w.refused == nil {
				w.refused = map[string]bool{}
			}
			w.refused[try] = err != nil
			w.mu.Unlock()
			if err == nil {
				err = recordMember(ctx, cli, o.Volume.UUID, s.VolumeMember, mu)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("volume %s: replace slot %d with %s:%s: %w", o.Volume.Name, s.Slot, s.Node, s.Drive, err))
			} else {
				pl.log.Info("volume member replaced", "volume", o.Volume.Name, "slot", s.Slot, "drive", s.Node+":"+s.Drive, "member", volid.Format(mu), "started", started)
			}
			if req != nil {
				if _, _, ferr := volumes.Finish(ctx, cli, *req, ErrorCode(err), err, time.Now()); ferr != nil {
					errs = append(errs, ferr)
				}
			}
		}
	}
	return errs
}

// recordMember writes member UUID mu into slot m.Slot of volume uuid if
// the slot still holds m's drive without a UUID.
func recordMember(ctx context.Context, kv clientv3.KV, uuid string, m model.VolumeMember, mu [16]byte) error {
	_, err := volumes.Modify(ctx, kv, uuid, func(v *model.Volume) error {
		if m.Slot >= len(v.Members) || v.Members[m.Slot].Node != m.Node || v.Members[m.Slot].Drive != m.Drive || v.Members[m.Slot].UUID != "" {
			return errSkip
		}
		v.Members[m.Slot].UUID = volid.Format(mu)
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		return fmt.Errorf("record member UUID: %w", err)
	}
	return nil
}
