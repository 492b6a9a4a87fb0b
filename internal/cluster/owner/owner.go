package owner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fabraid/fabraid/internal/cluster/keys"
)

// Epoch is a volume's owner epoch: the create revision of its owner key.
// It is the fencing token written into the superblocks
// (engine.Options.Epoch); every takeover has a larger one.
type Epoch uint64

// RecordVersion is the schema version of Record.
const RecordVersion = 1

// Record is the value of a volume's owner key.
type Record struct {
	Version int       `json:"version"`
	Node    string    `json:"node"`
	Lease   string    `json:"lease"` // hex lease ID, for status and debugging
	Since   time.Time `json:"since"`
}

// Errors.
var (
	// ErrFenced: the Session reached its self-fence deadline or lost its
	// lease; it can acquire nothing any more.
	ErrFenced = errors.New("owner lease fenced")
	// ErrHeld is wrapped by HeldError.
	ErrHeld = errors.New("volume has an owner")
)

// HeldError says who owns a volume that Acquire could not take.
type HeldError struct {
	Volume string
	Node   string
	Epoch  Epoch
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("volume %s is owned by node %s (epoch %d)", e.Volume, e.Node, e.Epoch)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// Clock is the time source of a Session.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Options configure a Session; the zero value is usable.
type Options struct {
	// TTL of the lease, rounded up to whole seconds (etcd grants
	// seconds); default DefaultTTL. The server may grant more (its
	// minimum is 1.5 x the election timeout); the deadline uses what it
	// granted.
	TTL time.Duration
	// StopBudget is the part of the margin left for freezing the
	// engines; default DefaultStopBudget. See Margin.
	StopBudget time.Duration
	// OnFence runs once at the self-fence, before Fenced is closed, in
	// the Session's goroutine: freeze every engine the node owns here.
	OnFence func()
	Clock   Clock // default: the real clock
}

// Session is a node's owner lease: kept alive by its own keepalives (one
// every TTL/3) and watched by a Guard. When the guard's deadline passes or
// the lease is lost, the Session fences: OnFence runs, Fenced is closed,
// Ctx is cancelled, and it stops renewing. It never recovers; a new
// Session (a new lease, new epochs) is the way back. Safe for concurrent
// use.
type Session struct {
	cli     *clientv3.Client
	id      clientv3.LeaseID
	ttl     time.Duration // granted
	clock   Clock
	onFence func()

	mu sync.Mutex
	g  Guard

	ctx    context.Context // cancelled at the fence or Close
	cancel context.CancelFunc
	fenced chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// NewSession grants a lease and starts keeping it alive.
func NewSession(ctx context.Context, cli *clientv3.Client, o Options) (*Session, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.StopBudget <= 0 {
		o.StopBudget = DefaultStopBudget
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	sec := int64((o.TTL + time.Second - 1) / time.Second)
	sent := o.Clock.Now()
	resp, err := cli.Grant(ctx, sec)
	if err != nil {
		return nil, fmt.Errorf("owner: grant lease: %w", err)
	}
	ttl := time.Duration(resp.TTL) * time.Second
	s := &Session{cli: cli, id: resp.ID, ttl: ttl, clock: o.Clock, onFence: o.OnFence,
		g: NewGuard(sent, ttl, Margin(ttl, o.StopBudget)), fenced: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(2)
	go s.keepAlive(sent)
	go s.watch()
	return s, nil
}

// Lease is the lease ID.
func (s *Session) Lease() clientv3.LeaseID { return s.id }

// TTL is the granted TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Deadline is the current self-fence deadline.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.g.Deadline()
}

// Fenced is closed once the Session has fenced (after OnFence returned).
func (s *Session) Fenced() <-chan struct{} { return s.fenced }

// Ctx is cancelled when the Session fences or is closed; derive every
// ownership operation's context from it.
func (s *Session) Ctx() context.Context { return s.ctx }

// keepAlive sends a keepalive every TTL/3, whether or not the one before
// was answered (a slow answer must not delay the next send); each waits
// for its answer until the current deadline at most. The answers feed the
// guard.
func (s *Session) keepAlive(sent time.Time) {
	defer s.wg.Done()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	iv := KeepAliveInterval(s.ttl)
	next := sent.Add(iv)
	for {
		select {
		case <-s.clock.After(next.Sub(s.clock.Now())):
		case <-s.ctx.Done():
			return
		}
		sent := s.clock.Now()
		next = sent.Add(iv)
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			s.keepAliveOnce(sent)
		}()
	}
}

func (s *Session) keepAliveOnce(sent time.Time) {
	kctx, cancel := context.WithTimeout(s.ctx, max(s.Deadline().Sub(sent), time.Millisecond))
	resp, err := s.cli.KeepAliveOnce(kctx, s.id)
	cancel()
	s.mu.Lock()
	switch {
	case err == nil:
		s.g.Renewed(sent, time.Duration(resp.TTL)*time.Second)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		s.g.Lost()
	}
	lost := s.g.fenced
	s.mu.Unlock()
	if lost {
		s.fence()
	}
}

// watch fences at the guard's deadline (which only moves later while the
// keepalives are answered).
func (s *Session) watch() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		now := s.clock.Now()
		fenced, dl := s.g.Fenced(now), s.g.Deadline()
		s.mu.Unlock()
		if fenced {
			s.fence()
			return
		}
		select {
		case <-s.clock.After(dl.Sub(now)):
		case <-s.ctx.Done():
			return
		}
	}
}

