package readiness

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// The assertions are reached here from inside the package: each case drives a
// lease with ordinary evidence to where the invariant must hold, breaks the
// core's own bookkeeping as only a bug (or corrupt memory) could, and shows
// that the next step halts the engine as a breach that names what broke,
// counted once, and that nothing is freed.

type coreRig struct {
	t   *testing.T
	c   *Core
	now time.Time
	// released counts the releases a case made before its breach.
	released uint64
}

func newCoreRig(t *testing.T, edit func(*Config)) *coreRig {
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	require.NoError(t, err)
	cfg := Config{Memory: mem, TokensPerBlock: 32, KeepReleased: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if edit != nil {
		edit(&cfg)
	}
	c, err := NewCore(cfg)
	require.NoError(t, err)
	r := &coreRig{t: t, c: c, now: time.Unix(100, 0)}
	c.Tick(r.now)
	return r
}

func coreName(k byte) contract.Name {
	var n contract.Name
	n[0] = k
	return n
}

// lend lends a one-row fetch and takes the round that stages, admits and
// submits it.
func (r *coreRig) lend() (Handle, uint32) {
	h, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(1), Device: gpu.DevicePtr(0x1000)}}})
	require.NoError(r.t, err)
	r.tick(0)
	return h, h.id
}

func (r *coreRig) tick(d time.Duration) {
	r.now = r.now.Add(d)
	r.c.Tick(r.now)
	r.c.Advance()
}

func (r *coreRig) step(h Handle, what Observed, o contract.Outcome) {
	require.NoError(r.t, r.c.Step(Evidence{What: what, Lease: h, Outcome: o}))
	r.c.Advance()
}

// served drives a fetch to served.
func (r *coreRig) served() (Handle, uint32) {
	h, id := r.lend()
	r.step(h, SubmitAccepted, nil)
	r.step(h, PollAnswered, contract.Delivered{Served: contract.NewNameSet(coreName(1))})
	return h, id
}

// complete drives a fetch to logically_complete.
func (r *coreRig) complete() (Handle, uint32) {
	h, id := r.served()
	r.step(h, QuiesceTrue, nil)
	r.step(h, CopiesDone, nil)
	require.Equal(r.t, StateLogicallyComplete, State(r.c.leases[id].m.State))
	return h, id
}

