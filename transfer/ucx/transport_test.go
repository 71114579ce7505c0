package ucx

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// TestPutGetReport: the decode side registers pages and packs a key, the
// prefill side unpacks it, puts into the pages, reads them back with a get,
// and reports with an active message that arrives with its name and
// incarnation — over every transport and mode here.
func TestPutGetReport(t *testing.T) {
	for _, s := range setups(t, Checked, OneSided) {
		t.Run(s.name, func(t *testing.T) {
			for _, size := range []int{64, 256 << 10} { // eager and rendezvous
				decode := newNode(t, s.cfg, "decode", 3)
				prefill := newNode(t, s.cfg, "prefill", 7)
				toDecode, _ := link(t, prefill, decode)

				pages := sentinel(size + 128)
				mem, err := decode.Register(pages)
				require.NoError(t, err)
				require.Equal(t, size+128, mem.Len())
				key, err := toDecode.UnpackKey(mem.PackedKey())
				require.NoError(t, err)
				require.Equal(t, size+128, key.Len())

				src := pattern(1, size)
				put, err := toDecode.Put(src, key, 64)
				require.NoError(t, err)
				require.NoError(t, wait(t, put, prefill, decode), describe(s, "put"))
				// A completed put landed: remote completion, not a local one.
				assert.Equal(t, src, pages[64:64+size])
				assert.Equal(t, sentinel(64), pages[:64], "bytes before the put untouched")
				assert.Equal(t, sentinel(64), pages[64+size:], "bytes after the put untouched")

				dst := make([]byte, size)
				get, err := toDecode.Get(dst, key, 64)
				require.NoError(t, err)
				require.NoError(t, wait(t, get, prefill, decode))
				assert.Equal(t, src, dst)

				send, err := toDecode.Send([]byte("done 7/1"))
				require.NoError(t, err)
				require.NoError(t, wait(t, send, prefill, decode))
				pump(t, "the report to arrive", func() bool { return len(decode.heard()) == 1 }, prefill, decode)
				assert.Equal(t, []heardMsg{{"prefill", 7, "done 7/1"}}, decode.heard())

				how, err := mem.Revoke()
				require.NoError(t, err)
				want := transfer.RevokedFenced
				if s.cfg.Mode == OneSided {
					want = transfer.RevokedNewOnly
				}
				assert.Equal(t, want, how)
				again, err := mem.Revoke()
				require.NoError(t, err)
				assert.Equal(t, how, again, "Revoke is idempotent")
			}
		})
	}
}

// TestFlushCoversEveryPut: an endpoint flush completes only when every put
// posted before it landed, and a worker flush covers every endpoint.
func TestFlushCoversEveryPut(t *testing.T) {
	for _, s := range setups(t, Checked, OneSided) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			a := newNode(t, s.cfg, "prefill-a", 1)
			b := newNode(t, s.cfg, "prefill-b", 1)
			aTo, _ := link(t, a, decode)
			bTo, _ := link(t, b, decode)
			const piece, n = 4096, 16
			pages := sentinel(2 * n * piece)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			ka, err := aTo.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			kb, err := bTo.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			var srcs [][]byte
			for i := range n {
				src := pattern(byte(i), piece)
				srcs = append(srcs, src)
				_, err := aTo.Put(src, ka, i*piece)
				require.NoError(t, err)
			}
			flush, err := aTo.Flush()
			require.NoError(t, err)
			require.NoError(t, wait(t, flush, a, decode))
			for i := range n {
				assert.Equal(t, srcs[i], pages[i*piece:(i+1)*piece], "put %d landed before the endpoint flush completed", i)
			}

			for i := range n {
				_, err := bTo.Put(srcs[i], kb, (n+i)*piece)
				require.NoError(t, err)
			}
			wf := b.Flush()
			require.NoError(t, wait(t, wf, b, decode))
			for i := range n {
				assert.Equal(t, srcs[i], pages[(n+i)*piece:(n+i+1)*piece], "put %d landed before the worker flush completed", i)
			}
		})
	}
}

