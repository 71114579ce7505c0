package peer_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/transfer"
)

func anOffer() peer.Offer {
	return peer.Offer{
		Session: transfer.SessionKey{Request: 77, Attempt: 3}, Writer: auxA, Incarnation: 4,
		Receiver: "decode", ReceiverInc: 9, Tokens: transfer.TokenRange{Start: 32, End: 80},
		Pages: []peer.OfferPage{
			{Group: 0, Index: 0, Key: []byte("key-0"), Offset: 0, Len: 16},
			{Group: 1, Index: 0, Key: []byte("key-state"), Offset: 4096, Len: 64},
		},
	}
}

func TestOfferRoundTrip(t *testing.T) {
	o := anOffer()
	b, err := peer.AppendOffer([]byte("prefix"), o)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("prefix")))
	got, err := peer.DecodeOffer(b[len("prefix"):])
	require.NoError(t, err)
	assert.Equal(t, o, got)
}

// Decoding refuses everything but one exact, valid encoding.
func TestDecodeOfferRefusals(t *testing.T) {
	good, err := peer.AppendOffer(nil, anOffer())
	require.NoError(t, err)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		msg  []byte
		want string
	}{
		{"empty", nil, "at least"},
		{"short", good[:10], "at least"},
		{"a wrong magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), "starts"},
		{"a wrong format", mutate(func(b []byte) []byte { b[4] = 2; return b }), "format"},
		{"a byte too many", append(append([]byte(nil), good...), 0), "after the last page"},
		{"a page cut short", good[:len(good)-3], "bytes left for a key"},
		{"attempt 0", mutate(func(b []byte) []byte { copy(b[13:17], []byte{0, 0, 0, 0}); return b }), "session.attempt"},
		{"an unknown role", mutate(func(b []byte) []byte { b[19] = 9; return b }), "writer.role"},
		{"a token beyond int64", mutate(func(b []byte) []byte { b[36] = 0x80; return b }), "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := peer.DecodeOffer(tt.msg)
			require.ErrorIs(t, err, peer.ErrWire)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// AppendOffer refuses an offer that does not validate, naming every mistake,
// and appends nothing.
func TestAppendOfferRefuses(t *testing.T) {
	o := anOffer()
	o.Session.Attempt = 0
	o.Incarnation = 0
	o.Pages = append(o.Pages, peer.OfferPage{Group: 0, Index: 0, Key: nil, Offset: -1, Len: 0})
	b, err := peer.AppendOffer([]byte("x"), o)
	assert.Equal(t, []byte("x"), b)
	var in *transfer.InputError
	require.ErrorAs(t, err, &in)
	var fields []string
	for _, m := range in.Mistakes {
		fields = append(fields, m.Field)
	}
	assert.Equal(t, []string{"session.attempt", "incarnation", "pages[2]", "pages[2].key", "pages[2].offset", "pages[2].len"}, fields)
}

// FuzzDecodeOffer: whatever the bytes, decoding never panics, and what it
// accepts re-encodes to exactly those bytes.
func FuzzDecodeOffer(f *testing.F) {
	good, err := peer.AppendOffer(nil, anOffer())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:40])
	f.Add([]byte("KVTO\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := peer.DecodeOffer(b)
		if err != nil {
			return
		}
		again, err := peer.AppendOffer(nil, o)
		if err != nil {
			t.Fatalf("an accepted offer does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("an accepted offer re-encodes differently:\n%x\n%x", b, again)
		}
	})
}
