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
	var res Result
	testing.Benchmark(func(b *testing.B) {
		order, afters = order[:0], 0
		res = Run(b, ways, Options{After: func(*testing.B) { afters++ }, MinOps: minOps})
	})
	require.Len(t, res.Warm, len(ways))
	assert.Nil(t, res.Cold, "no warm-up operations kept apart with blocks of one")
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
		Run(b, []Way{{Name: "a", Op: func(*testing.B) { calls++ }}}, Options{MinOps: 1000})
	})
	assert.Equal(t, 1+5, calls, "the warm-up and the five asked for; no rounds made up")
}

func TestRunBlocksKeepTheirFirstApart(t *testing.T) {
	const minOps, block = 20, 3
	benchtime(t, "1ms")
	// A clock of the test's own: each operation moves it on by what the
	// operation says it took — way k's 10+k units, and the first of a block
	// 100 more — so that the medians are known exactly.
	var clock time.Time
	old := now
	now = func() time.Time { return clock }
	t.Cleanup(func() { now = old })
	var order []int
	var calls [2]int
	ways := make([]Way, 2)
	for k := range ways {
		ways[k] = Way{Name: string(rune('a' + k)), Op: func(*testing.B) {
			d := time.Duration(10 + k)
			if calls[k]%block == 0 {
				d += 100
			}
			calls[k]++
			order = append(order, k)
			clock = clock.Add(d)
			time.Sleep(100 * time.Microsecond) // for b.Loop's own clock to run out
		}}
	}
	var res Result
	testing.Benchmark(func(b *testing.B) {
		order, calls = order[:0], [2]int{}
		res = Run(b, ways, Options{MinOps: minOps, Block: block})
	})
	for i := 0; i+block <= len(order); i += block {
		assert.Equal(t, []int{order[i], order[i], order[i]}, order[i:i+block], "a way's block runs in a row")
	}
	rounds := len(order) / (block * len(ways))
	assert.GreaterOrEqual(t, rounds*(block-1), minOps+block-1, "minOps warm operations a way, besides the warm-up round's")
	assert.Equal(t, Result{Warm: []time.Duration{10, 11}, Cold: []time.Duration{110, 111}}, res)
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
