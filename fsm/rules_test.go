package fsm_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/fsm"
)

// The tests in this file state the rules of SPEC §4 revision 2 as properties
// of the table's graph — paths, not single pairs — so that they hold whatever
// intermediate states or latches the declaration adds. Rules 6 (what a backend
// was handed stays the lease's) and the timing half of rules 5 and 9 are the
// engine's; their tests are in readiness and proptest.

// edge is one move or completion of the table.
type edge struct {
	from, to   fsm.State
	completion bool
	event      fsm.Event
	guard      fsm.Guard
	result     fsm.Result
}

func (e edge) String() string {
	cause := e.event.String()
	if e.completion {
		cause = "[" + e.guard.String() + "]"
	}
	return fmt.Sprintf("%s -%s-> %s", e.from, cause, e.to)
}

func (e edge) is(ev fsm.Event) bool { return !e.completion && e.event == ev }

func (e edge) guarded(g fsm.Guard) bool { return e.completion && e.guard == g }

// graph returns every move and completion of the table.
func graph(tab *fsm.Table) []edge {
	var out []edge
	for s := range fsm.NumStates {
		for _, c := range tab.Completions(s) {
			out = append(out, edge{from: s, to: c.Next, completion: true, guard: c.Guard, result: c.Result})
		}
		for e := range fsm.NumEvents {
			if en := tab.Lookup(s, e); en.Action == fsm.Move {
				out = append(out, edge{from: s, to: en.Next, event: e, result: en.Result})
			}
		}
	}
	return out
}

// reach returns the states reachable from `from` along the edges that use
// accepts (every edge when use is nil), `from` included. Latches never change
// the state and a latched event only ever fires as one of these moves, so the
// graph bounds every path a lease can take.
func reach(edges []edge, from fsm.State, use func(edge) bool) [fsm.NumStates]bool {
	var seen [fsm.NumStates]bool
	seen[from] = true
	queue := []fsm.State{from}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, e := range edges {
			if e.from == s && !seen[e.to] && (use == nil || use(e)) {
				seen[e.to] = true
				queue = append(queue, e.to)
			}
		}
	}
	return seen
}

// avoiding is an edge filter that never enters the given state.
func avoiding(s fsm.State) func(edge) bool { return func(e edge) bool { return e.to != s } }

func into(edges []edge, s fsm.State) []edge {
	var out []edge
	for _, e := range edges {
		if e.to == s {
			out = append(out, e)
		}
	}
	return out
}

var outcomeEvents = []fsm.Event{fsm.OutcomeServed, fsm.OutcomePartial, fsm.OutcomeMissed, fsm.OutcomeFailed, fsm.OutcomeCancelled}

// outcomeStates are the states SPEC §4 enters with a latched outcome.
var outcomeStates = []fsm.State{fsm.Served, fsm.Partial, fsm.Missed, fsm.Failed}

// TestRule1NoSlotRecycledBeforeItsFence: a slot returns to the allocator only
// after the backend's access is proven over and every local copy touching it
// landed. From every state that holds slots, every path to released passes
// through access_fenced and then logically_complete; only waiting, which holds
// none, releases otherwise.
func TestRule1NoSlotRecycledBeforeItsFence(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	for _, e := range into(g, fsm.Released) {
		assert.True(t, e.from == fsm.LogicallyComplete || !tab.Holding(e.from), "%s releases slots held in %s", e, e.from)
	}
	for _, e := range into(g, fsm.LogicallyComplete) {
		assert.Equal(t, fsm.AccessFenced, e.from, "%s: copies land only after the fence", e)
	}
	holding := 0
	for s := range fsm.NumStates {
		if !tab.Holding(s) {
			continue
		}
		holding++
		if s != fsm.AccessFenced && s != fsm.LogicallyComplete {
			assert.False(t, reach(g, s, avoiding(fsm.AccessFenced))[fsm.Released], "a path from %s reaches released without access_fenced", s)
		}
		if s != fsm.LogicallyComplete {
			assert.False(t, reach(g, s, avoiding(fsm.LogicallyComplete))[fsm.Released], "a path from %s reaches released without logically_complete", s)
		}
	}
	require.Equal(t, 12, holding, "the check above must not pass vacuously")
	require.True(t, reach(g, fsm.Requested, nil)[fsm.Released])
}

