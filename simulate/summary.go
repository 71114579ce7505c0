package simulate

import (
	"github.com/kvready/kvready/internal/words"

	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is what a run shows: leases by final state, outcomes by kind, the
// hit ratio, latencies and throughput, and the checker's safety counters.
type Summary struct {
	Manager string // "kvready" or "naive"
	// Store names the store: "mem", the Redis URL (password redacted) and
	// key prefix, or a stack of tiers ("tiers mem?capacity=256KiB in front
	// of redis://...").
	Store string
	// RealTime is true for a run on the system clock (over Redis or a stack
	// of tiers): latencies and Virtual are then real time.
	RealTime bool
	// Device names the GPU the run used: "sim" or "cuda".
	Device   string
	Requests int
	// RefusedRequests could not start (the device was lost).
	RefusedRequests int

	// UnfinishedRequests did not end by the end of the run (or never
	// arrived); UnfinishedReason says why, from the manager's own account.
	UnfinishedRequests int
	UnfinishedReason   string
	// Interrupted is true when the run's context ended before the run did
	// (Ctrl-C, SIGTERM): the summary covers the run so far.
	Interrupted bool
	// BreakerOff is true over a Redis store whose URL turned the breaker off
	// (breaker_failures=0): the store is never held for down, and nothing
	// fails fast.
	BreakerOff bool

	// Leases lent, by final state.
	Leases, Released, Quarantined, Unfinished int
	// RefusedLeases the manager would not lend (a lost device, or a pool
	// shrunk by quarantine below a lease's size).
	RefusedLeases int
	// RefusedForCapacity are the refused leases that quarantine made
	// impossible to grant (no run of slots left that could hold them).
	RefusedForCapacity int
	// Refusals counts the refused leases and requests by reason (at most 8
	// reasons; the rest under "other reasons").
	Refusals map[string]int
	// SlotsQuarantined are staging slots out of circulation for ever;
	// Containments the containment signals the engine raised, and
	// ContainmentReasons those signals by reason (at most 8 reasons; the
	// rest under "other reasons").
	SlotsQuarantined, Containments int
	ContainmentReasons             map[string]int
	// Recovered counts contained leases whose access a later Quiesce proved
	// over (the recover policy), and RecoveredSlots the slots they returned.
	Recovered, RecoveredSlots int
	// StagingSlots is the pool: slots per group times layer groups.
	StagingSlots int
	// Policy is the engine's containment policy (quarantine, fatal or
	// recover); empty for the naive manager, which has none.
	Policy string
	// MaxOutstanding is the engine's bound on submissions outstanding at the
	// backend (0: none).
	MaxOutstanding int
	// Halted says why the engine halted (the fatal policy): the run stopped
	// there, and what was in flight is unfinished. Empty while it ran.
	Halted string
	// LossExpected names what in the configuration asked for capacity to be
	// lost (Config.LossExpected), or is empty.
	LossExpected string

	// Outcomes by kind, as the manager reported them. Failed includes the
	// timeouts, cancellations, rejections and contract violations counted
	// below it; a miss is never among them.
	Served, Partial, Missed, Failed           int
	Timeouts, Cancelled, Rejected, Violations int
	// Withdrawn leases ended with no outcome at all: layerwise publishes
	// the manager released before their last layer, never submitted
	// (Layerwise only).
	Withdrawn int

	// Over a Redis store: StoreOutages counts the times the backend held the
	// store for down (a run of connection errors, or calls with no reply
	// within the attempt bound), StoreUnavailable how long it did in all.
	// FailedFast are the leases refused at once meanwhile (among Rejected):
	// FailedFastP50 and FailedFastP99 are their times from the submission
	// (which the engine makes once the lease has its slots) to the outcome
	// reported. FailedWaiting are the leases the store failed after their
	// submission (connection errors, the attempt bound): those waited for
	// their fate.
	StoreOutages                 int
	StoreUnavailable             time.Duration
	FailedFast, FailedWaiting    int
	FailedFastP50, FailedFastP99 time.Duration

	// HitTokenRatio is the fraction of fetched prompt tokens that were usable.
	HitTokenRatio float64
	// ReadinessP50 and ReadinessP99: time (virtual, or real over Redis) from
	// lending a fetch to its readiness being answerable, over the fetches
	// the store answered (served, partial or missed) alone: a failure,
	// above all one learnt at once while the store is down, would read as
	// fast readiness. FetchFailures counts the fetches that failed (failed
	// fast aside), and FailureP50 and FailureP99 are their times from Lend
	// to the failure reported.
	ReadinessP50, ReadinessP99 time.Duration
	FetchFailures              int
	FailureP50, FailureP99     time.Duration
	// Throughput is leases ended per wall-clock second of the run.
	Throughput float64
	Wall       time.Duration
	// Virtual is how long the run took on its clock (real time over Redis).
	Virtual time.Duration

	// The checker's counters. RecycledBeforeFence counts slot grants in which
	// the slot was recycled before its previous tenant's fence: re-lent while
	// that tenant's access was unproven (RegrantsUnproven), or hit by a late
	// write from it (LateWrites counts those writes; watched over the
	// in-process store only, whose deliveries land at known instants).
	RecycledBeforeFence      int
	RegrantsUnproven         int
	LateWrites               int
	CorruptRows              int
	MissesReportedAsFailures int
	FailuresReportedAsMisses int
	SlotGrants               int
	RowsVerified             int
	// StoreChecksFailed counts the ended requests whose rows the checker could
	// not read back from the store (a Redis server gone away, or too slow to
	// keep up with the run): those rows are not verified.
	StoreChecksFailed int
	// OrphanSubmissions are submissions the simulator could not attribute to
	// a lease; always 0 unless the simulator has a bug.
	OrphanSubmissions int

	// ReadinessOverclaims counts fetches whose readiness interval has an end
	// (restart_floor or usable_until) at which some layer group reads a block
	// the fetch did not bring: under a window, only the sinks and the window.
	ReadinessOverclaims int

	// Layer by layer (Config.Layerwise; all zero without it). Layers is the
	// model's layer count L, ComputePerLayer its C, CopyBandwidth the copy
	// engine's rate and FullLayerCopy what one layer of a fully served fetch
	// takes on it when idle (T). Forwards are the fetches whose forward pass
	// was measured both ways: from the round the engine issued their copies
	// to the last layer computed, layer by layer (LastLayer…) and after the
	// whole lease was ready (WholeLease…). LayerwiseSpeedup is the whole-lease
	// time over the layer-by-layer time, summed over those fetches.
	// ForwardsFailed stopped at a layer whose copy failed or will never
	// land (LayerFailed, LayerNever: the manager recomputes the rows);
	// ForwardsUnfinished were still computing when the run stopped.
	Layerwise                               bool
	Layers                                  int
	ComputePerLayer, FullLayerCopy          time.Duration
	CopyBandwidth                           float64
	Forwards, ForwardsFailed                int
	ForwardsUnfinished                      int
	LastLayerP50, LastLayerP99              time.Duration
	WholeLeaseP50, WholeLeaseP99            time.Duration
	LayerwiseSpeedup                        float64
	LastLayerLatencies, WholeLeaseLatencies []time.Duration
	// The checker's layer counters: the layers the manager read (one fetch's
	// layer, every row of it the backend served), those read before the
	// device had completed the event after their copy into some row, and
	// those with a row whose bytes were not its content.
	LayersRead, LayersReadEarly, CorruptLayers int
	// Layerwise publishes: PublishesSubmitted were handed to the backend
	// (the checker saw the submission), PublishesWithdrawn were released by
	// the manager before their last layer was computed. The checker's
	// counters: LayerSaves layer copies device→staging (one layer of one
	// row each) it followed, of which those queued neither behind their
	// compute event nor after it completed (SaveCopiesEarly), units handed
	// to the backend with a layer whose copy was not so queued, had not
	// landed or did not stage the computed bytes (UnitsIncomplete), and
	// withdrawn publishes the backend saw (WithdrawnSubmitted) or whose slots
	// returned before their queued copies landed (WithdrawnFreedEarly).
	PublishesSubmitted, PublishesWithdrawn  int
	LayerSaves                              int
	SaveCopiesEarly, UnitsIncomplete        int
	WithdrawnSubmitted, WithdrawnFreedEarly int

	// Deadline is the run's request deadline: deliveries slower than it
	// time out, which shows as a spike in the readiness latencies. Over
	// Redis it is the backend's attempt bound too. DrainGrace is how long
	// access may stay unproven after it before a lease is contained.
	Deadline, DrainGrace time.Duration
	// Seed drew the run's workload and its fault choices.
	Seed uint64

	// Tiers is what each tier of a stack did (Config.Backend a stack of
	// tiers), first tier first; nil for a single store.
	Tiers []TierSummary

	Timeline       []Sample
	ReadyLatencies []time.Duration
	FenceLatencies []time.Duration
}

// Safe reports whether the checker found nothing wrong.
func (s *Summary) Safe() bool {
	return s.RecycledBeforeFence == 0 && s.MissesReportedAsFailures == 0 && s.CorruptRows == 0 &&
		s.ReadinessOverclaims == 0 && s.LayersReadEarly == 0 && s.CorruptLayers == 0 &&
		s.SaveCopiesEarly == 0 && s.UnitsIncomplete == 0 && s.WithdrawnSubmitted == 0 && s.WithdrawnFreedEarly == 0
}

// CapacityLost reports whether the run lost staging capacity: a lease
// contained (even if the recover policy later returned its slots), slots
// quarantined, leases refused because quarantine left no run of slots that
// could hold them, or an engine that halted. On a healthy store none of
// these happens (SPEC §4 rule 12).
func (s *Summary) CapacityLost() bool {
	return s.Containments > 0 || s.SlotsQuarantined > 0 || s.RefusedForCapacity > 0 || s.Halted != ""
}

// Complete reports whether every request ended.
func (s *Summary) Complete() bool { return s.UnfinishedRequests == 0 }

// LateWritesWatched reports whether the checker watched for late writes into
// re-lent slots: over the in-process store only, whose deliveries land at
// known instants. Over a real store LateWrites is not a count of anything.
func (s *Summary) LateWritesWatched() bool { return !s.RealTime }

// RecycledByLateWriteOnly counts the slot grants recycled before their fence
// that only a late write revealed: the grant itself found the previous
// tenant fenced. RegrantsUnproven plus this is RecycledBeforeFence.
func (s *Summary) RecycledByLateWriteOnly() int { return s.RecycledBeforeFence - s.RegrantsUnproven }

// OtherFailures counts the failed outcomes that are none of the kinds Failed
// breaks down (timeouts, cancellations, rejections, violations): the
// backend's own failures. Timeouts, Cancelled, Rejected, Violations and
// OtherFailures add up to Failed.
func (s *Summary) OtherFailures() int {
	return s.Failed - s.Timeouts - s.Cancelled - s.Rejected - s.Violations
}

// formatDuration prints a duration the one way the summary, the report and
// the command line print them: milliseconds with two decimals (1.93ms).
func formatDuration(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
}

// FormatDuration prints d as every kvready output does: milliseconds with
// two decimals, such as 1.93ms or 210.00ms.
func FormatDuration(d time.Duration) string { return formatDuration(d) }

type summaryJSON struct {
	Manager                  string         `json:"manager"`
	Store                    string         `json:"store"`
	Clock                    string         `json:"clock"`  // "virtual" or "real"
	Device                   string         `json:"device"` // "sim" or "cuda"
	Requests                 int            `json:"requests"`
	Leases                   int            `json:"leases"`
	Served                   int            `json:"served"`
	Partial                  int            `json:"partial"`
	Missed                   int            `json:"missed"`
	Failed                   int            `json:"failed"`
	Timeouts                 int            `json:"timeouts"`
	Cancelled                int            `json:"cancelled"`
	Rejected                 int            `json:"rejected"`
	Quarantined              int            `json:"quarantined"`
	Released                 int            `json:"released"`
	Unfinished               int            `json:"unfinished"`
	UnfinishedRequests       int            `json:"unfinished_requests"`
	UnfinishedReason         string         `json:"unfinished_reason,omitempty"`
	Interrupted              bool           `json:"interrupted"`
	BreakerOff               bool           `json:"breaker_off,omitempty"`
	Containments             int            `json:"containments"`
	Violations               int            `json:"violations"`
	OtherFailures            int            `json:"other_failures"`
	Refused                  int            `json:"refused"`
	RefusedForCapacity       int            `json:"refused_for_capacity"`
	RefusedByReason          map[string]int `json:"refused_by_reason"`
	StagingSlots             int            `json:"staging_slots"`
	SlotsQuarantined         int            `json:"slots_quarantined"`
	ContainmentsByReason     map[string]int `json:"containments_by_reason"`
	Policy                   string         `json:"containment_policy,omitempty"`
	MaxOutstanding           int            `json:"max_outstanding"`
	Recovered                int            `json:"recovered"`
	RecoveredSlots           int            `json:"recovered_slots"`
	Halted                   *string        `json:"halted"` // null: the engine did not halt
	CapacityLost             bool           `json:"capacity_lost"`
	LossExpected             string         `json:"loss_expected,omitempty"`
	SlotGrantsWatched        int            `json:"slot_grants_watched"`
	RecycledBeforeFence      int            `json:"recycled_before_fence"`
	RegrantsUnproven         int            `json:"regrants_unproven"`
	RecycledByLateWriteOnly  *int           `json:"recycled_by_late_write_only"` // null: late writes not watched
	LateWrites               *int           `json:"late_writes"`                 // null: not watched
	CorruptRows              int            `json:"corrupt_rows"`
	MissesReportedAsFailures int            `json:"misses_reported_as_failures"`
	ReadinessOverclaims      int            `json:"readiness_overclaims"`
	RowsVerified             int            `json:"rows_verified"`
	StoreChecksFailed        int            `json:"store_checks_failed"`
	HitTokenRatio            float64        `json:"hit_token_ratio"`
	ReadinessP50us           float64        `json:"readiness_p50_us"` // answered fetches alone
	ReadinessP99us           float64        `json:"readiness_p99_us"`
	FetchFailures            int            `json:"fetch_failures"` // failed fast aside
	FailureP50us             float64        `json:"failure_p50_us"`
	FailureP99us             float64        `json:"failure_p99_us"`
	ThroughputLeasesPerS     float64        `json:"throughput_leases_per_s"`
	StoreOutages             int            `json:"store_outages"`
	StoreUnavailableUs       float64        `json:"store_unavailable_us"`
	FailedFast               int            `json:"failed_fast"`
	FailedFastP50us          float64        `json:"failed_fast_p50_us"`
	FailedFastP99us          float64        `json:"failed_fast_p99_us"`
	FailedWaiting            int            `json:"failed_waiting"`
	DeadlineUs               float64        `json:"deadline_us"`
	DrainGraceUs             float64        `json:"drain_grace_us"`
	Layerwise                *layerwiseJSON `json:"layerwise"` // null: not a layerwise run
	Tiers                    []tierJSON     `json:"tiers"`     // null: not a stack of tiers
}

// layerwiseJSON is the layerwise part of the JSON summary.
type layerwiseJSON struct {
	Layers              int     `json:"layers"`
	ComputePerLayerUs   float64 `json:"compute_per_layer_us"`
	CopyBandwidth       float64 `json:"copy_bandwidth_bytes_per_s"`
	FullLayerCopyUs     float64 `json:"full_layer_copy_us"`
	PipelineBoundUs     float64 `json:"pipeline_bound_us"`
	WholeLeaseBoundUs   float64 `json:"whole_lease_bound_us"`
	Forwards            int     `json:"forwards"`
	ForwardsFailed      int     `json:"forwards_failed"`
	ForwardsUnfinished  int     `json:"forwards_unfinished"`
	LastLayerP50us      float64 `json:"last_layer_p50_us"`
	LastLayerP99us      float64 `json:"last_layer_p99_us"`
	WholeLeaseP50us     float64 `json:"whole_lease_p50_us"`
	WholeLeaseP99us     float64 `json:"whole_lease_p99_us"`
	Speedup             float64 `json:"speedup"`
	LayersRead          int     `json:"layers_read"`
	LayersReadEarly     int     `json:"layers_read_early"`
	CorruptLayers       int     `json:"corrupt_layers"`
	PublishesSubmitted  int     `json:"publishes_submitted"`
	PublishesWithdrawn  int     `json:"publishes_withdrawn"`
	LayerSaves          int     `json:"layer_saves"`
	SaveCopiesEarly     int     `json:"save_copies_early"`
	UnitsIncomplete     int     `json:"units_incomplete"`
	WithdrawnSubmitted  int     `json:"withdrawn_submitted"`
	WithdrawnFreedEarly int     `json:"withdrawn_freed_early"`
}

// MarshalJSON writes the summary as one flat object: the keys the issue pins
// (leases, served, partial, missed, failed, quarantined, released,
// recycled_before_fence, misses_reported_as_failures, hit_token_ratio,
// readiness_p50_us, readiness_p99_us, throughput_leases_per_s) and a few more.
// A counter the checker did not watch (late writes, over a real store) is
// null, never 0.
func (s *Summary) MarshalJSON() ([]byte, error) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	var late, lateOnly *int
	if s.LateWritesWatched() {
		n, m := s.LateWrites, s.RecycledByLateWriteOnly()
		late, lateOnly = &n, &m
	}
	var halted *string
	if s.Halted != "" {
		halted = &s.Halted
	}
	orEmpty := func(m map[string]int) map[string]int {
		if m == nil {
			return map[string]int{}
		}
		return m
	}
	var lw *layerwiseJSON
	if s.Layerwise {
		pipe, whole := PipelineBound(s.Layers, s.FullLayerCopy, s.ComputePerLayer)
		lw = &layerwiseJSON{Layers: s.Layers, ComputePerLayerUs: us(s.ComputePerLayer), CopyBandwidth: s.CopyBandwidth,
			FullLayerCopyUs: us(s.FullLayerCopy), PipelineBoundUs: us(pipe), WholeLeaseBoundUs: us(whole),
			Forwards: s.Forwards, ForwardsFailed: s.ForwardsFailed, ForwardsUnfinished: s.ForwardsUnfinished,
			LastLayerP50us: us(s.LastLayerP50), LastLayerP99us: us(s.LastLayerP99),
			WholeLeaseP50us: us(s.WholeLeaseP50), WholeLeaseP99us: us(s.WholeLeaseP99), Speedup: s.LayerwiseSpeedup,
			LayersRead: s.LayersRead, LayersReadEarly: s.LayersReadEarly, CorruptLayers: s.CorruptLayers,
			PublishesSubmitted: s.PublishesSubmitted, PublishesWithdrawn: s.PublishesWithdrawn,
			LayerSaves: s.LayerSaves, SaveCopiesEarly: s.SaveCopiesEarly, UnitsIncomplete: s.UnitsIncomplete,
			WithdrawnSubmitted: s.WithdrawnSubmitted, WithdrawnFreedEarly: s.WithdrawnFreedEarly}
	}
	return json.Marshal(summaryJSON{
		Layerwise: lw, Tiers: tiersJSON(s.Tiers),
		Manager: s.Manager, Store: s.Store, Clock: strings.Fields(s.clock())[0], Device: s.Device,
		Requests: s.Requests, Leases: s.Leases,
		Served: s.Served, Partial: s.Partial, Missed: s.Missed, Failed: s.Failed,
		Timeouts: s.Timeouts, Cancelled: s.Cancelled, Rejected: s.Rejected,
		Quarantined: s.Quarantined, Released: s.Released, Unfinished: s.Unfinished,
		UnfinishedRequests: s.UnfinishedRequests, UnfinishedReason: s.UnfinishedReason, Interrupted: s.Interrupted,
		BreakerOff:   s.BreakerOff,
		Containments: s.Containments, Violations: s.Violations, OtherFailures: s.OtherFailures(),
		Refused: s.RefusedLeases + s.RefusedRequests, SlotsQuarantined: s.SlotsQuarantined,
		RefusedForCapacity: s.RefusedForCapacity, RefusedByReason: orEmpty(s.Refusals), StagingSlots: s.StagingSlots,
		ContainmentsByReason: orEmpty(s.ContainmentReasons), Policy: s.Policy, MaxOutstanding: s.MaxOutstanding,
		Recovered: s.Recovered, RecoveredSlots: s.RecoveredSlots, Halted: halted,
		CapacityLost: s.CapacityLost(), LossExpected: s.LossExpected,
		SlotGrantsWatched: s.SlotGrants, RecycledBeforeFence: s.RecycledBeforeFence, RegrantsUnproven: s.RegrantsUnproven,
		RecycledByLateWriteOnly: lateOnly, LateWrites: late, CorruptRows: s.CorruptRows,
		MissesReportedAsFailures: s.MissesReportedAsFailures, RowsVerified: s.RowsVerified,
		StoreChecksFailed: s.StoreChecksFailed, HitTokenRatio: s.HitTokenRatio,
		ReadinessP50us: us(s.ReadinessP50), ReadinessP99us: us(s.ReadinessP99),
		FetchFailures: s.FetchFailures, FailureP50us: us(s.FailureP50), FailureP99us: us(s.FailureP99),
		ThroughputLeasesPerS: s.Throughput,
		DeadlineUs:           us(s.Deadline), DrainGraceUs: us(s.DrainGrace),
		StoreOutages: s.StoreOutages, StoreUnavailableUs: us(s.StoreUnavailable),
		FailedFast: s.FailedFast, FailedFastP50us: us(s.FailedFastP50), FailedFastP99us: us(s.FailedFastP99), FailedWaiting: s.FailedWaiting,
		ReadinessOverclaims: s.ReadinessOverclaims,
	})
}

