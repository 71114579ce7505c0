package simulate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvready/kvready/backend/mem"
	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/metrics"
	"github.com/kvready/kvready/staging"
)

// delivery is one submission the backend accepted. Over the in-process store
// it is held at its gate until the virtual clock reaches releaseAt; over Redis
// it runs at the store's own pace.
type delivery struct {
	l         *lease
	mode      mem.Mode
	releaseAt time.Duration
	gate      chan struct{}
	inner     contract.Attempt
	slots     []slotKey // the staging slots its units name
	landed    bool
	landedAt  time.Duration
	seq       uint64 // the backend's call number: its gate's key
}

// backend is what the managers submit to: backend/mem or backend/redis.
type backend interface {
	contract.Fetcher
	contract.Publisher
}

// transport stands between the managers and the store: backend/mem, or
// backend/redis. It tells the checker what each submission exposed, what the
// backend answered first and which Quiesce calls it answered true, and
// otherwise passes every call through unchanged. Over backend/mem it also
// makes the deliveries happen on the virtual clock.
//
// Submissions come from the owner goroutine; Poll and Quiesce also come from
// the engine's own goroutines, so everything the transport and the checker
// share is guarded by the driver's lock (d.mu), and the gate table by its own.
type transport struct {
	be  backend
	mem *mem.Backend     // the in-process store; nil over Redis
	rds *kvredis.Backend // the Redis store; nil in process
	// check is the checker's own connection to the Redis store, without
	// retries, so that a store gone away costs the checker nothing.
	check        *kvredis.Backend
	checkTimeout time.Duration
	store        string // the store, as the summary names it
	breakerOff   bool   // the Redis URL turned the breaker off (breaker_failures=0)

	d       *driver
	next    func() *lease // the lease whose submission comes next
	made    *delivery     // the delivery the policy created during a submission
	pending []*delivery
	orphans int // submissions with no lease to name: a simulator bug

	gmu   sync.Mutex
	bySeq map[uint64]*delivery
}

var (
	_ contract.Fetcher   = (*transport)(nil)
	_ contract.Publisher = (*transport)(nil)
)

// openTimeout bounds connecting to a Redis store.
const openTimeout = 10 * time.Second

func newTransport(ctx context.Context, d *driver) (*transport, error) {
	t := &transport{d: d, bySeq: map[uint64]*delivery{}, store: MemBackend}
	if d.cfg.Redis() {
		return t, t.openRedis(ctx)
	}
	opts := []mem.Option{mem.WithPolicy(t.policy), mem.WithGate(t.gateOf)}
	if d.cfg.StoreCapacity > 0 {
		opts = append(opts, mem.WithCapacity(d.cfg.StoreCapacity))
	}
	be, err := mem.New(d.mem, opts...)
	if err != nil {
		return nil, err
	}
	t.be, t.mem = be, be
	return t, nil
}

