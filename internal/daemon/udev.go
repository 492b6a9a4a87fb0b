package daemon

import (
	"errors"
	"net/http"

	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/volmgr"
)

// udevRoutes serves what the udev rules call (packaging/udev): POST
// /v1/udev/remove, a block device went away ("fabraid udev-remove"). The
// volume manager fails it as missing in every engine that holds it; the
// reply says what it did ("" when the device was no member).
func (d *Daemon) udevRoutes(mux *http.ServeMux, reply func(http.ResponseWriter, any, error), decode func(*http.Request, any) error) {
	mux.HandleFunc("POST /v1/udev/remove", func(w http.ResponseWriter, r *http.Request) {
		var q api.UdevRemoveRequest
		if err := decode(r, &q); err != nil {
			reply(w, nil, err)
			return
		}
		done, err := d.mgr.MemberRemoved(q.Device)
		if errors.Is(err, volmgr.ErrStillPresent) {
			reply(w, api.UdevRemoveReply{Ignored: err.Error()}, nil)
			return
		}
		if done != "" {
			d.Kick()
		}
		reply(w, api.UdevRemoveReply{Done: done}, err)
	})
}
