package ucx

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// TestSendsBetweenProgressLeaveTogether: messages sent to one peer between
// two Progress calls leave as one active message, are heard one by one in
// the order sent, and none is heard before the sender's next Progress; a
// put posted after them sends them first, so the report it carries is
// heard after them.
func TestSendsBetweenProgressLeaveTogether(t *testing.T) {
	for _, s := range setups(t, Checked, OneSided) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := newNode(t, s.cfg, "prefill", 1)
			toPrefill, toDecode := link(t, decode, prefill)
			var want []heardMsg
			var reqs []transfer.Request
			for i := range 5 {
				m := fmt.Sprintf("offer %d", i)
				r, err := toPrefill.Send([]byte(m))
				require.NoError(t, err)
				reqs = append(reqs, r)
				want = append(want, heardMsg{"decode", 1, m})
			}
			for range 64 {
				prefill.Progress()
			}
			assert.Empty(t, prefill.heard(), "nothing leaves before the sender's Progress")
			pump(t, "the five messages", func() bool { return len(prefill.heard()) == len(want) }, decode, prefill)
			assert.Equal(t, want, prefill.heard())
			assert.Equal(t, uint64(len(want)), decode.Stats().MsgsBundled)
			for _, r := range reqs {
				require.NoError(t, wait(t, r, decode, prefill))
			}

			if s.cfg.Mode != Checked {
				return
			}
			pages := sentinel(4096)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			k, err := toDecode.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			_, err = toDecode.Send([]byte("before"))
			require.NoError(t, err)
			put, err := toDecode.(transfer.ReportCarrier).PutReport(pattern(3, 4096), k, 0, []byte("done"))
			require.NoError(t, err)
			require.NoError(t, wait(t, put, decode, prefill))
			pump(t, "the message and the report", func() bool { return len(decode.heard()) == 2 }, decode, prefill)
			assert.Equal(t, []heardMsg{{"prefill", 1, "before"}, {"prefill", 1, "done"}}, decode.heard())
		})
	}
}

// TestQueuedSendEndsWithItsEndpoint: a message queued when its endpoint
// closes leaves before the close, and a later Send is refused.
func TestQueuedSendEndsWithItsEndpoint(t *testing.T) {
	cfg := Config{Transports: "tcp"}
	decode := newNode(t, cfg, "decode", 1)
	prefill := newNode(t, cfg, "prefill", 1)
	toPrefill, _ := link(t, decode, prefill)
	r, err := toPrefill.Send([]byte("offer"))
	require.NoError(t, err)
	done, _ := r.Test()
	require.False(t, done, "queued until the next Progress")
	closed, err := toPrefill.Close()
	require.NoError(t, err)
	require.NoError(t, wait(t, closed, decode, prefill))
	require.NoError(t, wait(t, r, decode, prefill), "a Close sends what was queued before it")
	pump(t, "the message", func() bool { return len(prefill.heard()) == 1 }, decode, prefill)
	_, err = toPrefill.Send([]byte("late"))
	require.ErrorIs(t, err, ErrClosed)
}

// TestAcksAnswerEachPutInABatch: the owner answers every put one Progress
// settled from an endpoint in one message, yet each put gets its own
// answer: puts into a live registration complete, puts naming a revoked
// one fail ErrRevoked, interleaved in one batch.
func TestAcksAnswerEachPutInABatch(t *testing.T) {
	for _, s := range setups(t, Checked) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := newNode(t, s.cfg, "prefill", 1)
			_, toDecode := link(t, decode, prefill)
			const piece, n = 1024, 16
			live := sentinel(n * piece)
			memLive, err := decode.Register(live)
			require.NoError(t, err)
			gone := sentinel(n * piece)
			memGone, err := decode.Register(gone)
			require.NoError(t, err)
			kLive, err := toDecode.UnpackKey(memLive.PackedKey())
			require.NoError(t, err)
			kGone, err := toDecode.UnpackKey(memGone.PackedKey())
			require.NoError(t, err)
			how, err := memGone.Revoke()
			require.NoError(t, err)
			require.Equal(t, transfer.RevokedFenced, how)
			var puts []transfer.Request
			for i := range n {
				key := kLive
				if i%2 == 1 {
					key = kGone
				}
				r, err := toDecode.Put(pattern(byte(i), piece), key, i*piece)
				require.NoError(t, err)
				puts = append(puts, r)
			}
			// Let every put arrive before the owner progresses once.
			for range 256 {
				prefill.Progress()
			}
			pump(t, "every answer", func() bool {
				for _, r := range puts {
					if done, _ := r.Test(); !done {
						return false
					}
				}
				return true
			}, decode, prefill)
			for i, r := range puts {
				_, err := r.Test()
				if i%2 == 1 {
					require.ErrorIs(t, err, ErrRevoked, "put %d named the revoked registration", i)
					continue
				}
				require.NoError(t, err, "put %d", i)
				assert.Equal(t, pattern(byte(i), piece), live[i*piece:(i+1)*piece])
			}
			assert.Equal(t, sentinel(n*piece), gone, "nothing lands in a revoked registration")
			st := decode.Stats()
			assert.Equal(t, uint64(n/2), st.PutsApplied)
			assert.Equal(t, uint64(n/2), st.PutsLate)
			assert.Less(t, st.AcksSent, uint64(n), "answers went out together: %+v", st)
		})
	}
}
