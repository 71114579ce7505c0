package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kvready/kvready/contract"
	"pgregory.net/rapid"
)

// Memory is the staging memory the kit lends a backend under test: Row
// resolves a unit's coordinates (local_group, local) to its row, as the
// engine's staging does. It is safe for concurrent use.
type Memory interface {
	Row(localGroup, local int) ([]byte, bool)
}

// FetchSubject is one fetching backend under test, built fresh for each trial.
type FetchSubject struct {
	// Fetcher is the backend.
	Fetcher contract.Fetcher
	// Put stores row under (extent, name), as an earlier publication would,
	// so that a fetch can find it. Required.
	Put func(extent string, name contract.Name, row []byte)
	// Close, if set, ends the backend after the trial.
	Close func() error
}

// PublishSubject is one publishing backend under test, built fresh for each
// trial.
type PublishSubject struct {
	// Publisher is the backend.
	Publisher contract.Publisher
	// Get, if set, reads back what a publication stored under (extent, name),
	// so the kit can check that what was published is what was staged.
	Get func(extent string, name contract.Name) ([]byte, bool)
	// Close, if set, ends the backend after the trial.
	Close func() error
}

// NewFetcher builds a fetching backend over the kit's staging memory.
type NewFetcher func(mem Memory) (FetchSubject, error)

// NewPublisher builds a publishing backend over the kit's staging memory.
type NewPublisher func(mem Memory) (PublishSubject, error)

// Option adjusts a conformance check.
type Option func(*config)

type config struct {
	mayFail    bool
	wait       time.Duration
	failDir    string
	failDirs   bool // failDir was set by FailFiles
	watchFloor time.Duration
	watchOneIn int
	callBound  time.Duration
}

// Defaults of the options.
const (
	// DefaultWait bounds each Settle and Quiesce call the kit makes.
	DefaultWait = 2 * time.Second
	// DefaultWatchFloor is the shortest window the kit watches memory for
	// after Quiesce answered true, in a watched trial.
	DefaultWatchFloor = 50 * time.Millisecond
	// DefaultWatchOneIn: one trial in this many is a watched trial.
	DefaultWatchOneIn = 8
	// DefaultCallBound is how long a call that must never block
	// (RequestCancel) may take before the kit reports that it blocked.
	DefaultCallBound = 500 * time.Millisecond
)

// watchLatencies is how many times the backend's observed latency (from the
// submission to the outcome or to the proof, whichever came later) a watched
// trial's window lasts, when that is longer than the floor.
const watchLatencies = 4

// MayFail declares that the backend under test fails or cancels deliveries
// on purpose (fault injection). A failure is then indistinguishable from a
// miss reported as a failure, so the known-miss rule is not checked; every
// other rule is.
func MayFail() Option { return func(c *config) { c.mayFail = true } }

// Wait bounds each Settle and Quiesce call the kit makes (DefaultWait), and
// the longest watch window.
func Wait(d time.Duration) Option { return func(c *config) { c.wait = d } }

// WatchFloor sets the shortest window (DefaultWatchFloor) for which a watched
// trial keeps reading every row of staging after Quiesce answered true. The
// window is watchLatencies times the backend's observed latency when that is
// longer, and never longer than Wait. Raise it for a backend whose late
// writes could come later; a floor under a millisecond is taken as one.
func WatchFloor(d time.Duration) Option { return func(c *config) { c.watchFloor = d } }

// WatchOneIn makes one trial in n a watched trial (DefaultWatchOneIn; 1
// watches every trial, at the cost of a window per trial). The others watch
// for a millisecond, or the backend's observed latency if longer, up to the
// floor. Whether a trial is watched is drawn with the trial, so a failure
// replays and shrinks like any other.
func WatchOneIn(n int) Option { return func(c *config) { c.watchOneIn = n } }

// CallBound sets how long RequestCancel may take before the kit reports
// that it blocked (DefaultCallBound). RequestCancel must never block: a
// correct one returns in microseconds.
func CallBound(d time.Duration) Option { return func(c *config) { c.callBound = d } }

