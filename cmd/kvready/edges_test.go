package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// verbs discovers every command and sub-command from the usage text itself,
// so that commands added later are held to the same rules without touching
// this test: `kvready -h` lists the commands, `kvready CMD -h` the verbs of a
// command that has them.
func verbs(t *testing.T) [][]string {
	t.Helper()
	var out [][]string
	for _, c := range commands {
		status, usage, _ := runCLI(t, "", c.name, "-h")
		require.Equal(t, exitOK, status, c.name)
		_, list, has := strings.Cut(usage, "commands:\n")
		if !has {
			out = append(out, []string{c.name})
			continue
		}
		for _, line := range strings.Split(strings.TrimRight(list, "\n"), "\n") {
			f := strings.Fields(line)
			require.NotEmpty(t, f, "usage of %s: %q", c.name, usage)
			out = append(out, []string{c.name, f[0]})
		}
	}
	require.Greater(t, len(out), len(commands), "some commands have verbs")
	return out
}

// Every command and verb: -h prints its usage once, to stdout, nothing to
// stderr, exit 0; an unknown flag is one line on stderr naming it, exit 2.
func TestEveryCommandHelpAndBadFlag(t *testing.T) {
	for _, cmd := range verbs(t) {
		name := strings.Join(cmd, " ")
		t.Run(name, func(t *testing.T) {
			for _, h := range []string{"-h", "--help"} {
				status, out, errOut := runCLI(t, "", append(cmd, h)...)
				assert.Equal(t, exitOK, status)
				assert.Empty(t, errOut, "help goes to stdout only")
				assert.Equal(t, 1, strings.Count(out, "usage: kvready "+name), "usage printed once: %q", out)
			}
			status, out, errOut := runCLI(t, "", append(cmd, "--no-such-flag")...)
			assert.Equal(t, exitUsage, status)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
			assert.Contains(t, errOut, "-no-such-flag")
		})
	}
	for _, c := range commands {
		status, usage, _ := runCLI(t, "", c.name, "-h")
		require.Equal(t, exitOK, status)
		if strings.Contains(usage, "commands:\n") {
			status, out, errOut := runCLI(t, "", c.name)
			assert.Equal(t, exitUsage, status, "%s without a verb", c.name)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "usage: kvready "+c.name)
		}
	}
}

// One meaning per exit code, for every command: 0 done; 1 the input was read
// and is invalid (or the run unsafe); 2 usage errors and unreadable input.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	layout, err := os.ReadFile("../../staging/testdata/layout-simple.json")
	require.NoError(t, err)
	noGroups := regexp.MustCompile(`"layer_groups":\[.*\],`).ReplaceAllString(string(layout), `"layer_groups":[],`)
	key := strings.Repeat("ab", 32)
	derive := func(layers, shards string) []string {
		a := []string{"name", "derive", "--layout-hex", "aa", "--scope-hex", "00", "--layers", layers, "--group", "0", "--key-hex", key}
		if shards != "" {
			a = append(a, "--shards", shards)
		}
		return a
	}
	_, example, _ := runCLI(t, "", "profile", "example")
	notWritable := write("a-file", "x")
	for _, tc := range []struct {
		desc   string
		stdin  string
		args   []string
		status int
		stderr string
	}{
		{"version", "", []string{"version"}, exitOK, ""},
		{"version extra argument", "", []string{"version", "x"}, exitUsage, "takes no arguments"},
		{"layout id", "", []string{"layout", "id", write("l.json", string(layout))}, exitOK, ""},
		{"layout id on text that is not JSON", "hello", []string{"layout", "id", "-"}, exitUsage, "not a JSON object"},
		{"layout id on truncated JSON", `{"tokens_per_block":`, []string{"layout", "id", "-"}, exitUsage, "not a JSON object"},
		{"layout id on a missing file", "", []string{"layout", "id", filepath.Join(dir, "none.json")}, exitUsage, "no such file"},
		{"layout id on JSON of the wrong type", `{"tokens_per_block":"32"}`, []string{"layout", "id", "-"}, exitFail, "tokens_per_block: got string, want an integer"},
		{"layout id on empty layer_groups", noGroups, []string{"layout", "id", "-"}, exitOK, ""},
		{"profile validate", example, []string{"profile", "validate", "-"}, exitOK, ""},
		{"profile validate not JSON", "hello", []string{"profile", "validate", "-"}, exitUsage, "at byte"},
		{"profile validate refused", strings.Replace(example, `"tp": 1`, `"tp": 2`, 1), []string{"profile", "validate", "-"}, exitFail, "violation"},
		{"profile example", "", []string{"profile", "example"}, exitOK, ""},
		{"name derive", "", derive("4,5/0,1", ""), exitOK, ""},
		{"name derive layer in two groups", "", derive("4/4", ""), exitOK, ""},
		{"name derive layer twice in a group", "", derive("4,4", ""), exitOK, ""},
		{"name derive trailing / in --layers", "", derive("4/", ""), exitOK, ""},
		{"name derive trailing / in --shards", "", derive("4/5", "1:0/"), exitUsage, `--shards: entry 1 of "1:0/" is empty`},
		{"name derive leading / in --layers", "", derive("/4", ""), exitOK, ""},
		{"name explain not hex", "", []string{"name", "explain", "zz"}, exitUsage, "108 hex digits"},
		{"diagram", "", []string{"diagram", "--format", "dot"}, exitOK, ""},
		{"diagram unknown format", "", []string{"diagram", "--format", "png"}, exitUsage, `unknown format "png"`},
		{"simulate refused config", "", []string{"simulate", "--requests", "0"}, exitUsage, "--requests: 0"},
		{"simulate fault rates blame the flag given", "", []string{"simulate", "--quiesce-not-yet-rate", "1"}, exitUsage, "kvready: --quiesce-not-yet-rate: "},
		{"simulate report not writable", "", []string{"simulate", "--requests", "10", "--report", filepath.Join(notWritable, "sub")}, exitUsage, "--report: "},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			status, out, errOut := runCLI(t, tc.stdin, tc.args...)
			assert.Equal(t, tc.status, status, "stderr: %s", errOut)
			if tc.status == exitOK {
				assert.Empty(t, errOut)
				assert.NotEmpty(t, out)
				return
			}
			assert.Contains(t, errOut, tc.stderr)
			assert.NotRegexp(t, `staging\.json|jsonLayout|Go struct field|\*[a-z]+\.[A-Z]`, errOut, "no Go type names")
			if tc.status == exitUsage {
				assert.Empty(t, out, "a usage error prints no result")
			}
		})
	}
}

