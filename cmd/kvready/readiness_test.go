package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadinessCommand(t *testing.T) {
	lay := writeFile(t, "layout.json", windowLayout)
	for _, tc := range []struct {
		name  string
		args  []string
		want  string
		reads string
	}{
		{"a whole fetch, the window group staged its sink and window", []string{"--arrived", "0-9/0,8-9"},
			"interval [320, 320]: restart_floor 320, usable_until 320 (block 10)", "layer group 1 (window 64 tokens, 1 sink blocks): reads block 0, blocks 8-9"},
		{"a hole in the window stops below it", []string{"--arrived", "0-9/0,6-7,9"},
			"interval [256, 256]", "reads block 0, blocks 6-7"},
		{"a hole in the full group caps the end", []string{"--arrived", "0-4,6-9/0-9"},
			"interval [160, 160]", "layer group 0 (full attention): reads blocks 0-4"},
		{"a miss answers what was known", []string{"--arrived", "/", "--known", "2"},
			"interval [0, 64]", "reads blocks 0-1"},
		{"known blocks count as present, a hole the window passed does not", []string{"--arrived", "3-5/4-5", "--known", "3"},
			"interval [192, 192]", "reads block 0, blocks 4-5"},
		{"nothing passed by the window floors at 0", []string{"--arrived", "0-1/0-1"},
			"interval [0, 64]", "reads blocks 0-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errOut := runCLI(t, "", append([]string{"readiness", "--layout", lay}, tc.args...)...)
			require.Equal(t, exitOK, status, errOut)
			assert.Contains(t, out, tc.want)
			assert.Contains(t, out, tc.reads)
		})
	}
	status, out, errOut := runCLI(t, "", "readiness", "--layout", lay, "--arrived", "0-9/0,8-9", "--json")
	require.Equal(t, exitOK, status, errOut)
	var got readinessOutJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	w := 64
	assert.Equal(t, readinessOutJSON{RestartFloor: 320, UsableUntil: 320, Groups: []groupReadsJSON{
		{LayerGroup: 0, Reads: [][2]int{{0, 10}}},
		{LayerGroup: 1, Window: &w, SinkBlocks: 1, Reads: [][2]int{{0, 1}, {8, 10}}}}}, got)
}

// An empty --arrived lists one layer group with nothing arrived, as -h says:
// on a one-group layout the answer is the reference's for an empty arrival
// (what was known, nothing more), not a refusal; on a two-group layout it is
// one group listed for two.
func TestReadinessNothingArrived(t *testing.T) {
	one := writeFile(t, "layout.json", string(mustRead(t, "../../staging/testdata/layout-simple.json")))
	status, help, _ := runCLI(t, "", "readiness", "-h")
	require.Equal(t, exitOK, status)
	assert.Contains(t, help, `--arrived ""            for a layout of one group: nothing arrived`)
	for _, tc := range []struct {
		known string
		want  string
		reads string
	}{
		{"0", "interval [0, 0]: restart_floor 0, usable_until 0 (block 0)", "layer group 0 (full attention): reads no blocks"},
		{"2", "interval [0, 64]: restart_floor 0, usable_until 64 (block 2)", "layer group 0 (full attention): reads blocks 0-1"},
	} {
		status, out, errOut := runCLI(t, "", "readiness", "--layout", one, "--arrived", "", "--known", tc.known)
		require.Equal(t, exitOK, status, errOut)
		assert.Contains(t, out, tc.want)
		assert.Contains(t, out, tc.reads)
	}
	two := writeFile(t, "two.json", windowLayout)
	status, out, errOut := runCLI(t, "", "readiness", "--layout", two, "--arrived", "")
	assert.Equal(t, exitFail, status)
	assert.Contains(t, errOut, "1 layer groups listed for a layout of 2")
	assert.Empty(t, out)
}

