package ucx

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/transfer"
)

// TestCheckedRevokeFences (rapid): a Checked registration revoked at any
// point of a put's life — not yet sent, its rendezvous half received, its
// data in the owner's socket — changes no byte after Revoke returns; the
// put either landed whole before it (and its request succeeds) or not at
// all (and its request fails); and a writer that ignores its own fence,
// posting with the key after the revocation, writes nothing. While Revoke
// runs the writer progresses on its own goroutine, as the live process it
// stands for would: over tcp a rendezvous already being received straight
// into the pages is waited for (TestRevokeWaitsForDirectReceives has the
// writer that stops).
func TestCheckedRevokeFences(t *testing.T) {
	for _, s := range setups(t, Checked) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := newNode(t, s.cfg, "prefill", 1)
			toDecode, _ := link(t, prefill, decode)
			rapid.Check(t, func(rt *rapid.T) {
				size := rapid.SampledFrom([]int{64, 4096, 64 << 10, 512 << 10}).Draw(rt, "size")
				steps := rapid.IntRange(0, 40).Draw(rt, "steps before revoke")
				late := rapid.IntRange(0, 3).Draw(rt, "puts after revoke")
				pages := sentinel(size)
				mem, err := decode.Register(pages)
				require.NoError(rt, err)
				key, err := toDecode.UnpackKey(mem.PackedKey())
				require.NoError(rt, err)
				src := pattern(byte(size), size)
				put, err := toDecode.Put(src, key, 0)
				require.NoError(rt, err)
				for i := range steps {
					side := rapid.IntRange(0, 2).Draw(rt, "who progresses")
					if side != 1 {
						prefill.Progress()
					}
					if side != 0 || i%7 == 0 {
						decode.Progress()
					}
				}
				before := decode.Stats()
				stop := progressAside(prefill)
				how, err := mem.Revoke()
				stop()
				require.NoError(rt, err)
				require.Equal(rt, transfer.RevokedFenced, how)
				atRevoke := bytes.Clone(pages)
				var lates []transfer.Request
				for i := range late {
					r, err := toDecode.Put(pattern(byte(i+100), size), key, 0)
					require.NoError(rt, err, "posting is the writer's: the owner refuses")
					lates = append(lates, r)
				}
				putErr := wait(rt, put, prefill, decode)
				for _, r := range lates {
					require.ErrorIs(rt, wait(rt, r, prefill, decode), ErrRevoked, "a put after the revocation is refused")
				}
				require.Equal(rt, atRevoke, pages, "no byte changed after Revoke returned")
				if putErr == nil {
					require.Equal(rt, src, atRevoke, "a put that succeeded landed, whole, before the revocation")
				} else {
					require.ErrorIs(rt, putErr, ErrRevoked)
					require.Equal(rt, sentinel(size), atRevoke, "a refused put wrote nothing")
				}
				after := decode.Stats()
				refused := late
				if putErr != nil {
					refused++
				}
				require.Equal(rt, before.PutsLate+uint64(refused), after.PutsLate, "every refused put is counted late")
			})
		})
	}
}

// TestOneSidedUnmapFencesNothing: UCX 1.13 moves a one-sided put into user
// memory over tcp and shared memory by software RMA — the owner's worker,
// in its own progress, writes the address the put names without looking
// for a registration — so ucp_mem_unmap stops nothing: a put posted after
// it still lands (which is why Revoke answers RevokedNewOnly, and why the
// memory stays pinned). The write happens only when the owner progresses.
// If a UCX release starts refusing such puts, this test fails and
// docs/ucx.md must be revised with it.
func TestOneSidedUnmapFencesNothing(t *testing.T) {
	for _, s := range setups(t, OneSided) {
		t.Run(s.name, func(t *testing.T) {
			for _, size := range []int{64, 1 << 20} {
				decode := newNode(t, s.cfg, "decode", 1)
				prefill := newNode(t, s.cfg, "prefill", 1)
				toDecode, _ := link(t, prefill, decode)
				pages := sentinel(size)
				mem, err := decode.Register(pages)
				require.NoError(t, err)
				key, err := toDecode.UnpackKey(mem.PackedKey())
				require.NoError(t, err)
				how, err := mem.Revoke()
				require.NoError(t, err)
				require.Equal(t, transfer.RevokedNewOnly, how)

				src := pattern(7, size)
				put, err := toDecode.Put(src, key, 0)
				require.NoError(t, err)
				for range 2000 {
					prefill.Progress()
				}
				done, _ := put.Test()
				assert.False(t, done, "the put waits for the owner's progress")
				assert.Equal(t, sentinel(size), pages, "nothing lands without the owner's progress")
				require.NoError(t, wait(t, put, prefill, decode), "a put after ucp_mem_unmap completes")
				assert.Equal(t, src, pages, "and lands: unmapping fenced nothing, not even a later put")
				assert.Zero(t, decode.Stats().PutsRefused, "the transport never saw it: UCX applied it")
			}
		})
	}
}

