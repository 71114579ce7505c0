package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layerMembership is the reference test suite's make_layout(layers=((0, 1),
// (2,))), the layer_membership case of test_layout_id_changes_with_every_input_
// that_decides_how_bytes_read: layers 0 and 1 have their "key" at offset 0 of
// pool (0,0) and their "scale" at offset 0 of pool (0,1). The reference hashes
// it; its id is what CPython's json.dumps gives the reference's document of it
// (see staging/reference_test.go).
const layerMembership = `{"tokens_per_block":32,"pool_groups":{"0":[100,40],"1":[64]},"layer_groups":[` +
	`{"kind":"attention","pool_group":0,"layers":[0,1]},{"kind":"attention","window":64,"pool_group":1,"layers":[2]}],"buffers":[` +
	`{"layer":0,"role":"key","pool":[0,0],"offset":0,"size":50},{"layer":0,"role":"scale","pool":[0,1],"offset":0,"size":20},` +
	`{"layer":1,"role":"key","pool":[0,0],"offset":0,"size":50},{"layer":1,"role":"scale","pool":[0,1],"offset":0,"size":20},` +
	`{"layer":2,"role":"key","pool":[1,0],"offset":0,"size":64}]}`

// `layout id` hashes what the reference hashes: overlapping buffers with at
// most a warning on stderr, never a refusal; no layer group at all. What Go
// cannot represent as the reference does is refused, never replaced.
func TestLayoutIDFollowsTheReference(t *testing.T) {
	single := func(role string) string {
		return `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[{"kind":"attention","pool_group":0,"layers":[0]}],` +
			`"buffers":[{"layer":0,"role":"` + role + `","pool":[0,0],"offset":0,"size":64}]}`
	}
	at := strings.Index(single(""), `"role":"`) + len(`"role":"`) // where a role's text starts
	for _, tc := range []struct {
		desc     string
		input    string
		status   int
		stdout   string
		warnings []string // the stderr lines, in order
		stderr   string   // for a refusal: what stderr says
	}{
		{"overlapping buffers", layerMembership, exitOK, "846aaa84b4a7f9bd3d55414d1ac058efcb6e4df44c2a7d138542c91d8d407d58\n", []string{
			`kvready: warning: -: buffers[0] (layer 0, role "key"; bytes 0..50) and buffers[2] (layer 1, role "key"; bytes 0..50) share bytes 0..50 of the slot of pool [0 0]; hashed as the reference hashes it`,
			`kvready: warning: -: buffers[1] (layer 0, role "scale"; bytes 0..20) and buffers[3] (layer 1, role "scale"; bytes 0..20) share bytes 0..20 of the slot of pool [0 1]; hashed as the reference hashes it`,
		}, ""},
		{"no layer groups", `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":64}]}`,
			exitOK, "6f8c0d01154e9596b9c2282fefc6f673e14ad2fbf6ca56f46e8ab982d7a881d5\n", nil, ""},
		{"a U+FFFD role", single(`\ufffd`), exitOK, "6205ebf50182f7643bfdfa2f304135217168d51c289b56cc99ad4c4addda71cf\n", nil, ""},
		{"a lone surrogate role", single(`\ud800`), exitFail, "", nil, fmt.Sprintf(`invalid layout: staging: layout: a lone UTF-16 surrogate in a JSON string: \ud800 at byte %d`, at)},
		{"a role that is not UTF-8", single("\xed\xa0\x80"), exitUsage, "", nil, fmt.Sprintf("not UTF-8 (first bad byte at offset %d)", at)},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			status, out, errOut := runCLI(t, tc.input, "layout", "id", "-")
			require.Equal(t, tc.status, status, errOut)
			assert.Equal(t, tc.stdout, out)
			if tc.status != exitOK {
				assert.Contains(t, errOut, tc.stderr)
				return
			}
			var lines []string
			if errOut != "" {
				lines = strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			}
			assert.Equal(t, tc.warnings, lines)
		})
	}
}

// However many buffers overlap, the warnings stay a few lines.
func TestLayoutIDWarningsAreBounded(t *testing.T) {
	var buffers []string
	for layer := range 20 {
		buffers = append(buffers, fmt.Sprintf(`{"layer":%d,"role":"k","pool":[0,0],"offset":0,"size":64}`, layer))
	}
	input := `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[` + strings.Join(buffers, ",") + `]}`
	status, out, errOut := runCLI(t, input, "layout", "id", "-")
	require.Equal(t, exitOK, status, errOut)
	assert.Regexp(t, `^[0-9a-f]{64}\n$`, out)
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	require.Len(t, lines, maxOverlapWarnings+1)
	for _, l := range lines[:maxOverlapWarnings] {
		assert.True(t, strings.HasPrefix(l, "kvready: warning: -: buffers["), l)
	}
	assert.Equal(t, fmt.Sprintf("kvready: warning: -: %d more overlapping buffers not listed", 19-maxOverlapWarnings), lines[maxOverlapWarnings])
}
