package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSimulateWindow(t *testing.T) {
	status, out, errOut := runCLI(t, "", "simulate", "--requests", "100", "--window", "64", "--sink-blocks", "1", "--json")
	require.Equal(t, exitOK, status, errOut)
	var s map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	assert.Equal(t, 0.0, s["readiness_overclaims"])
	assert.Equal(t, 0.0, s["corrupt_rows"])
	assert.Equal(t, 0.0, s["recycled_before_fence"])

	status, _, errOut = runCLI(t, "", "simulate", "--sink-blocks", "1")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, errOut, "-sink-blocks: 1 sink blocks without a window")
	status, _, errOut = runCLI(t, "", "simulate", "--window", "-5")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, errOut, "-window: -5")
}