// openRedis connects the backend and the checker's own client to the store.
// The backend's attempt bound is the request deadline: an attempt that has
// not answered by then ends, so Quiesce proves its access over within the
// drain grace of the deadline, even with the server gone or paused
// (docs/backend-redis.md: bound + scheduling margin ≤ deadline + grace).
func (t *transport) openRedis(ctx context.Context) error {
	cfg := t.d.cfg
	u, err := url.Parse(cfg.Backend)
	if err != nil {
		return fmt.Errorf("simulate: backend: %w", err)
	}
	t.store = fmt.Sprintf("%s (prefix %q)", u.Redacted(), cfg.RedisPrefix)
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	// One pipelined call per lease: the rows are small, round trips are what
	// costs.
	// The store's health goes where the caller wants it said (a line on
	// stderr), and to the metrics.
	t.rds, err = kvredis.Open(ctx, cfg.Backend, t.d.mem, kvredis.WithPrefix(cfg.RedisPrefix),
		kvredis.WithAttemptTimeout(cfg.Deadline), kvredis.WithBatch(min(cfg.Blocks*cfg.Groups, 64)),
		kvredis.WithHealthFunc(cfg.OnStoreHealth))
	if err != nil {
		return fmt.Errorf("simulate: backend: %w", err)
	}
	if cfg.Metrics != nil {
		rds := t.rds
		cfg.Metrics.WatchStore(func() metrics.StoreHealth {
			h := rds.Health()
			return metrics.StoreHealth{Reachable: h.Reachable, FastFailures: h.FastFailures, Unavailable: h.Unavailable}
		})
	}
	t.be = t.rds
	q := u.Query()
	// The URL parsed (Open took it): breaker_failures is a whole number.
	if v, ok := q["breaker_failures"]; ok && len(v) > 0 {
		n, err := strconv.Atoi(v[0])
		t.breakerOff = err == nil && n == 0
	}
	q.Set("max_retries", "-1")
	u.RawQuery = q.Encode()
	t.checkTimeout = max(100*time.Millisecond, cfg.Deadline)
	t.check, err = kvredis.Open(ctx, u.String(), t.d.mem, kvredis.WithPrefix(cfg.RedisPrefix),
		kvredis.WithAttemptTimeout(t.checkTimeout), kvredis.WithConcurrency(1))
	if err != nil {
		_ = t.rds.Close()
		return fmt.Errorf("simulate: backend (the checker's connection): %w", err)
	}
	return nil
}

// stored reads what the store holds for names, for the checker: values[i] is
// nil where it holds nothing. An error means the store could not be read
// (a Redis server gone away), never that it holds nothing.
func (t *transport) stored(names []contract.Name) ([][]byte, error) {
	out := make([][]byte, len(names))
	if t.mem != nil {
		for i, n := range names {
			if v, ok := t.mem.Get(staging.ExtentName, n); ok {
				out[i] = v
			}
		}
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.checkTimeout)
	defer cancel()
	pipe := t.check.Client().Pipeline()
	cmds := make([]*goredis.StringCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.Get(ctx, t.check.Key(staging.ExtentName, n))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	for i, c := range cmds {
		v, err := c.Bytes()
		switch {
		case errors.Is(err, goredis.Nil):
		case err != nil:
			return nil, err
		default:
			out[i] = v
		}
	}
	return out, nil
}

// policy is asked by the backend, synchronously inside Fetch or Publish on the
// owner goroutine, how this submission behaves: as the lease's drawn
// behaviour says.
func (t *transport) policy(call mem.Call) mem.Mode {
	if call.Op == mem.OpProbe {
		return mem.Normal
	}
	l := t.next()
	if l == nil {
		t.orphans++
		return mem.Reject
	}
	d := &delivery{l: l, mode: l.mode, releaseAt: t.d.clk.since() + l.latency, gate: make(chan struct{}), seq: call.Seq}
	t.gmu.Lock()
	t.bySeq[call.Seq] = d
	t.gmu.Unlock()
	t.made = d
	if l.mode == mem.QuiesceNotYet {
		// The transport answers "not yet" on the virtual clock (see Quiesce):
		// counting calls would depend on how the engine batched them.
		return mem.Normal
	}
	return l.mode
}

// notYet is how long after landing a QuiesceNotYet delivery still answers
// "not yet".
const notYet = 3 * tick

// gateOf is asked by a delivery's goroutine what to wait for before it touches
// memory.
func (t *transport) gateOf(call mem.Call) <-chan struct{} {
	t.gmu.Lock()
	defer t.gmu.Unlock()
	d := t.bySeq[call.Seq]
	delete(t.bySeq, call.Seq)
	if d == nil {
		return nil
	}
	return d.gate
}

func (t *transport) submit(ext contract.CacheExtent, call func() (contract.Attempt, error)) (contract.Attempt, error) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	var d *delivery
	var a contract.Attempt
	var err error
	if t.mem != nil {
		// The policy names the lease, inside the call.
		t.made = nil
		a, err = call()
		d, t.made = t.made, nil
	} else if l := t.next(); l != nil {
		d = &delivery{l: l, mode: mem.Normal}
		a, err = call()
	} else {
		t.orphans++
		return nil, fmt.Errorf("simulate: %w: no lease to name for this submission (a simulator bug)", contract.ErrSubmissionRejected)
	}
	if d == nil {
		return a, err // an orphan submission, already counted
	}
	l := d.l
	l.submitted = true
	l.submittedAt = t.d.clk.since()
	var slots []slotKey
	for _, u := range ext.All() {
		slots = append(slots, slotKey{u.LocalGroup, u.Local})
	}
	t.d.chk.exposed(l, slots)
	t.d.chk.submittedPublish(l, ext)
	if err != nil {
		if a == nil && errors.Is(err, contract.ErrSubmissionRejected) {
			l.rejected = true
			l.storeDown = errors.Is(err, kvredis.ErrUnavailable)
		}
		// No delivery goroutine will ask for its gate.
		t.gmu.Lock()
		delete(t.bySeq, d.seq)
		t.gmu.Unlock()
		return a, err
	}
	d.inner, d.slots = a, slots
	l.delivery = d
	if t.mem != nil {
		t.pending = append(t.pending, d)
		return &attempt{t: t, d: d}, nil
	}
	if _, ok := a.(contract.Notifier); ok {
		// Over Redis the engine is told of an outcome as it lands, as it
		// would be without the transport, instead of polling for it.
		return &notifyingAttempt{attempt{t: t, d: d}}, nil
	}
	return &attempt{t: t, d: d}, nil
}

