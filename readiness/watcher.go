package readiness

import (
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
)

// watchItem asks the watcher to poll a lease's attempt, or, with a nil
// attempt, to stop polling it. One mailbox carries both, so they are applied
// in the order the owner sent them.
type watchItem struct {
	h Handle
	a contract.Attempt
}

// outcomeMsg is what the watcher saw: an answer, or a panic in Poll.
type outcomeMsg struct {
	h       Handle
	outcome contract.Outcome
	panic   string
}

// watcher polls submitted attempts on its own goroutine, so that the owner's
// round learns of outcomes in O(outcomes + 1), however many attempts are
// pending. It only observes: every decision is taken by the owner when it
// takes the outcomes out of the mailbox.
type watcher struct {
	in     *mailbox[watchItem]
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

func startWatcher() *watcher {
	w := &watcher{
		in: newMailbox[watchItem](), syncs: newMailbox[chan struct{}](),
		out: newMailbox[outcomeMsg](), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go w.run()
	return w
}

// wake signals the watcher that something was handed to it.
func (w *watcher) wake() {
	select {
	case w.in.signal <- struct{}{}:
	default:
	}
}

func (w *watcher) run() {
	defer close(w.done)
	var (
		pending []watchItem
		pos     []int32 // by lease id: index in pending, or -1
		cmds    []watchItem
		found   []outcomeMsg
		syncs   []chan struct{}
	)
	index := func(h Handle) int {
		if int(h.id) < len(pos) {
			if i := pos[h.id]; i >= 0 && pending[i].h == h {
				return int(i)
			}
		}
		return -1
	}
	remove := func(i int) {
		if pos[pending[i].h.id] == int32(i) {
			pos[pending[i].h.id] = -1
		}
		last := len(pending) - 1
		if i != last {
			pending[i] = pending[last]
			pos[pending[i].h.id] = int32(i)
		}
		pending[last] = watchItem{}
		pending = pending[:last]
	}
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	idle := 0
	for {
		syncs = w.syncs.take(syncs[:0])
		cmds = w.in.take(cmds[:0])
		for _, c := range cmds {
			if c.a == nil {
				if i := index(c.h); i >= 0 {
					remove(i)
				}
				continue
			}
			for len(pos) <= int(c.h.id) {
				pos = append(pos, -1)
			}
			pos[c.h.id] = int32(len(pending))
			pending = append(pending, c)
		}
		clear(cmds)
		if len(pending) == 0 && len(syncs) == 0 {
			select {
			case <-w.in.signal:
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
		for i := 0; i < len(pending); {
			it := pending[i]
			o, p := safePoll(it.a)
			if o == nil && p == "" {
				i++
				continue
			}
			found = append(found, outcomeMsg{h: it.h, outcome: o, panic: p})
			remove(i)
		}
		var swept time.Duration
		if idle >= spinRounds {
			swept = time.Since(start)
		}
		w.sweeps++
		if len(found) > 0 {
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
