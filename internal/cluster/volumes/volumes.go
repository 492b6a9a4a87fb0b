// Package volumes is the store of volume records in etcd: the desired
// state of every volume (keys.Volume, by UUID), the cluster-unique claim
// of its name (keys.VolumeName), the owner's status on the owner's lease
// (keys.VolumeStatus), and every node's DH-HMAC-CHAP host secret
// (keys.HostKey).
//
// # Invariants
//
//   - A volume record and its name claim are written and deleted in one
//     transaction: a name key exists exactly when a volume record of that
//     name and UUID exists. Create is conditioned on both keys being
//     absent, so of two racing creates of one name exactly one wins.
//   - A drive is a member of at most one volume in the cluster: every
//     member's (node, drive) has a claim key (keys.DriveClaim) naming its
//     volume, written in the record's transaction on the condition that
//     it is absent and deleted with the record, so two volumes placed at
//     once over the same free drive cannot both be created.
//   - Update is a compare-and-swap on the record's mod revision; the UUID
//     and the name of a record never change; member changes move the
//     drive claims in the same transaction.
//   - A status key lives on a lease (the owner's): when the owner dies,
//     its statuses disappear with it.
//
// Values are JSON with a "version" field; readers refuse versions newer
// than theirs (model.VolumeVersion, ...) with an error that says so.
package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/config"
)

// Errors callers map to answers.
var (
	// ErrExists: Create found the name or the UUID taken (the error
	// names the volume holding it).
	ErrExists = errors.New("volume exists")
	// ErrNotFound: no volume of that UUID or name.
	ErrNotFound = errors.New("no such volume")
	// ErrConflict: the record changed since the revision the caller read
	// (read it again and retry).
	ErrConflict = errors.New("volume record changed concurrently")
	// ErrInvalid: a record that cannot be stored (bad UUID or name, a
	// changed UUID or name in Update).
	ErrInvalid = errors.New("invalid volume record")
)

// Create writes the new volume v (Version is set), the claim of its name
// and the claims of its members' drives in one transaction, conditioned on
// all of them being absent. A taken name, UUID or drive is ErrExists,
// naming the volume that holds it.
func Create(ctx context.Context, kv clientv3.KV, v model.Volume) error {
	if err := check(v); err != nil {
		return err
	}
	v.Version = model.VolumeVersion
	rec, _ := json.Marshal(v)
	claim, _ := json.Marshal(model.VolumeName{Version: model.VolumeNameVersion, UUID: v.UUID})
	vk, nk := keys.Volume(v.UUID), keys.VolumeName(v.Name)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(nk), "=", 0), clientv3.Compare(clientv3.CreateRevision(vk), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(vk, string(rec)), clientv3.OpPut(nk, string(claim))}
	gets := []clientv3.Op{clientv3.OpGet(nk), clientv3.OpGet(vk)}
	for _, m := range v.Members {
		k := keys.DriveClaim(m.Node, m.Drive)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		ops = append(ops, clientv3.OpPut(k, string(claim)))
		gets = append(gets, clientv3.OpGet(k))
	}
	resp, err := kv.Txn(ctx).If(cmps...).Then(ops...).Else(gets...).Commit()
	if err != nil {
		return fmt.Errorf("volumes: create %q: %w", v.Name, err)
	}
	if resp.Succeeded {
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return fmt.Errorf("volumes: create %q: %w: volume %q is %s", v.Name, ErrExists, v.Name, holder(kvs[0].Value))
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		return fmt.Errorf("volumes: create %q: %w: UUID %s is taken", v.Name, ErrExists, v.UUID)
	}
	return fmt.Errorf("volumes: create %q: %w", v.Name, takenDrive(ctx, kv, v.Members, resp.Responses[2:]))
}

// holder is the UUID a name or drive claim names, or why it cannot be read.
func holder(b []byte) string {
	var n model.VolumeName
	if err := decode(b, &n.Version, &n, model.VolumeNameVersion); err != nil {
		return "(unreadable claim: " + err.Error() + ")"
	}
	return n.UUID
}

// takenDrive names the first member drive whose claim exists in resps
// (the Else gets of a failed transaction, one per member) and its volume.
func takenDrive(ctx context.Context, kv clientv3.KV, members []model.VolumeMember, resps []*etcdserverpb.ResponseOp) error {
	for i, r := range resps {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		m, u := members[i], holder(kvs[0].Value)
		name := "?"
		if o, _, ok, err := Get(ctx, kv, u); err == nil && ok {
			name = o.Name
		}
		return fmt.Errorf("%w: drive %s of node %s is a member of volume %q (%s)", ErrExists, m.Drive, m.Node, name, u)
	}
	return fmt.Errorf("%w: the name, UUID or a drive was taken and released meanwhile (retry)", ErrConflict)
}

