package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/simulate"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

func init() {
	register(command{name: "simulate", summary: "run the simulated KV cache manager and its independent checker", run: runSimulate})
}

func runSimulate(e *env, args []string) int {
	fs := newFlags(e, "simulate", "[flags]")
	cfg := simulate.Defaults()
	fs.IntVar(&cfg.Requests, "requests", cfg.Requests, "requests to serve")
	fs.IntVar(&cfg.Blocks, "blocks", cfg.Blocks, "blocks per request")
	fs.IntVar(&cfg.Groups, "groups", cfg.Groups, "layer groups (rows per block)")
	fs.IntVar(&cfg.Window, "window", cfg.Window, "give the last layer group a sliding window of this many `tokens` (0: full attention everywhere)")
	fs.IntVar(&cfg.SinkBlocks, "sink-blocks", cfg.SinkBlocks, "sink blocks of the window group (with --window)")
	fs.IntVar(&cfg.Slots, "slots", cfg.Slots, "staging slots per pool group")
	fs.Float64Var(&cfg.Share, "share", cfg.Share, "prefix-sharing ratio: fraction of requests whose prompt starts with a shared prefix")
	fs.IntVar(&cfg.Families, "families", cfg.Families, "distinct shared prefixes")
	fs.DurationVar(&cfg.Arrival, "arrival", cfg.Arrival, "virtual time between request arrivals")
	fs.DurationVar(&cfg.LatencyMedian, "latency-median", cfg.LatencyMedian, "median backend delivery latency (log-normal)")
	fs.Float64Var(&cfg.LatencySigma, "latency-sigma", cfg.LatencySigma, "log-normal sigma of the backend latency (0: every delivery takes the median)")
	fs.DurationVar(&cfg.Deadline, "deadline", cfg.Deadline, "request deadline for an outcome; slower deliveries time out. With a Redis --backend or a stack of tiers the default is "+simulate.RealTimeDeadline.String()+", which is also the backend's attempt bound")
	fs.DurationVar(&cfg.GPULatency, "gpu-latency", cfg.GPULatency, "simulated GPU copy latency")
	fs.Float64Var(&cfg.MissRate, "miss-rate", cfg.MissRate, "probability a submission misses")
	fs.Float64Var(&cfg.PartialRate, "partial-rate", cfg.PartialRate, "probability a submission is served in part")
	fs.Float64Var(&cfg.FailRate, "fail-rate", cfg.FailRate, "probability a submission fails")
	fs.Float64Var(&cfg.CancelRate, "cancel-rate", cfg.CancelRate, "probability a submission is cancelled (locally or by the peer)")
	fs.Float64Var(&cfg.QuiesceNotYetRate, "quiesce-not-yet-rate", cfg.QuiesceNotYetRate, "probability Quiesce answers \"not yet\" a few times before proving a submission's access over (the engine retries)")
	fs.Float64Var(&cfg.NeverProvesRate, "never-proves-rate", cfg.NeverProvesRate, "probability Quiesce never proves a submission's access over (the engine contains it at its deadline)")
	fs.Float64Var(&cfg.RejectRate, "reject-rate", cfg.RejectRate, "probability a submission is rejected before any work")
	fs.DurationVar(&cfg.DrainGrace, "drain-grace", cfg.DrainGrace, "how long access may stay unproven after the drain starts before the engine contains the lease. With a Redis --backend or a stack of tiers the default is "+simulate.RealTimeDrainGrace.String()+": room for the machine's scheduling after the attempt bound")
	policy := policyFlag{&cfg.Containment}
	fs.Var(policy, "containment", "the containment `policy`: what the engine does with a lease whose access is still unproven at its containment deadline: quarantine (its slots stay out for ever, the rest goes on), fatal (the engine halts; the run stops, exit status 3) or recover (asked again slowly; a later proof returns its slots)")
	fs.IntVar(&cfg.MaxOutstanding, "max-outstanding", cfg.MaxOutstanding, "bound on the submissions outstanding at the backend; leases beyond it wait before submission, where no deadline runs (0: the backend's own limit — backend/redis's AdmissionLimit; the in-process store has none)")
	fs.IntVar(&cfg.StoreCapacity, "store-capacity", cfg.StoreCapacity, "rows the store holds before evicting the least recently used (0: unbounded)")
	fs.DurationVar(&cfg.DeviceLossAt, "device-loss-at", cfg.DeviceLossAt, "lose the GPU at this virtual time (0: never)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the workload and the fault choices")
	fs.BoolVar(&cfg.Naive, "naive", false, "replace the engine by a naive manager that frees slots on outcome, error or timeout (in-process store only)")
	fs.StringVar(&cfg.Backend, "backend", cfg.Backend, "the store: mem (in process, virtual clock, fault injection), a `URL` redis://HOST:PORT[/DB] (a Redis-compatible server other runs may share; real time, no fault injection), "+
		"or a stack of tiers, stores separated by commas, the first asked first: mem?capacity=BYTES,redis://HOST:PORT puts a local in-process tier of at most BYTES (65536, 64KiB, 1MiB; least recently used rows evicted) in front of the shared Redis store, and mem?capacity=BYTES,mem one in front of an in-process shared tier (real time, no fault injection; up to "+strconv.Itoa(simulate.MaxTiers)+" tiers, Redis last). "+
		"A Redis store that stops answering is held for down after breaker_failures="+strconv.Itoa(kvredis.DefaultBreakerFailures)+" calls in a row are refused or reset, or one gets no reply within --deadline: requests then fail fast, and a PING every breaker_probe="+kvredis.DefaultBreakerProbe.String()+
		" doubling to breaker_probe_max="+kvredis.DefaultBreakerProbeMax.String()+" looks for its return; set them in the URL's query (breaker_failures=0: off)")
	fs.StringVar(&cfg.RedisPrefix, "redis-prefix", cfg.RedisPrefix, "key prefix in a Redis store: runs of one workload (--seed) with the same prefix share units")
	fs.StringVar(&cfg.Device, "device", cfg.Device, "the GPU: sim (simulated, virtual clock) or cuda (GPU 0 through the CUDA driver: pinned staging, copies on a CUDA stream)")
	fs.StringVar(&cfg.CUDALibrary, "cuda-library", cfg.CUDALibrary, "the CUDA driver library with --device cuda (`PATH`; default $KVREADY_CUDA_LIBRARY, else libcuda.so.1; make fakecuda builds bin/libfakecuda.so)")
	fs.BoolVar(&cfg.Layerwise, "layerwise", false, "compute each fetch's forward pass on the simulated device layer by layer (SPEC §4 rule 16: wait for layer l, read it, compute it while later layers still copy) and, on the same fetches, after the whole lease is ready; the summary and the report compare the two. --arrival then defaults to "+simulate.LayerwiseArrival.String()+", and copies take their bytes over --copy-bandwidth (not --gpu-latency)")
	fs.IntVar(&cfg.LayersPerGroup, "layers-per-group", cfg.LayersPerGroup, "layers of each layer group with --layerwise (group g holds layers g, g+groups, …); a divisor of 32: each layer's key and value take an equal share of a 64-byte row")
	fs.DurationVar(&cfg.ComputePerLayer, "compute-per-layer", cfg.ComputePerLayer, "how long computing one layer of one fetch occupies the compute stream, with --layerwise")
	fs.Float64Var(&cfg.CopyBandwidth, "copy-bandwidth", cfg.CopyBandwidth, "the simulated copy engine's rate in `bytes/s` with --layerwise: copies run one after another, each taking its bytes over this rate (the default copies one layer of a fully served 8-block fetch, 128 bytes, in 50µs)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	compare := fs.Bool("compare-naive", false, "then run the naive manager on the same workload, print both summaries, and put both runs in one --report")
	report := fs.String("report", "", "write an HTML report with plots into this `DIR`")
	metricsAddr := fs.String("metrics-addr", "", "serve the engine's Prometheus metrics on http://`HOST:PORT`/metrics while the run goes on (port 0: any free port)")
	disagg := fs.Bool("disagg", false, "disaggregated serving: prefill processes write each request's KV cache peer to peer into the decode side's pages over the simulated network (transfer/sim, with its faults) or, with --transport ucx, over UCX between this process and a prefill process it starts; an independent checker watches the pages; --slots is then the decode pages, --blocks a request's pages, --drain-grace the grace after the deadline before pages are contained. See docs/simulate.md")
	disaggCfg := disaggFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kvready simulate [flags]")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), simulateNotes())
	}
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() > 0 {
		e.errorf("simulate takes no arguments, got %q", fs.Args())
		return exitUsage
	}
	if !disaggUsable(e, fs, *disagg) {
		return exitUsage
	}
	if *disagg {
		return simulateDisagg(e, fs, disaggConfig(fs, cfg, disaggCfg), *asJSON, *compare, *report)
	}
	usable := layerwiseFlags(e, fs, cfg.Layerwise)
	if cfg.Layerwise {
		cfg = layerwiseDefaults(fs, cfg)
	}
	if cfg.RealTime() {
		usable = storeFlags(e, fs) && usable
		cfg = cfg.WithoutFaults() // those given explicitly are refused above
		cfg = realTimeDefaults(fs, cfg)
	}
	metricsURL := ""
	if *metricsAddr != "" {
		url, stop, ok := serveMetrics(e, &cfg, *metricsAddr)
		if ok {
			defer stop()
		}
		metricsURL, usable = url, usable && ok
	}
	if err := cfg.Validate(); err != nil {
		reportConfig(e, fs, err)
		usable = false
	}
	if *compare && (cfg.Naive || cfg.RealTime() || cfg.Device == simulate.CUDADevice || cfg.Layerwise) {
		e.errorf("--compare-naive: runs the engine, then the naive manager, over the in-process store and the simulated device, whole leases (the naive manager has no per-layer readiness); drop --naive, --backend, --device cuda and --layerwise")
		usable = false
	}
	if *report != "" {
		if err := checkWritable(*report); err != nil {
			e.errorf("--report: %v; want a directory this process can write (it is created if missing)", err)
			usable = false
		}
	}
	if !usable {
		return exitUsage
	}
	if metricsURL != "" {
		fmt.Fprintf(e.stderr, "simulate: serving metrics on %s\n", metricsURL)
	}
	if cfg.Redis() {
		// The client would log every failed dial from its own goroutines;
		// what failed is the one-line error, and the summary's counts.
		goredis.SetLogger(quietClient{})
	}

	ctx, stopSignals := interruptible()
	defer stopSignals()

	status := exitOK
	sum, err := simulateOnce(ctx, e, cfg, e.stderr, *asJSON)
	if sum == nil {
		return exitFail
	}
	if err != nil && sum.Halted == "" {
		status = exitFail // a halt leaves requests unfinished by design: exitCapacity below
	}
	var naive *simulate.Summary
	if *compare && ctx.Err() == nil {
		if !*asJSON {
			fmt.Fprintln(e.stdout, "\n--- the same workload with a naive release policy (free on outcome, error or timeout):")
		}
		naiveCfg := cfg
		naiveCfg.Naive = true
		naiveCfg.Metrics = nil // the naive manager has no engine to observe
		// Nor a containment policy or an admission bound: those are the engine's.
		naiveCfg.Containment, naiveCfg.MaxOutstanding = readiness.Quarantine, 0
		if naive, _ = simulateOnce(ctx, e, naiveCfg, e.stderr, *asJSON); naive == nil {
			return exitFail
		}
		if !*asJSON && !naive.Safe() {
			fmt.Fprintln(e.stdout, "naive manager: the checker caught it recycling slots before their fence, as expected")
		}
	}
	if *asJSON {
		if s := printSummaryJSON(e, sum, naive); s != exitOK {
			return s
		}
	}
	reportFailed := false
	if *report != "" {
		rerr := error(nil)
		if naive != nil {
			rerr = simulate.WriteComparison(*report, sum, naive)
		} else {
			rerr = simulate.WriteReport(*report, sum)
		}
		if rerr != nil {
			// A report directory that cannot be written is exit 2 however late
			// it shows (here, after the run: it passed the check before it),
			// unless the run itself says something worse (below).
			e.errorf("--report: %v", rerr)
			reportFailed = true
		} else if !*asJSON {
			fmt.Fprintf(e.stdout, "report: %s/%s\n", *report, simulate.ReportIndex)
		}
	}
	switch {
	case cfg.Naive && !sum.Safe():
		if !*asJSON {
			fmt.Fprintln(e.stdout, "naive manager: the checker caught it recycling slots before their fence, as expected")
		}
	case !sum.Safe():
		e.errorf("the checker found a safety violation in the engine's run")
		status = exitFail
	}
	switch {
	case status != exitOK:
	case sum.Halted != "":
		e.errorf("capacity lost: the engine halted under --containment fatal; a manager restarts it (exit status %d)", exitCapacity)
		status = exitCapacity
	case !sum.Complete() || (naive != nil && !naive.Complete()):
		// Run's error says the same; the status and the summary always agree.
		status = exitFail
	case sum.CapacityLost() && sum.LossExpected == "":
		e.errorf("capacity lost: %s, and nothing in the run asked for it (exit status %d)%s",
			strings.TrimPrefix(sum.PoolVerdict(), "CAPACITY LOST: "), exitCapacity, sizingHint(cfg))
		status = exitCapacity
	}
	if ctx.Err() != nil {
		e.errorf("interrupted: the summary and the report cover the run so far")
		status = exitInterrupted
	}
	if reportFailed && status == exitOK {
		status = exitUsage
	}
	return status
}

