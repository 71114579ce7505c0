package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// runOut runs kvready in process; it returns the output first, as these tests read it.
func runOut(args ...string) (stdout, stderr string, status int) {
	var out, errb bytes.Buffer
	status = run(&env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, args)
	return out.String(), errb.String(), status
}

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

const (
	goldenName = "ac0cbcea5a240bde17f6bac29386876a000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f000100040003"
	goldenKey  = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
)

func TestNameGolden(t *testing.T) {
	scopeFile := filepath.Join(t.TempDir(), "scope")
	scope := sha256.Sum256([]byte("golden-compute"))
	assert.NoError(t, os.WriteFile(scopeFile, scope[:], 0o600))
	layout := hexSum("golden-layout")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"derive", []string{"name", "derive", "--layout-hex", layout, "--scope-hex", hexSum("golden-compute"), "--layers", "4,5/0,1,2,3", "--shards", "4:3/1:0", "--group", "0", "--key-hex", goldenKey}, goldenName + "\n"},
		{"derive from a scope file", []string{"name", "derive", "--layout-hex", layout, "--scope-file", scopeFile, "--layers", "4,5/0,1,2,3", "--shards", "4:3/1:0", "--group", "0", "--key-hex", goldenKey}, goldenName + "\n"},
		{"derive whole by default", []string{"name", "derive", "--layout-hex", layout, "--scope-hex", "", "--layers", "4,5/0,1,2,3", "--group", "1", "--key-hex", goldenKey}, "" /* checked below */},
		{"part lg1", []string{"name", "part", "--layout-hex", layout, "--layers", "4,5/0,1,2,3", "--groups", "0"}, "94ede4f3bb6ba356:lg1\n"},
		{"part lg0", []string{"name", "part", "--layout-hex", layout, "--layers", "4,5/0,1,2,3", "--groups", "1"}, "94ede4f3bb6ba356:lg0\n"},
		{"part lg0+1", []string{"name", "part", "--layout-hex", layout, "--layers", "4,5/0,1,2,3", "--groups", "1,0,0"}, "94ede4f3bb6ba356:lg0+1\n"},
		{"explain", []string{"name", "explain", goldenName}, "namespace: ac0cbcea5a240bde17f6bac29386876a\nblock key: " + goldenKey + "\ncanonical group: 1\nshard count: 4\nshard index: 3\n"},
		{"layout id", []string{"layout", "id", "../../staging/testdata/layout-simple.json"}, "cb34d92ec6d4961a36d053db281528986f5614c44e0cc7871dc06c0b897ffc9d\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, status := runOut(tc.args...)
			assert.Equal(t, exitOK, status, errOut)
			assert.Empty(t, errOut)
			if tc.want == "" {
				assert.Regexp(t, `^[0-9a-f]{108}\n$`, out)
				assert.True(t, strings.HasSuffix(out, "000000010000\n"), "canonical group 0, shard 1:0: %s", out)
				return
			}
			assert.Equal(t, tc.want, out)
		})
	}
}

func TestNameRefusals(t *testing.T) {
	layout := hexSum("golden-layout")
	derive := func(override ...string) []string {
		flags := map[string]string{"--layout-hex": layout, "--scope-hex": "00", "--layers": "4,5/0,1,2,3", "--group": "0", "--key-hex": goldenKey}
		for i := 0; i+1 < len(override); i += 2 {
			flags[override[i]] = override[i+1]
		}
		args := []string{"name", "derive"}
		for _, k := range []string{"--layout-hex", "--scope-hex", "--scope-file", "--layers", "--shards", "--group", "--key-hex"} {
			if v, ok := flags[k]; ok && v != "<omit>" {
				args = append(args, k, v)
			}
		}
		return args
	}
	for _, tc := range []struct {
		name string
		args []string
		flag string
	}{
		{"odd layout hex", derive("--layout-hex", "abc"), "--layout-hex"},
		{"non-hex layout", derive("--layout-hex", "zz"), "--layout-hex"},
		{"empty layout id", derive("--layout-hex", ""), "--layout-hex"},
		{"odd scope hex", derive("--scope-hex", "0"), "--scope-hex"},
		{"scope over 65535 bytes", derive("--scope-hex", strings.Repeat("00", 65536)), "--scope-hex"},
		{"scope missing", derive("--scope-hex", "<omit>"), "--scope-hex"},
		{"both scopes", derive("--scope-file", "/dev/null"), "--scope-hex"},
		{"unreadable scope file", derive("--scope-hex", "<omit>", "--scope-file", "/nonexistent/scope"), "--scope-file"},
		{"short key", derive("--key-hex", "0011"), "--key-hex"},
		{"long key", derive("--key-hex", goldenKey+"00"), "--key-hex"},
		{"non-hex key", derive("--key-hex", strings.Repeat("g", 64)), "--key-hex"},
		{"shard outside count", derive("--shards", "4:4/1:0"), "--shards"},
		{"zero shard count", derive("--shards", "0:0/1:0"), "--shards"},
		{"shard count per group", derive("--shards", "4:3"), "--shards"},
		{"malformed shard", derive("--shards", "4-3/1:0"), "--shards"},
		{"unknown group", derive("--group", "2"), "--group"},
		{"negative group", derive("--group", "-1"), "--group"},
		{"group not a number", derive("--group", "x"), "--group"},
		{"group missing", derive("--group", "<omit>"), "--group"},
		{"layers missing", derive("--layers", "<omit>"), "--layers"},
		{"layers malformed", derive("--layers", "4,x/0"), "--layers"},
		{"part unknown group", []string{"name", "part", "--layout-hex", layout, "--layers", "0/1", "--groups", "0,2"}, "--groups"},
		{"part groups missing", []string{"name", "part", "--layout-hex", layout, "--layers", "0/1"}, "--groups"},
		{"part odd layout", []string{"name", "part", "--layout-hex", "a", "--layers", "0", "--groups", "0"}, "--layout-hex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, status := runOut(tc.args...)
			assert.NotEqual(t, exitOK, status)
			assert.Empty(t, out, "nothing on stdout when refused")
			assert.Contains(t, errOut, tc.flag)
		})
	}
}

func TestNameExplainRefusals(t *testing.T) {
	for _, arg := range []string{"", goldenName[:106], goldenName + "0", strings.Repeat("x", 108), strings.Repeat("0", 108)} {
		out, errOut, status := runOut("name", "explain", arg)
		assert.NotEqual(t, exitOK, status, arg)
		assert.Empty(t, out)
		assert.Contains(t, errOut, "name")
	}
	_, _, status := runOut("name", "explain")
	assert.Equal(t, exitUsage, status)
}

func TestLayoutIDRefusals(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	assert.NoError(t, os.WriteFile(bad, []byte(`{"tokens_per_block":0,"pool_groups":{},"layer_groups":[],"buffers":[]}`), 0o600))
	out, errOut, status := runOut("layout", "id", bad)
	assert.Equal(t, exitFail, status)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "tokens_per_block is 0")

	_, errOut, status = runOut("layout", "id", filepath.Join(dir, "missing.json"))
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, errOut, "missing.json")

	var stdout bytes.Buffer
	data, err := os.ReadFile("../../staging/testdata/layout-simple.json")
	assert.NoError(t, err)
	status = run(&env{stdin: bytes.NewReader(data), stdout: &stdout, stderr: &bytes.Buffer{}}, []string{"layout", "id", "-"})
	assert.Equal(t, exitOK, status)
	assert.Equal(t, "cb34d92ec6d4961a36d053db281528986f5614c44e0cc7871dc06c0b897ffc9d\n", stdout.String())
}