// Get returns the volume uuid and the mod revision of its record (for
// Update); ok is false when there is none.
func Get(ctx context.Context, kv clientv3.KV, uuid string) (model.Volume, int64, bool, error) {
	resp, err := kv.Get(ctx, keys.Volume(uuid))
	if err != nil {
		return model.Volume{}, 0, false, fmt.Errorf("volumes: get %s: %w", uuid, err)
	}
	if len(resp.Kvs) == 0 {
		return model.Volume{}, 0, false, nil
	}
	v, err := DecodeVolume(resp.Kvs[0].Value)
	if err != nil {
		return model.Volume{}, 0, false, fmt.Errorf("volumes: %s: %w", resp.Kvs[0].Key, err)
	}
	return v, resp.Kvs[0].ModRevision, true, nil
}

// GetByName returns the volume named name, like Get.
func GetByName(ctx context.Context, kv clientv3.KV, name string) (model.Volume, int64, bool, error) {
	if err := checkName(name); err != nil {
		return model.Volume{}, 0, false, err
	}
	resp, err := kv.Get(ctx, keys.VolumeName(name))
	if err != nil {
		return model.Volume{}, 0, false, fmt.Errorf("volumes: get %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return model.Volume{}, 0, false, nil
	}
	var n model.VolumeName
	if err := decode(resp.Kvs[0].Value, &n.Version, &n, model.VolumeNameVersion); err != nil {
		return model.Volume{}, 0, false, fmt.Errorf("volumes: %s: %w", resp.Kvs[0].Key, err)
	}
	v, rev, ok, err := Get(ctx, kv, n.UUID)
	if err != nil || !ok {
		return v, rev, ok, err
	}
	if v.Name != name { // deleted and re-created between the two reads
		return model.Volume{}, 0, false, nil
	}
	return v, rev, true, nil
}

// List returns every volume record, by name.
func List(ctx context.Context, kv clientv3.KV) ([]model.Volume, error) {
	resp, err := kv.Get(ctx, keys.VolumesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("volumes: list: %w", err)
	}
	out := make([]model.Volume, 0, len(resp.Kvs))
	for _, e := range resp.Kvs {
		v, err := DecodeVolume(e.Value)
		if err != nil {
			return nil, fmt.Errorf("volumes: %s: %w", e.Key, err)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Update applies f to the record of uuid as of mod revision rev and
// writes it back if the record is still at rev; otherwise ErrConflict
// (the caller reads again and retries). f must not change the UUID or the
// name; an error from f is returned and nothing is written.
func Update(ctx context.Context, kv clientv3.KV, uuid string, rev int64, f func(*model.Volume) error) error {
	return update(ctx, kv, uuid, rev, f, nil)
}

// update is Update with extra operations in the record's transaction.
func update(ctx context.Context, kv clientv3.KV, uuid string, rev int64, f func(*model.Volume) error, extra []clientv3.Op) error {
	v, cur, ok, err := Get(ctx, kv, uuid)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("volumes: update %s: %w", uuid, ErrNotFound)
	}
	if cur != rev {
		return fmt.Errorf("volumes: update %q (%s): %w (revision %d, read at %d)", v.Name, uuid, ErrConflict, cur, rev)
	}
	name, old := v.Name, v
	old.Members = slices.Clone(v.Members)
	if err := f(&v); err != nil {
		return err
	}
	if v.UUID != uuid || v.Name != name {
		return fmt.Errorf("volumes: update %q (%s): %w: the UUID and the name of a volume do not change", name, uuid, ErrInvalid)
	}
	if err := check(v); err != nil {
		return err
	}
	v.Version = model.VolumeVersion
	b, _ := json.Marshal(v)
	vk := keys.Volume(uuid)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(vk), "=", rev)}
	ops := []clientv3.Op{clientv3.OpPut(vk, string(b))}
	claim, _ := json.Marshal(model.VolumeName{Version: model.VolumeNameVersion, UUID: uuid})
	added, removed := memberDiff(old.Members, v.Members)
	var gets []clientv3.Op
	for _, m := range added {
		k := keys.DriveClaim(m.Node, m.Drive)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		ops = append(ops, clientv3.OpPut(k, string(claim)))
		gets = append(gets, clientv3.OpGet(k))
	}
	for _, m := range removed {
		ops = append(ops, clientv3.OpDelete(keys.DriveClaim(m.Node, m.Drive)))
	}
	ops = append(ops, extra...)
	resp, err := kv.Txn(ctx).If(cmps...).Then(ops...).Else(append([]clientv3.Op{clientv3.OpGet(vk)}, gets...)...).Commit()
	if err != nil {
		return fmt.Errorf("volumes: update %q (%s): %w", name, uuid, err)
	}
	if resp.Succeeded {
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].ModRevision != rev {
		return fmt.Errorf("volumes: update %q (%s): %w", name, uuid, ErrConflict)
	}
	return fmt.Errorf("volumes: update %q (%s): %w", name, uuid, takenDrive(ctx, kv, added, resp.Responses[1:]))
}

// memberDiff returns the members of b whose drive is not in a, and those
// of a whose drive is not in b.
func memberDiff(a, b []model.VolumeMember) (added, removed []model.VolumeMember) {
	in := func(ms []model.VolumeMember, m model.VolumeMember) bool {
		return slices.ContainsFunc(ms, func(x model.VolumeMember) bool { return x.Node == m.Node && x.Drive == m.Drive })
	}
	for _, m := range b {
		if !in(a, m) {
			added = append(added, m)
		}
	}
	for _, m := range a {
		if !in(b, m) {
			removed = append(removed, m)
		}
	}
	return added, removed
}

// Modify reads the record of uuid, applies f and writes it back,
// retrying on ErrConflict until it succeeds or ctx ends. f may run more
// than once. It returns the record as written.
func Modify(ctx context.Context, kv clientv3.KV, uuid string, f func(*model.Volume) error) (model.Volume, error) {
	for {
		_, rev, ok, err := Get(ctx, kv, uuid)
		if err != nil {
			return model.Volume{}, err
		}
		if !ok {
			return model.Volume{}, fmt.Errorf("volumes: update %s: %w", uuid, ErrNotFound)
		}
		var out model.Volume
		err = Update(ctx, kv, uuid, rev, func(v *model.Volume) error {
			if err := f(v); err != nil {
				return err
			}
			out = *v
			return nil
		})
		if !errors.Is(err, ErrConflict) {
			out.Version = model.VolumeVersion
			return out, err
		}
		if err := ctx.Err(); err != nil {
			return model.Volume{}, fmt.Errorf("volumes: update %s: %w", uuid, err)
		}
	}
}

// Delete removes the volume uuid, its name claim, its drive claims and
// its status in one transaction. Deleting a volume that is gone is no error.
func Delete(ctx context.Context, kv clientv3.KV, uuid string) error {
	for {
		v, rev, ok, err := Get(ctx, kv, uuid)
		if err != nil || !ok {
			return err
		}
		vk, nk := keys.Volume(uuid), keys.VolumeName(v.Name)
		// The name claim is this volume's (the invariant); the mod
		// revision check keeps a concurrent Update from being lost
		// silently: it is retried against the new record.
		ops := []clientv3.Op{clientv3.OpDelete(vk), clientv3.OpDelete(nk), clientv3.OpDelete(keys.VolumeStatus(uuid)), clientv3.OpDelete(keys.Move(uuid))}
		for _, m := range v.Members {
			ops = append(ops, clientv3.OpDelete(keys.DriveClaim(m.Node, m.Drive)))
		}
		resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(vk), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("volumes: delete %q (%s): %w", v.Name, uuid, err)
		}
		if resp.Succeeded {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("volumes: delete %q (%s): %w", v.Name, uuid, err)
		}
	}
}

