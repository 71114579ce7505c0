package metrics

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvready/kvready/readiness"
)

// Collector exports one engine's counters to Prometheus. It is the engine's
// readiness.Observer: set it as Config.Observer, then register it. A scrape
// asks the engine for a snapshot, which the engine makes at the end of its
// next round, on its owner goroutine; the scrape waits for it at most
// MaxWait and otherwise serves the latest one it has. Scraping never touches
// the engine, so it is safe from any goroutine, and an engine that nobody
// scrapes pays one atomic load a round.
//
// Several engines in one process (one per GPU) each get their own Collector,
// told apart by a constant label such as device="0"; they can share one
// registry.
type Collector struct {
	// MaxWait bounds how long a scrape waits for the engine's next round
	// (New sets DefaultMaxWait; 0 never waits); set it before the first
	// scrape. An owner loop that runs rounds answers within one round; one
	// that has stopped (or a drained engine) is served the latest snapshot,
	// whose kvready_rounds_total and kvready_last_round_timestamp_seconds
	// (wall-clock time, whatever the engine's Clock) then stand still.
	MaxWait time.Duration

	want atomic.Bool // a scrape is waiting for a snapshot

	mu        sync.Mutex
	snap      readiness.Snapshot // the latest snapshot shown, with Groups copied
	shownAt   time.Time          // the system's wall clock when it was shown
	shown     bool
	clock     Clock         // the engine's clock, named on the series measured on it
	published chan struct{} // closed when the next snapshot is shown
	desc      [numFamilies]*prometheus.Desc

	store atomic.Pointer[func() StoreHealth] // WatchStore's source; nil: no store series
	tiers atomic.Pointer[func() []TierStats] // WatchTiers's source; nil: no tier series

	transfers atomic.Pointer[func() TransferStats] // WatchTransfers's source; nil: no transfer series
}

// StoreHealth is what a shared store's backend knows of its availability
// (backend/redis's Health): whether it answers now, the submissions it
// refused at once while it did not, and how long it did not in all.
type StoreHealth struct {
	Reachable    bool
	FastFailures uint64
	Unavailable  time.Duration
}

// WatchStore has the collector export health, asked at each scrape, as
// kvready_store_reachable, kvready_store_fast_failures_total and
// kvready_store_unavailable_seconds_total: the store behind the engine's
// backend (backend/redis: func() StoreHealth { h := b.Health(); ... }).
// Without it those families are not sent. Safe from any goroutine.
func (c *Collector) WatchStore(health func() StoreHealth) {
	if health == nil {
		c.store.Store(nil)
		return
	}
	c.store.Store(&health)
}

// Clock names the clock an engine measures durations on. The latency
// histograms and the oldest unfenced lease's age are measured on it, and
// carry it as their clock label, so that a simulated second is never read
// as a second of wall time.
type Clock uint8

const (
	// WallClock is the system clock, the engine's default.
	WallClock Clock = iota
	// VirtualClock is a simulated clock (readiness.Config.Clock set to one
	// that does not follow the system's, as kvready simulate's over the
	// in-memory backend does): its seconds are simulated time.
	VirtualClock
)

func (k Clock) String() string {
	if k == VirtualClock {
		return "virtual"
	}
	return "wall"
}

// SetClock says which clock the engine measures durations on (WallClock
// unless told otherwise); any goroutine, at any time.
func (c *Collector) SetClock(k Clock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock = k
}

// DefaultMaxWait is how long a scrape waits for the engine's next round
// unless Collector.MaxWait says otherwise.
const DefaultMaxWait = 100 * time.Millisecond

// New returns a collector whose every series carries constLabels (nil for
// none), for example prometheus.Labels{"device": "0"}.
func New(constLabels prometheus.Labels) *Collector {
	c := &Collector{MaxWait: DefaultMaxWait, published: make(chan struct{})}
	for f, spec := range families {
		c.desc[f] = prometheus.NewDesc(Namespace+"_"+spec.name, spec.help, spec.labels, constLabels)
	}
	return c
}

// Due reports whether a scrape is waiting for a snapshot; the engine asks at
// the end of every round.
func (c *Collector) Due() bool { return c.want.Load() }

