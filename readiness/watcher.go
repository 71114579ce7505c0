package readiness

import (
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
)

// ref names a lease at one generation. Evidence carries a ref so that evidence
// about a lease that has since been released and re-lent is recognised as stale.
type ref struct {
	id, gen uint32
}

type watchItem struct {
	ref
	attempt contract.Attempt
}

// outcomeMsg is what the watcher saw: an outcome, or a panic in Poll.
type outcomeMsg struct {
	ref
	outcome contract.Outcome
	panic   string
}

// watcher polls submitted attempts on its own goroutine, so that the owner's
// progress round learns of outcomes in O(outcomes + 1), however many attempts
// are pending. It only observes: every decision is taken by the owner when it
// takes the outcomes out of the mailbox.
type watcher struct {
	in   *mailbox[watchItem]
	out  *mailbox[outcomeMsg]
	stop chan struct{}
	done chan struct{}
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

func startWatcher() *watcher {
	w := &watcher{in: newMailbox[watchItem](), out: newMailbox[outcomeMsg](), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *watcher) run() {
	defer close(w.done)
	var pending []watchItem
	var found []outcomeMsg
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	idle := 0
	for {
		pending = w.in.take(pending)
		if len(pending) == 0 {
			select {
			case <-w.in.signal:
				continue
			case <-w.stop:
				return
			}
		}
		found = found[:0]
		start := time.Now()
		for i := 0; i < len(pending); {
			it := pending[i]
			o, p := safePoll(it.attempt)
			if o == nil && p == "" {
				i++
				continue
			}
			found = append(found, outcomeMsg{ref: it.ref, outcome: o, panic: p})
			last := len(pending) - 1
			pending[i] = pending[last]
			pending[last] = watchItem{}
			pending = pending[:last]
		}
		swept := time.Since(start)
		if len(found) > 0 {
			w.out.put(found...)
			clear(found)
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
		case <-w.in.signal:
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
