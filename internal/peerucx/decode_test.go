package peerucx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	gsim "github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
)

// bound is the wall-clock bound on every wait on the other process or the
// engine: it bounds a wait, it asserts nothing about durations.
const bound = 2 * time.Minute

const sentinel = 0x5A

// decode is the test process: the shipped engine lending its staging slots
// through a Receiver over UCX (Checked, tcp), the Receiver's driver calling
// Progress.
type decode struct {
	t    *testing.T
	tls  string
	tr   *ucx.Transport
	mem  *staging.Memory
	dev  *gsim.Device
	recv *peer.Receiver
	eng  *readiness.Engine
}

// newDecode assembles the decode side; timeout is the Receiver's, fixed at
// each submission (the engine's own deadlines are well beyond it).
func newDecode(t *testing.T, tls string, timeout time.Duration) *decode {
	t.Helper()
	d := &decode{t: t, tls: tls}
	var err error
	d.tr, err = ucx.New(ucxConfig("decode", 1, tls))
	require.NoError(t, err)
	d.mem, err = staging.NewMemory(staging.GoHeap, staging.Group{Slots: slots, SlotBytes: pageLen})
	require.NoError(t, err)
	d.dev, err = gsim.New(0, 1<<20, gsim.WithLatency(gsim.WallClock{}, 0))
	require.NoError(t, err)
	stream, err := d.dev.NewStream()
	require.NoError(t, err)
	d.recv, err = peer.NewReceiver(peer.ReceiverConfig{
		Transport: d.tr, Capabilities: advertise("decode", 1),
		Slot: func(u contract.Unit) []byte { row, _ := d.mem.Row(u.LocalGroup, u.Local); return row },
		// Leased: each session's pages under their own registration, revoked
		// (in Checked mode: fenced) once the outcome is latched.
		Leased: true, Timeout: timeout, Grace: time.Minute,
		Limits: transfer.Limits{Sessions: 16, Tombstones: 16, Window: time.Hour},
		Poll:   time.Millisecond,
	})
	require.NoError(t, err)
	d.eng, err = readiness.New(readiness.Config{Memory: d.mem, TokensPerBlock: 16, Fetcher: d.recv, Stream: stream,
		RequestTimeout: 5 * time.Minute, DrainGrace: 5 * time.Minute,
		Layers: [][]staging.LayerSpans{{{Layer: 0, Spans: []staging.Span{{Offset: 0, Size: pageLen}}}}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		_ = d.recv.Close()
		_, _ = d.eng.Shutdown(ctx)
		_ = d.tr.Close()
	})
	return d
}

// lease is one request lent to the engine, and the device pages it names.
type lease struct {
	req  transfer.RequestID
	h    readiness.Handle
	rows []staging.Row
}

// lend expects request req's plan and lends its pages.
func (d *decode) lend(req transfer.RequestID) lease {
	d.t.Helper()
	ch, err := chunkOf(req)
	require.NoError(d.t, err)
	pages, err := d.recv.Expect(peer.Plan{Request: req, Attempt: 1, Writers: []transfer.AccessorID{prefillKV}, Chunk: ch, BlockTokens: 16})
	require.NoError(d.t, err)
	l := lease{req: req}
	for _, pg := range pages {
		p, err := d.dev.Alloc(pageLen)
		require.NoError(d.t, err)
		l.rows = append(l.rows, staging.Row{Name: pg.Name, Group: pg.Group, Block: pg.Block, Device: p})
	}
	l.h, err = d.eng.Lend(readiness.Request{Kind: readiness.Fetch, Rows: l.rows})
	require.NoError(d.t, err)
	d.sync()
	info, err := d.eng.Lease(l.h)
	require.NoError(d.t, err)
	require.Equal(d.t, readiness.StateRequested, info.State, "request %d submitted (the receiver offered its pages): %s", req, info.Reason)
	return l
}

func (d *decode) sync() {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, err := d.eng.Sync(ctx)
	require.NoError(d.t, err)
}

// settle waits, bounded, until the lease is settled and answers it.
func (d *decode) settle(l lease) readiness.LeaseInfo {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	info, err := d.eng.Wait(ctx, l.h, readiness.UntilSettled)
	require.NoError(d.t, err, "request %d settles within %v", l.req, bound)
	return info
}

// served checks a lease served, and its device pages hold its pattern.
func (d *decode) served(l lease) {
	d.t.Helper()
	info := d.settle(l)
	require.Equal(d.t, readiness.Served, info.Outcome, "request %d: %s", l.req, info.Reason)
	require.Equal(d.t, readiness.StateLogicallyComplete, info.State)
	got := make([]byte, pageLen)
	for i, r := range l.rows {
		require.NoError(d.t, d.dev.Read(got, r.Device))
		require.Equal(d.t, pattern(l.req, i), got, "request %d page %d on the device", l.req, i)
	}
	require.NoError(d.t, d.eng.Release(l.h))
}

// failedProven checks a lease failed, its slots proven (the revocation
// fenced) or contained before they returned, and releases it.
func (d *decode) failedProven(l lease) readiness.LeaseInfo {
	d.t.Helper()
	info := d.settle(l)
	require.Contains(d.t, []readiness.OutcomeKind{readiness.Failed, readiness.TimedOut}, info.Outcome, "request %d: %s", l.req, info.Reason)
	require.True(d.t, info.Fenced || info.Contained, "request %d settled with its access neither proven nor contained: %+v", l.req, info)
	require.NoError(d.t, d.eng.Release(l.h))
	return info
}

// idle waits until every slot is free, then writes the sentinel into each:
// a slot changes after this only if a lease is lent it and served, or a
// write the fence should have stopped lands.
func (d *decode) idle() {
	d.t.Helper()
	deadline := time.Now().Add(bound)
	for d.eng.Stats().SlotsFree != slots {
		require.True(d.t, time.Now().Before(deadline), "slots free within %v: %+v", bound, d.eng.Stats())
		d.sync()
	}
	for i := range slots {
		row, ok := d.mem.Row(0, i)
		require.True(d.t, ok, "slot %d", i)
		copy(row, bytes.Repeat([]byte{sentinel}, pageLen))
	}
}

// untouched checks every slot still holds the sentinel.
func (d *decode) untouched(what string) {
	d.t.Helper()
	for i := range slots {
		row, ok := d.mem.Row(0, i)
		require.True(d.t, ok, "slot %d", i)
		require.Equal(d.t, bytes.Repeat([]byte{sentinel}, pageLen), row, "%s: slot %d changed", what, i)
	}
}

// child is the parent's handle on a prefill process.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	mu     sync.Mutex
	offers []string // "offer" lines, in the order heard
	addr   []byte
	caps   transfer.Capabilities
}