// AdmissionLimit implements readiness.Admitter: the Redis backend's own limit
// (how many attempts its workers and connections serve at once), so that the
// engine holds the rest before submission, where no deadline runs. The
// in-process store has none: 0, no bound.
func (t *transport) AdmissionLimit() int {
	if t.rds != nil {
		return t.rds.AdmissionLimit()
	}
	return 0
}

// Fetch implements contract.Fetcher.
func (t *transport) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	return t.submit(ext, func() (contract.Attempt, error) { return t.be.Fetch(ext, route) })
}

// Publish implements contract.Publisher.
func (t *transport) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return t.submit(ext, func() (contract.Attempt, error) { return t.be.Publish(ext) })
}

func unwrap(method string, list []contract.Attempt) ([]*delivery, []contract.Attempt, error) {
	ds := make([]*delivery, len(list))
	inner := make([]contract.Attempt, len(list))
	for i, x := range list {
		var a *attempt
		switch x := x.(type) {
		case *attempt:
			a = x
		case *notifyingAttempt:
			if x != nil {
				a = &x.attempt
			}
		}
		if a == nil {
			return nil, nil, fmt.Errorf("simulate: %s: attempt %d (%T) was not returned by this transport", method, i, x)
		}
		ds[i], inner[i] = a.d, a.d.inner
	}
	return ds, inner, nil
}

// Quiesce implements contract.Fetcher and contract.Publisher. Only a true
// answer from the backend is recorded as proof. Over the in-process store, a
// delivery still held at its gate is still transferring: the answer is "not
// yet" (false), and the engine asks again later. Deliveries land only on the
// virtual clock, so a run does not depend on which Quiesce worker asks first.
// Over Redis the backend's own answer is passed on; it may wait (bounded by
// ctx), so it is asked without the driver's lock.
func (t *transport) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	ds, inner, err := unwrap("Quiesce", list)
	if err != nil {
		return false, err
	}
	if t.mem == nil {
		ok, err := t.be.Quiesce(ctx, inner)
		if ok && err == nil {
			t.prove(ds)
		}
		t.d.poke()
		return ok, err
	}
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	now := t.d.clk.since()
	for _, d := range ds {
		if !d.landed || (d.mode == mem.QuiesceNotYet && now < d.landedAt+notYet) {
			return false, nil
		}
	}
	ok, err := t.be.Quiesce(ctx, inner)
	if ok && err == nil {
		t.proveLocked(ds)
	}
	return ok, err
}

