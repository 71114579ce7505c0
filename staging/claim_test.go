package staging

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// SPEC §4 rule 17, at the memory: one live claim at a time, refused naming
// the holder; what a claim left not free stays out for every later claim.

func claimMemory(t *testing.T, slots ...int) *Memory {
	t.Helper()
	var gs []Group
	for _, n := range slots {
		gs = append(gs, Group{Slots: n, SlotBytes: 8})
	}
	m, err := NewMemory(GoHeap, gs...)
	require.NoError(t, err)
	return m
}

func TestClaimIsOneAtATime(t *testing.T) {
	m := claimMemory(t, 4)
	first, err := m.Claim("engine#1")
	require.NoError(t, err)
	for range 2 { // a refusal changes nothing: refused again, the same way
		_, err = m.Claim("engine#2")
		require.ErrorIs(t, err, ErrMemoryClaimed)
		assert.Contains(t, err.Error(), "engine#1", "the refusal names the holder")
	}
	assert.Equal(t, 0, first.End(), "nothing was lent: nothing stays out")
	assert.Equal(t, 0, first.End(), "ending again changes nothing")
	second, err := m.Claim("engine#3")
	require.NoError(t, err, "the first claim ended")
	assert.Equal(t, 0, second.Inherited())
	assert.Equal(t, 4, second.Allocator().FreeSlots(0))
}

func TestClaimHandsOverWhatIsNotFree(t *testing.T) {
	tests := []struct {
		name string
		// leave puts the first claim's allocator in the state it ends in.
		leave     func(t *testing.T, a *Allocator)
		inherited []int // per group
	}{
		{"every slot freed", func(t *testing.T, a *Allocator) {
			tk, err := a.Request([]int{3, 1})
			require.NoError(t, err)
			require.NoError(t, a.Free(tk))
		}, []int{0, 0}},
		{"a quarantined lease", func(t *testing.T, a *Allocator) {
			_, err := a.Request([]int{1, 0}) // slot 0
			require.NoError(t, err)
			tk, err := a.Request([]int{2, 1}) // slots 1-2, and 0 of group 1
			require.NoError(t, err)
			require.NoError(t, a.Quarantine(tk))
		}, []int{3, 1}},
		{"a lease left unfinished", func(t *testing.T, a *Allocator) {
			_, err := a.Request([]int{2, 1})
			require.NoError(t, err)
		}, []int{2, 1}},
		{"part of a run quarantined, the rest freed", func(t *testing.T, a *Allocator) {
			tk, err := a.Request([]int{3, 0})
			require.NoError(t, err)
			require.NoError(t, a.QuarantineRun(tk, Run{Group: 0, First: 1, Count: 1}))
			require.NoError(t, a.Free(tk))
		}, []int{1, 0}},
		{"a request still waiting holds nothing", func(t *testing.T, a *Allocator) {
			tk, err := a.Request([]int{4, 1})
			require.NoError(t, err)
			_, err = a.Request([]int{1, 1}) // waits behind it
			require.NoError(t, err)
			require.NoError(t, a.Free(tk)) // grants the waiting one
		}, []int{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := claimMemory(t, 4, 2)
			first, err := m.Claim("engine#1")
			require.NoError(t, err)
			tt.leave(t, first.Allocator())
			want := tt.inherited[0] + tt.inherited[1]
			assert.Equal(t, want, first.End())
			assert.Equal(t, want, m.OutOfCirculation())

			second, err := m.Claim("engine#2")
			require.NoError(t, err)
			a := second.Allocator()
			assert.Equal(t, want, second.Inherited())
			for g, n := range tt.inherited {
				assert.Equal(t, n, a.Quarantined(g), "group %d: inherited slots start quarantined", g)
				assert.Equal(t, m.Group(g).Slots-n, a.FreeSlots(g), "group %d", g)
				require.NoError(t, a.pools[g].counted(g), "the free count is the free runs")
			}
			// Everything free is lendable; nothing inherited ever is.
			tk, err := a.Request([]int{a.FreeSlots(0), a.FreeSlots(1)})
			if a.Usable(0) < a.FreeSlots(0) || a.Usable(1) < a.FreeSlots(1) {
				require.ErrorIs(t, err, ErrUngrantable)
				return
			}
			require.NoError(t, err)
			require.True(t, a.Granted(tk))
			assert.Equal(t, 0, a.FreeSlots(0)+a.FreeSlots(1))

			// The second claim ends holding everything: the memory keeps
			// every slot out, the first claim's and its own.
			assert.Equal(t, 6, second.End())
			third, err := m.Claim("engine#3")
			require.NoError(t, err)
			assert.Equal(t, 6, third.Inherited())
		})
	}
}

