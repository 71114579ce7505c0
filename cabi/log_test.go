package main

import (
	"context"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stderrOf runs f with os.Stderr a pipe and returns what f wrote to it.
func stderrOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stderr
	os.Stderr = w
	f()
	os.Stderr = saved
	require.NoError(t, w.Close())
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(out)
}

// With no kvready_set_log sink, the library's lines — slog's, the log
// package's and go-redis's — go to stderr as one line each, "time LEVEL
// message key=value", through the one handler that kvready_set_log
// redirects.
func TestLogLinesGoThroughOneHandler(t *testing.T) {
	require.Nil(t, logTo.Load(), "no sink set in the Go tests")
	_, ok := slog.Default().Handler().(*lineHandler)
	require.True(t, ok, "slog's default handler is the library's: %T", slog.Default().Handler())
	out := stderrOf(t, func() {
		slog.Default().With("engine", 1).WithGroup("g").Error("kvready: something", "lease", "lease#0.1", "why", "a b")
		log.Printf("a log package line")
		redisLog{}.Printf(context.Background(), "pool: %d dials failed", 3)
	})
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 3, out)
	assert.Regexp(t, `^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ERROR kvready: something engine=1 g\.lease=lease#0\.1 g\.why="a b"$`, lines[0])
	assert.Regexp(t, `^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d INFO a log package line$`, lines[1])
	assert.Regexp(t, `^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d WARN redis: pool: 3 dials failed$`, lines[2])
}
