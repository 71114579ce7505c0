package simulate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// tick is the virtual time between two driver rounds.
const tick = 50 * time.Microsecond

// sampleEvery is how often, in virtual time, the timeline is sampled.
const sampleEvery = time.Millisecond

// StateCount is how many leases are in one state.
type StateCount struct {
	State  string `json:"state"`
	Leases int    `json:"leases"`
}

// Sample is the manager's leases by state at one virtual instant.
type Sample struct {
	At     time.Duration
	States []StateCount
}

// Progress is called as requests finish.
type Progress func(done, total int)

// driver is the simulated KV cache manager's request side: it issues requests,
// reacts to the outcomes a manager reports, and keeps the results.
type driver struct {
	cfg Config
	clk *clock
	dev *sim.Device
	mem *readiness.Memory
	t   *transport
	chk *checker
	mgr manager
	w   *workload

	reqs     []*request
	leases   []*lease
	finished int
	refused  int
	lost     bool
	readyLat []time.Duration
	timeline []Sample
}

// Run simulates cfg to the end and returns its summary. The context stops a run
// early (the summary then covers what ran). progress may be nil.
func Run(ctx context.Context, cfg Config, progress Progress) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simulate: invalid configuration: %w", err)
	}
	if progress == nil {
		progress = func(int, int) {}
	}
	d, err := newDriver(cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	runErr := d.loop(ctx, progress)
	d.t.landAll()
	d.mgr.finish()
	d.t.landAll()
	if err := d.t.close(); err != nil && runErr == nil {
		runErr = err
	}
	wall := time.Since(start)
	for _, r := range d.reqs {
		d.chk.verifyStore(func(n contract.Name) ([]byte, bool) { return d.t.be.Get(staging.ExtentName, n) }, r)
	}
	return d.summary(wall), runErr
}

