package staging

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The golden values of SPEC §3, computed by the reference lender.
const (
	goldenName     = "ac0cbcea5a240bde17f6bac29386876a000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f000100040003"
	goldenLayoutID = "cb34d92ec6d4961a36d053db281528986f5614c44e0cc7871dc06c0b897ffc9d"
)

func goldenIdentity(t *testing.T) *Identity {
	t.Helper()
	scope := sha256.Sum256([]byte("golden-compute"))
	layout := sha256.Sum256([]byte("golden-layout"))
	id, err := NewIdentity(scope[:], layout[:], [][]int{{4, 5}, {0, 1, 2, 3}}, []Shard{{4, 3}, {1, 0}})
	require.NoError(t, err)
	return id
}

func TestGoldenName(t *testing.T) {
	id := goldenIdentity(t)
	var key Key
	for i := range key {
		key[i] = byte(i)
	}
	n, err := id.Name(0, key)
	require.NoError(t, err)
	assert.Equal(t, goldenName, n.String())
}

func TestGoldenPartNames(t *testing.T) {
	id := goldenIdentity(t)
	for _, tc := range []struct {
		groups []int
		want   string
	}{
		{[]int{0}, "94ede4f3bb6ba356:lg1"},
		{[]int{1}, "94ede4f3bb6ba356:lg0"},
		{[]int{1, 0, 0}, "94ede4f3bb6ba356:lg0+1"},
	} {
		got, err := id.PartName(tc.groups)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "groups %v", tc.groups)
	}
}

func TestGoldenLayoutID(t *testing.T) {
	data, err := os.ReadFile("testdata/layout-simple.json")
	require.NoError(t, err)
	l, err := ParseLayout(data)
	require.NoError(t, err)
	id, err := l.ID()
	require.NoError(t, err)
	assert.Equal(t, goldenLayoutID, hex.EncodeToString(id[:]))
}

// The canonical JSON escapes exactly as Python's json.dumps(..., ensure_ascii=True):
// every character outside printable ASCII (0x20..0x7e), DEL (0x7f) included,
// as \uXXXX. The wants were printed by CPython 3 json.dumps, not by this code.
func TestCanonStringMatchesPython(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"k\x7fv", `"k\u007fv"`},
		{"\x7f", `"\u007f"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"a\"b\\c", `"a\"b\\c"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"caf\u00e9", `"caf\u00e9"`},
		{"\U0001F600", `"\ud83d\ude00"`},
		{"<>&/ ~", `"<>&/ ~"`},
	} {
		var w canonWriter
		w.str(tc.in)
		assert.Equal(t, tc.want, string(w.b), "%q", tc.in)
	}
}

// A role holding DEL gets the layout id the reference computes: the document
// and its SHA-256 below are CPython's json.dumps(sort_keys=True,
// separators=(",", ":"), ensure_ascii=True) of layout-simple.json with the
// "key" roles renamed "key\x7f".
func TestGoldenLayoutIDWithDEL(t *testing.T) {
	data, err := os.ReadFile("testdata/layout-simple.json")
	require.NoError(t, err)
	l, err := ParseLayout([]byte(strings.ReplaceAll(string(data), `"role":"key"`, `"role":"key\u007f"`)))
	require.NoError(t, err)
	doc, err := l.Document()
	require.NoError(t, err)
	assert.Equal(t, `{"buffers":[{"layer":0,"offset":0,"role":"key\u007f","size":16384},{"layer":0,"offset":16384,"role":"value","size":16384},`+
		`{"layer":1,"offset":32768,"role":"key\u007f","size":16384},{"layer":1,"offset":49152,"role":"value","size":16384}],`+
		`"groups":[{"layers":[0,1],"slot_bytes":[65536]}],"tokens_per_block":32,"v":2}`, string(doc))
	id, err := l.ID()
	require.NoError(t, err)
	assert.Equal(t, "0ef93957bf892cbd727eda6d69e1e12faf2af0a24c13f08c354ecbbe1a0781e5", hex.EncodeToString(id[:]))
}