// interruptible is the run's context: Ctrl-C (or SIGTERM) stops the run
// early — the summary so far is printed, the report written, and the status
// is exitInterrupted. A second one ends the process at once.
func interruptible() (context.Context, context.CancelFunc) {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stopSignals() // the default handling again: a second Ctrl-C ends the process
	}()
	return ctx, stopSignals
}

// simulateNotes ends simulate -h: the two sets of defaults, and what the
// exit status says about a run.
func simulateNotes() string {
	d, dd, du := simulate.Defaults(), simulate.DisaggDefaults(), simulate.DisaggUCXDefaults()
	return fmt.Sprintf(`
defaults: over the in-process store (--backend mem) the run is on a virtual
clock, with --deadline %v and --drain-grace %v. With a Redis --backend or a
stack of tiers (--backend mem?capacity=BYTES,redis://HOST:PORT) it is on real
time, and --deadline defaults to %v (also a Redis store's attempt bound),
--drain-grace to %v; a flag given on the command line always wins.
With --layerwise --arrival defaults to %v.
With --disagg the run moves pages peer to peer over the simulated network
(make demo-disagg): --requests %d, --slots %d decode pages, --blocks %d pages a
request, --arrival %v, --deadline %v, --drain-grace %v unless given, and the
flags marked "with --disagg" describe its writers and network. With --disagg
--transport ucx the prefill side is a second process (this program re-executed,
internal) over UCX, on the machine's clock (make demo-disagg-ucx): --requests
%d, --slots %d, --blocks %d, --arrival %v, --deadline %v, --drain-grace %v,
--ucx-tls tcp, --peer-restarts %d, --peer-pauses %d unless given.

exit status:
  0    done: the checker found nothing wrong, every request ended, and the
       staging pool is whole, or lost only as the run asked (--never-proves-rate,
       --device-loss-at, --naive)
  1    the checker found a safety violation, the run failed, or requests did
       not end
  2    usage: a bad flag or value, flags that do not go together, a report
       directory it cannot write, an address it cannot listen on
  3    capacity lost: leases were contained (their slots quarantined, or
       recovered later) or refused for lack of slots, and nothing in the run
       asked for it; or the engine halted under --containment fatal (the
       summary's "capacity" section says what, and why)
  130  interrupted (Ctrl-C, SIGTERM): the summary so far is printed and the
       report written
`, d.Deadline, d.DrainGrace, simulate.RealTimeDeadline, simulate.RealTimeDrainGrace, simulate.LayerwiseArrival,
		dd.Requests, dd.Pages, dd.PagesPerRequest, dd.Arrival, dd.Deadline, dd.Grace,
		du.Requests, du.Pages, du.PagesPerRequest, du.Arrival, du.Deadline, du.Grace, du.Restarts, du.Pauses)
}

