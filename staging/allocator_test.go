package staging

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func mustRuns(t *testing.T, a *Allocator, tk Ticket) []Run {
	t.Helper()
	runs, err := a.Runs(tk, nil)
	require.NoError(t, err)
	return runs
}

func TestAllocatorAllGroupsOrNone(t *testing.T) {
	a, err := NewAllocator([]int{4, 2})
	require.NoError(t, err)
	t1, err := a.Request([]int{3, 2})
	require.NoError(t, err)
	assert.Equal(t, []Run{{0, 0, 3}, {1, 0, 2}}, mustRuns(t, a, t1))
	t2, err := a.Request([]int{1, 1}) // group 0 fits, group 1 does not: takes neither
	require.NoError(t, err)
	assert.False(t, a.Granted(t2))
	assert.Equal(t, 1, a.FreeSlots(0))
	require.NoError(t, a.Free(t1))
	assert.True(t, a.Granted(t2))
	assert.Equal(t, []Ticket{t2}, a.TakeGrants(nil), "t1's grant was freed before it was taken")
}

func TestAllocatorHeadOfLine(t *testing.T) {
	a, err := NewAllocator([]int{4})
	require.NoError(t, err)
	t1, _ := a.Request([]int{2})
	t2, _ := a.Request([]int{3}) // waits for t1
	t3, _ := a.Request([]int{1}) // would fit, but waits behind t2
	assert.False(t, a.Granted(t2))
	assert.False(t, a.Granted(t3))
	assert.Equal(t, 2, a.Waiting())
	require.NoError(t, a.Cancel(t2)) // unblocks the line
	assert.True(t, a.Granted(t3))
	assert.Equal(t, []Ticket{t1, t3}, a.TakeGrants(nil))
	assert.Empty(t, a.TakeGrants(nil), "each grant is reported once")
}

func TestAllocatorCoalesces(t *testing.T) {
	a, err := NewAllocator([]int{4})
	require.NoError(t, err)
	var ts []Ticket
	for range 4 {
		tk, err := a.Request([]int{1})
		require.NoError(t, err)
		ts = append(ts, tk)
	}
	require.NoError(t, a.Free(ts[1]))
	require.NoError(t, a.Free(ts[2]))
	big, _ := a.Request([]int{2})
	assert.Equal(t, []Run{{0, 1, 2}}, mustRuns(t, a, big), "freed neighbours form one run")
}

func TestAllocatorRefusals(t *testing.T) {
	_, err := NewAllocator(nil)
	assert.ErrorContains(t, err, "at least one pool group")
	_, err = NewAllocator([]int{-1})
	assert.ErrorContains(t, err, "-1 slots")

	a, err := NewAllocator([]int{4})
	require.NoError(t, err)
	for _, counts := range [][]int{{5}, {-1}, {1, 1}} {
		_, err := a.Request(counts)
		assert.Error(t, err, "%v", counts)
	}
	tk, _ := a.Request([]int{2})
	require.NoError(t, a.Free(tk))
	assert.ErrorIs(t, a.Free(tk), ErrStaleTicket, "freeing twice")
	assert.Equal(t, 4, a.FreeSlots(0), "a refused free changes nothing")
	assert.ErrorIs(t, a.Free(Ticket{}), ErrStaleTicket)
	assert.ErrorIs(t, a.Cancel(tk), ErrStaleTicket)

	held, _ := a.Request([]int{4})
	assert.ErrorContains(t, a.Cancel(held), "is granted")
	w, _ := a.Request([]int{1})
	require.NoError(t, a.Cancel(w))
	assert.ErrorIs(t, a.Cancel(w), ErrStaleTicket, "cancelling twice")
	_, err = a.Runs(w, nil)
	assert.ErrorIs(t, err, ErrStaleTicket)
	assert.ErrorContains(t, a.QuarantineRun(held, Run{0, 3, 2}), "not inside")
	assert.ErrorContains(t, a.QuarantineRun(held, Run{1, 0, 1}), "unknown pool group")
}

