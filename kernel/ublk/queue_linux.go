//go:build linux

package ublk

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/fabraid/fabraid/kernel/internal/ublksys"
	"github.com/fabraid/fabraid/kernel/uring"
	"golang.org/x/sys/unix"
)

// queue serves one ublk hardware queue: one io_uring, one OS thread.
type queue struct {
	d        *Device
	id       int
	depth    int
	fd       int
	bufSize  int
	userCopy bool
	// zeroCopy: the kernel registers each request's pages at index tag of
	// this queue's ring (AUTO_BUF_REG) before delivering it; direct reads
	// read into them with READ_FIXED. zeroCopy implies userCopy.
	zeroCopy bool

	fetchOp, commitOp uint32

	descMem []byte
	descs   []ublksys.IODesc
	bufMem  []byte

	// Async mode (Config.Async): requests run in their own goroutines,
	// which hand results back through done and wake the queue thread with
	// an eventfd the ring keeps a read pending on.
	async    bool
	efd      int
	efdBuf   []byte // heap: the kernel fills it after io_uring_enter returns
	workers  sync.WaitGroup
	mu       sync.Mutex
	done     []completion
	notified atomic.Bool

	// Direct requests (the backend is a DirectReader, a DirectWriter):
	// pend[tag] is the planned request whose file I/O is on this queue's
	// ring, pending how many there are. Direct writes need async mode:
	// they hold their stripe until they finish, so a request the thread
	// served inline meanwhile could wait for it forever.
	direct  DirectReader
	directW DirectWriter
	pend    []*pendingDirect
	pending int
	// inflight counts requests with workers (async mode).
	inflight int
}

// pendingDirect is a planned request waiting for its current round of
// file I/O.
type pendingDirect struct {
	op   directOp
	ios  []FileIO
	res  []int32
	left int
	n    int32 // request length
	// read: a planned read. buf is the request's user buffer, which
	// PlanRead was given. On a zero-copy queue the file reads of a read
	// whose reads all lie inside buf (fixed) go to the request's pages
	// instead, so a read redone by Finish (into buf) is copied there (user
	// copy); any other planned read (a degraded one, reading into scratch
	// buffers and reconstructed into buf) is copied there whole.
	read, fixed bool
	buf         []byte
	tag         int
}

// directOp is a planned request carried out in rounds of file I/O on the
// queue's ring: a PlannedRead (one round) or a PlannedWrite.
type directOp interface {
	round() []FileIO
	step(res []int32) (more, block bool)
	finish(res []int32) error
}

type readOp struct {
	pr  PlannedRead
	ios []FileIO
}

func newReadOp(pr PlannedRead) *readOp {
	reads := pr.Reads()
	ios := make([]FileIO, len(reads))
	for i, r := range reads {
		ios[i] = FileIO{Fd: r.Fd, Buf: r.Buf, Off: r.Off}
	}
	return &readOp{pr: pr, ios: ios}
}

func (r *readOp) round() []FileIO { return r.ios }

// step: a read has one round; Finish blocks only to redo a failed read.
func (r *readOp) step(res []int32) (more, block bool) { return false, !complete(r.ios, res) }

func (r *readOp) finish(res []int32) error { return r.pr.Finish(res) }

type writeOp struct{ pw PlannedWrite }

func (w writeOp) round() []FileIO                     { return w.pw.IOs() }
func (w writeOp) step(res []int32) (more, block bool) { return w.pw.Step(res) }
func (w writeOp) finish([]int32) error                { return w.pw.Finish() }

// memberFlag marks a direct read's file read in user_data:
// memberFlag | tag<<16 | index.
const memberFlag = 1 << 33

// directExtra is the room in a queue's ring for direct reads' file reads.
const directExtra = 256