// TestRule1ExposedNeedsAccessProof: once the backend may touch the slots, no
// path reaches released without Quiesce answering true (access_proven) or the
// proof that nothing was ever exposed (the never_exposed completion after a
// rejection). An outcome, failure, cancellation, timeout, exit or shutdown
// never authorises it.
func TestRule1ExposedNeedsAccessProof(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	noProof := func(e edge) bool { return !e.is(fsm.AccessProven) && !e.guarded(fsm.NeverExposed) }
	for _, s := range append([]fsm.State{fsm.Requested}, outcomeStates...) {
		require.True(t, tab.Exposed(s), "%s is exposed", s)
		assert.False(t, reach(g, s, noProof)[fsm.Released], "a path from exposed %s reaches released without an access proof", s)
		assert.True(t, reach(g, s, nil)[fsm.Released], "%s can be released once proven", s)
	}
	for _, e := range g {
		if e.guarded(fsm.NeverExposed) {
			assert.Equal(t, fsm.Failed, e.from, "%s: only a failed submission can prove nothing was exposed", e)
		}
	}
}

// TestRule2MissesNeverFailures: a miss only ever becomes missed with a miss
// result, and stays a miss; a failure never becomes a miss or a delivery; a
// Cancelled stays Cancelled, never folded into Failed.
func TestRule2MissesNeverFailures(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	latching := map[fsm.Event]fsm.Result{
		fsm.OutcomeServed: fsm.Delivered, fsm.OutcomePartial: fsm.Partly, fsm.OutcomeMissed: fsm.Miss,
		fsm.OutcomeFailed: fsm.Failure, fsm.OutcomeCancelled: fsm.Cancel,
	}
	seen := map[fsm.Event]int{}
	for _, e := range g {
		if want, ok := latching[e.event]; ok && !e.completion {
			seen[e.event]++
			assert.Equal(t, want, e.result, "%s latches the outcome the backend gave", e)
		}
		if e.result == fsm.Miss {
			assert.True(t, e.is(fsm.OutcomeMissed), "%s latches a miss", e)
			assert.Equal(t, fsm.Missed, e.to, "%s", e)
		}
	}
	for ev := range latching {
		assert.Positive(t, seen[ev], "%s never moves", ev)
	}
	assert.Equal(t, fsm.Entry{Action: fsm.Move, Next: fsm.Missed, Result: fsm.Miss, Stores: fsm.Stores(0).With(fsm.StoreFirst)}, tab.Lookup(fsm.Requested, fsm.OutcomeMissed))
	assert.Equal(t, fsm.Entry{Action: fsm.Move, Next: fsm.Failed, Result: fsm.Cancel,
		Stores: fsm.Stores(0).With(fsm.StoreReason).With(fsm.StoreByPeer).With(fsm.StoreFirst)}, tab.Lookup(fsm.Requested, fsm.OutcomeCancelled))
	assert.False(t, fsm.Miss.Failure(), "a miss is not a failure")

	fromMissed := reach(g, fsm.Missed, nil)
	assert.False(t, fromMissed[fsm.Failed], "missed reaches failed")
	fromFailed := reach(g, fsm.Failed, nil)
	for _, s := range []fsm.State{fsm.Served, fsm.Partial, fsm.Missed} {
		assert.False(t, fromFailed[s], "failed reaches %s", s)
	}
	for _, e := range g {
		if (fromMissed[e.from] || fromFailed[e.from]) && e.to != fsm.Released {
			assert.Equal(t, fsm.NoResult, e.result, "%s changes a latched miss or failure", e)
		}
	}
}

