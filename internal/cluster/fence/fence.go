package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// RecordVersion is the schema version of Record.
const RecordVersion = 1

// Record is the value of a fence acknowledgement.
type Record struct {
	Version int `json:"version"`
	// Epoch is the owner epoch whose holder is the only host the
	// exporter's drives of the volume allow; 0: nobody.
	Epoch uint64 `json:"epoch"`
	// Owner is the node that held the owner key at Epoch; "" with 0.
	Owner string    `json:"owner,omitempty"`
	At    time.Time `json:"at"`
}

// ErrInvalid is wrapped by errors about bad arguments or records.
var ErrInvalid = errors.New("invalid fence input")

// Encode returns r's JSON with Version set, after checking it.
func Encode(r Record) ([]byte, error) {
	r.Version = RecordVersion
	if err := check(r); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// Decode parses and checks a Record; a newer schema version is refused
// with an error that says so.
func Decode(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("%w: fence record: %v", ErrInvalid, err)
	}
	if r.Version < 1 || r.Version > RecordVersion {
		return Record{}, fmt.Errorf("%w: fence record schema version %d, this fabraid reads 1..%d (upgrade it)", ErrInvalid, r.Version, RecordVersion)
	}
	if err := check(r); err != nil {
		return Record{}, err
	}
	return r, nil
}

func check(r Record) error {
	switch {
	case r.Epoch == 0 && r.Owner != "":
		return fmt.Errorf("%w: fence record: owner %q at epoch 0", ErrInvalid, r.Owner)
	case r.Epoch != 0:
		if err := checkSegment("owner", r.Owner); err != nil {
			return err
		}
	}
	return nil
}

// checkSegment refuses names that are no single key segment.
func checkSegment(what, s string) error {
	if s == "" || len(s) > 255 || strings.ContainsFunc(s, func(r rune) bool { return r == '/' || unicode.IsControl(r) || r == unicode.ReplacementChar }) {
		return fmt.Errorf("%w: %s %q", ErrInvalid, what, s)
	}
	return nil
}