// cqPerPlanned is the completion-queue room per tag of a queue that plans
// requests: a round of a one-stripe write or degraded read is at most
// twice a stripe's width, a healthy read of 1 MiB in 64 KiB chunks 16
// reads. More still works (overflowed completions wait in the kernel).
const cqPerPlanned = 32

// completion is a result a worker hands back to the queue thread.
type completion struct {
	tag int
	res int32
}

// eventfdTag marks the eventfd read in user_data; tags are below 2^16.
const eventfdTag = 1 << 32

func newQueue(d *Device, qid int, encoded bool) (*queue, error) {
	q := &queue{
		d: d, id: qid, depth: int(d.info.QueueDepth), fd: int(d.cdev.Fd()),
		bufSize:  int(d.info.MaxIOBufBytes),
		userCopy: Features(d.info.Flags)&FeatureUserCopy != 0,
		zeroCopy: Features(d.info.Flags)&zeroCopyFlags == zeroCopyFlags,
		async:    d.cfg.Async,
		efd:      -1,
	}
	if !q.userCopy || q.zeroCopy {
		q.direct, _ = d.backend.(DirectReader)
		if q.async {
			q.directW, _ = d.backend.(DirectWriter)
		}
	}
	if q.direct != nil || q.directW != nil {
		q.pend = make([]*pendingDirect, q.depth)
	}
	q.fetchOp, _ = ublksys.EncodeIO(ublksys.UBLK_IO_FETCH_REQ, encoded)
	q.commitOp, _ = ublksys.EncodeIO(ublksys.UBLK_IO_COMMIT_AND_FETCH_REQ, encoded)
	page := os.Getpagesize()
	var err error
	q.descMem, err = unix.Mmap(q.fd, ublksys.DescAreaOffset(qid, page), ublksys.DescAreaSize(q.depth, page),
		unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap descriptors of queue %d: %w", qid, err)
	}
	q.descs = unsafe.Slice((*ublksys.IODesc)(unsafe.Pointer(&q.descMem[0])), q.depth)
	q.bufMem, err = unix.Mmap(-1, 0, q.depth*q.bufSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		q.unmap()
		return nil, fmt.Errorf("buffers of queue %d: %w", qid, err)
	}
	return q, nil
}

func (q *queue) unmap() {
	if q.descMem != nil {
		unix.Munmap(q.descMem)
		q.descMem, q.descs = nil, nil
	}
	if q.bufMem != nil {
		unix.Munmap(q.bufMem)
		q.bufMem = nil
	}
}

func (q *queue) buf(tag int) []byte {
	return q.bufMem[tag*q.bufSize : (tag+1)*q.bufSize : (tag+1)*q.bufSize]
}

