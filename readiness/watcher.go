package readiness

import (
	"sync"
	"time"

	"github.com/kvready/kvready/gpu"
)

// watcher is the one goroutine that wakes an owner that sleeps: Poll and an
// event's Query never block and never notify, so without it an owner asleep
// on Wake could learn of an outcome or a landed copy only by polling. It
// polls the attempts that cannot notify (contract.Notifier) — the ones the
// owner marked watched in the attempt table — and the oldest copy event the
// owner's own round left pending, and wakes the owner when one answered. It
// carries no evidence: it names an attempt that answered, and the owner polls
// it itself; a landed copy it only signals, and the owner queries the event.
// A sweep costs O(ids/64 + watched); the watcher spins briefly and then
// sleeps longer the longer nothing changes, and longer the longer a sweep
// takes. It only observes: every decision is the owner's.
type watcher struct {
	table  *attemptTable
	stream gpu.Stream
	mail   *mailbox
	signal chan struct{} // capacity 1: "the table or the pending event changed"
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex
	event   gpu.Event // the oldest copy event the owner waits for (zero: none)
	told    gpu.Event // the event the watcher already woke the owner for
	syncs   []chan struct{}
	sweeps  uint64 // owned by the watcher goroutine
	started bool
}

// Back-off while nothing completes: spin politely first, then sleep, doubling
// up to maxIdleSleep, so an idle engine costs little CPU and a busy one reacts
// at once.
const (
	spinRounds   = 8
	minIdleSleep = 20 * time.Microsecond
	maxIdleSleep = time.Millisecond
	// maxSweepSleep bounds the wait between sweeps of a very long pending list
	// (and so the latency of noticing an outcome there).
	maxSweepSleep = 50 * time.Millisecond
)

// sweepChunk is about how many watched attempts the watcher copies out of the
// attempt table per hold of its lock: the owner, which takes the lock to keep
// and drop attempts, never waits for more than one chunk's copy.
const sweepChunk = 256

func newWatcher(t *attemptTable, stream gpu.Stream, mail *mailbox) *watcher {
	return &watcher{table: t, stream: stream, mail: mail,
		signal: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// kick starts the watcher's goroutine the first time it has something to
// watch, and wakes it: a hand-off. Owner only.
func (w *watcher) kick() {
	if !w.started {
		w.started = true
		w.table.shared = true // before the goroutine starts: the owner locks from now on
		go w.run()
	}
	w.mail.handoffs.Add(1)
	signal(w.signal)
}

// await tells the watcher the oldest copy event the owner waits for (the zero
// Event: none). Owner only.
func (w *watcher) await(ev gpu.Event) {
	w.mu.Lock()
	changed := w.event != ev
	w.event = ev
	w.mu.Unlock()
	if changed && !ev.IsZero() {
		w.kick()
	}
}

// sync returns a channel closed after the next whole sweep that begins after
// the call. Owner only.
func (w *watcher) sync() <-chan struct{} {
	done := make(chan struct{})
	w.mu.Lock()
	w.syncs = append(w.syncs, done)
	w.mu.Unlock()
	w.kick()
	return done
}

func (w *watcher) run() {
	defer close(w.done)
	var (
		polled []watchedAttempt
		found  []letter
		syncs  []chan struct{}
	)
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	idle := 0
	for {
		w.mu.Lock()
		syncs = append(syncs[:0], w.syncs...)
		clear(w.syncs)
		w.syncs = w.syncs[:0]
		ev, told := w.event, w.told
		w.mu.Unlock()
		watched := w.table.watching()
		waiting := !ev.IsZero() && ev != told
		if watched == 0 && !waiting && len(syncs) == 0 {
			select {
			case <-w.signal:
				continue
			case <-w.stop:
				return
			}
		}
		found = found[:0]
		var start time.Time
		if idle >= spinRounds {
			start = time.Now()
		}
		if watched > 0 {
			polled, found = w.sweep(polled, found)
		}
		landed := waiting && w.landed(ev)
		var swept time.Duration
		if idle >= spinRounds {
			swept = time.Since(start)
		}
		w.sweeps++
		if len(found) > 0 {
			found = w.table.claim(found)
			w.mail.put(found...)
			clear(found)
		}
		if landed {
			w.mail.wakeOwner()
		}
		for _, s := range syncs {
			close(s)
		}
		clear(syncs)
		if len(found) > 0 || landed || len(syncs) > 0 {
			idle = 0
			continue
		}
		idle++
		if w.rest(idle, swept, sleep) {
			return
		}
	}
}

// rest spins for the first idle rounds, then sleeps until signalled or for
// longer the longer the idle stretch and the last sweep took, so that
// polling a huge number of pending attempts never takes more than a fraction
// of a core. It reports whether the watcher was stopped.
func (w *watcher) rest(idle int, swept time.Duration, sleep *time.Timer) (stopped bool) {
	if idle <= spinRounds {
		select {
		case <-w.stop:
			return true
		default:
			return false
		}
	}
	d := min(minIdleSleep<<min(idle-spinRounds, 6), maxIdleSleep)
	d = min(max(d, 4*swept), maxSweepSleep)
	sleep.Reset(d)
	defer sleep.Stop()
	select {
	case <-w.signal:
	case <-sleep.C:
	case <-w.stop:
		return true
	}
	return false
}

// sweep polls every watched attempt once, in chunks, and adds a sighting to
// found for each that answered. The answer seen goes with the sighting: it is
// the first the engine saw. A panic is an answer too: the owner polls it
// again and finds the violation itself.
func (w *watcher) sweep(polled []watchedAttempt, found []letter) ([]watchedAttempt, []letter) {
	for word, words := 0, 1; word < words; {
		polled, word, words = w.table.collect(polled[:0], word, sweepChunk)
		for _, it := range polled {
			if o, p := safePoll(it.a); o != nil || p != "" {
				found = append(found, letter{ev: Evidence{Lease: Handle{id: it.id}, Outcome: o}, poll: true, sighted: true})
			}
		}
		clear(polled)
	}
	return polled, found
}

// landed reports whether the copy event the owner waits on is no longer
// pending (landed, failed, or unreadable: the owner finds out which), and
// remembers it as told.
func (w *watcher) landed(ev gpu.Event) bool {
	if st, err := w.stream.Query(ev); err == nil && st == gpu.Pending {
		return false
	}
	w.mu.Lock()
	w.told = ev
	w.mu.Unlock()
	return true
}

func (w *watcher) close() {
	if !w.started {
		return
	}
	close(w.stop)
	<-w.done
}
