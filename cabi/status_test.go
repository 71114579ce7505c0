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
