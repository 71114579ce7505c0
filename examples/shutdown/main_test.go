package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain runs the example's main instead of the tests when the test binary
// is started as the example (by TestCtrlCDrainsTheEngine).
func TestMain(m *testing.M) {
	if os.Getenv("KVREADY_SHUTDOWN_EXAMPLE") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The example as a process: once it serves, a real SIGINT ends its Wait with
// context.Canceled, and it shuts the engine down with a fresh context —
// drained, nothing quarantined, exit status 0 — within the test's bound.
func TestCtrlCDrainsTheEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KVREADY_SHUTDOWN_EXAMPLE=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan(), "the example printed nothing before it exited: %s", stderr.String())
	require.Equal(t, "serving; Ctrl-C to stop", lines.Text())

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	var rest []string
	for lines.Scan() {
		rest = append(rest, lines.Text())
	}
	require.NoError(t, cmd.Wait(), "the example exited with an error after Ctrl-C: %s", stderr.String())
	require.Len(t, rest, 1, "after Ctrl-C the example prints one line: %q", rest)
	assert.Regexp(t, regexp.MustCompile(`^interrupted after [1-9][0-9]* requests; drained: true, slots quarantined: 0, leases in doubt: 0, safe to release: true$`), rest[0])
	assert.Empty(t, stderr.String())
}

// The example's body, its ctx cancelled once it serves (as the signal
// would): it takes the cancelled Wait for a stop, not a failure, and drains
// with a context of its own (Shutdown with the cancelled ctx would return
// ctx's error without draining).
func TestRunStopsOnCancelAndDrains(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := false
	out := &signalWriter{serving: cancel}
	require.NoError(t, run(ctx, func() { stopped = true }, out))
	assert.True(t, stopped, "run calls stop once ctx ended, so that a second Ctrl-C kills the process")
	assert.Contains(t, out.String(), "drained: true, slots quarantined: 0, leases in doubt: 0, safe to release: true")
}

// signalWriter cancels once the example says it serves.
type signalWriter struct {
	strings.Builder
	serving func()
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), "serving") {
		w.serving()
	}
	return w.Builder.Write(p)
}
