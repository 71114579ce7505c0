package redis_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// A fetch reads each value straight into its staging row over a client whose
// calls end at their deadline (direct), and into the backend's scratch over
// any other. These tests hold both to what the copy from scratch used to
// guarantee: a value of the wrong length lands nothing, a value cut off by a
// dropped connection is a failed unit, never served, and a reply that comes
// late lands only while the fence still holds the rows for the attempt.

// clientKinds are the two ways a fetch reads: straight into staging, and
// into scratch (a client whose calls may outlive their context's deadline).
var clientKinds = []struct {
	name   string
	direct bool
	edit   func(*goredis.Options)
}{
	{"direct", true, func(o *goredis.Options) { o.ContextTimeoutEnabled = true }},
	{"scratch", false, func(o *goredis.Options) { o.ContextTimeoutEnabled = false }},
}

// TestFetchLandsOnlyValuesOfTheRowsLength: a value shorter or longer than
// its row, small or several socket reads long, fails its unit, naming it and
// the length, before a byte of it lands: the row keeps its canary. The units
// around it are unharmed, and the connection serves the next fetch.
func TestFetchLandsOnlyValuesOfTheRowsLength(t *testing.T) {
	for _, kind := range clientKinds {
		for _, row := range []int{64, 256 << 10} {
			t.Run(fmt.Sprintf("%s/row=%d", kind.name, row), func(t *testing.T) {
				c := newClient(t, shared.Addr, kind.edit)
				mem := newStaging(1, 3, row)
				b := newBackend(t, c, mem, kvredis.WithBatch(8), kvredis.WithConcurrency(1))
				ctx := waitCtx(t)
				good := []contract.Unit{unit(1, 0, 0), unit(3, 0, 2)}
				for _, u := range good {
					require.NoError(t, b.Put(ctx, ext, u.Name, content(u.Local, 0, row)))
				}
				bad := unit(2, 0, 1)
				for _, size := range []int{0, 1, row - 1, row + 1, row + 2, row + 3, 2 * row} {
					require.NoError(t, c.Set(ctx, b.Key(ext, bad.Name), content(9, 9, size), 0).Err())
					a, err := b.Fetch(extentOf(t, good[0], bad, good[1]), nil)
					require.NoError(t, err)
					f := isFailed(t, settled(t, b, a))
					assert.Regexp(t, `unit 1 \(.*\): the store holds `+strconv.Itoa(size)+` bytes, the staging row has `+strconv.Itoa(row), f.Reason)
					quiesced(t, b, a)
					assert.True(t, mem.untouched(0, 1), "a %d-byte value landed in a %d-byte row", size, row)

					a, err = b.Fetch(extentOf(t, good...), nil)
					require.NoError(t, err)
					s, ok := served(settled(t, b, a))
					require.True(t, ok, "after a %d-byte value: %v", size, a.Poll())
					assert.True(t, s.Equal(names(good...)))
					quiesced(t, b, a)
					for _, u := range good {
						assert.Equal(t, content(u.Local, 0, row), mem.rows[0][u.Local])
					}
				}
			})
		}
	}
}

// cutter is a TCP proxy to a server whose replies can be cut off: once
// armed with a budget, it passes that many more bytes from the server, then
// either drops the connection (cut) or holds the rest until released.
type cutter struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	budget  int           // bytes still to pass; -1: unlimited
	hold    bool          // when the budget runs out: hold, rather than drop
	release chan struct{} // closed to pass what is held
	spent   chan struct{} // closed when the budget ran out
	conns   []net.Conn
	closed  bool
	wg      sync.WaitGroup
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(redistest.Host, "0"))
	require.NoError(t, err)
	p := &cutter{ln: ln, target: target, budget: -1}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutter) addr() string { return p.ln.Addr().String() }

// arm lets n more bytes of replies through (n < 0: all of them), then cuts
// or holds; spent is closed when the budget has run out.
func (p *cutter) arm(n int, hold bool) (spent <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budget, p.hold = n, hold
	p.spent, p.release = make(chan struct{}), make(chan struct{})
	return p.spent
}

// pass lets what is held through.
func (p *cutter) pass() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release != nil {
		select {
		case <-p.release:
		default:
			close(p.release)
		}
	}
}