// realTimeDefaults gives a run over a real store the request deadline and
// drain grace that suit one, unless the command line set them: explicit
// flags always win.
func realTimeDefaults(fs *flag.FlagSet, cfg simulate.Config) simulate.Config {
	rt := cfg.WithRealTimeDefaults()
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "deadline":
			rt.Deadline = cfg.Deadline
		case "drain-grace":
			rt.DrainGrace = cfg.DrainGrace
		}
	})
	return rt
}

// layerwiseOnly are the flags that describe the layer-by-layer forward pass.
var layerwiseOnly = []string{"layers-per-group", "compute-per-layer", "copy-bandwidth"}

// layerwiseFlags refuses the layerwise flags given without --layerwise
// (they would change nothing), and --gpu-latency with it (the copies then
// take their bytes' time instead).
func layerwiseFlags(e *env, fs *flag.FlagSet, on bool) bool {
	ok := true
	fs.Visit(func(f *flag.Flag) {
		switch {
		case !on && slices.Contains(layerwiseOnly, f.Name):
			e.errorf("--%s: describes the layer-by-layer forward pass; want --layerwise too", f.Name)
			ok = false
		case on && f.Name == "gpu-latency":
			e.errorf("--gpu-latency: with --layerwise each copy takes its bytes over --copy-bandwidth; drop --gpu-latency")
			ok = false
		}
	})
	return ok
}