// TestRule3OutcomesLatchOnce: in every outcome state a second outcome is
// refused — the first wins; a changed answer arrives as contract_violation,
// which fails a delivery (its rows are never trusted) and leaves a miss or a
// failure as it is; the outcome events move only a submitted lease.
func TestRule3OutcomesLatchOnce(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	for _, s := range outcomeStates {
		require.True(t, tab.Outcome(s), "%s is entered with an outcome", s)
		for _, e := range outcomeEvents {
			en := tab.Lookup(s, e)
			assert.Equal(t, fsm.Refuse, en.Action, "(%s, %s): the first outcome wins", s, e)
			assert.NotEmpty(t, en.Reason(), "(%s, %s)", s, e)
		}
		from := reach(g, s, nil)
		for _, before := range []fsm.State{fsm.Waiting, fsm.Granted, fsm.Staged, fsm.Admitted, fsm.Requested} {
			assert.False(t, from[before], "%s leads back to %s", s, before)
		}
	}
	for _, e := range g {
		for _, ev := range outcomeEvents {
			if e.is(ev) {
				assert.Equal(t, fsm.Requested, e.from, "%s: only a submitted lease takes an outcome", e)
			}
		}
		if e.is(fsm.Deadline) {
			assert.Contains(t, []fsm.State{fsm.Requested, fsm.Staged}, e.from, "%s: a deadline fails a submitted lease, or one still waiting for admission", e)
		}
		if tab.Outcome(e.from) && e.result != fsm.NoResult {
			assert.True(t, e.is(fsm.ContractViolation) && e.to == fsm.Failed && e.result == fsm.Violation,
				"%s relatches an outcome other than as a violation", e)
			assert.Contains(t, []fsm.State{fsm.Served, fsm.Partial}, e.from, "%s: only a delivery can be proven untrustworthy", e)
		}
	}
	assert.Equal(t, fsm.Refuse, tab.Lookup(fsm.Missed, fsm.ContractViolation).Action, "a latched miss stays a miss")
	assert.Equal(t, fsm.Refuse, tab.Lookup(fsm.Failed, fsm.ContractViolation).Action, "a latched failure stays as it is")
}

// TestRule4NoCopyBeforeAccessIsProven: the staging→device copies are issued
// only on entering access_fenced, which is entered only through access_proven,
// the never_exposed completion or the withdrawn completion; no copy is in
// flight before it; readiness is answerable only after it; and once the owner
// released the lease, entering the fence copies nothing.
func TestRule4NoCopyBeforeAccessIsProven(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	var got []string
	for _, e := range into(g, fsm.AccessFenced) {
		got = append(got, e.String())
	}
	assert.ElementsMatch(t, []string{
		"staged -[withdrawn]-> access_fenced",
		"staged -release_requested-> access_fenced", // withdrawn while waiting for admission: never exposed
		"staged -close-> access_fenced",
		"staged -cancel_requested-> access_fenced",   // §2: the owner's cancel withdraws it: never exposed
		"staged -[cancel_withdrawn]-> access_fenced", // the cancel kept while a publish's copies landed
		"contained -access_proven-> access_fenced",   // recover policy: proven after all
		"served -access_proven-> access_fenced",
		"partial -access_proven-> access_fenced",
		"missed -access_proven-> access_fenced",
		"failed -access_proven-> access_fenced",
		"failed -[never_exposed]-> access_fenced",
	}, got)
	for _, s := range append([]fsm.State{fsm.Requested}, outcomeStates...) {
		for _, e := range []fsm.Event{fsm.CopiesLanded, fsm.CopyRefused, fsm.CopyFailed} {
			assert.Equal(t, fsm.Refuse, tab.Lookup(s, e).Action, "(%s, %s): no local copy is in flight before the fence", s, e)
		}
	}
	// (waiting holds nothing and copies nothing: its release is no readiness.)
	for _, s := range []fsm.State{fsm.Granted, fsm.Staged, fsm.Admitted, fsm.Requested, fsm.Served, fsm.Partial, fsm.Missed, fsm.Failed, fsm.Contained} {
		from := reach(g, s, avoiding(fsm.AccessFenced))
		for a := range fsm.NumStates {
			assert.False(t, from[a] && tab.Answerable(a), "%s reaches answerable %s without the fence", s, a)
		}
	}
	require.NotEmpty(t, tab.Completions(fsm.AccessFenced))
	assert.Equal(t, fsm.Completion{Guard: fsm.NothingToCopy, Next: fsm.LogicallyComplete}, tab.Completions(fsm.AccessFenced)[0],
		"a released, missed, failed or published lease copies nothing on entering the fence")
	assert.Equal(t, fsm.Latch, tab.Lookup(fsm.AccessFenced, fsm.ReleaseRequested).Action, "copies already issued land before the slots return")
}