// The fault rates that were not given keep their defaults and are not blamed.
func TestSimulateRateSumBlamesOnlyGivenFlags(t *testing.T) {
	status, _, errOut := runCLI(t, "", "simulate", "--quiesce-not-yet-rate", "1")
	assert.Equal(t, exitUsage, status)
	assert.NotContains(t, errOut, "kvready: -miss-rate")
	assert.NotContains(t, errOut, "kvready: --miss-rate")
	assert.NotContains(t, errOut, "fault-rates:")
	status, _, errOut = runCLI(t, "", "simulate", "--miss-rate", "0.6", "--fail-rate", "0.6")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, errOut, "kvready: --fail-rate, --miss-rate: ")
}

// A report directory that cannot be written is refused before the run, not
// after it: nothing is simulated and no summary is printed.
func TestSimulateChecksReportDirFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	status, out, errOut := runCLI(t, "", "simulate", "--requests", "50", "--report", file)
	assert.Equal(t, exitUsage, status)
	assert.Empty(t, out, "no run, no summary")
	assert.NotContains(t, errOut, "simulate: ", "no progress: the run never started")
}

// A huge value is never echoed whole: cut, with its length.
func TestHugeValuesAreCut(t *testing.T) {
	huge := strings.Repeat("x", 5<<20)
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"simulate", "--requests", huge}},
		{"", []string{"name", "explain", huge}},
		{"", []string{"name", "derive", "--layout-hex", "aa", "--scope-hex", "00", "--layers", huge, "--group", "0", "--key-hex", "00"}},
		{`{"` + huge + `":1}`, []string{"layout", "id", "-"}},
		{strings.Replace(mustExample(t), `"bfloat16"`, `"`+huge+`"`, 1), []string{"profile", "validate", "-"}},
	} {
		status, out, errOut := runCLI(t, tc.stdin, tc.args...)
		assert.NotEqual(t, exitOK, status)
		assert.Less(t, len(out)+len(errOut), 4096, "%.40s: %.300s %.300s", tc.args, out, errOut)
		assert.NotContains(t, out+errOut, strings.Repeat("x", longWord+1), "%.40s", tc.args)
	}
}

func mustExample(t *testing.T) string {
	t.Helper()
	status, example, _ := runCLI(t, "", "profile", "example")
	require.Equal(t, exitOK, status)
	return example
}

func TestCutLong(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"short words stay", "short words stay"},
		{"a " + strings.Repeat("y", 97) + " b", "a " + strings.Repeat("y", 40) + "…(cut: 97 bytes in all) b"},
		{strings.Repeat("é", 60), strings.Repeat("é", 20) + "…(cut: 120 bytes in all)"},
		{strings.Repeat("z", 96), strings.Repeat("z", 96)},
	} {
		assert.Equal(t, tc.want, cutLong(tc.in))
	}
}

// The terminal progress bar redraws at most ten times a second (and once at
// the end), however many requests end: 20,000 requests used to print 3 MB.
// The bound is computed from the time the loop took, not asserted on it.
func TestProgressBarIsThrottled(t *testing.T) {
	var out bytes.Buffer
	const total = 20000
	start := time.Now()
	p := progressBar(&out, total, "kvready")
	for done := 1; done <= total; done++ {
		p(done, total)
	}
	elapsed := time.Since(start)
	redraws := strings.Count(out.String(), "\r")
	allowed := 2*int(elapsed/barRedraw) + 4 // a redraw may clear, then draw
	assert.LessOrEqual(t, redraws, allowed, "%d redraws in %v", redraws, elapsed)
	assert.Less(t, out.Len(), 200*allowed, "bytes written")
	assert.Positive(t, redraws, "the bar is drawn")
}

// --compare-naive runs both managers on one workload, prints both summaries
// and writes one report whose pages link to each other; the status is the
// engine run's.
func TestSimulateCompareNaive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	status, out, stderr := runCLI(t, "", "simulate", "--requests", "150", "--compare-naive", "--report", dir)
	require.Equal(t, exitOK, status, stderr)
	assert.Equal(t, 2, strings.Count(out, "kvready simulate — manager: "), out)
	assert.Contains(t, out, "manager: kvready")
	assert.Contains(t, out, "manager: naive")
	assert.Contains(t, out, "the same workload with a naive release policy")
	for _, f := range []string{"index.html", "naive.html", "safety.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err, f)
	}
	status, _, stderr = runCLI(t, "", "simulate", "--compare-naive", "--naive")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, stderr, "--compare-naive: ")
}
