//go:build linux

package memberio_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine"
	"github.com/fabraid/fabraid/engine/superblock"
	"github.com/fabraid/fabraid/internal/vmtest"
	"github.com/fabraid/fabraid/kernel/memberio"
	"github.com/fabraid/fabraid/kernel/ublk"
	"golang.org/x/sys/unix"
)

// TestIntegrationMemberIO runs the O_DIRECT io_uring member path on 6.12
// with two vCPUs, in one boot: integrity of an engine volume on six virtio
// disks served by ublk with two async queues under concurrent O_DIRECT
// writers, and attribution of a member write error (null_blk bad blocks)
// to the right member before the write is acknowledged. 6.12 has no
// automatic buffer registration: the devices take the copy path.
func TestIntegrationMemberIO(t *testing.T) { memberIOGuest(t, vmtest.Kernel612, "mio", false) }

// TestIntegrationMemberIOKernel7 runs the same checks on Debian sid's 7.x
// kernel (7.2.13 in December 2026): io_uring, O_DIRECT on virtio and
// null_blk, and ublk there are newer than on 6.12. The devices are
// zero-copy there (AUTO_BUF_REG with USER_COPY): healthy reads go from the
// members into the requests' pages with READ_FIXED, writes, degraded reads
// and reads redone after a member error through user copy.
func TestIntegrationMemberIOKernel7(t *testing.T) {
	vmtest.RequireCaps(t, vmtest.Kernel7, "Ublk", "NullBlk", "IOUring")
	memberIOGuest(t, vmtest.Kernel7, "mio7", true)
}

func memberIOGuest(t *testing.T, series, name string, zeroCopy bool) {
	disks := make([]vmtest.Disk, 6)
	for i := range disks {
		disks[i] = vmtest.Disk{Size: 48 << 20}
	}
	vmtest.Run(t, vmtest.Options{
		Guests: []vmtest.GuestConfig{{Name: name, Kernel: series, CPUs: 2,
			Modules: []string{"ublk_drv", "null_blk"}, Disks: disks}},
		Timeout: 240 * time.Second,
	}, func(t *testing.T, g *vmtest.Env) {
		ctl, err := ublk.OpenControl()
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		t.Run("add-flags", func(t *testing.T) { testAddFlags(t, ctl, zeroCopy) })
		t.Run("integrity", func(t *testing.T) { testIntegrity(t, ctl, g.Disks, zeroCopy) })
		t.Run("error-attribution", func(t *testing.T) { testErrorAttribution(t, ctl, zeroCopy) })
		t.Run("read-error", func(t *testing.T) { testReadError(t, ctl, zeroCopy) })
		t.Run("direct-write-error", func(t *testing.T) { testDirectWriteError(t, ctl, zeroCopy) })
	})
}

func openMembers(t *testing.T, paths []string, o memberio.Options) []engine.Member {
	t.Helper()
	var devs []engine.Member
	for _, p := range paths {
		m, err := memberio.Open(p, o)
		if err != nil {
			t.Fatal(err)
		}
		if !o.Buffered && !m.Direct() {
			t.Fatalf("%s: block device not opened with O_DIRECT", p)
		}
		devs = append(devs, m)
	}
	return devs
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 11))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// testAddFlags records which zero-copy flag combinations ADD_DEV accepts
// and what it grants; with zeroCopy the one fabraid uses (AUTO_BUF_REG,
// USER_COPY and the recovery flags) must be granted whole.
func testAddFlags(t *testing.T, ctl *ublk.Control, zeroCopy bool) {
	t.Logf("GET_FEATURES: %s", ctl.Features())
	rec := ublk.FeatureUserRecovery | ublk.FeatureRecoveryReissue
	used := ublk.FeatureAutoBufReg | ublk.FeatureUserCopy | rec
	for _, f := range []ublk.Features{
		ublk.FeatureAutoBufReg,
		ublk.FeatureAutoBufReg | rec,
		ublk.FeatureAutoBufReg | ublk.FeatureUserCopy,
		used,
		ublk.FeatureAutoBufReg | ublk.FeatureZeroCopy | rec,
		ublk.FeatureZeroCopy | ublk.FeatureUserCopy | rec,
	} {
		got, err := ctl.TryAdd(f)
		t.Logf("ADD_DEV %s: granted %s, err %v", f, got, err)
		if zeroCopy && f == used && (err != nil || got&used != used) {
			t.Errorf("ADD_DEV %s: granted %s, err %v; want all of it", f, got, err)
		}
	}
}

