package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu/cuda/fakecuda"
)

// `kvready simulate --device cuda` on the fake CUDA driver: staging pinned by
// the driver, copies on its streams, and the checker clean.
func TestSimulateOnFakeCUDA(t *testing.T) {
	lib, err := fakecuda.Library()
	require.NoError(t, err, "simulate --device cuda is tested on the fake driver, built with gcc")
	status, out, stderr := runCLI(t, "", "simulate", "--device", "cuda", "--cuda-library", lib, "--requests", "300", "--json")
	require.Equal(t, exitOK, status, stderr)
	var m struct {
		Recycled   *int `json:"recycled_before_fence"`
		Late       *int `json:"late_writes"`
		Corrupt    *int `json:"corrupt_rows"`
		Verified   *int `json:"rows_verified"`
		Unfinished *int `json:"unfinished_requests"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	require.True(t, m.Recycled != nil && m.Late != nil && m.Corrupt != nil && m.Verified != nil && m.Unfinished != nil, "the summary has every checker field: %s", out)
	assert.Zero(t, *m.Recycled)
	assert.Zero(t, *m.Late)
	assert.Zero(t, *m.Corrupt)
	assert.Zero(t, *m.Unfinished)
	assert.Positive(t, *m.Verified, "the checker read rows back from the CUDA device")
}

func TestSimulateDeviceFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--device", "gpu"}, `-device: "gpu"; want sim or cuda`},
		{[]string{"--cuda-library", "/x.so"}, "-cuda-library: \"/x.so\" with the simulated device"},
		{[]string{"--device", "cuda", "--device-loss-at", "1ms"}, "-device-loss-at: 1ms: a CUDA device is not lost on command"},
		{[]string{"--device", "cuda", "--naive"}, "-naive: the naive manager runs on the simulated device only"},
	} {
		status, out, stderr := runCLI(t, "", append([]string{"simulate"}, tc.args...)...)
		assert.Equal(t, exitUsage, status, tc.args)
		assert.Contains(t, stderr, tc.msg, tc.args)
		assert.Empty(t, out, "a refused run prints no summary")
	}
	status, _, stderr := runCLI(t, "", "simulate", "--device", "cuda", "--cuda-library", "/nonexistent/libcuda.so.1")
	assert.Equal(t, exitFail, status)
	assert.Contains(t, stderr, "/nonexistent/libcuda.so.1")
}
