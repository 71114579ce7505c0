package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/mem/memtest"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/metrics"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// modes is what the adversarial backend does with submission k (cycled):
// every outcome kind, Quiesce answers that prove nothing for a while or for
// ever, a contract violation, and a delivery held past its deadline.
var modes = []mem.Mode{
	mem.Normal, mem.Miss, mem.Partial, mem.Fail, mem.CancelByPeer, mem.Reject,
	mem.QuiesceNotYet, mem.QuiesceFalse, mem.Normal, mem.Normal, // the last one is held: a timeout
}

const held = 9 // the index in modes of the delivery held past its deadline

// unasked is the index in modes of the delivery that breaks the contract: it
// serves a name it was not asked for (memtest.ServeUnasked).
const unasked = 8

// rig is one engine over an adversarial in-process backend and a simulated
// device, on a manual clock, with a collector as its Observer.
type rig struct {
	eng   *readiness.Engine
	dev   *sim.Device
	store *memtest.Backend
	clk   *sim.ManualClock
	c     *metrics.Collector
	gate  chan struct{}
	reqs  []readiness.Request
	// beforeRelease, if set, is called once every delivery but the held
	// one has been taken in, with the leases lent.
	beforeRelease func(hs []readiness.Handle)
}

func newRig(t *testing.T, device string) *rig {
	t.Helper()
	r := &rig{clk: sim.NewManualClock(time.Unix(1_000, 0)), gate: make(chan struct{}),
		c: metrics.New(prometheus.Labels{"device": device})}
	var err error
	r.dev, err = sim.New(0, 1<<20)
	require.NoError(t, err)
	stream, err := r.dev.NewStream()
	require.NoError(t, err)
	staged, err := staging.NewMemory(staging.GoHeap,
		staging.Group{Slots: 16, SlotBytes: 16}, staging.Group{Slots: 16, SlotBytes: 16})
	require.NoError(t, err)
	var seq atomic.Int64
	r.store, err = memtest.WithPolicy(staged,
		func(c memtest.Call) memtest.Fault {
			if (c.Seq-1)%uint64(len(modes)) == unasked {
				return memtest.ServeUnasked
			}
			return memtest.None
		},
		mem.WithPolicy(func(mem.Call) mem.Mode { return modes[int(seq.Add(1)-1)%len(modes)] }),
		mem.WithGate(func(call mem.Call) <-chan struct{} {
			if (call.Seq-1)%uint64(len(modes)) == held {
				return r.gate
			}
			return nil
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.store.Close() })
	r.eng, err = readiness.New(readiness.Config{
		Memory:         staged,
		TokensPerBlock: 16,
		RequestTimeout: time.Second,
		DrainGrace:     time.Second,
		QuiesceTimeout: time.Second,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Fetcher:        r.store,
		Stream:         stream,
		Clock:          r.clk,
		Observer:       r.c,
	})
	require.NoError(t, err)
	for k := range len(modes) {
		req := readiness.Request{Kind: readiness.Fetch}
		for g := range 2 {
			var name contract.Name
			name[0], name[1] = byte(k), byte(g)
			r.store.Put(staging.ExtentName, name, []byte("0123456789abcdef"))
			dev, err := r.dev.Alloc(16)
			require.NoError(t, err)
			req.Rows = append(req.Rows, staging.Row{Name: name, Group: g, Block: 0, Device: dev})
		}
		r.reqs = append(r.reqs, req)
	}
	return r
}

// sync runs the engine until it is idle, the device completing its copies.
func (r *rig) sync(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		r.dev.CompleteAll()
		n, err := r.eng.Sync(ctx)
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// run lends one lease per mode, lets every one reach its outcome, releases
// them, and moves the clock past every deadline and containment deadline.
func (r *rig) run(t *testing.T) {
	t.Helper()
	var hs []readiness.Handle
	for _, req := range r.reqs {
		h, err := r.eng.Lend(req)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	r.sync(t)
	// The store delivers on its own goroutines, in real time: wait (bounded)
	// until every delivery but the held one has been taken in, so that the
	// virtual clock moving past the deadline times out only the held one,
	// however loaded the machine is.
	for start := time.Now(); ; r.sync(t) {
		waiting := 0
		for k, h := range hs {
			if info, err := r.eng.Lease(h); k != held && (err != nil || info.Outcome == readiness.NoOutcome) {
				waiting++
			}
		}
		if waiting == 0 {
			break
		}
		require.Less(t, time.Since(start), 30*time.Second, "%d deliveries were not taken in within 30s", waiting)
		time.Sleep(time.Millisecond)
	}
	for range 8 { // QuiesceNotYet is proven on a retry, after its back-off
		r.clk.Advance(10 * time.Millisecond)
		r.sync(t)
	}
	if r.beforeRelease != nil {
		r.beforeRelease(hs)
		r.sync(t)
	}
	for _, h := range hs {
		require.NoError(t, r.eng.Release(h))
	}
	for range 4 { // the held delivery times out; what is never proven is contained
		r.clk.Advance(time.Second)
		r.sync(t)
	}
	close(r.gate)
	r.sync(t)
}

// scrape gathers reg while the test goroutine, the engine's owner, goes on
// running rounds: the scrape asks for a snapshot, and the next round shows it.
func (r *rig) scrape(t *testing.T, reg prometheus.Gatherer, also ...*rig) []*dto.MetricFamily {
	t.Helper()
	type result struct {
		mfs []*dto.MetricFamily
		err error
	}
	done := make(chan result, 1)
	go func() {
		mfs, err := reg.Gather()
		done <- result{mfs, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case res := <-done:
			require.NoError(t, res.err)
			return res.mfs
		default:
		}
		for _, o := range append([]*rig{r}, also...) {
			o.eng.Progress()
		}
		runtime.Gosched()
	}
	t.Fatal("the scrape did not end within 30s")
	return nil
}

// checkAgainstStats compares every family with the engine's own Stats, read
// on the owner goroutine after the scrape (the engine is idle: a round changes
// no counter).
func checkAgainstStats(t *testing.T, mfs []*dto.MetricFamily, device string, st readiness.Stats) {
	t.Helper()
	dl := func(kv ...string) map[string]string {
		m := map[string]string{"device": device}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		got, ok := value(mfs, name, labels)
		if assert.True(t, ok, "%s%v: no such series", name, labels) {
			assert.Equal(t, want, got, "%s%v", name, labels)
		}
	}
	for s := range readiness.NumStates {
		check("kvready_leases", dl("state", readiness.State(s).String()), float64(st.Leases[s]))
	}
	kinds := map[string]readiness.OutcomeKind{"served": readiness.Served, "partial": readiness.Partial,
		"missed": readiness.Missed, "failed": readiness.Failed, "cancelled": readiness.Cancelled,
		"rejected": readiness.Rejected, "timeout": readiness.TimedOut, "violation": readiness.Violation}
	for kind, r := range kinds {
		check("kvready_outcomes_total", dl("outcome", kind), float64(st.Outcomes[r]))
	}
	var free, heldSlots, quarantined float64
	for g := range 2 {
		for state, sum := range map[string]*float64{"free": &free, "held": &heldSlots, "quarantined": &quarantined} {
			v, ok := value(mfs, "kvready_slots", dl("group", fmt.Sprint(g), "state", state))
			assert.True(t, ok, "slots of group %d %s", g, state)
			*sum += v
		}
	}
	assert.Equal(t, float64(st.SlotsFree), free, "free slots, over the groups")
	assert.Equal(t, float64(st.SlotsHeld), heldSlots, "held slots, over the groups")
	assert.Equal(t, float64(st.SlotsQuarantined), quarantined, "quarantined slots, over the groups")
	for name, want := range map[string]uint64{
		"kvready_leases_lent_total": st.Lent, "kvready_leases_released_total": st.Released,
		"kvready_leases_quarantined_total": st.QuarantinedLeases, "kvready_quiesce_calls_total": st.QuiesceCalls,
		"kvready_quiesce_retries_total": st.QuiesceRetries, "kvready_quiesce_unproven_total": st.Unproven,
		"kvready_containments_total": st.Containments, "kvready_ungrantable_leases_total": st.Ungrantable,
		"kvready_stale_evidence_total": st.StaleEvidence, "kvready_refused_evidence_total": st.Refused,
		"kvready_contract_violations_total": st.Violations, "kvready_invariant_breaches_total": st.InvariantBreaches,
		"kvready_slots_inherited": uint64(st.SlotsInherited),
	} {
		check(name, dl(), float64(want))
	}
	for name, h := range map[string]readiness.Histogram{
		"kvready_readiness_latency_seconds": st.ReadyLatency, "kvready_fence_latency_seconds": st.FenceLatency,
	} {
		for _, m := range series(mfs, name) {
			if labelOf(m, "device") == device {
				assert.Equal(t, h.Total, m.GetHistogram().GetSampleCount(), name)
				assert.Equal(t, float64(h.Sum)/1e9, m.GetHistogram().GetSampleSum(), name)
			}
		}
	}
}

// labels formats a series' labels as name=value pairs.
func labels(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.GetLabel() {
		parts = append(parts, lp.GetName()+"="+lp.GetValue())
	}
	return strings.Join(parts, ",")
}

func labelOf(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// TestCollectorMatchesStats runs the engine users embed over a backend that
// does everything the contract allows (and one thing it does not), then checks
// a scrape against the engine's Stats — mid-life, and once it has drained.
func TestCollectorMatchesStats(t *testing.T) {
	r := newRig(t, "0")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(r.c))
	var mid []*dto.MetricFamily
	r.beforeRelease = func([]readiness.Handle) { mid = r.scrape(t, reg) }
	r.run(t)

	// Mid-run, 80 ms of the engine's (manual) clock after the leases were
	// submitted: the held delivery and the lease whose Quiesce never proves
	// anything are in flight, two rows of 16 bytes each.
	for name, want := range map[string]float64{"kvready_in_flight_leases": 2, "kvready_in_flight_bytes": 2 * 2 * 16,
		"kvready_oldest_unfenced_age_seconds": 0.08} {
		v, ok := value(mid, name, map[string]string{"device": "0"})
		assert.True(t, ok, name)
		assert.InDelta(t, want, v, 1e-9, name)
	}

	st := r.eng.Stats()
	for _, k := range []readiness.OutcomeKind{readiness.Served, readiness.Partial, readiness.Missed, readiness.Failed,
		readiness.Cancelled, readiness.Rejected, readiness.TimedOut, readiness.Violation} {
		require.NotZero(t, st.Outcomes[k], "the scenario latches a %v outcome", k)
	}
	require.NotZero(t, st.Containments, "the scenario contains a lease")
	require.NotZero(t, st.QuiesceRetries, "the scenario retries Quiesce")
	require.NotZero(t, st.SlotsQuarantined, "the scenario quarantines slots")

	mfs := r.scrape(t, reg)
	checkAgainstStats(t, mfs, "0", r.eng.Stats())
	// Bytes: every slot is 16 bytes; nothing is in flight once every lease
	// was fenced or contained.
	qb, _ := value(mfs, "kvready_quarantined_bytes", map[string]string{"device": "0"})
	assert.Equal(t, float64(16*st.SlotsQuarantined), qb)
	for _, name := range []string{"kvready_in_flight_leases", "kvready_in_flight_bytes", "kvready_oldest_unfenced_age_seconds"} {
		v, ok := value(mfs, name, map[string]string{"device": "0"})
		assert.True(t, ok, name)
		assert.Zero(t, v, name)
	}
	// Transitions: one series per cause, adding up to every move the engine made.
	var moves float64
	for _, m := range series(mfs, "kvready_transitions_total") {
		moves += m.GetCounter().GetValue()
	}
	assert.Len(t, series(mfs, "kvready_transitions_total"), readiness.NumCauses)
	got, _ := value(mfs, "kvready_transitions_total", map[string]string{"event": "containment"})
	assert.Equal(t, float64(st.Containments), got, "every containment is a move")
	assert.Positive(t, moves)

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems, "the exposition passes the Prometheus linter")

	// Closed and drained: the last snapshot is final, served without a round.
	for !r.eng.Close().Drained {
		r.sync(t)
	}
	final, err := reg.Gather()
	require.NoError(t, err)
	checkAgainstStats(t, final, "0", r.eng.Stats())
	snap, ok := r.c.Latest()
	require.True(t, ok)
	assert.True(t, snap.Drained)
}

// TestCollectorsOfSeveralEngines registers one collector per engine, told
// apart by the device label, in one registry.
func TestCollectorsOfSeveralEngines(t *testing.T) {
	a, b := newRig(t, "0"), newRig(t, "1")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(a.c))
	require.NoError(t, reg.Register(b.c))
	a.run(t) // b lends nothing
	mfs := a.scrape(t, reg, b)
	checkAgainstStats(t, mfs, "0", a.eng.Stats())
	checkAgainstStats(t, mfs, "1", b.eng.Stats())
	lentA, _ := value(mfs, "kvready_leases_lent_total", map[string]string{"device": "0"})
	lentB, _ := value(mfs, "kvready_leases_lent_total", map[string]string{"device": "1"})
	assert.Equal(t, float64(len(modes)), lentA)
	assert.Zero(t, lentB)
	for _, r := range []*rig{a, b} {
		for !r.eng.Close().Drained {
			r.sync(t)
		}
	}
}

// TestScrapeOfAStoppedOwner: an owner loop that runs no round leaves the
// scrape waiting at most MaxWait, then it is served the latest snapshot.
func TestScrapeOfAStoppedOwner(t *testing.T) {
	r := newRig(t, "0")
	r.c.MaxWait = time.Millisecond
	r.run(t)
	before, ok := r.c.Latest()
	require.True(t, ok)
	n, err := testutil.GatherAndCount(func() prometheus.Gatherer {
		reg := prometheus.NewRegistry()
		reg.MustRegister(r.c)
		return reg
	}(), "kvready_rounds_total")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	after, _ := r.c.Latest()
	assert.Equal(t, before.Rounds, after.Rounds, "no round ran: the latest snapshot was served")
	assert.True(t, r.c.Due(), "the engine is asked for a snapshot at its next round")
	r.eng.Progress()
	assert.False(t, r.c.Due(), "the round showed it")
	fresh, _ := r.c.Latest()
	assert.Greater(t, fresh.Rounds, before.Rounds)
	for !r.eng.Close().Drained {
		r.sync(t)
	}
}

// kvready_cancel_requests_total beside transitions_total{event="cancel_requested"}:
// the first counts the requests sent to backends, one for each lease that
// fails while its backend holds an attempt, whatever failed it (here a
// failure answered, a peer's cancel, a contract violation and a timeout, with
// no owner's cancel at all); the second counts the owner's cancels accepted.
func TestCancelRequestsBesideCancelTransitions(t *testing.T) {
	for _, ownerCancels := range []bool{false, true} {
		r := newRig(t, "0")
		if ownerCancels { // the held delivery is cancelled by its owner before its deadline
			r.beforeRelease = func(hs []readiness.Handle) { _, err := r.eng.Cancel(hs[held]); require.NoError(t, err) }
		}
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(r.c))
		r.run(t)
		mfs := r.scrape(t, reg)
		st := r.eng.Stats()
		sent, _ := value(mfs, "kvready_cancel_requests_total", nil)
		owner, _ := value(mfs, "kvready_transitions_total", map[string]string{"event": "cancel_requested"})
		assert.Equal(t, float64(st.CancelRequests), sent)
		failedWithAttempt := st.Outcomes[readiness.Failed] + st.Outcomes[readiness.Cancelled] +
			st.Outcomes[readiness.TimedOut] + st.Outcomes[readiness.Violation]
		require.NotZero(t, failedWithAttempt)
		assert.Equal(t, float64(failedWithAttempt), sent, "one request per lease failed with an attempt")
		if ownerCancels {
			assert.Equal(t, 1.0, owner, "the owner's cancel is a move, and its request one of those sent")
			assert.Zero(t, st.Outcomes[readiness.TimedOut], "the cancel won over the deadline")
		} else {
			assert.Zero(t, owner, "the run cancels nothing itself: every request sent came from a failure or a timeout")
		}
		for !r.eng.Close().Drained {
			r.sync(t)
		}
	}
}