// layerwiseDefaults gives a layerwise run its arrival interval unless the
// command line set one: explicit flags always win.
func layerwiseDefaults(fs *flag.FlagSet, cfg simulate.Config) simulate.Config {
	lw := cfg.WithLayerwiseDefaults()
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "arrival" {
			lw.Arrival = cfg.Arrival
		}
	})
	return lw
}

// sizingHint points a run over a real store that lost capacity at how the
// deadline and the grace are sized.
func sizingHint(cfg simulate.Config) string {
	if !cfg.RealTime() || cfg.Containment == readiness.Fatal {
		return ""
	}
	return fmt.Sprintf("; over a real store the backend's attempt bound (--deadline %s) plus the machine's scheduling margin must fit within --deadline + --drain-grace (%s): see docs/backend-redis.md, Sizing",
		simulate.FormatDuration(cfg.Deadline), simulate.FormatDuration(cfg.Deadline+cfg.DrainGrace))
}

// policyFlag is --containment: a containment policy by name.
type policyFlag struct{ p *readiness.Policy }

func (f policyFlag) String() string {
	if f.p == nil {
		return "" // the flag package's zero value: so -h prints the default
	}
	return f.p.String()
}

// Set parses quarantine, fatal or recover; any other name is refused,
// naming the three.
func (f policyFlag) Set(name string) error {
	p, err := readiness.ParsePolicy(name)
	if err != nil { // the flag package names the value and the flag
		return errors.New("want quarantine, fatal or recover")
	}
	*f.p = p
	return nil
}

