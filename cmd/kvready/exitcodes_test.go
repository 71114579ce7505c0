package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// How every command is fed the same bad inputs. A verb is in exactly one of
// the three tables, so a command added later fails TestEveryCommandOnTheSameBadInputs
// until it says how it reads its input.
var (
	// jsonReaders read one JSON document from a file (or - for standard
	// input, as the second form).
	jsonReaders = map[string]func(path string) []string{
		"layout id":        func(p string) []string { return []string{"layout", "id", p} },
		"profile validate": func(p string) []string { return []string{"profile", "validate", p} },
		"readiness":        func(p string) []string { return []string{"readiness", "--layout", p, "--arrived", "0-1"} },
		"staging size": func(p string) []string {
			return []string{"staging", "size", "--layout", p, "--fetch-tokens", "64", "--max-fetches", "1"}
		},
	}
	// rawReaders read a file as bytes: any bytes are valid, only a file that
	// cannot be read is refused.
	rawReaders = map[string]func(path string) []string{
		"name derive": func(p string) []string {
			return []string{"name", "derive", "--layout-hex", "aa", "--scope-file", p, "--layers", "0", "--group", "0", "--key-hex", strings.Repeat("ab", 32)}
		},
	}
	// noFile read no file; their bad input is the command line alone.
	noFile = map[string]bool{"version": true, "profile example": true, "name part": true, "name explain": true, "diagram": true, "simulate": true}

	// emptyValues gives every verb's required values empty, one at a time:
	// an empty value is a missing one (exit 2) in every command. Three values
	// are not in it because the reference gives them a meaning: an empty
	// --layers is one empty layer group, an empty --scope-hex the empty scope
	// (name_test.go pins both), an empty --arrived one layer group with
	// nothing arrived (readiness_test.go).
	emptyValues = map[string][][]string{
		"layout id":        {{"layout", "id", ""}},
		"profile validate": {{"profile", "validate", ""}},
		"readiness": {
			{"readiness", "--layout", "", "--arrived", "0"},
		},
		"staging size": {
			{"staging", "size", "--layout", "", "--fetch-tokens", "64", "--max-fetches", "1"},
			{"staging", "size", "--layout", "LAYOUT", "--fetch-tokens", "", "--max-fetches", "1"},
		},
		"name derive": {
			{"name", "derive", "--layout-hex", "", "--scope-hex", "00", "--layers", "0", "--group", "0", "--key-hex", strings.Repeat("ab", 32)},
			{"name", "derive", "--layout-hex", "aa", "--scope-hex", "00", "--layers", "0", "--group", "", "--key-hex", strings.Repeat("ab", 32)},
			{"name", "derive", "--layout-hex", "aa", "--scope-hex", "00", "--layers", "0", "--group", "0", "--key-hex", ""},
		},
		"name part": {
			{"name", "part", "--layout-hex", "aa", "--layers", "0", "--groups", ""},
		},
		"name explain":    {{"name", "explain", ""}},
		"diagram":         {{"diagram", "--format", ""}},
		"simulate":        {{"simulate", "--requests", ""}},
		"version":         nil, // takes nothing
		"profile example": nil, // takes nothing
	}
)