// TestMessagesOnlyFromTheEndpointsPeer: a message is heard only on an
// endpoint the receiver opened to the peer and incarnation it claims. One
// from a process the receiver never connected to waits, unheard, until the
// receiver connects to that process — and is then heard under the identity
// the receiver recorded, only if the sender claims the same; a process
// posing as another (its worker recorded under someone else's name) is not
// heard, and its puts are refused.
func TestMessagesOnlyFromTheEndpointsPeer(t *testing.T) {
	cfg := Config{Transports: "tcp"}
	decode := newNode(t, cfg, "decode", 1)
	prefill := newNode(t, cfg, "prefill", 1)
	toDecode, _ := link(t, prefill, decode)

	// A restarted prefill (#2) talks before the decode side knows of it.
	reborn := newNode(t, cfg, "prefill", 2)
	_, _, err := reborn.AddPeer(decode.Address())
	require.NoError(t, err)
	rebornTo, err := reborn.Connect("decode")
	require.NoError(t, err)
	r, err := rebornTo.Send([]byte("hello from #2"))
	require.NoError(t, err)
	require.NoError(t, wait(t, r, reborn, decode))
	for range 1000 {
		decode.Progress()
		reborn.Progress()
	}
	assert.Empty(t, decode.heard(), "not heard before the decode side connects to #2")

	// The old life still talks on its own endpoint.
	r, err = toDecode.Send([]byte("from #1"))
	require.NoError(t, err)
	require.NoError(t, wait(t, r, prefill, decode))
	pump(t, "#1's message", func() bool { return len(decode.heard()) == 1 }, prefill, decode)

	// The decode side learns of #2 and connects: the held message is heard.
	_, _, err = decode.AddPeer(reborn.Address())
	require.NoError(t, err)
	_, err = decode.Connect("prefill")
	require.NoError(t, err)
	pump(t, "#2's held message", func() bool { return len(decode.heard()) == 2 }, reborn, decode)
	assert.Equal(t, []heardMsg{{"prefill", 1, "from #1"}, {"prefill", 2, "hello from #2"}}, decode.heard())

	// An impostor: a process named "mallory" whose worker the decode side
	// recorded, by a forged address, as "prefill-x"#5.
	mallory := newNode(t, cfg, "mallory", 9)
	forged := address{peer: "prefill-x", inc: 5, worker: mustWorker(t, mallory.Address())}.append(nil)
	_, _, err = decode.AddPeer(forged)
	require.NoError(t, err)
	_, err = decode.Connect("prefill-x")
	require.NoError(t, err)
	_, _, err = mallory.AddPeer(decode.Address())
	require.NoError(t, err)
	malTo, err := mallory.Connect("decode")
	require.NoError(t, err)
	pages := sentinel(256)
	mem, err := decode.Register(pages)
	require.NoError(t, err)
	// Mallory forges the key too: the decode side's real one, as if it were
	// published to "mallory"#9's endpoint.
	k, err := decodeKey(mem.PackedKey())
	require.NoError(t, err)
	malKey := &remoteKey{ep: malTo.(*endpoint), k: k}
	before := decode.Stats()
	r, err = malTo.Send([]byte("I am prefill-x"))
	require.NoError(t, err)
	require.NoError(t, wait(t, r, mallory, decode))
	put, err := malTo.Put(pattern(9, 128), malKey, 0)
	require.NoError(t, err)
	putErr := wait(t, put, mallory, decode)
	require.ErrorIs(t, putErr, ErrRefused)
	assert.Contains(t, putErr.Error(), "not the peer of its endpoint")
	pump(t, "the impostor's message refused", func() bool { return decode.Stats().MsgsRefused > before.MsgsRefused }, mallory, decode)
	assert.Len(t, decode.heard(), 2, "the impostor is not heard")
	assert.Equal(t, sentinel(256), pages, "the impostor wrote nothing")
	assert.Equal(t, before.PutsRefused+1, decode.Stats().PutsRefused)
}

func mustWorker(t *testing.T, addr []byte) []byte {
	t.Helper()
	a, err := decodeAddress(addr)
	require.NoError(t, err)
	return a.worker
}

