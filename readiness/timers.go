package readiness

// timer is the one armed deadline of one lease: its request deadline while
// its outcome is pending, then its containment deadline.
type timer struct {
	at int64 // clock nanoseconds
	id uint32
}

// timerHeap is a binary min-heap on at, indexed by lease id so that a lease's
// timer is disarmed the moment it stops mattering (the outcome arrived, the
// lease was fenced or released). Arming and disarming cost O(log n); finding
// what expired costs O(expired + 1), so an idle progress round does not depend
// on how many leases are in flight. Its size is bounded by the leases that
// still need it, and it never allocates once grown.
type timerHeap struct {
	h   []timer
	pos []int32 // pos[id] is id's index in h, or -1
}

// grow makes room for lease ids below n.
func (t *timerHeap) grow(n int) {
	for len(t.pos) < n {
		t.pos = append(t.pos, -1)
	}
}

func (t *timerHeap) index(id uint32) int32 {
	t.grow(int(id) + 1)
	return t.pos[id]
}

// arm sets id's timer to at, replacing any earlier one.
func (t *timerHeap) arm(id uint32, at int64) {
	if i := t.index(id); i >= 0 {
		t.h[i].at = at
		t.fix(int(i))
		return
	}
	t.h = append(t.h, timer{at: at, id: id})
	i := len(t.h) - 1
	t.pos[id] = int32(i)
	t.up(i)
}

// disarm removes id's timer, if any.
func (t *timerHeap) disarm(id uint32) {
	if int(id) >= len(t.pos) || t.pos[id] < 0 {
		return
	}
	i := int(t.pos[id])
	t.pos[id] = -1
	last := len(t.h) - 1
	if i != last {
		t.h[i] = t.h[last]
		t.pos[t.h[i].id] = int32(i)
	}
	t.h = t.h[:last]
	if i != last {
		t.fix(i)
	}
}

// popExpired removes and returns the lease of the earliest timer if it is due.
func (t *timerHeap) popExpired(now int64) (uint32, bool) {
	if len(t.h) == 0 || t.h[0].at > now {
		return 0, false
	}
	id := t.h[0].id
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
		if t.h[p].at <= t.h[i].at {
			break
		}
		t.swap(i, p)
		i, moved = p, true
	}
	return moved
}

func (t *timerHeap) down(i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(t.h) && t.h[l].at < t.h[m].at {
			m = l
		}
		if r < len(t.h) && t.h[r].at < t.h[m].at {
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
	t.h[i], t.h[j] = t.h[j], t.h[i]
	t.pos[t.h[i].id] = int32(i)
	t.pos[t.h[j].id] = int32(j)
}
