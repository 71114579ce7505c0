package simulate

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/metrics"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// Config describes one simulation run. The zero value is not valid; start from
// Defaults and change what the run needs.
type Config struct {
	// Requests is the number of requests served. Each fetches its prompt's
	// blocks and publishes the blocks it had to compute.
	Requests int
	// Blocks is the number of blocks in each request's prompt.
	Blocks int
	// Groups is the number of layer groups: every block has one row per group.
	Groups int
	// Window, when positive, gives the last layer group a sliding window of
	// that many tokens (and SinkBlocks sink blocks): its fetches and publishes
	// carry only the rows a resume at the prompt's end reads, and readiness
	// is computed per group. 0: every group is full attention.
	Window, SinkBlocks int
	// Slots is the number of staging slots in each pool group.
	Slots int
	// Share is the fraction of requests whose prompt starts with a prefix shared
	// with other requests (0..1).
	Share float64
	// Families is the number of distinct shared prefixes.
	Families int
	// Arrival is the virtual time between two request arrivals.
	Arrival time.Duration

	// LatencyMedian and LatencySigma describe the log-normal distribution of
	// backend delivery latency: its median and the standard deviation of its
	// logarithm (0 makes every delivery take exactly the median).
	LatencyMedian time.Duration
	LatencySigma  float64
	// Deadline is each request's deadline for an outcome, from the moment it is
	// lent; a delivery slower than that times out.
	Deadline time.Duration
	// GPULatency is how long the simulated device takes to complete a copy.
	GPULatency time.Duration

	// DrainGrace is how long access may stay unproven once the drain starts
	// (at the deadline at the latest) before the engine contains the lease.
	DrainGrace time.Duration
	// Containment is what the engine does with a lease whose containment
	// deadline passes with access unproven (SPEC §4 rule 5): readiness.Quarantine
	// (the zero value), readiness.Fatal (the engine halts and the run stops) or
	// readiness.Recover (a later proof returns the slots). The engine's only.
	Containment readiness.Policy
	// MaxOutstanding bounds the submissions outstanding at the backend; 0
	// takes the backend's own AdmissionLimit (backend/redis has one; the
	// in-process store none: no bound). The engine's only.
	MaxOutstanding int
	// StoreCapacity bounds the store: rows beyond it evict the least recently
	// used (an evicted name is a miss). Memory then stays bounded by the work
	// in flight and this capacity, however long the run.
	StoreCapacity int

	// Fault rates, each the probability (0..1) that a submission behaves so;
	// together at most 1. The rest behave normally (serve what the store holds).
	// QuiesceNotYetRate: Quiesce answers "not yet" a few times, then proves the
	// access over (the engine's retries get the proof). NeverProvesRate:
	// Quiesce never proves it (the engine contains the lease at its deadline).
	MissRate, PartialRate, FailRate, CancelRate, QuiesceNotYetRate, NeverProvesRate, RejectRate float64

	// DeviceLossAt loses the device at this virtual time after the start; 0
	// never loses it.
	DeviceLossAt time.Duration
	// Seed makes the workload and the fault choices reproducible.
	Seed uint64
	// Naive replaces the engine by a manager that frees slots as soon as it
	// sees an outcome, an error or a timeout. In-process store only.
	Naive bool

	// Layerwise runs each fetch's forward pass on the simulated device layer
	// by layer (SPEC §4 rule 16): the engine copies a fetch's rows layer by
	// layer, and the manager waits for layer l alone (Engine.LayerReadiness),
	// reads its bytes and computes it while later layers still copy. The
	// same fetches are also computed the whole-lease way (every layer after
	// the whole lease is ready) on a compute stream of their own, so the
	// summary compares the two on one workload. Publishes save their rows
	// layer by layer as a pass computes them (Engine.Computed), and a few
	// are withdrawn before their last layer. The device's copies then take
	// their bytes over CopyBandwidth, not GPULatency. The engine, the
	// in-process store and the simulated device only.
	Layerwise bool
	// LayersPerGroup is how many layers each layer group has with Layerwise:
	// group g holds layers g, g+Groups, g+2·Groups, … (hybrid models
	// interleave their attention kinds so), each layer's key then value
	// taking an equal share of a row, so it divides SlotBytes/2.
	LayersPerGroup int
	// ComputePerLayer is how long computing one layer of one fetch occupies
	// the compute stream (gpu/sim Stream.Compute), with Layerwise.
	ComputePerLayer time.Duration
	// CopyBandwidth is the simulated copy engine's rate in bytes per second
	// with Layerwise (gpu/sim WithBandwidth): the engine's copies run one
	// after another, each taking its bytes over this rate. Rows are SlotBytes
	// small, so the rate is as small: it sets how long a layer's copy takes.
	CopyBandwidth float64

	// Backend is the store: "mem" (or "") for the in-process backend on the
	// virtual clock, or the URL of a Redis-compatible server
	// (redis://HOST:PORT[/DB], rediss://..., unix://...; see backend/redis.Open)
	// for a run on real time against a store other processes may share, or
	// a stack of tiers (backend/tiers): stores separated by commas, the first
	// one asked first, such as mem?capacity=1MiB,redis://HOST:PORT — a local
	// in-process tier bounded in bytes in front of the shared store (see
	// ParseTiers). A stack runs on real time whatever its tiers: it chains
	// them on goroutines of its own, which the virtual clock does not pace.
	// With a Redis store or a stack the fault rates must be 0
	// (WithoutFaults): the stores' own behaviour is the workload;
	// LatencyMedian, LatencySigma and StoreCapacity describe the in-process
	// store of a plain mem run and are not used.
	Backend string
	// RedisPrefix is the key prefix in a Redis store (DefaultRedisPrefix).
	// Runs that share the server, the prefix and the seed share units: the
	// second one fetches what the first published.
	RedisPrefix string

	// Device is the GPU: SimDevice ("sim", or "") or CUDADevice ("cuda":
	// GPU 0 through the CUDA driver, staging pinned by it). On the virtual
	// clock a round waits for the CUDA copies it queued, and GPULatency is
	// the simulated device's only.
	Device string
	// CUDALibrary is the CUDA driver library with CUDADevice (empty:
	// $KVREADY_CUDA_LIBRARY, else libcuda.so.1); `make fakecuda` builds a
	// fake one, bin/libfakecuda.so.
	CUDALibrary string
	// Metrics, if set, is shown the engine's counters as the run goes
	// (readiness.Config.Observer): MetricsServer.Collector, for
	// `kvready simulate --metrics-addr`. The engine only; one run per
	// collector.
	Metrics *metrics.Collector
	// OnStoreHealth, if set, is told when the Redis store is held for down
	// and when it is back (backend/redis.WithHealthFunc), from a goroutine
	// of the backend's own: `kvready simulate` prints a line on stderr for
	// each. Its metrics reach Metrics too.
	OnStoreHealth func(kvredis.HealthChange)
}