func newDriver(cfg Config) (*driver, error) {
	d := &driver{cfg: cfg, clk: newClock()}
	w, err := newWorkload(cfg)
	if err != nil {
		return nil, err
	}
	d.w = w
	rowBytes := cfg.Blocks * cfg.Groups * SlotBytes
	devBytes := cfg.Requests*((rowBytes+255)/256*256) + 4096
	if d.dev, err = sim.New(0, devBytes, sim.WithLatency(d.clk, cfg.GPULatency)); err != nil {
		return nil, err
	}
	inner, err := d.dev.NewStream()
	if err != nil {
		return nil, err
	}
	groups := make([]readiness.Group, cfg.Groups)
	for g := range groups {
		groups[g] = readiness.Group{Slots: cfg.Slots, SlotBytes: SlotBytes}
	}
	if d.mem, err = readiness.NewMemory(groups...); err != nil {
		return nil, err
	}
	d.chk = newChecker(d.mem)
	if d.t, err = newTransport(d.mem, d.clk, d.chk); err != nil {
		return nil, err
	}
	s := &stream{inner: inner, chk: d.chk}
	if cfg.Naive {
		d.mgr, err = newNaiveManager(d, d.mem, s)
	} else {
		d.mgr, err = newEngineManager(d, d.mem, s, d.dev)
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (d *driver) loop(ctx context.Context, progress Progress) error {
	cfg := d.cfg
	next := 0
	lastArrival := time.Duration(cfg.Requests-1) * cfg.Arrival
	limit := lastArrival + 20*(cfg.Deadline+cfg.LatencyMedian) + time.Second
	nextSample := time.Duration(0)
	reported := -1
	for round := 0; ; round++ {
		if round%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		now := d.clk.since()
		if cfg.DeviceLossAt > 0 && !d.lost && now >= cfg.DeviceLossAt {
			d.lost = true
			d.dev.Lose("Xid 79: simulated GPU has fallen off the bus")
		}
		for next < cfg.Requests && time.Duration(next)*cfg.Arrival <= now {
			if err := d.arrive(next); err != nil {
				return err
			}
			next++
		}
		d.t.tick(now)
		d.mgr.step()
		if now >= nextSample {
			d.timeline = append(d.timeline, Sample{At: now, States: d.mgr.states()})
			nextSample += sampleEvery
		}
		if d.finished != reported {
			reported = d.finished
			progress(d.finished, cfg.Requests)
		}
		if next == cfg.Requests && d.finished == cfg.Requests {
			return nil
		}
		if now > limit {
			return fmt.Errorf("simulate: %d of %d requests still unfinished at virtual time %v", cfg.Requests-d.finished, cfg.Requests, now)
		}
		d.clk.Advance(tick)
	}
}

// arrive starts request i: the checker writes canaries into its device rows,
// then its fetch is lent.
func (d *driver) arrive(i int) error {
	r, err := d.w.request(i)
	if err != nil {
		return err
	}
	d.reqs = append(d.reqs, r)
	rows := d.cfg.Blocks * d.cfg.Groups
	if d.lost {
		d.refuse(r)
		return nil
	}
	if r.dev, err = d.dev.Alloc(rows * SlotBytes); err != nil {
		if errors.Is(err, gpu.ErrDeviceLost) {
			d.refuse(r)
			return nil
		}
		return fmt.Errorf("simulate: device rows of request %d: %w", i, err)
	}
	d.chk.request(r, rows)
	buf := make([]byte, SlotBytes)
	for row := range rows {
		canary(i, row, buf)
		if err := d.dev.Write(r.dev+gpu.DevicePtr(row*SlotBytes), buf); err != nil {
			d.refuse(r)
			return nil
		}
	}
	r.fetch = d.newLease(r, readiness.Fetch, 0, d.cfg.Blocks)
	d.lend(r.fetch)
	return nil
}

func (d *driver) refuse(r *request) {
	d.refused++
	r.ended = true
	d.finished++
}

func (d *driver) newLease(r *request, k readiness.Kind, first, blocks int) *lease {
	mode, lat := d.w.behaviour()
	l := &lease{id: len(d.leases), req: r, kind: k, first: first, blocks: blocks, mode: mode, latency: lat, lentAt: d.clk.since()}
	d.leases = append(d.leases, l)
	return l
}

func (d *driver) lend(l *lease) {
	if err := d.mgr.lend(l); err != nil {
		l.final, l.reported, l.reason = refused, true, err.Error()
		d.maybeEnd(l.req)
	}
}

// outcome is called once per lease, when the manager reports its outcome (for a
// fetch, once readiness is answerable). The driver releases the lease at once —
// the manager must keep the slots until they are fenced — and, for a fetch
// that did not cover the prompt, computes the rest and publishes it.
func (d *driver) outcome(l *lease) {
	if l.reported {
		return
	}
	l.reported = true
	d.chk.reported(l)
	if l.kind == readiness.Fetch && l.ready {
		d.readyLat = append(d.readyLat, d.clk.since()-l.lentAt)
		d.chk.verifyFetch(d.dev, l)
	}
	d.mgr.release(l)
	r := l.req
	if l.kind == readiness.Fetch && !d.lost {
		have := 0
		if l.ready {
			have = max(0, l.interval.UsableUntil/TokensPerBlock)
		}
		if have < d.cfg.Blocks && d.compute(r, have) {
			r.pub = d.newLease(r, readiness.Publish, have, d.cfg.Blocks-have)
			d.lend(r.pub)
		}
	}
	d.maybeEnd(r)
}

// compute stands for the model computing the blocks the fetch did not bring:
// it writes their content into the request's device rows.
func (d *driver) compute(r *request, from int) bool {
	buf := make([]byte, SlotBytes)
	for g := range r.names {
		for b := from; b < d.cfg.Blocks; b++ {
			content(r.names[g][b], buf)
			if d.dev.Write(r.row(d.cfg.Blocks, g, b), buf) != nil {
				return false
			}
		}
	}
	return true
}

func (d *driver) ended(l *lease) {
	l.endedAt = d.clk.since()
	d.maybeEnd(l.req)
}

func (d *driver) maybeEnd(r *request) {
	if r.ended {
		return
	}
	done := func(l *lease) bool { return l == nil || (l.reported && l.final != held) }
	if r.fetch != nil && done(r.fetch) && done(r.pub) {
		r.ended = true
		d.finished++
	}
}

// quantile returns the q-quantile of sorted durations (0 when empty).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func (d *driver) summary(wall time.Duration) *Summary {
	s := &Summary{Manager: "kvready", Requests: d.cfg.Requests, RefusedRequests: d.refused, Wall: wall, Virtual: d.clk.since()}
	if d.cfg.Naive {
		s.Manager = "naive"
	}
	var askTokens, gotTokens int
	var fence []time.Duration
	for _, l := range d.leases {
		if l.final == refused {
			s.RefusedLeases++
			continue
		}
		s.Leases++
		switch l.final {
		case released:
			s.Released++
		case quarantined:
			s.Quarantined++
		default:
			s.Unfinished++
		}
		switch l.outcome {
		case readiness.Served:
			s.Served++
		case readiness.Partial:
			s.Partial++
		case readiness.Missed:
			s.Missed++
		case readiness.Failed:
			s.Failed++
			switch {
			case l.rejected:
				s.Rejected++
			case containsTimeout(l.reason):
				s.Timeouts++
			case l.backend != nil && isCancel(l.backend):
				s.Cancelled++
			}
		}
		if l.kind == readiness.Fetch {
			askTokens += l.blocks * TokensPerBlock
			if l.ready {
				gotTokens += max(0, l.interval.UsableUntil-l.interval.RestartFloor)
			}
		}
		if l.proven && l.delivery != nil {
			fence = append(fence, l.provenAt-l.submittedAt)
		}
	}
	if askTokens > 0 {
		s.HitTokenRatio = float64(gotTokens) / float64(askTokens)
	}
	slices.Sort(d.readyLat)
	slices.Sort(fence)
	s.ReadinessP50, s.ReadinessP99 = quantile(d.readyLat, 0.50), quantile(d.readyLat, 0.99)
	if wall > 0 {
		s.Throughput = float64(s.Released+s.Quarantined) / wall.Seconds()
	}
	if em, ok := d.mgr.(*engineManager); ok {
		s.SlotsQuarantined = em.slotsQuarantined()
	}
	c := d.chk
	s.RecycledBeforeFence = c.recycledBeforeFence
	s.RegrantsUnproven = c.regrantsUnproven
	s.LateWrites = c.lateWrites
	s.CorruptRows = c.corruptRows
	s.MissesReportedAsFailures = c.missesAsFailures
	s.FailuresReportedAsMisses = c.failuresAsMisses
	s.SlotGrants = c.grants
	s.RowsVerified = c.rowsVerified
	s.OrphanSubmissions = d.t.orphans + c.strayCopy
	s.Timeline = d.timeline
	s.ReadyLatencies = d.readyLat
	s.FenceLatencies = fence
	return s
}