// Inherited slots are never granted, however requests, frees and quarantines
// interleave over a chain of claims, and the free count stays the free runs.
func TestClaimInheritedSlotsAreNeverGranted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sizes := rapid.SliceOfN(rapid.IntRange(1, 70), 1, 2).Draw(t, "sizes")
		var gs []Group
		for _, n := range sizes {
			gs = append(gs, Group{Slots: n, SlotBytes: 1})
		}
		m, err := NewMemory(GoHeap, gs...)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]map[int]bool, len(sizes)) // the model: slots out for good
		for g := range out {
			out[g] = map[int]bool{}
		}
		for claim := range rapid.IntRange(1, 4).Draw(t, "claims") {
			c, err := m.Claim("engine")
			if err != nil {
				t.Fatal(err)
			}
			a := c.Allocator()
			n := 0
			for g := range sizes {
				n += len(out[g])
				if a.Quarantined(g) != len(out[g]) || a.FreeSlots(g) != sizes[g]-len(out[g]) {
					t.Fatalf("claim %d, group %d: %d quarantined and %d free; the model inherits %d", claim, g, a.Quarantined(g), a.FreeSlots(g), len(out[g]))
				}
			}
			if c.Inherited() != n {
				t.Fatalf("claim %d inherits %d slots; the model %d", claim, c.Inherited(), n)
			}
			var live []Ticket
			for range rapid.IntRange(0, 12).Draw(t, "steps") {
				switch op := rapid.IntRange(0, 2).Draw(t, "op"); {
				case op == 0 || len(live) == 0:
					counts := make([]int, len(sizes))
					for g := range sizes {
						counts[g] = rapid.IntRange(0, a.Usable(g)).Draw(t, "count")
					}
					tk, err := a.Request(counts)
					if err != nil {
						t.Fatal(err)
					}
					live = append(live, tk)
				default:
					k := rapid.IntRange(0, len(live)-1).Draw(t, "which")
					tk := live[k]
					live = append(live[:k], live[k+1:]...)
					switch {
					case !a.Granted(tk):
						_ = a.Cancel(tk)
					case op == 1:
						_ = a.Free(tk)
					default:
						_ = a.Quarantine(tk)
					}
				}
				for _, tk := range a.TakeGrants(nil) {
					runs, _ := a.Runs(tk, nil)
					for _, r := range runs {
						for s := r.First; s < r.First+r.Count; s++ {
							if out[r.Group][s] {
								t.Fatalf("claim %d granted slot %d of group %d, which an earlier claim left out of circulation", claim, s, r.Group)
							}
						}
					}
				}
				if a.Err() != nil {
					t.Fatal(a.Err())
				}
			}
			for g := range sizes {
				if err := a.pools[g].counted(g); err != nil {
					t.Fatal(err)
				}
				for s := range sizes[g] {
					if a.pools[g].held[s/64]&(1<<(s%64)) != 0 {
						out[g][s] = true // not free as the claim ends: out for good
					}
				}
			}
			want := 0
			for g := range out {
				want += len(out[g])
			}
			if got := c.End(); got != want {
				t.Fatalf("claim %d ended keeping %d slots out; the model %d", claim, got, want)
			}
		}
	})
}