// run is the queue's thread. The kernel binds the queue to the thread that
// fetched its tags, and completes requests in that thread's context, so the
// goroutine stays locked to its OS thread and never unlocks: when run
// returns, the thread exits with it, which the kernel treats as the queue's
// server going away (after STOP_DEV that is the normal end).
func (q *queue) run(ready chan<- error) {
	defer q.d.wg.Done()
	runtime.LockOSThread()
	// Completion work for ublk commands runs in this thread; DEFER_TASKRUN
	// runs it when the thread waits anyway instead of interrupting it.
	entries := uint32(q.depth + 1) // a commit per tag, and the eventfd read
	if q.pend != nil {
		entries += directExtra
	}
	cq := 2 * entries
	if q.pend != nil {
		// Planned requests' file I/O completes beside the requests:
		// room for a stripe's worth of member I/O per tag.
		cq = max(cq, uint32(q.depth)*cqPerPlanned)
	}
	ring, err := uring.New(entries, &uring.Config{CQEntries: cq, DeferTaskrun: true})
	if errors.Is(err, uring.ErrNotSupported) {
		ring, err = uring.New(entries, &uring.Config{CQEntries: cq})
	}
	if err != nil {
		ready <- fmt.Errorf("queue %d: %w", q.id, err)
		return
	}
	defer ring.Close()
	if q.zeroCopy {
		// Index tag holds tag's request pages while the server owns it.
		if err := ring.RegisterSparseBuffers(uint32(q.depth)); err != nil {
			ready <- fmt.Errorf("queue %d: %w", q.id, err)
			return
		}
	}
	if q.async {
		// Blocking eventfd: io_uring polls it instead of failing the read.
		q.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			ready <- fmt.Errorf("queue %d: eventfd: %w", q.id, err)
			return
		}
		q.efdBuf = make([]byte, 8)
		defer unix.Close(q.efd)
		// Workers touch the buffers; they must be done before those go.
		defer q.workers.Wait()
		if err := q.armEventfd(ring); err != nil {
			ready <- fmt.Errorf("queue %d: %w", q.id, err)
			return
		}
	}
	for tag := range q.depth {
		if err := q.submit(ring, q.fetchOp, tag, 0); err != nil {
			ready <- fmt.Errorf("queue %d: fetch tag %d: %w", q.id, tag, err)
			return
		}
	}
	if _, err := ring.Submit(); err != nil {
		ready <- fmt.Errorf("queue %d: submit fetches: %w", q.id, err)
		return
	}
	ready <- nil

	active := q.depth
	newReqs := 0 // new requests in the current batch of completions
	commit := func(tag int, res int32) {
		if err := q.submit(ring, q.commitOp, tag, res); err != nil {
			q.d.setQueueErr(fmt.Errorf("queue %d: commit tag %d: %w", q.id, tag, err))
			active--
		}
	}
	handle := func(c uring.CQE) {
		if c.UserData == eventfdTag {
			q.notified.Store(false)
			q.mu.Lock()
			done := q.done
			q.done = nil
			q.mu.Unlock()
			for _, d := range done {
				commit(d.tag, d.res)
			}
			q.inflight -= len(done)
			if c.Res != -int32(unix.ECANCELED) {
				if err := q.armEventfd(ring); err != nil {
					q.d.setQueueErr(fmt.Errorf("queue %d: %w", q.id, err))
				}
			}
			return
		}
		if c.UserData&memberFlag != 0 {
			q.fileIODone(ring, int(c.UserData>>16&0xffff), int(c.UserData&0xffff), c.Res, commit)
			return
		}
		tag := int(c.UserData)
		switch {
		case c.Res == ublksys.UBLK_IO_RES_OK && q.pend != nil && q.submitDirect(ring, tag, commit):
			// Its file I/O is on the ring.
		case c.Res == ublksys.UBLK_IO_RES_OK && q.async && (q.inflight > 0 || q.pending > 0 || newReqs > 1):
			// A request served inline while planned ones are pending
			// could wait for them (a stripe lock, a frozen gate) while
			// their completions wait for this thread.
			q.inflight++
			q.workers.Add(1)
			go q.work(tag)
		case c.Res == ublksys.UBLK_IO_RES_OK:
			// Inline mode, or an async queue with nothing else to do (a lone
			// request and no worker busy): serving it here saves the hand-off
			// to a worker and back, which dominates at queue depth 1.
			commit(tag, q.serve(tag))
		case c.Res == ublksys.UBLK_IO_RES_ABORT:
			// The device is stopping (or the kernel gave up on this tag): it
			// will not be fetched again.
			active--
		default:
			q.d.setQueueErr(fmt.Errorf("queue %d: tag %d: io command: %w", q.id, tag, c.Err()))
			active--
		}
	}
	batch := make([]uring.CQE, 0, 2*q.depth)
	collect := func(c uring.CQE) {
		batch = append(batch, c)
		if c.UserData != eventfdTag && c.Res == ublksys.UBLK_IO_RES_OK {
			newReqs++
		}
	}
	for active > 0 {
		if _, err := ring.SubmitAndWait(1); err != nil && !errors.Is(err, unix.EBUSY) {
			q.d.setQueueErr(fmt.Errorf("queue %d: %w", q.id, err))
			return
		}
		// EBUSY: completions overflowed the CQ (the kernel keeps them,
		// IORING_FEAT_NODROP) and could not all be moved back: reaping
		// makes room, and the next enter submits what is pending.
		batch = batch[:0]
		newReqs = 0
		ring.ForEachCQE(collect)
		for _, c := range batch {
			handle(c)
		}
	}
}