// TestRule5UnprovenIsRetriedThenContained: access_unproven never moves a lease
// — the drain starts and a later proof still fences it — and only containment,
// whose deadline is fixed at submission, moves a lease to contained, from every
// state where access or a copy may be unproven. From contained the only ways
// out are quarantined (for good: the policy is not recover, or nothing can
// prove it) and, under the recover policy, a later access proof.
func TestRule5UnprovenIsRetriedThenContained(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	for _, e := range g {
		assert.False(t, e.is(fsm.AccessUnproven), "%s: an unproven access is never assumed either way", e)
		if e.to == fsm.Quarantined {
			assert.True(t, e.from == fsm.Contained && (e.guarded(fsm.NotRecoverable) || e.is(fsm.Close) || e.is(fsm.ContractViolation)), "%s quarantines without containment", e)
		}
		if e.is(fsm.Containment) {
			assert.Equal(t, fsm.Contained, e.to, "%s", e)
		}
		if e.to == fsm.Contained {
			assert.True(t, e.is(fsm.Containment), "%s contains without the containment deadline", e)
		}
		if e.from == fsm.Contained {
			assert.True(t, e.guarded(fsm.NotRecoverable) || e.is(fsm.Close) || e.is(fsm.ContractViolation) || (e.is(fsm.AccessProven) && e.to == fsm.AccessFenced),
				"%s leaves contained other than for good or by a proof", e)
		}
	}
	for s := range fsm.NumStates {
		if tab.Exposed(s) {
			assert.Equal(t, fsm.Latch, tab.Lookup(s, fsm.AccessUnproven).Action, "(%s, access_unproven): the drain starts", s)
		}
		if tab.Containable(s) {
			en := tab.Lookup(s, fsm.Containment)
			assert.Equal(t, fsm.Move, en.Action, "(%s, containment)", s)
			assert.Equal(t, fsm.Contained, en.Next, "(%s, containment)", s)
		}
	}
	assert.Equal(t, []fsm.Completion{{Guard: fsm.NotRecoverable, Next: fsm.Quarantined}}, tab.Completions(fsm.Contained))
	// A later Quiesce true fences a lease whose first answer was unproven.
	for _, s := range outcomeStates {
		lease := fsm.Slot{State: s}
		_, err := tab.Fire(&lease, fsm.AccessUnproven)
		require.NoError(t, err)
		step, err := tab.Fire(&lease, fsm.AccessProven)
		require.NoError(t, err)
		assert.Equal(t, fsm.AccessFenced, step.To, "a retried proof fences %s", s)
	}
	// A failed copy is never proven: only containment ends it.
	for _, e := range into(g, fsm.CopyUnproven) {
		assert.True(t, e.is(fsm.CopyFailed), "%s", e)
	}
	for _, e := range g {
		if e.from == fsm.CopyUnproven {
			assert.True(t, e.is(fsm.Containment), "%s leaves copy_unproven without containment", e)
		}
	}
}