func TestAssertionsHaltAsBreaches(t *testing.T) {
	tests := []breachCase{
		{"a slot freed with access never proven over", nil, func(r *coreRig) {
			h, id := r.complete()
			r.c.leases[id].m.Marks &^= 1 << fsm.Fenced
			_ = r.c.Release(h)
		}, "slots about to be freed while the backend's access was never proven over"},
		{"a slot freed with a copy not landed", nil, func(r *coreRig) {
			h, id := r.complete()
			r.c.body(id).copiesOut = 1
			_ = r.c.Release(h)
		}, "slots about to be freed with 1 local copies not landed"},
		{"a record reused without a new generation", nil, func(r *coreRig) {
			h, id := r.complete()
			require.NoError(r.t, r.c.Release(h))
			r.released = 1
			r.c.gens[id] = h.gen // as if retire had not moved it on
			_, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(2), Device: 0x2000}}})
			require.ErrorIs(r.t, err, ErrHalted)
		}, "a retired record was about to be reused without a new generation"},
		{"a state outside the table's domain, met by the door", nil, func(r *coreRig) {
			h, id := r.served()
			r.c.leases[id].m.State = fsm.NumStates + 2
			require.ErrorIs(r.t, r.c.Step(Evidence{What: QuiesceTrue, Lease: h}), ErrHalted)
		}, "a lease's state left the table's domain"},
		{"a state outside the table's domain after a step", nil, func(r *coreRig) {
			_, id := r.served()
			r.c.leases[id].m.State = fsm.NumStates
			r.c.checkState(id)
		}, "a lease's state state(15) is outside the table's domain"},
		{"an outcome latched twice", nil, func(r *coreRig) {
			h, id := r.lend()
			r.step(h, SubmitAccepted, nil)
			r.c.leases[id].result = fsm.Failure
			_ = r.c.Step(Evidence{What: PollAnswered, Lease: h, Outcome: contract.Delivered{Served: contract.NewNameSet(coreName(1))}})
		}, "outcome served latched over failed"},
		{"a first answer stored twice", nil, func(r *coreRig) {
			h, id := r.lend()
			r.step(h, SubmitAccepted, nil)
			r.c.body(id).first = contract.Failed{Reason: "earlier"}
			// The door never classifies a second first answer: apply is
			// handed one directly, as a broken classifier would.
			_ = r.c.apply(id, &verdict{event: fsm.OutcomeFailed, what: PollAnswered, reason: "failed: later", first: contract.Failed{Reason: "later"}})
		}, "a second first answer (failed(later) after failed(earlier)) was about to be latched"},
		{"a copy to the device before the fence", nil, func(r *coreRig) {
			_, id := r.served()
			r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.CopyOut), &verdict{})
		}, "staging→device copies asked for before the backend's access was proven over"},
		{"a copy to the device after the owner's release", nil, func(r *coreRig) {
			h, id := r.served()
			r.step(h, QuiesceTrue, nil) // fenced: copies out
			r.c.leases[id].m.Latched = r.c.leases[id].m.Latched.With(fsm.ReleaseRequested)
			r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.CopyOut), &verdict{})
		}, "staging→device copies asked for into the device rows of a lease its owner released"},
		{"a fenced lease with nothing to copy at rest", nil, func(r *coreRig) {
			h, id := r.served()
			r.step(h, QuiesceTrue, nil)
			clear(r.c.body(id).masks[0])
			r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.CopyOut), &verdict{})
		}, "a fenced lease with nothing to copy came to rest in access_fenced"},
		{"a submission without an admission slot", nil, func(r *coreRig) {
			_, id := r.lend()
			r.c.body(id).outstanding = false
			r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.Submit), &verdict{})
		}, "a submission handed out without an admission slot"},
		{"a lease admitted twice", nil, func(r *coreRig) {
			_, id := r.lend()
			r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.TakeAdmission), &verdict{})
		}, "a lease admitted twice"},
		{"a lease admitted past the backend's bound", func(cfg *Config) { cfg.MaxOutstanding = 1 }, func(r *coreRig) {
			r.lend()
			h, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(2), Device: 0x2000}}})
			require.NoError(r.t, err)
			r.tick(0)                               // staged, waiting for the bound
			r.c.leases[h.id].m.State = fsm.Admitted // as if the pump had let it through
			r.c.perform(h.id, &fsm.Step{}, fsm.Effects(0).With(fsm.TakeAdmission), &verdict{})
		}, "a lease admitted past the backend's bound of 1 outstanding submissions"},
		{"an admission slot given back twice", nil, func(r *coreRig) {
			h, _ := r.served()
			r.c.outstanding = 0 // as if it had been given back already
			_ = r.c.Step(Evidence{What: QuiesceTrue, Lease: h})
		}, "an admission slot given back while the core counts 0 outstanding"},
		{"Quiesce asked where no proof is awaited", nil, func(r *coreRig) {
			_, id := r.complete()
			r.c.ask(id)
		}, "Quiesce asked about a lease in logically_complete, where no access proof is awaited"},
		{"a clock timeout the lease's state refuses", nil, func(r *coreRig) {
			_, id := r.complete()
			r.c.body(id).proofDue = r.now.Add(time.Second).UnixNano()
			r.c.body(id).proofOut = true
			r.c.rearm(id)
			r.tick(2 * time.Second)
		}, "the clock's Quiesce timeout was refused: fsm: access_unproven refused in state logically_complete"},
		{"a granted lease with no runs", nil, func(r *coreRig) {
			h, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(2), Device: 0x2000}}})
			require.NoError(r.t, err)
			require.NoError(r.t, r.c.alloc.Free(r.c.ticket(h.id))) // the allocator no longer lends the lease anything
			r.c.perform(h.id, &fsm.Step{}, fsm.Effects(0).With(fsm.Place), &verdict{})
		}, "the allocator has no runs for a granted lease"},
		{"the allocator refuses the slots back", nil, func(r *coreRig) {
			h, id := r.complete()
			require.NoError(r.t, r.c.alloc.Free(r.c.ticket(id))) // the slots went back behind the core's back
			_ = r.c.Release(h)
		}, "the allocator refused to take the lease's slots back"},
		{"the allocator refuses to quarantine", nil, func(r *coreRig) {
			_, id := r.contained()
			require.NoError(r.t, r.c.alloc.Free(r.c.ticket(id)))
			r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.Quarantine), &verdict{})
		}, "the allocator refused to quarantine a lease's slots"},
		{"the allocator refuses to withdraw", nil, func(r *coreRig) {
			h, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(2), Device: 0x2000}}})
			require.NoError(r.t, err)
			require.NoError(r.t, r.c.alloc.Free(r.c.ticket(h.id))) // granted at once, taken back behind the core's back
			r.c.perform(h.id, &fsm.Step{}, fsm.Effects(0).With(fsm.Withdraw), &verdict{})
		}, "the allocator refused to withdraw a waiting request"},
		{"the allocator refuses the ticket named after a record", nil, func(r *coreRig) {
			// The next record's index is taken behind the core's back (its
			// generation in the column, as Lend puts it there).
			r.c.gens = append(r.c.gens, 1)
			require.NoError(r.t, r.c.alloc.RequestTicket(staging.TicketOf(0, 1), []int{1}))
			_, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(2), Device: 0x2000}}})
			require.ErrorIs(r.t, err, ErrHalted)
		}, "the allocator refused the ticket named after a lease record"},
		{"an extent still readable reused", nil, func(r *coreRig) {
			_, id := r.served()
			r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.Retire), &verdict{})
		}, "a lease's extent, which its backend may still read, was about to be reused"},
	}
	tests = append(tests, pairedBreaches...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCoreRig(t, tt.edit)
			tt.breach(r)
			err := r.c.Err()
			require.ErrorIs(t, err, ErrHalted)
			var inv *InvariantError
			require.True(t, errors.As(err, &inv), "%v", err)
			assert.Contains(t, inv.What, tt.want)
			assert.Equal(t, uint64(1), r.c.Stats().InvariantBreaches)
			assert.Equal(t, r.released, r.c.Stats().Released, "a breach frees nothing")
			_, lerr := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(9), Device: 0x9000}}})
			assert.ErrorIs(t, lerr, ErrHalted, "a halted core lends nothing")
		})
	}
}

