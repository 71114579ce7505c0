package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// tick is the virtual time between two driver rounds.
const tick = 50 * time.Microsecond

// maxInFlight bounds the requests whose device rows exist at once; a request
// arrives late rather than beyond it.
const maxInFlight = 4096

// maxSamples bounds the timeline, however long the run: the sampling interval
// grows with the run's expected virtual length.
const maxSamples = 2000

// StateCount is how many leases are in one state.
type StateCount struct {
	State  string `json:"state"`
	Leases int    `json:"leases"`
}

// Sample is the manager's leases by state at one virtual instant, with the
// checker's safety counters so far.
type Sample struct {
	At     time.Duration
	States []StateCount
	// Recycled and Corrupt are the checker's slot grants recycled before
	// their fence and corrupt rows, counted up to At.
	Recycled, Corrupt int
	// Delivered and Failed count the outcomes the manager reported up to At:
	// delivered (served, partial or missed: the store answered) and failed
	// (timeouts, cancellations and rejections included).
	Delivered, Failed int
	// TierHits counts, over a stack of tiers, the rows each tier served up
	// to At, in tier order (Summary.Tiers names them); nil without a stack.
	TierHits []uint64
}

// Progress is called as requests finish.
type Progress func(done, total int)

// driver is the simulated KV cache manager's request side: it issues requests,
// reacts to the outcomes a manager reports, and keeps the results. It keeps
// only what the requests in flight need: an ended request's device rows are
// freed and its leases folded into the summary, so memory is bounded by the
// work in flight, the staging pool and the store's capacity.
type driver struct {
	cfg Config
	clk clock
	dev *device
	mem *staging.Memory
	t   *transport
	chk *checker
	mgr manager
	w   *workload
	lw  *layerwise // the forward passes of a layerwise run; nil otherwise
	// mu guards the checker, the transport's deliveries and the facts the
	// backend calls record on leases: the engine's goroutines reach them
	// through Poll and Quiesce.
	mu sync.Mutex

	active    []*request
	next      int // the next request to arrive
	finished  int
	refused   int
	refusals  map[string]int // refused leases and requests, by reason
	lost      bool
	sum       Summary
	askTokens int
	gotTokens int
	delivered int // outcomes reported so far, for the timeline
	failures  int
	timeline  []Sample
	every     time.Duration // timeline sampling interval
	// Latencies are kept as bounded samples: exact for short runs, a uniform
	// sample of every lease for long ones.
	readySample, fenceSample reservoir // readySample: fetches the store answered (served, partial, missed)
	fastSample               reservoir // from the submission to the outcome, of leases failed fast
	failSample               reservoir // from Lend to the outcome, of fetches that failed otherwise

	// On real time only: storeChecks takes the names of ended requests to
	// the goroutine that reads them back from the store for the checker
	// (a network read, kept off the owner goroutine); checked is closed when
	// it has done them all. wake is poked by the transport when the backend
	// answers, so that an idle driver runs its next round at once; spin
	// counts the rounds it still yields before it waits again.
	storeChecks chan []contract.Name
	checked     chan struct{}
	wake        chan struct{}
	idle        *time.Timer
	spin        int
}

// Run simulates cfg to the end and returns its summary. The context stops a run
// early (the summary then covers what ran). progress may be nil. A run that
// ends with requests unfinished returns an error saying how many and why; the
// summary says the same.
func Run(ctx context.Context, cfg Config, progress Progress) (*Summary, error) {
	return runWith(ctx, cfg, progress, nil)
}

