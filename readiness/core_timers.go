package readiness

import "github.com/kvready/kvready/internal/grow"

// timerHeap holds the one armed deadline of each lease that needs one — its
// request deadline while its outcome is pending, then its containment
// deadline: a binary min-heap on the time, indexed by lease id so that a
// lease's timer is disarmed the moment it stops mattering (the outcome
// arrived, the lease was fenced or released). Arming and disarming cost
// O(log n); finding what expired costs O(expired + 1), so an idle progress
// round does not depend on how many leases are in flight. Its size is bounded
// by the leases that still need it, and it never allocates once grown.
//
// Times and ids are parallel arrays, 12 bytes a timer: a struct of the two
// would be padded to 16, and a timer is kept for every lease in flight.
type timerHeap struct {
	at  []int64  // clock nanoseconds, heap-ordered
	id  []uint32 // id[i] is the lease whose timer at[i] is
	pos []int32  // pos[id] is id's index in the heap, or -1
}

// grow makes room for lease ids below n.
func (t *timerHeap) grow(n int) {
	if old := len(t.pos); old < n {
		t.pos = grow.Len(t.pos, n)
		for i := old; i < n; i++ {
			t.pos[i] = -1
		}
	}
}

func (t *timerHeap) index(id uint32) int32 {
	t.grow(int(id) + 1)
	return t.pos[id]
}

// arm sets id's timer to at, replacing any earlier one.
func (t *timerHeap) arm(id uint32, at int64) {
	if i := t.index(id); i >= 0 {
		t.at[i] = at
		t.fix(int(i))
		return
	}
	i := len(t.at)
	t.at, t.id = grow.Len(t.at, i+1), grow.Len(t.id, i+1)
	t.at[i], t.id[i] = at, id
	t.pos[id] = int32(i)
	t.up(i)
}

// armBy makes id's timer fire at or before at: it arms it, or moves it
// earlier, and leaves an earlier timer alone. A timer that fires early costs
// one re-arm in expire; moving it later on every state change would cost a
// heap fix each time.
func (t *timerHeap) armBy(id uint32, at int64) {
	if i := t.index(id); i >= 0 && t.at[i] <= at {
		return
	}
	t.arm(id, at)
}

// disarm removes id's timer, if any.
func (t *timerHeap) disarm(id uint32) {
	if int(id) >= len(t.pos) || t.pos[id] < 0 {
		return
	}
	i := int(t.pos[id])
	t.pos[id] = -1
	last := len(t.at) - 1
	if i != last {
		t.at[i], t.id[i] = t.at[last], t.id[last]
		t.pos[t.id[i]] = int32(i)
	}
	t.at, t.id = t.at[:last], t.id[:last]
	if i != last {
		t.fix(i)
	}
}

// popExpired removes and returns the lease of the earliest timer if it is due.
func (t *timerHeap) popExpired(now int64) (uint32, bool) {
	if len(t.at) == 0 || t.at[0] > now {
		return 0, false
	}
	id := t.id[0]
	t.disarm(id)
	return id, true
}

func (t *timerHeap) fix(i int) {
	if !t.up(i) {
		t.down(i)
	}
}

func (t *timerHeap) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if t.at[p] <= t.at[i] {
			break
		}
		t.swap(i, p)
		i, moved = p, true
	}
	return moved
}

func (t *timerHeap) down(i int) {
	n := len(t.at)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && t.at[l] < t.at[m] {
			m = l
		}
		if r < n && t.at[r] < t.at[m] {
			m = r
		}
		if m == i {
			return
		}
		t.swap(i, m)
		i = m
	}
}

func (t *timerHeap) swap(i, j int) {
	t.at[i], t.at[j] = t.at[j], t.at[i]
	t.id[i], t.id[j] = t.id[j], t.id[i]
	t.pos[t.id[i]] = int32(i)
	t.pos[t.id[j]] = int32(j)
}

// next returns the earliest armed time, if any timer is armed.
func (t *timerHeap) next() (int64, bool) {
	if len(t.at) == 0 {
		return 0, false
	}
	return t.at[0], true
}