// TestRule7StaleHandlesAreRefused: a released lease refuses everything; a
// quarantined one only takes the owner's release, which makes its handle stale
// and returns nothing, and records the answer to a cancel request made before.
func TestRule7StaleHandlesAreRefused(t *testing.T) {
	tab := fsm.Lifecycle()
	for e := range fsm.NumEvents {
		en := tab.Lookup(fsm.Released, e)
		assert.Equal(t, fsm.Refuse, en.Action, "(released, %s)", e)
		assert.Contains(t, en.Reason(), "stale", "(released, %s)", e)
		want := fsm.Refuse
		if e == fsm.ReleaseRequested || e == fsm.CancelAnswered {
			want = fsm.Latch
		}
		assert.Equal(t, want, tab.Lookup(fsm.Quarantined, e).Action, "(quarantined, %s)", e)
	}
}

// TestRule8Liveness: every state is reachable; from every non-terminal state a
// terminal state is reachable, and from every state that holds slots released
// is — except copy_unproven, which only a copy that failed without a completion
// record enters (not "events that eventually complete"): rule 5 contains it.
// A lease that can never be granted is not stalled: the owner may release it.
func TestRule8Liveness(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	fromWaiting := reach(g, fsm.Waiting, nil)
	for s := range fsm.NumStates {
		assert.True(t, fromWaiting[s], "%s is unreachable", s)
		from := reach(g, s, nil)
		if !s.Terminal() {
			assert.True(t, from[fsm.Released] || from[fsm.Quarantined], "%s reaches no terminal state", s)
		}
		if tab.Holding(s) && s != fsm.CopyUnproven {
			assert.True(t, from[fsm.Released], "%s can never be released", s)
		}
	}
	assert.Equal(t, fsm.Latch, tab.Lookup(fsm.Waiting, fsm.SlotsUnavailable).Action)
	assert.Equal(t, fsm.Released, tab.Lookup(fsm.Waiting, fsm.ReleaseRequested).Next)
}

// TestRule8LivenessFromAnyPrefix: whatever evidence a lease has seen, a
// backend that answers and copies that land release it, unless it was
// contained or a copy failed.
func TestRule8LivenessFromAnyPrefix(t *testing.T) {
	tab := fsm.Lifecycle()
	o := mustOracle(t)
	happy := []fsm.Event{fsm.SlotsGranted, fsm.CopiesLanded, fsm.AdmissionGranted, fsm.Submitted, fsm.OutcomeServed, fsm.AccessProven, fsm.CopiesLanded, fsm.ReleaseRequested}
	rapid.Check(t, func(t *rapid.T) {
		lease := fsm.Slot{State: rapid.SampledFrom(allStates).Draw(t, "start")}
		facts := drawFacts(t)
		drive := func(e fsm.Event) {
			if step, err := tab.Fire(&lease, e); err != nil || step.Action != fsm.Move {
				return
			}
			for {
				if _, ok := tab.Complete(&lease, facts); ok {
					continue
				}
				if _, ok := tab.Redeliver(&lease); !ok {
					return
				}
			}
		}
		for range rapid.IntRange(0, 30).Draw(t, "prefix") {
			drive(drawEvent(t, o, lease.State))
		}
		if lease.State == fsm.Quarantined || lease.State == fsm.CopyUnproven {
			return
		}
		// The happy evidence, offered twice in full: whatever of it the
		// lease's state refuses, a later state accepts.
		for range 2 {
			for _, e := range happy {
				drive(e)
			}
		}
		if lease.State != fsm.Released {
			t.Fatalf("lease stuck in %s with latches %b and facts %b", lease.State, lease.Latched, facts)
		}
	})
}

