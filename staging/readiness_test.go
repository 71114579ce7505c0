package staging

import (
	"math"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadinessSpecExamples(t *testing.T) {
	// SPEC §3: rows served of 3 at 32 tokens per block.
	for _, tc := range []struct {
		name   string
		served []int
		want   int
	}{
		{"{0,1,2}", []int{0, 1, 2}, 96},
		{"{0,1}", []int{0, 1}, 64},
		{"{0,2}", []int{0, 2}, 32},
		{"{} miss", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := GroupRun{LayerGroup: 0, Ordinals: []int{0, 1, 2}, Names: []contract.Name{nameOf(0), nameOf(1), nameOf(2)}, Addresses: []int{1, 2, 3}}
			v, err := NewView(run)
			require.NoError(t, err)
			var names []contract.Name
			for _, i := range tc.served {
				names = append(names, nameOf(i))
			}
			masks, err := ServedMasks(v, contract.NewNameSet(names...))
			require.NoError(t, err)
			iv, err := ReadinessOfView(32, 0, v, masks)
			require.NoError(t, err)
			assert.Equal(t, Interval{0, tc.want}, iv)
			iv, err = Readiness(32, 0, masks)
			require.NoError(t, err)
			assert.Equal(t, Interval{0, tc.want}, iv)
		})
	}
}

func TestReadinessEveryGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		first   int
		arrived [][]bool
		want    int
	}{
		{"shortest group wins", 0, [][]bool{{true, true, true}, {true, false, true}}, 32},
		{"known prefix counts", 2, [][]bool{{true}, {true, true}}, 96},
		{"known prefix, nothing new", 2, [][]bool{{false}, {true}}, 64},
		{"no groups", 3, nil, 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv, err := Readiness(32, tc.first, tc.arrived)
			require.NoError(t, err)
			assert.Equal(t, tc.want, iv.UsableUntil)
		})
	}
}

func TestReadinessOfViewOrdinals(t *testing.T) {
	// Rows before the first unknown block, and rows after a hole, do not extend the run.
	v, err := NewView(GroupRun{LayerGroup: 0, Ordinals: []int{1, 2, 3, 5}, Names: []contract.Name{nameOf(1), nameOf(2), nameOf(3), nameOf(5)}, Addresses: []int{1, 2, 3, 4}})
	require.NoError(t, err)
	iv, err := ReadinessOfView(16, 2, v, [][]bool{{true, true, true, true}})
	require.NoError(t, err)
	assert.Equal(t, 4*16, iv.UsableUntil)

	_, err = ReadinessOfView(16, 0, v, [][]bool{{true}})
	assert.ErrorContains(t, err, "want one per row")
	_, err = ReadinessOfView(16, 0, v, nil)
	assert.ErrorContains(t, err, "want one per run")
	bad, err := NewView(GroupRun{LayerGroup: 0, Ordinals: []int{2, 1}})
	require.NoError(t, err)
	_, err = ReadinessOfView(16, 0, bad, [][]bool{{true, true}})
	assert.ErrorContains(t, err, "not strictly increasing")
}

func TestReadinessRefusals(t *testing.T) {
	_, err := Readiness(0, 0, nil)
	assert.ErrorContains(t, err, "tokens per block is 0")
	_, err = Readiness(32, -1, nil)
	assert.ErrorContains(t, err, "first unknown block is -1")
	_, err = Readiness(2, math.MaxInt-1, [][]bool{{true}})
	assert.ErrorContains(t, err, "overflow")
}

func TestCombine(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []Interval
		want Interval
		ok   bool
	}{
		{"one", []Interval{{0, 96}}, Interval{0, 96}, true},
		{"largest floor, smallest until", []Interval{{0, 96}, {32, 128}, {16, 64}}, Interval{32, 64}, true},
		{"target and draft", []Interval{{0, 96}, {0, 32}}, Interval{0, 32}, true},
		{"empty means recompute from 0", []Interval{{64, 96}, {0, 32}}, Interval{}, false},
		{"an empty input empties the result", []Interval{{10, 5}}, Interval{}, false},
		{"nothing to combine", nil, Interval{}, false},
		{"a single position is not empty", []Interval{{32, 32}}, Interval{32, 32}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Combine(tc.in...)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.ok, ok)
		})
	}
}

func TestReadinessDoesNotAllocate(t *testing.T) {
	arrived := [][]bool{{true, true, false}, {true, true, true}}
	ivs := []Interval{{0, 96}, {0, 64}}
	allocs := testing.AllocsPerRun(100, func() {
		iv, _ := Readiness(32, 0, arrived)
		ivs[0] = iv
		_, _ = Combine(ivs...)
	})
	assert.Zero(t, allocs)
}
