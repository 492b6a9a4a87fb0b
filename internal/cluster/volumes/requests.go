package volumes

// Requests: engine operations (fail, re-add, rebuild, scrub, replace) of a
// volume asked on any node, carried out by the volume's owner
// (keys.Request, model.Request).
//
// # Invariants
//
//   - A request is written only while its volume record exists and is
//     ready: Submit's transaction is conditioned on the record's mod
//     revision as read (and checked), SubmitReplace writes the request in
//     the record's own transaction.
//   - A request is carried out at most once: the owner claims it with a
//     compare-and-swap pending -> running on the key's mod revision and
//     records the result with another (running -> done or failed); a
//     request left running (the owner restarted while carrying it out) is
//     never carried out again (FailStale).
//   - Requests do not outlive their volume or an hour (CleanupRequests).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
)

// ErrNotReady: the volume's record is not ready (being created or deleted).
var ErrNotReady = errors.New("volume is not ready")

// ErrRequestGone: the request key was deleted (its volume went, or it
// expired) before it had a result.
var ErrRequestGone = errors.New("request is gone")

// RequestOps are the operations a request may carry.
var RequestOps = []string{"fail", "re-add", "rebuild", "scrub", "replace"}

// NewRequestID is a random request id (16 hex digits).
func NewRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// StoredRequest is a request with the mod revision of its key as read
// (for Claim and Finish).
type StoredRequest struct {
	model.Request
	Rev int64
}

// Submit writes request r (state pending, Version set) on the condition
// that its volume's record exists, is ready, passes check (the requester's
// refusals against the current record; nil: none) and did not change
// since it was read; it retries on a concurrent change of the record.
// Unknown volume: ErrNotFound; not ready: ErrNotReady.
func Submit(ctx context.Context, kv clientv3.KV, r model.Request, check func(model.Volume) error) error {
	if err := checkRequest(r); err != nil {
		return err
	}
	r.Version, r.State = model.RequestVersion, model.RequestPending
	b, _ := json.Marshal(r)
	vk, rk := keys.Volume(r.Volume), keys.Request(r.Volume, r.ID)
	for {
		v, rev, ok, err := Get(ctx, kv, r.Volume)
		if err != nil {
			return err
		}
		if err := usable(v, ok, r); err != nil {
			return err
		}
		if check != nil {
			if err := check(v); err != nil {
				return err
			}
		}
		resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(vk), "=", rev), clientv3.Compare(clientv3.CreateRevision(rk), "=", 0)).
			Then(clientv3.OpPut(rk, string(b))).Commit()
		if err != nil {
			return fmt.Errorf("volumes: request %s of %s: %w", r.Op, r.Volume, err)
		}
		if resp.Succeeded {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("volumes: request %s of %s: %w", r.Op, r.Volume, err)
		}
	}
}

// usable refuses a request for a missing or not-ready volume.
func usable(v model.Volume, ok bool, r model.Request) error {
	if !ok {
		return fmt.Errorf("volumes: request %s: %w: %s", r.Op, ErrNotFound, r.Volume)
	}
	if v.State != model.VolumeReady {
		return fmt.Errorf("volumes: %w: volume %q is %s; %s waits until it is ready", ErrNotReady, v.Name, v.State, r.Op)
	}
	return nil
}

// SubmitReplace applies f to the record of r.Volume (as Modify: read,
// f, compare-and-swap, retried on a concurrent change; f may run more
// than once) and writes request r in the same transaction, with the
// drive claims moved as Update moves them. The record must be ready.
// It returns the record as written.
func SubmitReplace(ctx context.Context, kv clientv3.KV, r model.Request, f func(*model.Volume) error) (model.Volume, error) {
	if err := checkRequest(r); err != nil {
		return model.Volume{}, err
	}
	r.Version, r.State = model.RequestVersion, model.RequestPending
	b, _ := json.Marshal(r)
	put := []clientv3.Op{clientv3.OpPut(keys.Request(r.Volume, r.ID), string(b))}
	for {
		v, rev, ok, err := Get(ctx, kv, r.Volume)
		if err != nil {
			return model.Volume{}, err
		}
		if err := usable(v, ok, r); err != nil {
			return model.Volume{}, err
		}
		var out model.Volume
		err = update(ctx, kv, r.Volume, rev, func(v *model.Volume) error {
			if err := f(v); err != nil {
				return err
			}
			out = *v
			return nil
		}, put)
		if !errors.Is(err, ErrConflict) {
			out.Version = model.VolumeVersion
			return out, err
		}
		if err := ctx.Err(); err != nil {
			return model.Volume{}, fmt.Errorf("volumes: request %s of %s: %w", r.Op, r.Volume, err)
		}
	}
}

