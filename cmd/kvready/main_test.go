package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCLI runs the command in process and returns its exit status and output.
func runCLI(t *testing.T, stdin string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status = run(&env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut}, args)
	return status, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	status, out, _ := runCLI(t, "", "version")
	assert.Equal(t, exitOK, status)
	assert.Contains(t, out, "kvready "+version)
	assert.Contains(t, out, contract.Revision)
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{nil, exitUsage, "usage: kvready"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"version", "-x"}, exitUsage, "flag provided but not defined: -x"},
		{[]string{"version", "extra"}, exitUsage, "takes no arguments"},
		{[]string{"profile"}, exitUsage, "usage: kvready profile"},
		{[]string{"profile", "check"}, exitUsage, `unknown profile command "check"`},
		{[]string{"profile", "validate"}, exitUsage, "exactly one FILE"},
		{[]string{"profile", "validate", "--strict", "x"}, exitUsage, "flag provided but not defined"},
		{[]string{"profile", "validate", "/no/such/file.json"}, exitUsage, "no such file"},
		{[]string{"profile", "example", "x"}, exitUsage, "takes no arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			status, out, errOut := runCLI(t, "", tc.args...)
			assert.Equal(t, tc.status, status)
			assert.Contains(t, errOut, tc.stderr)
			assert.Empty(t, out, "nothing goes to stdout on a usage error")
		})
	}
}

func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"version", "-h"}, {"profile", "-h"}, {"profile", "validate", "-h"}, {"profile", "example", "-h"}} {
		status, out, _ := runCLI(t, "", args...)
		assert.Equal(t, exitOK, status, "%v", args)
		assert.Contains(t, out, "usage: kvready", "%v", args)
	}
}

func TestProfileExampleValidates(t *testing.T) {
	status, example, _ := runCLI(t, "", "profile", "example")
	require.Equal(t, exitOK, status)
	status, out, _ := runCLI(t, example, "profile", "validate", "-")
	assert.Equal(t, exitOK, status)
	assert.Equal(t, "profile ok\n", out)

	// The bundled example that `make demo` validates is the printed one.
	bundled, err := os.ReadFile("../../docs/examples/profile.json")
	require.NoError(t, err)
	assert.Equal(t, example, string(bundled))
}

func TestProfileValidateRefusals(t *testing.T) {
	_, example, _ := runCLI(t, "", "profile", "example")
	for _, tc := range []struct {
		desc   string
		input  string
		status int
		lines  []string
	}{
		{"unsupported values", strings.NewReplacer(`"bfloat16"`, `"float16"`, `"tp": 1`, `"tp": 2`).Replace(example), exitFail,
			[]string{`cache_dtype: given "float16", supported "bfloat16"`, "parallelism.tp: given 2, supported 1"}},
		{"missing and unknown keys, wrong type", strings.NewReplacer(`"layout": "HND",`, `"colour": "blue",`, `"committed_whole_blocks": true`, `"committed_whole_blocks": 1`).Replace(example), exitFail,
			[]string{"layout: missing", "colour: unknown key", "committed_whole_blocks: wrong type"}},
		{"empty input", "", exitUsage, nil},
		{"truncated", example[:30], exitUsage, nil},
		{"trailing data", example + "{}", exitUsage, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			status, out, errOut := runCLI(t, tc.input, "profile", "validate", "-")
			assert.Equal(t, tc.status, status)
			for _, l := range tc.lines {
				assert.Contains(t, out, l)
			}
			if tc.status == exitUsage {
				assert.Empty(t, out)
				assert.Contains(t, errOut, "at byte", "a syntax error says where it broke")
			}
		})
	}
}

func TestProfileValidateFile(t *testing.T) {
	status, out, _ := runCLI(t, "", "profile", "validate", "../../docs/examples/profile.json")
	assert.Equal(t, exitOK, status)
	assert.Equal(t, "profile ok\n", out)
}
