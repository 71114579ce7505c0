package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSimulateServesMetrics(t *testing.T) {
	status, _, stderr := runCLI(t, "", "simulate", "--requests", "100", "--json", "--metrics-addr", "127.0.0.1:0")
	require.Equal(t, exitOK, status, stderr)
	assert.Regexp(t, `simulate: serving metrics on http://127\.0\.0\.1:[1-9][0-9]*/metrics`, stderr)
}

func TestSimulateMetricsAddrRefusals(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"port taken", []string{"--metrics-addr", busy.Addr().String()}, "-metrics-addr: "},
		{"not an address", []string{"--metrics-addr", "nowhere"}, "want a free HOST:PORT"},
		{"naive", []string{"--naive", "--metrics-addr", "127.0.0.1:0"}, "-metrics-addr: the naive manager has no engine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, stderr := runCLI(t, "", append([]string{"simulate", "--requests", "10"}, tc.args...)...)
			assert.Equal(t, exitUsage, status)
			assert.Empty(t, out)
			assert.Contains(t, stderr, tc.want)
			assert.NotContains(t, stderr, "serving metrics on", "nothing is announced for a run that does not start")
		})
	}
}