// TestClosingTheOwnersEndpoint: what the owner closing its endpoint to a
// writer proves. Checked: nothing that arrives on it after is applied — a
// fence for that writer alone; the writer's put is refused or never
// answered (it ends on its own deadline). OneSided: nothing — the writer's
// later put lands.
func TestClosingTheOwnersEndpoint(t *testing.T) {
	for _, s := range setups(t, Checked, OneSided) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := newNode(t, s.cfg, "prefill", 1)
			toDecode, toPrefill := link(t, prefill, decode)
			pages := sentinel(4096)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			key, err := toDecode.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			first := pattern(1, 4096)
			r, err := toDecode.Put(first, key, 0)
			require.NoError(t, err)
			require.NoError(t, wait(t, r, prefill, decode))
			closed, err := toPrefill.Close()
			require.NoError(t, err)
			require.NoError(t, wait(t, closed, prefill, decode))

			src := pattern(2, 4096)
			late, err := toDecode.Put(src, key, 0)
			require.NoError(t, err)
			done, lateErr := false, error(nil)
			for i := 0; i < 20_000 && !done; i++ {
				prefill.Progress()
				decode.Progress()
				done, lateErr = late.Test()
			}
			if s.cfg.Mode == Checked {
				assert.Equal(t, first, pages, "nothing from the closed endpoint's peer applied")
				if done {
					assert.ErrorIs(t, lateErr, ErrRefused)
				}
				return
			}
			assert.True(t, done)
			assert.NoError(t, lateErr)
			assert.Equal(t, src, pages, "one-sided: the owner's close fenced nothing")
		})
	}
}

// TestRevokeWaitsForDirectReceives: over tcp a rendezvous put whose
// registration checked out at its arrival is received straight into the
// pages, and a revocation meanwhile must wait for it to be fenced. Each
// case first brings a 4 MiB put to the point where the owner started
// receiving it (the writer has not yet been progressed to send its data).
// A live writer: Revoke waits, the put lands whole before Revoke returns,
// and no byte changes after — without the wait the data would keep coming
// after Revoke answered fenced. A writer stopped mid-transfer: Revoke
// gives up after RevokeWait and answers new-only, truthfully — the
// resumed writer's bytes still land, the put refused. With Bounce the
// data goes to a buffer of the transport's and Revoke fences at once.
func TestRevokeWaitsForDirectReceives(t *testing.T) {
	const size = 4 << 20
	for _, tc := range []struct {
		name          string
		bounce, alive bool
		how           transfer.Revocation
		pages         func(src []byte) []byte // what the pages hold at the end
		putErr        error
	}{
		{name: "live writer", alive: true, how: transfer.RevokedFenced, pages: func(src []byte) []byte { return src }},
		{name: "stopped writer", how: transfer.RevokedNewOnly, pages: func(src []byte) []byte { return src }, putErr: ErrRevoked},
		{name: "bounce", bounce: true, how: transfer.RevokedFenced, pages: func([]byte) []byte { return sentinel(size) }, putErr: ErrRevoked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Transports: "tcp", Mode: Checked, Bounce: tc.bounce, RevokeWait: 100 * time.Millisecond}
			if tc.alive {
				cfg.RevokeWait = time.Minute // a bound, not an expectation
			}
			decode, prefill, pages, mem, src, put := startRendezvous(t, cfg, size, 9)
			require.Zero(t, decode.Stats().PutsApplied, "and has not got all of it: the writer was not progressed since")

			stop := func() {}
			if tc.alive {
				stop = progressAside(prefill)
			}
			how, err := mem.Revoke()
			stop()
			require.NoError(t, err)
			require.Equal(t, tc.how, how)
			atRevoke := bytes.Clone(pages)
			if tc.how == transfer.RevokedFenced && !tc.bounce {
				require.Equal(t, src, atRevoke, "the put landed, whole, before Revoke returned: it waited")
				require.Equal(t, uint64(1), decode.Stats().RevokesWaited)
			}
			putErr := wait(t, put, prefill, decode)
			if tc.putErr == nil {
				require.NoError(t, putErr)
			} else {
				require.ErrorIs(t, putErr, tc.putErr)
			}
			for range 1000 {
				prefill.Progress()
				decode.Progress()
			}
			require.Equal(t, tc.pages(src), pages)
			if how.Fences() {
				require.Equal(t, atRevoke, pages, "no byte changed after Revoke answered fenced")
			} else {
				require.Equal(t, uint64(1), decode.Stats().RevokesNewOnly)
				require.NotEqual(t, atRevoke, pages, "bytes landed after Revoke: why it answered new-only")
			}
		})
	}
}

