package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
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

// refName and refPart are the reference lender's name and part name
// (_identity.py, KEY_FORMAT_VERSION 2), written here from its description as
// an oracle, independent of package staging: the namespace is the first 16
// bytes of SHA-256 over "trtllm-kv-object", u16(2), then scope and layout id
// each behind its u16 length; local groups sort by (smallest layer id, or
// 1<<62 for an empty group; local index); a part names the sorted set of the
// canonical indices it serves.
func refCanonical(layers [][]int) []int {
	order := make([]int, len(layers))
	for i := range order {
		order[i] = i
	}
	low := func(g int) int {
		m := 1 << 62
		for _, id := range layers[g] {
			m = min(m, id)
		}
		return m
	}
	sort.SliceStable(order, func(a, b int) bool { return low(order[a]) < low(order[b]) })
	canonical := make([]int, len(layers))
	for i, g := range order {
		canonical[g] = i
	}
	return canonical
}

func refName(scope, layout []byte, layers [][]int, shard [2]int, group int, key []byte) string {
	u16 := func(v int) []byte { return []byte{byte(v >> 8), byte(v)} }
	var msg []byte
	msg = append(msg, "trtllm-kv-object"...)
	msg = append(msg, u16(2)...)
	msg = append(append(msg, u16(len(scope))...), scope...)
	msg = append(append(msg, u16(len(layout))...), layout...)
	digest := sha256.Sum256(msg)
	name := append(append([]byte{}, digest[:16]...), key...)
	name = append(name, u16(refCanonical(layers)[group])...)
	name = append(append(name, u16(shard[0])...), u16(shard[1])...)
	return hex.EncodeToString(name)
}

func refPart(layout []byte, layers [][]int, groups []int) string {
	canonical := refCanonical(layers)
	set := map[int]bool{}
	for _, g := range groups {
		set[canonical[g]] = true
	}
	var served []int
	for c := range set {
		served = append(served, c)
	}
	sort.Ints(served)
	var parts []string
	for _, c := range served {
		parts = append(parts, strconv.Itoa(c))
	}
	prefix := hex.EncodeToString(layout)
	return prefix[:min(16, len(prefix))] + ":lg" + strings.Join(parts, "+")
}

