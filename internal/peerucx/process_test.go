package peerucx

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// tlss are the UCX transports every test runs over: tcp, and sm (shared
// memory, where no dead peer is reported).
var tlss = []string{"tcp", "sm"}

// TestEngineOverUCXHonest: two rounds of four requests, each lent on its
// staging slots, offered over UCX, put by the prefill's Sender, reported
// after its flush; every lease is served and its device pages hold the
// pattern — the second round on slots the first returned.
func TestEngineOverUCXHonest(t *testing.T) {
	for _, tls := range tlss {
		t.Run(tls, func(t *testing.T) { honest(t, tls) })
	}
}

func honest(t *testing.T, tls string) {
	d := newDecode(t, tls, time.Minute)
	c := startChild(t, d, 1)
	for round := range 2 {
		var ls []lease
		for i := range slots / perReq {
			req := transfer.RequestID(100 + 10*round + i)
			ls = append(ls, d.lend(req))
			c.do(fmt.Sprintf("send %d %d", req, i*perReq))
		}
		for _, l := range ls {
			d.served(l)
		}
	}
	st := d.eng.Stats()
	require.Equal(t, uint64(8), st.Released, "every lease released")
	require.Zero(t, st.SlotsQuarantined)
	require.Equal(t, uint64(8), d.recv.Stats().Delivered)
}

// TestEngineOverUCXKilled: the prefill, muted (its puts land, its reports
// never leave), is killed (SIGKILL) with two requests' pages in. Over tcp
// the endpoint error fails both; over sm no dead peer is reported, and they
// fail at the deadline fixed at their submission. Either way their
// registrations are revoked (fenced, in Checked mode) before the slots
// return. A restarted prefill (#2) replays the dead life's offers into
// slots now lent to new requests: every put is refused and no slot changes;
// then it serves the new requests.
func TestEngineOverUCXKilled(t *testing.T) {
	for _, tls := range tlss {
		t.Run(tls, func(t *testing.T) { killed(t, tls) })
	}
}

func killed(t *testing.T, tls string) {
	// Over tcp the deadline is far: the endpoint error, not it, ends the
	// sessions. Over sm only the deadline can.
	timeout := time.Minute
	if tls == "sm" {
		timeout = 5 * time.Second
	}
	d := newDecode(t, tls, timeout)
	c := startChild(t, d, 1)
	c.do("mute")
	a, b := d.lend(1), d.lend(2)
	c.do("send 1 0")
	c.do("send 2 2")
	d.applied(2 * perReq)
	old := c.heard(2)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	_ = c.cmd.Wait()
	for _, l := range []lease{a, b} {
		info := d.failedProven(l)
		require.True(t, info.Fenced && !info.Contained, "in Checked mode the revocation proves, over %s too: %+v", tls, info)
	}
	lost := uint64(1)
	if tls == "sm" {
		lost = 0 // shared memory reports no dead peer
	}
	require.Equal(t, lost, d.recv.Stats().PeersLost)
	d.idle()

	reborn := startChild(t, d, 2)
	x, y := d.lend(3), d.lend(4)
	for _, o := range old {
		ans := reborn.do("replay " + o)
		require.Equal(t, fmt.Sprintf("ok replay landed=0 refused=%d", perReq), ans, "the dead life's keys are refused")
	}
	d.untouched("after the dead life's replay")
	reborn.do("send 3 0")
	reborn.do("send 4 2")
	d.served(x)
	d.served(y)
	require.Zero(t, d.eng.Stats().SlotsQuarantined)
}

// TestEngineOverUCXPaused: the prefill, muted, is paused (SIGSTOP) with two
// requests' pages in: no endpoint error comes; the sessions fail at the
// deadline fixed at their submission, and are revoked (fenced) before the
// slots return. Two new requests are lent on them; resumed (SIGCONT), the
// prefill replays the old offers — refused, no slot changes — and then
// serves the new requests.
func TestEngineOverUCXPaused(t *testing.T) {
	for _, tls := range tlss {
		t.Run(tls, func(t *testing.T) { paused(t, tls) })
	}
}

func paused(t *testing.T, tls string) {
	d := newDecode(t, tls, 5*time.Second)
	c := startChild(t, d, 1)
	c.do("mute")
	a, b := d.lend(1), d.lend(2)
	c.do("send 1 0")
	c.do("send 2 2")
	d.applied(2 * perReq)
	old := c.heard(2)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	for _, l := range []lease{a, b} {
		info := d.failedProven(l)
		require.True(t, info.Fenced && !info.Contained, "the revocation after the deadline proves: %+v", info)
	}
	require.Zero(t, d.recv.Stats().PeersLost, "a paused peer is not lost")
	d.idle()

	x, y := d.lend(3), d.lend(4)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
	stopped = false
	for _, o := range old {
		ans := c.do("replay " + o)
		require.Equal(t, fmt.Sprintf("ok replay landed=0 refused=%d", perReq), ans, "the late writes are refused")
	}
	d.untouched("after the resumed prefill's late writes")
	c.do("unmute")
	c.do("send 3 0")
	c.do("send 4 2")
	d.served(x)
	d.served(y)
	require.Zero(t, d.eng.Stats().SlotsQuarantined)
}