func (p *cutter) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_, _ = c.Close(), s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.requests(s, c)
		go p.replies(c, s)
	}
}

func (p *cutter) requests(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// replies passes the server's bytes to the client within the budget.
func (p *cutter) replies(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() { _, _ = dst.Close(), src.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		for out := buf[:n]; len(out) > 0; {
			p.mu.Lock()
			pass := len(out)
			if p.budget >= 0 {
				pass = min(pass, p.budget)
				p.budget -= pass
			}
			spent, hold, release := p.budget == 0, p.hold, p.release
			p.mu.Unlock()
			if _, werr := dst.Write(out[:pass]); werr != nil {
				return
			}
			out = out[pass:]
			if !spent {
				continue
			}
			p.mu.Lock()
			select {
			case <-p.spent:
			default:
				close(p.spent)
			}
			p.mu.Unlock()
			if !hold {
				return // the connection drops part way through the reply
			}
			<-release
			p.mu.Lock()
			p.budget = -1
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (p *cutter) close() {
	_ = p.ln.Close()
	p.pass()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// warm fetches u once, so that the connection the next fetch uses is dialled
// and greeted already: a proxy's budget then counts that fetch's reply only.
func warm(t *testing.T, b *kvredis.Backend, u contract.Unit) {
	t.Helper()
	a, err := b.Fetch(extentOf(t, u), nil)
	require.NoError(t, err)
	s, ok := served(settled(t, b, a))
	require.True(t, ok, "the warm-up fetch: %v", a.Poll())
	require.True(t, s.Has(u.Name), "the warm-up fetch missed")
	quiesced(t, b, a)
}

// TestFetchTornByADroppedConnection: the connection drops part way through
// a value — a good part of it already read, into the row when direct. The
// fetch is Failed, never a miss and never Delivered; the unit is not served;
// Quiesce answers; and the next fetch, on a new connection, is served.
func TestFetchTornByADroppedConnection(t *testing.T) {
	const row = 256 << 10
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			p := newCutter(t, shared.Addr)
			c := newClient(t, p.addr(), kind.edit, func(o *goredis.Options) { o.MaxRetries = -1 })
			mem := newStaging(1, 1, row)
			b := newBackend(t, c, mem, kvredis.WithConcurrency(1), kvredis.WithAttemptTimeout(wait))
			u := unit(1, 0, 0)
			require.NoError(t, b.Put(waitCtx(t), ext, u.Name, content(1, 0, row)))
			warm(t, b, u)

			header := len(fmt.Sprintf("$%d\r\n", row))
			spent := p.arm(header+row/2, false)
			a, err := b.Fetch(extentOf(t, u), nil)
			require.NoError(t, err)
			receive(t, spent, "the proxy to cut the reply")
			f := isFailed(t, settled(t, b, a))
			t.Logf("outcome: %v", f)
			quiesced(t, b, a)

			p.arm(-1, false)
			a, err = b.Fetch(extentOf(t, u), nil)
			require.NoError(t, err)
			s, ok := served(settled(t, b, a))
			require.True(t, ok, "the next fetch: %v", a.Poll())
			assert.True(t, s.Equal(names(u)))
			quiesced(t, b, a)
			assert.Equal(t, content(1, 0, row), mem.rows[0][0])
		})
	}
}

// TestFetchCutOffPastItsBound: the reply stops part way through a value and
// the rest comes only after the attempt's bound. The call ends at the bound
// (direct) or its reply lands in scratch (otherwise); either way, once
// Quiesce answers true, the bytes that come later never reach the row.
func TestFetchCutOffPastItsBound(t *testing.T) {
	const row = 256 << 10
	const bound = 300 * time.Millisecond
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			p := newCutter(t, shared.Addr)
			c := newClient(t, p.addr(), kind.edit, func(o *goredis.Options) { o.ReadTimeout = 2 * wait })
			mem := newStaging(1, 1, row)
			b := newBackend(t, c, mem, kvredis.WithConcurrency(1), kvredis.WithAttemptTimeout(bound))
			u := unit(1, 0, 0)
			require.NoError(t, b.Put(waitCtx(t), ext, u.Name, content(1, 0, row)))
			warm(t, b, u)

			header := len(fmt.Sprintf("$%d\r\n", row))
			spent := p.arm(header+row/2, true)
			a, err := b.Fetch(extentOf(t, u), nil)
			require.NoError(t, err)
			receive(t, spent, "the proxy to hold the rest of the reply")
			f := isFailed(t, settled(t, b, a))
			assert.Contains(t, f.Reason, "timeout")
			quiesced(t, b, a)
			seen := bytes.Clone(mem.rows[0][0]) // what the row holds once the proof is in
			p.pass()                            // the rest of the value, late
			require.NoError(t, b.Close())       // every goroutine of the backend has ended
			require.NoError(t, c.Close())
			assert.Equal(t, seen, mem.rows[0][0], "the row changed after Quiesce answered true")
		})
	}
}

