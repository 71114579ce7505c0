package transfer_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestEvidenceWire(t *testing.T) {
	good := transfer.Evidence{Kind: transfer.Failure, Session: transfer.SessionKey{Request: 1 << 40, Attempt: 3},
		Accessor: transfer.AccessorID{Peer: "prefill-α", Rank: 7, Role: transfer.RoleAux}, Incarnation: 9, Reason: "endpoint reset"}
	b, err := transfer.AppendEvidence([]byte("prefix"), good)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("prefix")), "appends")
	got, err := transfer.DecodeEvidence(b[len("prefix"):])
	require.NoError(t, err)
	assert.Equal(t, good, got)

	enc := b[len("prefix"):]
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), enc...)) }
	for _, tc := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"empty", nil, "at least"},
		{"short", enc[:10], "at least"},
		{"magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), "starts"},
		{"format", mutate(func(b []byte) []byte { b[4] = 2; return b }), "format 2"},
		{"trailing byte", append(append([]byte(nil), enc...), 0), "length prefixes say"},
		{"truncated name", enc[:len(enc)-1], "length prefixes say"},
		{"token_end beyond int64", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[29:], 1<<63); return b }), "exceeds"},
		{"unknown kind", mutate(func(b []byte) []byte { b[5] = 9; return b }), "kind"},
		{"zero attempt", mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[14:], 0); return b }), "session.attempt"},
		{"a reason on a report", mutate(func(b []byte) []byte { b[5] = byte(transfer.Report); return b }), "reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := transfer.DecodeEvidence(tc.msg)
			require.ErrorIs(t, err, transfer.ErrWire)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = transfer.AppendEvidence(nil, transfer.Evidence{})
	var ie *transfer.InputError
	require.True(t, errors.As(err, &ie))
	assert.Len(t, ie.Mistakes, 5, "kind, attempt, peer, role, incarnation: %v", err)
}

func TestCapabilitiesWire(t *testing.T) {
	good := transfer.Capabilities{Peer: "prefill-a", Incarnation: 1 << 50, Version: 3, Supported: transfer.KnownCapabilities | 1<<60}
	b, err := transfer.AppendCapabilities(nil, good)
	require.NoError(t, err)
	got, err := transfer.DecodeCapabilities(b)
	require.NoError(t, err)
	assert.Equal(t, good, got, "bits unknown here survive decoding; Negotiate drops them")
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"short", b[:6]},
		{"wrong magic", append([]byte("KVTE"), b[4:]...)},
		{"trailing", append(append([]byte(nil), b...), 'x')},
		{"no peer", append(append([]byte(nil), b[:len(b)-len(good.Peer)-1]...), 0)},
	} {
		_, err := transfer.DecodeCapabilities(tc.msg)
		assert.ErrorIs(t, err, transfer.ErrWire, tc.name)
	}
	_, err = transfer.AppendCapabilities(nil, transfer.Capabilities{Peer: transfer.Peer(strings.Repeat("p", 256)), Incarnation: 1, Version: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at most 255 bytes")
}

// Every valid piece of evidence survives its wire form.
func TestEvidenceRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := transfer.EvidenceKind(rapid.IntRange(1, 5).Draw(t, "kind"))
		e := transfer.Evidence{
			Kind:        kind,
			Session:     transfer.SessionKey{Request: transfer.RequestID(rapid.Uint64().Draw(t, "request")), Attempt: transfer.AttemptID(rapid.Uint32Min(1).Draw(t, "attempt"))},
			Accessor:    transfer.AccessorID{Peer: transfer.Peer(rapid.StringOfN(rapid.Rune(), 1, 60, transfer.MaxPeerLen).Draw(t, "peer")), Rank: rapid.Uint16().Draw(t, "rank"), Role: transfer.Role(rapid.IntRange(1, 2).Draw(t, "role"))},
			Incarnation: transfer.Incarnation(rapid.Uint64Min(1).Draw(t, "inc")),
		}
		if kind == transfer.Report || kind == transfer.Done {
			e.TokenEnd = rapid.Int64Min(0).Draw(t, "token_end")
		}
		if kind == transfer.Failure {
			e.Reason = rapid.StringN(0, 200, transfer.MaxReasonLen).Draw(t, "reason")
		}
		b, err := transfer.AppendEvidence(nil, e)
		if err != nil {
			t.Fatalf("valid evidence refused: %v", err)
		}
		got, err := transfer.DecodeEvidence(b)
		if err != nil || got != e {
			t.Fatalf("round trip: %v, %v != %v", err, got, e)
		}
	})
}

// FuzzDecodeEvidence: no input makes the decoder panic, and whatever it
// accepts is valid and re-encodes to exactly the bytes it came from.
func FuzzDecodeEvidence(f *testing.F) {
	for _, e := range []transfer.Evidence{
		ev(transfer.Done, kv0, 64), ev(transfer.Failure, aux0, 0), ev(transfer.Report, kv1, 3), ev(transfer.Quiesced, kv0, 0),
	} {
		b, err := transfer.AppendEvidence(nil, e)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("KVTE"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := transfer.DecodeEvidence(b)
		if err != nil {
			require.ErrorIs(t, err, transfer.ErrWire)
			return
		}
		require.NoError(t, e.Validate())
		again, err := transfer.AppendEvidence(nil, e)
		require.NoError(t, err)
		require.Equal(t, b, again)
	})
}

// FuzzDecodeCapabilities: the same for advertisements.
func FuzzDecodeCapabilities(f *testing.F) {
	b, err := transfer.AppendCapabilities(nil, local)
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte("KVTC\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := transfer.DecodeCapabilities(b)
		if err != nil {
			require.ErrorIs(t, err, transfer.ErrWire)
			return
		}
		again, err := transfer.AppendCapabilities(nil, c)
		require.NoError(t, err)
		require.Equal(t, b, again)
		_, err = transfer.Negotiate(local, c, 0)
		require.NoError(t, err, "a decoded advertisement negotiates")
	})
}
