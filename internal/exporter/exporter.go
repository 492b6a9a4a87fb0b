package exporter

import (
	"fmt"
	"strconv"

	"github.com/fabraid/fabraid/kernel/nvmet"
)

// Exporter reconciles one node's drive exports. It caches the nvmet
// feature probe and nothing else: every Reconcile reads configfs afresh.
// Run one Reconcile at a time.
type Exporter struct {
	Target    *nvmet.Target // Own must be nvmet.DriveOwnership()
	SysModule string        // /sys/module, for the probe
	features  *nvmet.Features
}

// New returns an Exporter on the nvmet configfs root (nvmet.DefaultRoot
// when empty).
func New(root string) *Exporter {
	t := nvmet.New(root)
	t.Own = nvmet.DriveOwnership()
	return &Exporter{Target: t, SysModule: "/sys/module"}
}

// Features probes the kernel's nvmet features once (kernel/nvmet Probe:
// configfs attribute presence) and returns the cached answer afterwards;
// a failed probe is not cached. The objects of a probe interrupted by a
// crash would make every later probe fail, and Reconcile never reach the
// Apply that removes them: they are removed first.
func (x *Exporter) Features() (nvmet.Features, error) {
	if x.features != nil {
		return *x.features, nil
	}
	own := x.Target.Own
	name := own.SubsystemPrefix + "probe"
	leftovers := nvmet.Plan{
		{Kind: nvmet.OpRmdir, Path: "hosts/" + name},
		{Kind: nvmet.OpRmdir, Path: "subsystems/" + name},
		{Kind: nvmet.OpRmdir, Path: "ports/" + strconv.Itoa(int(own.MaxPort))},
	}
	if _, err := x.Target.Execute(leftovers); err != nil {
		return nvmet.Features{}, fmt.Errorf("drive exporter: remove the objects of an interrupted feature probe: %w", err)
	}
	f, err := nvmet.Probe(x.Target.Root, x.SysModule, own)
	if err != nil {
		return f, fmt.Errorf("drive exporter: %w", err)
	}
	x.features = &f
	return f, nil
}

// Result is what one Reconcile did.
type Result struct {
	Exports  []Export // the drives exported now
	Problems []error  // drives or volumes left out (see Desired)
	// Fenced lists the drives whose old hosts' controllers were torn down
	// this time (owner or secret changed).
	Fenced []string
	// Done lists the configfs operations carried out; empty when nothing
	// changed.
	Done nvmet.Plan
	Auth bool // the kernel has DH-HMAC-CHAP
}

// Reconcile converges the node's nvmet drive exports to in: Desire, then
// (when Fence finds controllers to end) the fence step, then the desired
// state. On error, calling Reconcile again finishes the job.
func (x *Exporter) Reconcile(in Input) (Result, error) {
	f, err := x.Features()
	if err != nil {
		return Result{}, err
	}
	d := Desire(in, f)
	res := Result{Exports: d.Exports, Problems: d.Problems, Auth: f.Auth}
	actual, err := x.Target.Read()
	if err != nil {
		return res, fmt.Errorf("drive exporter: %w", err)
	}
	step, fenced := Fence(d.Spec, actual)
	if len(fenced) > 0 {
		p, err := nvmet.Diff(step, actual, x.Target.Own)
		if err != nil {
			return res, fmt.Errorf("drive exporter: fence %v: %w", fenced, err)
		}
		done, err := x.Target.Execute(p)
		res.Done = append(res.Done, done...)
		if err != nil {
			return res, fmt.Errorf("drive exporter: fence %v: %w", fenced, err)
		}
		res.Fenced = fenced
	}
	done, err := x.Target.Apply(d.Spec)
	res.Done = append(res.Done, done...)
	if err != nil {
		return res, fmt.Errorf("drive exporter: %w", err)
	}
	return res, nil
}