// runWith is Run with the driver's manager wrapped by wrap (nil: as is):
// the tests' way to put a manager that misbehaves before the checker.
func runWith(ctx context.Context, cfg Config, progress Progress, wrap func(manager) manager) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simulate: invalid configuration: %w", err)
	}
	if progress == nil {
		progress = func(int, int) {}
	}
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		d.mgr = wrap(d.mgr)
	}
	start := time.Now()
	runErr := d.loop(ctx, progress)
	d.t.landAll()
	d.mgr.finish()
	d.t.landAll()
	d.endAll()
	if d.storeChecks != nil {
		close(d.storeChecks)
		<-d.checked
		d.idle.Stop()
	}
	if err := d.t.close(); err != nil && runErr == nil {
		runErr = err
	}
	if err := d.dev.close(); err != nil && runErr == nil {
		runErr = err
	}
	s := d.summary(time.Since(start))
	s.Interrupted = ctx.Err() != nil
	switch {
	case s.UnfinishedRequests > 0 && s.Interrupted:
		runErr = fmt.Errorf("simulate: interrupted: %d of %d requests did not run to the end: %w", s.UnfinishedRequests, s.Requests, ctx.Err())
	case s.UnfinishedRequests > 0:
		if runErr != nil {
			s.UnfinishedReason = "the run was stopped (" + runErr.Error() + "); " + s.UnfinishedReason
		}
		runErr = fmt.Errorf("simulate: %d of %d requests unfinished: %s", s.UnfinishedRequests, s.Requests, s.UnfinishedReason)
	}
	return s, runErr
}

func newDriver(ctx context.Context, cfg Config) (*driver, error) {
	d := &driver{cfg: cfg, refusals: map[string]int{}}
	if cfg.RealTime() {
		d.clk = newRealClock() // the store answers in real time, or a stack chains its tiers on goroutines
	} else {
		d.clk = newVirtualClock()
	}
	w, err := newWorkload(cfg)
	if err != nil {
		return nil, err
	}
	d.w = w
	// Device memory for the requests in flight: the staging pool bounds how
	// many can hold rows at once, waiting ones hold theirs too.
	rowBytes := (cfg.Blocks*cfg.Groups*SlotBytes + 255) / 256 * 256
	inFlight := min(cfg.Requests, maxInFlight)
	if d.dev, err = openDevice(cfg, d.clk, inFlight*rowBytes+4096); err != nil {
		return nil, err
	}
	inner := d.dev.stream
	groups := make([]staging.Group, cfg.Groups)
	for g := range groups {
		groups[g] = staging.Group{Slots: cfg.Slots, SlotBytes: SlotBytes}
	}
	// The simulated device copies from the Go heap; CUDA needs pinned
	// memory (staging.NewMemory with the driver's host allocator).
	if d.mem, err = staging.NewMemory(d.dev.hostAlloc, groups...); err != nil {
		return nil, errors.Join(err, d.dev.close())
	}
	d.chk = newChecker(d.mem)
	d.chk.window, d.chk.sinks = cfg.Window, cfg.SinkBlocks
	if cfg.Layerwise {
		if d.lw, err = newLayerwise(cfg, d.dev); err != nil {
			return nil, errors.Join(err, d.dev.close())
		}
		d.chk.layerwise(cfg, d.dev.stream.Stream)
		d.chk.publishes(d.lw.save)
	}
	if d.t, err = newTransport(ctx, d); err != nil {
		return nil, errors.Join(err, d.dev.close())
	}
	s := &stream{inner: inner, chk: d.chk, mu: &d.mu}
	if cfg.Naive {
		d.mgr, err = newNaiveManager(d, s)
	} else {
		d.mgr, err = newEngineManager(d, s, d.dev.health())
	}
	if err != nil {
		_ = d.t.close()
		return nil, err
	}
	d.t.next = d.mgr.nextSubmission
	if d.clk.real() {
		d.wake = make(chan struct{}, 1)
		d.idle = time.NewTimer(time.Hour)
		d.storeChecks, d.checked = make(chan []contract.Name, storeCheckQueue), make(chan struct{})
		go d.checkStore()
	}
	expected := time.Duration(cfg.Requests)*cfg.Arrival + 4*cfg.Deadline
	d.every = max(time.Millisecond, expected/maxSamples)
	d.readySample = newReservoir(cfg.Seed)
	d.fenceSample = newReservoir(cfg.Seed + 1)
	d.fastSample = newReservoir(cfg.Seed + 2)
	d.failSample = newReservoir(cfg.Seed + 3)
	return d, nil
}

