package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ErrUnavailable is wrapped by the errors of submissions and Probe calls
// refused at once because the store is known down (the breaker is open), and
// by the failures of batches not sent for that reason. A submission refused
// so wraps contract.ErrSubmissionRejected too: nothing escaped, so an engine
// returns its slots at once. It is a failure, never a miss: the store could
// not be asked.
var ErrUnavailable = errors.New("store unavailable")

// Health is what the backend knows of the store's availability (Health).
type Health struct {
	// Reachable is false while the breaker holds the store for down: new
	// submissions are refused at once until a PING answers.
	Reachable bool
	// Since is when the current outage began (zero while reachable).
	Since time.Time
	// Reason says what opened the breaker ("" while reachable).
	Reason string
	// Outages counts the times the breaker opened.
	Outages int
	// Unavailable is how long the breaker has been open in all, the current
	// outage included.
	Unavailable time.Duration
	// FastFailures counts the submissions and Probe calls refused at once
	// while the breaker was open.
	FastFailures uint64
}

// HealthChange is what a WithHealthFunc callback is told: the store went
// down (Reachable false, with the Reason) or came back (Reachable true, Down
// the length of the outage).
type HealthChange struct {
	Reachable bool
	At        time.Time
	Reason    string
	Down      time.Duration
}

// breaker is the backend's knowledge of the store's health. The workers
// report each call they sent (observe); one call with no reply within most
// of its bound, or a run of calls that failed with a connection error,
// opens it; while it is open submissions are refused at once and the workers
// send nothing; a probe goroutine PINGs the store on a backoff and closes it
// when the store answers. Only the probe closes it.
//
// Why one unanswered call is enough: a call that waited half its bound (and
// hungFloor) with nothing else answered meanwhile is a store silent for that
// long, however many calls shared the silence. Counting calls made a manager
// that sends one request at a time wait threshold bounds before it learnt
// what one bound had shown; if the store was only slow, the probe's first
// PING (DefaultBreakerProbe later) closes the breaker again. Connection
// errors cost microseconds each, so for them the run of threshold calls
// stays: one stray reset does not fail every request until the next PING.
type breaker struct {
	threshold   int // connection errors in a row that open it; 0: never open
	first, most time.Duration
	notify      func(HealthChange)

	open     atomic.Bool // read on every submission and call: no lock
	fast     atomic.Uint64
	answered atomic.Int64 // when a call last got an answer (UnixNano)

	mu      sync.Mutex
	run     int // failed calls in a row
	since   time.Time
	reason  string
	outages int
	down    time.Duration // of the outages that ended

	// say orders the notifications: an outage's "down" before its "up", and
	// an "up" before the next outage's "down". A probe goroutine takes it
	// before it closes the breaker, so the next outage's goroutine, which
	// can only start after the close, waits for the "up" to be told.
	say sync.Mutex
}

// health of the store, for Backend.Health.
func (br *breaker) health() Health {
	br.mu.Lock()
	defer br.mu.Unlock()
	h := Health{Reachable: !br.open.Load(), Outages: br.outages, Unavailable: br.down, FastFailures: br.fast.Load()}
	if !h.Reachable {
		h.Since, h.Reason = br.since, br.reason
		h.Unavailable += time.Since(br.since)
	}
	return h
}

// refusal is the error of something refused while the breaker is open, and
// counts it.
func (br *breaker) refusal() error {
	br.fast.Add(1)
	br.mu.Lock()
	since, reason := br.since, br.reason
	br.mu.Unlock()
	return fmt.Errorf("%w since %s (%s); probing it with PING", ErrUnavailable, since.Format("15:04:05.000"), reason)
}

// verdict is what one call says of the store's health.
type verdict int

const (
	silent      verdict = iota // nothing: cancelled, closed, never sent, or an error of ours
	answered                   // the store replied (a value, a miss, or a server error)
	unreachable                // a connection error, or no reply within the call's bound
)

// hungFloor is the shortest wait without a reply that can show a store
// hung: a call that timed out sooner had a bound too tight for the store's
// latency (or the machine's load), and costs its request no more than that.
const hungFloor = 100 * time.Millisecond