// printSummaryJSON prints the run's summary as one JSON object; with the
// naive manager's run beside it, one object holding both, under their
// managers' names: {"kvready": {...}, "naive": {...}}.
func printSummaryJSON(e *env, sum, naive *simulate.Summary) int {
	var v any = sum
	if naive != nil {
		v = map[string]*simulate.Summary{sum.Manager: sum, naive.Manager: naive}
	}
	out, err := json.Marshal(v)
	if err != nil {
		e.errorf("encoding the summary: %v", err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "%s\n", out)
	return exitOK
}

// reportConfig prints each field error of a refused configuration against the
// flag at fault. Fault rates that add up to more than 1 are blamed on the rate
// flags the user gave, not on a flag that only kept its default.
func reportConfig(e *env, fs *flag.FlagSet, err error) {
	var fe *simulate.FieldError
	for _, one := range unjoin(err) {
		if !errors.As(one, &fe) {
			e.errorf("%v", one)
			continue
		}
		field := "--" + fe.Field
		if fe.Field == "fault-rates" {
			var given []string
			fs.Visit(func(f *flag.Flag) {
				if strings.HasSuffix(f.Name, "-rate") && slices.Contains(memOnly, f.Name) {
					given = append(given, "--"+f.Name)
				}
			})
			if len(given) > 0 {
				field = strings.Join(given, ", ")
			} else {
				field = "the fault rates"
			}
		}
		e.errorf("%s: %s", field, fe.Msg)
	}
}

// checkWritable makes dir if it is missing and proves a file can be created
// in it, so that a run is not lost to a report that cannot be written.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".kvready-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	cerr := f.Close()
	if rerr := os.Remove(name); cerr == nil {
		cerr = rerr
	}
	return cerr
}

