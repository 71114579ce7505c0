package simulate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvready/kvready/backend/mem"
	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/backend/tiers"
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

// backend is what the managers submit to: backend/mem, backend/redis or a
// stack of them (backend/tiers).
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
	mem *mem.Backend     // the in-process store of a mem run, on the virtual clock; nil otherwise
	rds *kvredis.Backend // the Redis store, alone or as a stack's shared tier; nil without one
	// A stack of tiers: the backend, its tiers as parsed, and its in-process
	// tiers by position (nil where the tier is the Redis store).
	stack    *tiers.Backend
	specs    []TierSpec
	tierMems []*mem.Backend
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
	switch {
	case d.cfg.Tiered():
		return t, t.openTiers(ctx)
	case d.cfg.Redis():
		if err := t.openRedis(ctx, d.cfg.Backend); err != nil {
			return t, err
		}
		t.be = t.rds
		t.store = t.redisName(d.cfg.Backend)
		return t, nil
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

// redisName is how the summary names a Redis store: its URL, password
// redacted, and the key prefix.
func (t *transport) redisName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "redis"
	}
	return fmt.Sprintf("%s (prefix %q)", u.Redacted(), t.d.cfg.RedisPrefix)
}

// openRedis connects the backend and the checker's own client to the store.
// The backend's attempt bound is the request deadline: an attempt that has
// not answered by then ends, so Quiesce proves its access over within the
// drain grace of the deadline, even with the server gone or paused
// (docs/backend-redis.md: bound + scheduling margin ≤ deadline + grace).
func (t *transport) openRedis(ctx context.Context, raw string) error {
	cfg := t.d.cfg
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("simulate: backend: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	// One pipelined call per lease: the rows are small, round trips are what
	// costs.
	// The store's health goes where the caller wants it said (a line on
	// stderr), and to the metrics.
	t.rds, err = kvredis.Open(ctx, raw, t.d.mem, kvredis.WithPrefix(cfg.RedisPrefix),
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
		t.rds = nil
		return fmt.Errorf("simulate: backend (the checker's connection): %w", err)
	}
	return nil
}

// openTiers builds the stack Config.Backend names: each in-process tier a
// backend/mem over the run's staging (bounded in bytes if it says so), the
// Redis tier as openRedis opens a lone store, and backend/tiers over them.
// The stack's own wait (for a tier's outcome, and for a lower tier's proof
// before promoting) is twice the request deadline: longer than the Redis
// tier's attempt bound (the deadline), so that the tier's own answer, and
// the proof that follows it, come first; the stack's wait only backs up a
// tier that breaks its own bound.
func (t *transport) openTiers(ctx context.Context) error {
	cfg := t.d.cfg
	specs, err := ParseTiers(cfg.Backend)
	if err != nil {
		return fmt.Errorf("simulate: backend: %w", err)
	}
	t.specs, t.tierMems = specs, make([]*mem.Backend, len(specs))
	stack := make([]tiers.Tier, len(specs))
	names := make([]string, len(specs))
	for i, spec := range specs {
		var be backend
		if spec.URL != "" {
			if err := t.openRedis(ctx, spec.URL); err != nil {
				return errors.Join(err, t.close())
			}
			be, names[i] = t.rds, t.redisName(spec.URL)
		} else {
			var opts []mem.Option
			if spec.CapacityBytes > 0 {
				opts = append(opts, mem.WithCapacityBytes(spec.CapacityBytes))
			}
			m, err := mem.New(t.d.mem, opts...)
			if err != nil {
				return errors.Join(fmt.Errorf("simulate: backend: tier %d: %w", i, err), t.close())
			}
			t.tierMems[i], be, names[i] = m, m, spec.String()
		}
		stack[i] = tiers.Tier{Name: spec.Name, Fetcher: be, Publisher: be}
	}
	if t.stack, err = tiers.New(stack, tiers.WithWait(2*cfg.Deadline)); err != nil {
		return errors.Join(fmt.Errorf("simulate: backend: %w", err), t.close())
	}
	t.be = t.stack
	t.store = "tiers " + strings.Join(names, " in front of ")
	if cfg.Metrics != nil {
		stack := t.stack
		cfg.Metrics.WatchTiers(func() []metrics.TierStats {
			stats := stack.Stats()
			out := make([]metrics.TierStats, len(stats))
			for i, s := range stats {
				out[i] = metrics.TierStats(s)
			}
			return out
		})
	}
	return nil
}

// stored reads what the store holds for names, for the checker: values[i] is
// nil where it holds nothing. An error means the store could not be read
// (a Redis server gone away), never that it holds nothing.
func (t *transport) stored(names []contract.Name) ([][]byte, error) {
	if t.mem != nil {
		return memRows(t.mem, names), nil
	}
	if t.stack != nil && t.rds == nil {
		return memRows(t.tierMems[len(t.tierMems)-1], names), nil // the shared tier is in process
	}
	out := make([][]byte, len(names))
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

// memRows reads what an in-process store holds for names: values[i] is nil
// where it holds nothing.
func memRows(m *mem.Backend, names []contract.Name) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		if v, ok := m.Get(staging.ExtentName, n); ok {
			out[i] = v
		}
	}
	return out
}

// upperTiers returns a stack's in-process tiers above its shared one (the
// last): what promotions and publications wrote there is checked too.
func (t *transport) upperTiers() []*mem.Backend {
	var out []*mem.Backend
	for _, m := range t.tierMems[:max(len(t.tierMems)-1, 0)] {
		if m != nil {
			out = append(out, m)
		}
	}
	return out
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
// (how many attempts its workers and connections serve at once), or a
// stack's (its tiers' smallest), so that the engine holds the rest before
// submission, where no deadline runs. The in-process store has none: 0, no
// bound.
func (t *transport) AdmissionLimit() int {
	if t.stack != nil {
		return t.stack.AdmissionLimit()
	}
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

// close closes the store's backend (and the checker's connection to it); a
// stack first, then its tiers. It closes what was opened, so that a stack
// half built is undone too.
func (t *transport) close() error {
	if t.mem != nil {
		return t.mem.Close()
	}
	var errs []error
	if t.stack != nil {
		errs = append(errs, t.stack.Close())
	}
	for _, m := range t.tierMems {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	if t.rds != nil {
		errs = append(errs, t.rds.Close(), t.check.Close())
	}
	return errors.Join(errs...)
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