// WriteTable prints the summary as a human-readable table. Every count that
// is broken down is broken into parts that add up to it; a counter the
// checker did not watch says so.
func (s *Summary) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	device := ""
	if s.Device != "" {
		device = ", device " + s.Device
	}
	if s.RealTime {
		fmt.Fprintf(tw, "kvready simulate — manager: %s, %s%s, %s real time\n", s.Manager, words.Count(s.Requests, "request"), device, formatDuration(s.Wall))
	} else {
		fmt.Fprintf(tw, "kvready simulate — manager: %s, %s%s, %s virtual, %s wall\n", s.Manager, words.Count(s.Requests, "request"), device, formatDuration(s.Virtual), formatDuration(s.Wall))
	}
	if s.Store != "" {
		fmt.Fprintf(tw, "store: %s\n", s.Store)
	}
	if s.Deadline > 0 {
		bound := ""
		if s.RealTime {
			bound = " (the backend's attempt bound too)"
		}
		fmt.Fprintf(tw, "request deadline %s%s, drain grace %s\n", formatDuration(s.Deadline), bound, formatDuration(s.DrainGrace))
	}
	if s.Interrupted {
		fmt.Fprintf(tw, "interrupted: the run was stopped before it finished (%d of %s ended); what follows covers the run so far\n",
			s.Requests-s.UnfinishedRequests, words.Count(s.Requests, "request"))
	}
	fmt.Fprintln(tw, "leases by final state")
	row("lent", s.Leases)
	row("released", s.Released)
	row("quarantined", s.Quarantined)
	row("unfinished", s.Unfinished)
	row("refused", s.RefusedLeases+s.RefusedRequests)
	byCount(s.Refusals, func(reason string, n int) { row(fmt.Sprintf("  %d", n), reason) })
	switch {
	case s.UnfinishedRequests > 0 && s.Interrupted:
		row("not run to the end", fmt.Sprintf("%d of %d requests, stopped by the interrupt", s.UnfinishedRequests, s.Requests))
	case s.UnfinishedRequests > 0:
		row("UNFINISHED REQUESTS", fmt.Sprintf("%d of %d: %s", s.UnfinishedRequests, s.Requests, s.UnfinishedReason))
	}
	fmt.Fprintln(tw, "outcomes by kind")
	row("served", s.Served)
	row("partial", s.Partial)
	row("missed", s.Missed)
	row("failed", fmt.Sprintf("%d = timeouts %d + cancelled %d + rejected %d + violations %d + other failures %d",
		s.Failed, s.Timeouts, s.Cancelled, s.Rejected, s.Violations, s.OtherFailures()))
	if s.Layerwise {
		row("withdrawn", fmt.Sprintf("%d (layerwise publishes released before their last layer: never submitted, no outcome)", s.Withdrawn))
	}
	if s.RealTime && s.Store != MemBackend && (s.Tiers == nil || s.redisTier()) {
		s.writeStore(tw, row)
	}
	if s.Tiers != nil {
		s.writeTiers(tw, row)
	}
	s.writeCapacity(tw, row)
	if s.RealTime {
		s.writeOverTime(tw, row)
	}
	fmt.Fprintln(tw, "service")
	row("hit ratio (tokens)", fmt.Sprintf("%.3f", s.HitTokenRatio))
	row("readiness p50 / p99", fmt.Sprintf("%s / %s (%s; fetches the store answered: served, partial, missed)", formatDuration(s.ReadinessP50), formatDuration(s.ReadinessP99), s.clock()))
	row("failures p50 / p99", fmt.Sprintf("%s / %s (%d fetches, from Lend to the failure; failed fast aside)", formatDuration(s.FailureP50), formatDuration(s.FailureP99), s.FetchFailures))
	row("throughput", fmt.Sprintf("%.0f leases/s (wall clock, checker included)", s.Throughput))
	if s.Layerwise {
		s.writeLayerwise(tw, row)
	}
	fmt.Fprintln(tw, "independent checker")
	row("slot grants watched", s.SlotGrants)
	row("recycled before fence", words.Count(s.RecycledBeforeFence, "slot grant")+verdict(s.RecycledBeforeFence))
	row("  found at the grant: access unproven", s.RegrantsUnproven)
	if s.LateWritesWatched() {
		row("  found by a late write alone", s.RecycledByLateWriteOnly())
		row("late writes into re-lent slots", words.Count(s.LateWrites, "write")+" (into grants counted above, found either way)")
	} else {
		// A real store's goroutines write staging directly: the checker
		// cannot see when. Re-grants, device rows and the store it still sees.
		row("  found by a late write alone", "not watched over a real store")
		row("late writes into re-lent slots", "not watched over a real store")
	}
	row("corrupt rows (device or store)", fmt.Sprintf("%d of %d verified", s.CorruptRows, s.RowsVerified))
	if s.StoreChecksFailed > 0 {
		row("  store not read back", words.Count(s.StoreChecksFailed, "request")+" (store unreachable or behind: their store rows not verified)")
	}
	row("misses reported as failures", fmt.Sprintf("%d%s", s.MissesReportedAsFailures, verdict(s.MissesReportedAsFailures)))
	row("readiness overclaims", fmt.Sprintf("%d%s", s.ReadinessOverclaims, verdict(s.ReadinessOverclaims)))
	if s.Layerwise {
		row("layers read before their copy landed", fmt.Sprintf("%d of %d layers read%s", s.LayersReadEarly, s.LayersRead, verdict(s.LayersReadEarly)))
		row("layers read with corrupt bytes", fmt.Sprintf("%d%s", s.CorruptLayers, verdict(s.CorruptLayers)))
		row("layer saves queued before computed", fmt.Sprintf("%d of %d layer saves%s", s.SaveCopiesEarly, s.LayerSaves, verdict(s.SaveCopiesEarly)))
		row("units submitted with a layer missing", fmt.Sprintf("%d%s", s.UnitsIncomplete, verdict(s.UnitsIncomplete)))
		row("withdrawn publishes submitted", fmt.Sprintf("%d%s", s.WithdrawnSubmitted, verdict(s.WithdrawnSubmitted)))
		row("  slots back before copies landed", fmt.Sprintf("%d%s", s.WithdrawnFreedEarly, verdict(s.WithdrawnFreedEarly)))
	}
	return tw.Flush()
}