// Ack records that node's exports of volume's drives allow only owner,
// the holder of epoch (0 and "": nobody). lease is node's lease (the one
// of its alive key), so that the acknowledgement goes when node dies; 0 is
// refused. Call it only after the kernel state was applied and read back.
func Ack(ctx context.Context, kv clientv3.KV, lease clientv3.LeaseID, volume, node string, epoch uint64, owner string) error {
	if err := checkSegment("volume", volume); err != nil {
		return fmt.Errorf("fence: ack: %w", err)
	}
	if err := checkSegment("node", node); err != nil {
		return fmt.Errorf("fence: ack: %w", err)
	}
	if lease == clientv3.NoLease {
		return fmt.Errorf("fence: ack %s by %s: %w: no lease (an acknowledgement must go with its node)", volume, node, ErrInvalid)
	}
	b, err := Encode(Record{Epoch: epoch, Owner: owner, At: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("fence: ack %s by %s: %w", volume, node, err)
	}
	if _, err := kv.Put(ctx, keys.Fence(volume, node), string(b), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("fence: ack %s epoch %d by %s: %w", volume, epoch, node, err)
	}
	return nil
}

// Acks returns every acknowledgement of volume by node name; an
// unreadable record is an error naming its key.
func Acks(ctx context.Context, kv clientv3.KV, volume string) (map[string]Record, error) {
	if err := checkSegment("volume", volume); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	resp, err := kv.Get(ctx, keys.FenceVolume(volume), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("fence: read acks of %s: %w", volume, err)
	}
	out := map[string]Record{}
	for _, e := range resp.Kvs {
		r, err := Decode(e.Value)
		if err != nil {
			return nil, fmt.Errorf("fence: %s: %w", e.Key, err)
		}
		out[strings.TrimPrefix(string(e.Key), keys.FenceVolume(volume))] = r
	}
	return out, nil
}

// Pending is a live exporter that has not acknowledged the epoch waited for.
type Pending struct {
	Node   string
	Reason string // "no acknowledgement", "acknowledged epoch 3", or why its record is unreadable
}

// NotAckedError is Wait's error when ctx ends first: it names the live
// exporters that had not acknowledged. It unwraps to ctx's error.
type NotAckedError struct {
	Volume  string
	Epoch   uint64
	Pending []Pending
	Err     error
}

func (e *NotAckedError) Error() string {
	var b strings.Builder
	for i, p := range e.Pending {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", p.Node, p.Reason)
	}
	return fmt.Sprintf("fence: volume %s epoch %d not acknowledged by %s: %v", e.Volume, e.Epoch, b.String(), e.Err)
}

func (e *NotAckedError) Unwrap() error { return e.Err }

// Wait returns when every node in exporters that is alive (its alive key
// exists) has acknowledged an epoch >= epoch for volume. It reads the
// acknowledgements and alive keys at one revision and re-reads them on
// every change of either, so a node that dies while Wait runs stops being
// waited for, and a node that comes back is waited for again. When ctx
// ends first the error is a *NotAckedError. epoch 0 is refused (no owner
// holds it).
func Wait(ctx context.Context, cli *clientv3.Client, volume string, epoch uint64, exporters []string) error {
	nodes, err := waitNodes(volume, epoch, exporters)
	if err != nil || len(nodes) == 0 {
		return err
	}
	var last []Pending
	for {
		pending, rev, err := pendingAt(ctx, cli, volume, epoch, nodes)
		if err != nil {
			if ctx.Err() != nil {
				return &NotAckedError{Volume: volume, Epoch: epoch, Pending: last, Err: ctx.Err()}
			}
			return err
		}
		if len(pending) == 0 {
			return nil
		}
		last = pending
		if err := waitChange(ctx, cli, volume, rev); err != nil {
			return &NotAckedError{Volume: volume, Epoch: epoch, Pending: pending, Err: err}
		}
	}
}

// waitNodes checks Wait's arguments and returns the exporters sorted,
// each once.
func waitNodes(volume string, epoch uint64, exporters []string) ([]string, error) {
	if err := checkSegment("volume", volume); err != nil {
		return nil, fmt.Errorf("fence: wait: %w", err)
	}
	if epoch == 0 {
		return nil, fmt.Errorf("fence: wait for %s: %w: epoch 0", volume, ErrInvalid)
	}
	nodes := slices.Clone(exporters)
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	for _, n := range nodes {
		if err := checkSegment("node", n); err != nil {
			return nil, fmt.Errorf("fence: wait for %s: %w", volume, err)
		}
	}
	return nodes, nil
}

// pendingAt returns the live nodes without a sufficient acknowledgement and
// the revision it read at.
func pendingAt(ctx context.Context, cli *clientv3.Client, volume string, epoch uint64, nodes []string) ([]Pending, int64, error) {
	resp, err := cli.Txn(ctx).Then(
		clientv3.OpGet(keys.FenceVolume(volume), clientv3.WithPrefix()),
		clientv3.OpGet(keys.AlivePrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("fence: wait for %s epoch %d: read: %w", volume, epoch, err)
	}
	acks := map[string][]byte{}
	for _, e := range resp.Responses[0].GetResponseRange().Kvs {
		acks[strings.TrimPrefix(string(e.Key), keys.FenceVolume(volume))] = e.Value
	}
	alive := map[string]bool{}
	for _, e := range resp.Responses[1].GetResponseRange().Kvs {
		alive[strings.TrimPrefix(string(e.Key), keys.AlivePrefix)] = true
	}
	var pending []Pending
	for _, n := range nodes {
		if !alive[n] {
			continue // dead: its exports serve nobody, and its ack went with its lease
		}
		b, ok := acks[n]
		if !ok {
			pending = append(pending, Pending{Node: n, Reason: "no acknowledgement"})
			continue
		}
		r, err := Decode(b)
		switch {
		case err != nil:
			pending = append(pending, Pending{Node: n, Reason: err.Error()})
		case r.Epoch < epoch:
			pending = append(pending, Pending{Node: n, Reason: fmt.Sprintf("acknowledged epoch %d", r.Epoch)})
		}
	}
	return pending, resp.Header.Revision, nil
}

// waitChange returns after the first change of volume's acknowledgements or
// of any alive key after rev, or with ctx's error. A watch that ends
// without an event (compaction, lost leader) returns after a short pause,
// and the caller re-reads.
func waitChange(ctx context.Context, cli *clientv3.Client, volume string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan bool, 2) // true: an event
	for _, prefix := range []string{keys.FenceVolume(volume), keys.AlivePrefix} {
		wch := cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		go func() {
			for wr := range wch {
				if len(wr.Events) > 0 {
					changed <- true
					return
				}
				if wr.Err() != nil {
					break
				}
			}
			changed <- false
		}()
	}
	select {
	case ev := <-changed:
		if !ev {
			select {
			case <-time.After(retryPause):
			case <-ctx.Done():
			}
		}
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryPause bounds how often Wait re-reads when its watches fail.
const retryPause = 100 * time.Millisecond
