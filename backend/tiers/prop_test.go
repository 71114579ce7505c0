package tiers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// recorder is a tier that remembers what it was handed and which of its
// attempts its own Quiesce (or TryQuiesce) proved, and counts the times it
// was asked about an attempt it never returned. A quiet one's attempts have
// no completion callback (contract.Notifier): the stack waits for them on a
// goroutine of its own, through Settle.
type recorder struct {
	*mem.Backend
	quiet   bool
	mu      sync.Mutex
	handed  map[contract.Attempt][]contract.Name
	proven  map[contract.Attempt]bool
	foreign int
}

// silent is an attempt without Notify.
type silent struct{ inner contract.Attempt }

func (s *silent) Poll() contract.Outcome { return s.inner.Poll() }
func (s *silent) RequestCancel() (contract.CancelDisposition, error) {
	return contract.RequestCancel(s.inner)
}

// inner is the list as the wrapped backend returned it.
func (r *recorder) inner(list []contract.Attempt) []contract.Attempt {
	out := make([]contract.Attempt, len(list))
	for i, a := range list {
		out[i] = a
		if s, ok := a.(*silent); ok {
			out[i] = s.inner
		}
	}
	return out
}

func (r *recorder) Settle(ctx context.Context, list []contract.Attempt) error {
	return r.Backend.Settle(ctx, r.inner(list))
}

func newRecorder(b *mem.Backend) *recorder {
	return &recorder{Backend: b, handed: map[contract.Attempt][]contract.Name{}, proven: map[contract.Attempt]bool{}}
}

func (r *recorder) keep(a contract.Attempt, err error, ext contract.CacheExtent) (contract.Attempt, error) {
	if a != nil && r.quiet {
		a = &silent{a}
	}
	if a != nil {
		var ns []contract.Name
		for _, u := range ext.All() {
			ns = append(ns, u.Name)
		}
		r.mu.Lock()
		r.handed[a] = ns
		r.mu.Unlock()
	}
	return a, err
}

func (r *recorder) Fetch(ext contract.CacheExtent, route contract.Route) (contract.Attempt, error) {
	a, err := r.Backend.Fetch(ext, route)
	return r.keep(a, err, ext)
}

func (r *recorder) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	a, err := r.Backend.Publish(ext)
	return r.keep(a, err, ext)
}

func (r *recorder) mark(list []contract.Attempt, proven bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range list {
		if _, ok := r.handed[a]; !ok {
			r.foreign++
		}
		if proven {
			r.proven[a] = true
		}
	}
}

func (r *recorder) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	ok, err := r.Backend.Quiesce(ctx, r.inner(list))
	r.mark(list, ok && err == nil)
	return ok, err
}

func (r *recorder) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	acc, err := r.Backend.TryQuiesce(r.inner(list))
	r.mark(list, acc == contract.AccessEnded && err == nil)
	return acc, err
}

// unproven lists the attempts the tier was handed that it has not proven.
func (r *recorder) unproven() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for a, ns := range r.handed {
		if !r.proven[a] {
			out = append(out, fmt.Sprintf("an attempt of %d units", len(ns)))
		}
	}
	return out
}

// behaviour is a drawn tier's way of answering.
var behaviours = []mem.Mode{mem.Normal, mem.Miss, mem.Fail, mem.QuiesceNotYet, mem.SlowQuiesce}

