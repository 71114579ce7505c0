package main

import (
	"bytes"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A panic inside an exported function answers KVREADY_ERR_INTERNAL with a
// one-line message; the goroutine's stack goes to the log, never into the
// message a caller prints.
func TestGuardKeepsTheStackOutOfTheMessage(t *testing.T) {
	runtime.LockOSThread() // an error is read back on the thread that made it
	defer runtime.UnlockOSThread()
	var logged bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	h := register(kindMemory, &memory{})
	t.Cleanup(func() { unregister(h) })
	st := func() (st _Ctype_int) {
		defer guard(h, &st)
		var s []int
		_ = s[3] // a bug: index out of range
		return 0
	}()

	assert.Equal(t, 19, int(st), "KVREADY_ERR_INTERNAL")
	objects.Lock()
	msg := objects.errs[errorOn(h)]
	objects.Unlock()
	assert.Contains(t, msg, "internal error")
	assert.Contains(t, msg, "index out of range", "the message names the panic")
	assert.NotContains(t, msg, "\n", "one line")
	assert.NotContains(t, msg, "goroutine", "no stack in the message")
	assert.Less(t, len(msg), 400)
	require.Contains(t, logged.String(), "goroutine", "the stack is logged")
	assert.True(t, strings.Contains(logged.String(), "guard_test.go"), "the stack names where it panicked")
}