// writeLayerwise prints the forward passes of a layerwise run: time to the
// last layer computed, layer by layer against the whole lease, and the idle
// device's bounds for a fully served fetch beside them.
func (s *Summary) writeLayerwise(tw io.Writer, row func(string, any)) {
	fmt.Fprintf(tw, "layer by layer (%d layers, compute %s each, copy engine %.4g bytes/s)\n", s.Layers, formatDuration(s.ComputePerLayer), s.CopyBandwidth)
	pipe, whole := PipelineBound(s.Layers, s.FullLayerCopy, s.ComputePerLayer)
	row("forward passes measured", fmt.Sprintf("%d fetches (and %d stopped by a layer copy that failed or will never land: rows recomputed; %d unfinished)", s.Forwards, s.ForwardsFailed, s.ForwardsUnfinished))
	row("last layer computed p50 / p99", fmt.Sprintf("%s / %s, layer by layer (from the copies issued)", formatDuration(s.LastLayerP50), formatDuration(s.LastLayerP99)))
	row("  whole lease first p50 / p99", fmt.Sprintf("%s / %s, every layer after the whole lease was ready", formatDuration(s.WholeLeaseP50), formatDuration(s.WholeLeaseP99)))
	row("  whole lease ÷ layer by layer", fmt.Sprintf("%.2f× (summed over the fetches measured)", s.LayerwiseSpeedup))
	row("idle-device bounds, full fetch", fmt.Sprintf("T %s a layer: T + (L−1)·max(T, C) + C = %s; L·T + L·C = %s", formatDuration(s.FullLayerCopy), formatDuration(pipe), formatDuration(whole)))
	row("publishes, layer by layer", fmt.Sprintf("%d submitted once every layer landed; %d withdrawn before their last layer (released, never submitted)", s.PublishesSubmitted, s.PublishesWithdrawn))
}