// Observe keeps a copy of the engine's snapshot, with the wall-clock time at
// which the round that made it ended, and wakes the scrapes waiting for it;
// the engine calls it on its owner goroutine, at the end of a round.
func (c *Collector) Observe(s *readiness.Snapshot) {
	now := time.Now()
	c.want.Store(false)
	c.mu.Lock()
	c.shownAt = now
	groups := c.snap.Groups
	c.snap = *s
	c.snap.Groups = append(groups[:0], s.Groups...)
	c.shown = true
	close(c.published)
	c.published = make(chan struct{})
	c.mu.Unlock()
}

// Latest returns a copy of the latest snapshot the engine showed, and false
// if it has shown none (the collector is not any engine's Observer).
func (c *Collector) Latest() (readiness.Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.snap
	s.Groups = append([]readiness.GroupSlots(nil), c.snap.Groups...)
	return s, c.shown
}

// Fresh asks the engine for a snapshot and waits for it, at most MaxWait
// (or until ctx ends); then it returns the latest one, fresh or not, and
// false if the engine has shown none. A drained engine's last snapshot is
// final, so Fresh returns it without waiting.
func (c *Collector) Fresh(ctx context.Context) (readiness.Snapshot, bool) {
	c.mu.Lock()
	ch, final := c.published, c.snap.Drained
	c.mu.Unlock()
	if !final {
		c.want.Store(true)
		t := time.NewTimer(c.MaxWait)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return c.Latest()
}

// Describe sends the descriptor of every family the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.desc {
		ch <- d
	}
}

// Collect sends a fresh snapshot as metrics (see Fresh). Before the engine
// has shown one it sends nothing.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.collectStore(ch)
	c.collectTiers(ch)
	c.collectTransfers(ch)
	s, ok := c.Fresh(context.Background())
	if !ok {
		return
	}
	c.mu.Lock()
	shownAt, clock := c.shownAt, c.clock.String()
	c.mu.Unlock()
	st := &s.Stats
	send := func(f family, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(c.desc[f], t, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(c.desc[f], err) // the registry reports it; never a panic
		}
		ch <- m
	}
	for state := range readiness.State(readiness.NumStates) {
		send(leases, prometheus.GaugeValue, float64(st.Leases[state]), state.String())
	}
	for i := range readiness.NumCauses {
		send(transitions, prometheus.CounterValue, float64(s.Moves[i]), readiness.CauseName(i))
	}
	for r := readiness.NoOutcome + 1; int(r) < readiness.NumOutcomes; r++ {
		send(outcomes, prometheus.CounterValue, float64(st.Outcomes[r]), r.String())
	}
	for g, gs := range s.Groups {
		group := strconv.Itoa(g)
		send(slots, prometheus.GaugeValue, float64(gs.Free), group, "free")
		send(slots, prometheus.GaugeValue, float64(gs.Held), group, "held")
		send(slots, prometheus.GaugeValue, float64(gs.Quarantined), group, "quarantined")
	}
	for _, cv := range []struct {
		f family
		v uint64
	}{
		{lent, st.Lent}, {released, st.Released}, {quarantinedLeases, st.QuarantinedLeases},
		{quiesceCalls, st.QuiesceCalls}, {quiesceRetries, st.QuiesceRetries}, {unproven, st.Unproven},
		{containments, st.Containments}, {ungrantable, st.Ungrantable}, {stale, st.StaleEvidence},
		{refused, st.Refused}, {violations, st.Violations}, {breaches, st.InvariantBreaches},
		{rounds, s.Rounds}, {recoveries, st.Recovered}, {quiesceTimeouts, st.QuiesceTimeouts},
		{cancelRequests, st.CancelRequests}, {cancelErrors, st.CancelErrors},
		{handoffs, st.Handoffs}, {quiesceProbes, st.QuiesceProbes},
	} {
		send(cv.f, prometheus.CounterValue, float64(cv.v))
	}
	for _, b := range []struct {
		name string
		f    *readiness.BackendFaults
	}{{"fetcher", &st.FetcherFaults}, {"publisher", &st.PublisherFaults}} {
		send(backendFaults, prometheus.CounterValue, float64(b.f.Violations), b.name, "violation")
		send(backendFaults, prometheus.CounterValue, float64(b.f.Panics), b.name, "panic")
		send(backendFaults, prometheus.CounterValue, float64(b.f.RepeatedCompletions), b.name, "repeated_completion")
		send(backendFaults, prometheus.CounterValue, float64(b.f.EarlyCompletions), b.name, "early_completion")
	}
	send(outstanding, prometheus.GaugeValue, float64(st.Outstanding))
	send(outstandingLimit, prometheus.GaugeValue, float64(st.MaxOutstanding))
	send(slotsInherited, prometheus.GaugeValue, float64(st.SlotsInherited))
	halt := 0.0
	if st.Halted {
		halt = 1
	}
	send(halted, prometheus.GaugeValue, halt)
	// Wall-clock time, never the engine's Clock (s.At): under kvready simulate
	// that clock is virtual, and a timestamp is compared with time().
	send(lastRound, prometheus.GaugeValue, float64(shownAt.UnixNano())/1e9)
	ch <- c.histogram(readinessLatency, &st.ReadyLatency, clock)
	ch <- c.histogram(failureLatency, &st.FailureLatency, clock)
	ch <- c.histogram(fenceLatency, &st.FenceLatency, clock)

	in := &s.InFlight
	age := 0.0
	if !in.Oldest.IsZero() && s.At.After(in.Oldest) {
		age = s.At.Sub(in.Oldest).Seconds() // both on the engine's clock
	}
	send(oldestUnfenced, prometheus.GaugeValue, age, clock)
	send(inFlightLeases, prometheus.GaugeValue, float64(in.Leases))
	send(inFlightBytes, prometheus.GaugeValue, float64(in.Bytes))
	var qb float64
	for _, g := range s.Groups {
		qb += float64(g.Quarantined) * float64(g.SlotBytes)
	}
	send(quarantinedBytes, prometheus.GaugeValue, qb)
}

