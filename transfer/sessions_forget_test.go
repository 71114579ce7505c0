package transfer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/transfer"
)

// TestRetiredKeysForgottenAtTheirWindow: sessions submitted at drawn times
// and retired in a drawn order are each held — a replayed creation refused
// — until exactly a window after their own submission, whatever the order
// they retired in, and NextDeadline names the earliest such time. (The
// table keeps retired sessions apart from the ones a clock move advances;
// this holds it to forgetting each on time.)
func TestRetiredKeysForgottenAtTheirWindow(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lim := transfer.Limits{Sessions: 16, Tombstones: 2, Window: 1000 * time.Millisecond}
		s, err := transfer.NewSessions(lim)
		require.NoError(rt, err)
		n := rapid.IntRange(1, 12).Draw(rt, "sessions")
		submitted := make([]int, n)
		for i := range submitted {
			submitted[i] = rapid.IntRange(0, 500).Draw(rt, "submitted")
		}
		cfgs := make([]transfer.CohortConfig, n)
		for i := range cfgs {
			cfgs[i] = config(t, false, kv0)
			cfgs[i].Session.Request = transfer.RequestID(100 + i)
			cfgs[i].Submitted = at(submitted[i])
			cfgs[i].Deadline, cfgs[i].Containment = at(submitted[i]+2000), at(submitted[i]+3000)
			require.NoError(rt, s.Create(at(500), cfgs[i]))
			require.NoError(rt, s.Expose(at(500), cfgs[i].Session))
			e := ev(transfer.Done, kv0, 64)
			e.Session = cfgs[i].Session
			require.NoError(rt, s.Step(at(500), e))
		}
		order := rapid.Permutation(slices.Collect(func(yield func(int) bool) {
			for i := range n {
				if !yield(i) {
					return
				}
			}
		})).Draw(rt, "retire order")
		now := 500
		for _, i := range order {
			now += rapid.IntRange(0, 40).Draw(rt, "step")
			require.NoError(rt, s.Retire(at(now), cfgs[i].Session))
		}
		for probe := now; probe <= 1600; probe += rapid.IntRange(1, 120).Draw(rt, "probe step") {
			s.Tick(at(probe))
			var next time.Time
			for i, cfg := range cfgs {
				until := submitted[i] + 1000
				_, held := s.Info(cfg.Session)
				require.Equal(rt, probe < until, held, "session %v submitted at %d, probed at %d", cfg.Session, submitted[i], probe)
				if held && (next.IsZero() || at(until).Before(next)) {
					next = at(until)
				}
			}
			require.Equal(rt, next, s.NextDeadline(), "at %d", probe)
		}
	})
}

// TestSessionsApplyEveryDeadlineOnTime: a table of sessions driven with any
// interleaving of creations, exposures, evidence, cancels, fences,
// revocations and retirements, time moving on, answers exactly what the
// same sessions as lone Cohorts answer when each is ticked to the time of
// every input — the table may skip its walk of the sessions only when no
// deadline can have come (it caches the earliest), never miss one.
func TestSessionsApplyEveryDeadlineOnTime(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lim := transfer.Limits{Sessions: 64, Tombstones: 8, Window: time.Hour}
		s, err := transfer.NewSessions(lim)
		require.NoError(rt, err)
		var keys []transfer.SessionKey
		lone := map[transfer.SessionKey]*transfer.Cohort{}
		now := 0
		for range rapid.IntRange(1, 80).Draw(rt, "inputs") {
			now += rapid.IntRange(0, 30).Draw(rt, "time step")
			when := at(now)
			for _, c := range lone {
				c.Tick(when)
			}
			switch op := rapid.IntRange(0, 8).Draw(rt, "op"); {
			case op == 0 || len(keys) == 0:
				cfg := config(t, rapid.Bool().Draw(rt, "leased"), kv0)
				cfg.Session.Request = transfer.RequestID(len(keys) + 1)
				cfg.Submitted = when
				cfg.Deadline = at(now + rapid.IntRange(1, 150).Draw(rt, "deadline in"))
				cfg.Containment = cfg.Deadline.Add(time.Duration(rapid.IntRange(0, 150).Draw(rt, "containment after")) * time.Millisecond)
				c, err := transfer.NewCohort(when, cfg)
				require.NoError(rt, err)
				require.NoError(rt, s.Create(when, cfg))
				keys = append(keys, cfg.Session)
				lone[cfg.Session] = c
			case op == 8: // time alone moves
			default:
				drive(rt, s, lone, rapid.SampledFrom(keys).Draw(rt, "session"), op, when)
			}
			probe := at(now + rapid.IntRange(0, 30).Draw(rt, "probe after"))
			for _, k := range keys {
				lone[k].Tick(probe)
				require.Equal(rt, lone[k].Physical(), s.Poll(probe, k), "session %v at %v", k, probe.Sub(t0))
				info, ok := s.Info(k)
				require.True(rt, ok)
				require.True(rt, equalInfo(lone[k].Info(), info), "session %v at %v:\nlone  %+v\ntable %+v", k, probe.Sub(t0), lone[k].Info(), info)
			}
			now = int(probe.Sub(t0) / time.Millisecond)
		}
	})
}

// drive applies input op to session key in the table and to its lone
// Cohort alike, and requires both to accept or refuse it alike.
func drive(rt *rapid.T, s *transfer.Sessions, lone map[transfer.SessionKey]*transfer.Cohort, key transfer.SessionKey, op int, when time.Time) {
	c := lone[key]
	e := ev(transfer.Done, kv0, 64)
	e.Session = key
	switch op {
	case 1:
		require.Equal(rt, c.Expose(when) == nil, s.Expose(when, key) == nil, "expose")
	case 2:
		require.Equal(rt, c.Step(when, e) == nil, s.Step(when, e) == nil, "done")
	case 3:
		e.Kind, e.TokenEnd, e.Reason = transfer.Failure, 0, "remote access error"
		require.Equal(rt, c.Step(when, e) == nil, s.Step(when, e) == nil, "failure")
	case 4:
		require.Equal(rt, c.Cancel(when, "owner"), s.Cancel(when, key, "owner"), "cancel")
	case 5:
		require.Equal(rt, c.Fence(when), s.Fence(when, key), "fence")
	case 6:
		fences := rapid.Bool().Draw(rt, "fences")
		require.Equal(rt, c.Revoked(when, fences) == nil, s.Revoked(when, key, fences) == nil, "revoked")
	case 7:
		require.Equal(rt, c.Retire(when) == nil, s.Retire(when, key) == nil, "retire")
	}
}