// TestEndpointErrorWhenThePeerGoes: over tcp, a peer whose worker is
// destroyed is reported to EndpointError with its name and incarnation;
// the endpoint's Err says so, and what was in flight and what comes later
// fail rather than hang.
func TestEndpointErrorWhenThePeerGoes(t *testing.T) {
	cfg := Config{Transports: "tcp"}
	decode := newNode(t, cfg, "decode", 4)
	prefill := newNode(t, cfg, "prefill", 2)
	toDecode, _ := link(t, prefill, decode)
	mem, err := decode.Register(sentinel(1 << 20))
	require.NoError(t, err)
	key, err := toDecode.UnpackKey(mem.PackedKey())
	require.NoError(t, err)
	r, err := toDecode.Send([]byte("hi"))
	require.NoError(t, err)
	require.NoError(t, wait(t, r, prefill, decode))

	// A put in flight when the decode process goes (never progressed).
	inFlight, err := toDecode.Put(pattern(3, 1<<20), key, 0)
	require.NoError(t, err)
	require.NoError(t, decode.Close())

	pump(t, "the endpoint error", func() bool { return len(prefill.failures()) == 1 }, prefill)
	f := prefill.failures()[0]
	assert.Equal(t, transfer.Peer("decode"), f.peer)
	assert.Equal(t, transfer.Incarnation(4), f.inc)
	assert.ErrorIs(t, f.err, ErrPeerFailed)
	assert.ErrorIs(t, toDecode.Err(), ErrPeerFailed)
	assert.Error(t, wait(t, inFlight, prefill), "a put in flight to a dead peer fails")
	_, err = toDecode.Put(pattern(3, 8), key, 0)
	assert.ErrorIs(t, err, ErrPeerFailed)
	_, err = toDecode.Send([]byte("anyone?"))
	assert.ErrorIs(t, err, ErrPeerFailed)
	_, err = toDecode.Close()
	assert.ErrorIs(t, err, ErrPeerFailed, "a failed endpoint answers its error")
}

// TestSharedMemoryCannotReportAFailedPeer: UCX 1.13's posix and sysv
// shared memory have no peer failure handler, so an endpoint that asks for
// one is not made over them; the error names the way out.
func TestSharedMemoryCannotReportAFailedPeer(t *testing.T) {
	if !hasSharedMemory(t) {
		require.Fail(t, "ucx_info -d lists no posix or sysv transport; the shared-memory tests need them (Debian's libucx0 ships both)")
	}
	a := newNode(t, Config{Transports: "sm"}, "a", 1)
	b := newNode(t, Config{Transports: "sm"}, "b", 1)
	_, _, err := a.AddPeer(b.Address())
	require.NoError(t, err)
	_, err = a.Connect("b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NoPeerErrors")
}

// TestCloseRefusesLaterOperations: Endpoint.Close completes once its puts
// did; later operations on it are refused; Transport.Close is idempotent and
// fails whatever is still open.
func TestCloseRefusesLaterOperations(t *testing.T) {
	for _, s := range setups(t, Checked, OneSided) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := newNode(t, s.cfg, "prefill", 1)
			toDecode, _ := link(t, prefill, decode)
			pages := sentinel(8192)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			key, err := toDecode.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			src := pattern(5, 8192)
			put, err := toDecode.Put(src, key, 0)
			require.NoError(t, err)
			closed, err := toDecode.Close()
			require.NoError(t, err)
			require.NoError(t, wait(t, closed, prefill, decode))
			done, err := put.Test()
			assert.True(t, done, "the close waited for the put")
			assert.NoError(t, err)
			assert.Equal(t, src, pages)
			assert.ErrorIs(t, toDecode.Err(), ErrClosed)
			_, err = toDecode.Put(src, key, 0)
			assert.ErrorIs(t, err, ErrClosed)
			_, err = toDecode.Flush()
			assert.ErrorIs(t, err, ErrClosed)
			_, err = toDecode.Close()
			assert.ErrorIs(t, err, ErrClosed)

			require.NoError(t, prefill.Close())
			require.NoError(t, prefill.Close(), "Close is idempotent")
			_, err = prefill.Connect("decode")
			assert.ErrorIs(t, err, ErrClosed)
			_, err = prefill.Register(make([]byte, 8))
			assert.ErrorIs(t, err, ErrClosed)
			done, err = prefill.Flush().Test()
			assert.True(t, done)
			assert.ErrorIs(t, err, ErrClosed)
			assert.Zero(t, prefill.Progress())
		})
	}
}

