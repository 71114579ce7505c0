package readiness

import (
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
)

// outcomeMsg is what the watcher saw: an answer, or a panic in Poll.
type outcomeMsg struct {
	h       Handle
	outcome contract.Outcome
	panic   string
}

// watcher polls submitted attempts on its own goroutine, so that the owner's
// round learns of outcomes in O(outcomes + 1), however many attempts are
// pending. It polls the attempts the owner marked as watched in the attempt
// table, and stops watching one once it found its outcome. A sweep reads the
// table's bitmap of watched ids (one bit per lease id the engine has used) and
// the watched slots, and the watcher sleeps longer the longer a sweep takes.
// It only observes:
// every decision is taken by the owner when it takes the outcomes out of the
// mailbox.
type watcher struct {
	table  *attemptTable
	signal chan struct{}           // capacity 1: "the table changed"
	syncs  *mailbox[chan struct{}] // closed after the next whole sweep
	out    *mailbox[outcomeMsg]
	stop   chan struct{}
	done   chan struct{}
	sweeps uint64 // owned by the watcher goroutine
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

func startWatcher(t *attemptTable) *watcher {
	w := &watcher{
		table: t, signal: make(chan struct{}, 1), syncs: newMailbox[chan struct{}](),
		out: newMailbox[outcomeMsg](), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go w.run()
	return w
}

// wake signals the watcher that the table changed.
func (w *watcher) wake() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *watcher) run() {
	defer close(w.done)
	var (
		polled []watchedAttempt
		found  []outcomeMsg
		syncs  []chan struct{}
	)
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	idle := 0
	for {
		syncs = w.syncs.take(syncs[:0])
		watched := w.table.watching()
		if watched == 0 && len(syncs) == 0 {
			select {
			case <-w.signal:
				continue
			case <-w.stop:
				return
			}
		}
		found = found[:0]
		// The sweep is timed only when the watcher is about to sleep: the
		// clock read is not free, and a busy watcher never sleeps.
		var start time.Time
		if idle >= spinRounds {
			start = time.Now()
		}
		for word, words := 0, 1; word < words && watched > 0; {
			polled, word, words = w.table.collect(polled[:0], word, sweepChunk)
			for _, it := range polled {
				if o, p := safePoll(it.a); o != nil || p != "" {
					found = append(found, outcomeMsg{h: it.h, outcome: o, panic: p})
				}
			}
			clear(polled)
		}
		var swept time.Duration
		if idle >= spinRounds {
			swept = time.Since(start)
		}
		w.sweeps++
		if len(found) > 0 {
			found = w.table.claim(found)
			w.out.put(found...)
			clear(found)
		}
		for _, s := range syncs {
			close(s)
		}
		clear(syncs)
		if len(found) > 0 || len(syncs) > 0 {
			idle = 0
			continue
		}
		idle++
		if idle <= spinRounds {
			select {
			case <-w.stop:
				return
			default:
			}
			continue
		}
		// Sleep longer the longer a sweep takes, so that polling a huge number
		// of pending attempts never takes more than a fraction of a core.
		d := min(minIdleSleep<<min(idle-spinRounds, 6), maxIdleSleep)
		d = min(max(d, 4*swept), maxSweepSleep)
		sleep.Reset(d)
		select {
		case <-w.signal:
		case <-sleep.C:
		case <-w.stop:
			sleep.Stop()
			return
		}
		sleep.Stop()
	}
}

// safePoll calls Poll, turning a panic into a reason: a misbehaving backend is
// contained, never allowed to crash the manager.
func safePoll(a contract.Attempt) (o contract.Outcome, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			o, panicked = nil, fmt.Sprintf("backend panicked in Poll: %v", r)
		}
	}()
	return a.Poll(), ""
}

func (w *watcher) close() {
	close(w.stop)
	<-w.done
}
