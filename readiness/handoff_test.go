package readiness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// goid returns the calling goroutine's id, read from its stack header: the
// tests below check on which goroutine each backend and device call ran,
// without asking the engine.
func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := bytes.Fields(buf[:n]) // "goroutine 18 [running]:"
	id, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		panic("goid: unexpected stack header " + string(buf[:n]))
	}
	return id
}

// callLog records on which goroutine each call ran.
type callLog struct {
	mu    sync.Mutex
	calls map[string][]uint64
}

func (l *callLog) add(what string) {
	id := goid()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string][]uint64{}
	}
	l.calls[what] = append(l.calls[what], id)
}

// offOwner returns the calls of kind what made on a goroutine other than
// owner.
func (l *callLog) offOwner(what string, owner uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range l.calls[what] {
		if id != owner {
			n++
		}
	}
	return n
}

func (l *callLog) count(what string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls[what])
}

// quick is a polite backend that knows at once whether its deliveries ended
// (contract.QuiesceProber), as backend/mem and backend/redis do. A delivery
// writes its rows from its own goroutine (or before Fetch returns, with
// atSubmit), ends, then publishes its outcome and calls its completion. Its
// blocking Quiesce waits for the delivery.
type quick struct {
	log      *callLog
	mem      *staging.Memory
	content  byte
	atSubmit bool
	wg       sync.WaitGroup
}

type quickAttempt struct {
	q    *quick
	done chan struct{} // closed when the delivery stopped touching memory

	mu      sync.Mutex
	outcome contract.Outcome
	notify  func()
}

func (q *quick) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	q.log.add("Fetch")
	a := &quickAttempt{q: q, done: make(chan struct{})}
	deliver := func() {
		names := make([]contract.Name, 0, ext.Len())
		for _, u := range ext.All() {
			if row, ok := q.mem.Row(u.LocalGroup, u.Local); ok {
				for i := range row {
					row[i] = q.content
				}
			}
			names = append(names, u.Name)
		}
		close(a.done)
		a.mu.Lock()
		a.outcome = contract.Delivered{Served: contract.NewNameSet(names...)}
		f := a.notify
		a.mu.Unlock()
		if f != nil {
			f()
		}
	}
	if q.atSubmit {
		deliver()
		return a, nil
	}
	q.wg.Add(1)
	go func() { defer q.wg.Done(); deliver() }()
	return a, nil
}

func (a *quickAttempt) Poll() contract.Outcome {
	a.q.log.add("Poll")
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outcome
}

func (a *quickAttempt) Notify(f func()) {
	a.q.log.add("Notify")
	a.mu.Lock()
	if a.outcome != nil {
		a.mu.Unlock()
		f()
		return
	}
	a.notify = f
	a.mu.Unlock()
}

func (q *quick) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	q.log.add("TryQuiesce")
	for _, x := range list {
		select {
		case <-x.(*quickAttempt).done:
		default:
			return contract.AccessUnknown, nil
		}
	}
	return contract.AccessEnded, nil
}

func (q *quick) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	q.log.add("Quiesce")
	for _, x := range list {
		select {
		case <-x.(*quickAttempt).done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

func (q *quick) Settle(context.Context, []contract.Attempt) error { return nil }
func (q *quick) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}
func (q *quick) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, errors.ErrUnsupported
}

// quiesceOnly is the same backend without its probe: every proof is a
// blocking Quiesce, asked on a worker.
type quiesceOnly struct{ q *quick }

func (b quiesceOnly) Fetch(e contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	return b.q.Fetch(e, r)
}
func (b quiesceOnly) Quiesce(ctx context.Context, l []contract.Attempt) (bool, error) {
	return b.q.Quiesce(ctx, l)
}
func (b quiesceOnly) Settle(ctx context.Context, l []contract.Attempt) error {
	return b.q.Settle(ctx, l)
}
func (b quiesceOnly) Probe(ctx context.Context, n []byte, u []contract.Name) (contract.NameSet, bool, error) {
	return b.q.Probe(ctx, n, u)
}
func (b quiesceOnly) OpenRoute(h map[string]string) (contract.Route, error) { return b.q.OpenRoute(h) }

// queryLog is a stream that records on which goroutine its events are
// queried.
type queryLog struct {
	gpu.Stream
	log *callLog
}

