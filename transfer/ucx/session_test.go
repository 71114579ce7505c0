package ucx

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// The messages of TestSessionOverUCX, a tag byte then the body: an
// advertisement, a published key (after the session's id), or evidence.
const (
	tagCaps     = 'C'
	tagKey      = 'K'
	tagEvidence = 'E'
)

// TestSessionOverUCX: one request's pages, decode side, through the
// transfer layer's session core over UCX. Capabilities cross first; the key
// is published only once the prefill's advertisement was negotiated and the
// session created; the prefill puts, flushes, and only then sends its DONE
// (its PER_OPERATION_QUIESCENCE promise); the decode side checks that the
// evidence's peer and incarnation are those UCX delivered it under, steps
// it, revokes (fenced) and retires the session. The prefill then breaks its
// fence, posting again with the key it still holds into pages re-lent to
// someone else: refused, the pages untouched.
func TestSessionOverUCX(t *testing.T) {
	cfg := Config{Transports: "tcp"}
	decode := newNode(t, cfg, "decode", 1)
	prefill := newNode(t, cfg, "prefill", 41)
	advertise := func(n *node) transfer.Capabilities {
		name, inc := n.Self()
		return transfer.Capabilities{Peer: name, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	}

	// The prefill side: answers a key with puts, a flush, then DONE.
	var toDecode transfer.Endpoint
	var session transfer.SessionKey
	var heardKey []byte
	prefill.SetHandlers(transfer.Handlers{Message: func(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
		if msg[0] == tagKey {
			session = transfer.SessionKey{Request: transfer.RequestID(binary.BigEndian.Uint64(msg[1:])), Attempt: transfer.AttemptID(binary.BigEndian.Uint32(msg[9:]))}
			heardKey = append([]byte(nil), msg[13:]...)
		}
	}})
	toDecode, toPrefill := link(t, prefill, decode)
	caps, err := transfer.AppendCapabilities([]byte{tagCaps}, advertise(prefill))
	require.NoError(t, err)
	_, err = toDecode.Send(caps)
	require.NoError(t, err)

	// The decode side: negotiates, then creates the session, then publishes.
	pump(t, "the prefill's advertisement", func() bool { return len(decode.heard()) == 1 }, prefill, decode)
	m := decode.heard()[0]
	require.Equal(t, byte(tagCaps), m.msg[0])
	remote, err := transfer.DecodeCapabilities([]byte(m.msg[1:]))
	require.NoError(t, err)
	require.Equal(t, m.from, remote.Peer, "the advertisement names the peer UCX heard it from")
	require.Equal(t, m.inc, remote.Incarnation)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	kv := transfer.AccessorID{Peer: "prefill", Role: transfer.RoleKV}
	cc := transfer.CohortConfig{
		Session: transfer.SessionKey{Request: 1001, Attempt: 1}, Tokens: transfer.TokenRange{End: 64}, Leased: true,
		Submitted: now, Deadline: now.Add(time.Minute), Containment: now.Add(2 * time.Minute),
	}
	agreement, err := transfer.Negotiate(advertise(decode), remote, cc.Requires())
	require.NoError(t, err)
	cc.Accessors = []transfer.AccessorSpec{{ID: kv, Agreement: agreement}}
	sessions, err := transfer.NewSessions(transfer.Limits{Sessions: 8, Tombstones: 8, Window: time.Minute})
	require.NoError(t, err)
	require.NoError(t, sessions.Create(now, cc))
	pages := sentinel(64 * 256) // 64 tokens, 256 bytes each
	mem, err := decode.Register(pages)
	require.NoError(t, err)
	require.NoError(t, sessions.Expose(now, cc.Session), "exposed before the key leaves")
	pub := binary.BigEndian.AppendUint64([]byte{tagKey}, uint64(cc.Session.Request))
	pub = binary.BigEndian.AppendUint32(pub, uint32(cc.Session.Attempt))
	_, err = toPrefill.Send(append(pub, mem.PackedKey()...))
	require.NoError(t, err)

	pump(t, "the published key", func() bool { return heardKey != nil }, prefill, decode)
	key, err := toDecode.UnpackKey(heardKey)
	require.NoError(t, err)
	src := pattern(3, len(pages))
	var puts []transfer.Request
	for i := 0; i < len(src); i += 4096 {
		r, err := toDecode.Put(src[i:i+4096], key, i)
		require.NoError(t, err)
		puts = append(puts, r)
	}
	flush, err := toDecode.Flush()
	require.NoError(t, err)
	require.NoError(t, wait(t, flush, prefill, decode))
	for _, r := range puts {
		done, err := r.Test()
		require.True(t, done, "the flush covers every put")
		require.NoError(t, err)
	}
	done, err := transfer.AppendEvidence([]byte{tagEvidence}, transfer.Evidence{
		Kind: transfer.Done, Session: session, Accessor: kv, Incarnation: 41, TokenEnd: 64,
	})
	require.NoError(t, err)
	_, err = toDecode.Send(done)
	require.NoError(t, err)

	pump(t, "the DONE", func() bool { return len(decode.heard()) == 2 }, prefill, decode)
	m = decode.heard()[1]
	require.Equal(t, byte(tagEvidence), m.msg[0])
	ev, err := transfer.DecodeEvidence([]byte(m.msg[1:]))
	require.NoError(t, err)
	require.Equal(t, m.from, ev.Accessor.Peer, "the evidence names the peer UCX heard it from")
	require.Equal(t, m.inc, ev.Incarnation, "and its incarnation")
	require.NoError(t, sessions.Step(now, ev))
	outcome, ok := sessions.Outcome(cc.Session)
	require.True(t, ok)
	assert.Equal(t, transfer.Delivered{TokenEnd: 64}, outcome)
	assert.Equal(t, src, pages, "delivered: the pages hold what was put")

	how, err := mem.Revoke()
	require.NoError(t, err)
	require.NoError(t, sessions.Revoked(now, cc.Session, how.Fences()))
	require.True(t, sessions.Poll(now, cc.Session).Reusable())
	require.NoError(t, sessions.Retire(now, cc.Session))

	// Re-lent: the prefill, fence broken, writes again with its old key.
	copy(pages, sentinel(len(pages)))
	late, err := toDecode.Put(pattern(9, 4096), key, 0)
	require.NoError(t, err)
	require.ErrorIs(t, wait(t, late, prefill, decode), ErrRevoked)
	assert.Equal(t, sentinel(len(pages)), pages, "the re-lent pages are untouched")
}
