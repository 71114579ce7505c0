package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// serverError is a reply of the server's own (go-redis's proto.RedisError
// is internal): an answer, whatever it says.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// TestJudge: what one call's error says of the store. A reply of any kind
// is an answer; a connection error, or a deadline after most of the bound
// on the wire, is the store not answering; what kvready or the caller did
// (a cancel, a close, a batch not sent, a deadline met by a call picked up
// late) says nothing.
func TestJudge(t *testing.T) {
	const bound = 500 * time.Millisecond
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error
		took time.Duration
		want verdict
	}{
		{"a value", nil, time.Millisecond, answered},
		{"a miss", goredis.Nil, time.Millisecond, answered},
		{"a server error", serverError("OOM command not allowed"), time.Millisecond, answered},
		{"a server error, wrapped", fmt.Errorf("pipeline: %w", serverError("LOADING")), time.Millisecond, answered},
		{"refused", refused, time.Millisecond, unreachable},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, time.Millisecond, unreachable},
		{"closed by the server", io.EOF, time.Millisecond, unreachable},
		{"cut mid-reply", io.ErrUnexpectedEOF, time.Millisecond, unreachable},
		{"no reply within the bound (socket)", timeout, bound, unreachable},
		{"no reply within the bound (context)", context.DeadlineExceeded, bound * 3 / 4, unreachable},
		{"a deadline met by a call picked up late", context.DeadlineExceeded, bound / 10, silent},
		{"a socket deadline met by a call picked up late", timeout, bound / 10, silent},
		{"cancelled", context.Canceled, bound, silent},
		{"not sent: cancel", errCancelled, 0, silent},
		{"not sent: the breaker", errNotSent, 0, silent},
		{"the client closed", goredis.ErrClosed, 0, silent},
		{"no connection free in the pool", goredis.ErrPoolTimeout, bound, silent},
		{"a value too long for its buffer", errors.New("redis: buffer too small"), time.Millisecond, silent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, judge(tc.err, tc.took, bound))
		})
	}
	// A bound shorter than hungFloor, waited out in full: too tight for the
	// store, not a store down.
	assert.Equal(t, silent, judge(context.DeadlineExceeded, 20*time.Millisecond, 20*time.Millisecond))
	assert.Equal(t, unreachable, judge(context.DeadlineExceeded, hungFloor, 20*time.Millisecond))
}

// TestObserve: what opens the breaker. One call with no reply within its
// bound opens it on its own — a manager sending one request at a time
// learns of a hung store within one bound — unless the store answered
// another call since it was sent (slow, not down); connection errors open
// it only threshold in a row, and any answer ends their run; a silent call
// changes nothing.
func TestObserve(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	type call struct {
		v      verdict
		err    error
		before bool // sent before the last answer came
	}
	noReply := call{unreachable, context.DeadlineExceeded, false}
	noReplyBefore := call{unreachable, context.DeadlineExceeded, true}
	conn, connBefore := call{unreachable, refused, false}, call{unreachable, refused, true}
	answer, cancelled := call{answered, goredis.Nil, false}, call{silent, context.Canceled, false}
	for _, tc := range []struct {
		name   string
		calls  []call
		run    int
		open   bool
		reason string
	}{
		{"one call with no reply opens", []call{noReply}, 1, true, "a call had no reply within the attempt bound (2s)"},
		{"no reply, after connection errors", []call{conn, noReply}, 2, true, "a call had no reply within the attempt bound (2s)"},
		{"no reply, but sent before an answer: slow, not down", []call{noReplyBefore, noReplyBefore, noReplyBefore, noReplyBefore}, 0, false, ""},
		{"connection errors under the threshold", []call{conn, conn}, 2, false, ""},
		{"connection errors count whatever answered meanwhile", []call{connBefore, connBefore, connBefore}, 3, true, "3 calls in a row failed, the last with dial tcp: connect: connection refused"},
		{"an answer ends the run", []call{conn, conn, answer, conn, conn}, 2, false, ""},
		{"a silent call changes nothing", []call{conn, cancelled, cancelled, conn}, 2, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			b := &Backend{brk: breaker{threshold: 3, first: time.Hour, most: time.Hour}, ctx: ctx,
				set: settings{timeout: 2 * time.Second}}
			defer b.probing.Wait() // the probe, if it started, ends with ctx
			defer cancel()
			before := time.Now()
			time.Sleep(time.Millisecond) // the answer comes after before, on any clock resolution
			b.observe(answered, nil, before)
			for _, c := range tc.calls {
				sent := time.Now()
				if c.before {
					sent = before
				}
				b.observe(c.v, c.err, sent)
			}
			b.brk.mu.Lock()
			run, reason := b.brk.run, b.brk.reason
			b.brk.mu.Unlock()
			assert.Equal(t, tc.run, run, "calls in the run")
			assert.Equal(t, tc.open, b.brk.open.Load(), "open")
			assert.Equal(t, tc.reason, reason)
			if tc.open {
				assert.Equal(t, 1, b.brk.outages)
			}
		})
	}
}

// TestObserveThresholdZero: WithBreaker(0) never opens, whatever the calls.
func TestObserveThresholdZero(t *testing.T) {
	b := &Backend{ctx: context.Background(), set: settings{timeout: time.Second}}
	b.observe(unreachable, context.DeadlineExceeded, time.Now())
	b.observe(unreachable, io.EOF, time.Now())
	assert.False(t, b.brk.open.Load())
}

// TestPublishBatch: without WithBatch a publication is at most one call per
// two cores, never calls smaller than the batch.
func TestPublishBatch(t *testing.T) {
	const big, small = 512 << 10, 64 << 10
	for _, tc := range []struct{ n, batch, procs, row, want int }{
		{16, 8, 1, big, 16}, // one core: one pipeline
		{16, 8, 2, big, 16}, // two: one pipeline
		{16, 8, 4, big, 8},  // four: two pipelines of the batch
		{16, 8, 16, big, 8}, // many: the batch
		{64, 8, 8, big, 16}, // a large lease on eight cores: four pipelines
		{3, 8, 2, big, 8},   // a small lease: one pipeline of up to the batch
		{0, 8, 2, big, 8},
		{16, 8, 2, small, 8}, // small rows: pipelines of the batch side by side
		{16, 8, 2, 256 << 10, 16},
		{16, 8, 2, 256<<10 - 1, 8},
	} {
		got := publishBatch(tc.n, tc.batch, tc.procs, tc.row)
		assert.Equal(t, tc.want, got, "%d units of %d bytes, batch %d, %d cores", tc.n, tc.row, tc.batch, tc.procs)
	}
}