func (d *driver) loop(ctx context.Context, progress Progress) error {
	cfg := d.cfg
	lastArrival := time.Duration(cfg.Requests-1) * cfg.Arrival
	// On the virtual clock the run stops at a fixed instant, long after the
	// last request should have ended; on real time, when requests are in
	// flight and none has ended (nor arrived) for a long while.
	limit := lastArrival + 20*(cfg.Deadline+cfg.DrainGrace+cfg.LatencyMedian) + time.Second
	stall := 20*(cfg.Deadline+cfg.DrainGrace) + 5*time.Second
	lastEvent := time.Duration(0)
	nextSample := time.Duration(0)
	reported := -1
	for round := 0; ; round++ {
		if round%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		now := d.clk.since()
		if cfg.DeviceLossAt > 0 && !d.lost && now >= cfg.DeviceLossAt {
			d.lost = true
			d.dev.lose("Xid 79: simulated GPU has fallen off the bus")
		}
		arrived := 0
		for d.next < cfg.Requests && time.Duration(d.next)*cfg.Arrival <= now {
			ok, err := d.arrive(d.next)
			if err != nil {
				return err
			}
			if !ok {
				break // no device memory for it yet: it arrives once a request ends
			}
			d.next++
			arrived++
		}
		d.t.tick(now)
		moves, err := d.mgr.step()
		if err != nil {
			return err
		}
		d.forwards()
		if d.lw != nil {
			d.pumpSaves()
		}
		d.reap()
		if now >= nextSample {
			d.sample(now)
			for nextSample <= now {
				nextSample += d.every
			}
		}
		if d.finished != reported {
			reported = d.finished
			progress(d.finished, cfg.Requests)
			lastEvent = now
		}
		if d.next == cfg.Requests && d.finished == cfg.Requests && d.lw.idle() {
			return nil
		}
		if d.mgr.halted() != nil {
			// The engine releases nothing any more: a manager restarts here.
			// The summary counts what was in flight as unfinished, and why.
			return nil
		}
		if !d.clk.real() {
			if err := d.dev.settle(); err != nil {
				return err
			}
			if now > limit {
				return nil // the summary says what is unfinished, and why
			}
			d.clk.Advance(tick)
			continue
		}
		if arrived > 0 {
			lastEvent = now
		}
		if len(d.active) > 0 && now-lastEvent > stall {
			return nil // the summary says what is unfinished, and why
		}
		if moves == 0 && arrived == 0 {
			d.wait()
		}
	}
}

// storeCheckQueue bounds the ended requests waiting for their store check on
// real time; beyond it a request's store rows are not verified (and the
// summary counts it), so the owner never waits for the checker.
const storeCheckQueue = 1024

// storePause is how long the checker leaves a store alone after a read
// failed: the requests ending meanwhile are counted as not read back.
const storePause = 100 * time.Millisecond

var errStorePaused = errors.New("the store did not answer the previous read")

// checkStore is the checker's goroutine on real time: it reads back what the
// store holds for each ended request's names and checks it.
func (d *driver) checkStore() {
	defer close(d.checked)
	var pausedUntil time.Time
	for names := range d.storeChecks {
		var values [][]byte
		var err error
		if time.Now().Before(pausedUntil) {
			err = errStorePaused
		} else if values, err = d.t.stored(names); err != nil {
			pausedUntil = time.Now().Add(storePause)
		}
		// A stack's in-process tiers above the shared one hold rows written
		// through and promoted from staging: a promotion that read a slot
		// after it was recycled shows here as a corrupt row.
		var upper [][][]byte
		for _, m := range d.t.upperTiers() {
			upper = append(upper, memRows(m, names))
		}
		d.mu.Lock()
		d.chk.verifyStore(names, values, err)
		for _, rows := range upper {
			d.chk.verifyStore(names, rows, nil)
		}
		d.mu.Unlock()
	}
}

// postWakeSpin is how many rounds the driver yields, rather than waits, after
// a wake that found nothing to do yet: the engine's goroutines post what the
// backend answered a moment after the transport sees it.
const postWakeSpin = 8

// wait is an idle driver's pause on real time: until the backend answers
// (the transport pokes wake), the engine has work for a round (Engine.Wake:
// a letter in its mailbox), or a tick passes, whichever comes first. Timers
// are coarse on some machines (a millisecond), so a wake is followed by a
// few rounds that only yield.
func (d *driver) wait() {
	if d.spin > 0 {
		d.spin--
		runtime.Gosched()
		return
	}
	d.idle.Reset(tick)
	select {
	case <-d.wake:
		d.spin = postWakeSpin
	case <-d.mgr.woken(): // the engine has work: an outcome, a proof, a copy landed
	case <-d.idle.C:
	}
}