// PutStatus writes the owner's status s of volume s.UUID on lease (the
// owner's; 0 writes it without a lease, for tests).
func PutStatus(ctx context.Context, kv clientv3.KV, lease clientv3.LeaseID, s model.VolumeStatus) error {
	if err := checkUUID(s.UUID); err != nil {
		return err
	}
	s.Version = model.VolumeStatusVersion
	b, _ := json.Marshal(s)
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	if _, err := kv.Put(ctx, keys.VolumeStatus(s.UUID), string(b), opts...); err != nil {
		return fmt.Errorf("volumes: put status of %q (%s): %w", s.Name, s.UUID, err)
	}
	return nil
}

// ListStatus returns every published status by volume UUID.
func ListStatus(ctx context.Context, kv clientv3.KV) (map[string]model.VolumeStatus, error) {
	resp, err := kv.Get(ctx, keys.VolumeStatusPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("volumes: list status: %w", err)
	}
	out := make(map[string]model.VolumeStatus, len(resp.Kvs))
	for _, e := range resp.Kvs {
		s, err := DecodeStatus(e.Value)
		if err != nil {
			return nil, fmt.Errorf("volumes: %s: %w", e.Key, err)
		}
		out[string(e.Key[len(keys.VolumeStatusPrefix):])] = s
	}
	return out, nil
}

