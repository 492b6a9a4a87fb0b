package enginebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/layout"
)

// Config selects what to measure.
type Config struct {
	Dir        string        // directory for member files; default /dev/shm
	K, M       int           // default 4+2
	Groups     int           // groups of k+m members (RAID-x0); default 1
	ChunkSize  int           // default engine.DefaultChunkSize
	MemberSize int64         // bytes per member file; default 256 MiB
	Jobs       int           // parallel requests; default GOMAXPROCS
	Duration   time.Duration // per timed measurement; default 0.5 s
	Rounds     int           // alternating rounds per pair, best kept; default 3
	Log        io.Writer     // progress lines; nil for none
}

// Result holds absolute rates (MiB/s, IOPS) and the ratios the issue asks
// for. JSON keys are stable.
type Result struct {
	K          int   `json:"k"`
	M          int   `json:"m"`
	Groups     int   `json:"groups"`
	ChunkSize  int   `json:"chunk_size"`
	MemberSize int64 `json:"member_size"`
	Jobs       int   `json:"jobs"`
	CPUs       int   `json:"cpus"`
	Rounds     int   `json:"rounds"`

	RawWriteMiBs         float64 `json:"raw_write_mibs"`         // aggregate, all members, chunk-size writes
	RawReadMiBs          float64 `json:"raw_read_mibs"`          // aggregate, all members, chunk-size reads
	SeqWriteMiBs         float64 `json:"seq_write_mibs"`         // engine, full-stripe writes
	SeqReadMiBs          float64 `json:"seq_read_mibs"`          // engine, stripe-size reads
	DegradedReadMiBs     float64 `json:"degraded_read_mibs"`     // one member lost
	DomainLostReadMiBs   float64 `json:"domain_lost_read_mibs"`  // one whole failure domain (m members) lost
	RawRandReadIOPS      float64 `json:"raw_rand_read_iops"`     // 4 KiB, random member and offset
	RawRandWriteIOPS     float64 `json:"raw_rand_write_iops"`    // 4 KiB
	RandReadIOPS         float64 `json:"rand_read_iops"`         // engine 4 KiB
	RandWriteIOPS        float64 `json:"rand_write_iops"`        // engine 4 KiB
	ReplacementWriteMiBs float64 `json:"replacement_write_mibs"` // raw, one member, chunk-size writes
	RebuildMiBs          float64 `json:"rebuild_mibs"`           // replacement member filled per second

	SeqWriteRatio       float64 `json:"seq_write_ratio"`           // SeqWrite / (k/(k+m) * RawWrite)
	SeqReadRatio        float64 `json:"seq_read_ratio"`            // SeqRead / RawRead
	DegradedReadRatio   float64 `json:"degraded_read_ratio"`       // DegradedRead / SeqRead
	DomainLostReadRatio float64 `json:"domain_lost_read_ratio"`    // DomainLostRead / SeqRead
	RandReadRatio       float64 `json:"rand_read_ratio"`           // RandRead / RawRandRead
	RandWriteRatio      float64 `json:"rand_write_ratio"`          // RandWrite / RawRandWrite
	RandWriteRMWBound   float64 `json:"rand_write_rmw_bound_iops"` // 1 / ((1+m)/rawRead + (1+m)/rawWrite)
	RandWriteRMWRatio   float64 `json:"rand_write_rmw_ratio"`      // RandWrite / RMW bound
	RebuildRatio        float64 `json:"rebuild_ratio"`             // Rebuild / ReplacementWrite
	// RebuildBound is what a rebuild can reach when members share the
	// CPUs (tmpfs): every rebuilt byte costs k bytes read and one
	// written, 1 / (k/RawRead + 1/ReplacementWrite). On drives the reads
	// spread over k devices and the bound is the replacement's write rate.
	RebuildBoundMiBs  float64 `json:"rebuild_bound_mibs"`
	RebuildBoundRatio float64 `json:"rebuild_bound_ratio"` // Rebuild / RebuildBound
	ElapsedSeconds    float64 `json:"elapsed_seconds"`
}

