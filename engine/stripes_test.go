package engine

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fabraid/fabraid/engine/layout"
)

// stripeOverlap holds the data I/O of a request's first row until data I/O
// of every row has reached a member: were the stripes of one request run
// one after another, the held I/O would wait for I/O that only follows it.
type stripeOverlap struct {
	dataOff int64
	rows    int

	mu     sync.Mutex
	armed  bool
	seen   map[int64]bool // member offsets of data I/O while armed
	all    chan struct{}  // closed when every row was seen
	held   bool           // a first-row I/O was held
	failed error
}

func (s *stripeOverlap) arm() {
	s.mu.Lock()
	s.armed, s.seen, s.all, s.held, s.failed = true, map[int64]bool{}, make(chan struct{}), false, nil
	s.mu.Unlock()
}

// disarm ends a request and reports whether its rows overlapped.
func (s *stripeOverlap) disarm() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	if !s.held {
		return fmt.Errorf("no I/O of the first row was seen")
	}
	return s.failed
}

func (s *stripeOverlap) hook(op memOp) error {
	if op.after || op.flush || op.off < s.dataOff {
		return nil
	}
	s.mu.Lock()
	if !s.armed {
		s.mu.Unlock()
		return nil
	}
	s.seen[op.off] = true
	if len(s.seen) == s.rows {
		select {
		case <-s.all:
		default:
			close(s.all)
		}
	}
	first, all := op.off == s.dataOff, s.all
	if first {
		s.held = true
	}
	s.mu.Unlock()
	if !first {
		return nil
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		s.mu.Lock()
		s.failed = fmt.Errorf("the other rows' I/O did not start while the first row's was held (%s)", op)
		s.mu.Unlock()
	}
	return nil
}

// TestStripesOfOneRequestOverlap: the stripes of one write run at once,
// and so do those of a degraded read (reconstructed stripe by stripe);
// what was written reads back with a member gone.
func TestStripesOfOneRequestOverlap(t *testing.T) {
	cfg := integrityCfg() // k=2, m=1, 4 KiB chunks: row r at member offset DataOffset + r*4 KiB
	const rows = 4
	s := &stripeOverlap{dataOff: cfg.DataOffset, rows: rows}
	hm, devs := hookMembers(3, cfg.DataOffset+rows*layout.BlockSize, s.hook)
	v, err := Create(cfg, devs, nil, Options{Logger: quietLogger(), Executor: ParallelExecutor{}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Abandon()
	p := make([]byte, rows*int64(cfg.K)*layout.BlockSize)
	for i := range p {
		p[i] = byte(i*7 + i/4096)
	}
	s.arm()
	if _, err := v.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.disarm(); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := v.Flush(); err != nil {
		t.Fatal(err)
	}
	hm[0].SetFailed(true)
	got := make([]byte, len(p))
	if _, err := v.ReadAt(got, 0); err != nil { // finds slot 0 failed
		t.Fatal(err)
	}
	clear(got)
	s.arm()
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.disarm(); err != nil {
		t.Fatalf("degraded read: %v", err)
	}
	if !bytes.Equal(got, p) {
		t.Fatal("degraded read differs from what was written")
	}
}
