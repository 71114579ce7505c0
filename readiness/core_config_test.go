package readiness_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"io"
	"log/slog"

	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// discard is a logger that writes nothing: the tests read what they check.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// A config is refused with every problem named at once, and a duration that
// would wrap a deadline's int64 nanoseconds is one of them: an engine that
// took it would time every lease out at once.
func TestConfigNamesEveryProblem(t *testing.T) {
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 2, SlotBytes: 16})
	require.NoError(t, err)
	cfg := readiness.Config{
		Memory: mem, TokensPerBlock: 0,
		RequestTimeout: readiness.MaxDuration + 1, DrainGrace: -time.Second, RecoverEvery: 1 << 62,
		MaxOutstanding: -1, Logger: discard,
	}
	_, err = readiness.NewCore(cfg)
	require.Error(t, err)
	for _, want := range []string{
		"TokensPerBlock = 0; want a positive number",
		"RequestTimeout = 640511h56m49.213693953s; want at most 640511h56m49.213693952s",
		"DrainGrace = -1s; want a non-negative duration",
		"RecoverEvery = 1281023h53m38.427387904s; want at most",
		"MaxOutstanding = -1; want a non-negative number",
	} {
		assert.Contains(t, err.Error(), want)
	}
	cfg.TokensPerBlock, cfg.RequestTimeout, cfg.DrainGrace, cfg.RecoverEvery, cfg.MaxOutstanding = 32, readiness.MaxDuration, readiness.MaxDuration, 0, 0
	c, err := readiness.NewCore(cfg)
	require.NoError(t, err, "the bound itself is taken")
	c.Tick(time.Now())
}