func TestAllocatorQuarantine(t *testing.T) {
	a, err := NewAllocator([]int{4})
	require.NoError(t, err)
	t1, _ := a.Request([]int{2})
	t2, _ := a.Request([]int{2})
	require.NoError(t, a.Quarantine(t1))
	require.NoError(t, a.QuarantineRun(t2, Run{Group: 0, First: 3, Count: 1}))
	require.NoError(t, a.Free(t2))
	assert.Equal(t, 1, a.FreeSlots(0))
	assert.Equal(t, 3, a.Quarantined(0))
	assert.ErrorIs(t, a.Free(t1), ErrStaleTicket, "a quarantined lease is retired")
	_, err = a.Request([]int{2})
	assert.ErrorIs(t, err, ErrUngrantable, "a request that quarantine made impossible is refused")
	one, _ := a.Request([]int{1})
	assert.Equal(t, []Run{{0, 2, 1}}, mustRuns(t, a, one))
}

func TestAllocatorHopeless(t *testing.T) {
	a, err := NewAllocator([]int{2})
	require.NoError(t, err)
	t1, _ := a.Request([]int{1})
	t2, _ := a.Request([]int{2})
	assert.False(t, a.Hopeless(t2))
	require.NoError(t, a.Quarantine(t1))
	assert.True(t, a.Hopeless(t2))
	require.NoError(t, a.Cancel(t2))
}

// TestAllocatorHopelessByContiguity: with 4 slots and slot 1 quarantined, three
// slots are not quarantined but no three are contiguous: a 3-slot request is
// hopeless, and once it is cancelled the 1-slot request behind it is granted.
func TestAllocatorHopelessByContiguity(t *testing.T) {
	a, err := NewAllocator([]int{4})
	require.NoError(t, err)
	first, _ := a.Request([]int{1})
	q, _ := a.Request([]int{1}) // slot 1
	three, _ := a.Request([]int{3})
	one, _ := a.Request([]int{1})
	_ = a.TakeGrants(nil)
	require.NoError(t, a.Free(first))
	require.NoError(t, a.QuarantineRun(q, Run{Group: 0, First: 1, Count: 1}))
	require.NoError(t, a.Free(q))
	assert.Equal(t, 2, a.Usable(0), "slots 2 and 3 are the longest run without quarantine")
	assert.Equal(t, 3, a.FreeSlots(0), "three free slots, but not three in a row")
	assert.True(t, a.Hopeless(three))
	assert.False(t, a.Granted(one), "the hopeless request blocks the line until cancelled")
	require.NoError(t, a.Cancel(three))
	assert.True(t, a.Granted(one))
	_, err = a.Request([]int{3})
	assert.ErrorIs(t, err, ErrUngrantable)
}

func TestAllocatorZeroRequest(t *testing.T) {
	a, err := NewAllocator([]int{1})
	require.NoError(t, err)
	_, _ = a.Request([]int{1})
	w, _ := a.Request([]int{1})
	z, err := a.Request([]int{0})
	require.NoError(t, err)
	assert.True(t, a.Granted(z), "no slots, no place in line")
	assert.False(t, a.Granted(w))
	runs, err := a.Runs(z, nil)
	require.NoError(t, err)
	assert.Empty(t, runs)
}

