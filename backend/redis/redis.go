// Package redis is a shared, content-addressed backend over a Redis-compatible
// server: Redis 7, Valkey, a Sentinel-managed primary or a Redis Cluster. Many
// processes on many machines point their Backend at one store; each unit is one
// key holding exactly its slot_bytes.
//
// Backend implements contract.Fetcher, contract.Publisher and
// contract.PoolRegistrar over a go-redis UniversalClient (New), or over one it
// builds from a redis://, rediss:// or unix:// URL (Open). Its attempts are
// contract.Cancellable and contract.Notifier.
//
// How it keeps the contract:
//
//   - Every attempt is bounded (WithAttemptTimeout, from its submission): its
//     wait for a worker and a connection, dials, retries and network calls end
//     by then (the calls carry the attempt's deadline), and so does its access
//     to staging. Quiesce needs no answer from the server: it is true as soon
//     as the attempt's own goroutines can no longer touch staging, at the
//     latest just after the bound, whatever the server does.
//   - Every submission runs on its own attempt goroutine. The network calls run
//     on a bounded pool of worker goroutines (WithConcurrency), as pipelines of
//     up to WithBatch keys. Each GET's reply is streamed to a reader of the
//     backend's own, which checks the value's length against the staging row
//     from the reply's header, before a byte of the value arrives: only a value
//     of exactly the row's length lands, and a value of any other length is
//     read past. Over a client whose calls end at their context's deadline
//     (Open's, or one with ContextTimeoutEnabled) the workers read straight
//     into the staging rows, and Quiesce is true once those calls have
//     returned, at the latest just after the bound; a reply that comes later
//     finds the call gone. Over any other client they read into the backend's
//     scratch, which the attempt goroutine copies into staging, never after the
//     bound.
//   - A key that does not exist (never published, expired, evicted) is a miss.
//     A connection, timeout or server error, or a value of the wrong size, is
//     Failed. Delivered names only units read in full; unserved destinations
//     are never touched. A Failed fetch's rows are undefined: a value cut off
//     part way (a dropped connection, the bound) may have landed in part.
//   - A publication writes with SET NX (names are content addresses, so a value
//     never changes once written), with an optional TTL; over Open's own
//     publication client to one Redis server (INFO cluster said
//     cluster_enabled:0) and without a TTL, as one MSETNX a run of up to 16
//     names, a run that stored none (a name of it was stored) then SET NX a
//     name, as is a run the server refused (CROSSSLOT, NOPERM, an unknown
//     command), after which no MSETNX is sent. Over a client whose
//     calls end at their context's deadline (Open's, or one with
//     ContextTimeoutEnabled) the workers write straight from staging, and
//     Quiesce is true once those calls have returned (over a plain TCP or
//     Unix socket Open gives publications a client of their own that sends
//     each call's commands with one writev, the rows never copied; see
//     gather.go); over any other client
//     the attempt copies its rows into its own buffers first, and Quiesce is
//     true after that copy.
//   - RequestCancel stops an attempt from sending what it has not sent; a
//     direct fetch ends what it has out as far as the client lets it, a direct
//     publication's writes finish, and Quiesce waits for both; over any other
//     client what is on the wire finishes into the backend's buffers. The
//     outcome is Cancelled unless another came first.
//   - A store known down costs no time: a run of calls failing with a
//     connection error, or one call with no reply within its bound, opens a
//     breaker (WithBreaker). While it is open, submissions are refused at once with
//     an error wrapping contract.ErrSubmissionRejected and ErrUnavailable
//     (nothing escaped: an engine returns the slots at once; a failure, never
//     a miss), and the workers send nothing more; attempts already in flight
//     keep their bound. A PING on a backoff (WithBreakerProbe) closes it when
//     the store answers. Health and WithHealthFunc tell what happened.
//   - AdmissionLimit says how many attempts the backend serves at once without
//     queueing them behind each other, so that an engine can keep the rest
//     waiting before submission, where no deadline runs.
//
// See docs/backend-redis.md for deployment, sizing the attempt bound, the key
// layout and the Cluster hash-slot policy.
package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvready/kvready/backend/pools"
	"github.com/kvready/kvready/contract"
)

// Memory resolves a unit's local coordinates to its staging row, as the
// engine's staging does (conformance.Memory has the same shape). The returned
// slice is the row itself, not a copy; its length is the row's slot_bytes.
// Row is called on the goroutine that calls Fetch or Publish.
type Memory interface {
	Row(localGroup, local int) ([]byte, bool)
}

// ErrClosed is wrapped by the errors of calls made after Close (submissions
// wrap contract.ErrSubmissionRejected as well).
var ErrClosed = errors.New("redis: backend closed")

// Backend is the Redis backend. Create it with New or Open, end it with Close.
// Its methods are safe for concurrent use.
type Backend struct {
	client goredis.UniversalClient
	pub    *goredis.Client // Open's client for publications over a plain socket (gather.go); nil: client
	whole  bool            // publications without a TTL go as MSETNX a run of names (pub's server said cluster_enabled:0)
	// wholeRefused is set once the server refused an MSETNX (refused):
	// from then on every name goes as SET NX.
	wholeRefused atomic.Bool
	owned        bool
	mem          Memory
	set          settings
	direct       bool // fetches and publications lend staging to the workers: the client's calls end at their deadline
	admit        int  // AdmissionLimit
	procs        int  // GOMAXPROCS at New: how many calls a publication is split into

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

	brk breaker
	// onWire is, for each worker, when the call it has on the wire was sent
	// (UnixNano; 0: none), so that a submission can see a call past its
	// bound before the worker has reported it (hungOnWire).
	onWire  []atomic.Int64
	probing sync.WaitGroup // the breaker's probe goroutine, while it is open
}