// simulateOnce runs cfg, its progress on progressOut named after its
// manager, and prints its summary as a table unless asJSON (the caller prints
// the JSON once every run is done). It returns the summary — nil when there
// is none to show, having said why — and the run's error, already printed.
func simulateOnce(ctx context.Context, e *env, cfg simulate.Config, progressOut io.Writer, asJSON bool) (*simulate.Summary, error) {
	name := "kvready"
	if cfg.Naive {
		name = "naive"
	}
	// The store's health is told from a goroutine of the backend's own,
	// between progress lines: one writer, one line at a time.
	out := &lineWriter{w: progressOut}
	if cfg.Redis() {
		cfg.OnStoreHealth = storeHealthLine(out, redisStore(cfg))
	}
	sum, err := simulate.Run(ctx, cfg, progressReporter(out, cfg.Requests, name))
	if err != nil && !(sum != nil && sum.Interrupted && errors.Is(err, context.Canceled)) {
		// An interrupted run is said once, in plain words, when it ends.
		e.errorf("%v", err)
	}
	if sum == nil {
		return nil, err
	}
	if !asJSON {
		if werr := sum.WriteTable(e.stdout); werr != nil {
			e.errorf("writing the summary: %v", werr)
			return nil, werr
		}
	}
	return sum, err
}

// memOnly are the flags that describe the in-process store: its injected
// faults, latency and capacity. A Redis store has its own.
var memOnly = []string{"miss-rate", "partial-rate", "fail-rate", "cancel-rate", "quiesce-not-yet-rate",
	"never-proves-rate", "reject-rate", "latency-median", "latency-sigma", "store-capacity"}

// storeFlags refuses, with a Redis store or a stack of tiers, every flag
// given that only the in-process store honours, naming each; it reports
// whether there was none.
func storeFlags(e *env, fs *flag.FlagSet) bool {
	ok := true
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(memOnly, f.Name) {
			e.errorf("--%s: describes the in-process store (--backend mem): with a Redis store or a stack of tiers faults are not injected, latency is the stores' own, and a tier's capacity is given in --backend (mem?capacity=BYTES); drop the flag", f.Name)
			ok = false
		}
	})
	return ok
}

// redisStore is the Redis store of cfg: its Backend, or a stack's Redis
// tier.
func redisStore(cfg simulate.Config) string {
	if !cfg.Tiered() {
		return cfg.Backend
	}
	specs, _ := simulate.ParseTiers(cfg.Backend) // validated before any run
	for _, s := range specs {
		if s.URL != "" {
			return s.URL
		}
	}
	return cfg.Backend
}

// lineWriter serialises writes from the run's goroutine (progress) and the
// backend's (the store's health).
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// storeHealthLine prints one line on w when the store is held for down and
// one when it is back: what an operator watching the run needs to know
// while it happens (the summary says what it cost).
func storeHealthLine(w io.Writer, backend string) func(kvredis.HealthChange) {
	store := backend
	if u, err := url.Parse(backend); err == nil {
		store = u.Redacted()
	}
	return func(c kvredis.HealthChange) {
		at := c.At.Format("15:04:05.000")
		if !c.Reachable {
			fmt.Fprintf(w, "simulate: store %s unavailable at %s (%s): new requests fail fast until a PING answers\n", store, at, c.Reason)
			return
		}
		fmt.Fprintf(w, "simulate: store %s back at %s, after %s unavailable (a PING answered)\n", store, at, simulate.FormatDuration(c.Down))
	}
}

// quietClient is the Redis client's logger during a run: it drops every
// message. A store that cannot be reached is one error line from the run,
// and a store lost mid-run shows in the summary's counts.
type quietClient struct{}

// Printf drops the message.
func (quietClient) Printf(context.Context, string, ...any) {}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// progressReporter draws a progress bar on a terminal, and prints a plain line
// every tenth of the run otherwise (logs, CI, pipes); both name the run
// ("simulate kvready", "simulate naive").
func progressReporter(w io.Writer, total int, run string) simulate.Progress {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return progressBar(w, total, run)
	}
	return progressLines(w, total, run)
}

// barRedraw is the shortest time between two redraws of the progress bar:
// at most ten a second, however fast requests end.
const barRedraw = 100 * time.Millisecond

// progressBar draws a bar on a terminal, redrawn at most every barRedraw
// and once more at the end.
func progressBar(w io.Writer, total int, run string) simulate.Progress {
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("simulate "+run),
		progressbar.OptionShowCount(),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(barRedraw))
	return func(done, _ int) { _ = bar.Set(done) }
}

// progressLines prints a plain line every tenth of the run (logs, CI, pipes).
func progressLines(w io.Writer, total int, run string) simulate.Progress {
	step := max(1, total/10)
	next := step
	return func(done, total int) {
		for done >= next && next <= total {
			fmt.Fprintf(w, "simulate %s: %d/%d requests\n", run, next, total)
			next += step
		}
	}
}
