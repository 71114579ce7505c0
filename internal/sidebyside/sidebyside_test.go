package sidebyside

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchtime sets -test.benchtime for the rest of the test: the default second
// of timed no-op rounds, each stopping the timer for its after, would take
// minutes of wall time.
func benchtime(t *testing.T, v string) {
	f := flag.Lookup("test.benchtime")
	require.NotNil(t, f)
	old := f.Value.String()
	require.NoError(t, f.Value.Set(v))
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

func TestRunRotatesAndMakesUpTheCount(t *testing.T) {
	const minOps = 40
	benchtime(t, "1ms") // a duration: rounds past b.Loop's make up minOps
	var order []int
	var afters int
	ways := make([]Way, 3)
	for k := range ways {
		ways[k] = Way{Name: string(rune('a' + k)), Op: func(*testing.B) {
			order = append(order, k)
			// Slow enough that b.Loop's millisecond ends after a few
			// rounds, long before minOps.
			time.Sleep(100 * time.Microsecond)
		}}
	}
	var medians []time.Duration
	testing.Benchmark(func(b *testing.B) {
		order, afters = order[:0], 0
		medians = Run(b, ways, func(*testing.B) { afters++ }, minOps)
	})
	require.Len(t, medians, len(ways))
	require.Zero(t, len(order)%len(ways), "every round does every way once")
	rounds := len(order) / len(ways)
	assert.GreaterOrEqual(t, rounds, minOps+1, "the warm-up round, then at least minOps a way")
	assert.Equal(t, len(order), afters, "after runs once after every operation")
	for i := range rounds {
		round := order[i*len(ways) : (i+1)*len(ways)]
		assert.ElementsMatch(t, []int{0, 1, 2}, round, "round %d", i)
		// The warm-up round is round 0 and the first timed one is round 0
		// again: both start with the first way.
		first := 0
		if i > 0 {
			first = (i - 1) % len(ways)
		}
		if !assert.Equal(t, first, round[0], "round %d starts with way %d", i, first) {
			break
		}
	}
}

func TestRunKeepsAFixedCount(t *testing.T) {
	benchtime(t, "5x")
	calls := 0
	testing.Benchmark(func(b *testing.B) {
		calls = 0
		Run(b, []Way{{Name: "a", Op: func(*testing.B) { calls++ }}}, nil, 1000)
	})
	assert.Equal(t, 1+5, calls, "the warm-up and the five asked for; no rounds made up")
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{7}, 7},
		{[]time.Duration{9, 1, 5}, 5},
		{[]time.Duration{4, 1, 3, 2}, 3},
		{[]time.Duration{2, 2, 100, 1, 2}, 2},
	} {
		assert.Equal(t, tc.want, Median(tc.in), "%v", tc.in)
	}
}
