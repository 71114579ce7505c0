package readiness

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
)

// lyingRecorder is a gpu.RecordQuerier over the rig's simulated stream that
// answers RecordQuery as its test says, whatever the device did: the engine
// must take no status it answers for more than it is, and must never ask it
// while an older copy event is still tracked (events complete in order, so
// a later one's status would say nothing of the older's).
type lyingRecorder struct {
	gpu.Stream
	dev *sim.Device
	// land completes everything queued before answering (the copies land
	// at once, as on a device that is quick); answer turns the status the
	// stream gives into the one RecordQuery returns; fail, when set, is
	// returned instead.
	land   bool
	answer func(gpu.Status) gpu.Status
	fail   error
	calls  int // RecordQuery calls
	asked  int // RecordQuery calls made while an older event was pending
	issued []gpu.Event
}

func (l *lyingRecorder) RecordQuery() (gpu.Event, gpu.Status, error) {
	l.calls++
	for _, ev := range l.issued {
		if st, err := l.Stream.Query(ev); err == nil && st == gpu.Pending {
			l.asked++
		}
	}
	if l.fail != nil {
		return gpu.Event{}, gpu.Pending, l.fail
	}
	ev, err := l.Stream.Record()
	if err != nil {
		return gpu.Event{}, gpu.Pending, err
	}
	l.issued = append(l.issued, ev)
	if l.land {
		l.dev.CompleteAll()
	}
	st, err := l.Stream.Query(ev)
	if err != nil {
		return ev, gpu.Pending, err
	}
	return ev, l.answer(st), nil
}

func (l *lyingRecorder) Record() (gpu.Event, error) {
	ev, err := l.Stream.Record()
	if err == nil {
		l.issued = append(l.issued, ev)
	}
	return ev, err
}

// The event after a round's copies is recorded and queried in one call when
// the stream offers it (gpu.RecordQuerier); what that call answers is taken
// as a Query's answer would be, and no more: a pending answer is polled
// again, a failed one leaves the copies unproven, an error loses them, and a
// stream with an older event still pending is asked with Record and Query
// apart, in order.
func TestRecordQueryIsTakenAsAQuery(t *testing.T) {
	honest := func(st gpu.Status) gpu.Status { return st }
	for _, tc := range []struct {
		name      string
		land      bool
		answer    func(gpu.Status) gpu.Status
		fail      error
		complete  bool  // the test completes the device's work after the first round
		want      State // the lease's state at the end
		landed    bool  // the device rows hold the served content
		wantCalls int
	}{
		{"pending, landed later", false, honest, nil, true, StateLogicallyComplete, true, 1},
		{"landed at once", true, honest, nil, false, StateLogicallyComplete, true, 1},
		{"says pending though landed", true, func(gpu.Status) gpu.Status { return gpu.Pending }, nil, false, StateLogicallyComplete, true, 1},
		{"says failed", true, func(gpu.Status) gpu.Status { return gpu.Failed }, nil, false, StateCopyUnproven, true, 1},
		{"says pending, never lands", false, honest, nil, false, StateAccessFenced, false, 1},
		{"errs", false, honest, errors.New("recorder broke"), true, StateCopyUnproven, true, 1}, // the copies were queued: they land, unproven
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lr *lyingRecorder
			r := newRig(t, 4, func(c *Config) {
				lr = &lyingRecorder{Stream: c.Stream, land: tc.land, answer: tc.answer, fail: tc.fail}
				c.Stream = lr
			})
			lr.dev = r.dev
			h, rows, a := r.fetch(1, 2)
			r.deliver(a, 1, 0, 1)
			r.sync()
			if tc.complete {
				r.dev.CompleteAll()
				r.sync()
			}
			assert.Equal(t, tc.want, r.state(h))
			assert.Equal(t, tc.wantCalls, lr.calls)
			_, err := r.eng.Readiness(h)
			if tc.want == StateLogicallyComplete {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrNotReady)
			}
			for i, row := range rows {
				want := pattern(0xDE, 1, i)
				if tc.landed {
					want = pattern(0xC0, 1, i)
				}
				assert.Equal(t, want, r.deviceRow(row), "device row %d", i)
			}
		})
	}

	t.Run("older event pending", func(t *testing.T) {
		var lr *lyingRecorder
		r := newRig(t, 4, func(c *Config) {
			lr = &lyingRecorder{Stream: c.Stream, answer: func(st gpu.Status) gpu.Status { return st }}
			c.Stream = lr
		})
		lr.dev = r.dev
		h1, _, a1 := r.fetch(1, 1)
		r.deliver(a1, 1, 0)
		r.sync() // its event recorded and queried in one call: pending
		require.Equal(t, 1, lr.calls)
		lr.answer = func(gpu.Status) gpu.Status { return gpu.Complete } // from now on it lies
		h2, _, a2 := r.fetch(2, 1)
		r.deliver(a2, 2, 0)
		r.sync()
		assert.Equal(t, 1, lr.calls, "the second lease's event is behind the first's, still pending: Record and Query apart")
		assert.Equal(t, State(StateAccessFenced), r.state(h1))
		assert.Equal(t, State(StateAccessFenced), r.state(h2), "its copies are not taken as landed before the older event's")
		r.dev.CompleteAll()
		r.sync()
		assert.Equal(t, State(StateLogicallyComplete), r.state(h1))
		assert.Equal(t, State(StateLogicallyComplete), r.state(h2))
		lr.answer = func(st gpu.Status) gpu.Status { return st }
		h3, _, a3 := r.fetch(3, 1)
		r.deliver(a3, 3, 0)
		r.sync()
		assert.Equal(t, 2, lr.calls, "nothing older pending: one call again")
		assert.Equal(t, 0, lr.asked, "RecordQuery asked while an older event was pending")
		r.dev.CompleteAll()
		r.sync()
		assert.Equal(t, State(StateLogicallyComplete), r.state(h3))
	})
}

// The submission and the new attempt's first Poll share one guard: a panic
// in that Poll is the Poll's — the attempt is kept and its lease fails with
// the Poll's panic, then is proven over and returns its slots — never taken
// for a submission that escaped without an attempt (which nothing could
// prove over).
func TestFirstPollPanicIsThePolls(t *testing.T) {
	r := newRig(t, 4)
	r.be.onSubmit = func(a *scriptAttempt) { a.panics = 1 }
	h := r.lend(Request{Kind: Fetch, Rows: r.rows(1, 2)})
	r.eng.Progress()
	a := r.be.last(t)
	_, kept := r.eng.attempts.get(uint32(h.Index()))
	assert.True(t, kept, "the attempt the submission returned is kept")
	info := r.info(h)
	assert.Contains(t, info.Reason, "backend panicked in Poll")
	assert.EqualValues(t, 1, r.eng.Stats().FetcherFaults.Panics)
	r.sync()
	assert.Equal(t, State(StateLogicallyComplete), r.state(h), "proven over: its access ended")
	assert.Equal(t, 2, pollsOf(r.be, a), "the panicking first Poll, then the re-poll at the proof")
	require.NoError(t, r.eng.Release(h))
	r.sync()
	assert.Equal(t, State(StateReleased), r.state(h), "its slots returned")
}
