package readiness

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/contract"
)

// lateAttempt answers nothing until the test resolves it, from another
// goroutine than the watcher's.
type lateAttempt struct {
	mu      sync.Mutex
	outcome contract.Outcome
}

func (a *lateAttempt) Poll() contract.Outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outcome
}

func (a *lateAttempt) resolve(o contract.Outcome) {
	a.mu.Lock()
	a.outcome = o
	a.mu.Unlock()
}

func TestAttemptTable(t *testing.T) {
	a, b := &lateAttempt{}, &lateAttempt{}
	h := handleAt(2, 7)
	stale := handleAt(2, 6)
	for _, tc := range []struct {
		name         string
		do           func(*attemptTable)
		held         contract.Attempt // what get(h) returns, nil for none
		watched      int
		kind         Kind
		claimed      int // of one outcome for h and one for stale
		collectedIDs []uint32
	}{
		{name: "kept attempts are watched", do: func(t *attemptTable) { t.keep(h, Publish, a, true) },
			held: a, watched: 1, kind: Publish, claimed: 1, collectedIDs: []uint32{2}},
		{name: "unwatch keeps the attempt, stops the polling", do: func(t *attemptTable) { t.keep(h, Fetch, a, true); t.unwatch(h) },
			held: a, watched: 0, kind: Fetch},
		{name: "drop forgets the attempt", do: func(t *attemptTable) { t.keep(h, Fetch, a, true); t.drop(h) },
			watched: 0},
		{name: "a stale handle changes nothing", do: func(t *attemptTable) { t.keep(h, Fetch, a, true); t.drop(stale); t.unwatch(stale) },
			held: a, watched: 1, kind: Fetch, claimed: 1, collectedIDs: []uint32{2}},
		{name: "a new generation replaces the old", do: func(t *attemptTable) {
			t.keep(stale, Fetch, b, true)
			t.drop(stale)
			t.keep(h, Fetch, a, true)
		}, held: a, watched: 1, kind: Fetch, claimed: 1, collectedIDs: []uint32{2}},
		{name: "a fetch after a publish on the same id is a fetch", do: func(t *attemptTable) {
			t.keep(stale, Publish, b, true)
			t.drop(stale)
			t.keep(h, Fetch, a, true)
		}, held: a, watched: 1, kind: Fetch, claimed: 1, collectedIDs: []uint32{2}},
		{name: "handles past the table", do: func(t *attemptTable) { t.drop(handleAt(99, 0)); t.unwatch(handleAt(99, 0)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab attemptTable
			tab.keep(handleAt(0, 1), Fetch, b, true) // a neighbour the cases never touch
			tab.unwatch(handleAt(0, 1))
			tc.do(&tab)
			s, ok := tab.get(h)
			if tc.held == nil {
				assert.False(t, ok)
			} else {
				require.True(t, ok)
				assert.Same(t, tc.held, s.a)
				assert.Equal(t, tc.kind, s.kind)
			}
			_, ok = tab.get(stale)
			assert.False(t, ok, "a stale handle reads nothing")
			watched := tab.watching()
			assert.Equal(t, tc.watched, watched)
			got, _, _ := tab.collect(nil, 0, 100)
			var ids []uint32
			for _, w := range got {
				ids = append(ids, uint32(w.h.Index()))
				assert.Equal(t, h, w.h)
			}
			assert.Equal(t, tc.collectedIDs, ids)
			if h.Index() < len(tab.attempts) {
				found := tab.claim([]letter{answered(h), answered(stale)})
				assert.Len(t, found, tc.claimed)
				assert.Empty(t, tab.claim([]letter{answered(h)}), "an outcome is claimed once")
			}
		})
	}
}

// The watcher, polling late attempts that the owner keeps, resolves,
// unwatches and drops concurrently: each outcome is reported at most once,
// never for an attempt stopped before it resolved, and — once a sweep that
// began afterwards is over — for every attempt resolved while watched.
func TestWatcherReportsEachOutcomeOnceAndNothingStopped(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tab attemptTable
		wake := make(chan struct{}, 1)
		mail := newMailbox(1<<20, wake, nil)
		w := newWatcher(&tab, nil, mail)
		defer w.close()
		type lease struct {
			h        Handle
			a        *lateAttempt
			resolved bool
			stopped  bool // unwatched or dropped
			early    bool // stopped before it resolved: never reported
		}
		// Ids on both sides of the bitmap's word boundaries and far apart, so
		// that a sweep crosses words and skips empty ones.
		ids := [...]uint32{0, 1, 63, 64, 65, 127, 128, 1000}
		var live [len(ids)]*lease // by index into ids
		var all []*lease
		reported := map[Handle]int{}
		take := func() {
			for _, m := range mail.take(nil) {
				reported[m.ev.Lease]++
			}
		}
		sync := func() {
			select {
			case <-w.sync():
			case <-time.After(10 * time.Second):
				rt.Fatalf("the watcher did not finish a sweep in 10s")
			}
			take()
		}
		gens := map[uint32]uint32{}
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			k := rapid.IntRange(0, len(ids)-1).Draw(rt, "lease")
			id := ids[k]
			l := live[k]
			op := rapid.IntRange(0, 4).Draw(rt, "op")
			switch {
			case l == nil || l.stopped && op == 0:
				gens[id]++
				l = &lease{h: handleAt(id, gens[id]), a: &lateAttempt{}}
				live[k] = l
				all = append(all, l)
				tab.keep(l.h, Fetch, l.a, true)
				w.kick()
			case op == 1 && !l.resolved:
				l.resolved = true
				l.a.resolve(contract.Delivered{})
			case op == 2 && !l.stopped:
				l.stopped, l.early = true, !l.resolved
				tab.drop(l.h)
			case op == 3 && !l.stopped:
				l.stopped, l.early = true, !l.resolved
				tab.unwatch(l.h)
			case op == 4:
				sync()
			}
			take()
		}
		for _, l := range all {
			if !l.resolved {
				l.resolved = true
				l.a.resolve(contract.Failed{Reason: "gone"})
			}
		}
		sync()
		for _, l := range all {
			n := reported[l.h]
			switch {
			case n > 1:
				rt.Fatalf("%v reported %d times", l.h, n)
			case l.early && n > 0:
				rt.Fatalf("%v reported although it was stopped before it resolved", l.h)
			case !l.stopped && n != 1:
				rt.Fatalf("%v resolved while watched, and not reported after a whole sweep", l.h)
			}
		}
		watched := tab.watching()
		for _, l := range all {
			if !l.stopped && reported[l.h] == 1 {
				assert.Nil(rt, claimAgain(&tab, l.h), "a reported attempt is no longer watched")
			}
		}
		require.Equal(rt, 0, watched, "every resolved attempt was claimed or stopped")
	})
}

// claimAgain returns the outcome a second claim of h would report, or nil.
func claimAgain(t *attemptTable, h Handle) contract.Outcome {
	found := t.claim([]letter{answered(h)})
	if len(found) == 0 {
		return nil
	}
	return found[0].ev.Outcome
}

// answered is the letter of an outcome the watcher found for h.
func answered(h Handle) letter {
	return letter{ev: Evidence{What: PollAnswered, Lease: h, Outcome: contract.Failed{Reason: "gone"}}}
}