var (
	_ contract.Fetcher       = (*Backend)(nil)
	_ contract.Publisher     = (*Backend)(nil)
	_ contract.PoolRegistrar = (*Backend)(nil)
	_ contract.QuiesceProber = (*Backend)(nil)
	_ contract.Cancellable   = (*attempt)(nil)
	_ contract.Notifier      = (*attempt)(nil)
)

// New returns a backend that stores units through client and resolves staging
// rows through mem. The client may be a single-server, Sentinel (failover) or
// Cluster client. The backend does not own it: Close leaves it open.
//
// The attempt bound reaches the network only if the client honours context
// deadlines (ContextTimeoutEnabled, and read and write timeouts that do not
// turn deadlines off); Open builds such a client. Over another client the
// backend stays safe — nothing touches staging after Quiesce answered true —
// but its calls may hold workers and connections past the bound.
func New(client goredis.UniversalClient, mem Memory, opts ...Option) (*Backend, error) {
	s, err := apply("New", opts)
	if err != nil {
		return nil, err
	}
	return newBackend(client, mem, s)
}

func newBackend(client goredis.UniversalClient, mem Memory, s settings) (*Backend, error) {
	if client == nil {
		return nil, errors.New("redis: New: client is nil; want a go-redis client (goredis.NewUniversalClient, or use Open with a URL)")
	}
	if mem == nil {
		return nil, errors.New("redis: New: Memory is nil; want the staging rows the backend reads and writes")
	}
	conns, bounded := clientShape(client)
	b := &Backend{
		client: client,
		mem:    mem,
		set:    s,
		direct: bounded,
		procs:  runtime.GOMAXPROCS(0),
		jobs:   make(chan *batch),
		brk:    breaker{threshold: s.breakAfter, first: s.probeFirst, most: s.probeMax, notify: s.onHealth},
	}
	calls := s.workers
	if conns > 0 {
		calls = min(calls, conns)
	}
	b.admit = max(1, calls/s.callsPerAttempt())
	b.bufs.keep = s.workers * s.batch // what the workers can have in flight at once
	b.ctx, b.stop = context.WithCancel(context.Background())
	b.workers.Add(s.workers)
	b.onWire = make([]atomic.Int64, s.workers)
	for w := range s.workers {
		go b.work(&b.onWire[w])
	}
	return b, nil
}

// clientShape reports, for the go-redis clients it knows, how many
// connections one node's pool holds and whether every call ends at its
// context's deadline; (0, false) for any other client.
func clientShape(c goredis.UniversalClient) (conns int, bounded bool) {
	switch c := c.(type) {
	case *goredis.Client: // a single server, or Sentinel's failover client
		o := c.Options()
		// After go-redis's defaults, a negative timeout means "set no socket
		// deadline", which would let a call outlive its context.
		return o.PoolSize, o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case *goredis.ClusterClient:
		o := c.Options() // its node clients get these timeouts, and read them alike
		return o.PoolSize, o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	}
	return 0, false
}

// AdmissionLimit is how many attempts the backend serves at once without
// queueing them behind each other inside itself: its workers (each runs one
// pipelined call at a time on one connection), at most the client's
// connections per node where the backend can see them, divided by the calls a
// typical attempt needs (WithUnitsPerAttempt, WithBatch). It is at least 1.
//
// An engine that keeps at most this many submissions outstanding, and holds
// the rest before submission, makes each attempt's bound and the request
// deadline measure the store's service rather than a queue. More attempts
// are accepted, and stay correct, but wait for a worker inside their bound.
func (b *Backend) AdmissionLimit() int { return b.admit }

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
			if b.pub != nil {
				b.cerr = errors.Join(b.cerr, b.pub.Close())
			}
		}
		b.workers.Wait()
		b.probing.Wait() // no worker can open the breaker any more
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
// a unit whose staging row cannot be resolved or is empty: those, a closed
// backend and a store known down (ErrUnavailable) are errors wrapping
// contract.ErrSubmissionRejected, with nothing touched.
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
// once. The workers write each row with SET NX (or MSETNX a run of names,
// see Backend's doc) — a unit already stored counts
// as published, since its name addresses the same content — straight from
// staging over a client whose calls end at their deadline (Quiesce answers
// true once those calls have returned), or from copies the attempt goroutine
// makes first over any other client (Quiesce answers true after the last
// copy). Rejections are as for Fetch.
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
	// tee is, for a FetchTee, a second buffer per unit (nil: none) that
	// every byte landing in the unit's row is written into too.
	tee [][]byte
}

func (b *Backend) plan(o op, ext contract.CacheExtent) (*plan, error) {
	b.life.RLock()
	closed := b.closed
	b.life.RUnlock()
	if closed {
		return nil, fmt.Errorf("redis: %s %q: %w: %w", o, ext.Name(), contract.ErrSubmissionRejected, ErrClosed)
	}
	if b.brk.open.Load() || b.hungOnWire() {
		return nil, fmt.Errorf("redis: %s %q: %w: %w", o, ext.Name(), contract.ErrSubmissionRejected, b.brk.refusal())
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
