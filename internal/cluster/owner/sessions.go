package owner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// Publish writes s's lease id under node's owner session key
// (keys.OwnerSession), on s's lease. The key lives exactly as long as the
// lease: when the lease expires or is revoked, etcd deletes it in the
// same revision as every owner key on that lease, so a node following
// the keys (a view copy) tells a lapse from a resign without asking etcd
// (Lapses). A node replaces it with its next session's.
func Publish(ctx context.Context, kv clientv3.KV, s *Session, node string) error {
	if _, err := kv.Put(ctx, keys.OwnerSession(node), LeaseString(s.Lease()), clientv3.WithLease(s.Lease())); err != nil {
		return fmt.Errorf("owner: publish session of %s: %w", node, err)
	}
	return nil
}

// Snapshot is the owner keys and the published owner sessions at one
// revision.
type Snapshot struct {
	Keys     map[string]Key              // by volume UUID (List)
	Sessions map[string]clientv3.LeaseID // by node: its published session
}

// Read reads the owner keys and the published sessions in one read-only
// transaction (one revision; a view copy answers it).
func Read(ctx context.Context, kv clientv3.KV) (Snapshot, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(keys.OwnersPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(keys.OwnerSessionsPrefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return Snapshot{}, fmt.Errorf("owner: read keys and sessions: %w", err)
	}
	snap := Snapshot{Sessions: map[string]clientv3.LeaseID{}}
	if snap.Keys, err = decodeKeys(resp.Responses[0].GetResponseRange().Kvs); err != nil {
		return Snapshot{}, err
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		id, err := strconv.ParseInt(string(kv.Value), 16, 64)
		if err != nil || id != kv.Lease {
			continue // not a session key as Publish writes it: as if unpublished
		}
		snap.Sessions[strings.TrimPrefix(string(kv.Key), keys.OwnerSessionsPrefix)] = clientv3.LeaseID(id)
	}
	return snap, nil
}

// decodeKeys is the owner keys kvs by volume UUID.
func decodeKeys(kvs []*mvccpb.KeyValue) (map[string]Key, error) {
	out := map[string]Key{}
	for _, kv := range kvs {
		rec, err := decode(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("owner: %s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), keys.OwnersPrefix)] = Key{Record: rec, Epoch: Epoch(kv.CreateRevision), LeaseID: clientv3.LeaseID(kv.Lease)}
	}
	return out, nil
}

// Holders are the nodes but self holding a key in snap on a live session:
// their published one, or any when they published none.
func (snap Snapshot) Holders(self string) []string {
	var out []string
	for _, k := range snap.Keys {
		if k.Node == self || slices.Contains(out, k.Node) {
			continue
		}
		if id, ok := snap.Sessions[k.Node]; !ok || id == k.LeaseID {
			out = append(out, k.Node)
		}
	}
	return out
}

// Lapses follows the other nodes' owner keys and published sessions from
// one Snapshot to the next, to learn whose session ended. Not safe for
// concurrent use.
type Lapses struct {
	self     string
	keys     map[string]Key
	sessions map[string]clientv3.LeaseID
	// gone are the published sessions seen to end whose keys are still
	// in the last snapshot: when those keys vanish, no lookup is needed.
	gone map[clientv3.LeaseID]bool
}

// NewLapses follows the nodes other than self.
func NewLapses(self string) *Lapses {
	return &Lapses{self: self, keys: map[string]Key{}, sessions: map[string]clientv3.LeaseID{}, gone: map[clientv3.LeaseID]bool{}}
}

// Note compares snap with the snapshot noted before it. ended are the
// nodes whose published session is gone from snap or replaced: its lease
// expired or was revoked (a node replaces its session only after the old
// one fenced or closed, which froze its engines), and its keys went with
// it. A key that vanished while its holder's session stays published was
// resigned. A key on a session seen to end earlier (replaced while its
// keys outlived it at the server) ends with it: its holder is ended
// again, as when its session went. unknown are the vanished or replaced
// keys on a session never seen published (a node from before Publish,
// or one whose publish has not landed yet): only etcd can tell whether
// that lease ended (LeaseEnded).
func (l *Lapses) Note(snap Snapshot) (ended []string, unknown []Key) {
	for node, id := range l.sessions {
		if snap.Sessions[node] != id {
			ended = append(ended, node)
			l.gone[id] = true
		}
	}
	for uuid, k := range l.keys {
		switch cur, still := snap.Keys[uuid]; {
		case still && cur.Epoch == k.Epoch, l.sessions[k.Node] == k.LeaseID:
		case l.gone[k.LeaseID]:
			if !slices.Contains(ended, k.Node) {
				ended = append(ended, k.Node)
			}
		default:
			unknown = append(unknown, k)
		}
	}
	clear(l.keys)
	clear(l.sessions)
	for uuid, k := range snap.Keys {
		if k.Node != l.self {
			l.keys[uuid] = k
		}
	}
	for node, id := range snap.Sessions {
		if node != l.self {
			l.sessions[node] = id
		}
	}
	l.pruneGone()
	slices.Sort(ended)
	return ended, unknown
}

// pruneGone forgets the ended sessions no key in l.keys is on any more.
func (l *Lapses) pruneGone() {
	used := map[clientv3.LeaseID]bool{}
	for _, k := range l.keys {
		used[k.LeaseID] = true
	}
	for id := range l.gone {
		if !used[id] {
			delete(l.gone, id)
		}
	}
}

// EndedHolders asks etcd, for each key of unknown (Note), whether its
// lease ended, and returns the holders of those that did.
func EndedHolders(ctx context.Context, lc clientv3.Lease, unknown []Key) ([]string, error) {
	var out []string
	var errs []error
	for _, k := range unknown {
		ended, err := LeaseEnded(ctx, lc, k.LeaseID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ended && !slices.Contains(out, k.Node) {
			out = append(out, k.Node)
		}
	}
	return out, errors.Join(errs...)
}
