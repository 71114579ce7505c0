// Package redis is a shared, content-addressed backend over a Redis-compatible
// server: Redis 7, Valkey, a Sentinel-managed primary or a Redis Cluster. Many
// processes on many machines point their Backend at one store; each unit is one
// key holding exactly its slot_bytes.
//
// Backend implements contract.Fetcher, contract.Publisher and
// contract.PoolRegistrar over a go-redis UniversalClient (New), or over one it
// builds from a redis://, rediss:// or unix:// URL (Open).
//
// How it keeps the contract:
//
//   - Every submission runs on its own attempt goroutine. The network calls run
//     on a bounded pool of worker goroutines (WithConcurrency), as pipelines of
//     up to WithBatch keys, and read into the backend's own scratch buffers.
//     Only the attempt goroutine copies into staging, and only values whose
//     length is exactly the staging row's: a timed-out call can never write
//     staging later, because the goroutine that would copy has already gone.
//   - A key that does not exist (never published, expired, evicted) is a miss.
//     A connection, timeout or server error, or a value of the wrong size, is
//     Failed. Delivered names only units copied in full; unserved destinations
//     are never touched.
//   - A publication copies its staging rows into its own buffers first, then
//     writes them with SET NX (names are content addresses, so a value never
//     changes once written), with an optional TTL.
//   - Quiesce answers true once the attempt goroutine can no longer touch
//     staging: after the last copy for a fetch, after the snapshot for a
//     publication. It waits for that honouring ctx; a cancelled ctx is an
//     error, never true.
//
// See docs/backend-redis.md for deployment, the key layout and the Cluster
// hash-slot policy.
package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvready/kvready/backend/pools"
	"github.com/kvready/kvready/contract"
)

// Memory resolves a unit's local coordinates to its staging row, as the
// engine's staging does (proptest.Memory has the same shape). The returned
// slice is the row itself, not a copy; its length is the row's slot_bytes.
// Row is called on the goroutine that calls Fetch or Publish.
type Memory interface {
	Row(localGroup, local int) ([]byte, bool)
}

// ErrClosed is wrapped by the errors of calls made after Close (submissions
// wrap contract.ErrSubmissionRejected as well).
var ErrClosed = errors.New("redis: backend closed")

// Defaults of the options.
const (
	// DefaultTimeout bounds each fetch, publication and probe.
	DefaultTimeout = 10 * time.Second
	// DefaultConcurrency is the number of worker goroutines making network calls.
	DefaultConcurrency = 8
	// DefaultBatch is the number of keys in one pipelined network call.
	DefaultBatch = 8
)

type settings struct {
	prefix  string
	policy  SlotPolicy
	ttl     time.Duration
	timeout time.Duration
	workers int
	batch   int
	noProbe bool
}

// Option configures a Backend.
type Option func(*settings) error

// WithPrefix sets the key prefix (default DefaultPrefix). Two deployments with
// different prefixes share a server without seeing each other's units. The
// prefix may not contain '{' or '}', which would take over the Cluster hash tag.
func WithPrefix(prefix string) Option {
	return func(s *settings) error {
		if err := checkPrefix(prefix); err != nil {
			return fmt.Errorf("WithPrefix: %w", err)
		}
		s.prefix = prefix
		return nil
	}
}

// WithSlotPolicy sets how keys map to Cluster hash slots (default SlotPerBlock).
// Every process sharing a store must use the same policy, or they will not
// find each other's units.
func WithSlotPolicy(p SlotPolicy) Option {
	return func(s *settings) error {
		if p != SlotPerBlock && p != SlotPerUnit {
			return fmt.Errorf("WithSlotPolicy(%d): want SlotPerBlock or SlotPerUnit", int(p))
		}
		s.policy = p
		return nil
	}
}

// WithTTL makes publications expire after ttl (default 0: never; the server's
// eviction policy then decides). A unit that already exists keeps its own
// expiry: SET NX does not write it again. ttl is rounded down to milliseconds.
func WithTTL(ttl time.Duration) Option {
	return func(s *settings) error {
		if ttl != 0 && ttl < time.Millisecond {
			return fmt.Errorf("WithTTL(%v): want 0 (no expiry) or at least 1ms", ttl)
		}
		s.ttl = ttl.Truncate(time.Millisecond)
		return nil
	}
}

// WithTimeout bounds each fetch, publication and probe (default
// DefaultTimeout). A submission with no answer by then reports Failed and its
// attempt goroutine ends, so Quiesce can answer true even while a network
// call is still outstanding: that call writes only into the backend's own
// buffers. A client built by Open also ends the network call at that
// deadline; a client given to New does so only if its ContextTimeoutEnabled
// is set (otherwise its ReadTimeout bounds it).
func WithTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("WithTimeout(%v): want a positive duration", d)
		}
		s.timeout = d
		return nil
	}
}