// FailFiles names the directory where the kit keeps rapid's failure file of a
// failed check (replay it with -rapid.failfile=PATH). By default it goes to
// DefaultFailDir, never into the testdata/ of the package under test;
// FailFiles("") leaves it where rapid puts it (testdata/rapid/ of the package).
func FailFiles(dir string) Option {
	return func(c *config) { c.failDir, c.failDirs = dir, true }
}

// DefaultFailDir is where the kit keeps failure files unless FailFiles says
// otherwise: kvready-conformance under the system's temporary directory.
func DefaultFailDir() string { return filepath.Join(os.TempDir(), "kvready-conformance") }

// TB is what the kit needs of a test: *testing.T has it.
type TB = rapid.TB

// The rules the kit checks, as named in a Violation.
const (
	RuleServedSubset      = "served names are a subset of the requested ones"
	RuleUnservedUntouched = "unserved destinations are left untouched"
	RuleOutsideUntouched  = "memory outside the extent is never touched"
	RuleServedContent     = "served destinations hold the stored content"
	RuleStable            = "an outcome, once returned, never changes"
	RuleNoLateWrite       = "no write after Quiesce answered true"
	RuleKnownMiss         = "a known-absent name is a miss, never a failure"
	RuleRejectedNoEffect  = "SubmissionRejected has no effects"
	RuleProbe             = "Probe is advisory and reports failure as an error"
	RuleQuiesceCancelled  = "Quiesce with a cancelled context is never true"
	RuleAttemptOrError    = "a submission returns an attempt or SubmissionRejected, never both or neither"
	RuleSettle            = "Settle returns once every attempt has an outcome"
	RulePublishedContent  = "what is published is what was staged"
	RulePublishReadOnly   = "a publication never writes its sources"

	// The +cancel-request-v1 rules, checked for attempts that are
	// contract.Cancellable.
	RuleCancelNeverBlocks = "RequestCancel never blocks"
	RuleCancelAnswer      = "RequestCancel answers CancelRequested or CancelUnsupported"
	RuleCancelIdempotent  = "a second RequestCancel answers the same and starts no new work"
	RuleCancelNoNewAccess = "RequestCancel never starts new access to caller memory"
	RuleCancelKeepsProof  = "RequestCancel never invalidates a quiescence already proven"
	RuleCancelNotEnd      = "a cancel request never ends access: only Quiesce answering true does"

	// The rules of the optional capabilities the engine relies on: a
	// completion callback (contract.Notifier) and a non-blocking access probe
	// (contract.QuiesceProber).
	RuleCompletionOnce   = "a completion is called exactly once, after Poll answers"
	RuleProbeNeverBlocks = "TryQuiesce never blocks"
	RuleProbeAgrees      = "TryQuiesce never contradicts Quiesce"
)

// Violation is one broken rule, found by a conformance check.
type Violation struct {
	// Rule is one of the Rule… constants.
	Rule string
	// Detail says what the kit saw.
	Detail string
	// Trial is the drawn trial the rule broke in, as rapid prints it; empty
	// outside a check.
	Trial string
}

// Error formats the violation as "conformance: rule: detail", followed by
// the trial on a line of its own when it is known.
func (v *Violation) Error() string {
	s := "conformance: " + v.Rule + ": " + v.Detail
	if v.Trial != "" {
		s += "\n  in " + v.Trial
	}
	return s
}