// checkZeroCopy fails unless dev runs with zero copy exactly when want.
func checkZeroCopy(t *testing.T, dev *ublk.Device, want bool) {
	t.Helper()
	if dev.ZeroCopy() != want {
		t.Fatalf("%s: zero copy %v (flags %s), want %v", dev.BlockPath(), dev.ZeroCopy(), dev.Flags(), want)
	}
}

func testIntegrity(t *testing.T, ctl *ublk.Control, disks []string, zeroCopy bool) {
	exec, err := memberio.NewExecutor(memberio.ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	vol, err := engine.Create(engine.Config{Name: "mio", K: 4, M: 2, AssumeZeroed: true},
		openMembers(t, disks, memberio.Options{Exclusive: true}), disks, engine.Options{Executor: exec})
	if err != nil {
		t.Fatal(err)
	}
	g := vol.Geometry()
	bst := &memberio.Stats{}
	dev, err := ublk.Create(ctl, memberio.Backend{Volume: vol, Stats: bst}, &ublk.Config{ID: ublk.AnyID, Queues: 2, Depth: 64, Async: true,
		MaxIOBytes: 1 << 20, IOMin: g.ChunkSize, IOOpt: int(g.StripeBytes())})
	if err != nil {
		t.Fatal(err)
	}
	checkZeroCopy(t, dev, zeroCopy)
	f, err := os.OpenFile(dev.BlockPath(), os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Four writers, each on its own quarter, random sizes from 4 KiB to
	// 1 MiB (unaligned to the stripe), every write read back at once and
	// again at the end, after the volume was closed and reassembled.
	const writers, opsEach = 4, 60
	quarter := vol.Size() / writers / (1 << 20) * (1 << 20)
	type rec struct {
		off  int64
		n    int
		seed uint64
	}
	var mu sync.Mutex
	var all []rec
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 3))
			for i := range opsEach {
				n := (1 + rnd.IntN(256)) * 4096
				off := int64(w)*quarter + rnd.Int64N((quarter-int64(n))/4096)*4096
				seed := uint64(w<<20 | i)
				b := engine.AlignedBuffer(n)
				fill(b, seed)
				if _, err := f.WriteAt(b, off); err != nil {
					t.Error(err)
					return
				}
				got := engine.AlignedBuffer(n)
				if _, err := f.ReadAt(got, off); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(got, b) {
					t.Errorf("writer %d: %d bytes at %d read back differently", w, n, off)
					return
				}
				mu.Lock()
				all = append(all, rec{off, n, seed})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st := exec.Stats()
	t.Logf("%s, %d queues: %d batches, %d member I/Os in %d io_uring_enter calls, %d bounces", dev.BlockPath(), dev.Queues(),
		st.Batches.Load(), st.IOs.Load(), st.Enters.Load(), st.Bounces.Load())
	if st.Enters.Load() >= st.IOs.Load() {
		t.Errorf("no batching: %d enters for %d I/Os", st.Enters.Load(), st.IOs.Load())
	}
	if bst.DirectReads.Load() < writers*opsEach {
		t.Errorf("%d reads planned for the queue threads; want every read (%d)", bst.DirectReads.Load(), writers*opsEach)
	}
	// Writes inside one stripe to a region whose write-intent bit is set
	// are carried by the queue threads (the first write of a region sets
	// it the usual way; a write that meets another on its stripe too).
	t.Logf("%d writes of %d planned for the queue threads", bst.DirectWrites.Load(), writers*opsEach)
	if bst.DirectWrites.Load() == 0 {
		t.Errorf("no write planned for the queue threads")
	}
	if st.Bounces.Load() != 0 {
		t.Errorf("%d bounce copies; engine and ublk buffers should be aligned", st.Bounces.Load())
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := vol.Close(); err != nil {
		t.Fatal(err)
	}
	// Reassemble and check every write (later writes win on overlaps:
	// replay them into a model first).
	vol, err = engine.Assemble(openMembers(t, disks, memberio.Options{Exclusive: true}), disks, engine.Options{Executor: exec})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	model := map[int64]uint64{} // 4 KiB block -> seed<<16 | index within the write
	for _, r := range all {
		for i := 0; i < r.n/4096; i++ {
			model[r.off/4096+int64(i)] = r.seed<<16 | uint64(i)
		}
	}
	bufs := map[uint64][]byte{}
	for _, r := range all {
		b := make([]byte, r.n)
		fill(b, r.seed)
		bufs[r.seed] = b
	}
	got := engine.AlignedBuffer(4096)
	for blk, v := range model {
		if _, err := vol.ReadAt(got, blk*4096); err != nil {
			t.Fatal(err)
		}
		want := bufs[v>>16][(v&0xffff)*4096:][:4096]
		if !bytes.Equal(got, want) {
			t.Fatalf("after reassembly: block %d differs", blk)
		}
	}
	t.Logf("%d writes, %d blocks checked after reassembly", len(all), len(model))
}

// nullBlk creates memory-backed null_blk devices through configfs and
// returns their paths.
func nullBlk(t *testing.T, first, n, sizeMB int) []string {
	t.Helper()
	root := "/sys/kernel/config/nullb"
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("null_blk configfs: %v", err)
	}
	var paths []string
	for i := first; i < first+n; i++ {
		dir := filepath.Join(root, fmt.Sprintf("fb%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, kv := range [][2]string{{"memory_backed", "1"}, {"size", fmt.Sprint(sizeMB)}, {"blocksize", "4096"}, {"power", "1"}} {
			if err := os.WriteFile(filepath.Join(dir, kv[0]), []byte(kv[1]), 0); err != nil {
				t.Fatalf("%s/%s: %v", dir, kv[0], err)
			}
		}
		idx, err := os.ReadFile(filepath.Join(dir, "index"))
		if err != nil {
			t.Fatal(err)
		}
		// 6.12 names the disk after the configfs directory; older
		// kernels after the index.
		p := "/dev/" + filepath.Base(dir)
		if _, err := os.Stat(p); err != nil {
			p = "/dev/nullb" + strings.TrimSpace(string(idx))
		}
		paths = append(paths, p)
	}
	return paths
}

// logRecorder keeps the engine's log lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *logRecorder) find(sub ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		ok := true
		for _, s := range sub {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			return line
		}
	}
	return ""
}

