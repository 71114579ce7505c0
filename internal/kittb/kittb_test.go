package kittb

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// Run reports a passing check as nil, a failing one as an error holding what
// it printed, stops the check at FailNow without failing the caller, counts
// a skip as a failure, and lets other panics through.
func TestRun(t *testing.T) {
	assert.NoError(t, Run("pass", func(tb TB) { tb.Logf("fine") }))
	err := Run("fail", func(tb TB) {
		tb.Errorf("first %d", 1)
		tb.FailNow()
		tb.Errorf("never")
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "first 1")
	assert.NotContains(t, err.Error(), "never")
	assert.ErrorContains(t, Run("skip", func(tb TB) { tb.(interface{ Skip(...any) }).Skip("why") }), "skipped")
	assert.Panics(t, func() { _ = Run("panics", func(TB) { panic("boom") }) }, "other panics propagate")
}

// A failure file rapid writes goes where FailFilesIn says, the report names
// the new place, and the package's testdata/ is left as it was.
func TestFailFilesIn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fails")
	err := Run("TestFailFilesIn", func(tb TB) {
		rapid.Check(FailFilesIn(tb, dir), func(rt *rapid.T) {
			if rapid.IntRange(0, 9).Draw(rt, "n") > 4 {
				rt.Fatal("too big")
			}
		})
	})
	require.Error(t, err)
	files, gerr := filepath.Glob(filepath.Join(dir, "*.fail"))
	require.NoError(t, gerr)
	require.Len(t, files, 1, err.Error())
	assert.Contains(t, err.Error(), "-rapid.failfile="+strconv.Quote(files[0]))
	assert.NoDirExists(t, "testdata")
	tb := &recorder{name: "x"}
	assert.Same(t, tb, FailFilesIn(tb, "").(*recorder), "no directory: rapid's own place")
}