// collectStore sends the watched store's health, if any.
func (c *Collector) collectStore(ch chan<- prometheus.Metric) {
	f := c.store.Load()
	if f == nil {
		return
	}
	h := (*f)()
	up := 0.0
	if h.Reachable {
		up = 1
	}
	for _, m := range []struct {
		f family
		t prometheus.ValueType
		v float64
	}{
		{storeReachable, prometheus.GaugeValue, up},
		{storeFastFailures, prometheus.CounterValue, float64(h.FastFailures)},
		{storeUnavailable, prometheus.CounterValue, h.Unavailable.Seconds()},
	} {
		metric, err := prometheus.NewConstMetric(c.desc[m.f], m.t, m.v)
		if err != nil {
			metric = prometheus.NewInvalidMetric(c.desc[m.f], err)
		}
		ch <- metric
	}
}

// Bucket bounds. The engine counts durations in power-of-two buckets of
// nanoseconds (readiness.Histogram: bucket i holds [2^(i-1), 2^i) ns, so
// everything up to bucket i is at most 2^i - 1 ns). Every second one from
// about a microsecond to about a minute is exported: factor-4 steps, exact
// counts, no interpolation.
const (
	firstBucket = 10 // 2^10 ns ≈ 1 µs
	lastBucket  = 36 // 2^36 ns ≈ 69 s
	bucketStep  = 2
)

// BucketBounds returns the upper bounds, in seconds, of the latency
// histograms' buckets (the +Inf bucket aside).
func BucketBounds() []float64 {
	var out []float64
	for i := firstBucket; i <= lastBucket; i += bucketStep {
		out = append(out, float64(uint64(1)<<i-1)/1e9)
	}
	return out
}

// histogram turns the engine's histogram into a Prometheus one.
func (c *Collector) histogram(f family, h *readiness.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, (lastBucket-firstBucket)/bucketStep+1)
	var cum uint64
	next := firstBucket
	for i, n := range h.Counts {
		cum += n
		if i == next && i <= lastBucket {
			buckets[float64(uint64(1)<<i-1)/1e9] = cum
			next += bucketStep
		}
	}
	m, err := prometheus.NewConstHistogram(c.desc[f], h.Total, float64(h.Sum)/1e9, buckets, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(c.desc[f], err)
	}
	return m
}

// family is one metric family the collector exports.
type family int