// poke wakes an idle driver on real time.
func (d *driver) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// sample records the leases by state. A run longer than expected (on real
// time) keeps at most maxSamples: every other sample is dropped and the
// interval doubled.
func (d *driver) sample(now time.Duration) {
	if len(d.timeline) >= maxSamples {
		kept := d.timeline[:0]
		for i := 0; i < len(d.timeline); i += 2 {
			kept = append(kept, d.timeline[i])
		}
		clear(d.timeline[len(kept):])
		d.timeline = kept
		d.every *= 2
	}
	d.mu.Lock()
	recycled, corrupt := d.chk.recycledBeforeFence, d.chk.corruptRows
	d.mu.Unlock()
	d.timeline = append(d.timeline, Sample{At: now, States: d.mgr.states(), Recycled: recycled, Corrupt: corrupt,
		Delivered: d.delivered, Failed: d.failures, TierHits: d.t.tierHits()})
}

// arrive starts request i: the checker writes canaries into its device rows,
// then its fetch is lent. It reports false when the device has no memory for
// the request's rows yet (too many requests in flight): it arrives later.
func (d *driver) arrive(i int) (bool, error) {
	rows := d.cfg.Blocks * d.cfg.Groups
	if d.lost {
		d.refuseRequest()
		return true, nil
	}
	p, err := d.dev.Alloc(rows * SlotBytes)
	switch {
	case errors.Is(err, gpu.ErrDeviceLost):
		d.refuseRequest()
		return true, nil
	case err != nil && len(d.active) > 0:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("simulate: device rows of request %d: %w", i, err)
	}
	r, err := d.w.request(i)
	if err != nil {
		return false, err
	}
	r.dev = p
	d.active = append(d.active, r)
	d.mu.Lock()
	d.chk.request(r, rows)
	d.mu.Unlock()
	buf := make([]byte, SlotBytes)
	for row := range rows {
		canary(i, row, buf)
		_ = d.dev.Write(r.dev+gpu.DevicePtr(row*SlotBytes), buf) // a device lost meanwhile fails the copies instead
	}
	r.fetch = d.newLease(r, readiness.Fetch, 0, d.cfg.Blocks)
	d.lend(r.fetch)
	return true, nil
}

// whyDeviceLost is why a request is refused on a lost device.
const whyDeviceLost = "the device was lost: the request was not started"

// refuseRequest counts a request that could not start: the device is lost.
func (d *driver) refuseRequest() {
	d.refused++
	d.finished++
	countReason(d.refusals, whyDeviceLost)
}

func (d *driver) newLease(r *request, k readiness.Kind, first, blocks int) *lease {
	mode, lat := d.w.behaviour(r.id, k)
	return &lease{req: r, kind: k, first: first, blocks: blocks, needed: neededBlocks(d.cfg.Attention(), first, blocks),
		mode: mode, latency: lat, lentAt: d.clk.since()}
}

func (d *driver) lend(l *lease) {
	if err := d.mgr.lend(l); err != nil {
		l.final, l.reported, l.reason = refused, true, refusal(err)
		l.ungrantable = errors.Is(err, readiness.ErrUngrantable)
	}
}

// whyUngrantable is why a lease is refused when quarantine left no run of
// slots that could hold it: the engine's words for a waiting lease it takes
// out of line, used for one refused at Lend too, so both count as one reason.
const whyUngrantable = "can never be granted: quarantine left no contiguous run of slots long enough"