// lateHook is an adversarial client: it holds each fetch's call before the
// network until released, ignoring the call's context, then sends it with
// the deadline dropped — so that its reply is read after the attempt's bound
// has passed, as a client that overruns its deadline would.
type lateHook struct {
	entered, returned chan struct{}
	release           chan struct{}
}

func (h *lateHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h *lateHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h *lateHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !isGet(cmds[0]) {
			return next(ctx, cmds)
		}
		h.entered <- struct{}{}
		<-h.release
		err := next(context.WithoutCancel(ctx), cmds)
		h.returned <- struct{}{}
		return err
	}
}

// TestFetchLateReplyLandsOnlyWhileFenced: the worker's call outlives the
// attempt — its bound passes, or a cancel comes — and its reply lands after
// the outcome was told. Quiesce does not answer true while the call is out
// (the reply would land in rows the engine could reuse); once it answers,
// nothing writes the row again. Over the direct client the late value is in
// the row: it landed while the fence still held it.
func TestFetchLateReplyLandsOnlyWhileFenced(t *testing.T) {
	const bound = 200 * time.Millisecond
	for _, kind := range clientKinds {
		for _, end := range []string{"timeout", "cancel"} {
			t.Run(kind.name+"/"+end, func(t *testing.T) {
				h := &lateHook{entered: make(chan struct{}, 8), returned: make(chan struct{}, 8), release: make(chan struct{})}
				c := newClient(t, shared.Addr, kind.edit)
				c.AddHook(h)
				mem := newStaging(1, 1, rowBytes)
				timeout := bound
				if end == "cancel" {
					timeout = wait
				}
				b := newBackend(t, c, mem, kvredis.WithConcurrency(1), kvredis.WithAttemptTimeout(timeout))
				u := unit(1, 0, 0)
				require.NoError(t, b.Put(waitCtx(t), ext, u.Name, content(1, 0, rowBytes)))

				a, err := b.Fetch(extentOf(t, u), nil)
				require.NoError(t, err)
				receive(t, h.entered, "the fetch's call to reach the client")
				if end == "cancel" {
					cancel(t, a)
					assert.Equal(t, contract.Outcome(contract.Cancelled{}), settled(t, b, a))
				} else {
					assert.Contains(t, isFailed(t, settled(t, b, a)).Reason, "timeout")
				}
				if kind.direct {
					// The call still holds the row: no proof. (This wait can
					// only miss an early answer, never make one up.)
					short, stop := context.WithTimeout(context.Background(), 100*time.Millisecond)
					ok, err := b.Quiesce(short, []contract.Attempt{a})
					stop()
					assert.False(t, ok, "Quiesce answered true while a call reading into the row was out")
					assert.Error(t, err)
					access, err := b.TryQuiesce([]contract.Attempt{a})
					require.NoError(t, err)
					assert.Equal(t, contract.AccessUnknown, access)
				}
				close(h.release)
				receive(t, h.returned, "the late call to return")
				quiesced(t, b, a)
				if kind.direct {
					assert.Equal(t, content(1, 0, rowBytes), mem.rows[0][0], "the late reply was read straight into the row, while fenced")
				} else {
					assert.True(t, mem.untouched(0, 0), "a late reply over a client without deadlines reached staging")
				}
				copy(mem.rows[0][0], poison(0)) // the slot's next tenant
				require.NoError(t, b.Close())
				assert.Equal(t, poison(0), mem.rows[0][0], "the row was written after Quiesce answered true")
			})
		}
	}
}