// writeCapacity prints what the run did to the staging pool: the policy and
// the admission bound, the slots quarantined and the containments by reason,
// the recoveries, a halt, and the verdict: the pool whole, or capacity lost
// (as the configuration asked, or not).
func (s *Summary) writeCapacity(tw io.Writer, row func(string, any)) {
	if s.Policy == "" { // the naive manager: it frees instead of containing
		fmt.Fprintln(tw, "capacity")
		row("slots quarantined", fmt.Sprintf("%d (the naive manager never contains: it frees)", s.SlotsQuarantined))
		return
	}
	admission := "no bound on submissions outstanding"
	if s.MaxOutstanding > 0 {
		admission = fmt.Sprintf("at most %s outstanding at the backend", words.Count(s.MaxOutstanding, "submission"))
	}
	fmt.Fprintf(tw, "capacity (containment policy %s; %s)\n", s.Policy, admission)
	row("slots quarantined", fmt.Sprintf("%d of %d (containments %d)", s.SlotsQuarantined, s.StagingSlots, s.Containments))
	byCount(s.ContainmentReasons, func(reason string, n int) { row(fmt.Sprintf("  %d", n), reason) })
	if s.Policy == "recover" || s.Recovered > 0 {
		row("recovered", fmt.Sprintf("%d of %s, returning %s in all", s.Recovered, words.Count(s.Containments, "contained lease"), words.Count(s.RecoveredSlots, "slot")))
	}
	if s.Halted != "" {
		row("ENGINE HALTED", s.Halted)
	}
	row("pool", s.PoolVerdict())
}

