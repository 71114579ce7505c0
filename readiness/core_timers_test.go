package readiness

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The timer heap against a model that keeps each lease's armed time in a map
// and finds the earliest by scanning it: whatever the heap does with its
// parallel arrays, the set of armed timers and the order they expire in must
// be the model's.
func TestTimerHeapAgreesWithAScan(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h timerHeap
		model := map[uint32]int64{}
		ids := rapid.Uint32Range(0, 40)
		times := rapid.Int64Range(0, 100)
		for range rapid.IntRange(1, 200).Draw(t, "ops") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				id, at := ids.Draw(t, "id"), times.Draw(t, "at")
				h.arm(id, at)
				model[id] = at
			case 3:
				id, at := ids.Draw(t, "id"), times.Draw(t, "at")
				h.armBy(id, at)
				if was, armed := model[id]; !armed || at < was {
					model[id] = at
				}
			case 1:
				id := ids.Draw(t, "id")
				h.disarm(id)
				delete(model, id)
			case 2:
				now := times.Draw(t, "now")
				for {
					id, ok := h.popExpired(now)
					earliest, due := int64(-1), false
					for _, at := range model {
						if at <= now && (!due || at < earliest) {
							earliest, due = at, true
						}
					}
					if !ok {
						if due {
							t.Fatalf("popExpired(%d) found nothing; a timer at %d is due", now, earliest)
						}
						break
					}
					at, armed := model[id]
					if !armed || at != earliest {
						t.Fatalf("popExpired(%d) = lease %d (armed %v at %d); the earliest due is at %d", now, id, armed, at, earliest)
					}
					delete(model, id)
				}
			}
			if len(h.at) != len(model) || len(h.id) != len(model) {
				t.Fatalf("the heap holds %d times and %d ids; %d timers are armed", len(h.at), len(h.id), len(model))
			}
			for i, id := range h.id {
				if h.pos[id] != int32(i) || h.at[i] != model[id] {
					t.Fatalf("heap slot %d: lease %d at %d, indexed at %d; the model arms it at %d", i, id, h.at[i], h.pos[id], model[id])
				}
			}
		}
	})
}

func TestTimerHeapDisarmOfAnUnknownLeaseChangesNothing(t *testing.T) {
	var h timerHeap
	h.arm(3, 10)
	h.disarm(7)
	h.disarm(1 << 20)
	id, ok := h.popExpired(10)
	require.True(t, ok)
	require.Equal(t, uint32(3), id)
	_, ok = h.popExpired(1 << 40)
	require.False(t, ok, "nothing is left armed")
}