// The same bad input gets the same exit status in every command that reads
// it: bytes that are not one JSON object (binary, an array, a string,
// truncated, trailing data, nothing) and a missing file are 2; one JSON
// object that breaks the document's rules is 1. On the command line, an
// extra argument and an empty required value are 2 everywhere.
func TestEveryCommandOnTheSameBadInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, content, 0o600))
		return p
	}
	binary := make([]byte, 512)
	for i := range binary {
		binary[i] = byte(i * 37)
	}
	layout := write("layout.json", mustRead(t, "../../staging/testdata/layout-simple.json"))
	inputs := []struct {
		name   string
		data   []byte // nil: the file does not exist
		status int
	}{
		{"binary file", binary, exitUsage},
		{"JSON array", []byte(`[{"tokens_per_block":32}]`), exitUsage},
		{"JSON string", []byte(`"layout"`), exitUsage},
		{"JSON null", []byte("null\n"), exitUsage},
		{"truncated object", []byte(`{"tokens_per_block":`), exitUsage},
		{"data after the object", []byte(`{} {}`), exitUsage},
		{"empty file", []byte{}, exitUsage},
		{"missing file", nil, exitUsage},
		{"object that breaks the rules", []byte(`{"no_such_field": 1}`), exitFail},
	}

	for _, verb := range verbs(t) {
		name := strings.Join(verb, " ")
		json, raw := jsonReaders[name], rawReaders[name]
		kinds := 0
		for _, in := range []bool{json != nil, raw != nil, noFile[name]} {
			if in {
				kinds++
			}
		}
		require.Equal(t, 1, kinds, "%q must be in exactly one of jsonReaders, rawReaders, noFile", name)
		_, listed := emptyValues[name]
		require.True(t, listed, "%q has no entry in emptyValues", name)

		t.Run(name, func(t *testing.T) {
			for i, in := range inputs {
				path := filepath.Join(dir, "none", "missing.json")
				if in.data != nil {
					path = write(strings.ReplaceAll(name, " ", "-")+"-"+strconv.Itoa(i), in.data)
				}
				switch {
				case json != nil:
					status, out, errOut := runCLI(t, "", json(path)...)
					assert.Equal(t, in.status, status, "%s: %s", in.name, errOut)
					assert.Equal(t, 1, strings.Count(errOut, "\n"), "%s: one line: %q", in.name, errOut)
					if in.status == exitUsage {
						assert.Empty(t, out, in.name)
					}
					if in.data != nil { // the same bytes on standard input
						status, _, errOut = runCLI(t, string(in.data), json("-")...)
						assert.Equal(t, in.status, status, "%s on stdin: %s", in.name, errOut)
					}
				case raw != nil && in.data == nil:
					status, out, errOut := runCLI(t, "", raw(path)...)
					assert.Equal(t, exitUsage, status, "%s: %s", in.name, errOut)
					assert.Empty(t, out)
				}
			}
			// An extra argument.
			args := append(append([]string(nil), verb...), "stray-argument")
			if json != nil {
				args = append(json(layout), "stray-argument")
			}
			status, out, errOut := runCLI(t, "", args...)
			assert.Equal(t, exitUsage, status, "extra argument %q: %s", args, errOut)
			assert.Empty(t, out)
			// Empty required values.
			for _, a := range emptyValues[name] {
				a = append([]string(nil), a...)
				for i := range a {
					if a[i] == "LAYOUT" {
						a[i] = layout
					}
				}
				status, out, errOut := runCLI(t, "", a...)
				assert.Equal(t, exitUsage, status, "%q: %s", a, errOut)
				assert.Empty(t, out, "%q", a)
			}
		})
	}
}

