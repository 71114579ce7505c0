package ucx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

func TestWireRoundTrip(t *testing.T) {
	a := address{peer: "decode-0", inc: 3, worker: []byte{1, 2, 3}}
	got, err := decodeAddress(a.append(nil))
	require.NoError(t, err)
	assert.Equal(t, a, got)
	for _, k := range []key{
		{mode: Checked, owner: "decode-0", inc: 2, len: 4096, region: 5, gen: 9},
		{mode: OneSided, owner: "d", inc: 1, len: 1, base: 0xdead000, rkey: []byte{7, 7}},
	} {
		got, err := decodeKey(k.append(nil))
		require.NoError(t, err)
		assert.Equal(t, k, got)
	}
}

func TestWireRefusals(t *testing.T) {
	good := key{mode: Checked, owner: "decode", inc: 2, len: 64, region: 0, gen: 1}.append(nil)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "ends at byte 0"},
		{"wrong magic", append([]byte("KVUA"), good[4:]...), `starts "KVUA"`},
		{"wrong version", append(append([]byte("KVUK"), 2), good[5:]...), "version 2"},
		{"truncated", good[:len(good)-1], "1 more expected"},
		{"trailing", append(bytes.Clone(good), 0), "1 bytes after its end"},
		{"mode", key{mode: 7, owner: "d", inc: 1, len: 1}.append(nil), "key mode 7"},
		{"no owner", key{mode: Checked, inc: 1, len: 1, gen: 1}.append(nil), `owner ""`},
		{"incarnation 0", key{mode: Checked, owner: "d", len: 1, gen: 1}.append(nil), "incarnation 0"},
		{"empty registration", key{mode: Checked, owner: "d", inc: 1, gen: 1}.append(nil), "covers 0 bytes"},
		{"generation 0", key{mode: Checked, owner: "d", inc: 1, len: 1}.append(nil), "generation 0"},
		{"no rkey", key{mode: OneSided, owner: "d", inc: 1, len: 1}.append(nil), "rkey of 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeKey(tc.b)
			require.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	for _, tc := range []struct {
		name string
		a    address
		want string
	}{
		{"no name", address{inc: 1, worker: []byte{1}}, "names no peer"},
		{"incarnation 0", address{peer: "p", worker: []byte{1}}, "incarnation 0"},
		{"no worker", address{peer: "p", inc: 1}, "worker address of 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeAddress(tc.a.append(nil))
			require.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// FuzzDecodeKey: a decoder accepts exactly one encoding: what it accepts
// re-encodes to the same bytes, so two keys never mean one registration.
func FuzzDecodeKey(f *testing.F) {
	f.Add(key{mode: Checked, owner: "decode", inc: 2, len: 64, gen: 1}.append(nil))
	f.Add(key{mode: OneSided, owner: "d", inc: 1, len: 1, base: 4096, rkey: []byte{1}}.append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeKey(b)
		if err != nil {
			return
		}
		require.Equal(t, b, k.append(nil))
	})
}

// FuzzDecodeAddress: the same for addresses.
func FuzzDecodeAddress(f *testing.F) {
	f.Add(address{peer: transfer.Peer("prefill"), inc: 1, worker: []byte{1, 2}}.append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAddress(b)
		if err != nil {
			return
		}
		require.Equal(t, b, a.append(nil))
	})
}

func TestBundleRoundTripAndRefusals(t *testing.T) {
	msgs := [][]byte{[]byte("offer one"), nil, bytes.Repeat([]byte{7}, 300)}
	got, err := splitBundle(appendBundle(nil, msgs), len(msgs))
	require.NoError(t, err)
	assert.Equal(t, msgs, got)

	good := appendBundle(nil, [][]byte{[]byte("ab"), []byte("c")})
	for _, tc := range []struct {
		name  string
		b     []byte
		count int
		want  string
	}{
		{"one message", appendBundle(nil, [][]byte{[]byte("a")}), 1, "bundle of 1 messages; 2 to 256 expected"},
		{"too many", good, maxBundled + 1, "bundle of 257 messages"},
		{"count beyond the data", good, 3, "more expected"},
		{"truncated", good[:len(good)-1], 2, "1 more expected"},
		{"trailing", append(bytes.Clone(good), 0), 2, "1 bytes after its end"},
		{"too large", appendBundle(nil, [][]byte{make([]byte, MaxMessage), {1}}), 2, "at most 65544 expected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := splitBundle(tc.b, tc.count)
			require.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// FuzzSplitBundle: a bundle is split only from exactly one encoding — what
// splitBundle accepts frames back to the same bytes — and no input makes
// it panic or answer more than it was told.
func FuzzSplitBundle(f *testing.F) {
	f.Add(appendBundle(nil, [][]byte{[]byte("offer"), []byte("cancel")}), 2)
	f.Add(appendBundle(nil, [][]byte{{}, {}, {1}}), 3)
	f.Fuzz(func(t *testing.T, b []byte, count int) {
		msgs, err := splitBundle(b, count)
		if err != nil {
			return
		}
		require.Len(t, msgs, count)
		require.Equal(t, b, appendBundle(nil, msgs))
	})
}