func (s queryLog) Query(ev gpu.Event) (gpu.Status, error) {
	s.log.add("Query")
	return s.Stream.Query(ev)
}

// SPEC §4 rule 14: with a backend that answers its proof without blocking, a
// served fetch costs at most one goroutine hand-off — the backend's
// completion waking the owner — and none when the outcome is known at
// submission. The engine's count (Stats.Handoffs) is checked against what the
// test sees itself: on which goroutine every backend and device call ran. The
// same backend without its probe shows the counts can fail: its proofs go to
// a worker.
func TestHandoffsPerServedFetch(t *testing.T) {
	const fetches = 20
	for _, tc := range []struct {
		name     string
		atSubmit bool
		probe    bool
		maxEach  uint64 // hand-offs per served fetch, at most
		minEach  uint64 // and at least
	}{
		{name: "outcome at submission, proof inline", atSubmit: true, probe: true, maxEach: 0},
		{name: "outcome later, proof inline", atSubmit: false, probe: true, maxEach: 1},
		{name: "outcome later, Quiesce on a worker", atSubmit: false, probe: false, maxEach: 10, minEach: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &callLog{}
			m, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 64})
			require.NoError(t, err)
			// A device whose copies land by the time they are queried: the
			// owner's own query after recording finds them landed.
			dev, err := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
			require.NoError(t, err)
			inner, err := dev.NewStream()
			require.NoError(t, err)
			q := &quick{log: log, mem: m, content: 0x5C, atSubmit: tc.atSubmit}
			var fetcher contract.Fetcher = q
			if !tc.probe {
				fetcher = quiesceOnly{q}
			}
			cfg := coreConfig(m)
			cfg.Fetcher, cfg.Stream = fetcher, queryLog{inner, log}
			eng, err := New(cfg)
			require.NoError(t, err)
			ptr, err := dev.Alloc(64)
			require.NoError(t, err)
			owner := goid()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			before := eng.Stats().Handoffs
			for k := range fetches {
				h, err := eng.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: quickName(k), Group: 0, Block: 0, Device: ptr}}})
				require.NoError(t, err)
				from := eng.Stats().Handoffs
				info, err := eng.Wait(ctx, h, UntilSettled)
				require.NoError(t, err)
				require.Equal(t, Served, info.Outcome)
				got := eng.Stats().Handoffs - from
				assert.LessOrEqual(t, got, tc.maxEach, "fetch %d: hand-offs", k)
				assert.GreaterOrEqual(t, got, tc.minEach, "fetch %d: hand-offs", k)
				row := make([]byte, 64)
				require.NoError(t, dev.Read(row, ptr))
				require.Equal(t, bytes.Repeat([]byte{0x5C}, 64), row, "the device row holds the fetched content")
				require.NoError(t, eng.Release(h))
			}
			total := eng.Stats().Handoffs - before
			q.wg.Wait()
			_, err = eng.Shutdown(ctx)
			require.NoError(t, err)

			assert.Zero(t, log.offOwner("Query", owner), "copy events are queried by the owner, never by the watcher")
			if tc.probe {
				assert.Zero(t, log.offOwner("Poll", owner), "attempts are polled by the owner")
				assert.Zero(t, log.count("Quiesce"), "a backend that answers inline is never asked the blocking Quiesce")
				assert.Equal(t, fetches, log.offOwner("TryQuiesce", 0), "one probe per fetch")
				assert.Zero(t, log.offOwner("TryQuiesce", owner), "probes run on the owner")
				assert.Zero(t, eng.Stats().QuiesceCalls)
			} else {
				// The worker polls again after Quiesce true, so that a changed
				// answer is caught before anything is copied.
				assert.Equal(t, fetches, log.offOwner("Quiesce", owner), "each fetch's Quiesce ran on a worker")
			}
			t.Logf("%d hand-offs for %d served fetches", total, fetches)
		})
	}
}

func quickName(k int) contract.Name {
	var n contract.Name
	copy(n[:], fmt.Sprintf("quick-%d", k))
	return n
}

// coreConfig is a lifecycle configuration over m with the system clock's
// defaults and a quiet logger, for the caller to add a backend and a stream.
func coreConfig(m *staging.Memory) Config {
	return Config{Memory: m, TokensPerBlock: rigTPB, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}