func TestAllocatorSteadyStateDoesNotAllocate(t *testing.T) {
	a, err := NewAllocator([]int{1024, 64})
	require.NoError(t, err)
	counts := []int{3, 1}
	var grants []Ticket
	var runs []Run
	cycle := func() {
		tk, err := a.Request(counts)
		if err != nil {
			t.Fatal(err)
		}
		grants = a.TakeGrants(grants[:0])
		runs, _ = a.Runs(tk, runs[:0])
		if err := a.Free(tk); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	assert.Zero(t, testing.AllocsPerRun(200, cycle))
	assert.Len(t, runs, 2)
}

// model is the property tests' reference: who holds each slot, and the line.
type model struct {
	owner       [][]int // per group, per slot: holder ticket number, 0 free, -1 quarantined
	tickets     []Ticket
	counts      [][]int
	grantedSeq  []int
	outstanding map[int]bool
}

func TestAllocatorProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sizes := rapid.SliceOfN(rapid.IntRange(0, 40), 1, 3).Draw(t, "sizes")
		a, err := NewAllocator(sizes)
		if err != nil {
			t.Fatal(err)
		}
		m := model{outstanding: map[int]bool{}}
		for _, n := range sizes {
			m.owner = append(m.owner, make([]int, n))
		}
		m.tickets = []Ticket{{}} // ticket numbers start at 1
		m.counts = [][]int{nil}
		// A caller that names its tickets (RequestTicket) keeps a record per
		// index and reuses an index once its request is freed, quarantined
		// or cancelled — at once, even while a cancelled entry is still in
		// line — at the generation after. One that keeps the generations
		// (NameTicketsBy) is the allocator's only record of them.
		named := rapid.Bool().Draw(t, "named")
		var nextGens []uint32
		if named && rapid.Bool().Draw(t, "caller keeps the generations") {
			if err := a.NameTicketsBy(&nextGens); err != nil {
				t.Fatal(err)
			}
		}
		var reusable []uint32
		retired := func(tk Ticket) {
			if named {
				nextGens[tk.idx] = nextGen(nextGens[tk.idx])
				reusable = append(reusable, tk.idx)
			}
		}
		var taken []Ticket
		check := func() {
			taken = a.TakeGrants(taken[:0])
			for _, tk := range taken {
				num := indexOf(m.tickets, tk)
				if sum(m.counts[num]) > 0 { // a request for nothing has no place in line
					m.grantedSeq = append(m.grantedSeq, num)
				}
				runs, err := a.Runs(tk, nil)
				if err != nil {
					t.Fatalf("granted ticket %d has no runs: %v", num, err)
				}
				for _, r := range runs {
					if r.Count != m.counts[num][r.Group] {
						t.Fatalf("ticket %d got %d slots of group %d, asked %d", num, r.Count, r.Group, m.counts[num][r.Group])
					}
					for s := r.First; s < r.First+r.Count; s++ {
						switch m.owner[r.Group][s] {
						case 0:
							m.owner[r.Group][s] = num
						case -1:
							t.Fatalf("quarantined slot %d of group %d handed to ticket %d", s, r.Group, num)
						default:
							t.Fatalf("slot %d of group %d handed to ticket %d while ticket %d holds it", s, r.Group, num, m.owner[r.Group][s])
						}
					}
				}
				m.outstanding[num] = true
			}
			// FIFO: grants follow arrival order among tickets that queued.
			for i := 1; i < len(m.grantedSeq); i++ {
				if m.grantedSeq[i] < m.grantedSeq[i-1] {
					t.Fatalf("ticket %d granted after later ticket %d", m.grantedSeq[i], m.grantedSeq[i-1])
				}
			}
			for g := range sizes {
				if got, want := a.Usable(g), longestRun(m.owner[g]); got != want {
					t.Fatalf("group %d: allocator says the longest usable run is %d, model %d", g, got, want)
				}
				free := 0
				for _, o := range m.owner[g] {
					if o == 0 {
						free++
					}
				}
				if free != a.FreeSlots(g) {
					t.Fatalf("group %d: allocator says %d free, model %d", g, a.FreeSlots(g), free)
				}
			}
		}
		release := func(num int, quarantine bool) {
			for g := range m.owner {
				for s, o := range m.owner[g] {
					if o == num {
						if quarantine {
							m.owner[g][s] = -1
						} else {
							m.owner[g][s] = 0
						}
					}
				}
			}
			delete(m.outstanding, num)
		}
		t.Repeat(map[string]func(*rapid.T){
			"request": func(t *rapid.T) {
				counts := make([]int, len(sizes))
				for g := range sizes {
					counts[g] = rapid.IntRange(0, longestRun(m.owner[g])).Draw(t, "count")
				}
				var tk Ticket
				var err error
				if named {
					if k := rapid.IntRange(-1, len(reusable)-1).Draw(t, "reuse"); k >= 0 {
						tk = TicketOf(reusable[k], nextGens[reusable[k]])
						reusable = slices.Delete(reusable, k, k+1)
					} else {
						tk = TicketOf(uint32(len(nextGens)), 1)
						nextGens = append(nextGens, 1)
					}
					err = a.RequestTicket(tk, counts)
				} else {
					tk, err = a.Request(counts)
				}
				if err != nil {
					t.Fatalf("valid request refused: %v", err)
				}
				m.tickets = append(m.tickets, tk)
				m.counts = append(m.counts, counts)
				check()
			},
			"free": func(t *rapid.T) {
				num := pickOutstanding(t, m.outstanding)
				if num == 0 {
					t.Skip("nothing held")
				}
				if err := a.Free(m.tickets[num]); err != nil {
					t.Fatal(err)
				}
				retired(m.tickets[num])
				release(num, false)
				if a.Free(m.tickets[num]) == nil {
					t.Fatal("second free accepted")
				}
				check()
			},
			"quarantine": func(t *rapid.T) {
				num := pickOutstanding(t, m.outstanding)
				if num == 0 {
					t.Skip("nothing held")
				}
				if err := a.Quarantine(m.tickets[num]); err != nil {
					t.Fatal(err)
				}
				retired(m.tickets[num])
				release(num, true)
				check()
			},
			"cancel": func(t *rapid.T) {
				if len(m.tickets) == 1 {
					t.Skip("no tickets")
				}
				num := rapid.IntRange(1, len(m.tickets)-1).Draw(t, "ticket")
				if m.outstanding[num] {
					t.Skip("granted")
				}
				if a.Cancel(m.tickets[num]) == nil { // may be stale already
					retired(m.tickets[num])
				}
				check()
			},
		})
		// Returning every lease gives back the whole capacity, less quarantine.
		for num := range m.outstanding {
			if err := a.Free(m.tickets[num]); err != nil {
				t.Fatal(err)
			}
			release(num, false)
		}
		for _, tk := range m.tickets[1:] {
			_ = a.Cancel(tk)
		}
		check()
		for num := range m.outstanding { // grants made by the frees above
			if err := a.Free(m.tickets[num]); err != nil {
				t.Fatal(err)
			}
			release(num, false)
		}
		for g, n := range sizes {
			if a.FreeSlots(g)+a.Quarantined(g) != n {
				t.Fatalf("group %d: %d free + %d quarantined of %d", g, a.FreeSlots(g), a.Quarantined(g), n)
			}
		}
		if a.Waiting() != 0 {
			t.Fatalf("%d still waiting", a.Waiting())
		}
	})
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func indexOf(ts []Ticket, t Ticket) int {
	for i, x := range ts {
		if x == t {
			return i
		}
	}
	return -1
}