// TestPropertyDrawnStacks draws stacks of 1–3 in-memory tiers, each holding
// some units and answering as drawn (serve, miss, fail, a proof that is
// slow or not yet there; with a completion callback or without one), and a
// fetch of some units, and checks: the served
// names are a subset of the requested ones; no unit a failing tier was
// handed is reported served (the stack fails); the outcome is exactly what
// the chain's model answers; Quiesce is true only once every tier handed
// units proved its own access (promotions included), and no tier is asked
// about an attempt it was not handed.
func TestPropertyDrawnStacks(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 3).Draw(rt, "tiers")
		const units = 6
		m := newMemory(units)
		var recs []*recorder
		var ts []tiers.Tier
		modes := make([]mem.Mode, n)
		holds := make([][]int, n)
		for i := range n {
			modes[i] = rapid.SampledFrom(behaviours).Draw(rt, fmt.Sprintf("mode%d", i))
			holds[i] = rapid.SliceOfDistinct(rapid.IntRange(0, units-1), rapid.ID[int]).Draw(rt, fmt.Sprintf("holds%d", i))
			b, err := mem.New(m, mem.WithMode(modes[i]), mem.WithSlowQuiesce(time.Millisecond),
				mem.WithQuiesceNotYet(rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("notyet%d", i))))
			if err != nil {
				rt.Fatal(err)
			}
			defer b.Close()
			for _, u := range holds[i] {
				b.Put(extName, name(u), row(u))
			}
			r := newRecorder(b)
			r.quiet = rapid.Bool().Draw(rt, fmt.Sprintf("quiet%d", i))
			recs = append(recs, r)
			ts = append(ts, tiers.Tier{Name: fmt.Sprintf("t%d", i), Fetcher: r, Publisher: r})
		}
		stack, err := tiers.New(ts)
		if err != nil {
			rt.Fatal(err)
		}
		defer stack.Close()
		want := rapid.SliceOfNDistinct(rapid.IntRange(0, units-1), 1, units, rapid.ID[int]).Draw(rt, "fetch")
		a, err := stack.Fetch(extentOf(rt, want...), nil)
		if err != nil {
			rt.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		if err := stack.Settle(ctx, []contract.Attempt{a}); err != nil {
			rt.Fatal(err)
		}
		got := a.Poll()

		// The chain's model: each tier in order answers for the units left.
		left := map[int]bool{}
		for _, u := range want {
			left[u] = true
		}
		var model contract.Outcome
		var servedBy []int
		failedHanded := map[int]bool{}
		for i := range n {
			if len(left) == 0 {
				break
			}
			if modes[i] == mem.Fail {
				model = contract.Failed{}
				for u := range left {
					failedHanded[u] = true
				}
				break
			}
			if modes[i] == mem.Miss {
				continue
			}
			for _, u := range holds[i] {
				if left[u] {
					delete(left, u)
					servedBy = append(servedBy, u)
				}
			}
		}
		if model == nil {
			var ns []contract.Name
			for _, u := range servedBy {
				ns = append(ns, name(u))
			}
			model = contract.Delivered{Served: contract.NewNameSet(ns...)}
		}

		switch x := got.(type) {
		case contract.Delivered:
			for nm := range x.Served.All() {
				if !inSet(want, nm) {
					rt.Fatalf("served %x…, never requested", nm[:4])
				}
				for u := range failedHanded {
					if nm == name(u) {
						rt.Fatalf("unit %d reported served, though a failing tier was handed it", u)
					}
				}
			}
			d, ok := model.(contract.Delivered)
			if !ok || !d.Served.Equal(x.Served) {
				rt.Fatalf("the stack answered %v, the model %v", got, model)
			}
		case contract.Failed:
			if _, ok := model.(contract.Failed); !ok {
				rt.Fatalf("the stack answered %v (%s), the model %v", got, x.Reason, model)
			}
		default:
			rt.Fatalf("the stack answered %v, the model %v", got, model)
		}

		// The proof: ask until true (QuiesceNotYet answers false a few
		// times); at every true, every tier's attempts are proven by it.
		proven := false
		for range 10 {
			qctx, qcancel := context.WithTimeout(context.Background(), bound)
			ok, err := stack.Quiesce(qctx, []contract.Attempt{a})
			qcancel()
			if err != nil {
				rt.Fatalf("Quiesce: %v", err)
			}
			if ok {
				proven = true
				break
			}
		}
		if !proven {
			rt.Fatal("never proven, though every tier eventually proves")
		}
		for i, r := range recs {
			if u := r.unproven(); len(u) > 0 {
				rt.Fatalf("the stack answered true while tier %d had not proven %v", i, u)
			}
			if r.foreign > 0 {
				rt.Fatalf("tier %d was asked about %d attempts it was never handed", i, r.foreign)
			}
		}
	})
}

func inSet(idx []int, n contract.Name) bool {
	for _, i := range idx {
		if name(i) == n {
			return true
		}
	}
	return false
}
