package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/internal/redistest"
	"github.com/kvready/kvready/readiness"
)

// headerStatuses reads the KVREADY_ERR_* values kvready.h declares.
func headerStatuses(t *testing.T) map[string]int {
	t.Helper()
	header, err := os.ReadFile("kvready.h")
	require.NoError(t, err)
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`(KVREADY_(?:OK|ERR_\w+)) = (\d+)`).FindAllSubmatch(header, -1) {
		v, err := strconv.Atoi(string(m[2]))
		require.NoError(t, err)
		out[string(m[1])] = v
	}
	require.Greater(t, len(out), 19, "the pattern no longer matches kvready.h's statuses")
	return out
}

// Each error the engine returns reaches C as the status kvready.h documents
// for it, wrapped as the runner wraps it: a failed layer is its own status,
// never folded into "not ready" (which says the layer will never be answered)
// nor into a generic failure.
func TestEngineErrorsMapToTheirHeaderStatus(t *testing.T) {
	h := headerStatuses(t)
	for _, tc := range []struct {
		err    error
		status string
	}{
		{nil, "KVREADY_OK"},
		{readiness.ErrLayerFailed, "KVREADY_ERR_LAYER_FAILED"},
		{readiness.ErrNotReady, "KVREADY_ERR_NOT_READY"},
		{readiness.ErrStaleHandle, "KVREADY_ERR_STALE_LEASE"},
		{readiness.ErrClosed, "KVREADY_ERR_CLOSED"},
		{readiness.ErrHalted, "KVREADY_ERR_HALTED"},
		{readiness.ErrDeviceLost, "KVREADY_ERR_DEVICE_LOST"},
		{readiness.ErrUngrantable, "KVREADY_ERR_UNGRANTABLE"},
		{readiness.ErrInvalidRequest, "KVREADY_ERR_INVALID"},
		{context.DeadlineExceeded, "KVREADY_ERR_TIMEOUT"},
		{errors.New("anything else"), "KVREADY_ERR_FAILED"},
	} {
		t.Run(tc.status, func(t *testing.T) {
			want, ok := h[tc.status]
			require.True(t, ok, "kvready.h declares no %s", tc.status)
			err := tc.err
			if err != nil {
				err = fmt.Errorf("readiness: layer 1 of lease#0.2: %w", err)
			}
			assert.Equal(t, want, int(statusOf(err)))
		})
	}
}

// kvready_backend_open tells a Redis URL that is wrong (fix it) from a store
// that does not answer (retry later), each with its own status.
func TestBackendOpenStatuses(t *testing.T) {
	h := headerStatuses(t)
	srv := redistest.Start(t)
	dead := srv.URL()
	srv.Kill()
	m := &memory{} // Open fails before it resolves a row
	for _, tc := range []struct {
		url, status, msg string
	}{
		{dead + "?breaker_failures=-1", "KVREADY_ERR_CONFIG", "WithBreaker(-1)"},
		{dead + "?breaker_failures=1&breaker_failures=2", "KVREADY_ERR_CONFIG", "breaker_failures given 2 times"},
		{dead + "?breaker_probe_max=50ms", "KVREADY_ERR_CONFIG", "breaker_probe_max=50ms"},
		{dead + "?pool_size=many", "KVREADY_ERR_CONFIG", "pool_size"},
		{dead, "KVREADY_ERR_UNAVAILABLE", "does not answer PING"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := openURL(tc.url, m)
			require.Error(t, err)
			assert.Equal(t, h[tc.status], int(statusOf(err)), "%v", err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}
