package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kvready --version (and -version) is kvready version.
func TestDashDashVersion(t *testing.T) {
	_, want, _ := runCLI(t, "", "version")
	for _, flag := range []string{"--version", "-version"} {
		status, out, errOut := runCLI(t, "", flag)
		assert.Equal(t, exitOK, status, flag)
		assert.Equal(t, want, out, flag)
		assert.Empty(t, errOut, flag)
	}
	status, _, errOut := runCLI(t, "", "--version", "x")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, errOut, "takes no arguments")
}

// kvready version -h says what the command does, on one usage line with no
// trailing space; every command's usage line ends without one.
func TestVersionUsageSaysWhatItDoes(t *testing.T) {
	status, out, _ := runCLI(t, "", "version", "-h")
	require.Equal(t, exitOK, status)
	assert.Equal(t, "usage: kvready version    (prints the kvready version and the pinned contract revision; kvready --version does the same)\n", out)
	for _, args := range [][]string{{"profile", "example", "-h"}, {"version", "-h"}, {"layout", "id", "-h"}} {
		_, out, _ := runCLI(t, "", args...)
		first, _, _ := strings.Cut(out, "\n")
		assert.Equal(t, strings.TrimRight(first, " "), first, "%v: the usage line ends in a space", args)
	}
	_, out, _ = runCLI(t, "", "-h")
	assert.Contains(t, out, "'kvready --version' is 'kvready version'")
}

// A null layout is not one JSON object: said once, in every command that
// reads a layout.
func TestNullLayoutSaysWantOneJSONObjectOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "null.json")
	require.NoError(t, os.WriteFile(path, []byte("null\n"), 0o644))
	for _, args := range [][]string{
		{"layout", "id", "-"},
		{"layout", "id", path},
		{"staging", "size", "--layout", path, "--fetch-tokens", "4096", "--max-fetches", "8"},
		{"readiness", "--layout", path, "--arrived", "0-9/0"},
	} {
		status, _, errOut := runCLI(t, "null\n", args...)
		assert.Equal(t, exitUsage, status, "%v", args)
		assert.Equal(t, 1, strings.Count(errOut, "want one JSON object"), "%v: %s", args, errOut)
	}
	// Other documents that are not one object still say it.
	status, _, errOut := runCLI(t, "[]", "layout", "id", "-")
	assert.Equal(t, exitUsage, status)
	assert.Equal(t, 1, strings.Count(errOut, "want one JSON object"), errOut)
}
