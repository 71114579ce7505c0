package readiness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// SPEC §4 rule 18: every public call may come from any goroutine. The tests
// here run the shipped runner with the system clock, a simulated device whose
// copies take real time, and a backend that does everything the contract
// allows — answers late from its own goroutine, keeps writing the slots it
// was handed until Quiesce answers true, answers Quiesce false before true,
// misses, fails, serves part — while several goroutines lend, wait, wait for
// layers, report layers computed, cancel, poll and release at once.

const churnSlotBytes = 16

// churnLayers splits a slot into two layers of 8 bytes each.
var churnLayers = [][]staging.LayerSpans{{
	{Layer: 0, Spans: []staging.Span{{Offset: 0, Size: 8}}},
	{Layer: 1, Spans: []staging.Span{{Offset: 8, Size: 8}}},
}}

// content is what a unit named n holds: derived from its name, so that bytes
// a late writer of another lease leaves in a slot never pass for them.
func content(n contract.Name) []byte {
	b := make([]byte, churnSlotBytes)
	for i := range b {
		b[i] = n[i%4] ^ byte(i)
	}
	return b
}

// churn is the adversarial backend. Every attempt has a writer goroutine that
// writes its units' content into their slots, over and over, until Quiesce
// stops it; its outcome comes from that goroutine after a random delay.
type churn struct {
	mem      *staging.Memory
	mu       sync.Mutex
	attempts int
	refusals atomic.Int64 // Quiesce answers that proved nothing
}

type churnAttempt struct {
	mu      sync.Mutex
	outcome contract.Outcome
	asked   int // Quiesce calls that named it
	stop    chan struct{}
	stopped chan struct{}
}

func (a *churnAttempt) Poll() contract.Outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outcome
}

