package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/simulate"
)

// `kvready simulate --layerwise`, as make test runs it: the checker finds
// no layer read before its copy landed, and the table shows time to the
// last layer computed both ways.
func TestSimulateLayerwise(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	status, out, stderr := runCLI(t, "", "simulate", "--layerwise", "--requests", "300", "--report", dir)
	require.Equal(t, exitOK, status, stderr)
	for _, want := range []string{
		"layer by layer (8 layers, compute 0.05ms each, copy engine 2.56e+06 bytes/s)",
		"last layer computed p50 / p99", "whole lease first p50 / p99", "whole lease ÷ layer by layer",
		"T + (L−1)·max(T, C) + C = 0.45ms; L·T + L·C = 0.80ms",
		"layers read before their copy landed   0 of", "layers read with corrupt bytes         0  ok",
	} {
		assert.Contains(t, out, want)
	}
	m := regexp.MustCompile(`whole lease ÷ layer by layer\s+([0-9.]+)×`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	speedup, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.Greater(t, speedup, 1.0, "layer by layer beats waiting for the whole lease")
	assert.FileExists(t, filepath.Join(dir, simulate.PlotLayerwise))
}

// The flags reach the run: the layer count, the compute time and the
// bandwidth; --arrival defaults to the layerwise interval unless given.
func TestSimulateLayerwiseFlags(t *testing.T) {
	status, m, stderr := simulateJSON(t, "--layerwise", "--requests", "60", "--groups", "1", "--layers-per-group", "16",
		"--compute-per-layer", "200us", "--copy-bandwidth", "1e6")
	require.Equal(t, exitOK, status, stderr)
	lw, ok := m["layerwise"].(map[string]any)
	require.True(t, ok, "%v", m)
	assert.EqualValues(t, 16, lw["layers"])
	assert.EqualValues(t, 200, lw["compute_per_layer_us"])
	assert.EqualValues(t, 1e6, lw["copy_bandwidth_bytes_per_s"])
	assert.EqualValues(t, 32, lw["full_layer_copy_us"], "8 blocks × 4 bytes at 1e6 bytes/s")
	assert.Positive(t, lw["forwards"])
	assert.EqualValues(t, 0, lw["layers_read_early"])

	// 60 requests at the layerwise arrival of 1ms, and at a given 100µs.
	virtual := func(args ...string) float64 {
		status, out, stderr := runCLI(t, "", append([]string{"simulate", "--requests", "60"}, args...)...)
		require.Equal(t, exitOK, status, stderr)
		m := regexp.MustCompile(`device sim, ([0-9.]+)ms virtual`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	assert.Greater(t, virtual("--layerwise"), 59.0, "requests a millisecond apart")
	assert.Less(t, virtual("--layerwise", "--arrival", "100us"), 59.0, "an explicit --arrival wins")

	status, m, _ = simulateJSON(t, "--requests", "20")
	require.Equal(t, exitOK, status)
	assert.Nil(t, m["layerwise"], "not a layerwise run")
}

func TestSimulateLayerwiseFlagRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"layers without --layerwise", []string{"--layers-per-group", "8"}, "--layers-per-group: describes the layer-by-layer forward pass; want --layerwise too"},
		{"compute without --layerwise", []string{"--compute-per-layer", "1ms"}, "--compute-per-layer: describes the layer-by-layer forward pass; want --layerwise too"},
		{"bandwidth without --layerwise", []string{"--copy-bandwidth", "1e6"}, "--copy-bandwidth: describes the layer-by-layer forward pass; want --layerwise too"},
		{"gpu latency with it", []string{"--layerwise", "--gpu-latency", "1ms"}, "--gpu-latency: with --layerwise each copy takes its bytes over --copy-bandwidth"},
		{"odd layer count", []string{"--layerwise", "--layers-per-group", "3"}, "--layers-per-group: 3; want a divisor of 32"},
		{"negative compute", []string{"--layerwise", "--compute-per-layer", "-1ms"}, "--compute-per-layer: -1ms; want a duration in 0..1h0m0s"},
		{"no bandwidth", []string{"--layerwise", "--copy-bandwidth", "0"}, "--copy-bandwidth: 0; want a rate in bytes per second"},
		{"not a number", []string{"--layerwise", "--copy-bandwidth", "fast"}, "copy-bandwidth"},
		{"naive", []string{"--layerwise", "--naive"}, "--layerwise: the naive manager has no per-layer readiness"},
		{"cuda", []string{"--layerwise", "--device", "cuda"}, "--layerwise: the forward pass is computed on the simulated device"},
		{"redis", []string{"--layerwise", "--backend", "redis://127.0.0.1:1"}, "--layerwise: the pipeline is timed on the virtual clock"},
		{"compare naive", []string{"--layerwise", "--compare-naive"}, "drop --naive, --backend, --device cuda and --layerwise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, stderr := runCLI(t, "", append([]string{"simulate"}, tc.args...)...)
			assert.Equal(t, exitUsage, status, stderr)
			assert.Contains(t, stderr, tc.msg)
			assert.Empty(t, out, "a refused run prints no summary")
		})
	}
}

func TestSimulateHelpNamesTheLayerwiseFlags(t *testing.T) {
	status, out, stderr := runCLI(t, "", "simulate", "-h")
	require.Equal(t, exitOK, status, stderr)
	for _, f := range []string{"-layerwise", "-layers-per-group", "-compute-per-layer", "-copy-bandwidth", "With --layerwise --arrival defaults to 1ms"} {
		assert.Contains(t, out+stderr, f)
	}
}
