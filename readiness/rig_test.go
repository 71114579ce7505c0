package readiness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// The rig: the runner users embed (goroutines and all), over real staging
// memory, the simulated device, a manual clock and a scripted backend whose
// every answer the test decides. Steps are made deterministic with
// Engine.Sync, which waits for the engine's goroutines, never for time.

const (
	rigSlotBytes = 16
	rigTPB       = 32
)

// quiesceAnswer is what the scripted backend answers to Quiesce.
type quiesceAnswer struct {
	ok  bool
	err error
}

// script is a thread-safe backend: Poll answers what the test set, Quiesce
// answers what the test set (and may block until the test lets it go).
type script struct {
	mu       sync.Mutex
	mem      *staging.Memory
	attempts []*scriptAttempt
	reject   error // the next submission's error (wrapping ErrSubmissionRejected or not)
	answer   quiesceAnswer
	gate     chan struct{} // if set, Quiesce waits for it to close (or its ctx)
	entered  chan struct{} // signalled when Quiesce is entered
	calls    int
	// onSubmit, if set, runs (under mu) before a submission returns: a
	// backend that answers at once, from a local cache.
	onSubmit func(a *scriptAttempt)
}

type scriptAttempt struct {
	s       *script
	ext     contract.CacheExtent
	outcome contract.Outcome
	ended   bool // Quiesce answered true for it
	polls   int
	// then, if set, replaces the outcome once a Poll has returned it: a
	// backend that changes its answer right after giving it.
	then contract.Outcome
	// panics is how many Polls, from the next, panic before answering.
	panics int
}

func newScript(m *staging.Memory) *script {
	return &script{mem: m, answer: quiesceAnswer{ok: true}, entered: make(chan struct{}, 64)}
}

func (a *scriptAttempt) Poll() contract.Outcome {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	a.polls++
	if a.panics > 0 {
		a.panics--
		panic("script: Poll")
	}
	o := a.outcome
	if o != nil && a.then != nil {
		a.outcome, a.then = a.then, nil
	}
	return o
}

func (s *script) submit(ext contract.CacheExtent) (contract.Attempt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reject; err != nil {
		s.reject = nil
		return nil, err
	}
	a := &scriptAttempt{s: s, ext: ext}
	s.attempts = append(s.attempts, a)
	if s.onSubmit != nil {
		s.onSubmit(a)
	}
	return a, nil
}

func (s *script) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	return s.submit(ext)
}
func (s *script) Publish(ext contract.CacheExtent) (contract.Attempt, error) { return s.submit(ext) }

func (s *script) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	s.mu.Lock()
	s.calls++
	gate := s.gate
	s.mu.Unlock()
	select {
	case s.entered <- struct{}{}:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answer.err != nil || !s.answer.ok {
		return false, s.answer.err
	}
	for _, x := range list {
		x.(*scriptAttempt).ended = true
	}
	return true, nil
}

func (s *script) Settle(context.Context, []contract.Attempt) error { return nil }
func (s *script) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}
func (s *script) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("script: %w", errors.ErrUnsupported)
}

// blocking reports whether Quiesce calls wait at a gate the test has not
// opened.
func (s *script) blocking() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		return false
	}
	select {
	case <-s.gate:
		return false
	default:
		return true
	}
}

// last returns the latest attempt.
func (s *script) last(t *testing.T) *scriptAttempt {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotEmpty(t, s.attempts, "no submission reached the backend")
	return s.attempts[len(s.attempts)-1]
}

func (s *script) set(a *scriptAttempt, o contract.Outcome) {
	s.mu.Lock()
	a.outcome = o
	s.mu.Unlock()
}

// setThen sets an answer that replaces the outcome once a Poll returned it.
func (s *script) setThen(a *scriptAttempt, first, then contract.Outcome) {
	s.mu.Lock()
	a.outcome, a.then = first, then
	s.mu.Unlock()
}

func (s *script) setAnswer(ok bool, err error) {
	s.mu.Lock()
	s.answer = quiesceAnswer{ok: ok, err: err}
	s.mu.Unlock()
}

func (s *script) quiesceCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// write writes b into the staging row of the attempt's unit i, as a delivery
// that is still going on would.
func (s *script) write(a *scriptAttempt, i int, b []byte) {
	u := a.ext.Unit(i)
	row, ok := s.mem.Row(u.LocalGroup, u.Local)
	if ok {
		copy(row, b)
	}
}

type rig struct {
	t         *testing.T
	clk       *sim.ManualClock
	dev       *sim.Device
	stream    gpu.Stream
	mem       *staging.Memory
	be        *script
	eng       *Engine
	cfg       Config // what eng was assembled from: a restart assembles another over the same memory
	contained []Containment
}

type rigOption func(*Config)