func pickOutstanding(t *rapid.T, out map[int]bool) int {
	if len(out) == 0 {
		return 0
	}
	keys := make([]int, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	slicesSort(keys)
	return rapid.SampledFrom(keys).Draw(t, "held")
}

func slicesSort(xs []int) { slices.Sort(xs) }

// longestRun is the model's longest run of slots with no quarantined slot
// (owner -1) in it: written from the model's slot owners, not the allocator's
// bitmaps.
func longestRun(owner []int) int {
	best, run := 0, 0
	for _, o := range owner {
		if o == -1 {
			run = 0
			continue
		}
		run++
		best = max(best, run)
	}
	return best
}

// A caller that names its tickets gets only the ticket the allocator expects
// at an index; a refusal names what was wrong and changes nothing.
func TestAllocatorRequestTicketRefusals(t *testing.T) {
	fresh := func(t *testing.T) *Allocator {
		a, err := NewAllocator([]int{4})
		require.NoError(t, err)
		require.NoError(t, a.RequestTicket(TicketOf(0, 1), []int{4})) // granted
		require.NoError(t, a.RequestTicket(TicketOf(1, 1), []int{1})) // waits behind 0
		require.NoError(t, a.RequestTicket(TicketOf(2, 1), []int{1})) // waits behind 1
		require.NoError(t, a.Cancel(TicketOf(1, 1)))                  // 1: its entry stays in line
		return a
	}
	for _, tc := range []struct {
		name   string
		t      Ticket
		counts []int
		want   string // "" accepts
	}{
		{"the next new index at generation 1", TicketOf(3, 1), []int{1}, ""},
		{"a cancelled index at its next generation, its entry still in line", TicketOf(1, 2), []int{1}, ""},
		{"an index past the next new one", TicketOf(4, 1), []int{1}, "index 4 skips indices; want at most 3"},
		{"a new index at another generation", TicketOf(3, 2), []int{1}, "generation 2 at a new index; want 1"},
		{"an index holding a granted request", TicketOf(0, 2), []int{1}, "index 0 holds a live request (ticket 0.1)"},
		{"an index holding a waiting request", TicketOf(2, 2), []int{1}, "index 2 holds a live request (ticket 2.1)"},
		{"the cancelled ticket again", TicketOf(1, 1), []int{1}, "generation 1 at index 1; want 2"},
		{"the zero ticket", Ticket{}, []int{1}, "ticket 0.0: index 0 holds a live request"},
		{"generation 0 at a reusable index", TicketOf(1, 0), []int{1}, "generation 0 at index 1; want 2"},
		{"bad counts", TicketOf(3, 1), []int{5}, "5 slots asked of pool group 0, which holds 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := fresh(t)
			waiting, free := a.Waiting(), a.FreeSlots(0)
			err := a.RequestTicket(tc.t, tc.counts)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, waiting+1, a.Waiting())
				return
			}
			require.ErrorContains(t, err, tc.want)
			if tc.name != "bad counts" {
				require.ErrorIs(t, err, ErrStaleTicket)
			}
			assert.Equal(t, waiting, a.Waiting(), "a refusal changes nothing")
			assert.Equal(t, free, a.FreeSlots(0))
		})
	}
	t.Run("Request on an allocator whose caller names tickets", func(t *testing.T) {
		_, err := fresh(t).Request([]int{1})
		require.ErrorContains(t, err, "want RequestTicket")
	})
	t.Run("RequestTicket on an allocator that issued tickets itself", func(t *testing.T) {
		a, err := NewAllocator([]int{4})
		require.NoError(t, err)
		_, err = a.Request([]int{1})
		require.NoError(t, err)
		require.ErrorContains(t, a.RequestTicket(TicketOf(1, 1), []int{1}), "issued 1 tickets itself")
	})
}

