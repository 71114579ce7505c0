package staging

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNamespaceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name            string
		scope, layoutID []byte
		want            string
	}{
		{"empty layout id", []byte("s"), nil, "layout id is empty"},
		{"scope over 65535 bytes", make([]byte, MaxScope+1), []byte{1}, "scope is 65536 bytes"},
		{"layout id over 65535 bytes", nil, make([]byte, MaxScope+1), "layout id is 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewNamespace(tc.scope, tc.layoutID)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := NewNamespace(make([]byte, MaxScope), []byte{1})
	assert.NoError(t, err, "a scope of exactly 65535 bytes fits")
}

func TestNamespaceSeparatesScopeFromLayout(t *testing.T) {
	// The length prefixes keep ("ab","c") and ("a","bc") apart.
	a, err := NewNamespace([]byte("ab"), []byte("c"))
	require.NoError(t, err)
	b, err := NewNamespace([]byte("a"), []byte("bc"))
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
}

func TestCanonicalOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]int
		want   []int
	}{
		{"golden", [][]int{{4, 5}, {0, 1, 2, 3}}, []int{1, 0}},
		{"empty group sorts last", [][]int{{}, {7}, {3}}, []int{2, 1, 0}},
		{"ties keep local order", [][]int{{2, 9}, {2}, {1}}, []int{1, 2, 0}},
		{"empty groups tie in local order", [][]int{{}, {}, {0}}, []int{1, 2, 0}},
		{"unsorted layers use the smallest", [][]int{{9, 1}, {5, 2}}, []int{0, 1}},
		{"an id at the empty sentinel ties with empty", [][]int{{}, {1 << 62}}, []int{0, 1}},
		{"no groups", nil, []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, CanonicalOrder(tc.layers))
		})
	}
}

func TestIdentityRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]int
		shards []Shard
		want   string
	}{
		{"shard count differs from groups", [][]int{{0}, {1}}, []Shard{Whole}, "2 layer groups but 1 shards"},
		{"zero count", [][]int{{0}}, []Shard{{0, 0}}, "shard 0 of 0"},
		{"index at count", [][]int{{0}}, []Shard{{4, 4}}, "shard 4 of 4"},
		{"negative index", [][]int{{0}}, []Shard{{4, -1}}, "shard -1 of 4"},
		{"count over u16", [][]int{{0}}, []Shard{{1 << 16, 0}}, "shard 0 of 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewIdentity(nil, []byte{1}, tc.layers, tc.shards)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestIdentityUnknownGroup(t *testing.T) {
	id := goldenIdentity(t)
	for _, g := range []int{-1, 2} {
		_, err := id.Name(g, Key{})
		assert.ErrorContains(t, err, "unknown layer group")
		_, err = id.PartName([]int{0, g})
		assert.ErrorContains(t, err, "unknown layer group")
	}
}

func TestPartNameShortLayoutID(t *testing.T) {
	id, err := NewIdentity(nil, []byte{0xab, 0xcd}, [][]int{{0}}, []Shard{Whole})
	require.NoError(t, err)
	got, err := id.PartName([]int{0})
	require.NoError(t, err)
	assert.Equal(t, "abcd:lg0", got)
	got, err = id.PartName(nil)
	require.NoError(t, err)
	assert.Equal(t, "abcd:lg", got, "a part serving no group names none")
}

func TestExplainRoundTrip(t *testing.T) {
	id := goldenIdentity(t)
	var key Key
	copy(key[:], bytes.Repeat([]byte{0xee}, KeySize))
	for g, want := range []NameFields{
		{Group: 1, Shard: Shard{4, 3}},
		{Group: 0, Shard: Whole},
	} {
		n, err := id.Name(g, key)
		require.NoError(t, err)
		f, err := Explain(n)
		require.NoError(t, err)
		assert.Equal(t, id.Namespace(), f.Namespace)
		assert.Equal(t, key, f.Key)
		assert.Equal(t, want.Group, f.Group)
		assert.Equal(t, want.Shard, f.Shard)
	}
}

func TestExplainRefusesImpossibleShard(t *testing.T) {
	var n contract.Name // shard count 0
	_, err := Explain(n)
	assert.ErrorContains(t, err, "impossible shard")
	n[51], n[53] = 2, 2 // index 2 of 2
	_, err = Explain(n)
	assert.ErrorContains(t, err, "shard 2 of 2")
}

func TestParseName(t *testing.T) {
	n, err := ParseName(goldenName)
	require.NoError(t, err)
	assert.Equal(t, goldenName, n.String())
	for _, bad := range []string{"", goldenName[:106], goldenName + "00", "zz" + goldenName[2:]} {
		_, err := ParseName(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestLayoutIdentity(t *testing.T) {
	l := simpleLayout(t)
	scope := sha256.Sum256([]byte("s"))
	id, err := l.Identity(scope[:])
	require.NoError(t, err)
	part, err := id.PartName([]int{0})
	require.NoError(t, err)
	assert.Equal(t, goldenLayoutID[:16]+":lg0", part)
}
