package pools_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/pools"
)

func TestRegisterRefusesBadSpans(t *testing.T) {
	var r pools.Registry
	_, err := r.Register(0x1000, 0x100)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		addr uintptr
		size int
		want string
	}{
		{"overlaps the end", 0x10ff, 1, "overlaps"},
		{"overlaps the start", 0x0f00, 0x101, "overlaps"},
		{"the same span", 0x1000, 0x100, "overlaps"},
		{"zero address", 0, 10, "non-zero address"},
		{"zero size", 0x5000, 0, "positive size"},
		{"negative size", 0x5000, -1, "positive size"},
		{"wraps around", ^uintptr(0) - 1, 10, "does not wrap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Register(tc.addr, tc.size)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, 1, r.Live(), "a refused registration registers nothing")
		})
	}
	_, err = r.Register(0x1100, 0x10)
	assert.NoError(t, err, "adjacent is not overlapping")
	assert.Equal(t, 2, r.Live())
}

func TestCloseRevokesExactlyItsRegistration(t *testing.T) {
	var r pools.Registry
	old, err := r.Register(0x1000, 0x100)
	require.NoError(t, err)
	require.NoError(t, old.Close())
	require.NoError(t, old.Close(), "closing again does nothing")
	assert.Zero(t, r.Live())
	newer, err := r.Register(0x1000, 0x100)
	require.NoError(t, err, "the span is free again")
	require.NoError(t, old.Close())
	assert.Equal(t, 1, r.Live(), "an old handle never revokes a newer registration of the same address")
	require.NoError(t, newer.Close())
	assert.Zero(t, r.Live())
}

func TestConcurrentRegistrationsNeverOverlap(t *testing.T) {
	var r pools.Registry
	var wg sync.WaitGroup
	won := make([]bool, 8)
	for i := range won {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Register(0x1000+uintptr(i), 0x100) // every pair overlaps
			won[i] = err == nil
		}()
	}
	wg.Wait()
	n := 0
	for _, w := range won {
		if w {
			n++
		}
	}
	assert.Equal(t, 1, n, "exactly one of mutually overlapping spans registers")
	assert.Equal(t, 1, r.Live())
}
