package staging

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
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
