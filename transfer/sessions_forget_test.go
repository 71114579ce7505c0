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