// A caller that keeps the generations (NameTicketsBy) is the allocator's only
// record of them: the allocator holds none, reads the caller's, and takes
// nothing else on trust — a stale ticket, a live index, a skipped one are
// refused as before.
func TestAllocatorCallerGenerations(t *testing.T) {
	fresh := func(t *testing.T) (*Allocator, *[]uint32) {
		gens := &[]uint32{}
		a, err := NewAllocator([]int{4})
		require.NoError(t, err)
		require.NoError(t, a.NameTicketsBy(gens))
		name := func(idx uint32, counts ...int) {
			if int(idx) == len(*gens) {
				*gens = append(*gens, 1)
			}
			require.NoError(t, a.RequestTicket(TicketOf(idx, (*gens)[idx]), counts))
		}
		name(0, 4) // granted
		name(1, 1) // waits behind 0
		name(2, 1) // waits behind 1
		require.NoError(t, a.Cancel(TicketOf(1, 1)))
		(*gens)[1] = 2 // the caller moves its record on
		return a, gens
	}
	a, _ := fresh(t)
	assert.Empty(t, a.gens, "the allocator keeps no generation of its own")
	assert.True(t, a.Granted(TicketOf(0, 1)))
	for _, tc := range []struct {
		name string
		t    Ticket
		want string // "" accepts
	}{
		{"the cancelled index at the caller's next generation, its entry still in line", TicketOf(1, 2), ""},
		{"the next new index at generation 1, once the caller's column covers it", TicketOf(3, 1), ""},
		{"the cancelled ticket again", TicketOf(1, 1), "generation 1 at index 1; want 2"},
		{"an index holding a waiting request", TicketOf(2, 1), "index 2 holds a live request (ticket 2.1)"},
		{"an index past the next new one", TicketOf(4, 1), "index 4 skips indices; want at most 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, gens := fresh(t)
			if int(tc.t.idx) == len(*gens) {
				*gens = append(*gens, 1) // the caller's new record
			}
			waiting := a.Waiting()
			err := a.RequestTicket(tc.t, []int{1})
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, waiting+1, a.Waiting())
				return
			}
			require.ErrorIs(t, err, ErrStaleTicket)
			require.ErrorContains(t, err, tc.want)
			assert.Equal(t, waiting, a.Waiting(), "a refusal changes nothing")
		})
	}
	t.Run("a new index the caller's column does not cover", func(t *testing.T) {
		a, _ := fresh(t)
		err := a.RequestTicket(TicketOf(3, 1), []int{1})
		require.ErrorIs(t, err, ErrStaleTicket)
		require.ErrorContains(t, err, "the caller's column holds the generations of indices 0..2; want index 3 in it")
	})
	t.Run("a column that shrank makes its records' tickets stale, never a panic", func(t *testing.T) {
		a, gens := fresh(t)
		*gens = (*gens)[:1]
		assert.True(t, a.Granted(TicketOf(0, 1)), "index 0 is still covered")
		assert.False(t, a.Granted(TicketOf(2, 1)))
		require.ErrorIs(t, a.Cancel(TicketOf(2, 1)), ErrStaleTicket)
	})
	t.Run("a new index the caller's generations do not start at 1", func(t *testing.T) {
		a, gens := fresh(t)
		*gens = append(*gens, 7)
		require.ErrorContains(t, a.RequestTicket(TicketOf(3, 1), []int{1}), "hold 7 at the new index 3; want 1")
	})
	t.Run("stale tickets, by the caller's generations", func(t *testing.T) {
		a, gens := fresh(t)
		require.ErrorIs(t, a.Cancel(TicketOf(1, 1)), ErrStaleTicket, "cancelled once")
		require.ErrorIs(t, a.Free(TicketOf(0, 2)), ErrStaleTicket, "a generation the caller never reached")
		require.NoError(t, a.Free(TicketOf(0, 1)))
		require.ErrorIs(t, a.Free(TicketOf(0, 1)), ErrStaleTicket, "freed: stale whatever the caller's record says")
		(*gens)[0] = 2
		assert.Equal(t, []Ticket{TicketOf(2, 1)}, a.TakeGrants(nil), "2, behind 1's withdrawn entry (0, freed before it was taken, is no news)")
	})
	t.Run("refused once a ticket was issued, or without generations", func(t *testing.T) {
		a, err := NewAllocator([]int{4})
		require.NoError(t, err)
		require.ErrorContains(t, a.NameTicketsBy(nil), "want the caller's column of generations")
		require.NoError(t, a.RequestTicket(TicketOf(0, 1), []int{1}))
		require.ErrorContains(t, a.NameTicketsBy(&[]uint32{}), "issued 1 tickets already")
		b, err := NewAllocator([]int{4})
		require.NoError(t, err)
		_, err = b.Request([]int{1})
		require.NoError(t, err)
		require.ErrorContains(t, b.NameTicketsBy(&[]uint32{}), "issued 1 tickets already")
	})
}