// refusal says why Lend refused a lease, in words that do not vary with the
// lease, so that a summary counts refusals by reason.
func refusal(err error) string {
	switch {
	case errors.Is(err, readiness.ErrUngrantable):
		return whyUngrantable
	case errors.Is(err, readiness.ErrHalted):
		return "the engine halted"
	case errors.Is(err, readiness.ErrDeviceLost):
		return "the device was lost: no lease is lent"
	}
	return err.Error()
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
	switch l.outcome {
	case readiness.Served, readiness.Partial, readiness.Missed:
		d.delivered++
	default:
		if l.outcome.Failure() {
			d.failures++
		}
	}
	d.mu.Lock()
	d.chk.reported(l)
	if l.kind == readiness.Fetch && l.ready {
		d.chk.verifyFetch(d.dev, l)
	}
	// Readiness latency is the answered fetches' alone: a failure learnt
	// at once (the store held for down) would pull it down as the store
	// fails. Failures have figures of their own.
	switch {
	case l.storeDown:
		d.fastSample.add(d.clk.since() - l.submittedAt)
	case l.kind == readiness.Fetch && l.outcome.Failure():
		d.failSample.add(d.clk.since() - l.lentAt)
	case l.kind == readiness.Fetch && l.ready:
		d.readySample.add(d.clk.since() - l.lentAt)
	}
	d.mu.Unlock()
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
}

