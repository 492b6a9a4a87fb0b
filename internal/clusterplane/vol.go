package clusterplane

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/plan"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/placement"
	"github.com/fabraid/fabraid/internal/volid"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// The volume API in a cluster: every node answers from etcd (the records
// and the owners' statuses) and its own consumer device; create and
// delete go through etcd; engine operations work on every node and run
// on the owner (req.go).

// ErrNotOwner is wrapped by engine operations that no owner can carry out
// now (the volume has none, or it is down).
var ErrNotOwner = errors.New("no running owner")

// createWait bounds how long volume create waits for the owner to report
// the volume ready.
const createWait = 4 * time.Minute

// clusterView reads the view now (the API's own read, not the loop's).
func (pl *Plane) currentView(ctx context.Context) (*clusterView, error) {
	cli := pl.cluster.Client()
	if cli == nil {
		return nil, ErrNoEtcd
	}
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	return readView(ctx, cli, pl.cfg.NodeName)
}

// etcdTimeout bounds one read or write of the volume records: etcd
// without quorum (or on a dead connection) must not hang the API or the
// reconcile loop.
const etcdTimeout = 10 * time.Second

// Create places a new volume over the registry, writes its record
// (state creating) and waits until its owner reports it ready (and this
// node's consumer device is there, for a while).
func (pl *Plane) Create(ctx context.Context, q api.CreateRequest) (api.Volume, error) {
	if err := volid.CheckNewName(q.Name); err != nil {
		return api.Volume{}, fmt.Errorf("%w: %w", volmgr.ErrInvalid, err)
	}
	if len(q.Drives) > 0 {
		return api.Volume{}, fmt.Errorf("%w: volume %s: --drives names local drives (one node); in a cluster placement picks the drives (--nodes limits the nodes)", volmgr.ErrInvalid, q.Name)
	}
	v, err := pl.currentView(ctx)
	if err != nil {
		return api.Volume{}, err
	}
	var u [16]byte
	rand.Read(u[:])
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	rec, err := plan.NewVolume(v.View, placement.Request{Name: q.Name, K: q.K, M: q.M, Groups: q.Groups, Nodes: q.Nodes}, u, time.Now())
	if err != nil {
		return api.Volume{}, fmt.Errorf("%w: %w", volmgr.ErrInvalid, err)
	}
	rec.ChunkSize = q.ChunkSize
	if err := setJournal(&rec, q.JournalBytes); err != nil {
		return api.Volume{}, err
	}
	if q.Attach != nil {
		if rec.Attach, err = checkAttachNodes(v, q.Attach.Nodes); err != nil {
			return api.Volume{}, err
		}
	}
	cli := pl.cluster.Client()
	cctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	err = volumes.Create(cctx, cli, rec)
	cancel()
	if err != nil {
		if errors.Is(err, volumes.ErrExists) || errors.Is(err, volumes.ErrInvalid) {
			return api.Volume{}, fmt.Errorf("%w: %w", volmgr.ErrInvalid, err)
		}
		return api.Volume{}, err
	}
	pl.log.Info("volume record written; waiting for its owner", "volume", rec.Name, "uuid", rec.UUID, "owner", rec.Owner)
	pl.kick()
	ctx, cancelWait := context.WithTimeout(ctx, createWait)
	defer cancelWait()
	var why string
	for {
		if v, err := pl.currentView(ctx); err == nil {
			vol, ok := v.volume(rec.UUID)
			st, has := v.Status[rec.UUID]
			switch {
			case !ok:
				return api.Volume{}, fmt.Errorf("volume %s: its record is gone (deleted?)", rec.Name)
			case vol.State == model.VolumeReady && has && st.State != model.VolumeCreating:
				return pl.waitHead(ctx, v, vol), nil
			case has && st.Error != "":
				why = st.Error
			case !has:
				why = fmt.Sprintf("owner %s has not reported the volume yet", rec.Owner)
			}
		}
		select {
		case <-ctx.Done():
			return api.Volume{}, fmt.Errorf("volume %s: not ready after %s (its record stays; fabraid volume delete removes it): %s", rec.Name, createWait, why)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitHead waits up to 30 s for this node's consumer device of vol (none
// when vol is not attached to this node) and returns its Info.
func (pl *Plane) waitHead(ctx context.Context, v *clusterView, vol model.Volume) api.Volume {
	u, _ := volid.ParseUUID(vol.UUID)
	pl.kick()
	deadline := time.Now().Add(30 * time.Second)
	for vol.AttachedTo(v.Self) && pl.mgr.Head(u) == "" && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
	}
	return pl.clusterInfo(v, vol)
}

// clusterInfo describes vol from the record, the owner's status and this
// node's consumer device; the owner adds its engine's view.
func (pl *Plane) clusterInfo(v *clusterView, vol model.Volume) api.Volume {
	u, _ := volid.ParseUUID(vol.UUID)
	head := pl.mgr.Head(u)
	if vol.Owner == v.Self && vol.State == model.VolumeReady {
		if in, err := pl.mgr.Info(vol.UUID); err == nil {
			in.Owner, in.Device, in.Epoch = vol.Owner, head, v.Status[vol.UUID].Epoch
			in.Attached = apiAttach(vol.Attach)
			in.ExportRefused, in.PathRefused = refusedNodes(v, vol), pl.loop.pathRefusedWhy(u)
			for i, m := range in.Members {
				if m.Slot < len(vol.Members) {
					in.Members[i].Domain = vol.Members[m.Slot].Domain
				}
			}
			return in
		}
	}
	st, has := v.Status[vol.UUID]
	in := remoteInfo(vol, st, has, head, headSize(head))
	in.ExportRefused, in.PathRefused = refusedNodes(v, vol), pl.loop.pathRefusedWhy(u)
	return in
}

// remoteInfo is vol as a node that does not run its engine sees it: the
// record, the owner's published status st (has: there is one) and this
// node's consumer device head of size bytes.
func remoteInfo(vol model.Volume, st model.VolumeStatus, has bool, head string, size int64) api.Volume {
	u, _ := volid.ParseUUID(vol.UUID)
	in := api.Volume{Name: vol.Name, UUID: vol.UUID, K: vol.K, M: vol.M, Groups: vol.Groups, ChunkSize: vol.ChunkSize,
		NQN: volid.NQN(u), Device: head, Owner: vol.Owner, Size: size, Attached: apiAttach(vol.Attach), FixedParity: vol.FixedParity}
	switch {
	case vol.State != model.VolumeReady:
		in.State = vol.State
	case has:
		in.State = st.State
	default:
		in.State = "unknown"
		in.Error = fmt.Sprintf("owner %s publishes no status (down?)", vol.Owner)
	}
	if has {
		in.Epoch, in.Journal, in.JournalBytes, in.OwnerJournal = st.Epoch, st.Journal, st.JournalBytes, st.OwnerJournal
		if in.ChunkSize == 0 {
			in.ChunkSize = st.ChunkSize // a record made with the engine's default
		}
		if st.Error != "" {
			in.Error = st.Error
		}
		in.Task, in.Reprotect = st.Task, st.Reprotect
		if len(st.LastTask) > 0 {
			json.Unmarshal(st.LastTask, &in.LastTask)
		}
		if st.Task != "" {
			in.Progress = &api.Progress{Kind: st.Task, Percent: st.Progress}
		}
	}
	role := map[int]model.VolumeMemberStatus{}
	for _, m := range st.Members {
		role[m.Slot] = m
	}
	for _, m := range vol.Members {
		mi := api.Member{Slot: m.Slot, Device: m.Node + ":" + m.Drive, Domain: m.Domain, Role: "unknown"}
		if r, ok := role[m.Slot]; ok {
			mi.Role, mi.Failure = r.Role, r.Failure
		}
		switch {
		case strings.Contains(mi.Role, "fail"):
			in.Failed++
		case strings.Contains(mi.Role, "rebuild") || strings.Contains(mi.Role, "stale"):
			in.Stale++
		}
		in.Members = append(in.Members, mi)
	}
	return in
}

// headSize is the size of block device dev in bytes, 0 when unknown.
func headSize(dev string) int64 {
	if dev == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join("/sys/class/block", filepath.Base(dev), "size"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n * 512
}

// List is every volume of the cluster, by name.
func (pl *Plane) List(ctx context.Context) ([]api.Volume, error) {
	v, err := pl.currentView(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.Volume{}
	for _, vol := range v.Volumes {
		out = append(out, pl.clusterInfo(v, vol))
	}
	return out, nil
}

// Show is one volume by name or UUID.
func (pl *Plane) Show(ctx context.Context, ref string) (api.Volume, error) {
	v, vol, err := pl.viewVolume(ctx, ref)
	if err != nil {
		return api.Volume{}, err
	}
	return pl.clusterInfo(v, vol), nil
}

// viewVolume reads the cluster view and finds volume ref (name or UUID)
// in it.
func (pl *Plane) viewVolume(ctx context.Context, ref string) (*clusterView, model.Volume, error) {
	v, err := pl.currentView(ctx)
	if err != nil {
		return nil, model.Volume{}, err
	}
	vol, ok := v.volume(ref)
	if !ok {
		return nil, model.Volume{}, fmt.Errorf("%w: %s", volmgr.ErrNotFound, ref)
	}
	return v, vol, nil
}

// Delete sets the volume's state to deleting and waits until its
// owner has removed it.
func (pl *Plane) Delete(ctx context.Context, ref string) error {
	_, vol, err := pl.viewVolume(ctx, ref)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	_, err = volumes.Modify(mctx, pl.cluster.Client(), vol.UUID, func(r *model.Volume) error {
		r.State = model.VolumeDeleting
		return nil
	})
	cancel()
	if err != nil {
		return err
	}
	pl.kick()
	ctx, cancelWait := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelWait()
	for {
		gctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		_, _, ok, err := volumes.Get(gctx, pl.cluster.Client(), vol.UUID)
		cancel()
		if err == nil && !ok {
			return nil
		}
		select {
		case <-ctx.Done():
			why := fmt.Sprintf("owner %s has not removed it", vol.Owner)
			if v, err := pl.currentView(context.Background()); err == nil {
				if st := v.Status[vol.UUID]; st.Error != "" {
					why = st.Error
				}
			}
			return fmt.Errorf("volume %s: marked deleting; not deleted within 2 min: %s", vol.Name, why)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// setJournal records a journal of n bytes in rec after the engine's check
// on rec's member size (ErrInvalid when refused): the owner creates the
// engine from the record, so a size it would refuse never reaches etcd.
func setJournal(rec *model.Volume, n int64) error {
	if n == 0 {
		return nil
	}
	cfg := engine.Config{K: rec.K, M: rec.M, Groups: rec.Groups, ChunkSize: rec.ChunkSize, JournalBytes: n}
	if err := engine.CheckJournalBytes(cfg, rec.MemberSize); err != nil {
		return fmt.Errorf("%w: volume %s: %w", volmgr.ErrInvalid, rec.Name, err)
	}
	rec.JournalBytes = n
	return nil
}