// TestTheClockAndTheOwnerComeThroughTheDoor: the evidence the core makes
// itself is refused from outside, changing nothing, and Retry is a retry
// event the table refuses where no proof is awaited.
func TestTheClockAndTheOwnerComeThroughTheDoor(t *testing.T) {
	r := newCoreRig(t, nil)
	h, id := r.lend()
	r.step(h, SubmitAccepted, nil)
	before := r.c.leases[id]
	body := *r.c.body(id)
	for what := ownerReleased; what <= deviceLostCopy; what++ {
		err := r.c.Step(Evidence{What: what, Lease: h, Reason: "from outside"})
		require.ErrorIs(t, err, ErrInvalidEvidence, "%v", what)
		assert.Contains(t, err.Error(), "want one of the kinds readiness.Observed lists")
	}
	assert.Equal(t, before.m, r.c.leases[id].m)
	assert.Equal(t, body.reason, r.c.body(id).reason)
	assert.True(t, r.c.Ready().Empty())

	// Retry in requested: the proof is asked at once, through ask_proof.
	require.NoError(t, r.c.Retry(h))
	assert.Len(t, r.c.Ready().Proofs, 1)
	assert.True(t, r.c.leases[id].m.Latched.Has(fsm.Retry))
	r.c.Advance()
	// Again while the call is out: nothing.
	require.NoError(t, r.c.Retry(h))
	assert.True(t, r.c.Ready().Empty())

	// Where no proof is awaited the table refuses it; Retry reports
	// nothing and nothing changes.
	h2, id2 := r.complete()
	m := r.c.leases[id2].m
	require.NoError(t, r.c.Retry(h2))
	assert.Equal(t, m, r.c.leases[id2].m)
	assert.True(t, r.c.Ready().Empty())
	assert.Zero(t, r.c.Stats().QuiesceRetries, "an owner's retry is not the clock's")
}