// startChild starts prefill life inc and connects it and d both ways:
// addresses and capabilities over the pipes. Cleanup kills and reaps it.
func startChild(t *testing.T, d *decode, inc transfer.Incarnation) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s", childEnv, inc, d.tls))
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	c := &child{t: t, cmd: cmd, in: in, lines: make(chan string, 64)}
	go c.read(out)
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prefill #%d stderr:\n%s", inc, stderr.String())
		}
	})
	c.addr, err = hex.DecodeString(strings.TrimPrefix(c.expect("addr "), "addr "))
	require.NoError(t, err)
	b, err := hex.DecodeString(strings.TrimPrefix(c.expect("caps "), "caps "))
	require.NoError(t, err)
	c.caps, err = transfer.DecodeCapabilities(b)
	require.NoError(t, err)
	require.Equal(t, advertise("prefill", inc), c.caps, "the child advertises its own life")
	name, at, err := d.tr.AddPeer(c.addr)
	require.NoError(t, err)
	require.Equal(t, transfer.Peer("prefill"), name)
	require.Equal(t, inc, at)
	_, err = d.recv.Connect(c.caps)
	require.NoError(t, err)
	caps, err := transfer.AppendCapabilities(nil, advertise("decode", 1))
	require.NoError(t, err)
	c.do(fmt.Sprintf("peer %x %x", d.tr.Address(), caps))
	return c
}

func (c *child) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "offer ") {
			c.mu.Lock()
			c.offers = append(c.offers, strings.TrimPrefix(line, "offer "))
			c.mu.Unlock()
			continue
		}
		c.lines <- line
	}
	close(c.lines)
}

// do sends a command and answers its "ok" line.
func (c *child) do(cmd string) string {
	c.t.Helper()
	_, err := fmt.Fprintln(c.in, cmd)
	require.NoError(c.t, err)
	return c.expect("ok " + strings.Fields(cmd)[0])
}

func (c *child) expect(prefix string) string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(c.t, ok, "the child exited while %q was awaited", prefix)
		require.True(c.t, strings.HasPrefix(line, prefix), "the child answered %q; %q expected", line, prefix)
		return line
	case <-time.After(bound):
		require.FailNow(c.t, "a bounded wait ran out", "no %q from the child within %v", prefix, bound)
		return ""
	}
}

// heard waits, bounded, until the child printed n offers, and answers them.
func (c *child) heard(n int) []string {
	c.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		c.mu.Lock()
		got := append([]string(nil), c.offers...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		require.True(c.t, time.Now().Before(deadline), "%d offers heard within %v; %d expected", len(got), bound, n)
		time.Sleep(time.Millisecond)
	}
}

// applied waits, bounded, until the decode's transport applied n puts.
func (d *decode) applied(n uint64) {
	d.t.Helper()
	deadline := time.Now().Add(bound)
	for d.tr.Stats().PutsApplied < n {
		require.True(d.t, time.Now().Before(deadline), "%d puts applied within %v: %+v", n, bound, d.tr.Stats())
		time.Sleep(time.Millisecond)
	}
}
