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
	const id = 2
	for _, tc := range []struct {
		name         string
		do           func(*testing.T, *attemptTable)
		held         contract.Attempt // what get(id) returns, nil for none
		watched      int
		kind         Kind
		claimed      int // of one sighting of id
		collectedIDs []uint32
	}{
		{name: "kept attempts are watched", do: func(t *testing.T, tab *attemptTable) { require.True(t, tab.keep(id, Publish, a, true)) },
			held: a, watched: 1, kind: Publish, claimed: 1, collectedIDs: []uint32{id}},
		{name: "unwatch keeps the attempt, stops the polling", do: func(t *testing.T, tab *attemptTable) {
			require.True(t, tab.keep(id, Fetch, a, true))
			tab.unwatch(id)
		}, held: a, watched: 0, kind: Fetch},
		{name: "gaveUp keeps the attempt, stops the polling", do: func(t *testing.T, tab *attemptTable) {
			require.True(t, tab.keep(id, Fetch, a, true))
			tab.gaveUp(id)
		}, held: a, watched: 0, kind: Fetch},
		{name: "drop forgets the attempt", do: func(t *testing.T, tab *attemptTable) {
			require.True(t, tab.keep(id, Fetch, a, true))
			tab.drop(id)
		}, watched: 0},
		{name: "a held attempt is never replaced", do: func(t *testing.T, tab *attemptTable) {
			require.True(t, tab.keep(id, Fetch, a, true))
			require.False(t, tab.keep(id, Publish, b, false), "the record's old lease was never fenced")
		}, held: a, watched: 1, kind: Fetch, claimed: 1, collectedIDs: []uint32{id}},
		{name: "the next lease's attempt, once the last was dropped", do: func(t *testing.T, tab *attemptTable) {
			require.True(t, tab.keep(id, Publish, b, true))
			tab.drop(id)
			require.True(t, tab.keep(id, Fetch, a, true))
		}, held: a, watched: 1, kind: Fetch, claimed: 1, collectedIDs: []uint32{id}},
		{name: "ids past the table", do: func(t *testing.T, tab *attemptTable) {
			tab.drop(99)
			tab.unwatch(99)
			tab.gaveUp(99)
			tab.rewatch(99)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab attemptTable
			require.True(t, tab.keep(0, Fetch, b, true)) // a neighbour the cases never touch
			tab.unwatch(0)
			tc.do(t, &tab)
			s, ok := tab.get(id)
			if tc.held == nil {
				assert.False(t, ok)
			} else {
				require.True(t, ok)
				assert.Same(t, tc.held, s.a)
				assert.Equal(t, tc.kind, s.kind)
			}
			_, ok = tab.get(99)
			assert.False(t, ok, "an id past the table reads nothing")
			assert.Equal(t, tc.watched, tab.watching())
			got, _, _ := tab.collect(nil, 0, 100)
			var ids []uint32
			for _, w := range got {
				ids = append(ids, w.id)
				assert.Same(t, tc.held, w.a)
			}
			assert.Equal(t, tc.collectedIDs, ids)
			found := tab.claim([]letter{sighting(id)})
			assert.Len(t, found, tc.claimed)
			assert.Empty(t, tab.claim([]letter{sighting(id)}), "a sighting is claimed once")
		})
	}
}

