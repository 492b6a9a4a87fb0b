package volumes

import "github.com/fabraid/fabraid/internal/cluster/model"

// Summary joins the volume records with their owners' statuses, in the
// records' order, for "fabraid cluster status". A status counts only when
// it comes from the record's owner; without one State is the record's
// state for a volume being created or deleted and "unknown" for a ready
// one (its owner is dead or has not started it yet).
func Summary(vols []model.Volume, status map[string]model.VolumeStatus) []model.VolumeInfo {
	out := make([]model.VolumeInfo, 0, len(vols))
	for _, v := range vols {
		vi := model.VolumeInfo{UUID: v.UUID, Name: v.Name, K: v.K, M: v.M, Groups: v.Groups, Owner: v.Owner, Record: v.State, State: "unknown"}
		if v.State != model.VolumeReady {
			vi.State = v.State
		}
		if s, ok := status[v.UUID]; ok && s.Owner == v.Owner && v.Owner != "" {
			vi.State, vi.Degraded, vi.Task, vi.Progress, vi.ResyncBytes = s.State, s.Degraded(), s.Task, s.Progress, s.ResyncBytes
		}
		out = append(out, vi)
	}
	return out
}