// GetRequest reads request id of volume uuid; ok is false when there is
// none.
func GetRequest(ctx context.Context, kv clientv3.KV, uuid, id string) (StoredRequest, bool, error) {
	resp, err := kv.Get(ctx, keys.Request(uuid, id))
	if err != nil {
		return StoredRequest{}, false, fmt.Errorf("volumes: get request %s of %s: %w", id, uuid, err)
	}
	if len(resp.Kvs) == 0 {
		return StoredRequest{}, false, nil
	}
	r, err := DecodeRequest(resp.Kvs[0].Value)
	if err != nil {
		return StoredRequest{}, false, fmt.Errorf("volumes: %s: %w", resp.Kvs[0].Key, err)
	}
	return StoredRequest{r, resp.Kvs[0].ModRevision}, true, nil
}

// Requests returns every request in the order they were written (create
// revision). A key that does not decode is left out and reported in the
// error; the others are returned all the same.
func Requests(ctx context.Context, kv clientv3.KV) ([]StoredRequest, error) {
	resp, err := kv.Get(ctx, keys.RequestsPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("volumes: list requests: %w", err)
	}
	var out []StoredRequest
	var errs []error
	for _, e := range resp.Kvs {
		r, err := DecodeRequest(e.Value)
		if err == nil && keys.Request(r.Volume, r.ID) != string(e.Key) {
			err = fmt.Errorf("volume %s and id %s do not match the key", r.Volume, r.ID)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("volumes: %s: %w", e.Key, err))
			continue
		}
		out = append(out, StoredRequest{r, e.ModRevision})
	}
	return out, errors.Join(errs...)
}

// Claim moves pending request r to running by node by, if r is still as
// read; ok is false when it is not (another owner claimed it, or it was
// deleted): then it must not be carried out.
func Claim(ctx context.Context, kv clientv3.KV, r StoredRequest, by string) (StoredRequest, bool, error) {
	if r.State != model.RequestPending {
		return r, false, nil
	}
	r.State, r.By = model.RequestRunning, by
	return cas(ctx, kv, r)
}

// Finish records the result of running request r: done when err is nil,
// else failed with err's text and the HTTP status code. ok is false when
// the key changed since r was read.
func Finish(ctx context.Context, kv clientv3.KV, r StoredRequest, code int, err error, now time.Time) (StoredRequest, bool, error) {
	r.State, r.Error, r.Code, r.Finished = model.RequestDone, "", 0, now.UTC()
	if err != nil {
		r.State, r.Error, r.Code = model.RequestFailed, err.Error(), code
	}
	return cas(ctx, kv, r)
}

// cas writes r back if its key is still at r.Rev.
func cas(ctx context.Context, kv clientv3.KV, r StoredRequest) (StoredRequest, bool, error) {
	r.Version = model.RequestVersion
	b, _ := json.Marshal(r.Request)
	k := keys.Request(r.Volume, r.ID)
	resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", r.Rev)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return r, false, fmt.Errorf("volumes: request %s of %s: %w", r.ID, r.Volume, err)
	}
	if !resp.Succeeded {
		return r, false, nil
	}
	r.Rev = resp.Header.Revision
	return r, true, nil
}

// WaitRequest watches request id of volume uuid until it has its result
// and returns it; when ctx ends first it returns the request as last seen
// and ctx's error. A request that is gone is ErrRequestGone.
func WaitRequest(ctx context.Context, cli *clientv3.Client, uuid, id string) (model.Request, error) {
	k := keys.Request(uuid, id)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := cli.Get(ctx, k)
	if err != nil {
		return model.Request{}, fmt.Errorf("volumes: request %s of %s: %w", id, uuid, err)
	}
	if len(resp.Kvs) == 0 {
		return model.Request{}, fmt.Errorf("volumes: request %s of %s: %w", id, uuid, ErrRequestGone)
	}
	last, err := DecodeRequest(resp.Kvs[0].Value)
	if err != nil || last.Done() {
		return last, err
	}
	wch := cli.Watch(clientv3.WithRequireLeader(wctx), k, clientv3.WithRev(resp.Header.Revision+1))
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case w, open := <-wch:
			if !open || w.Err() != nil {
				if ctx.Err() != nil {
					return last, ctx.Err()
				}
				// The watch broke (leader lost, compaction): read again.
				time.Sleep(200 * time.Millisecond)
				return WaitRequest(ctx, cli, uuid, id)
			}
			for _, ev := range w.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return last, fmt.Errorf("volumes: request %s of %s: %w", id, uuid, ErrRequestGone)
				}
				r, err := DecodeRequest(ev.Kv.Value)
				if err != nil {
					return last, fmt.Errorf("volumes: %s: %w", k, err)
				}
				if last = r; r.Done() {
					return r, nil
				}
			}
		}
	}
}

