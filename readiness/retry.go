package readiness

import "container/heap"

// retry is one Quiesce retry due at a time on the engine's clock.
type retry struct {
	at int64
	h  Handle
}

// retryHeap orders the scheduled retries by due time. Entries are checked when
// they come due (a lease fenced or contained meanwhile is skipped), and a lease
// has at most one scheduled at a time, so the heap is bounded by the leases
// whose access is unproven.
type retryHeap struct{ h retries }

type retries []retry

func (r retries) Len() int           { return len(r) }
func (r retries) Less(i, j int) bool { return r[i].at < r[j].at }
func (r retries) Swap(i, j int)      { r[i], r[j] = r[j], r[i] }
func (r *retries) Push(x any)        { *r = append(*r, x.(retry)) }
func (r *retries) Pop() any {
	old := *r
	x := old[len(old)-1]
	*r = old[:len(old)-1]
	return x
}

func (q *retryHeap) push(at int64, h Handle) { heap.Push(&q.h, retry{at: at, h: h}) }

// pop removes and returns the earliest retry if it is due at now.
func (q *retryHeap) pop(now int64) (Handle, bool) {
	if len(q.h) == 0 || q.h[0].at > now {
		return Handle{}, false
	}
	return heap.Pop(&q.h).(retry).h, true
}
