package readiness_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"github.com/stretchr/testify/require"
)

const (
	tpb       = 32
	slotBytes = 64
)

// rig is an engine over real staging memory, backend/mem and the simulated
// device, with a manual clock.
type rig struct {
	t         *testing.T
	clock     *sim.ManualClock
	dev       *sim.Device
	stream    gpu.Stream
	mem       *readiness.Memory
	be        *mem.Backend
	eng       *readiness.Engine
	contained []readiness.Containment
	trace     []readiness.Transition
	autoCopy  bool // complete device copies as Progress runs
}

type rigOption func(*readiness.Config)

func newRig(t *testing.T, groups, slots int, beOpts []mem.Option, opts ...rigOption) *rig {
	t.Helper()
	r := &rig{t: t, clock: sim.NewManualClock(time.Unix(1_800_000_000, 0)), autoCopy: true}
	var err error
	r.dev, err = sim.New(0, 1<<20)
	require.NoError(t, err)
	r.stream, err = r.dev.NewStream()
	require.NoError(t, err)
	gs := make([]readiness.Group, groups)
	for g := range gs {
		gs[g] = readiness.Group{Slots: slots, SlotBytes: slotBytes}
	}
	r.mem, err = readiness.NewMemory(gs...)
	require.NoError(t, err)
	r.be, err = mem.New(r.mem, beOpts...)
	require.NoError(t, err)
	cfg := readiness.Config{
		Memory:         r.mem,
		TokensPerBlock: tpb,
		Fetcher:        r.be,
		Publisher:      r.be,
		Stream:         r.stream,
		Health:         r.dev,
		Clock:          r.clock,
		RequestTimeout: time.Minute,
		DrainGrace:     time.Hour,
		OnContainment:  func(c readiness.Containment) { r.contained = append(r.contained, c) },
		OnTransition:   func(tr readiness.Transition) { r.trace = append(r.trace, tr) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	r.eng, err = readiness.New(cfg)
	require.NoError(t, err)
	t.Cleanup(r.shutdown)
	return r
}

// shutdown closes the engine and the backend and waits until both have
// stopped their goroutines.
func (r *rig) shutdown() {
	rep := r.eng.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !rep.Drained && time.Now().Before(deadline) {
		r.clock.Advance(time.Hour) // let deadlines and drains expire
		r.dev.CompleteAll()
		time.Sleep(time.Millisecond)
		rep = r.eng.Close()
	}
	require.NoError(r.t, r.be.Close())
	for !rep.Drained && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(time.Millisecond)
		rep = r.eng.Close()
	}
	if !rep.Drained {
		r.t.Errorf("engine did not drain: %+v", rep)
	}
}

// progress runs rounds until cond holds, completing device copies when
// autoCopy is set. Background goroutines answer in real time, so it polls.
func (r *rig) progress(cond func() bool, what string) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if r.autoCopy {
			r.dev.CompleteAll()
		}
		r.eng.Progress()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func (r *rig) state(h readiness.Handle) fsm.State {
	r.t.Helper()
	info, err := r.eng.Lease(h)
	require.NoError(r.t, err)
	return info.State
}

func (r *rig) until(h readiness.Handle, s fsm.State) {
	r.t.Helper()
	r.progress(func() bool {
		info, err := r.eng.Lease(h)
		return err == nil && info.State == s
	}, "state "+s.String())
}

// name returns a distinct content name for block b of group g.
func name(g, b int) contract.Name {
	var n contract.Name
	n[0], n[1], n[2] = 0xAB, byte(g), byte(b)
	return n
}

// content is the row bytes the store holds for name n.
func content(n contract.Name) []byte {
	return bytes.Repeat([]byte{n[1]*16 + n[2] + 1}, slotBytes)
}

// fetchRequest asks for blocks of every group, each row with its own device
// buffer.
func (r *rig) fetchRequest(groups int, blocks ...int) readiness.Request {
	r.t.Helper()
	req := readiness.Request{Kind: readiness.Fetch}
	for g := range groups {
		for _, b := range blocks {
			p, err := r.dev.Alloc(slotBytes)
			require.NoError(r.t, err)
			req.Rows = append(req.Rows, readiness.Row{Name: name(g, b), Group: g, Block: b, Device: p})
		}
	}
	return req
}

// store puts rows into the backend, as an earlier publication would have.
func (r *rig) store(g int, blocks ...int) {
	for _, b := range blocks {
		n := name(g, b)
		r.be.Put(staging.ExtentName, n, content(n))
	}
}

func (r *rig) deviceBytes(p gpu.DevicePtr) []byte {
	buf := make([]byte, slotBytes)
	require.NoError(r.t, r.dev.Read(buf, p))
	return buf
}