// WithConcurrency sets how many worker goroutines make network calls (default
// DefaultConcurrency), shared by every submission of the backend. Each holds
// at most one connection of the client's pipeline pool at a time.
func WithConcurrency(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("WithConcurrency(%d): want 1 to 1024 workers", n)
		}
		s.workers = n
		return nil
	}
}

// WithBatch sets how many keys one pipelined network call carries (default
// DefaultBatch). A submission of more units is split into several calls,
// which the workers run in parallel.
func WithBatch(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > 1<<16 {
			return fmt.Errorf("WithBatch(%d): want 1 to 65536 keys", n)
		}
		s.batch = n
		return nil
	}
}

// WithoutProbe makes Probe answer "cannot answer cheaply" (answered false, no
// error) instead of asking the server: for deployments where a probe's round
// trip costs about as much as the fetch it would save.
func WithoutProbe() Option {
	return func(s *settings) error { s.noProbe = true; return nil }
}

// Backend is the Redis backend. Create it with New or Open, end it with Close.
// Its methods are safe for concurrent use.
type Backend struct {
	client goredis.UniversalClient
	owned  bool
	mem    Memory
	set    settings

	ctx  context.Context // cancelled by Close
	stop context.CancelFunc
	jobs chan *batch
	bufs bufPool

	life    sync.RWMutex // guards closed against attempts starting during Close
	closed  bool
	running sync.WaitGroup // attempt goroutines
	workers sync.WaitGroup
	once    sync.Once
	cerr    error

	pools pools.Registry // locks itself
}

var (
	_ contract.Fetcher       = (*Backend)(nil)
	_ contract.Publisher     = (*Backend)(nil)
	_ contract.PoolRegistrar = (*Backend)(nil)
)

// New returns a backend that stores units through client and resolves staging
// rows through mem. The client may be a single-server, Sentinel (failover) or
// Cluster client. The backend does not own it: Close leaves it open.
func New(client goredis.UniversalClient, mem Memory, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, errors.New("redis: New: client is nil; want a go-redis client (goredis.NewUniversalClient, or use Open with a URL)")
	}
	if mem == nil {
		return nil, errors.New("redis: New: Memory is nil; want the staging rows the backend reads and writes")
	}
	s := settings{
		prefix:  DefaultPrefix,
		timeout: DefaultTimeout,
		workers: DefaultConcurrency,
		batch:   DefaultBatch,
	}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("option %d is nil", i))
			continue
		}
		if err := o(&s); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("redis: New: %w", errors.Join(errs...))
	}
	b := &Backend{
		client: client,
		mem:    mem,
		set:    s,
		jobs:   make(chan *batch),
	}
	b.ctx, b.stop = context.WithCancel(context.Background())
	b.workers.Add(s.workers)
	for range s.workers {
		go b.work()
	}
	return b, nil
}

// Client returns the go-redis client the backend uses.
func (b *Backend) Client() goredis.UniversalClient { return b.client }

// Key returns the Redis key of the unit name under the extent name: the
// prefix, a hash tag chosen by the slot policy, the extent name, "/" and the
// 54 raw name bytes (see docs/backend-redis.md).
func (b *Backend) Key(extent string, name contract.Name) string {
	return string(appendKey(nil, b.set.prefix, b.set.policy, extent, &name))
}

// Close ends the backend. Submissions still in flight report Failed("backend
// closed") and their attempt goroutines end; the workers end once their
// current network call returns. Close returns when every goroutine of the
// backend has ended, then closes the client if Open built it. Later
// submissions are rejected; Quiesce and Settle keep answering for the
// attempts already made. Close is idempotent.
func (b *Backend) Close() error {
	b.once.Do(func() {
		b.life.Lock()
		b.closed = true
		b.life.Unlock()
		b.stop()
		b.running.Wait()
		if b.owned {
			b.cerr = b.client.Close()
		}
		b.workers.Wait()
	})
	return b.cerr
}

// Put stores value under (extent, name), overwriting what is there, with the
// backend's TTL: how a test or a warm-up tool seeds the store. Publications
// use Publish.
func (b *Backend) Put(ctx context.Context, extent string, name contract.Name, value []byte) error {
	if err := b.usable(ctx, "Put"); err != nil {
		return err
	}
	if err := b.client.Set(ctx, b.Key(extent, name), value, b.set.ttl).Err(); err != nil {
		return fmt.Errorf("redis: Put %q %s: %w", extent, short(name), err)
	}
	return nil
}