func (c *Config) defaults() {
	if c.Dir == "" {
		c.Dir = "/dev/shm"
	}
	if c.K == 0 {
		c.K = 4
	}
	if c.M == 0 {
		c.M = 2
	}
	if c.Groups == 0 {
		c.Groups = 1
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = engine.DefaultChunkSize
	}
	if c.MemberSize == 0 {
		c.MemberSize = 256 << 20
	}
	if c.Jobs == 0 {
		c.Jobs = runtime.GOMAXPROCS(0)
	}
	if c.Duration == 0 {
		c.Duration = 500 * time.Millisecond
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
}

type bench struct {
	cfg   Config
	dir   string
	paths []string
	logf  func(string, ...any)
}

// Run performs every measurement and removes its files.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	start := time.Now()
	dir, err := os.MkdirTemp(cfg.Dir, "fabraid-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	b := &bench{cfg: cfg, dir: dir, logf: func(string, ...any) {}}
	if cfg.Log != nil {
		b.logf = func(f string, a ...any) { fmt.Fprintf(cfg.Log, f+"\n", a...) }
	}
	w := cfg.K + cfg.M
	n := cfg.Groups * w
	members := make([]*os.File, n)
	for i := range members {
		p := filepath.Join(dir, fmt.Sprintf("member%d", i))
		b.paths = append(b.paths, p)
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		members[i] = f
	}
	r := &Result{K: cfg.K, M: cfg.M, Groups: cfg.Groups, ChunkSize: cfg.ChunkSize, MemberSize: cfg.MemberSize, Jobs: cfg.Jobs, CPUs: runtime.GOMAXPROCS(0), Rounds: cfg.Rounds}
	chunk := cfg.ChunkSize
	// Fill the files once so tmpfs has allocated every page: the first
	// touch of a page costs more than an overwrite and would flatter
	// whichever measurement comes second. Zeroes are consistent parity,
	// so the volume can skip its initial sync.
	b.logf("prefill %d x %d MiB in %s", w, cfg.MemberSize>>20, dir)
	if _, err := b.rawSeq(ctx, members, 0, chunk, true, 0); err != nil {
		return nil, err
	}
	// Node j holds members j*m..j*m+m-1 of every group: losing a node
	// loses m members per group, the most the layout allows.
	domains := make([]string, n)
	for i := range domains {
		domains[i] = fmt.Sprintf("node%d", i%w/cfg.M)
	}
	devs := make([]engine.Member, n)
	for i, f := range members {
		devs[i] = engine.NewFileMember(f)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	v, err := engine.Create(engine.Config{
		Name: "bench", K: cfg.K, M: cfg.M, Groups: cfg.Groups, ChunkSize: chunk, Domains: domains, AssumeZeroed: true,
	}, devs, b.paths, engine.Options{Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer v.Abandon()
	// Raw I/O goes to the members' data areas only, so the volume's
	// metadata survives; the data it overwrites is not checked.
	base := int64(engine.DefaultDataOffset)
	sb := int(v.Geometry().StripeBytes())
	d := cfg.Duration

	// Every pair is measured in alternating rounds (raw, engine, raw,
	// engine, ...) and the best round of each is kept, so that other load
	// on the machine hits both sides alike.
	best := func(dst *float64, x float64, err error) error {
		*dst = max(*dst, x)
		return err
	}
	for round := 0; round < cfg.Rounds; round++ {
		steps := []func() error{
			func() error {
				x, err := b.rawSeq(ctx, members, base, chunk, true, d)
				return best(&r.RawWriteMiBs, x, err)
			},
			func() error { x, err := b.engineSeq(ctx, v, sb, true); return best(&r.SeqWriteMiBs, x, err) },
			func() error {
				x, err := b.rawSeq(ctx, members, base, chunk, false, d)
				return best(&r.RawReadMiBs, x, err)
			},
			func() error { x, err := b.engineSeq(ctx, v, sb, false); return best(&r.SeqReadMiBs, x, err) },
			func() error { x, err := b.rawRand(ctx, members, base, false); return best(&r.RawRandReadIOPS, x, err) },
			func() error { x, err := b.engineRand(ctx, v, false); return best(&r.RandReadIOPS, x, err) },
			func() error { x, err := b.rawRand(ctx, members, base, true); return best(&r.RawRandWriteIOPS, x, err) },
			func() error { x, err := b.engineRand(ctx, v, true); return best(&r.RandWriteIOPS, x, err) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return nil, err
			}
		}
	}
	b.logf("raw: write %.0f MiB/s, read %.0f MiB/s, rand read %.0f IOPS, rand write %.0f IOPS",
		r.RawWriteMiBs, r.RawReadMiBs, r.RawRandReadIOPS, r.RawRandWriteIOPS)
	b.logf("engine: seq write %.0f MiB/s, seq read %.0f MiB/s, rand read %.0f IOPS, rand write %.0f IOPS",
		r.SeqWriteMiBs, r.SeqReadMiBs, r.RandReadIOPS, r.RandWriteIOPS)

	// Degraded reads, alternating with healthy ones: fail, read, re-add
	// (nothing was written meanwhile, so the resync is empty).
	if err := v.Flush(); err != nil {
		return nil, err
	}
	if err := v.Flush(); err != nil {
		return nil, err
	}
	var healthy float64
	lastDomain := []int{}
	for slot := 0; slot < n; slot++ {
		if domains[slot] == domains[n-1] {
			lastDomain = append(lastDomain, slot)
		}
	}
	for round := 0; round < cfg.Rounds; round++ {
		for kind, lost := range [][]int{{0}, lastDomain} {
			x, err := b.engineSeq(ctx, v, sb, false)
			if err := best(&healthy, x, err); err != nil {
				return nil, err
			}
			for _, slot := range lost {
				if err := v.FailMember(slot); err != nil {
					return nil, err
				}
			}
			x, err = b.engineSeq(ctx, v, sb, false)
			dst := &r.DegradedReadMiBs
			if kind == 1 {
				dst = &r.DomainLostReadMiBs
			}
			if err := best(dst, x, err); err != nil {
				return nil, err
			}
			for _, slot := range lost {
				// A fresh handle: ReAdd closes the failed member's.
				m, err := engine.OpenFileMember(b.paths[slot])
				if err != nil {
					return nil, err
				}
				if err := v.ReAdd(m, b.paths[slot]); err != nil {
					return nil, err
				}
			}
			if err := v.Rebuild(ctx, engine.RebuildOptions{}); err != nil {
				return nil, err
			}
		}
	}
	r.SeqReadMiBs = max(r.SeqReadMiBs, healthy)
	b.logf("degraded read: one member lost %.0f MiB/s, one domain lost %.0f MiB/s (healthy %.0f)",
		r.DegradedReadMiBs, r.DomainLostReadMiBs, healthy)

	// Rebuild of a whole member onto a replacement file, against raw
	// writes to that file with the same parallelism as the rebuild.
	repPath := filepath.Join(dir, "replacement")
	rep, err := os.OpenFile(repPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer rep.Close()
	if _, err := b.rawSeqJobs(ctx, []*os.File{rep}, 0, chunk, true, 0, cfg.Jobs); err != nil { // allocate pages
		return nil, err
	}
	workers := runtime.GOMAXPROCS(0)
	for round := 0; round < cfg.Rounds; round++ {
		x, err := b.rawSeqJobs(ctx, []*os.File{rep}, base, chunk, true, d, workers)
		if err := best(&r.ReplacementWriteMiBs, x, err); err != nil {
			return nil, err
		}
		if err := v.FailMember(0); err != nil {
			return nil, err
		}
		// A fresh handle each round: Replace closes the old member.
		f, err := os.OpenFile(repPath, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		if err := v.Replace(0, engine.NewFileMember(f), repPath); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := v.Rebuild(ctx, engine.RebuildOptions{Workers: workers}); err != nil {
			return nil, err
		}
		x = float64(v.Geometry().MemberDataBytes()) / (1 << 20) / time.Since(t0).Seconds()
		r.RebuildMiBs = max(r.RebuildMiBs, x)
	}
	b.logf("rebuild %.0f MiB/s, replacement raw write %.0f MiB/s", r.RebuildMiBs, r.ReplacementWriteMiBs)

	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	r.SeqWriteRatio = ratio(r.SeqWriteMiBs, float64(cfg.K)/float64(w)*r.RawWriteMiBs)
	r.SeqReadRatio = ratio(r.SeqReadMiBs, r.RawReadMiBs)
	r.DegradedReadRatio = ratio(r.DegradedReadMiBs, r.SeqReadMiBs)
	r.DomainLostReadRatio = ratio(r.DomainLostReadMiBs, r.SeqReadMiBs)
	r.RandReadRatio = ratio(r.RandReadIOPS, r.RawRandReadIOPS)
	r.RandWriteRatio = ratio(r.RandWriteIOPS, r.RawRandWriteIOPS)
	m1 := float64(1 + cfg.M)
	r.RandWriteRMWBound = 1 / (m1/r.RawRandReadIOPS + m1/r.RawRandWriteIOPS)
	r.RandWriteRMWRatio = ratio(r.RandWriteIOPS, r.RandWriteRMWBound)
	r.RebuildRatio = ratio(r.RebuildMiBs, r.ReplacementWriteMiBs)
	r.RebuildBoundMiBs = 1 / (float64(cfg.K)/r.RawReadMiBs + 1/r.ReplacementWriteMiBs)
	r.RebuildBoundRatio = ratio(r.RebuildMiBs, r.RebuildBoundMiBs)
	r.ElapsedSeconds = time.Since(start).Seconds()
	return r, nil
}

// parallel runs fn in cfg.Jobs goroutines until d has passed (or, with
// d == 0, until each returns false) and returns the operations done.
func (b *bench) parallel(ctx context.Context, d time.Duration, fn func(job int, i int64) (bool, error)) (int64, time.Duration, error) {
	return b.parallelJobs(ctx, d, b.cfg.Jobs, fn)
}

func (b *bench) parallelJobs(ctx context.Context, d time.Duration, jobs int, fn func(job int, i int64) (bool, error)) (int64, time.Duration, error) {
	var ops atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, jobs)
	deadline := time.Now().Add(d)
	start := time.Now()
	for j := 0; j < jobs; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); ; i++ {
				// Every job completes at least one operation, so a job whose
				// goroutine starts after the deadline (a loaded host) still
				// measures something instead of reporting zero.
				if i > 0 && i%16 == 0 && (ctx.Err() != nil || (d > 0 && time.Now().After(deadline))) {
					return
				}
				more, err := fn(j, i)
				if err != nil {
					errs[j] = err
					return
				}
				ops.Add(1)
				if !more {
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, el, fmt.Errorf("bench: %w", err)
		}
	}
	return ops.Load(), el, ctx.Err()
}

// rawSeq streams chunk-size I/O over every member file: each job owns an
// equal slice of every member and cycles through the members. d == 0 does
// exactly one pass (used to prefill).
func (b *bench) rawSeq(ctx context.Context, files []*os.File, base int64, chunk int, write bool, d time.Duration) (float64, error) {
	return b.rawSeqJobs(ctx, files, base, chunk, write, d, b.cfg.Jobs)
}

func (b *bench) rawSeqJobs(ctx context.Context, files []*os.File, base int64, chunk int, write bool, d time.Duration, jobs int) (float64, error) {
	per := (b.cfg.MemberSize - base) / int64(jobs) / int64(chunk) * int64(chunk)
	steps := per / int64(chunk) * int64(len(files))
	bufs := make([][]byte, jobs)
	for i := range bufs {
		bufs[i] = make([]byte, chunk)
	}
	ops, el, err := b.parallelJobs(ctx, d, jobs, func(job int, i int64) (bool, error) {
		s := i % steps
		f := files[s%int64(len(files))]
		off := base + int64(job)*per + s/int64(len(files))*int64(chunk)
		var err error
		if write {
			_, err = f.WriteAt(bufs[job], off)
		} else {
			_, err = f.ReadAt(bufs[job], off)
		}
		return d > 0 || i+1 < steps, err
	})
	return float64(ops) * float64(chunk) / (1 << 20) / el.Seconds(), err
}

func (b *bench) rawRand(ctx context.Context, files []*os.File, base int64, write bool) (float64, error) {
	blocks := (b.cfg.MemberSize - base) / layout.BlockSize
	bufs := make([][]byte, b.cfg.Jobs)
	rngs := make([]*rand.Rand, b.cfg.Jobs)
	for i := range bufs {
		bufs[i] = make([]byte, layout.BlockSize)
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 1))
	}
	ops, el, err := b.parallel(ctx, b.cfg.Duration, func(job int, _ int64) (bool, error) {
		f := files[rngs[job].IntN(len(files))]
		off := base + rngs[job].Int64N(blocks)*layout.BlockSize
		var err error
		if write {
			_, err = f.WriteAt(bufs[job], off)
		} else {
			_, err = f.ReadAt(bufs[job], off)
		}
		return true, err
	})
	return float64(ops) / el.Seconds(), err
}

func (b *bench) engineSeq(ctx context.Context, v *engine.Volume, size int, write bool) (float64, error) {
	per := v.Size() / int64(b.cfg.Jobs) / int64(size) * int64(size)
	steps := per / int64(size)
	bufs := make([][]byte, b.cfg.Jobs)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		for j := range bufs[i] {
			bufs[i][j] = byte(j * (i + 1))
		}
	}
	ops, el, err := b.parallel(ctx, b.cfg.Duration, func(job int, i int64) (bool, error) {
		off := int64(job)*per + (i%steps)*int64(size)
		var err error
		if write {
			_, err = v.WriteAt(bufs[job], off)
		} else {
			_, err = v.ReadAt(bufs[job], off)
		}
		return true, err
	})
	return float64(ops) * float64(size) / (1 << 20) / el.Seconds(), err
}

func (b *bench) engineRand(ctx context.Context, v *engine.Volume, write bool) (float64, error) {
	blocks := v.Size() / layout.BlockSize
	bufs := make([][]byte, b.cfg.Jobs)
	rngs := make([]*rand.Rand, b.cfg.Jobs)
	for i := range bufs {
		bufs[i] = make([]byte, layout.BlockSize)
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 2))
	}
	ops, el, err := b.parallel(ctx, b.cfg.Duration, func(job int, _ int64) (bool, error) {
		off := rngs[job].Int64N(blocks) * layout.BlockSize
		var err error
		if write {
			_, err = v.WriteAt(bufs[job], off)
		} else {
			_, err = v.ReadAt(bufs[job], off)
		}
		return true, err
	})
	return float64(ops) / el.Seconds(), err
}