func (c *churn) start(ext contract.CacheExtent, publish bool) *churnAttempt {
	c.mu.Lock()
	c.attempts++
	seed := uint64(c.attempts)
	c.mu.Unlock()
	a := &churnAttempt{stop: make(chan struct{}), stopped: make(chan struct{})}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	delay := time.Duration(rng.IntN(2000)) * time.Microsecond
	mode := rng.IntN(10)
	go func() {
		defer close(a.stopped)
		answerAt := time.Now().Add(delay)
		for {
			var served []contract.Name
			for i := range ext.Len() {
				u := ext.Unit(i)
				row, ok := c.mem.Row(u.LocalGroup, u.Local)
				if !ok {
					continue
				}
				if publish {
					_ = bytes.Clone(row) // reads the slot, as a store's send does
				} else if mode < 8 && (mode < 5 || i%2 == 0) {
					copy(row, content(u.Name))
				}
				if mode < 5 || (mode < 8 && i%2 == 0) {
					served = append(served, u.Name)
				}
			}
			if !answerAt.IsZero() && time.Now().After(answerAt) {
				a.mu.Lock()
				if mode == 9 {
					a.outcome = contract.Failed{Reason: "churn: the store failed"}
				} else {
					a.outcome = contract.Delivered{Served: contract.NewNameSet(served...)}
				}
				a.mu.Unlock()
				answerAt = time.Time{}
			}
			select {
			case <-a.stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()
	return a
}

func (c *churn) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	return c.start(ext, false), nil
}

func (c *churn) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return c.start(ext, true), nil
}

// Quiesce answers false the first time it is asked about an attempt, then
// stops the attempt's writer, waits until it has stopped, and answers true.
func (c *churn) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	first := false
	for _, x := range list {
		a := x.(*churnAttempt)
		a.mu.Lock()
		a.asked++
		first = first || a.asked == 1
		a.mu.Unlock()
	}
	if first {
		c.refusals.Add(1)
		return false, nil
	}
	for _, x := range list {
		a := x.(*churnAttempt)
		a.mu.Lock()
		select {
		case <-a.stop:
		default:
			close(a.stop)
		}
		a.mu.Unlock()
		select {
		case <-a.stopped:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

func (c *churn) Settle(context.Context, []contract.Attempt) error { return nil }
func (c *churn) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}
func (c *churn) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, errors.New("churn: single source")
}

// churnRig is an engine over the churning backend with the system clock.
type churnRig struct {
	eng    *Engine
	dev    *sim.Device
	mem    *staging.Memory
	be     *churn
	stream gpu.Stream
	slots  int
}

func newChurnRig(t *testing.T, slots int) *churnRig {
	t.Helper()
	dev, err := sim.New(0, 1<<22, sim.WithLatency(sim.WallClock{}, 20*time.Microsecond))
	require.NoError(t, err)
	stream, err := dev.NewStream()
	require.NoError(t, err)
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: slots, SlotBytes: churnSlotBytes})
	require.NoError(t, err)
	be := &churn{mem: mem}
	eng, err := New(Config{
		Memory: mem, TokensPerBlock: 32, Layers: churnLayers,
		RequestTimeout: 20 * time.Second, DrainGrace: 20 * time.Second, QuiesceTimeout: 5 * time.Second,
		RetryBackoff: 100 * time.Microsecond, MaxRetryBackoff: time.Millisecond,
		Fetcher: be, Publisher: be, Stream: stream,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	return &churnRig{eng: eng, dev: dev, mem: mem, be: be, stream: stream, slots: slots}
}

// caller is one goroutine's share of the work: n leases, each taken through
// a lifecycle drawn from its seed.
func (r *churnRig) caller(ctx context.Context, id, n int) error {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	for k := range n {
		if err := r.lifecycle(ctx, rng, id, k); err != nil {
			return fmt.Errorf("caller %d, lease %d: %w", id, k, err)
		}
	}
	return nil
}

func (r *churnRig) lifecycle(ctx context.Context, rng *rand.Rand, id, k int) error {
	rows := make([]staging.Row, 1+rng.IntN(3))
	for i := range rows {
		p, err := r.dev.Alloc(churnSlotBytes)
		if err != nil {
			return err
		}
		if err := r.dev.Write(p, bytes.Repeat([]byte{0xCA}, churnSlotBytes)); err != nil {
			return err
		}
		var n contract.Name
		n[0], n[1], n[2], n[3] = byte(id), byte(k), byte(k>>8), byte(i)
		rows[i] = staging.Row{Name: n, Group: 0, Block: i, Device: p}
	}
	if rng.IntN(4) == 0 {
		return r.publish(ctx, rng, rows)
	}
	h, err := r.eng.Lend(Request{Kind: Fetch, Rows: rows})
	if err != nil {
		return err
	}
	switch rng.IntN(6) {
	case 0: // the owner gives up early: nothing may land in its rows after this
		_, _ = r.eng.Cancel(h)
		if info, err := r.eng.Lease(h); err == nil && info.State == StateReleased {
			return nil // withdrawn before its submission: its slots are back already
		}
		return r.eng.Release(h)
	case 1:
		if _, err := r.eng.WaitLayer(ctx, h, 0); err != nil && !isUnanswered(err) {
			return err
		}
	}
	_, _ = r.eng.Readiness(h)
	_, _, _ = r.eng.LayerReadiness(h, 1)
	_ = r.eng.Stats()
	r.eng.Progress()
	info, err := r.eng.Wait(ctx, h, UntilSettled)
	if err != nil {
		return err
	}
	if info.State == StateLogicallyComplete {
		if err := r.checkRows(h, rows); err != nil {
			return err
		}
	}
	return r.eng.Release(h)
}

func isUnanswered(err error) bool {
	return err != nil && (errors.Is(err, ErrLayerFailed) || errors.Is(err, ErrNotReady))
}

// checkRows reads the lease's device rows: those that arrived hold their own
// unit's content, the others their canary.
func (r *churnRig) checkRows(h Handle, rows []staging.Row) error {
	arrived, err := r.eng.Arrived(h, nil)
	if err != nil {
		return err
	}
	got := map[int]bool{}
	for _, g := range arrived {
		for _, b := range g.Blocks {
			got[b] = true
		}
	}
	buf := make([]byte, churnSlotBytes)
	for _, row := range rows {
		if err := r.dev.Read(buf, row.Device); err != nil {
			return err
		}
		want := bytes.Repeat([]byte{0xCA}, churnSlotBytes)
		if got[row.Block] {
			want = content(row.Name)
		}
		if !bytes.Equal(buf, want) {
			return fmt.Errorf("%v row %d (arrived %v): device holds % x, want % x", h, row.Block, got[row.Block], buf, want)
		}
	}
	return nil
}

// publish saves the rows, half the time layer by layer as each layer is
// reported computed.
func (r *churnRig) publish(ctx context.Context, rng *rand.Rand, rows []staging.Row) error {
	layerwise := rng.IntN(2) == 0
	h, err := r.eng.Lend(Request{Kind: Publish, Rows: rows, Layerwise: layerwise})
	if err != nil {
		return err
	}
	if layerwise {
		if _, err := r.eng.Wait(ctx, h, UntilGranted); err != nil {
			return err
		}
		for l := range 2 {
			if err := r.eng.Computed(h, l, gpu.Event{}); err != nil {
				return err
			}
		}
	}
	if _, err := r.eng.Wait(ctx, h, UntilSettled); err != nil {
		return err
	}
	return r.eng.Release(h)
}

func TestRule18ConcurrentCallers(t *testing.T) {
	const callers, leases, slots = 8, 40, 24
	r := newChurnRig(t, slots)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for id := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.caller(ctx, id, leases)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rep, err := r.eng.Shutdown(ctx)
	require.NoError(t, err)
	st := r.eng.Stats()
	assert.True(t, rep.Drained, "the engine drained")
	assert.Equal(t, slots, st.SlotsFree, "every slot is free at the end")
	assert.Zero(t, st.SlotsHeld)
	assert.Zero(t, st.SlotsQuarantined, "nothing was contained: the backend always proves in time")
	assert.Zero(t, st.InvariantBreaches, "no halt, no kvready bug")
	assert.Equal(t, uint64(callers*leases), st.Lent)
	assert.Equal(t, uint64(callers*leases), st.Released)
	assert.Positive(t, r.be.refusals.Load(), "Quiesce answered false before true")
}

// Exclusive: what OnTransition writes with no lock of its own is read inside
// Exclusive while other goroutines lend and run rounds (the race detector
// checks the exclusion: go test -race), and a call made from another
// goroutine while f runs returns only after f.
func TestExclusiveExcludesCallsAndCallbacks(t *testing.T) {
	moved := map[Handle]State{} // written by OnTransition only, read only inside Exclusive
	r := newRig(t, 16, func(c *Config) { c.OnTransition = func(tr Transition) { moved[tr.Lease] = tr.To } })
	var rows [16][]staging.Row
	for k := range rows {
		rows[k] = r.rows(1+k, 1)
	}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 8 {
				_, err := r.eng.Lend(Request{Kind: Fetch, Rows: rows[g*8+k]})
				assert.NoError(t, err)
				r.eng.Progress()
			}
		}()
	}
	for range 50 {
		r.eng.Exclusive(func() {
			for h, s := range moved {
				assert.NotEqual(t, StateWaiting, s, "%v moved into waiting", h)
			}
		})
	}
	wg.Wait()
	var seen int
	r.eng.Exclusive(func() { seen = len(moved) })
	assert.Equal(t, 16, seen, "leases that moved")

	// A call from another goroutine waits for f to return.
	inside, returned := make(chan struct{}), make(chan struct{})
	r.eng.Exclusive(func() {
		go func() {
			close(inside)
			r.eng.Progress()
			close(returned)
		}()
		<-inside
		select {
		case <-returned:
			t.Error("Progress returned while Exclusive's f ran")
		case <-time.After(20 * time.Millisecond): // long enough for an unexcluded Progress to return
		}
	})
	select {
	case <-returned:
	case <-contextWithTimeout(t).Done():
		t.Fatal("Progress never returned after Exclusive")
	}
}