func TestReadinessCommandRefusals(t *testing.T) {
	lay := writeFile(t, "layout.json", windowLayout)
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"one group for two", []string{"--layout", lay, "--arrived", "0-9"}, exitFail, "1 layer groups listed for a layout of 2"},
		{"end below an arrival", []string{"--layout", lay, "--arrived", "0-9/0", "--end", "5"}, exitFail, "block 9 arrived"},
		{"not an ordinal", []string{"--layout", lay, "--arrived", "0-x/0"}, exitUsage, `"0-x" is not a block ordinal`},
		{"negative", []string{"--layout", lay, "--arrived", "-1/0"}, exitUsage, "is not a block ordinal"},
		{"backwards", []string{"--layout", lay, "--arrived", "5-2/0"}, exitUsage, "runs backwards"},
		{"too far", []string{"--layout", lay, "--arrived", "0-2000000/0"}, exitUsage, "want at most 1048576"},
		{"known negative", []string{"--layout", lay, "--arrived", "0/0", "--known", "-1"}, exitUsage, "--known: -1"},
		{"no arrived", []string{"--layout", lay}, exitUsage, "--arrived: missing"},
		{"no layout", []string{"--arrived", "0/0"}, exitUsage, "--layout: missing"},
		{"unreadable", []string{"--layout", "/no/such", "--arrived", "0/0"}, exitUsage, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errOut := runCLI(t, "", append([]string{"readiness"}, tc.args...)...)
			assert.Equal(t, tc.status, status)
			assert.Contains(t, errOut, tc.stderr)
			assert.Empty(t, out)
		})
	}
}

// FuzzArrivedArgs: the --arrived parser never panics; what it accepts is sorted,
// distinct, in range, and round-trips through the syntax it documents.
func FuzzArrivedArgs(f *testing.F) {
	for _, s := range []string{"0-9/0,8-9", "/", "", "3", "1-1,1", "5-2", "-1", "0-1048576", "a,b//c", "1--2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := parseArrived(s)
		if err != nil {
			if err.flag != "--arrived" || err.status != exitUsage {
				t.Fatalf("%q: refusal %+v", s, err)
			}
			return
		}
		if len(rows) != strings.Count(s, "/")+1 {
			t.Fatalf("%q: %d groups", s, len(rows))
		}
		groups := make([]string, len(rows))
		for g, ords := range rows {
			items := make([]string, len(ords))
			for i, o := range ords {
				if o < 0 || o > maxCLIBlock || (i > 0 && o <= ords[i-1]) {
					t.Fatalf("%q: group %d ordinals %v", s, g, ords)
				}
				items[i] = fmt.Sprint(o)
			}
			groups[g] = strings.Join(items, ",")
		}
		again, err := parseArrived(strings.Join(groups, "/"))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(rows) {
			t.Fatalf("%q parsed to %v, which parses back to %v (%v)", s, rows, again, err)
		}
	})
}

// FuzzStagingSizeArgs: the staging size and readiness commands never panic on
// any flag values, and answer only 0, 1 or 2, with -h alone on stdout.
func FuzzStagingSizeArgs(f *testing.F) {
	f.Add("320", "3", "", "0-9/0,8-9", "0")
	f.Add("-1", "", "99", "/", "x")
	f.Add("1", "9223372036854775807", "9223372036854775807", "0-1048576/", "1048576")
	f.Fuzz(func(t *testing.T, tokens, fetches, maxBytes, arrived, known string) {
		var out, errOut strings.Builder
		e := &env{stdin: strings.NewReader(windowLayout), stdout: &out, stderr: &errOut}
		args := []string{"staging", "size", "--layout", "-", "--fetch-tokens", tokens}
		if fetches != "" {
			args = append(args, "--max-fetches", fetches)
		}
		if maxBytes != "" {
			args = append(args, "--max-bytes", maxBytes)
		}
		if status := run(e, args); status != exitOK && status != exitFail && status != exitUsage {
			t.Fatalf("%v: status %d", args, status)
		} else if status != exitOK && out.Len() > 0 {
			t.Fatalf("%v: status %d with output %q", args, status, out.String())
		}
		out.Reset()
		e.stdin = strings.NewReader(windowLayout)
		args = []string{"readiness", "--layout", "-", "--arrived", arrived, "--known", known}
		if status := run(e, args); status != exitOK && status != exitFail && status != exitUsage {
			t.Fatalf("%v: status %d", args, status)
		} else if status != exitOK && out.Len() > 0 {
			t.Fatalf("%v: status %d with output %q", args, status, out.String())
		}
	})
}