// TestRule9DeadlineNeverReleases: the request deadline moves only a submitted
// lease or one still waiting for admission, only to failed, and latches a
// timeout; as staging becomes ready the deadline_passed completion does the
// same. A timeout releases nothing: the
// drain starts (rule 1 covers the rest of the path).
func TestRule9DeadlineNeverReleases(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	for _, e := range g {
		if e.is(fsm.Deadline) || e.guarded(fsm.DeadlinePassed) {
			assert.Equal(t, fsm.Failed, e.to, "%s", e)
			assert.Equal(t, fsm.Timeout, e.result, "%s", e)
		}
		if e.result == fsm.Timeout {
			assert.True(t, e.is(fsm.Deadline) || e.guarded(fsm.DeadlinePassed), "%s latches a timeout", e)
		}
	}
	for s := range fsm.NumStates {
		if s != fsm.Requested && s != fsm.Staged {
			assert.Equal(t, fsm.Refuse, tab.Lookup(s, fsm.Deadline).Action, "(%s, deadline)", s)
		}
	}
	assert.Equal(t, fsm.Entry{Action: fsm.Move, Next: fsm.Failed, Result: fsm.Timeout, Stores: fsm.Stores(0).With(fsm.StoreReason)}, tab.Lookup(fsm.Staged, fsm.Deadline),
		"an explicit deadline passing while the lease waits for admission fails it, never exposed")
	assert.Equal(t, fsm.Entry{Action: fsm.Move, Next: fsm.Failed, Result: fsm.Timeout, Stores: fsm.Stores(0).With(fsm.StoreReason)}, tab.Lookup(fsm.Requested, fsm.Deadline))
}

// TestRule10CloseNeverReleasesAnExposedLease: every lease that holds slots
// keeps the close and goes on progressing (a latch, never a refusal); a lease
// still waiting for an outcome is cancelled at once (the engine's local
// Cancelled); Close releases only what holds nothing or is proven; quarantined
// and released are terminal.
func TestRule10CloseNeverReleasesAnExposedLease(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	for _, e := range g {
		if !e.is(fsm.Close) {
			continue
		}
		assert.False(t, tab.Exposed(e.from) && e.to == fsm.Released, "%s releases an exposed lease", e)
		if e.to == fsm.Released {
			assert.Contains(t, []fsm.State{fsm.Waiting, fsm.LogicallyComplete}, e.from, "%s", e)
		}
	}
	// A lease waiting for its outcome is cancelled at once, locally, by the
	// close itself (a declared move that keeps the close latched), and is
	// released once proven and complete.
	closing := tab.Lookup(fsm.Requested, fsm.Close)
	assert.Equal(t, fsm.Move, closing.Action)
	assert.Equal(t, fsm.Failed, closing.Next)
	assert.Equal(t, fsm.Cancel, closing.Result)
	assert.True(t, closing.Keep, "the close stays latched until the lease can be released")
	lease := fsm.Slot{State: fsm.Requested}
	for _, e := range []fsm.Event{fsm.Close, fsm.AccessProven} {
		_, err := tab.Fire(&lease, e)
		require.NoError(t, err)
	}
	_, ok := tab.Complete(&lease, fsm.Facts(0).With(fsm.NothingToCopy))
	require.True(t, ok)
	step, ok := tab.Redeliver(&lease)
	require.True(t, ok)
	assert.Equal(t, fsm.Step{From: fsm.LogicallyComplete, To: fsm.Released, Event: fsm.Close, Action: fsm.Move,
		Effects: tab.OnEntry(fsm.Released)}, step,
		"a closed lease is released once proven and complete")
	assert.Equal(t, fsm.Entry{Action: fsm.Move, Next: fsm.Released, Result: fsm.Cancel, Stores: fsm.Stores(0).With(fsm.StoreReason)}, tab.Lookup(fsm.Waiting, fsm.Close))
	for s := range fsm.NumStates {
		if tab.Holding(s) {
			assert.NotEqual(t, fsm.Refuse, tab.Lookup(s, fsm.Close).Action, "(%s, close): a retained lease keeps progressing", s)
		}
	}
	for s := range fsm.NumStates {
		terminal := s == fsm.Quarantined || s == fsm.Released
		assert.Equal(t, terminal, s.Terminal(), "%s", s)
		if terminal {
			assert.Empty(t, tab.Completions(s), "%s", s)
			assert.Equal(t, fsm.Refuse, tab.Lookup(s, fsm.Close).Action, "(%s, close)", s)
			for e := range fsm.NumEvents {
				assert.NotEqual(t, fsm.Move, tab.Lookup(s, e).Action, "(%s, %s) leaves a terminal state", s, e)
			}
		}
	}
}

