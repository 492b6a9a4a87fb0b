package volmgr

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/api"
	"github.com/fabraid/fabraid/internal/volid"
)

// State derives a volume's state word from the engine status.
func State(s engine.Status) string {
	switch {
	case s.Failed:
		return "failed"
	case s.Progress != nil && s.Progress.Kind != "scrub":
		return "rebuilding"
	case s.Degraded:
		return "degraded"
	}
	return "optimal"
}

// Info returns the volume named ref (name or UUID).
func (m *Manager) Info(ref string) (api.Volume, error) {
	u, e, err := m.resolve(ref)
	if e == nil && u == ([16]byte{}) {
		return api.Volume{}, err
	}
	var st EngineStatus
	if e != nil {
		// An engine that does not answer has died and is being restarted
		// (by the daemon or by systemd): the volume is stopped until then.
		if st, err = e.Status(); err != nil {
			err = fmt.Errorf("volume %s: engine does not answer (restarting?): %w", ref, err)
		}
	}
	if err != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		return notRunningInfo(m.names[u], u, err), nil
	}
	m.mu.Lock()
	head := m.heads[u]
	m.mu.Unlock()
	s := st.Engine
	in := api.Volume{Name: s.Name, UUID: volid.Format(u), State: State(s), Size: s.Size, K: s.Geometry.K, M: s.Geometry.M,
		Groups: s.Geometry.Groups, ChunkSize: s.Geometry.ChunkSize, Device: head, NQN: volid.NQN(u), Ublk: st.UblkPath, UblkZeroCopy: st.ZeroCopy,
		EnginePID: st.PID, Task: st.Task, LastTask: st.LastTask, IO: &st.IO,
		Journal: s.Journal, JournalBytes: s.JournalBytes, FixedParity: s.Geometry.FixedParity, WriteHoleStripes: s.WriteHoleStripes, OwnerJournal: s.OwnerJournal, Rebuild: rebuildBytes(s),
		ExportAuth: exportAuth(m.currentPlan())}
	for _, ms := range s.Members {
		role := strings.ToLower(ms.Role.String())
		mi := api.Member{Slot: ms.Slot, Device: ms.Device, Domain: ms.Domain, Role: role, Resync: ms.Resync, Checkpoint: ms.Checkpoint}
		if ms.Role == superblock.RoleFailed {
			mi.Failure = ms.Failure.String()
		}
		in.Members = append(in.Members, mi)
		switch {
		case strings.Contains(role, "fail"):
			in.Failed++
		case ms.Resync || strings.Contains(role, "rebuild") || strings.Contains(role, "stale"):
			in.Stale++
		}
	}
	if p := s.Progress; p != nil {
		in.Progress = &api.Progress{Kind: p.Kind, Done: p.Done, Total: p.Total}
		if p.Total > 0 {
			in.Progress.Percent = 100 * float64(p.Done) / float64(p.Total)
		}
	}
	return in, nil
}

// List returns every known volume, sorted by name.
func (m *Manager) List() []api.Volume {
	m.mu.Lock()
	var refs []string
	for u := range m.names {
		refs = append(refs, volid.Format(u))
	}
	m.mu.Unlock()
	// Concurrently: a slow engine costs List one call's time, not one
	// per volume.
	infos := make([]*api.Volume, len(refs))
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxParallelStarts)
	for i, r := range refs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if in, err := m.Info(r); err == nil {
				infos[i] = &in
			}
		}()
	}
	wg.Wait()
	var out []api.Volume
	for _, in := range infos {
		if in != nil {
			out = append(out, *in)
		}
	}
	slices.SortFunc(out, func(a, b api.Volume) int { return strings.Compare(a.Name, b.Name) })
	return out
}
