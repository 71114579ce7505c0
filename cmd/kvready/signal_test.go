package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cliEnv, when set, makes this test binary be the kvready command: it runs
// its arguments as kvready would, so that a test can send it a real signal.
const cliEnv = "KVREADY_TEST_AS_CLI"

func TestMain(m *testing.M) {
	prefillProcess() // a disaggregated run over UCX started this binary as its prefill process
	if os.Getenv(cliEnv) != "" {
		main()
	}
	os.Exit(m.Run())
}

// interruptBound bounds each wait on the interrupted child: its first
// progress line, and its exit once interrupted.
const interruptBound = 3 * time.Minute

// Ctrl-C during a long run: the child is sent SIGINT once it has printed its
// first progress line. It exits 130, having printed the summary so far (the
// unfinished requests counted) and written the report.
func TestSimulateInterruptedPrintsTheSummaryAndWritesTheReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	status, out, errOut := interruptCLI(t, "simulate kvready: ", "simulate", "--requests", "40000", "--report", dir)
	assert.Equal(t, exitInterrupted, status, "stderr: %s", errOut)
	assert.Contains(t, out, "kvready simulate — manager: kvready, 40000 requests")
	assert.Contains(t, out, "interrupted: the run was stopped before it finished", "the summary says so in plain words")
	assert.Regexp(t, `not run to the end +[1-9][0-9]* of 40000 requests, stopped by the interrupt`, out, "the summary counts what did not end")
	assert.NotContains(t, out, "UNFINISHED")
	assert.NotContains(t, out+errOut, "context canceled")
	assert.Contains(t, out, "recycled before fence")
	// Rule 10: the interrupted run drained. Its leases still waiting for an
	// outcome were cancelled locally and released once proven: a healthy
	// backend proves every one, so nothing was contained.
	assert.NotContains(t, out, "CAPACITY LOST", "an interrupted healthy run loses no capacity")
	assert.Contains(t, out, "report: "+dir+"/index.html")
	assert.Contains(t, errOut, "kvready: interrupted: the summary and the report cover the run so far")
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err, "the report was written")
	assert.Contains(t, string(page), "Interrupted: the run was stopped before it finished")
	assert.Contains(t, string(page), "not run to the end")
	assert.NotContains(t, string(page), "UNFINISHED")
	assert.Contains(t, string(page), `<img src="safety.svg"`)
}

// interruptCLI runs this binary as kvready with args, in a process group of
// its own, and sends the group SIGINT — as Ctrl-C at a terminal reaches
// every process of the command — once a line of its stderr starts with
// progress. It answers the exit status and the output, once every process
// of the group is gone (the command's children included). Every wait is
// bounded by interruptBound.
func interruptCLI(t *testing.T, progress string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*interruptBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout = &out
	stderrPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	group := -cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(group, syscall.SIGKILL) })

	// Read stderr as it comes; signal at the first progress line.
	progressed := make(chan struct{})
	var errOut strings.Builder
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderrPipe)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			errOut.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), progress) {
				once.Do(func() { close(progressed) })
			}
		}
	}()
	select {
	case <-progressed:
	case <-time.After(interruptBound):
		_ = syscall.Kill(group, syscall.SIGKILL)
		t.Fatalf("no progress line within %v", interruptBound)
	}
	require.NoError(t, syscall.Kill(group, syscall.SIGINT))
	<-done
	err = cmd.Wait()
	require.NoError(t, ctx.Err(), "the interrupted run did not end within %v", 2*interruptBound)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit status: %v", err)
	deadline := time.Now().Add(interruptBound)
	for syscall.Kill(group, 0) == nil {
		require.True(t, time.Now().Before(deadline), "a process of the command still runs %v after it exited", interruptBound)
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	return exit.ExitCode(), out.String(), errOut.String()
}

// Ctrl-C during a run over UCX reaches both processes: the prefill process
// ignores it and ends when the decode process, which stops the run and
// prints the summary so far, closes its stdin. Nothing of either is left.
func TestSimulateDisaggOverUCXInterrupted(t *testing.T) {
	status, out, errOut := interruptCLI(t, "simulate kvready --disagg: ", "simulate", "--disagg", "--transport", "ucx", "--requests", "10000")
	assert.Equal(t, exitInterrupted, status, "stderr: %s", errOut)
	assert.Contains(t, out, "kvready simulate --disagg — manager: kvready, 10000 requests")
	assert.Contains(t, out, "interrupted: the run was stopped before it finished")
	assert.Contains(t, errOut, "kvready: interrupted: the summary and the report cover the run so far")
	assert.NotContains(t, errOut, "exited unasked", "the prefill process ignored the interrupt")
	assert.NotContains(t, errOut, "ended with status", "the prefill process ended well once told to")
}
