package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/cluster/model"
	"github.com/fabraid/fabraid/internal/clusterplane"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// Volumes is the volume API behind /v1/volumes and /v1/nodes/{name}/drain
// and the volume half of the reconcile loop. There are two: localVolumes,
// the one-node volume manager, and *clusterplane.Plane, the cluster data
// plane; volumes() picks one per call, so a node that joins a cluster
// answers from etcd at once.
type Volumes interface {
	List(ctx context.Context) ([]api.Volume, error)
	Create(ctx context.Context, q api.CreateRequest) (api.Volume, error)
	Show(ctx context.Context, ref string) (api.Volume, error)
	Delete(ctx context.Context, ref string) error
	// Op carries out engine operation op of volume ref; a nil reply with
	// a nil error is done, a reply not done is a request under way (202).
	Op(ctx context.Context, ref, op string, q api.OpRequest) (*api.OpReply, error)
	Request(ctx context.Context, ref, id string) (*api.OpReply, error)
	Move(ctx context.Context, ref string, q api.MoveRequest) (api.MoveReply, error)
	Drain(ctx context.Context, node string, drained bool, q api.DrainRequest) (api.DrainReply, error)
	// Attach sets the nodes a cluster volume is attached to.
	Attach(ctx context.Context, ref string, q api.AttachRequest) (api.Volume, error)
	// Reconcile converges the node's volumes once; the daemon's loop
	// runs one at a time.
	Reconcile(ctx context.Context) error
}

var (
	_ Volumes = (*localVolumes)(nil)
	_ Volumes = (*clusterplane.Plane)(nil)
)

// volumes is the volume API of the node now: the cluster plane once the
// node belongs to a cluster (state on disk or external etcd, whether or
// not its membership is up yet; such a node never assembles volumes from
// its local superblock scan), else the one-node volume manager.
func (d *Daemon) volumes() Volumes {
	if d.plane.InCluster() {
		return d.plane
	}
	return d.local
}

// reconcileMessage is the log message of a failed reconcile of vs.
func reconcileMessage(vs Volumes) string {
	if _, ok := vs.(*clusterplane.Plane); ok {
		return "reconcile (cluster)"
	}
	return "reconcile"
}

// localVolumes is the volume API of a node in no cluster: the volume
// manager's own volumes; every change asks for a reconcile.
type localVolumes struct {
	mgr  *volmgr.Manager
	kick func()
}

func (l *localVolumes) List(context.Context) ([]api.Volume, error) {
	v := l.mgr.List()
	if v == nil {
		v = []api.Volume{}
	}
	return v, nil
}

func (l *localVolumes) Create(ctx context.Context, q api.CreateRequest) (api.Volume, error) {
	if q.Attach != nil {
		return api.Volume{}, fmt.Errorf("%w: --attach needs a cluster (a one-node volume is consumed on its node)", errBadRequest)
	}
	in, err := l.mgr.Create(ctx, q)
	if err == nil {
		l.kick()
	}
	return in, err
}

func (l *localVolumes) Show(_ context.Context, ref string) (api.Volume, error) {
	return l.mgr.Info(ref)
}

func (l *localVolumes) Delete(ctx context.Context, ref string) error {
	err := l.mgr.Delete(ctx, ref)
	l.kick()
	return err
}

func (l *localVolumes) Op(_ context.Context, ref, op string, q api.OpRequest) (*api.OpReply, error) {
	var err error
	if op == "replace" {
		err = l.mgr.Replace(ref, q.Slot, q.Drive, q.Rate)
	} else if known, opErr := l.mgr.EngineOp(ref, op, q); known {
		err = opErr
	} else {
		err = fmt.Errorf("%w: unknown operation %q", errBadRequest, op)
	}
	l.kick()
	return nil, err
}

func (l *localVolumes) Request(_ context.Context, _, id string) (*api.OpReply, error) {
	return nil, fmt.Errorf("%w: request %s: requests exist only in a cluster", volmgr.ErrNotFound, id)
}

func (l *localVolumes) Move(context.Context, string, api.MoveRequest) (api.MoveReply, error) {
	return api.MoveReply{}, fmt.Errorf("%w: volume move needs a cluster (one node owns every volume)", errBadRequest)
}

func (l *localVolumes) Drain(context.Context, string, bool, api.DrainRequest) (api.DrainReply, error) {
	return api.DrainReply{}, fmt.Errorf("%w: node drain needs a cluster", errBadRequest)
}

func (l *localVolumes) Attach(context.Context, string, api.AttachRequest) (api.Volume, error) {
	return api.Volume{}, fmt.Errorf("%w: attach lists need a cluster (a one-node volume is consumed on its node)", errBadRequest)
}

func (l *localVolumes) Reconcile(ctx context.Context) error { return l.mgr.Reconcile(ctx) }

// volumeRoutes adds the /v1/volumes API and node drains (see package
// api), served by volumes().
func (d *Daemon) volumeRoutes(mux *http.ServeMux, reply func(http.ResponseWriter, any, error), decode func(*http.Request, any) error) {
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		v, err := d.volumes().List(r.Context())
		reply(w, v, err)
	})
	mux.HandleFunc("POST /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		var q api.CreateRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		in, err := d.volumes().Create(r.Context(), q)
		reply(w, in, err)
	})
	mux.HandleFunc("GET /v1/volumes/{ref}", func(w http.ResponseWriter, r *http.Request) {
		in, err := d.volumes().Show(r.Context(), r.PathValue("ref"))
		reply(w, in, err)
	})
	mux.HandleFunc("DELETE /v1/volumes/{ref}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, d.volumes().Delete(r.Context(), r.PathValue("ref")))
	})
	mux.HandleFunc("GET /v1/volumes/{ref}/requests/{id}", func(w http.ResponseWriter, r *http.Request) {
		out, err := d.volumes().Request(r.Context(), r.PathValue("ref"), r.PathValue("id"))
		replyOp(w, reply, out, err)
	})
	mux.HandleFunc("POST /v1/volumes/{ref}/move", func(w http.ResponseWriter, r *http.Request) {
		var q api.MoveRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		out, err := d.volumes().Move(r.Context(), r.PathValue("ref"), q)
		reply(w, out, err)
	})
	mux.HandleFunc("POST /v1/volumes/{ref}/attach", func(w http.ResponseWriter, r *http.Request) {
		var q api.AttachRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		out, err := d.volumes().Attach(r.Context(), r.PathValue("ref"), q)
		reply(w, out, err)
	})
	mux.HandleFunc("POST /v1/volumes/{ref}/{op}", func(w http.ResponseWriter, r *http.Request) {
		var q api.OpRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		out, err := d.volumes().Op(r.Context(), r.PathValue("ref"), r.PathValue("op"), q)
		replyOp(w, reply, out, err)
	})
	for _, method := range []string{"POST", "DELETE"} {
		mux.HandleFunc(method+" /v1/nodes/{name}/drain", func(w http.ResponseWriter, r *http.Request) {
			var q api.DrainRequest
			if err := decode(r, &q); err != nil {
				reply(w, nil, err)
				return
			}
			out, err := d.volumes().Drain(r.Context(), r.PathValue("name"), method == "POST", q)
			reply(w, out, err)
		})
	}
}

// replyOp writes an operation's answer: 202 for a request the owner has
// not finished yet.
func replyOp(w http.ResponseWriter, reply func(http.ResponseWriter, any, error), out *api.OpReply, err error) {
	if err != nil || out == nil || out.State == model.RequestDone {
		if out == nil {
			reply(w, nil, err)
			return
		}
		reply(w, out, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(out)
}