func (s *Session) fence() {
	s.once.Do(func() {
		s.mu.Lock()
		s.g.Lost() // latch: a racing Renewed must not move the deadline
		s.mu.Unlock()
		if s.onFence != nil {
			s.onFence()
		}
		close(s.fenced)
		s.cancel()
	})
}

func (s *Session) isFenced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.g.Fenced(s.clock.Now())
}

// Close fences (OnFence runs if it has not), stops renewing and revokes
// the lease, so that every owner key on it is deleted at once and another
// node may take over without waiting for the TTL. Freeze or stop the
// engines before (OnFence does). The revoke only hastens the takeover
// (the lease expires anyway): a member without a leader refuses it at
// once instead of holding it until ctx ends.
func (s *Session) Close(ctx context.Context) error {
	s.fence()
	s.wg.Wait()
	if _, err := s.cli.Revoke(clientv3.WithRequireLeader(ctx), s.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("owner: revoke lease %x: %w", s.id, err)
	}
	return nil
}

// Acquire makes node the owner of volume, on s's lease, if the volume has
// no owner; it returns the new epoch. A volume with an owner (this node's
// too) is a *HeldError. A Session that has fenced, or whose deadline
// passed while the transaction ran, returns ErrFenced: its epoch could not
// be used safely (the key stays on the lease and goes with it).
func Acquire(ctx context.Context, s *Session, volume, node string) (Epoch, error) {
	return AcquireIf(ctx, s, volume, node)
}

// ErrConditions: AcquireIf found the volume without an owner but one of
// its conditions false; nothing was written.
var ErrConditions = errors.New("owner: acquire conditions no longer hold")

// AcquireIf is Acquire in one transaction with the comparisons conds:
// when the key is absent but one of them is false it writes nothing and
// returns ErrConditions.
func AcquireIf(ctx context.Context, s *Session, volume, node string, conds ...clientv3.Cmp) (Epoch, error) {
	if s.isFenced() {
		return 0, fmt.Errorf("owner: acquire %s: %w", volume, ErrFenced)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	b, err := json.Marshal(Record{Version: RecordVersion, Node: node, Lease: fmt.Sprintf("%x", s.id), Since: s.clock.Now().UTC()})
	if err != nil {
		return 0, fmt.Errorf("owner: %w", err)
	}
	key := keys.Owner(volume)
	resp, err := s.cli.Txn(ctx).If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, conds...)...).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(s.id))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		if s.ctx.Err() != nil {
			return 0, fmt.Errorf("owner: acquire %s: %w (%v)", volume, ErrFenced, err)
		}
		return 0, fmt.Errorf("owner: acquire %s: %w", volume, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 && len(conds) > 0 {
			return 0, fmt.Errorf("owner: acquire %s: %w", volume, ErrConditions)
		}
		if len(kvs) == 0 {
			return 0, fmt.Errorf("owner: acquire %s: owner key changed during the transaction, retry", volume)
		}
		rec, err := decode(kvs[0].Value)
		if err != nil {
			return 0, fmt.Errorf("owner: %s: %w", kvs[0].Key, err)
		}
		return 0, &HeldError{Volume: volume, Node: rec.Node, Epoch: Epoch(kvs[0].CreateRevision)}
	}
	if s.isFenced() {
		return 0, fmt.Errorf("owner: acquire %s: %w (deadline passed during the transaction)", volume, ErrFenced)
	}
	return Epoch(resp.Header.Revision), nil
}

// Current returns a volume's owner and epoch; ok is false when it has none.
func Current(ctx context.Context, kv clientv3.KV, volume string) (rec Record, epoch Epoch, ok bool, err error) {
	resp, err := kv.Get(ctx, keys.Owner(volume))
	if err != nil {
		return Record{}, 0, false, fmt.Errorf("owner: get %s: %w", volume, err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, 0, false, nil
	}
	rec, err = decode(resp.Kvs[0].Value)
	if err != nil {
		return Record{}, 0, false, fmt.Errorf("owner: %s: %w", resp.Kvs[0].Key, err)
	}
	return rec, Epoch(resp.Kvs[0].CreateRevision), true, nil
}

// Resign gives up ownership of volume at epoch: the key is deleted only if
// it is still the one created at epoch. Stop the volume's engine first. A
// volume owned at another epoch is a *HeldError; one with no owner is not
// an error.
func Resign(ctx context.Context, kv clientv3.KV, volume string, epoch Epoch) error {
	key := keys.Owner(volume)
	resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(epoch))).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("owner: resign %s: %w", volume, err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil
	}
	rec, err := decode(kvs[0].Value)
	if err != nil {
		return fmt.Errorf("owner: %s: %w", kvs[0].Key, err)
	}
	return &HeldError{Volume: volume, Node: rec.Node, Epoch: Epoch(kvs[0].CreateRevision)}
}

// WaitFree returns once volume has no owner key (the owner resigned, or
// its lease expired at the server or was revoked), or when ctx ends.
func WaitFree(ctx context.Context, cli *clientv3.Client, volume string) error {
	key := keys.Owner(volume)
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("owner: wait for %s: %w", volume, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		wctx, cancel := context.WithCancel(ctx)
		wch := cli.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterPut())
		deleted := false
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					deleted = true
				}
			}
			if deleted || wr.Err() != nil {
				break
			}
		}
		cancel()
		if deleted {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("owner: wait for %s: %w", volume, err)
		}
	}
}

func decode(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, err
	}
	if r.Version < 1 || r.Version > RecordVersion {
		return Record{}, fmt.Errorf("schema version %d, this fabraid reads 1..%d (upgrade it)", r.Version, RecordVersion)
	}
	return r, nil
}