// newRig builds an engine over one pool group of slots; the clock starts at
// t=10s, as the reference's lifetime tests do.
func newRig(t *testing.T, slots int, opts ...rigOption) *rig {
	t.Helper()
	r := &rig{t: t, clk: sim.NewManualClock(time.Unix(10, 0))}
	var err error
	r.dev, err = sim.New(0, 1<<20)
	require.NoError(t, err)
	r.stream, err = r.dev.NewStream()
	require.NoError(t, err)
	r.mem, err = staging.NewMemory(staging.GoHeap, staging.Group{Slots: slots, SlotBytes: rigSlotBytes})
	require.NoError(t, err)
	for s := range slots {
		row, _ := r.mem.Row(0, s)
		fillBytes(row, 0xCA)
	}
	r.be = newScript(r.mem)
	cfg := Config{
		Memory:         r.mem,
		TokensPerBlock: rigTPB,
		RequestTimeout: 5 * time.Second,
		DrainGrace:     5 * time.Second,
		QuiesceTimeout: 10 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Fetcher:        r.be,
		Publisher:      r.be,
		Stream:         r.stream,
		Health:         r.dev,
		Clock:          r.clk,
		OnContainment:  func(c Containment) { r.contained = append(r.contained, c) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	r.cfg = cfg
	r.eng, err = New(cfg)
	require.NoError(t, err)
	t.Cleanup(r.shutdown)
	return r
}

// shutdown closes the engine and lets every goroutine end: the backend is
// unblocked and the clock moves past every containment deadline.
func (r *rig) shutdown() {
	r.be.mu.Lock()
	if r.be.gate != nil {
		select {
		case <-r.be.gate:
		default:
			close(r.be.gate)
		}
	}
	r.be.mu.Unlock()
	rep := r.eng.Close()
	for i := 0; !rep.Drained && i < 100; i++ {
		r.clk.Advance(time.Minute)
		r.dev.CompleteAll()
		r.sync()
		rep = r.eng.Report()
	}
	if !rep.Drained {
		r.t.Errorf("the engine did not drain: %+v", rep)
	}
}

// entered waits until the backend's Quiesce has been entered; bounded, so a
// broken engine that never asks fails the test instead of hanging it.
func (r *rig) entered() {
	r.t.Helper()
	select {
	case <-r.be.entered:
	case <-time.After(10 * time.Second):
		r.t.Fatal("Quiesce was never called: the engine did not ask for the access proof")
	}
}

// sync runs rounds until the engine and its goroutines are idle: Engine.Sync,
// except that a Quiesce call the test holds at its gate is not waited for.
func (r *rig) sync() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !r.be.blocking() {
		_, err := r.eng.Sync(ctx)
		require.NoError(r.t, err)
		return
	}
	for {
		n := r.eng.Progress()
		if r.eng.watch.started {
			select {
			case <-r.eng.watch.sync():
			case <-ctx.Done():
				r.t.Fatal("the watcher did not catch up")
			}
		}
		if n == 0 && !r.eng.core.HasReady() && r.eng.mail.n.Load() == 0 {
			return
		}
	}
}

// rows makes n rows of group 0, blocks 0..n-1, each with its own device row
// holding a canary.
func (r *rig) rows(serial, n int) []staging.Row {
	r.t.Helper()
	out := make([]staging.Row, n)
	for i := range out {
		p, err := r.dev.Alloc(rigSlotBytes)
		require.NoError(r.t, err)
		require.NoError(r.t, r.dev.Write(p, pattern(0xDE, serial, i)))
		out[i] = staging.Row{Name: name(serial, i), Group: 0, Block: i, Device: p}
	}
	return out
}

func (r *rig) lend(req Request) Handle {
	r.t.Helper()
	h, err := r.eng.Lend(req)
	require.NoError(r.t, err)
	return h
}

// fetch lends a fetch of n rows and runs it to its submission.
func (r *rig) fetch(serial, n int) (Handle, []staging.Row, *scriptAttempt) {
	r.t.Helper()
	rows := r.rows(serial, n)
	h := r.lend(Request{Kind: Fetch, Rows: rows})
	r.sync()
	return h, rows, r.be.last(r.t)
}

func (r *rig) state(h Handle) State {
	r.t.Helper()
	info, err := r.eng.Lease(h)
	require.NoError(r.t, err)
	return info.State
}

func (r *rig) info(h Handle) LeaseInfo {
	r.t.Helper()
	info, err := r.eng.Lease(h)
	require.NoError(r.t, err)
	return info
}

// deviceRow reads a device row.
func (r *rig) deviceRow(row staging.Row) []byte {
	r.t.Helper()
	b := make([]byte, rigSlotBytes)
	require.NoError(r.t, r.dev.Read(b, row.Device))
	return b
}

// deliver writes the content of the served units and sets the outcome.
func (r *rig) deliver(a *scriptAttempt, serial int, served ...int) {
	var names []contract.Name
	for _, i := range served {
		r.be.write(a, i, pattern(0xC0, serial, i))
		names = append(names, a.ext.Unit(i).Name)
	}
	r.be.set(a, contract.Delivered{Served: contract.NewNameSet(names...)})
}

// name is the content name of row i of the lease with serial.
func name(serial, i int) contract.Name {
	var n contract.Name
	n[0], n[1], n[2], n[3] = 0x4B, byte(serial), byte(serial>>8), byte(i)
	return n
}

// pattern is a row's bytes naming their writer.
func pattern(tag byte, serial, row int) []byte {
	b := make([]byte, rigSlotBytes)
	for i := range b {
		switch i % 4 {
		case 0:
			b[i] = tag
		case 1:
			b[i] = byte(serial)
		case 2:
			b[i] = byte(row)
		default:
			b[i] = byte(i)
		}
	}
	return b
}

func fillBytes(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func contextWithTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