// Get returns a copy of the value stored under (extent, name); ok is false
// when there is none. An error is a transport or server failure, never a
// missing key.
func (b *Backend) Get(ctx context.Context, extent string, name contract.Name) (value []byte, ok bool, err error) {
	if err := b.usable(ctx, "Get"); err != nil {
		return nil, false, err
	}
	v, err := b.client.Get(ctx, b.Key(extent, name)).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("redis: Get %q %s: %w", extent, short(name), err)
	}
	return append([]byte(nil), v...), true, nil
}

func (b *Backend) usable(ctx context.Context, method string) error {
	if ctx == nil {
		return fmt.Errorf("redis: %s: ctx is nil", method)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: %s: %w", method, err)
	}
	b.life.RLock()
	closed := b.closed
	b.life.RUnlock()
	if closed {
		return fmt.Errorf("redis: %s: %w", method, ErrClosed)
	}
	return nil
}

// Fetch submits a fetch of the extent's units into their staging rows and
// returns at once. A route is refused (the store is the only source), as is
// a unit whose staging row cannot be resolved or is empty: those, and a
// closed backend, are errors wrapping contract.ErrSubmissionRejected, with
// nothing touched.
func (b *Backend) Fetch(extent contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	if route != nil {
		return nil, fmt.Errorf("redis: Fetch %q: %w: a route was given, but this single-source backend opens none", extent.Name(), contract.ErrSubmissionRejected)
	}
	p, err := b.plan(opFetch, extent)
	if err != nil {
		return nil, err
	}
	return b.start(p)
}

// Publish submits a publication of the extent's staging rows and returns at
// once. The attempt goroutine copies the rows into the backend's own buffers
// (after which Quiesce answers true), then writes each with SET NX: a unit
// already stored counts as published, since its name addresses the same
// content. Rejections are as for Fetch.
func (b *Backend) Publish(extent contract.CacheExtent) (contract.Attempt, error) {
	p, err := b.plan(opPublish, extent)
	if err != nil {
		return nil, err
	}
	return b.start(p)
}

type op int

const (
	opFetch op = iota
	opPublish
)

func (o op) String() string {
	if o == opPublish {
		return "Publish"
	}
	return "Fetch"
}

// plan is what an attempt needs from its extent, resolved at submission: the
// backend keeps no CacheExtent.
type plan struct {
	op     op
	extent string
	names  []contract.Name
	rows   [][]byte
	keys   []string
}

func (b *Backend) plan(o op, ext contract.CacheExtent) (*plan, error) {
	b.life.RLock()
	closed := b.closed
	b.life.RUnlock()
	if closed {
		return nil, fmt.Errorf("redis: %s %q: %w: %w", o, ext.Name(), contract.ErrSubmissionRejected, ErrClosed)
	}
	n := ext.Len()
	p := &plan{op: o, extent: ext.Name(), names: make([]contract.Name, n), rows: make([][]byte, n), keys: make([]string, n)}
	for i, u := range ext.All() {
		row, ok := b.mem.Row(u.LocalGroup, u.Local)
		if !ok {
			return nil, fmt.Errorf("redis: %s %q: %w: unit %d (%s) has no staging row at (local_group %d, local %d)",
				o, p.extent, contract.ErrSubmissionRejected, i, short(u.Name), u.LocalGroup, u.Local)
		}
		if len(row) == 0 {
			return nil, fmt.Errorf("redis: %s %q: %w: unit %d (%s): the staging row at (local_group %d, local %d) is empty",
				o, p.extent, contract.ErrSubmissionRejected, i, short(u.Name), u.LocalGroup, u.Local)
		}
		p.names[i], p.rows[i] = u.Name, row
	}
	// The keys are substrings of one string: one allocation for them all.
	keyLen := len(b.set.prefix) + 1 + tagDigits + 1 + len(p.extent) + 1 + contract.NameSize
	slab := make([]byte, 0, n*keyLen)
	for i := range p.names {
		slab = appendKey(slab, b.set.prefix, b.set.policy, p.extent, &p.names[i])
	}
	all := string(slab)
	for i := range p.keys {
		p.keys[i] = all[i*keyLen : (i+1)*keyLen]
	}
	return p, nil
}

func (b *Backend) start(p *plan) (contract.Attempt, error) {
	a := &attempt{b: b, ready: make(chan struct{}), released: make(chan struct{})}
	if len(p.rows) == 0 {
		close(a.released)
		a.settle(contract.Delivered{})
		return a, nil
	}
	b.life.RLock()
	if b.closed {
		b.life.RUnlock()
		return nil, fmt.Errorf("redis: %s %q: %w: %w", p.op, p.extent, contract.ErrSubmissionRejected, ErrClosed)
	}
	b.running.Add(1)
	b.life.RUnlock()
	go a.run(p)
	return a, nil
}