// testErrorAttribution: member 3's data area becomes bad blocks (null_blk
// fails every I/O there with EIO). A full-stripe write through the ublk
// device then succeeds (4+2 survives one member) and, by the time the
// write returns to the consumer, the engine has marked member 3 failed
// with that EIO and every other member is still active. The same sequence
// on members opened buffered shows what O_DIRECT fixes: the write lands in
// the page cache, nothing is failed when it is acknowledged, and the error
// comes only with the next flush.
func testErrorAttribution(t *testing.T, ctl *ublk.Control, zeroCopy bool) {
	paths := nullBlk(t, 0, 12, 32)
	for _, tc := range []struct {
		name     string
		paths    []string
		buffered bool
	}{{"direct", paths[:6], false}, {"buffered", paths[6:], true}} {
		t.Run(tc.name, func(t *testing.T) {
			exec, err := memberio.NewExecutor(memberio.ExecutorConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer exec.Close()
			logs := &logRecorder{}
			log := slog.New(slog.NewTextHandler(logs, nil))
			vol, err := engine.Create(engine.Config{Name: "err", K: 4, M: 2, AssumeZeroed: true},
				openMembers(t, tc.paths, memberio.Options{Exclusive: true, Buffered: tc.buffered, Log: log}), tc.paths,
				engine.Options{Executor: exec, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			defer vol.Close()
			g := vol.Geometry()
			dev, err := ublk.Create(ctl, memberio.Backend{Volume: vol}, &ublk.Config{ID: ublk.AnyID, Queues: 2, Async: true, MaxIOBytes: 1 << 20,
				IOMin: g.ChunkSize, IOOpt: int(g.StripeBytes())})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			checkZeroCopy(t, dev, zeroCopy)
			// Bad blocks over member 3's data area, to its end (512-byte
			// sectors): metadata stays writable, every data I/O fails.
			bad := tc.paths[3]
			nb := filepath.Join("/sys/kernel/config/nullb", fmt.Sprintf("fb%d", map[bool]int{false: 3, true: 9}[tc.buffered]))
			rng := fmt.Sprintf("+%d-%d", engine.DefaultDataOffset/512, 32<<11-1)
			if err := os.WriteFile(filepath.Join(nb, "badblocks"), []byte(rng), 0); err != nil {
				t.Fatalf("%s badblocks %s: %v", nb, rng, err)
			}
			f, err := os.OpenFile(dev.BlockPath(), os.O_RDWR|unix.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := engine.AlignedBuffer(int(g.StripeBytes()))
			fill(b, 42)
			if _, err := f.WriteAt(b, 0); err != nil {
				t.Fatalf("full-stripe write with one bad member: %v", err)
			}
			// Acknowledged. What does the engine know now?
			st := vol.Status()
			var failed []int
			for _, m := range st.Members {
				if m.Role == superblock.RoleFailed {
					failed = append(failed, m.Slot)
				}
			}
			line := logs.find("member failed", bad, "input/output error")
			if tc.buffered {
				if len(failed) != 0 {
					t.Fatalf("buffered: members %v failed at the write; expected the error to be hidden in the page cache", failed)
				}
				if err := f.Sync(); err != nil {
					t.Logf("buffered: flush reported %v", err)
				}
				st = vol.Status()
				t.Logf("buffered: nothing failed when the write was acknowledged; after the flush member 3 is %s (%s)", st.Members[3].Role,
					strings.TrimSpace(logs.find("member failed", bad)))
				return
			}
			if len(failed) != 1 || failed[0] != 3 || line == "" {
				t.Fatalf("after the acknowledged write: failed members %v (want [3]), log line for %s: %q", failed, bad, line)
			}
			// A bad block of a device that still answers is a media
			// error, not a lost path.
			if r := st.Members[3].Failure; r != superblock.FailIO {
				t.Fatalf("member 3 failed on a bad block as %s, want io-error", r)
			}
			t.Logf("acknowledged write: member 3 (%s) already failed: %s", bad, strings.TrimSpace(line))
			got := engine.AlignedBuffer(len(b))
			if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, b) {
				t.Fatalf("degraded read back: err %v, equal %v", err, bytes.Equal(got, b))
			}
		})
	}
}

// testReadError: member 2 goes bad under data that is already written. A
// read through ublk (planned by the Backend, submitted by the queue thread)
// gets EIO from member 2; the engine fails member 2 before the read returns
// and the data comes back reconstructed.
func testReadError(t *testing.T, ctl *ublk.Control, zeroCopy bool) {
	r := newNullRig(t, ctl, zeroCopy, 12, "rerr")
	paths, vol, g, bst, logs, f := r.paths, r.vol, r.vol.Geometry(), r.bst, r.logs, r.f
	b := engine.AlignedBuffer(int(g.StripeBytes()) * 2)
	fill(b, 7)
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	rng := fmt.Sprintf("+%d-%d", engine.DefaultDataOffset/512, 32<<11-1)
	if err := os.WriteFile("/sys/kernel/config/nullb/fb14/badblocks", []byte(rng), 0); err != nil {
		t.Fatal(err)
	}
	before := bst.DirectReads.Load()
	got := engine.AlignedBuffer(len(b))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatalf("read with member 2 bad: %v", err)
	}
	if !bytes.Equal(got, b) {
		t.Fatal("read with member 2 bad returned wrong data")
	}
	if bst.DirectReads.Load() == before {
		t.Fatal("the read was not planned for the queue thread")
	}
	line := logs.find("member failed", paths[2], "input/output error")
	if m := vol.Status().Members[2]; m.Role != superblock.RoleFailed || m.Failure != superblock.FailIO || line == "" {
		t.Fatalf("after the read returned: member 2 is %s (%s), want failed (io-error); log line %q", m.Role, m.Failure, line)
	}
	t.Logf("read returned reconstructed data; member 2 (%s) already failed: %s", paths[2], strings.TrimSpace(line))
	// Degraded now: the same two stripes are one planned batch.
	before = bst.DirectReads.Load()
	clear(got)
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("degraded read of two stripes: err %v, right data %v", err, bytes.Equal(got, b))
	}
	if bst.DirectReads.Load() == before {
		t.Fatal("the degraded read of two stripes was not planned for the queue thread")
	}
}

// testDirectWriteError: member 2 goes bad under written data. 4 KiB writes
// to each chunk of the first stripe are planned for the queue thread; the
// first one that reads or writes member 2 gets EIO from it, and member 2 is
// failed before that write returns (the write is redone degraded); the
// later ones are not planned (the stripe is degraded) and every write
// reads back.
func testDirectWriteError(t *testing.T, ctl *ublk.Control, zeroCopy bool) {
	r := newNullRig(t, ctl, zeroCopy, 18, "werr")
	paths, vol, g, bst, logs, f := r.paths, r.vol, r.vol.Geometry(), r.bst, r.logs, r.f
	want := engine.AlignedBuffer(int(g.StripeBytes()))
	fill(want, 9)
	if _, err := f.WriteAt(want, 0); err != nil { // sets the region's bit
		t.Fatal(err)
	}
	rng := fmt.Sprintf("+%d-%d", engine.DefaultDataOffset/512, 32<<11-1)
	if err := os.WriteFile("/sys/kernel/config/nullb/fb20/badblocks", []byte(rng), 0); err != nil {
		t.Fatal(err)
	}
	failedAt := -1
	for pos := 0; pos < g.K; pos++ {
		b := engine.AlignedBuffer(4096)
		fill(b, uint64(100+pos))
		before := bst.DirectWrites.Load()
		off := int64(pos * g.ChunkSize)
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatalf("4 KiB write to chunk %d with member 2 bad: %v", pos, err)
		}
		copy(want[off:], b)
		if failedAt < 0 && vol.Status().Members[2].Role == superblock.RoleFailed {
			// Member 2 was in sync before this write and failed when it
			// returned: the write met its error.
			if bst.DirectWrites.Load() == before {
				t.Fatalf("the write to chunk %d that failed member 2 was not planned for the queue thread", pos)
			}
			failedAt = pos
		}
	}
	line := logs.find("member failed", paths[2], "input/output error")
	if failedAt < 0 || line == "" {
		t.Fatalf("member 2 failed at write %d, log line %q", failedAt, line)
	}
	got := engine.AlignedBuffer(len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("degraded read back: err %v, equal %v", err, bytes.Equal(got, want))
	}
	t.Logf("planned write to chunk %d failed member 2 (%s) before it returned: %s", failedAt, paths[2], strings.TrimSpace(line))
}