// TestBadInputChangesNothing: every refusal names what was wrong and leaves
// the transport as it was.
func TestBadInputChangesNothing(t *testing.T) {
	cfg := Config{Transports: "tcp"}
	_, err := New(Config{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Name is empty")
	assert.Contains(t, err.Error(), "Incarnation is 0")
	_, err = New(Config{Name: "x", Incarnation: 1, Mode: 9})
	assert.ErrorContains(t, err, "Mode is mode(9)")

	decode := newNode(t, cfg, "decode", 2)
	prefill := newNode(t, cfg, "prefill", 1)
	other := newNode(t, cfg, "other", 1)
	toDecode, _ := link(t, prefill, decode)
	_, _, err = prefill.AddPeer(other.Address())
	require.NoError(t, err)
	toOther, err := prefill.Connect("other")
	require.NoError(t, err)
	mem, err := decode.Register(sentinel(100))
	require.NoError(t, err)
	key, err := toDecode.UnpackKey(mem.PackedKey())
	require.NoError(t, err)

	_, err = decode.Register(nil)
	assert.ErrorContains(t, err, "0 bytes")
	_, err = prefill.Connect("nobody")
	assert.ErrorContains(t, err, "AddPeer")
	_, _, err = prefill.AddPeer([]byte("junk"))
	assert.ErrorIs(t, err, ErrMalformed)
	_, err = toOther.UnpackKey(mem.PackedKey())
	assert.ErrorContains(t, err, "belongs to decode#2")
	_, err = toDecode.UnpackKey(mem.PackedKey()[:10])
	assert.ErrorIs(t, err, ErrMalformed)
	_, err = toOther.Put(make([]byte, 8), key, 0)
	assert.ErrorContains(t, err, "not unpacked on this endpoint")
	_, err = toDecode.Put(make([]byte, 8), key, 96)
	assert.ErrorContains(t, err, "[96,104) is outside the remote registration of 100 bytes")
	_, err = toDecode.Get(make([]byte, 8), key, -1)
	assert.ErrorContains(t, err, "outside")
	_, err = toDecode.Send(make([]byte, MaxMessage+1))
	assert.ErrorContains(t, err, "at most 65536")

	// Nothing changed: the endpoint still works.
	r, err := toDecode.Put(pattern(1, 100), key, 0)
	require.NoError(t, err)
	require.NoError(t, wait(t, r, prefill, decode))
}

// TestAddPeer: the latest incarnation wins; older or conflicting addresses
// are refused and change nothing.
func TestAddPeer(t *testing.T) {
	cfg := Config{Transports: "tcp"}
	self := newNode(t, cfg, "decode", 1)
	p1 := newNode(t, cfg, "prefill", 1)
	p2 := newNode(t, cfg, "prefill", 2)
	p1b := newNode(t, cfg, "prefill", 1) // another process claiming #1
	peer, inc, err := self.AddPeer(p1.Address())
	require.NoError(t, err)
	assert.Equal(t, transfer.Peer("prefill"), peer)
	assert.Equal(t, transfer.Incarnation(1), inc)
	_, _, err = self.AddPeer(p1.Address())
	require.NoError(t, err, "the same address again is no change")
	_, _, err = self.AddPeer(p1b.Address())
	assert.ErrorContains(t, err, "a second, different address for prefill#1")
	_, _, err = self.AddPeer(p2.Address())
	require.NoError(t, err)
	_, _, err = self.AddPeer(p1.Address())
	assert.ErrorContains(t, err, "older than the recorded #2")
	ep, err := self.Connect("prefill")
	require.NoError(t, err)
	_, inc = ep.Peer()
	assert.Equal(t, transfer.Incarnation(2), inc, "Connect reaches the latest incarnation")
}

// TestEnvironmentChoosesTransportsAtNew: with Config.Transports empty, UCX
// reads UCX_TLS when New runs.
func TestEnvironmentChoosesTransportsAtNew(t *testing.T) {
	t.Setenv("UCX_TLS", "no-such-transport")
	_, err := New(Config{Name: "x", Incarnation: 1})
	require.Error(t, err, "UCX_TLS naming no transport makes no worker")
	var st *StatusError
	assert.True(t, errors.As(err, &st), "the error carries UCX's status: %v", err)
	t.Setenv("UCX_TLS", "tcp")
	n := newNode(t, Config{}, "x", 1)
	m := newNode(t, Config{}, "y", 1)
	xy, _ := link(t, n, m)
	r, err := xy.Send([]byte("over tcp"))
	require.NoError(t, err)
	require.NoError(t, wait(t, r, n, m))
	pump(t, "the message", func() bool { return len(m.heard()) == 1 }, n, m)
}