// A sighting the watcher makes names only an id; it reaches the lease whose
// attempt was polled, and no other: whatever the owner does to the id between
// the watcher's collect, its claim and the owner taking the letter in —
// drop the attempt, keep the next lease's, give the lease up — drops it. What
// leaves the lease the same (unwatching it at containment) does not.
func TestSightingsKeepToTheirLease(t *testing.T) {
	const id = 5
	current := func(id uint32) Handle { return Handle{id: id, gen: 9} }
	a, next := &lateAttempt{}, &lateAttempt{}
	for _, tc := range []struct {
		name           string
		beforeClaim    func(*attemptTable)
		beforeTake     func(*attemptTable)
		claimed, named bool
		rewatched      bool // the take reports the id watched again
	}{
		{name: "nothing happens", claimed: true, named: true},
		{name: "dropped before the claim", beforeClaim: func(t *attemptTable) { t.drop(id) }},
		{name: "the next lease's attempt before the claim", beforeClaim: func(t *attemptTable) {
			t.drop(id)
			t.keep(id, Fetch, next, true)
		}},
		{name: "unwatched before the claim", beforeClaim: func(t *attemptTable) { t.unwatch(id) }},
		{name: "given up before the claim", beforeClaim: func(t *attemptTable) { t.gaveUp(id) }},
		{name: "dropped before the take", beforeTake: func(t *attemptTable) { t.drop(id) }, claimed: true},
		{name: "the next lease's attempt before the take", beforeTake: func(t *attemptTable) {
			t.drop(id)
			t.keep(id, Fetch, next, true)
		}, claimed: true, rewatched: true},
		{name: "given up (parked) before the take", beforeTake: func(t *attemptTable) { t.gaveUp(id) }, claimed: true},
		{name: "unwatched (contained) before the take", beforeTake: func(t *attemptTable) { t.unwatch(id) }, claimed: true, named: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab attemptTable
			require.True(t, tab.keep(id, Fetch, a, true))
			polled, _, _ := tab.collect(nil, 0, 100)
			require.Len(t, polled, 1)
			if tc.beforeClaim != nil {
				tc.beforeClaim(&tab)
			}
			found := tab.claim([]letter{sighting(id)})
			require.Equal(t, tc.claimed, len(found) == 1)
			if !tc.claimed {
				return
			}
			if tc.beforeTake != nil {
				tc.beforeTake(&tab)
			}
			more, _, _ := tab.collect(nil, 0, 100)
			assert.Empty(t, more, "no id is collected while a sighting of it is out")
			other := letter{ev: Evidence{What: QuiesceTrue, Lease: Handle{id: 1, gen: 3}}}
			taken, rewatched := tab.resolve([]letter{other, found[0], sighting(id)}, current)
			assert.Equal(t, tc.rewatched, rewatched)
			want := []letter{other}
			if tc.named {
				named := found[0]
				named.ev.Lease, named.sighted = current(id), false
				want = append(want, named)
			}
			assert.Equal(t, want, taken, "the second sighting of the id was never claimed: it is dropped")
			if tc.rewatched {
				again, _, _ := tab.collect(nil, 0, 100)
				require.Len(t, again, 1, "the next lease's attempt is polled once the sighting was taken")
				assert.Same(t, next, again[0].a)
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
			stopped  bool // unwatched, dropped or given up
			dropped  bool
			early    bool // stopped before it resolved: never reported
		}
		// Ids on both sides of the bitmap's word boundaries and far apart, so
		// that a sweep crosses words and skips empty ones.
		ids := [...]uint32{0, 1, 63, 64, 65, 127, 128, 1000}
		var live [len(ids)]*lease // by index into ids
		var all []*lease
		reported := map[Handle]int{}
		gens := map[uint32]uint32{} // the core's records: the lease each id carries now
		// take is the owner's round: it names each sighting after the lease
		// the id carries now, or drops it, as the engine does.
		take := func() (rewatched bool) {
			letters, rewatched := tab.resolve(mail.take(nil), func(id uint32) Handle { return handleAt(id, gens[id]) })
			for _, m := range letters {
				reported[m.ev.Lease]++
			}
			if rewatched {
				w.kick()
			}
			return rewatched
		}
		sync := func() {
			for again := true; again; {
				select {
				case <-w.sync():
				case <-time.After(10 * time.Second):
					rt.Fatalf("the watcher did not finish a sweep in 10s")
				}
				again = take() // a dropped sighting held up its id's next attempt: sweep again
			}
		}
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			k := rapid.IntRange(0, len(ids)-1).Draw(rt, "lease")
			id := ids[k]
			l := live[k]
			op := rapid.IntRange(0, 5).Draw(rt, "op")
			switch {
			case l == nil || l.stopped && op == 0:
				if l != nil && !l.dropped {
					tab.drop(id) // fenced: a record carries a new lease only then
					l.dropped = true
				}
				gens[id]++
				l = &lease{h: handleAt(id, gens[id]), a: &lateAttempt{}}
				live[k] = l
				all = append(all, l)
				require.True(rt, tab.keep(id, Fetch, l.a, true))
				w.kick()
			case op == 1 && !l.resolved:
				l.resolved = true
				l.a.resolve(contract.Delivered{})
			case op == 2 && !l.dropped:
				l.early = l.early || !l.stopped && !l.resolved
				l.stopped, l.dropped = true, true
				tab.drop(id)
			case op == 3 && !l.stopped:
				l.stopped, l.early = true, !l.resolved
				tab.unwatch(id)
			case op == 5 && !l.stopped:
				l.stopped, l.early = true, !l.resolved
				tab.gaveUp(id)
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
				assert.Nil(rt, claimAgain(&tab, uint32(l.h.Index())), "a reported attempt is no longer watched")
			}
		}
		require.Equal(rt, 0, watched, "every resolved attempt was claimed or stopped")
	})
}

// claimAgain returns the outcome a second claim of a sighting of id would
// report, or nil.
func claimAgain(t *attemptTable, id uint32) contract.Outcome {
	found := t.claim([]letter{sighting(id)})
	if len(found) == 0 {
		return nil
	}
	return found[0].ev.Outcome
}

// sighting is the letter of an outcome the watcher found at id.
func sighting(id uint32) letter {
	return letter{ev: Evidence{Lease: Handle{id: id}, Outcome: contract.Failed{Reason: "gone"}}, poll: true, sighted: true}
}

func handleAt(id, gen uint32) Handle { return Handle{id: id, gen: gen} }

// TestNewNoticeIsNeverReused holds the batch to what a pool would break: a
// retired notice (its attempt forgotten, its backend still holding the
// callback) is never handed out again, so a late callback finds it retired
// and changes nothing for any later attempt, across batches.
func TestNewNoticeIsNeverReused(t *testing.T) {
	var tab attemptTable
	mail := newMailbox(4, make(chan struct{}, 1), nil)
	var faults faultCounts
	seen := map[*notice]bool{}
	var retired []*notice
	for i := range 3*noticeBatch + 1 {
		n := tab.newNotice(Handle{}, mail, &faults)
		require.False(t, seen[n], "notice %d was handed out before", i)
		seen[n] = true
		require.Equal(t, uint32(noticeArmed), n.state.Load(), "notice %d starts armed", i)
		require.Same(t, mail, n.mail)
		require.Same(t, &faults, n.faults)
		n.retire()
		retired = append(retired, n)
	}
	for _, n := range retired {
		n.fire() // late: dropped, no letter
	}
	assert.Zero(t, faults.repeated.Load())
	assert.Empty(t, mail.take(nil), "a late callback puts no letter")
	for _, n := range retired {
		assert.Equal(t, uint32(noticeLate), n.state.Load())
	}
}