// prove records that the backend answered Quiesce true for ds.
func (t *transport) prove(ds []*delivery) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	t.proveLocked(ds)
}

func (t *transport) proveLocked(ds []*delivery) {
	now := t.d.clk.since()
	for _, d := range ds {
		if !d.l.proven {
			d.l.proven, d.l.provenAt = true, now
		}
	}
}

// Settle implements contract.Fetcher and contract.Publisher.
func (t *transport) Settle(ctx context.Context, list []contract.Attempt) error {
	_, inner, err := unwrap("Settle", list)
	if err != nil {
		return err
	}
	return t.be.Settle(ctx, inner)
}

// Probe implements contract.Fetcher.
func (t *transport) Probe(ctx context.Context, name []byte, units []contract.Name) (contract.NameSet, bool, error) {
	return t.be.Probe(ctx, name, units)
}

// OpenRoute implements contract.Fetcher.
func (t *transport) OpenRoute(hint map[string]string) (contract.Route, error) {
	return t.be.OpenRoute(hint)
}

// land opens a delivery's gate and waits until its goroutine has finished, so
// that everything it writes — served rows, or the poison a failed delivery
// writes after reporting — lands now. The checker compares the slots before and
// after. The caller holds d.mu.
func (t *transport) land(d *delivery) {
	before := t.d.chk.snapshot(d.slots)
	close(d.gate)
	// Wait for the delivery's goroutine, without asking Quiesce (that answer
	// is the engine's to ask for): every write it makes lands now.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = t.mem.Drain(ctx, []contract.Attempt{d.inner})
	cancel()
	d.landed, d.landedAt = true, t.d.clk.since()
	t.d.chk.landed(d, before)
}

// tick lands every delivery due by now, in submission order.
func (t *transport) tick(now time.Duration) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	kept := t.pending[:0]
	for _, d := range t.pending {
		if !d.landed && d.releaseAt <= now {
			t.land(d)
		}
		if !d.landed {
			kept = append(kept, d)
		}
	}
	clear(t.pending[len(kept):])
	t.pending = kept
}

// landAll lands every delivery still held, so that no goroutine outlives the run.
func (t *transport) landAll() {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	for _, d := range t.pending {
		if !d.landed {
			t.land(d)
		}
	}
	t.pending = nil
}

// close closes the store's backend (and the checker's connection to it).
func (t *transport) close() error {
	if t.mem != nil {
		return t.mem.Close()
	}
	err := t.rds.Close()
	if cerr := t.check.Close(); err == nil {
		err = cerr
	}
	return err
}

// attempt wraps the backend's attempt so that the checker learns the first
// outcome the manager polled.
type attempt struct {
	t *transport
	d *delivery
}

// notifyingAttempt is an attempt whose backend notifies (contract.Notifier):
// backend/redis's. Over the in-process store the transport keeps every
// attempt polled, so that a run on the virtual clock stays as it was.
type notifyingAttempt struct{ attempt }

var _ contract.Notifier = (*notifyingAttempt)(nil)

// Notify implements contract.Notifier: f is called once the backend's Poll
// has the outcome; the driver is poked too.
func (a *notifyingAttempt) Notify(f func()) {
	a.d.inner.(contract.Notifier).Notify(func() {
		f()
		a.t.d.poke()
	})
}

// Poll implements contract.Attempt.
func (a *attempt) Poll() contract.Outcome {
	o := a.d.inner.Poll()
	if o != nil {
		a.t.d.mu.Lock()
		first := a.d.l.backend == nil
		if first {
			a.d.l.backend = o
		}
		a.t.d.mu.Unlock()
		if first && a.t.mem == nil {
			a.t.d.poke()
		}
	}
	return o
}