const (
	leases family = iota
	transitions
	outcomes
	slots
	lent
	released
	quarantinedLeases
	quiesceCalls
	quiesceRetries
	unproven
	containments
	ungrantable
	stale
	refused
	violations
	breaches
	rounds
	recoveries
	quiesceTimeouts
	cancelRequests
	cancelErrors
	backendFaults
	handoffs
	quiesceProbes
	outstanding
	outstandingLimit
	halted
	lastRound
	readinessLatency
	failureLatency
	fenceLatency
	oldestUnfenced
	inFlightLeases
	inFlightBytes
	quarantinedBytes
	slotsInherited
	storeReachable
	storeFastFailures
	storeUnavailable
	tierFetchUnits
	tierPublishUnits
	tierFaults
	tierEvictions
	tierBytes
	transfersInFlight
	transfersInDoubt
	transferOutcomes
	transferReports
	transferPeersLost
	transferRejected
	transferPuts
	transferRevocations
	transferRevocationsFenced
	transferCancels
	transferCancelTombstones
	transferCancelFinals
	transferSettleLatency
	numFamilies
)

// onEngineClock is what the HELP of a family measured on the engine's clock
// says about its clock label.
const onEngineClock = " In seconds of the engine's clock, named by the clock label: wall is the system clock; virtual a simulated clock (kvready simulate over the in-memory backend), whose seconds are simulated time, not wall time."