// PoolVerdict says whether the pool is whole at the end, or what was lost
// (and whether the run asked for it), as the table's "pool" row does.
func (s *Summary) PoolVerdict() string {
	if !s.CapacityLost() {
		return "whole: no slot quarantined, no lease refused for lack of slots"
	}
	var lost []string
	if s.Containments > 0 && s.SlotsQuarantined == 0 {
		lost = append(lost, words.Count(s.Containments, "lease")+" contained, every one recovered: the pool is whole at the end")
	}
	if s.SlotsQuarantined > 0 {
		lost = append(lost, fmt.Sprintf("%d of %d slots quarantined", s.SlotsQuarantined, s.StagingSlots))
	}
	if s.RefusedForCapacity > 0 {
		lost = append(lost, words.Count(s.RefusedForCapacity, "lease")+" refused for lack of slots")
	}
	if s.Halted != "" {
		lost = append(lost, "the engine halted")
	}
	what := strings.Join(lost, ", ")
	if s.LossExpected != "" && s.Halted == "" {
		return "capacity lost, as the run asked (" + s.LossExpected + "): " + what
	}
	return "CAPACITY LOST: " + what
}

// writeStore prints what the shared store's availability cost: how long it
// was held for down, the leases failed fast meanwhile (and how soon each
// knew), and those that waited for their failure.
func (s *Summary) writeStore(tw io.Writer, row func(string, any)) {
	fmt.Fprintln(tw, "store availability")
	if s.BreakerOff {
		row("breaker", "off (breaker_failures=0): the store is never held for down, so nothing fails fast; every call waits out its attempt bound")
	} else if s.StoreOutages == 0 {
		row("unavailable", "never held for down")
	} else {
		row("unavailable", fmt.Sprintf("%s in %s", formatDuration(s.StoreUnavailable), words.Count(s.StoreOutages, "outage")))
	}
	row("failed fast", fmt.Sprintf("%d leases refused at once (among rejected), p50 / p99 %s / %s from the submission to the outcome", s.FailedFast, formatDuration(s.FailedFastP50), formatDuration(s.FailedFastP99)))
	row("failed after waiting", fmt.Sprintf("%d leases the store failed once submitted (connection errors, the attempt bound)", s.FailedWaiting))
}