// A caller that keeps the generations and names an index again at the same
// generation while its cancelled entry is still in line — a caller's bug the
// allocator cannot see — gets its request granted once, never twice: an
// entry is live only while its record waits.
func TestAllocatorCallerGenerationsNeverGrantTwice(t *testing.T) {
	gens := &[]uint32{1, 1, 1}
	a, err := NewAllocator([]int{3})
	require.NoError(t, err)
	require.NoError(t, a.NameTicketsBy(gens))
	require.NoError(t, a.RequestTicket(TicketOf(0, 1), []int{3})) // holds everything
	require.NoError(t, a.RequestTicket(TicketOf(1, 1), []int{1}))
	require.NoError(t, a.Cancel(TicketOf(1, 1)))
	require.NoError(t, a.RequestTicket(TicketOf(1, 1), []int{1})) // the same generation: two entries in line
	require.NoError(t, a.RequestTicket(TicketOf(2, 1), []int{1}))
	a.TakeGrants(nil)
	require.NoError(t, a.Free(TicketOf(0, 1)))
	assert.Equal(t, []Ticket{TicketOf(1, 1), TicketOf(2, 1)}, a.TakeGrants(nil))
	assert.Equal(t, 1, a.FreeSlots(0), "one slot each, never two for 1")
	assert.Equal(t, 0, a.Waiting())
}

