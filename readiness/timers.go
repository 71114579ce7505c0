package readiness

// timer is one armed deadline: lease id and generation, so that a timer whose
// lease has moved on (released, or re-lent under a new generation) is dropped
// when it fires rather than searched for and removed when the lease changes.
type timer struct {
	at  int64 // clock nanoseconds
	id  uint32
	gen uint32
}

// timerHeap is a binary min-heap on at. Arming costs O(log n) and finding what
// expired costs O(expired + 1), so an idle progress round does not depend on how
// many leases are in flight. It never allocates once its slice has grown.
type timerHeap struct{ h []timer }

func (t *timerHeap) push(x timer) {
	t.h = append(t.h, x)
	i := len(t.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if t.h[p].at <= t.h[i].at {
			break
		}
		t.h[p], t.h[i] = t.h[i], t.h[p]
		i = p
	}
}

// popExpired removes and returns the earliest timer if it is due at now.
func (t *timerHeap) popExpired(now int64) (timer, bool) {
	if len(t.h) == 0 || t.h[0].at > now {
		return timer{}, false
	}
	top := t.h[0]
	last := len(t.h) - 1
	t.h[0] = t.h[last]
	t.h = t.h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(t.h) && t.h[l].at < t.h[m].at {
			m = l
		}
		if r < len(t.h) && t.h[r].at < t.h[m].at {
			m = r
		}
		if m == i {
			break
		}
		t.h[m], t.h[i] = t.h[i], t.h[m]
		i = m
	}
	return top, true
}

func (t *timerHeap) len() int { return len(t.h) }