// attempt is one submission. Its goroutine sets the outcome once (ready) and
// closes released once it will never touch staging again.
type attempt struct {
	b        *Backend
	out      atomic.Pointer[outcomeBox]
	ready    chan struct{}
	released chan struct{}
}

type outcomeBox struct{ o contract.Outcome }

// Poll returns the outcome, or nil while the submission is in flight. It never
// blocks, and once it has returned an outcome it returns the same one for ever.
func (a *attempt) Poll() contract.Outcome {
	if box := a.out.Load(); box != nil {
		return box.o
	}
	return nil
}

func (a *attempt) settle(o contract.Outcome) {
	a.out.Store(&outcomeBox{o})
	close(a.ready)
}

// run is the attempt goroutine: it hands batches to the workers, takes their
// results back and, for a fetch, copies them into staging itself. A
// publication copies each batch's rows into the backend's own buffers just
// before handing it over, so the copy overlaps the earlier batches' writes.
func (a *attempt) run(p *plan) {
	b := a.b
	defer b.running.Done()
	ctx, cancel := context.WithTimeout(b.ctx, b.set.timeout)
	defer cancel() // also ends the workers' calls for this attempt that are still out
	released := false
	release := func() { // from here on this goroutine never touches staging
		if !released {
			released = true
			p.rows = nil
			close(a.released)
		}
	}
	defer release()

	batches := b.split(ctx, p)
	results := make(chan *batch, len(batches)) // workers never block handing results back
	for _, j := range batches {
		j.done = results
	}
	served := make([]contract.Name, 0, len(p.names))
	var failure string
	next, out, staged := 0, 0, 0
	for failure == "" && (next < len(batches) || out > 0) {
		var jobs chan *batch
		var j *batch
		if next < len(batches) {
			jobs, j = b.jobs, batches[next]
			if p.op == opPublish && staged == next {
				for i := range j.keys {
					row := p.rows[j.unit(i)]
					j.bufs[i] = b.bufs.get(len(row))
					copy(j.bufs[i], row)
				}
				if staged++; staged == len(batches) {
					release()
				}
			}
		}
		select {
		case jobs <- j:
			next++
			out++
		case r := <-results:
			out--
			if failure = a.take(p, r, &served); failure != "" && ctx.Err() != nil {
				failure = a.ended() // the call failed because the attempt's time was up
			}
		case <-ctx.Done():
			failure = a.ended()
		}
	}
	release()
	if failure != "" {
		a.settle(contract.Failed{Reason: failure})
		return
	}
	a.settle(contract.Delivered{Served: contract.NewNameSet(served...)})
}

// ended is the reason of an attempt whose context ended.
func (a *attempt) ended() string {
	if a.b.ctx.Err() != nil {
		return "backend closed before the store answered"
	}
	return fmt.Sprintf("timeout: the store did not answer within %v", a.b.set.timeout)
}

// take applies one batch's results. For a fetch it copies every value of the
// right size into its staging row, in this goroutine; it returns the reason
// of the first failure, or "".
func (a *attempt) take(p *plan, r *batch, served *[]contract.Name) string {
	for i := range r.keys {
		u, err := r.unit(i), r.errs[i]
		switch {
		case err == nil && p.op == opPublish:
			*served = append(*served, p.names[u])
		case err == nil:
			row := p.rows[u]
			if n := r.n[i]; n != len(row) {
				return fmt.Sprintf("unit %d (%s): the store holds %d bytes, the staging row has %d (slot_bytes); not copied", u, short(p.names[u]), n, len(row))
			}
			copy(row, r.bufs[i])
			*served = append(*served, p.names[u])
		case p.op == opFetch && errors.Is(err, goredis.Nil):
			// a miss: never published, expired or evicted
		case p.op == opFetch && strings.Contains(err.Error(), "buffer too small"):
			// go-redis reads into a buffer of slot_bytes+2 and refuses a
			// longer value (draining it, so the connection stays usable),
			// failing every command of the pipeline: which unit it was is
			// lost, so the reason names the batch.
			return fmt.Sprintf("units %d to %d: the store holds a value longer than %d bytes, the staging row has %d (slot_bytes); nothing of these copied (%v)",
				r.lo, r.lo+len(r.keys)-1, len(r.bufs[i]), len(p.rows[u]), err)
		default:
			return fmt.Sprintf("unit %d (%s): %v", u, short(p.names[u]), err)
		}
		a.b.bufs.put(r.bufs[i])
		r.bufs[i] = nil
	}
	return ""
}

// short abbreviates a name for messages.
func short(n contract.Name) string { return n.String()[:16] + "…" }