// nullRig is a 4+2 volume on six fresh null_blk devices (fb<first>..),
// served by ublk with two async queues and opened O_DIRECT, whose engine
// log is recorded.
type nullRig struct {
	paths []string
	vol   *engine.Volume
	bst   *memberio.Stats
	logs  *logRecorder
	f     *os.File
}

func newNullRig(t *testing.T, ctl *ublk.Control, zeroCopy bool, first int, name string) *nullRig {
	t.Helper()
	r := &nullRig{paths: nullBlk(t, first, 6, 32), bst: &memberio.Stats{}, logs: &logRecorder{}}
	exec, err := memberio.NewExecutor(memberio.ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Close() })
	log := slog.New(slog.NewTextHandler(r.logs, nil))
	r.vol, err = engine.Create(engine.Config{Name: name, K: 4, M: 2, AssumeZeroed: true},
		openMembers(t, r.paths, memberio.Options{Exclusive: true, Log: log}), r.paths, engine.Options{Executor: exec, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.vol.Close() })
	g := r.vol.Geometry()
	dev, err := ublk.Create(ctl, memberio.Backend{Volume: r.vol, Stats: r.bst}, &ublk.Config{ID: ublk.AnyID, Queues: 2, Async: true,
		MaxIOBytes: 1 << 20, IOMin: g.ChunkSize, IOOpt: int(g.StripeBytes())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	checkZeroCopy(t, dev, zeroCopy)
	r.f, err = os.OpenFile(dev.BlockPath(), os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.f.Close() })
	return r
}