// judge classifies a call's error. took is how long the call was out, of
// its bound: a deadline counts as no reply only if the call had most of its
// bound, and at least hungFloor, on the wire — not if it was picked up just
// before the deadline.
func judge(err error, took, bound time.Duration) verdict {
	switch {
	case err == nil, errors.Is(err, goredis.Nil):
		return answered
	case errors.Is(err, context.Canceled), errors.Is(err, errCancelled), errors.Is(err, ErrUnavailable),
		errors.Is(err, goredis.ErrClosed), errors.Is(err, goredis.ErrPoolTimeout):
		return silent
	}
	var nerr net.Error
	if timedOut(err) {
		if took >= max(bound/2, hungFloor) {
			return unreachable
		}
		return silent
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		return answered
	}
	if errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return unreachable
	}
	return silent
}

// timedOut reports whether err is a deadline: the call's context's, or its
// socket's.
func timedOut(err error) bool {
	var nerr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout())
}

// hungOnWire reports whether the breaker is open, opening it first if a call
// is on the wire past its whole bound (and hungFloor) with nothing answered
// since it was sent: what its worker will report when the call returns, seen
// by the next submission instead. A manager that submits its next request the
// moment the last one's deadline passed would otherwise race the worker's
// report and send it to a store already shown silent for a whole bound.
func (b *Backend) hungOnWire() bool {
	br := &b.brk
	if br.threshold == 0 {
		return false
	}
	now := time.Now().UnixNano()
	wait := int64(max(b.set.timeout, hungFloor))
	for i := range b.onWire {
		if sent := b.onWire[i].Load(); sent != 0 && now-sent >= wait && br.answered.Load() < sent {
			b.observe(unreachable, context.DeadlineExceeded, time.Unix(0, sent))
		}
	}
	return br.open.Load()
}

// observe takes the verdict of one call, sent at sent: a reply ends a run
// of connection errors, and the threshold-th in a row opens the breaker; a
// call with no reply within its bound opens it on its own. Such a call
// counts only if the store answered no call since it was sent: one that
// answers others meanwhile is slow or loaded, not down, and its calls fail
// on their own. Opening starts the probe.
func (b *Backend) observe(v verdict, err error, sent time.Time) {
	br := &b.brk
	if br.threshold == 0 || v == silent {
		return
	}
	if v == answered {
		br.answered.Store(time.Now().UnixNano())
	}
	if br.open.Load() {
		return
	}
	hung := v == unreachable && timedOut(err)
	if hung && br.answered.Load() > sent.UnixNano() {
		return
	}
	br.mu.Lock()
	if v == answered {
		br.run = 0
		br.mu.Unlock()
		return
	}
	br.run++
	if (!hung && br.run < br.threshold) || br.open.Load() || b.ctx.Err() != nil {
		br.mu.Unlock()
		return
	}
	br.since = time.Now()
	if hung {
		br.reason = fmt.Sprintf("a call had no reply within the attempt bound (%v)", b.set.timeout)
	} else {
		br.reason = fmt.Sprintf("%d calls in a row failed, the last with %s", br.run, err.Error())
	}
	br.outages++
	br.open.Store(true)
	b.probing.Add(1) // before Close waits for it: Close waits for the workers first
	br.mu.Unlock()
	go b.probe()
}

// probe tells the outage, then PINGs the store on a backoff (each PING
// bounded by the attempt bound) until it answers, closes the breaker and
// tells the recovery. It ends early when the backend closes.
func (b *Backend) probe() {
	defer b.probing.Done()
	br := &b.brk
	br.say.Lock()
	if br.notify != nil {
		br.mu.Lock()
		c := HealthChange{At: br.since, Reason: br.reason}
		br.mu.Unlock()
		br.notify(c)
	}
	br.say.Unlock()
	wait := br.first
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, b.set.timeout)
		err := b.client.Ping(ctx).Err()
		cancel()
		if err == nil && b.ctx.Err() == nil {
			break
		}
		wait = min(2*wait, br.most)
		t.Reset(wait)
	}
	br.say.Lock()
	defer br.say.Unlock()
	br.mu.Lock()
	now := time.Now()
	down := now.Sub(br.since)
	br.down += down
	br.run, br.since, br.reason = 0, time.Time{}, ""
	br.open.Store(false)
	br.mu.Unlock()
	if br.notify != nil {
		br.notify(HealthChange{Reachable: true, At: now, Down: down})
	}
}

// Health reports what the backend knows of the store's availability: whether
// it is reachable now (the breaker closed), the outages so far and their
// length, and the submissions refused at once meanwhile. It never asks the
// store.
func (b *Backend) Health() Health { return b.brk.health() }