// submitDirect plans tag's request as a direct read or write and queues
// its first round of file I/O; false means the backend did not plan it.
func (q *queue) submitDirect(ring *uring.Ring, tag int, commit func(int, int32)) bool {
	r, err := decodeDesc(q.descs[tag], q.d.size, q.bufSize)
	if err != nil {
		return false
	}
	buf := q.buf(tag)[:r.len]
	p := &pendingDirect{n: int32(r.len), buf: buf, tag: tag}
	switch {
	case r.op == opRead && q.direct != nil:
		if q.zeroCopy && q.descs[tag].OpFlags&ublksys.UBLK_IO_F_NEED_REG_BUF != 0 {
			// The automatic registration failed: serve goes through user copy.
			return false
		}
		pr, ok := q.direct.PlanRead(buf, r.off)
		if !ok {
			return false
		}
		rop := newReadOp(pr)
		p.op, p.read, p.fixed = rop, true, q.zeroCopy && inside(rop.ios, buf)
	case r.op == opWrite && q.directW != nil && !r.fua():
		if q.userCopy {
			if _, err := unix.Pread(q.fd, buf, ublksys.UserCopyOffset(uint16(q.id), uint16(tag), 0)); err != nil {
				return false // serve copies it again and fails the request
			}
		}
		pw, ok := q.directW.PlanWrite(buf, r.off)
		if !ok {
			return false
		}
		p.op = writeOp{pw}
	default:
		return false
	}
	q.pend[tag] = p
	q.pending++
	q.submitRound(ring, p, commit)
	return true
}

// submitRound queues the file I/O of p's current round.
func (q *queue) submitRound(ring *uring.Ring, p *pendingDirect, commit func(int, int32)) {
	p.ios = p.op.round()
	p.res = append(p.res[:0], make([]int32, len(p.ios))...)
	p.left = len(p.ios)
	if p.left == 0 {
		q.roundDone(ring, p, commit)
		return
	}
	if ring.Entries()-ring.Pending() < uint32(len(p.ios)) {
		ring.Submit() // room for the whole round; a failure shows below
	}
	for i, fio := range p.ios {
		sqe, err := ring.NextSQE()
		if err != nil {
			// Cannot queue the rest: they count as failed, so the
			// backend redoes the request another way once the queued
			// ones are back.
			for j := i; j < len(p.ios); j++ {
				p.res[j] = -int32(unix.EAGAIN)
				p.left--
			}
			if p.left == 0 {
				q.roundDone(ring, p, commit)
			}
			return
		}
		ud := memberFlag | uint64(p.tag)<<16 | uint64(i)
		switch {
		case fio.Write:
			sqe.PrepWrite(fio.Fd, fio.Buf, fio.Off, ud)
			if fio.FUA {
				sqe.OpFlags = unix.RWF_DSYNC
			}
		case p.fixed:
			// fio.Buf lies inside p.buf (PlannedRead): its offset there
			// is its offset in the request's registered pages.
			at := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(fio.Buf))) - uintptr(unsafe.Pointer(unsafe.SliceData(p.buf))))
			sqe.PrepReadFixed(fio.Fd, uint16(p.tag), at, len(fio.Buf), fio.Off, ud)
		default:
			sqe.PrepRead(fio.Fd, fio.Buf, fio.Off, ud)
		}
	}
}