// The name commands do what the reference does, checked against the oracle
// above and, where pinned, against values derived by hand from the algorithm
// with Python's hashlib: repeated --groups count once, an empty --scope-hex is
// the empty scope, a layer may be in two groups (or twice in one), and an
// empty group is a group that sorts last. The last four used to be refused.
func TestNameCommandsFollowTheReference(t *testing.T) {
	layoutHex := hexSum("golden-layout")
	layout, _ := hex.DecodeString(layoutHex)
	key, _ := hex.DecodeString(goldenKey)
	for _, tc := range []struct {
		desc   string
		scope  string // hex
		layers string
		parsed [][]int
		group  int
		groups string
		pinned string // a value derived by hand, or ""
	}{
		{"repeated groups count once", "00", "4,5/0,1,2,3", [][]int{{4, 5}, {0, 1, 2, 3}}, 0, "0,0", "94ede4f3bb6ba356:lg1"},
		{"repeated groups, both", "00", "4,5/0,1,2,3", [][]int{{4, 5}, {0, 1, 2, 3}}, 1, "1,0,1,0", "94ede4f3bb6ba356:lg0+1"},
		{"the empty scope", "", "4,5/0,1,2,3", [][]int{{4, 5}, {0, 1, 2, 3}}, 1, "1",
			"27f6083e5521a62b592de896aea3a2b6" + goldenKey + "000000010000"},
		{"a layer in two groups", "00", "4/4", [][]int{{4}, {4}}, 1, "1",
			"27db9f58e5be975f388e9fcf92aa20a4" + goldenKey + "000100010000"},
		{"a layer twice in one group", "00", "4,4/1", [][]int{{4, 4}, {1}}, 0, "0,1", ""},
		{"an empty group sorts last", "00", "/4", [][]int{{}, {4}}, 0, "0",
			"27db9f58e5be975f388e9fcf92aa20a4" + goldenKey + "000100010000"},
		{"an empty group in the middle", "00", "4,5//0,1", [][]int{{4, 5}, {}, {0, 1}}, 1, "1,2", "94ede4f3bb6ba356:lg0+2"},
		{"one empty group", "00", "", [][]int{{}}, 0, "0", "94ede4f3bb6ba356:lg0"},
		{"only empty groups keep local order", "00", "//", [][]int{{}, {}, {}}, 2, "2,0", "94ede4f3bb6ba356:lg0+2"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			scope, err := hex.DecodeString(tc.scope)
			require.NoError(t, err)
			wantName := refName(scope, layout, tc.parsed, [2]int{1, 0}, tc.group, key)
			out, errOut, status := runOut("name", "derive", "--layout-hex", layoutHex, "--scope-hex", tc.scope,
				"--layers", tc.layers, "--group", strconv.Itoa(tc.group), "--key-hex", goldenKey)
			require.Equal(t, exitOK, status, errOut)
			assert.Empty(t, errOut)
			assert.Equal(t, wantName+"\n", out)

			var groups []int
			for _, g := range strings.Split(tc.groups, ",") {
				v, _ := strconv.Atoi(g)
				groups = append(groups, v)
			}
			wantPart := refPart(layout, tc.parsed, groups)
			out, errOut, status = runOut("name", "part", "--layout-hex", layoutHex, "--layers", tc.layers, "--groups", tc.groups)
			require.Equal(t, exitOK, status, errOut)
			assert.Equal(t, wantPart+"\n", out)
			if tc.pinned != "" {
				assert.Contains(t, []string{wantName, wantPart}, tc.pinned, "the oracle agrees with the hand-derived value")
			}
		})
	}
}

// Against the oracle on random flags: any --layers of up to four groups
// (empty ones, shared and repeated layers included), any --groups, any scope.
func TestNameCommandsMatchOracle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		layers := rapid.SliceOfN(rapid.SliceOfN(rapid.IntRange(0, 9), 0, 3), 1, 4).Draw(t, "layers")
		var entries []string
		for _, g := range layers {
			var ids []string
			for _, id := range g {
				ids = append(ids, strconv.Itoa(id))
			}
			entries = append(entries, strings.Join(ids, ","))
		}
		layersArg := strings.Join(entries, "/")
		layout := rapid.SliceOfN(rapid.Byte(), 1, 40).Draw(t, "layout id")
		scope := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "scope")
		group := rapid.IntRange(0, len(layers)-1).Draw(t, "group")
		groups := rapid.SliceOfN(rapid.IntRange(0, len(layers)-1), 1, 5).Draw(t, "groups")
		var groupArgs []string
		for _, g := range groups {
			groupArgs = append(groupArgs, strconv.Itoa(g))
		}
		out, errOut, status := runOut("name", "derive", "--layout-hex", hex.EncodeToString(layout), "--scope-hex", hex.EncodeToString(scope),
			"--layers", layersArg, "--group", strconv.Itoa(group), "--key-hex", goldenKey)
		key, _ := hex.DecodeString(goldenKey)
		if want := refName(scope, layout, layers, [2]int{1, 0}, group, key) + "\n"; status != exitOK || out != want {
			t.Fatalf("derive --layers %q --group %d: status %d, %q %s; want %q", layersArg, group, status, out, errOut, want)
		}
		out, errOut, status = runOut("name", "part", "--layout-hex", hex.EncodeToString(layout), "--layers", layersArg, "--groups", strings.Join(groupArgs, ","))
		if want := refPart(layout, layers, groups) + "\n"; status != exitOK || out != want {
			t.Fatalf("part --layers %q --groups %v: status %d, %q %s; want %q", layersArg, groups, status, out, errOut, want)
		}
	})
}
