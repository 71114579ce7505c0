package main

import (
	"strings"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `profile validate` accepts a profile naming either pinned revision, and
// refuses any other, naming both in what it supports.
func TestProfileValidateRevisions(t *testing.T) {
	example := mustExample(t)
	require.Contains(t, example, `"contract_revision": "`+contract.Revision+`"`)
	for _, tc := range []struct {
		revision string
		status   int
	}{
		{contract.Revision, exitOK},
		{contract.RevisionCancelRequest, exitOK},
		{contract.Revision + "+cancel-request-v2", exitFail},
		{"+cancel-request-v1", exitFail},
	} {
		t.Run(tc.revision, func(t *testing.T) {
			input := strings.Replace(example, `"`+contract.Revision+`"`, `"`+tc.revision+`"`, 1)
			status, out, errOut := runCLI(t, input, "profile", "validate", "-")
			assert.Equal(t, tc.status, status, errOut)
			if tc.status == exitOK {
				assert.Equal(t, "profile ok\n", out)
				assert.Empty(t, errOut)
				return
			}
			assert.Equal(t, `contract_revision: given "`+tc.revision+`", supported "`+contract.Revision+`" or "`+contract.RevisionCancelRequest+`"`+"\n", out)
		})
	}
}

// Every violated parallelism axis is reported at once, one line each, naming
// the field, what was given and what is supported: a malformed tp used to hide
// dp and pp.
func TestProfileValidateReportsEveryAxis(t *testing.T) {
	example := mustExample(t)
	input := strings.NewReplacer(`"tp": 1`, `"tp": 1.5`, `"dp": 1`, `"dp": -1`, `"pp": 1`, `"pp": 0`).Replace(example)
	require.NotEqual(t, example, input)
	status, out, errOut := runCLI(t, input, "profile", "validate", "-")
	assert.Equal(t, exitFail, status)
	assert.Equal(t, "parallelism.tp: wrong type: given number 1.5, supported the integer 1\n"+
		"parallelism.dp: given -1, supported 1\n"+
		"parallelism.pp: given 0, supported 1\n", out)
	assert.Contains(t, errOut, "3 violations")
}