// TestRule11RefusedCopyQuarantinesNothing: a copy the device refused before it
// started is not unproven: it never moves a lease, least of all to quarantined.
// A publish whose staging copy was refused is failed without being submitted,
// and fenced at once as never exposed.
func TestRule11RefusedCopyQuarantinesNothing(t *testing.T) {
	tab := fsm.Lifecycle()
	g := graph(tab)
	for _, e := range g {
		assert.False(t, e.is(fsm.CopyRefused), "%s: a refused copy moves nothing", e)
		if e.guarded(fsm.StagingIncomplete) {
			assert.Equal(t, fsm.Staged, e.from, "%s", e)
			assert.Equal(t, fsm.Failed, e.to, "%s", e)
			assert.True(t, e.result.Failure(), "%s", e)
		}
	}
	assert.Equal(t, fsm.Latch, tab.Lookup(fsm.Granted, fsm.CopyRefused).Action)
	assert.Equal(t, fsm.Latch, tab.Lookup(fsm.AccessFenced, fsm.CopyRefused).Action)
	lease := fsm.Slot{State: fsm.Staged}
	facts := fsm.Facts(0).With(fsm.StagingIncomplete).With(fsm.NeverExposed)
	step, ok := tab.Complete(&lease, facts)
	require.True(t, ok)
	assert.Equal(t, fsm.Failure, step.Result)
	step, ok = tab.Complete(&lease, facts)
	require.True(t, ok)
	assert.Equal(t, fsm.AccessFenced, step.To, "never exposed: fenced at once, nothing quarantined")
}

// TestCancelRefusedOnlyOnceAnOutcomeIsLatched: SPEC §2, the owner's cancel is
// accepted while the lease still waits for its outcome — before submission it
// withdraws the lease, never exposed — and refused (changing nothing) only
// once an outcome is latched, or the lease is gone. A cancel never releases an
// exposed lease: every path it takes to released passes through the fence.
func TestCancelRefusedOnlyOnceAnOutcomeIsLatched(t *testing.T) {
	tab := fsm.Lifecycle()
	accepted := map[fsm.State]bool{fsm.Waiting: true, fsm.Granted: true, fsm.Staged: true, fsm.Admitted: true, fsm.Requested: true}
	for s := range fsm.NumStates {
		en := tab.Lookup(s, fsm.CancelRequested)
		if accepted[s] {
			assert.NotEqual(t, fsm.Refuse, en.Action, "a cancel in %s, before any outcome, is refused: %s", s, en.Reason())
			if en.Action == fsm.Move {
				assert.Equal(t, fsm.Cancel, en.Result, "a cancel in %s latches %s; want a local Cancelled", s, en.Result)
			}
			continue
		}
		assert.Equal(t, fsm.Refuse, en.Action, "a cancel in %s (outcome latched, or gone) is accepted", s)
	}
	// Before submission the cancel withdraws: waiting holds nothing; a staged
	// lease goes through the fence (never exposed) and on to released by
	// the cancel_withdrawn completion, without the owner's release.
	assert.Equal(t, fsm.Released, tab.Lookup(fsm.Waiting, fsm.CancelRequested).Next)
	assert.Equal(t, fsm.AccessFenced, tab.Lookup(fsm.Staged, fsm.CancelRequested).Next)
	var withdraws bool
	for _, c := range tab.Completions(fsm.LogicallyComplete) {
		withdraws = withdraws || (c.Guard == fsm.CancelWithdrawn && c.Next == fsm.Released)
	}
	assert.True(t, withdraws, "logically_complete releases a lease the owner cancelled before exposure")
}