// DecodeVolume decodes and checks a volume record.
func DecodeVolume(b []byte) (model.Volume, error) {
	var v model.Volume
	if err := decode(b, &v.Version, &v, model.VolumeVersion); err != nil {
		return model.Volume{}, err
	}
	if err := check(v); err != nil {
		return model.Volume{}, err
	}
	return v, nil
}

// DecodeStatus decodes a volume status.
func DecodeStatus(b []byte) (model.VolumeStatus, error) {
	var s model.VolumeStatus
	if err := decode(b, &s.Version, &s, model.VolumeStatusVersion); err != nil {
		return model.VolumeStatus{}, err
	}
	return s, nil
}

func decode(b []byte, version *int, v any, max int) error {
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	if *version < 1 || *version > max {
		return fmt.Errorf("schema version %d, this fabraid reads 1..%d (upgrade it)", *version, max)
	}
	return nil
}

// check validates what the store relies on: a canonical UUID, a name that
// is a safe key, a geometry and members that match it.
func check(v model.Volume) error {
	if err := checkUUID(v.UUID); err != nil {
		return err
	}
	if err := checkName(v.Name); err != nil {
		return err
	}
	if v.K < 1 || v.M < 0 || v.Groups < 1 {
		return fmt.Errorf("volume %q: %w: geometry %d+%d x %d groups", v.Name, ErrInvalid, v.K, v.M, v.Groups)
	}
	if v.ChunkSize < 0 || v.JournalBytes < 0 {
		return fmt.Errorf("volume %q: %w: chunk size %d, journal %d bytes", v.Name, ErrInvalid, v.ChunkSize, v.JournalBytes)
	}
	if want := v.Groups * (v.K + v.M); len(v.Members) != want {
		return fmt.Errorf("volume %q: %w: %d members, %d groups of %d+%d need %d", v.Name, ErrInvalid, len(v.Members), v.Groups, v.K, v.M, want)
	}
	seen := map[[2]string]bool{}
	for i, m := range v.Members {
		if seen[[2]string{m.Node, m.Drive}] {
			return fmt.Errorf("volume %q: %w: drive %s of node %s is in two slots", v.Name, ErrInvalid, m.Drive, m.Node)
		}
		seen[[2]string{m.Node, m.Drive}] = true
		if m.Slot != i || m.Node == "" || m.Drive == "" {
			return fmt.Errorf("volume %q: %w: member %d is {slot %d, node %q, drive %q}", v.Name, ErrInvalid, i, m.Slot, m.Node, m.Drive)
		}
		if m.UUID != "" {
			if err := checkUUID(m.UUID); err != nil {
				return fmt.Errorf("volume %q member %d: %w", v.Name, i, err)
			}
		}
	}
	switch v.State {
	case model.VolumeCreating, model.VolumeReady, model.VolumeDeleting:
	default:
		return fmt.Errorf("volume %q: %w: state %q", v.Name, ErrInvalid, v.State)
	}
	return checkAttach(v)
}

// MaxAttach bounds a volume's attach list.
const MaxAttach = 4096

// checkAttach refuses an attach list that names a node twice, a name that
// is no node name, or more than MaxAttach nodes.
func checkAttach(v model.Volume) error {
	if v.Attach == nil {
		return nil
	}
	if len(v.Attach.Nodes) > MaxAttach {
		return fmt.Errorf("volume %q: %w: attached to %d nodes, at most %d", v.Name, ErrInvalid, len(v.Attach.Nodes), MaxAttach)
	}
	seen := map[string]bool{}
	for _, n := range v.Attach.Nodes {
		if err := config.CheckNodeName(n); err != nil || seen[n] {
			return fmt.Errorf("volume %q: %w: attach list entry %q (a node name, once)", v.Name, ErrInvalid, n)
		}
		seen[n] = true
	}
	return nil
}

// checkName refuses names that are no safe key (volid.CheckNewName is
// stricter and runs before placement).
func checkName(name string) error {
	if name == "" || len(name) > 255 || !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r == '/' || unicode.IsControl(r) }) {
		return fmt.Errorf("%w: volume name %q", ErrInvalid, name)
	}
	return nil
}

// checkUUID accepts the canonical lower-case 8-4-4-4-12 form only, so one
// volume has one key.
func checkUUID(u string) error {
	ok := len(u) == 36
	for i := 0; ok && i < len(u); i++ {
		switch c := u[i]; i {
		case 8, 13, 18, 23:
			ok = c == '-'
		default:
			ok = c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
		}
	}
	if !ok {
		return fmt.Errorf("%w: UUID %q (want lower-case 8-4-4-4-12)", ErrInvalid, u)
	}
	return nil
}
