package volmgr

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/internal/config"
	"github.com/fabraid/fabraid/internal/volid"
)

// Engine calls and the Manager's locks
//
// No Manager lock is held across an engine call (Status, Start, ...): mu
// guards the maps only, and callers copy what they need out of them
// (engineSnapshot) before calling an engine. op serialises the operations
// that change the set of volumes (Reconcile, Create, Delete); the read
// paths (Info, List) never take it, so a reconcile waiting for a slow
// engine start does not hold them up. Reconcile brings the engines of
// different volumes up concurrently (at most maxParallelStarts at once),
// so one slow or hung engine does not delay the others; every call to an
// engine process is bounded by a timeout (engineproto.go).

// maxParallelStarts bounds the engine starts (and status checks) one
// reconcile runs at once.
const maxParallelStarts = 4

// engineSnapshot returns a copy of the running engines.
func (m *Manager) engineSnapshot() map[[16]byte]Engine {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[[16]byte]Engine, len(m.engines))
	for u, e := range m.engines {
		out[u] = e
	}
	return out
}

// startEngines makes sure every volume of vols not in skip has an
// answering engine (ensureEngine), for up to maxParallelStarts volumes at
// once. It returns the errors of all of them.
func (m *Manager) startEngines(ctx context.Context, vols map[[16]byte]*onDisk, skip map[[16]byte]bool) []error {
	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errs   []error
		gateMu sync.Mutex // the start gate's state is not safe for concurrent use
		slots  = make(chan struct{}, maxParallelStarts)
	)
	for u, v := range vols {
		if skip[u] {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := m.ensureEngine(ctx, u, v, &gateMu); err != nil {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// ensureEngine checks volume u's engine, or starts one when it has none
// or its engine does not answer and the start gate lets it start.
func (m *Manager) ensureEngine(ctx context.Context, u [16]byte, v *onDisk, gateMu *sync.Mutex) error {
	m.mu.Lock()
	e := m.engines[u]
	m.names[u] = v.name
	m.mu.Unlock()
	if e != nil {
		if st, err := e.Status(); err == nil {
			if err := m.matchEpoch(e, st, v); err != nil {
				if !errors.Is(err, engine.ErrFenced) {
					return err
				}
				m.log.Error("engine fenced by a newer owner; stopping it", "volume", v.name, "err", err)
				e.Stop()
				m.Forget(u, e)
				return err
			}
			return m.reAddReturning(e, st, v)
		}
		m.log.Warn("engine does not answer; starting a new one", "volume", v.name)
		m.Forget(u, e)
	}
	gateMu.Lock()
	ok := m.mayStart(u, v)
	gateMu.Unlock()
	if !ok {
		return nil
	}
	rec := m.loadRecord(u)
	e, err := m.opts.Start(ctx, EngineSpec{UUID: u, Name: v.name, Members: v.members, UblkID: rec.UblkID, OwnerDomain: v.ownerDomain, Epoch: v.epoch,
		NoZeroCopy: m.opts.Config.UblkZeroCopy == config.ZeroCopyOff, RebuildBusyRate: m.opts.Config.RebuildBusyRate})
	m.mu.Lock()
	m.errs[u] = err
	if err == nil {
		m.engines[u] = e
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	st, err := e.Status()
	if err != nil {
		return nil // the next reconcile finds out
	}
	var errs []error
	if st.UblkID != rec.UblkID {
		if err := m.saveRecord(record{UUID: volid.Format(u), Name: v.name, UblkID: st.UblkID}, u); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: save record: %w", v.name, err))
		}
	}
	if err := m.resyncReturning(e, st, v); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
