package clusterplane

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/fabraid/fabraid/internal/cluster"
	"github.com/fabraid/fabraid/internal/cluster/store"
	"github.com/fabraid/fabraid/internal/cluster/token"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/volmgr"
	"github.com/fabraid/fabraid/plugins/backend"
)

// Options configure a Plane.
type Options struct {
	Config config.Config
	Log    *slog.Logger
	// Manager runs this node's engines, exports and consumer devices.
	Manager *volmgr.Manager
	// Node is this node's cluster membership (etcd client, registry,
	// host and controller secrets).
	Node *cluster.Node
	// Target, when not nil, is the target backend drive exports go
	// through (a plugin); nil: the in-process kernel nvmet backend.
	Target backend.Backend
	// Kick asks the daemon for a reconcile soon; it must not block.
	Kick func()
}

// Plane is the cluster data plane of one node. Its Reconcile runs one at
// a time (the daemon's reconcile loop); the API methods run concurrently
// with it and read etcd themselves.
type Plane struct {
	cfg     config.Config
	log     *slog.Logger
	mgr     *volmgr.Manager
	cluster *cluster.Node
	// owners is the node's owner session and held volumes (owner.go).
	owners *ownership
	// loop is the data-plane loop's state (loop.go).
	loop *clusterLoop
	kick func()
}

// New prepares the plane; nothing runs until the first Reconcile.
func New(o Options) *Plane {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Kick == nil {
		o.Kick = func() {}
	}
	pl := &Plane{cfg: o.Config, log: o.Log, mgr: o.Manager, cluster: o.Node, loop: newClusterLoop(), kick: o.Kick}
	if o.Target != nil {
		pl.loop.x.Target = o.Target
	}
	ttl := time.Duration(o.Config.Cluster.OwnerLeaseTTL) * time.Second
	pl.owners = newOwnership(o.Config.NodeName, ttl, o.Log, o.Manager.FreezeAll, o.Kick)
	pl.loop.resigned = func(uuid string) { go pl.owners.acquireOnResign(pl.cluster.Client(), uuid) }
	return pl
}

// Close freezes this node's engines and revokes its owner lease (another
// node may take the volumes over); called before the cluster client goes.
func (pl *Plane) Close(ctx context.Context) { pl.owners.close(ctx) }

// ExportsState is this node's export state for its registry record
// (model.Exports*) and why exports are refused, if they are.
func (pl *Plane) ExportsState() (state, why string) { return pl.loop.exportsState() }

// EnableRBAC turns on etcd RBAC on a cluster made before it; its
// refusals carry their HTTP status and say what to do instead.
func (pl *Plane) EnableRBAC(ctx context.Context) error {
	return enableRBACError(pl.cluster.EnableRBAC(ctx))
}

// ErrBadRequest is wrapped by refusals of a malformed request (400).
var ErrBadRequest = errors.New("bad request")

// ErrorCode is the HTTP status of an error of the API or of an engine
// operation (0 for nil): the owner's own status for a request the owner
// refused, else by the error's kind. Requests carry it to the asking
// node through etcd (volumes.Finish).
func ErrorCode(err error) int {
	if err == nil {
		return 0
	}
	var oe *ownerError
	if errors.As(err, &oe) {
		return oe.code
	}
	code := http.StatusInternalServerError
	if c := clusterCode(err); c != 0 {
		code = c
	}
	switch {
	case errors.Is(err, volmgr.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, volmgr.ErrInUse), errors.Is(err, volmgr.ErrBusy), errors.Is(err, ErrNotOwner), errors.Is(err, ErrVolumeState):
		code = http.StatusConflict
	case errors.Is(err, ErrBadRequest), errors.Is(err, volmgr.ErrInvalid):
		code = http.StatusBadRequest
	}
	return code
}

// clusterCode is the status of the membership's refusals, 0 for others.
func clusterCode(err error) int {
	switch {
	case errors.Is(err, cluster.ErrNotInCluster), errors.Is(err, cluster.ErrInCluster), errors.Is(err, cluster.ErrExternal), errors.Is(err, store.ErrShrink), errors.Is(err, cluster.ErrAlive):
		return http.StatusConflict
	case errors.Is(err, cluster.ErrRefused), errors.Is(err, token.ErrMalformed):
		return http.StatusForbidden
	}
	return 0
}

// DriveTarget is the target backend this node's drive exports go
// through (Options.Target, or the in-process kernel nvmet backend).
func (pl *Plane) DriveTarget() backend.Backend { return pl.loop.x.Target }