// DefaultRedisPrefix is the key prefix a run over a Redis store uses unless
// told otherwise: every run of a workload finds the units the others
// published.
const DefaultRedisPrefix = "kvready-sim:"

// MemBackend is the Backend value of the in-process store.
const MemBackend = "mem"

// RealTime reports whether the run is on real time: its store is a Redis
// server or a stack of tiers, not the in-process store with its injected
// faults.
func (c Config) RealTime() bool { return c.Backend != "" && c.Backend != MemBackend }

// Redis reports whether a Redis-compatible server is the run's store or one
// of its tiers. A stack of in-process tiers alone is on real time
// (RealTime) without one.
func (c Config) Redis() bool {
	if !c.Tiered() {
		return c.RealTime()
	}
	for _, part := range strings.Split(c.Backend, ",") {
		if head, _, _ := strings.Cut(part, "?"); head != MemBackend {
			return true
		}
	}
	return false
}

// WithoutFaults returns c with every fault rate at 0: what a run over a real
// store needs, since faults are injected by the in-process store alone.
func (c Config) WithoutFaults() Config {
	c.MissRate, c.PartialRate, c.FailRate, c.CancelRate = 0, 0, 0, 0
	c.QuiesceNotYetRate, c.NeverProvesRate, c.RejectRate = 0, 0, 0
	return c
}

// Defaults returns a configuration whose run exercises every outcome kind —
// served, partial, missed, failed, cancelled, rejected and timed out — and
// Quiesce answers that prove the access over only on a retry, in a few
// seconds. Nothing is contained with the defaults: set NeverProvesRate for a
// backend that never proves.
func Defaults() Config {
	return Config{
		Requests:          2000,
		Blocks:            8,
		Groups:            2,
		Slots:             512,
		Share:             0.7,
		Families:          24,
		Arrival:           100 * time.Microsecond,
		LatencyMedian:     time.Millisecond,
		LatencySigma:      1.0,
		Deadline:          10 * time.Millisecond,
		GPULatency:        50 * time.Microsecond,
		DrainGrace:        20 * time.Millisecond,
		StoreCapacity:     1 << 14,
		MissRate:          0.08,
		PartialRate:       0.08,
		FailRate:          0.04,
		CancelRate:        0.04,
		QuiesceNotYetRate: 0.05,
		RejectRate:        0.01,
		Seed:              1,
		Backend:           MemBackend,
		RedisPrefix:       DefaultRedisPrefix,
		Device:            SimDevice,
		LayersPerGroup:    4,
		ComputePerLayer:   50 * time.Microsecond,
		// One layer of a fully served fetch (8 blocks, 16 bytes a layer)
		// copies in 50µs: one round of the virtual clock.
		CopyBandwidth: 2.56e6,
	}
}