// One meaning per exit status across commands, on the inputs where two
// commands (or two values of one flag) used to answer differently: an output
// path that cannot be written, a value out of range at either end, a document
// that is JSON null. A suggestion the engine cannot lend is still computed
// (exit 0), and says so.
func TestSameExitStatusForTheSameKindOfInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	layout := filepath.Join(dir, "layout.json")
	require.NoError(t, os.WriteFile(layout, mustRead(t, "../../staging/testdata/layout-simple.json"), 0o600))
	lateDir := filepath.Join(dir, "late")
	require.NoError(t, os.MkdirAll(filepath.Join(lateDir, "index.html"), 0o755))
	null := filepath.Join(dir, "null.json")
	require.NoError(t, os.WriteFile(null, []byte("null"), 0o600))
	size := func(args ...string) []string {
		return append([]string{"staging", "size", "--layout", layout}, args...)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"diagram --out under a file", []string{"diagram", "--format", "svg", "--out", filepath.Join(file, "d.svg")}, exitUsage, "--out:"},
		{"diagram --out a directory", []string{"diagram", "--out", dir}, exitUsage, "--out:"},
		{"simulate --report under a file", []string{"simulate", "--requests", "1", "--report", filepath.Join(file, "r")}, exitUsage, "--report:"},
		{"--fetch-tokens -1", size("--fetch-tokens", "-1", "--max-fetches", "1"), exitUsage, "--fetch-tokens"},
		{"--fetch-tokens 2^63-1", size("--fetch-tokens", "9223372036854775807", "--max-fetches", "1"), exitUsage, "--fetch-tokens"},
		{"--fetch-tokens 2^63", size("--fetch-tokens", "9223372036854775808", "--max-fetches", "1"), exitUsage, "fetch-tokens"},
		{"--max-fetches 2^63-1", size("--fetch-tokens", "64", "--max-fetches", "9223372036854775807"), exitUsage, "--max-fetches"},
		{"--max-fetches -1", size("--fetch-tokens", "64", "--max-fetches", "-1"), exitUsage, "--max-fetches"},
		{"layout id on null", []string{"layout", "id", null}, exitUsage, "the document is null, not an object"},
		{"readiness on null", []string{"readiness", "--layout", null, "--arrived", "0"}, exitUsage, "the document is null, not an object"},
		{"staging size on null", []string{"staging", "size", "--layout", null, "--fetch-tokens", "1", "--max-fetches", "1"}, exitUsage, "the document is null, not an object"},
		{"profile validate on null", []string{"profile", "validate", null}, exitUsage, "found null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errOut := runCLI(t, "", tc.args...)
			assert.Equal(t, tc.status, status, errOut)
			assert.Contains(t, errOut, tc.stderr)
			assert.Empty(t, out)
		})
	}

	// A report directory writable when checked before the run, whose page
	// cannot be written after it (a directory stands where index.html
	// goes): exit 2 all the same, the summary printed.
	status, out, errOut := runCLI(t, "", "simulate", "--requests", "20", "--report", lateDir)
	assert.Equal(t, exitUsage, status, errOut)
	assert.Contains(t, errOut, "--report:")
	assert.Contains(t, out, "independent checker", "the run's summary is printed before the report")

	// The reference's arithmetic, kept, and a note that the engine lends at
	// most 2^31-1 slots per pool group.
	status, out, errOut = runCLI(t, "", size("--fetch-tokens", "64", "--max-bytes", "9223372036854775807")...)
	require.Equal(t, exitOK, status, errOut)
	assert.Regexp(t, `(?m)^\s+0\s+2\s+65536\s+140737488355327\s+9223372036854710272$`, out)
	assert.Contains(t, out, "note: pool group 0: 140737488355327 slots is more than the engine can lend (at most 2147483647 slots per pool group)")
	status, out, errOut = runCLI(t, "", size("--fetch-tokens", "64", "--max-bytes", "9223372036854775807", "--json")...)
	require.Equal(t, exitOK, status, errOut)
	assert.Contains(t, out, `"slots":140737488355327,"bytes":9223372036854710272,"over_engine_limit":true,"note":"note: pool group 0`)
	// Within the limit, no note.
	status, out, _ = runCLI(t, "", size("--fetch-tokens", "64", "--max-fetches", "3")...)
	require.Equal(t, exitOK, status)
	assert.NotContains(t, out, "note:")
	status, out, _ = runCLI(t, "", size("--fetch-tokens", "64", "--max-fetches", "3", "--json")...)
	require.Equal(t, exitOK, status)
	assert.NotContains(t, out, "over_engine_limit")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// kvready -h and README.md say what every exit status means, the same codes
// the commands return.
func TestExitStatusesAreDocumented(t *testing.T) {
	status, out, _ := runCLI(t, "", "-h")
	require.Equal(t, exitOK, status)
	assert.Contains(t, out, exitStatuses)
	readme := string(mustRead(t, "../../README.md"))
	for _, code := range []int{exitOK, exitFail, exitUsage, exitCapacity, exitInterrupted} {
		c := strconv.Itoa(code)
		assert.Contains(t, exitStatuses, "  "+c+" ", "kvready -h explains %d", code)
		assert.Regexp(t, `(?m)^\| `+c+` \| \S`, readme, "README.md explains %d", code)
	}
}
