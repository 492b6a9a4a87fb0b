package volmgr

import "github.com/fabraid/fabraid/internal/api"

// EngineOp runs the engine operation op of volume ref: fail, re-add,
// rebuild or scrub, with q's slot, force, repair and rate. Any other op
// is not an engine call here (known false, nothing done); replace needs a
// drive, and its path differs between one node and a cluster.
func (m *Manager) EngineOp(ref, op string, q api.OpRequest) (known bool, err error) {
	switch op {
	case "fail":
		return true, m.Fail(ref, q.Slot, q.Force)
	case "re-add":
		return true, m.ReAdd(ref, q.Slot, q.Rate)
	case "rebuild":
		return true, m.Rebuild(ref, q.Rate)
	case "scrub":
		return true, m.Scrub(ref, q.Repair, q.Rate)
	}
	return false, nil
}