// LayerwiseArrival is the time between request arrivals of a layerwise run
// unless told otherwise (WithLayerwiseDefaults): each served fetch then
// occupies the copy engine and the compute stream for a few hundred
// microseconds, and at the 100µs of Defaults both would fall behind for
// ever.
const LayerwiseArrival = time.Millisecond

// WithLayerwiseDefaults returns c with Layerwise on and the arrival interval
// that suits it: LayerwiseArrival.
func (c Config) WithLayerwiseDefaults() Config {
	c.Layerwise, c.Arrival = true, LayerwiseArrival
	return c
}

// The request deadline and drain grace of a run over a real store unless
// told otherwise (WithRealTimeDefaults; kvready simulate with a Redis
// --backend). A real store answers in real time, on a machine whose
// scheduler adds its own delays: the virtual-time defaults (10 ms, 20 ms)
// time out healthy requests and contain their leases. The deadline is also
// the backend's attempt bound (backend/redis WithAttemptTimeout), so the
// bound plus the scheduling margin fits within the deadline plus the grace
// with 2 s to spare, as docs/backend-redis.md sizes it.
const (
	RealTimeDeadline   = 500 * time.Millisecond
	RealTimeDrainGrace = 2 * time.Second
)

// WithRealTimeDefaults returns c with the request deadline and the drain
// grace that suit a real store: RealTimeDeadline and RealTimeDrainGrace.
func (c Config) WithRealTimeDefaults() Config {
	c.Deadline, c.DrainGrace = RealTimeDeadline, RealTimeDrainGrace
	return c
}

// LossExpected names what in c asks for staging capacity to be lost — a
// backend that never proves (NeverProvesRate), a lost device (DeviceLossAt),
// the naive manager — or returns "" when nothing does: then a run that
// contains leases, quarantines slots or refuses requests for lack of them
// lost capacity it was not asked to (kvready simulate exits 3).
func (c Config) LossExpected() string {
	var why []string
	if c.NeverProvesRate > 0 {
		why = append(why, fmt.Sprintf("--never-proves-rate %g", c.NeverProvesRate))
	}
	if c.DeviceLossAt > 0 {
		why = append(why, "--device-loss-at "+formatDuration(c.DeviceLossAt))
	}
	if c.Naive {
		why = append(why, "--naive")
	}
	return strings.Join(why, ", ")
}

// FieldError names the configuration field (the CLI flag) that is wrong.
type FieldError struct {
	Field string // the flag name, e.g. "requests"
	Msg   string // what was given and what is wanted
}

// Error formats the field and the message, e.g. "requests: 0; want 1..1000000".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Limits that keep a run within memory and time a demo can afford.
const (
	maxRequests = 1_000_000
	maxBlocks   = 4096
	maxGroups   = 64
	maxSlots    = 1 << 20
	maxFamilies = 1 << 20
	maxLatency  = time.Hour
	// maxBandwidth keeps a copy's duration, bytes over the rate, above a
	// nanosecond's rounding for every row size the run has.
	maxBandwidth = 1e12
)