func violation(rule, format string, args ...any) error {
	return &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// inTrial names the trial in a violation err carries.
func inTrial(err error, tr trial) error {
	var v *Violation
	if errors.As(err, &v) && v.Trial == "" {
		v.Trial = tr.GoString()
	}
	return err
}

// CheckFetcher runs the conformance kit against a fetching backend: random
// extents over real staging memory filled with canary bytes, one fresh backend
// per trial (rapid, RAPID_CHECKS trials). It checks that served names are a
// subset of the requested ones, that unserved destinations and memory outside
// the extent are untouched, that served destinations hold the stored content,
// that outcomes never change, that nothing is written after Quiesce answered
// true, that a fetch of known-absent names is a miss and not a failure (unless
// MayFail), that SubmissionRejected has no effects, that Probe answers subsets
// and reports a failure as an error, that Quiesce with a cancelled context is
// never true, for attempts that are contract.Cancellable, the cancellation
// rules, for attempts that are contract.Notifier, that the completion is
// called exactly once and never before Poll answers, and for a backend that
// is a contract.QuiesceProber, that TryQuiesce never blocks and never
// contradicts Quiesce (an answer that access ended is a proof: Quiesce must
// agree, and the memory is watched from then on; after a proof it never
// answers unproven). Memory is read only once access was proven over. One
// trial in four fetches through a readiness engine configured with layers
// instead, and checks each layer's bytes on a simulated device as it reads
// ready (layer by layer, SPEC §4 rule 16).
//
// Trials differ in when they first ask Quiesce: half ask right after the
// submission, while copies may still be pending, and then watch the memory
// through Settle, so a backend that answers true before its last write has
// landed is caught within a few trials. After the proof the kit reuses the
// memory (fresh canaries in every row) and watches it: for WatchFloor or
// longer in one trial in WatchOneIn, briefly in the others. A changed outcome
// is reported under the stability rule even when one of its answers would
// also break the known-miss rule: that verdict waits for the last poll.
func CheckFetcher(t TB, newSubject NewFetcher, opts ...Option) {
	t.Helper()
	cfg := newConfig(opts)
	gen := trialGen(cfg, layeredOneIn)
	rapid.Check(cfg.wrap(t), func(rt *rapid.T) {
		tr := gen.Draw(rt, "trial")
		run := fetchTrial
		if tr.Layers != nil {
			run = layeredFetchTrial
		}
		if err := run(newSubject, tr, cfg); err != nil {
			rt.Fatal(inTrial(err, tr))
		}
	})
}

// CheckPublisher runs the conformance kit against a publishing backend:
// random extents of staged rows over real memory, one fresh backend per trial.
// It checks that published names are a subset of the requested ones, that a
// publication never writes its sources (nor anything after Quiesce answered
// true: the same watch as CheckFetcher), that outcomes never change, that
// SubmissionRejected has no effects, that Quiesce with a cancelled context is
// never true, the cancellation rules for contract.Cancellable attempts, the
// completion and probe rules as CheckFetcher checks them, and,
// when the subject can read back (Get), that what was published is what was
// staged — after any cancel request too, which never rolls content back.
func CheckPublisher(t TB, newSubject NewPublisher, opts ...Option) {
	t.Helper()
	cfg := newConfig(opts)
	gen := trialGen(cfg, 0) // publish layer by layer is not yet the engine's
	rapid.Check(cfg.wrap(t), func(rt *rapid.T) {
		tr := gen.Draw(rt, "trial")
		if err := publishTrial(newSubject, tr, cfg); err != nil {
			rt.Fatal(inTrial(err, tr))
		}
	})
}

func newConfig(opts []Option) config {
	cfg := config{wait: DefaultWait, watchFloor: DefaultWatchFloor, watchOneIn: DefaultWatchOneIn, callBound: DefaultCallBound}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.failDirs {
		cfg.failDir = DefaultFailDir()
	}
	cfg.watchFloor = max(cfg.watchFloor, time.Millisecond)
	cfg.watchOneIn = max(cfg.watchOneIn, 1)
	if cfg.callBound <= 0 {
		cfg.callBound = DefaultCallBound
	}
	if cfg.wait <= 0 {
		cfg.wait = DefaultWait
	}
	return cfg
}

// window is how long a trial watches memory after the proof, given the
// backend's observed latency: a watched trial at least the floor and
// watchLatencies times the latency, at most Wait (or the floor, if longer);
// any other trial a millisecond, or the latency if longer, up to the floor.
func (c config) window(watched bool, observed time.Duration) time.Duration {
	if !watched {
		return min(max(time.Millisecond, observed), c.watchFloor)
	}
	return min(max(c.watchFloor, watchLatencies*observed), max(c.watchFloor, c.wait))
}