// families names, explains and labels every family; package docs
// (docs/operations.md) say what healthy looks like for each.
var families = [numFamilies]struct {
	name, help string
	labels     []string
}{
	leases:            {"leases", "Live leases by lifecycle state.", []string{"state"}},
	transitions:       {"transitions_total", "Lifecycle moves by cause: the event, or the guard of a completion in brackets.", []string{"event"}},
	outcomes:          {"outcomes_total", "Outcomes latched, by kind. A miss is never a failure.", []string{"outcome"}},
	slots:             {"slots", "Staging slots by pool group and state: free, held (lent) or quarantined (out of circulation for ever).", []string{"group", "state"}},
	lent:              {"leases_lent_total", "Leases lent.", nil},
	released:          {"leases_released_total", "Leases released: their slots returned to the allocator.", nil},
	quarantinedLeases: {"leases_quarantined_total", "Leases quarantined: their slots never return.", nil},
	quiesceCalls:      {"quiesce_calls_total", "Quiesce calls made to the backends (one per batch).", nil},
	quiesceRetries:    {"quiesce_retries_total", "Quiesce retries: asking again after an answer that proved nothing.", nil},
	unproven:          {"quiesce_unproven_total", "Quiesce answers that did not prove access over (false, error, timeout).", nil},
	containments:      {"containments_total", "Leases contained at their containment deadline with access or a copy unproven.", nil},
	ungrantable:       {"ungrantable_leases_total", "Waiting leases that quarantine made impossible to grant.", nil},
	stale:             {"stale_evidence_total", "Evidence refused because it named a lease already retired.", nil},
	refused:           {"refused_evidence_total", "Evidence the lifecycle table refused (duplicates, late evidence).", nil},
	violations:        {"contract_violations_total", "Backend contract violations seen: changed answers, unasked names, answers that are no outcome.", nil},
	breaches:          {"invariant_breaches_total", "States the lifecycle's guarantees rule out; 0 unless kvready has a bug.", nil},
	rounds:            {"rounds_total", "Engine rounds run by the owner loop (Progress).", nil},
	recoveries:        {"recoveries_total", "Contained leases released after a later Quiesce proved their access over (the recover policy).", nil},
	quiesceTimeouts:   {"quiesce_timeouts_total", "Quiesce calls that outlived the engine's QuiesceTimeout: they proved nothing.", nil},
	cancelRequests:    {"cancel_requests_total", "Cancellation requests the engine sent to backends: one for each lease that fails while its backend holds an attempt (the owner's cancel, a timeout, a failure or cancel answered, a contract violation, Close), at most one per lease. transitions_total{event=\"cancel_requested\"} counts the owner's cancels accepted instead: a lease with no attempt yet gets no request, and a timeout gets one without an owner's cancel.", nil},
	cancelErrors:      {"cancel_errors_total", "Cancellation requests that failed or panicked in the backend; the lease's evidence is collected as before.", nil},
	backendFaults:     {"backend_faults_total", "What a backend did that the contract forbids, by backend (fetcher, publisher) and fault: violation, panic, repeated_completion, early_completion. Each costs at most that backend's own leases; the engine never halts for it.", []string{"backend", "fault"}},
	handoffs:          {"handoffs_total", "Goroutine hand-offs the engine made: work to a Quiesce worker or the watcher, and the owner woken by another goroutine. With backends that answer their proof inline, at most one per served fetch.", nil},
	quiesceProbes:     {"quiesce_probes_total", "Non-blocking access proofs (TryQuiesce) asked on the owner goroutine; only what they could not answer went to quiesce_calls_total.", nil},
	outstanding:       {"backend_outstanding", "Submissions outstanding at the backend now: submitted, access not yet proven over.", nil},
	outstandingLimit:  {"backend_outstanding_limit", "The bound on submissions outstanding at the backend; 0 when unbounded. Leases past it wait in state staged.", nil},
	halted:            {"halted", "1 when the engine halted (a broken invariant, or a containment under the fatal policy) and releases nothing more; restart the process.", nil},
	lastRound:         {"last_round_timestamp_seconds", "Wall-clock time (the system clock, never the engine's own clock, which may be virtual) at the end of the engine's latest round that a scrape saw, in seconds since the Unix epoch.", nil},
	readinessLatency:  {"readiness_latency_seconds", "From Lend to readiness being answerable (every local copy landed), for leases that did not fail (served, partial, missed)." + onEngineClock, []string{"clock"}},
	failureLatency:    {"failure_latency_seconds", "From Lend to readiness being answerable, for leases that failed (failed, cancelled, rejected, timed out, a violation): their rows are recomputed." + onEngineClock, []string{"clock"}},
	fenceLatency:      {"fence_latency_seconds", "From the submission to the access fence (backend access proven over)." + onEngineClock, []string{"clock"}},
	oldestUnfenced:    {"oldest_unfenced_age_seconds", "Age of the oldest lease whose staging slots a backend was handed and whose access is not yet proven over (not fenced; contained leases left out), at the engine's latest round; 0 when there is none. Growing without coming down: a transfer is stuck." + onEngineClock, []string{"clock"}},
	inFlightLeases:    {"in_flight_leases", "Leases whose staging slots a backend was handed and whose access is not yet proven over (contained leases left out).", nil},
	inFlightBytes:     {"in_flight_bytes", "Staging bytes of the leases in flight: what the backends may still read or write.", nil},
	quarantinedBytes:  {"quarantined_bytes", "Staging bytes quarantined: out of circulation for ever (kvready_slots{state=\"quarantined\"} times each pool group's slot size).", nil},
	slotsInherited:    {"slots_inherited", "Staging slots the engine found out of circulation when it was assembled: quarantined, or held by a lease left unfinished, by an earlier engine over the same memory (SPEC §4 rule 17). Never lent; counted in kvready_slots{state=\"quarantined\"} too. Only the memory's release brings them back.", nil},
	storeReachable:    {"store_reachable", "1 while the shared store answers; 0 while the backend holds it for down (a run of connection errors, or a call with no reply within its bound) and refuses submissions at once, until a PING answers. Sent when the collector watches a store.", nil},
	storeFastFailures: {"store_fast_failures_total", "Submissions the backend refused at once because the store was held for down: failures learnt without waiting, never misses.", nil},
	storeUnavailable:  {"store_unavailable_seconds_total", "Wall-clock seconds the store was held for down, the current outage included.", nil},
	tierFetchUnits:    {"tier_fetch_units_total", "Units (rows) a backend of tiers handed each tier to fetch, by what became of them: hit (the tier served it), miss (the tier answered without it: the next tier is asked) or failed (the tier's fetch failed, was cancelled, gave no outcome or broke the contract: never a miss). Sent when the collector watches tiers.", []string{"tier", "result"}},
	tierPublishUnits:  {"tier_publish_units_total", "Units (rows) written into each tier, by kind — write_through (every publication) or promotion (a row a lower tier served, copied up from staging) — and result: accepted, failed, or skipped (a promotion whose lower tier did not prove its access over within the stack's wait).", []string{"tier", "kind", "result"}},
	tierFaults:        {"tier_faults_total", "What each tier did that cost its own attempts: rejected (a submission refused before anything escaped), no_outcome (no outcome within the stack's wait), violation (a contract breach: a changed answer, a unit never handed, a panic), cancel_error (a cancel request that erred).", []string{"tier", "fault"}},
	tierEvictions:     {"tier_evictions_total", "Rows each tier evicted to stay within its bound (backend/mem WithCapacityBytes: least recently used first); 0 for a tier that does not report them.", []string{"tier"}},
	tierBytes:         {"tier_bytes", "Bytes of the rows each tier holds now; sent only for a tier that reports them (backend/mem).", []string{"tier"}},

	transfersInFlight:         {"transfers_in_flight", "Peer transfers (backend/peer) submitted whose pages are not yet proven reusable, in doubt ones aside, by side: receiver (decode: sessions fetched) or sender (prefill: publications). Sent when the collector watches transfers.", []string{"side"}},
	transfersInDoubt:          {"transfers_in_doubt", "Receiver sessions in doubt: their writers never settled by the containment deadline, so their pages are contained for ever (IN_DOUBT) and never reused.", []string{"side"}},
	transferOutcomes:          {"transfer_outcomes_total", "Peer transfer outcomes latched, by side and outcome: delivered, failed (a writer's failure, a lost peer, a deadline, a failed put or offer) or cancelled.", []string{"side", "outcome"}},
	transferReports:           {"transfer_reports_total", "Messages a side received about its transfers, by result. Receiver (reports from writers): accepted, refused (stale attempt, another life, duplicate, replay, late, unknown session), malformed, impersonated (naming another peer or life than the endpoint it came on). Sender (offers from receivers): taken, held (came before its publish; later taken or dropped), dropped (malformed, impersonated, for another life, duplicate, late, no room).", []string{"side", "result"}},
	transferPeersLost:         {"transfer_peers_lost_total", "Endpoint errors: a peer's life lost, failing the transfers agreed with it.", []string{"side"}},
	transferRejected:          {"transfer_rejected_total", "Transfer submissions refused before anything escaped (no plan, no agreement, a peer lost, a full table).", []string{"side"}},
	transferPuts:              {"transfer_puts_total", "Puts the sender posted into the receivers' pages.", []string{"side"}},
	transferRevocations:       {"transfer_revocations_total", "Leased receiver sessions whose page registrations were revoked after their outcome.", []string{"side"}},
	transferRevocationsFenced: {"transfer_revocations_fenced_total", "Of those, revocations that fenced every page: they proved the writers' access over by themselves.", []string{"side"}},
	transferCancels:           {"transfer_cancels_total", "Coordinated cancellation (IN_FLIGHT_CANCELLATION), by side and result. Receiver (asking its writers to stop, on the owner's cancel or a deadline): sent, unsent (the writer's life gone). Sender (a receiver's cancel): taken (a publication stopped, or a tombstone left for one whose offer had not come), ignored (malformed, impersonated, another life's, an older attempt's, a publication already concluded, no room for a tombstone). A cancel is a request, never evidence.", []string{"side", "result"}},
	transferCancelTombstones:  {"transfer_cancel_tombstones_total", "Of the cancels the sender took, those that came before their offer: a tombstone refuses the late offer.", []string{"side"}},
	transferCancelFinals:      {"transfer_cancel_final_reports_total", "Final reports (DONE) the sender sent after a receiver's cancel, once nothing more of the publication could land: under PER_OPERATION_QUIESCENCE they settle the writer.", []string{"side"}},
	transferSettleLatency:     {"transfer_settle_latency_seconds", "From a transfer's submission to its pages proven reusable (the first Quiesce that answered true), by side; transfers in doubt are never counted." + onEngineClock, []string{"side", "clock"}},
}

// Namespace prefixes every family the collector exports.
const Namespace = "kvready"

// Names returns the name of every family the collector exports, histograms by
// their base name (the exposition adds _bucket, _sum and _count).
func Names() []string {
	out := make([]string, 0, numFamilies)
	for _, f := range families {
		out = append(out, Namespace+"_"+f.name)
	}
	return out
}
