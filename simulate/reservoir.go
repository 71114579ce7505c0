package simulate

import (
	"math/rand/v2"
	"slices"
	"time"
)

// maxLatencySamples bounds the latencies a run keeps.
const maxLatencySamples = 1 << 15

// reservoir keeps a uniform sample of at most maxLatencySamples durations
// (Vitter's algorithm R), so that a run's memory does not grow with its
// length. Up to that many, it keeps them all. Its draws are seeded: a run
// stays deterministic.
type reservoir struct {
	xs  []time.Duration
	n   int
	rng *rand.Rand
}

func newReservoir(seed uint64) reservoir {
	return reservoir{rng: rand.New(rand.NewPCG(seed, 0x72657365727669))}
}

func (r *reservoir) add(d time.Duration) {
	r.n++
	if len(r.xs) < maxLatencySamples {
		r.xs = append(r.xs, d)
		return
	}
	if i := r.rng.IntN(r.n); i < maxLatencySamples {
		r.xs[i] = d
	}
}

// sorted returns the sample, sorted.
func (r *reservoir) sorted() []time.Duration {
	out := slices.Clone(r.xs)
	slices.Sort(out)
	return out
}