// FailStale marks the requests of pending older than maxAge, and those
// left running by node self (the caller knows it is not carrying them
// out and has no result of them: fabraidd restarted meanwhile, or the
// answer to its claim was lost), failed without carrying them out.
func FailStale(ctx context.Context, kv clientv3.KV, rs []StoredRequest, self string, now time.Time, maxAge time.Duration) error {
	var errs []error
	for _, r := range rs {
		var why string
		switch {
		case r.State == model.RequestRunning && r.By == self:
			why = fmt.Sprintf("interrupted: fabraidd on %s restarted while carrying it out (or lost etcd while claiming it); check the volume and ask again", self)
		case r.State == model.RequestPending && now.Sub(r.Created) > maxAge:
			why = fmt.Sprintf("expired: not carried out within %s of its request (owner down?)", maxAge)
		default:
			continue
		}
		r.State, r.By, r.Error, r.Code, r.Finished = model.RequestFailed, self, why, 503, now.UTC()
		if _, _, err := cas(ctx, kv, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CleanupRequests deletes the requests of rs whose volume has no record
// in vols (by UUID) or that were made more than maxAge ago, each only if
// it did not change since it was read. It returns how many it deleted.
func CleanupRequests(ctx context.Context, kv clientv3.KV, rs []StoredRequest, vols []model.Volume, now time.Time, maxAge time.Duration) (int, error) {
	n := 0
	var errs []error
	for _, r := range rs {
		gone := !slices.ContainsFunc(vols, func(v model.Volume) bool { return v.UUID == r.Volume })
		if !gone && now.Sub(r.Created) <= maxAge {
			continue
		}
		k := keys.Request(r.Volume, r.ID)
		resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", r.Rev)).Then(clientv3.OpDelete(k)).Commit()
		if err != nil {
			errs = append(errs, fmt.Errorf("volumes: delete request %s: %w", k, err))
			continue
		}
		if resp.Succeeded {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// DecodeRequest decodes and checks a request.
func DecodeRequest(b []byte) (model.Request, error) {
	var r model.Request
	if err := decode(b, &r.Version, &r, model.RequestVersion); err != nil {
		return model.Request{}, err
	}
	if err := checkRequest(r); err != nil {
		return model.Request{}, err
	}
	switch r.State {
	case model.RequestPending, model.RequestRunning, model.RequestDone, model.RequestFailed:
	default:
		return model.Request{}, fmt.Errorf("%w: request %s: state %q", ErrInvalid, r.ID, r.State)
	}
	return r, nil
}

// checkRequest validates what the store relies on: a canonical volume
// UUID, a hex id (both are parts of the key), a known operation, a slot
// that is not negative, and a replace's new member.
func checkRequest(r model.Request) error {
	if err := checkUUID(r.Volume); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if len(r.ID) != 16 || strings.Trim(r.ID, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: request id %q (want 16 lower-case hex digits)", ErrInvalid, r.ID)
	}
	if !slices.Contains(RequestOps, r.Op) {
		return fmt.Errorf("%w: request %s: operation %q (want one of %s)", ErrInvalid, r.ID, r.Op, strings.Join(RequestOps, ", "))
	}
	if r.Slot < 0 || r.Rate < 0 {
		return fmt.Errorf("%w: request %s: slot %d, rate %d", ErrInvalid, r.ID, r.Slot, r.Rate)
	}
	if r.Op == "replace" && (r.Node == "" || r.Drive == "") {
		return fmt.Errorf("%w: request %s: replace without the new member's node and drive", ErrInvalid, r.ID)
	}
	return nil
}