// An index reused while its cancelled entry is still in line waits its own
// turn, behind the requests ahead of it: the old entry grants nothing.
func TestAllocatorRequestTicketReuseWaitsItsTurn(t *testing.T) {
	a, err := NewAllocator([]int{2})
	require.NoError(t, err)
	require.NoError(t, a.RequestTicket(TicketOf(0, 1), []int{2})) // holds everything
	require.NoError(t, a.RequestTicket(TicketOf(1, 1), []int{1}))
	require.NoError(t, a.RequestTicket(TicketOf(2, 1), []int{2}))
	require.NoError(t, a.Cancel(TicketOf(1, 1)))
	require.NoError(t, a.RequestTicket(TicketOf(1, 2), []int{1})) // behind 2 now
	a.TakeGrants(nil)
	require.NoError(t, a.Free(TicketOf(0, 1)))
	assert.Equal(t, []Ticket{TicketOf(2, 1)}, a.TakeGrants(nil), "2 first: 1's old entry is stale")
	assert.False(t, a.Granted(TicketOf(1, 2)))
	hopeless := a.HopelessTickets(nil)
	assert.Empty(t, hopeless)
	require.NoError(t, a.Free(TicketOf(2, 1)))
	assert.Equal(t, []Ticket{TicketOf(1, 2)}, a.TakeGrants(nil))
	assert.Equal(t, 0, a.Waiting())
}

// The allocator is a guard, not a ledger that trusts its caller: it refuses to
// take back a slot it did not lend, and the refusal changes nothing.
func TestAllocatorRefusesSlotsItDidNotLend(t *testing.T) {
	a, err := NewAllocator([]int{8})
	require.NoError(t, err)
	tk, err := a.Request([]int{3})
	require.NoError(t, err)
	require.Len(t, a.TakeGrants(nil), 1)
	// Corrupt the bookkeeping the way a bug would: one of the ticket's slots
	// reads free.
	a.pools[0].held[0] &^= 1 << 1
	free := a.FreeSlots(0)
	err = a.Free(tk)
	require.ErrorIs(t, err, ErrInvariant)
	assert.Contains(t, err.Error(), "not all lent")
	assert.Equal(t, free, a.FreeSlots(0), "a refused Free changes nothing")
	assert.True(t, a.Granted(tk), "the ticket is still granted")
	// A take that would lend a held slot twice is refused too.
	b, err := NewAllocator([]int{4})
	require.NoError(t, err)
	_, err = b.Request([]int{1})
	require.NoError(t, err)
	require.NoError(t, b.Err())
	err = b.pools[0].take(0, 1)
	require.ErrorIs(t, err, ErrInvariant)
	assert.Equal(t, uint64(1), b.pools[0].held[0]&1, "a refused take changes nothing")
}

// The allocator asserts that its free count is what its free runs hold, as
// slots come and go (once every 4·len(held) changes of a pool, which keeps
// the recount to about a quarter of a word per change): a count that drifted from the bitmap
// is a bug, reported through Err, after which nothing more is granted.
func TestAllocatorFreeCountIsItsFreeRuns(t *testing.T) {
	tests := []struct {
		name  string
		drift func(a *Allocator, tk Ticket) error
	}{
		{"found by a free", func(a *Allocator, tk Ticket) error {
			a.pools[0].free--
			a.pools[0].changes = 4*len(a.pools[0].held) - 1 // the audit is due at the next change
			return a.Free(tk)
		}},
		{"found by a grant", func(a *Allocator, _ Ticket) error {
			a.pools[0].free++ // says free what no run holds
			a.pools[0].changes = 4*len(a.pools[0].held) - 1
			_, err := a.Request([]int{2})
			require.NoError(t, err, "the request itself is well-formed")
			return a.Err()
		}},
		{"found within 4·len(held) changes", func(a *Allocator, _ Ticket) error {
			a.pools[0].free++
			for range 4 * len(a.pools[0].held) {
				tk, err := a.Request([]int{1})
				require.NoError(t, err)
				if a.Err() != nil {
					return a.Err()
				}
				a.TakeGrants(nil)
				if err := a.Free(tk); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAllocator([]int{130})
			require.NoError(t, err)
			tk, err := a.Request([]int{3})
			require.NoError(t, err)
			require.Len(t, a.TakeGrants(nil), 1)
			require.NoError(t, a.pools[0].counted(0))
			err = tt.drift(a, tk)
			require.ErrorIs(t, err, ErrInvariant)
			assert.Contains(t, err.Error(), "pool group 0 counts")
			require.ErrorIs(t, a.Err(), ErrInvariant)
			_, err = a.Request([]int{1})
			require.NoError(t, err)
			assert.Empty(t, a.TakeGrants(nil), "a broken allocator grants nothing more")
		})
	}
}