// overTimeRows is how many intervals "outcomes over time" splits a run into.
const overTimeRows = 10

// writeOverTime prints the outcomes the manager reported in each tenth of a
// run on real time, from the timeline: a store that is killed, restarted or
// paused shows as failures in the intervals it was out, and deliveries again
// after it.
func (s *Summary) writeOverTime(tw io.Writer, row func(string, any)) {
	if len(s.Timeline) == 0 {
		return
	}
	fmt.Fprintln(tw, "outcomes over time (real time since the start)")
	n := min(overTimeRows, len(s.Timeline))
	prev := Sample{}
	for i := 1; i <= n; i++ {
		smp := s.Timeline[i*len(s.Timeline)/n-1]
		hits, _ := s.tierHitsSince(smp.TierHits, prev.TierHits)
		row("until "+formatDuration(smp.At), fmt.Sprintf("delivered %d, failed %d%s", smp.Delivered-prev.Delivered, smp.Failed-prev.Failed, hits))
		prev = smp
	}
	var end []uint64
	for _, t := range s.Tiers {
		end = append(end, t.Hits)
	}
	hits, moreHits := s.tierHitsSince(end, prev.TierHits)
	if rest, failed := s.Served+s.Partial+s.Missed-prev.Delivered, s.Failed-prev.Failed; rest > 0 || failed > 0 || moreHits {
		row("until the end", fmt.Sprintf("delivered %d, failed %d%s", rest, failed, hits))
	}
}

// byCount calls f for each reason of m, the most frequent first.
func byCount(m map[string]int, f func(reason string, n int)) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		f(k, m[k])
	}
}

// clock names the run's clock.
func (s *Summary) clock() string {
	if s.RealTime {
		return "real time"
	}
	return "virtual"
}

func verdict(n int) string {
	if n == 0 {
		return "  ok"
	}
	return "  VIOLATION"
}