// TestSharedMemoryRendezvousIsTheOwnersGet: over shared memory a Checked
// rendezvous put is received straight into the registration only because
// this transport makes UCX's rendezvous the receiver's get (RNDV_SCHEME=
// get_zcopy): the owner reads the writer's buffer itself (cma's
// process_vm_readv) in its own Progress, so everything that writes the
// pages is the owner's, as over tcp, and a revocation's wait covers it.
// The test brings a 4 MiB put to the point where the owner began receiving
// it, then never progresses the writer again: the owner alone lands it
// whole, and Revoke then fences with nothing to wait for. Under a put-based
// rendezvous (the owner's ready-to-receive carrying its key, the writer's
// process_vm_writev) the put could not land without the writer's progress,
// and this fails — checked by hand with RNDV_SCHEME=put_zcopy in kvu_open.
// With Bounce the same get lands in a buffer of the transport's, then the
// registration.
func TestSharedMemoryRendezvousIsTheOwnersGet(t *testing.T) {
	if !hasSharedMemory(t) {
		require.Fail(t, "ucx_info -d lists no posix or sysv transport; the shared-memory tests need them (Debian's libucx0 ships both)")
	}
	const size = 4 << 20
	for _, bounce := range []bool{false, true} {
		t.Run(fmt.Sprintf("bounce=%v", bounce), func(t *testing.T) {
			cfg := Config{Transports: "sm", Mode: Checked, NoPeerErrors: true, Bounce: bounce}
			decode, prefill, pages, mem, src, put := startRendezvous(t, cfg, size, 11)

			// From here on only the owner progresses: the writer is as
			// good as stopped.
			applied := func() bool { return decode.Stats().PutsApplied == 1 }
			for i := 0; i < 100_000 && !applied(); i++ {
				decode.Progress()
			}
			require.True(t, applied(), "the owner landed the put with the writer stopped: its own get read it")
			require.Equal(t, src, pages, "whole")
			how, err := mem.Revoke()
			require.NoError(t, err)
			require.Equal(t, transfer.RevokedFenced, how)
			require.Zero(t, decode.Stats().RevokesWaited, "nothing left to wait for: no one else writes the pages")
			require.NoError(t, wait(t, put, prefill, decode), "the writer hears its put applied once it runs again")
			require.Equal(t, src, pages)
		})
	}
}

// startRendezvous brings a Checked put of size bytes (pattern seed) from a
// prefill node into a fresh registration of a decode node, both over cfg,
// to the point where the owner began receiving it by rendezvous, and checks
// that it is received straight into the pages unless cfg.Bounce. The writer
// is not progressed after that point.
func startRendezvous(t *testing.T, cfg Config, size int, seed byte) (decode, prefill *node, pages []byte, mem transfer.Memory, src []byte, put transfer.Request) {
	t.Helper()
	decode = newNode(t, cfg, "decode", 1)
	prefill = newNode(t, cfg, "prefill", 1)
	toDecode, _ := link(t, prefill, decode)
	pages = sentinel(size)
	mem, err := decode.Register(pages)
	require.NoError(t, err)
	key, err := toDecode.UnpackKey(mem.PackedKey())
	require.NoError(t, err)
	src = pattern(seed, size)
	put, err = toDecode.Put(src, key, 0)
	require.NoError(t, err)
	started := func() bool { return decode.Stats().PutsRendezvous == 1 }
	for i := 0; i < 100_000 && !started(); i++ {
		prefill.Progress()
		decode.Progress()
	}
	require.True(t, started(), "the owner started receiving the put")
	direct := uint64(1)
	if cfg.Bounce {
		direct = 0
	}
	require.Equal(t, direct, decode.Stats().PutsDirect, "straight into the pages unless Bounce")
	return decode, prefill, pages, mem, src, put
}