// fileIODone records one file I/O of tag's current round; the last one
// ends the round.
func (q *queue) fileIODone(ring *uring.Ring, tag, i int, res int32, commit func(int, int32)) {
	p := q.pend[tag]
	if p == nil || i >= len(p.res) || p.left == 0 {
		q.d.setQueueErr(fmt.Errorf("queue %d: completion of an unknown file I/O (tag %d, %d)", q.id, tag, i))
		return
	}
	p.res[i] = res
	p.left--
	if p.left == 0 {
		q.roundDone(ring, p, commit)
	}
}

// roundDone hands a finished round to the backend: it queues the next
// round, or completes the request: inline when Finish will not block, in
// a worker when it may.
func (q *queue) roundDone(ring *uring.Ring, p *pendingDirect, commit func(int, int32)) {
	more, block := p.op.step(p.res)
	if more {
		q.submitRound(ring, p, commit)
		return
	}
	q.pend[p.tag] = nil
	q.pending--
	if !block || !q.async {
		commit(p.tag, q.finishResult(p))
		return
	}
	q.inflight++
	q.workers.Add(1)
	go func() {
		defer q.workers.Done()
		q.handBack(p.tag, q.finishResult(p))
	}()
}

// finishResult finishes a direct request and returns its commit result.
func (q *queue) finishResult(p *pendingDirect) int32 {
	if err := p.op.finish(p.res); err != nil {
		return q.errResult(err)
	}
	if q.zeroCopy && p.read && (!p.fixed || !complete(p.ios, p.res)) {
		// The data is in p.buf: the reads were not fixed, or Finish
		// redid the read into p.buf and the request's pages hold only
		// what the file reads that succeeded put there.
		if _, err := unix.Pwrite(q.fd, p.buf, ublksys.UserCopyOffset(uint16(q.id), uint16(p.tag), 0)); err != nil {
			return q.errResult(fmt.Errorf("user copy of redone read, tag %d: %w", p.tag, err))
		}
	}
	return p.n
}

// inside reports whether every I/O's buffer lies inside buf.
func inside(ios []FileIO, buf []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	for _, io := range ios {
		at := uintptr(unsafe.Pointer(unsafe.SliceData(io.Buf)))
		if at < lo || at+uintptr(len(io.Buf)) > lo+uintptr(len(buf)) {
			return false
		}
	}
	return true
}

// complete reports whether every file I/O moved its full length.
func complete(ios []FileIO, res []int32) bool {
	for j, r := range res {
		if int(r) != len(ios[j].Buf) {
			return false
		}
	}
	return true
}

// armEventfd queues a read of the wake-up eventfd.
func (q *queue) armEventfd(ring *uring.Ring) error {
	sqe, err := ring.NextSQE()
	if err != nil {
		return fmt.Errorf("arm eventfd: %w", err)
	}
	sqe.PrepRead(q.efd, q.efdBuf, 0, eventfdTag)
	return nil
}

// work serves tag in its own goroutine (async mode) and hands the result to
// the queue thread, which alone may commit it.
func (q *queue) work(tag int) {
	defer q.workers.Done()
	q.handBack(tag, q.serve(tag))
}

// handBack gives a worker's result to the queue thread.
func (q *queue) handBack(tag int, res int32) {
	q.mu.Lock()
	q.done = append(q.done, completion{tag, res})
	q.mu.Unlock()
	if !q.notified.Swap(true) {
		one := [8]byte{1}
		unix.Write(q.efd, one[:])
	}
}