// compute stands for the model computing the blocks the fetch did not bring:
// it writes their content into the request's device rows. Layer by layer
// the publish's own pass computes them (save), once its slots are granted.
func (d *driver) compute(r *request, from int) bool {
	if d.lw != nil {
		return !d.lost
	}
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

// ended is called when a lease reaches its final state.
func (d *driver) ended(l *lease) { l.endedAt = d.clk.since() }

// reap ends every request whose leases are all final: its leases are folded
// into the summary, what the store holds for its names is checked, and its
// device rows are freed.
func (d *driver) reap() {
	kept := d.active[:0]
	for _, r := range d.active {
		done := func(l *lease) bool { return l == nil || (l.reported && l.final != held) }
		if !done(r.fetch) || !done(r.pub) {
			kept = append(kept, r)
			continue
		}
		d.end(r)
	}
	clear(d.active[len(kept):])
	d.active = kept
}

// end folds an ended (or, at the end of the run, unfinished) request into the
// summary and lets go of it.
func (d *driver) end(r *request) {
	r.ended = true
	if unfinished := (r.fetch != nil && r.fetch.final == held) || (r.pub != nil && r.pub.final == held); !unfinished {
		d.finished++
	} else {
		d.sum.UnfinishedRequests++
	}
	for _, l := range []*lease{r.fetch, r.pub} {
		if l != nil {
			d.fold(l)
		}
	}
	if d.storeChecks != nil {
		select {
		case d.storeChecks <- storeNames(r): // read on the checker's goroutine
		default:
			// The store is slower than the run (or gone): the owner never
			// waits for the checker. Not verified, and counted so.
			d.mu.Lock()
			d.chk.storeChecksFailed++
			d.mu.Unlock()
		}
	} else {
		names := storeNames(r)
		values, err := d.t.stored(names)
		d.mu.Lock()
		d.chk.verifyStore(names, values, err)
		d.mu.Unlock()
	}
	d.mu.Lock()
	d.chk.forget(r, d.cfg.Blocks*d.cfg.Groups)
	d.mu.Unlock()
	_ = d.dev.Free(r.dev) // a lost device has nothing left to free
}

// endAll ends every request still in flight when the run stops.
func (d *driver) endAll() {
	d.reap()
	for _, r := range d.active {
		d.end(r)
	}
	d.active = nil
}

// fold adds one lease to the summary.
func (d *driver) fold(l *lease) {
	s := &d.sum
	if l.final == refused {
		s.RefusedLeases++
		if l.ungrantable {
			s.RefusedForCapacity++
		}
		countReason(d.refusals, l.reason)
		return
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
	case readiness.NoOutcome:
		if l.withdrawn {
			s.Withdrawn++
		}
	case readiness.Served:
		s.Served++
	case readiness.Partial:
		s.Partial++
	case readiness.Missed:
		s.Missed++
	}
	if l.outcome.Failure() {
		s.Failed++
		switch {
		case l.storeDown:
			s.FailedFast++
		case d.cfg.RealTime() && l.delivery != nil && (l.outcome == readiness.Failed || l.outcome == readiness.TimedOut):
			s.FailedWaiting++
		}
		switch l.outcome {
		case readiness.Rejected:
			s.Rejected++
		case readiness.TimedOut:
			s.Timeouts++
		case readiness.Cancelled:
			s.Cancelled++
		case readiness.Violation:
			s.Violations++
		}
	}
	if l.kind == readiness.Fetch {
		d.askTokens += l.blocks * TokensPerBlock
		if l.ready {
			// Tokens the fetch made usable past what was known (under a
			// window the floor is the end itself: resume there, not lower).
			d.gotTokens += max(0, l.interval.UsableUntil-l.first*TokensPerBlock)
		}
	}
	d.mu.Lock()
	if l.proven && l.delivery != nil {
		d.fenceSample.add(l.provenAt - l.submittedAt)
	}
	d.mu.Unlock()
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
	s := &d.sum
	s.Manager, s.Requests, s.RefusedRequests, s.Wall, s.Virtual = "kvready", d.cfg.Requests, d.refused, wall, d.clk.since()
	s.Store, s.RealTime, s.Device = d.t.store, d.clk.real(), cmp.Or(d.cfg.Device, SimDevice)
	s.BreakerOff = d.t.breakerOff
	if d.cfg.Naive {
		s.Manager = "naive"
	}
	if notStarted := d.cfg.Requests - d.next; notStarted > 0 {
		s.UnfinishedRequests += notStarted
	}
	if s.UnfinishedRequests > 0 {
		s.UnfinishedReason = d.mgr.why()
	}
	if d.askTokens > 0 {
		s.HitTokenRatio = float64(d.gotTokens) / float64(d.askTokens)
	}
	s.ReadyLatencies, s.FenceLatencies = d.readySample.sorted(), d.fenceSample.sorted()
	s.ReadinessP50, s.ReadinessP99 = quantile(s.ReadyLatencies, 0.50), quantile(s.ReadyLatencies, 0.99)
	if wall > 0 {
		s.Throughput = float64(s.Released+s.Quarantined) / wall.Seconds()
	}
	capa := d.mgr.capacity()
	s.SlotsQuarantined, s.Containments, s.ContainmentReasons = capa.slotsQuarantined, capa.containments, capa.reasons
	s.Recovered, s.RecoveredSlots, s.MaxOutstanding = capa.recovered, capa.recoveredSlots, capa.maxOutstanding
	s.StagingSlots = d.cfg.Slots * d.cfg.Groups
	s.Refusals = d.refusals
	if err := d.mgr.halted(); err != nil {
		s.Halted = err.Error()
	}
	if !d.cfg.Naive {
		s.Policy = d.cfg.Containment.String()
	}
	s.LossExpected = d.cfg.LossExpected()
	c := d.chk
	s.RecycledBeforeFence = c.recycledBeforeFence
	s.RegrantsUnproven = c.regrantsUnproven
	s.LateWrites = c.lateWrites
	s.CorruptRows = c.corruptRows
	s.MissesReportedAsFailures = c.missesAsFailures
	s.ReadinessOverclaims = c.overclaims
	s.FailuresReportedAsMisses = c.failuresAsMisses
	s.SlotGrants = c.grants
	s.RowsVerified = c.rowsVerified
	s.StoreChecksFailed = c.storeChecksFailed
	s.OrphanSubmissions = d.t.orphans + c.strayCopy
	s.Timeline = d.timeline
	s.Deadline, s.DrainGrace, s.Seed = d.cfg.Deadline, d.cfg.DrainGrace, d.cfg.Seed
	if d.t.rds != nil {
		h := d.t.rds.Health()
		s.StoreOutages, s.StoreUnavailable = h.Outages, h.Unavailable
	}
	s.Tiers = d.t.tierSummaries()
	fast, failed := d.fastSample.sorted(), d.failSample.sorted()
	s.FailedFastP50, s.FailedFastP99 = quantile(fast, 0.50), quantile(fast, 0.99)
	s.FetchFailures, s.FailureP50, s.FailureP99 = d.failSample.n, quantile(failed, 0.50), quantile(failed, 0.99)
	d.lw.summarize(d.cfg, s)
	s.LayersRead, s.LayersReadEarly, s.CorruptLayers = c.layersRead, c.layersReadEarly, c.corruptLayers
	s.PublishesSubmitted, s.SaveCopiesEarly, s.UnitsIncomplete = c.publishesSeen, c.savesEarly, c.unitsIncomplete
	s.WithdrawnSubmitted, s.WithdrawnFreedEarly, s.LayerSaves = c.withdrawnSent, c.withdrawnEarly, c.layerSaves
	return s
}