// Validate reports every invalid field at once, each as a *FieldError.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	intIn := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(field, "%d; want %d..%d", v, lo, hi)
		}
	}
	intIn("requests", c.Requests, 1, maxRequests)
	intIn("blocks", c.Blocks, 1, maxBlocks)
	intIn("groups", c.Groups, 1, maxGroups)
	intIn("slots", c.Slots, 1, maxSlots)
	intIn("families", c.Families, 1, maxFamilies)
	intIn("window", c.Window, 0, maxBlocks*TokensPerBlock)
	intIn("sink-blocks", c.SinkBlocks, 0, maxBlocks)
	if c.SinkBlocks > 0 && c.Window == 0 {
		bad("sink-blocks", "%d sink blocks without a window; want --window too", c.SinkBlocks)
	}
	if c.Slots >= 1 && c.Blocks >= 1 && c.Blocks > c.Slots {
		bad("slots", "%d slots per group cannot hold one request's %d blocks; want slots >= blocks", c.Slots, c.Blocks)
	}
	prob := func(field string, v float64) {
		if math.IsNaN(v) || v < 0 || v > 1 {
			bad(field, "%v; want a probability in 0..1", v)
		}
	}
	prob("share", c.Share)
	rates := []struct {
		field string
		v     float64
	}{{"miss-rate", c.MissRate}, {"partial-rate", c.PartialRate}, {"fail-rate", c.FailRate},
		{"cancel-rate", c.CancelRate}, {"quiesce-not-yet-rate", c.QuiesceNotYetRate},
		{"never-proves-rate", c.NeverProvesRate}, {"reject-rate", c.RejectRate}}
	sum := 0.0
	var named []string
	for _, r := range rates {
		prob(r.field, r.v)
		if c.RealTime() && r.v > 0 {
			bad(r.field, "%v: fault injection belongs to the in-process store (--backend mem); with a Redis store or a stack of tiers the stores' own behaviour is the workload, so it must be 0", r.v)
		}
		if r.v > 0 {
			named = append(named, fmt.Sprintf("%s %g", r.field, r.v))
		}
		sum += r.v
	}
	if sum > 1+1e-9 {
		bad("fault-rates", "%s add up to %.3f; want at most 1", strings.Join(named, " + "), sum)
	}
	if c.StoreCapacity < 0 {
		bad("store-capacity", "%d; want a non-negative number of rows (0: unbounded)", c.StoreCapacity)
	}
	dur := func(field string, v time.Duration, zeroOK bool) {
		switch {
		case v < 0 || (v == 0 && !zeroOK):
			bad(field, "%v; want a positive duration", v)
		case v > maxLatency:
			bad(field, "%v; want at most %v", v, maxLatency)
		}
	}
	dur("arrival", c.Arrival, false)
	dur("latency-median", c.LatencyMedian, false)
	dur("deadline", c.Deadline, false)
	dur("gpu-latency", c.GPULatency, false)
	dur("drain-grace", c.DrainGrace, false)
	dur("device-loss-at", c.DeviceLossAt, true)
	if math.IsNaN(c.LatencySigma) || c.LatencySigma < 0 || c.LatencySigma > 4 {
		bad("latency-sigma", "%v; want 0..4", c.LatencySigma)
	}
	if c.RealTime() {
		if c.Tiered() {
			if _, err := ParseTiers(c.Backend); err != nil {
				for _, one := range unjoin(err) {
					bad("backend", "%v", one)
				}
			}
		} else if msg := checkStoreURL(c.Backend, storeWant); msg != "" {
			bad("backend", "%s", msg)
		}
		if c.Naive {
			bad("naive", "the naive manager runs over the in-process store only: against a real store or a stack of tiers its early frees would be real data races in this process")
		}
		if strings.ContainsAny(c.RedisPrefix, "{}") {
			bad("redis-prefix", "%q contains '{' or '}', which would take over the Redis Cluster hash tag", c.RedisPrefix)
		}
	}
	errs = append(errs, c.deviceErrors()...)
	errs = append(errs, c.layerwiseErrors()...)
	if c.Containment > readiness.Recover {
		bad("containment", "%v; want quarantine, fatal or recover", c.Containment)
	}
	if c.MaxOutstanding < 0 {
		bad("max-outstanding", "%d; want a non-negative number of submissions (0: the backend's own limit, if any)", c.MaxOutstanding)
	}
	if c.Naive && c.Containment != readiness.Quarantine {
		bad("containment", "%v: the naive manager never contains anything; the policy is the engine's", c.Containment)
	}
	if c.Naive && c.MaxOutstanding != 0 {
		bad("max-outstanding", "%d: the naive manager submits without an admission bound; the bound is the engine's", c.MaxOutstanding)
	}
	if c.Naive && c.Metrics != nil {
		bad("metrics-addr", "the naive manager has no engine whose metrics could be served; drop --naive or --metrics-addr")
	}
	return errors.Join(errs...)
}

// storeWant is what --backend may be, said in every refusal of a store.
const storeWant = "want mem, or redis://HOST:PORT[/DB] (rediss:// for TLS, unix:///PATH for a socket), or a stack of tiers: mem?capacity=BYTES,redis://HOST:PORT"

// checkStoreURL says what is wrong with a store URL, or "", ending with want.
func checkStoreURL(raw, want string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Sprintf("not a URL; %s", want)
	}
	switch u.Scheme {
	case "redis", "rediss":
		if u.Host == "" {
			return fmt.Sprintf("%s names no host; %s", u.Redacted(), want)
		}
	case "unix":
		if u.Path == "" {
			return fmt.Sprintf("%s names no socket; %s", u.Redacted(), want)
		}
	default:
		return fmt.Sprintf("%q; %s", u.Redacted(), want)
	}
	// The backend's own options in the query (breaker_failures=...,
	// pool_size=...) are checked as Open checks them, without connecting.
	if err := kvredis.CheckURL(raw); err != nil {
		return err.Error()
	}
	return ""
}

// Attention returns each layer group's attention: full, except the last group
// when Window is set.
func (c Config) Attention() []staging.Attention {
	out := make([]staging.Attention, max(c.Groups, 0))
	if c.Window > 0 && len(out) > 0 {
		out[len(out)-1] = staging.Attention{Window: c.Window, SinkBlocks: c.SinkBlocks}
	}
	return out
}