// submit queues a FETCH_REQ or COMMIT_AND_FETCH_REQ for tag.
func (q *queue) submit(ring *uring.Ring, op uint32, tag int, result int32) error {
	sqe, err := ring.NextSQE()
	if err != nil {
		return err
	}
	sqe.PrepURingCmd(q.fd, op, uint64(tag))
	cmd := (*ublksys.IOCmd)(sqe.CmdArea())
	cmd.QID = uint16(q.id)
	cmd.Tag = uint16(tag)
	cmd.Result = result
	switch {
	case q.zeroCopy:
		// struct ublk_auto_buf_reg goes in sqe->addr, not in the command.
		// With FALLBACK a failed registration delivers the request with
		// UBLK_IO_F_NEED_REG_BUF (served by user copy) instead of failing it.
		sqe.Addr = ublksys.AutoBufRegAddr(uint16(tag), ublksys.UBLK_AUTO_BUF_REG_FALLBACK)
	case !q.userCopy:
		cmd.Addr = uint64(uintptr(unsafe.Pointer(&q.bufMem[tag*q.bufSize])))
	}
	return nil
}

// serve carries out the request in tag's descriptor and returns the result
// for COMMIT_AND_FETCH_REQ: bytes done, or -errno.
func (q *queue) serve(tag int) int32 {
	r, err := decodeDesc(q.descs[tag], q.d.size, q.bufSize)
	if err != nil {
		if errors.Is(err, errUnsupportedOp) {
			return -int32(unix.EOPNOTSUPP)
		}
		return -int32(unix.EINVAL)
	}
	b := q.d.backend
	switch r.op {
	case opRead:
		buf := q.buf(tag)[:r.len]
		if _, err := b.ReadAt(buf, r.off); err != nil {
			return q.errResult(err)
		}
		if q.userCopy {
			if _, err := unix.Pwrite(q.fd, buf, ublksys.UserCopyOffset(uint16(q.id), uint16(tag), 0)); err != nil {
				return q.errResult(err)
			}
		}
		return int32(r.len)
	case opWrite:
		buf := q.buf(tag)[:r.len]
		if q.userCopy {
			if _, err := unix.Pread(q.fd, buf, ublksys.UserCopyOffset(uint16(q.id), uint16(tag), 0)); err != nil {
				return q.errResult(err)
			}
		}
		var err error
		if r.fua() {
			if fw, ok := b.(FUAWriter); ok {
				_, err = fw.WriteAtFUA(buf, r.off)
			} else if _, err = b.WriteAt(buf, r.off); err == nil {
				err = b.Flush()
			}
		} else {
			_, err = b.WriteAt(buf, r.off)
		}
		if err != nil {
			return q.errResult(err)
		}
		return int32(r.len)
	case opFlush:
		if err := b.Flush(); err != nil {
			return q.errResult(err)
		}
		return 0
	case opDiscard:
		dis, ok := b.(Discarder)
		if !ok {
			return -int32(unix.EOPNOTSUPP)
		}
		if err := dis.Discard(r.off, r.len); err != nil {
			return q.errResult(err)
		}
		return 0
	case opWriteZeroes:
		if zw, ok := b.(ZeroWriter); ok {
			if err := zw.WriteZeroes(r.off, r.len); err != nil {
				return q.errResult(err)
			}
			return 0
		}
		buf := q.buf(tag)
		clear(buf)
		for done := int64(0); done < r.len; {
			chunk := min(r.len-done, int64(len(buf)))
			if _, err := b.WriteAt(buf[:chunk], r.off+done); err != nil {
				return q.errResult(err)
			}
			done += chunk
		}
		return 0
	}
	return -int32(unix.EOPNOTSUPP)
}

// errResult is the commit result of a request the backend failed with
// err: -ENODATA when err hands the request off (HandOffError), else
// errnoResult.
func (q *queue) errResult(err error) int32 {
	var h HandOffError
	if errors.As(err, &h) && h.HandOff() {
		return HandOffResult
	}
	return errnoResult(err)
}

// errnoResult turns a backend error into -errno: EIO unless the error
// carries an errno, and EIO for ENODATA too, which is kept for hand-off
// (HandOffResult).
func errnoResult(err error) int32 {
	var errno unix.Errno
	if errors.As(err, &errno) && errno != 0 && errno != unix.ENODATA {
		return -int32(errno)
	}
	return -int32(unix.EIO)
}
