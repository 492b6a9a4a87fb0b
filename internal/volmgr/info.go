package volmgr

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
)

// Info describes a volume for the API and the CLI.
type Info struct {
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
	State     string `json:"state"` // optimal, degraded, rebuilding, failed, stopped, waiting (gate.go)
	Size      int64  `json:"size"`
	K         int    `json:"k"`
	M         int    `json:"m"`
	Groups    int    `json:"groups"`
	ChunkSize int    `json:"chunk_size"`
	Device    string `json:"device,omitempty"` // consumer device: NVMe multipath head
	// Owner is the node running the engine (in a cluster), and Epoch the
	// owner epoch its engine runs at (0: not known here).
	Owner     string       `json:"owner,omitempty"`
	Epoch     uint64       `json:"epoch,omitempty"`
	NQN       string       `json:"nqn"`
	Ublk      string       `json:"ublk,omitempty"`
	EnginePID int          `json:"engine_pid,omitempty"`
	Members   []MemberInfo `json:"members,omitempty"`
	Failed    int          `json:"failed_members"`
	Stale     int          `json:"stale_members"`
	Progress  *Progress    `json:"progress,omitempty"`
	Task      string       `json:"task,omitempty"`
	LastTask  *TaskResult  `json:"last_task,omitempty"`
	Error     string       `json:"error,omitempty"`
	// IO are the engine's request counters since it started (reset when
	// the engine process restarts).
	IO *engine.IOStats `json:"io,omitempty"`
	// Journal says whether the stripe journal protects writes while the
	// volume is degraded (on-disk format version 2).
	Journal bool `json:"journal"`
	// WriteHoleStripes counts stripes whose lost chunks may read back
	// wrong after the last unclean stop (a member lost at the crash
	// itself; docs/engine.md, "write hole"). 0 is the normal case.
	WriteHoleStripes int64 `json:"write_hole_stripes,omitempty"`
	// OwnerJournal counts the members covered by owner-domain journaling
	// (engine Status.OwnerJournal): writes to their data chunks survive
	// the owner's loss with them. 0: off.
	OwnerJournal int `json:"owner_journal,omitempty"`
	// Rebuild is how much the running or last rebuild (or resync of
	// returning members) rewrites (rebuildbytes.go).
	Rebuild *RebuildBytes `json:"rebuild_bytes,omitempty"`
	// ExportAuth is how this node's exports authenticate their hosts (in
	// a cluster, on the owner): ExportAuthDHCHAP, or ExportAuthHostNQN
	// when the target lacks DH-HMAC-CHAP and any host presenting an
	// allowed host NQN gets in.
	ExportAuth string `json:"export_auth,omitempty"`
}

// MemberInfo is one member slot.
type MemberInfo struct {
	Slot       int    `json:"slot"`
	Device     string `json:"device"`
	Domain     string `json:"domain"`
	Role       string `json:"role"`
	Resync     bool   `json:"resync,omitempty"`
	Checkpoint int64  `json:"checkpoint,omitempty"`
	// Failure says why a failed member failed: "admin", "io-error",
	// "missing", "unreachable" or "unrecorded". A "missing" or
	// "unreachable" member comes back by itself when its drive is found
	// again; the others stay failed until re-added or replaced.
	Failure string `json:"failure,omitempty"`
}

// Progress is a running rebuild, resync or scrub.
type Progress struct {
	Kind    string  `json:"kind"`
	Done    int64   `json:"done_rows"`
	Total   int64   `json:"total_rows"`
	Percent float64 `json:"percent"`
}

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
func (m *Manager) Info(ref string) (Info, error) {
	u, e, err := m.resolve(ref)
	if e == nil && u == ([16]byte{}) {
		return Info{}, err
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
	in := Info{Name: s.Name, UUID: FormatUUID(u), State: State(s), Size: s.Size, K: s.Geometry.K, M: s.Geometry.M,
		Groups: s.Geometry.Groups, ChunkSize: s.Geometry.ChunkSize, Device: head, NQN: NQN(u), Ublk: st.UblkPath,
		EnginePID: st.PID, Task: st.Task, LastTask: st.LastTask, IO: &st.IO,
		Journal: s.Journal, WriteHoleStripes: s.WriteHoleStripes, OwnerJournal: s.OwnerJournal, Rebuild: rebuildBytes(s),
		ExportAuth: exportAuth(m.currentPlan())}
	for _, ms := range s.Members {
		role := strings.ToLower(ms.Role.String())
		mi := MemberInfo{Slot: ms.Slot, Device: ms.Device, Domain: ms.Domain, Role: role, Resync: ms.Resync, Checkpoint: ms.Checkpoint}
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
		in.Progress = &Progress{Kind: p.Kind, Done: p.Done, Total: p.Total}
		if p.Total > 0 {
			in.Progress.Percent = 100 * float64(p.Done) / float64(p.Total)
		}
	}
	return in, nil
}

// List returns every known volume, sorted by name.
func (m *Manager) List() []Info {
	m.mu.Lock()
	var refs []string
	for u := range m.names {
		refs = append(refs, FormatUUID(u))
	}
	m.mu.Unlock()
	// Concurrently: a slow engine costs List one call's time, not one
	// per volume.
	infos := make([]*Info, len(refs))
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
	var out []Info
	for _, in := range infos {
		if in != nil {
			out = append(out, *in)
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}
