package readiness_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/readiness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// misbehaving wraps a correct backend and breaks one method.
type misbehaving struct {
	contract.Fetcher
	panicFetch, panicPoll, panicQuiesce, noAttempt bool
}

type panickyAttempt struct{}

func (panickyAttempt) Poll() contract.Outcome { panic("poll exploded") }

func (m *misbehaving) Fetch(e contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	switch {
	case m.panicFetch:
		panic("fetch exploded")
	case m.noAttempt:
		return nil, errors.New("transport error after the request was sent")
	case m.panicPoll:
		a, err := m.Fetcher.Fetch(e, r)
		if err != nil {
			return nil, err
		}
		if q, qerr := m.Fetcher.Quiesce(context.Background(), []contract.Attempt{a}); !q || qerr != nil {
			return nil, errors.New("test backend could not settle")
		}
		return panickyAttempt{}, nil
	}
	return m.Fetcher.Fetch(e, r)
}

func (m *misbehaving) Quiesce(ctx context.Context, as []contract.Attempt) (bool, error) {
	if m.panicQuiesce {
		panic("quiesce exploded")
	}
	for _, a := range as {
		if _, ok := a.(panickyAttempt); ok {
			return true, nil // the real delivery was quiesced before it was wrapped
		}
	}
	return m.Fetcher.Quiesce(ctx, as)
}

// A misbehaving backend is contained, never trusted, and never crashes the
// manager.
func TestMisbehavingBackendIsContained(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		m       misbehaving
		final   fsm.State
		outcome readiness.OutcomeKind
		reason  string
	}{
		{"panic in Fetch", misbehaving{panicFetch: true}, fsm.Quarantined, readiness.Failed, "panicked in fetch"},
		{"error without attempt", misbehaving{noAttempt: true}, fsm.Quarantined, readiness.Failed, "neither an attempt nor ErrSubmissionRejected"},
		{"panic in Poll", misbehaving{panicPoll: true}, fsm.AccessFenced, readiness.Failed, "panicked in Poll"},
		{"panic in Quiesce", misbehaving{panicQuiesce: true}, fsm.Quarantined, readiness.Served, "panicked in Quiesce"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			m := tc.m
			r := newRig(t, 1, 2, nil, func(c *readiness.Config) {
				m.Fetcher = c.Fetcher
				c.Fetcher = &m
			})
			r.store(0, 0)
			h, err := r.eng.Lend(r.fetchRequest(1, 0))
			require.NoError(t, err)
			r.until(h, tc.final)
			info, err := r.eng.Lease(h)
			require.NoError(t, err)
			assert.Equal(t, tc.outcome, info.Outcome)
			assert.Contains(t, info.Reason, tc.reason)
			require.NoError(t, r.eng.Release(h))
		})
	}
}
