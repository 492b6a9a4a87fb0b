package clusterplane

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/cluster/volumes"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// Attach lists (issue 27): a volume attached to some nodes is consumed by
// those nodes only (plan.ConsumedBy) and its export admits their hosts
// only (plan.AttachedHosts); without a list every node consumes it.

// Attach sets the attach list of volume ref (q.All: every node) and
// returns the volume as this node sees it.
func (pl *Plane) Attach(ctx context.Context, ref string, q api.AttachRequest) (api.Volume, error) {
	v, vol, err := pl.viewVolume(ctx, ref)
	if err != nil {
		return api.Volume{}, err
	}
	list, err := attachList(v, q)
	if err != nil {
		return api.Volume{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	vol, err = volumes.Modify(sctx, pl.cluster.Client(), vol.UUID, func(cur *model.Volume) error {
		cur.Attach = list
		return nil
	})
	cancel()
	if err != nil {
		if errors.Is(err, volumes.ErrNotFound) {
			return api.Volume{}, fmt.Errorf("%w: %w", volmgr.ErrNotFound, err)
		}
		return api.Volume{}, err
	}
	pl.log.Info("volume attach list set", "volume", vol.Name, "attached", apiAttach(vol.Attach).String())
	pl.kick()
	return pl.clusterInfo(v, vol), nil
}

// attachList checks q against the nodes of v: a list names known nodes,
// each once; All takes no names.
func attachList(v *clusterView, q api.AttachRequest) (*model.AttachList, error) {
	if q.All {
		if len(q.Nodes) > 0 {
			return nil, fmt.Errorf("%w: attach to every node or to a list, not both", volmgr.ErrInvalid)
		}
		return nil, nil
	}
	return checkAttachNodes(v, q.Nodes)
}

// checkAttachNodes refuses a node v does not know or one named twice.
func checkAttachNodes(v *clusterView, nodes []string) (*model.AttachList, error) {
	out := &model.AttachList{Nodes: []string{}}
	for _, n := range nodes {
		if _, ok := v.node(n); !ok {
			return nil, fmt.Errorf("%w: attach to %q: no such node in the cluster", volmgr.ErrInvalid, n)
		}
		if slices.Contains(out.Nodes, n) {
			return nil, fmt.Errorf("%w: attach list names %q twice", volmgr.ErrInvalid, n)
		}
		out.Nodes = append(out.Nodes, n)
	}
	slices.Sort(out.Nodes)
	return out, nil
}

// apiAttach is a record's attach list in the API's terms.
func apiAttach(a *model.AttachList) *api.Attach {
	if a == nil {
		return nil
	}
	return &api.Attach{Nodes: slices.Clone(a.Nodes)}
}
