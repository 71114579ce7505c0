package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvready/kvready/staging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// windowLayout is a layout of a full-attention group (pool group 0, 4096-byte
// rows) and a window of 64 tokens with one sink block (pool group 1, 1024-byte
// rows), at 32 tokens per block.
const windowLayout = `{"tokens_per_block":32,"pool_groups":{"0":[4096],"1":[1024]},
 "layer_groups":[{"kind":"attention","window":null,"sink_blocks":0,"pool_group":0,"layers":[0]},
                 {"kind":"attention","window":64,"sink_blocks":1,"pool_group":1,"layers":[1]}],
 "buffers":[{"layer":0,"role":"kv","pool":[0,0],"offset":0,"size":4096},{"layer":1,"role":"kv","pool":[1,0],"offset":0,"size":1024}]}`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestStagingSize(t *testing.T) {
	lay := writeFile(t, "layout.json", windowLayout)
	// One fetch of 320 tokens: 10 rows of 4096 bytes and 1 + 2 rows of 1024.
	status, out, errOut := runCLI(t, "", "staging", "size", "--layout", lay, "--fetch-tokens", "320", "--max-fetches", "3")
	require.Equal(t, exitOK, status, errOut)
	assert.Contains(t, out, "one fetch of 320 tokens: 44032 bytes; staging: 132096 bytes")
	assert.Regexp(t, `(?m)^\s+0\s+10\s+4096\s+30\s+122880$`, out)
	assert.Regexp(t, `(?m)^\s+1\s+3\s+1024\s+9\s+9216$`, out)

	// 100000 bytes split 40960:3072 of 44032, rounded down to whole slots.
	status, out, errOut = runCLI(t, "", "staging", "size", "--layout", lay, "--fetch-tokens", "320", "--max-bytes", "100000", "--json")
	require.Equal(t, exitOK, status, errOut)
	var got stagingSizeJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, stagingSizeJSON{FetchTokens: 320, OneFetchBytes: 44032, TotalBytes: 22*4096 + 6*1024, PoolGroups: []poolGroupSizeJSON{
		{PoolGroup: 0, FetchRows: 10, PageBytes: 4096, Slots: 22, Bytes: 22 * 4096},
		{PoolGroup: 1, FetchRows: 3, PageBytes: 1024, Slots: 6, Bytes: 6 * 1024}}}, got)

	// From standard input, with both limits: the smaller wins.
	status, out, _ = runCLI(t, windowLayout, "staging", "size", "--layout", "-", "--fetch-tokens", "320", "--max-fetches", "1", "--max-bytes", "100000")
	assert.Equal(t, exitOK, status)
	assert.Contains(t, out, "staging: 44032 bytes")
}

func TestStagingSizeRefusals(t *testing.T) {
	lay := writeFile(t, "layout.json", windowLayout)
	bad := writeFile(t, "bad.json", `{"tokens_per_block":0,"pool_groups":{}}`)
	empty := writeFile(t, "empty.json", `{"tokens_per_block":32,"pool_groups":{"0":[64]}}`)
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"below one fetch", []string{"--layout", lay, "--fetch-tokens", "320", "--max-bytes", "44031"}, exitFail, "one fetch of 320 tokens needs 44032 bytes"},
		{"nothing to stage", []string{"--layout", empty, "--fetch-tokens", "320", "--max-fetches", "1"}, exitFail, "no pages to stage"},
		{"invalid layout", []string{"--layout", bad, "--fetch-tokens", "32", "--max-fetches", "1"}, exitFail, "invalid layout"},
		{"unreadable layout", []string{"--layout", "/no/such/file", "--fetch-tokens", "32", "--max-fetches", "1"}, exitUsage, "no such file"},
		{"no layout", []string{"--fetch-tokens", "32", "--max-fetches", "1"}, exitUsage, "--layout: missing"},
		{"no fetch tokens", []string{"--layout", lay, "--max-fetches", "1"}, exitUsage, "--fetch-tokens: 0"},
		{"no limit", []string{"--layout", lay, "--fetch-tokens", "32"}, exitUsage, "neither --max-fetches nor --max-bytes"},
		{"zero fetches", []string{"--layout", lay, "--fetch-tokens", "32", "--max-fetches", "0"}, exitUsage, "--max-fetches: 0"},
		{"negative bytes", []string{"--layout", lay, "--fetch-tokens", "32", "--max-bytes", "-5"}, exitUsage, "--max-bytes: -5"},
		{"not a number", []string{"--layout", lay, "--fetch-tokens", "x"}, exitUsage, "invalid value"},
		{"an argument", []string{"--layout", lay, "--fetch-tokens", "32", "--max-fetches", "1", "extra"}, exitUsage, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errOut := runCLI(t, "", append([]string{"staging", "size"}, tc.args...)...)
			assert.Equal(t, tc.status, status)
			assert.Contains(t, errOut, tc.stderr)
			assert.Empty(t, out)
		})
	}
}

func TestStagingHelp(t *testing.T) {
	for _, args := range [][]string{{"staging", "-h"}, {"staging", "size", "-h"}, {"readiness", "-h"}} {
		status, out, _ := runCLI(t, "", args...)
		assert.Equal(t, exitOK, status, "%v", args)
		assert.Equal(t, 1, strings.Count(out, "usage: kvready"), "%v: usage once on stdout", args)
	}
	status, _, errOut := runCLI(t, "", "staging")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, errOut, "usage: kvready staging")
}

// TestWindowLayoutExample: docs/examples/layout-window.json, which
// docs/staging.md's worked example runs, is the layout these tests use.
func TestWindowLayoutExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "layout-window.json"))
	require.NoError(t, err)
	doc, err := staging.ParseLayout(data)
	require.NoError(t, err)
	ours, err := staging.ParseLayout([]byte(windowLayout))
	require.NoError(t, err)
	assert.Equal(t, ours, doc)
}
