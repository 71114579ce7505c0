package conformance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvready/kvready/contract"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/mem/memtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func memFetcher(mode mem.Mode) NewFetcher {
	return func(m Memory) (FetchSubject, error) {
		b, err := mem.New(m, mem.WithMode(mode), mem.WithSlowQuiesce(time.Millisecond))
		if err != nil {
			return FetchSubject{}, err
		}
		return FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
	}
}

// brokenFetcher and brokenPublisher are backend/mem broken on purpose
// (backend/mem/memtest).
func brokenFetcher(f memtest.Fault) NewFetcher {
	return func(m Memory) (FetchSubject, error) {
		b, err := memtest.New(m, f, mem.WithSlowQuiesce(time.Millisecond))
		if err != nil {
			return FetchSubject{}, err
		}
		return FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
	}
}

func brokenPublisher(f memtest.Fault) NewPublisher {
	return func(m Memory) (PublishSubject, error) {
		b, err := memtest.New(m, f, mem.WithSlowQuiesce(time.Millisecond))
		if err != nil {
			return PublishSubject{}, err
		}
		return PublishSubject{Publisher: b, Get: b.Get, Close: b.Close}, nil
	}
}

func memPublisher(mode mem.Mode) NewPublisher {
	return func(m Memory) (PublishSubject, error) {
		b, err := mem.New(m, mem.WithMode(mode), mem.WithSlowQuiesce(time.Millisecond))
		if err != nil {
			return PublishSubject{}, err
		}
		return PublishSubject{Publisher: b, Get: b.Get, Close: b.Close}, nil
	}
}

// faulty modes fail or cancel on purpose: the known-miss rule cannot apply.
// The window itself is tested on the late writer (latewriter_test.go) and
// backend/mem's own conformance test watches at the default rate: here one
// trial in 32 is watched, to keep the package's run short.
func kitOptions(mode mem.Mode) []Option {
	opts := []Option{WatchOneIn(32)}
	switch mode {
	case mem.Fail, mem.CancelLocal, mem.CancelByPeer:
		opts = append(opts, MayFail())
	}
	return opts
}

// The kit passes backend/mem in every mode.
func TestKitPassesEveryCorrectMemMode(t *testing.T) {
	for _, mode := range mem.Modes() {
		t.Run(mode.String(), func(t *testing.T) {
			t.Run("fetch", func(t *testing.T) { CheckFetcher(t, memFetcher(mode), kitOptions(mode)...) })
			t.Run("publish", func(t *testing.T) { CheckPublisher(t, memPublisher(mode), kitOptions(mode)...) })
		})
	}
}

// The kit fails for every deliberately broken backend/mem (memtest), naming
// the rule the fault breaks. It runs the kit's own trials (the generator
// CheckFetcher and CheckPublisher draw from) until one fails.
func TestKitCatchesEveryBrokenMemMode(t *testing.T) {
	want := map[memtest.Fault]string{
		memtest.WriteAfterQuiesce: RuleNoLateWrite,
		memtest.WriteUnserved:     RuleUnservedUntouched,
		memtest.FlipOutcome:       RuleStable,
		memtest.ServeUnasked:      RuleServedSubset,
	}
	for _, mode := range memtest.Faults() {
		rule, ok := want[mode]
		require.True(t, ok, "fault %v has no expected rule: add it here", mode)
		t.Run(mode.String(), func(t *testing.T) {
			caught := func(run func(trial) error) bool {
				for seed := range 200 {
					err := run(exampleTrial(seed))
					var v *Violation
					if errors.As(err, &v) && v.Rule == rule {
						return true
					}
				}
				return false
			}
			fetch := caught(func(tr trial) error { return fetchTrial(brokenFetcher(mode), tr, newConfig(nil)) })
			publish := caught(func(tr trial) error { return publishTrial(brokenPublisher(mode), tr, newConfig(nil)) })
			assert.True(t, fetch || publish, "the kit never reported %q for %v", rule, mode)
			if mode != memtest.WriteUnserved { // a publication has no unserved destinations
				assert.True(t, fetch, "the fetch kit missed %v", mode)
			}
		})
	}
}

// A backend that reports a known miss as a failure is caught (mem has no such
// mode: the kit is pointed at Fail without declaring MayFail).
func TestKitCatchesAMissReportedAsFailure(t *testing.T) {
	for seed := range 200 {
		err := fetchTrial(memFetcher(mem.Fail), exampleTrial(seed), newConfig(nil))
		var v *Violation
		if errors.As(err, &v) && v.Rule == RuleKnownMiss {
			return
		}
	}
	t.Fatal("a failure on a fetch of known-absent names was never reported")
}

func TestViolationNamesItsRule(t *testing.T) {
	err := violation(RuleStable, "Poll answered %v, then %v", "a", "b")
	assert.EqualError(t, err, fmt.Sprintf("conformance: %s: Poll answered a, then b", RuleStable))
}

// pendingCopy breaks the contract the way a racy backend does: Quiesce
// answers true while the delivery's copy is still pending. Here the copy is
// held (a gate of backend/mem) until Settle is called, which makes the break
// deterministic and free of data races: memory the kit reads after the
// wrong "true" is written later, inside Settle.
type pendingCopy struct {
	*mem.Backend
	gate chan struct{}
	once sync.Once
}

func (p *pendingCopy) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return true, nil // the bug: nothing waits for the pending copy
}

func (p *pendingCopy) Settle(ctx context.Context, list []contract.Attempt) error {
	p.once.Do(func() { close(p.gate) })
	return p.Backend.Settle(ctx, list)
}

func pendingCopyFetcher(m Memory) (FetchSubject, error) {
	p := &pendingCopy{gate: make(chan struct{})}
	b, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return p.gate }))
	if err != nil {
		return FetchSubject{}, err
	}
	p.Backend = b
	return FetchSubject{Fetcher: p, Put: b.Put, Close: func() error {
		p.once.Do(func() { close(p.gate) })
		return b.Close()
	}}, nil
}

// "Quiesce true while a copy is pending" is found among the kit's first
// trials: half of them ask Quiesce before the outcome, while copies are
// pending. Counted in trials, not time.
func TestKitCatchesQuiesceTrueWhileCopyPending(t *testing.T) {
	first := -1
	for seed := range 50 {
		err := fetchTrial(pendingCopyFetcher, exampleTrial(seed), newConfig(nil))
		var v *Violation
		if errors.As(err, &v) {
			require.Equal(t, RuleNoLateWrite, v.Rule, "%v", err)
			first = seed
			break
		}
	}
	require.GreaterOrEqual(t, first, 0, "the kit never caught Quiesce answering true while a copy was pending")
	assert.Less(t, first, 10, "caught only at trial %d: the kit must provoke the break within its first trials", first)

	// Through the public entry point, at the default budget.
	err := Run("pending-copy", func(tb TB) { CheckFetcher(tb, pendingCopyFetcher, FailFiles(t.TempDir())) })
	require.Error(t, err)
	assert.Contains(t, err.Error(), RuleNoLateWrite)
}

// flipOnQuiesce answers early(outcome) until Quiesce is first called, the
// backend's own outcome after: an outcome that changes. The kit must report
// the change, under the stability rule.
type flipOnQuiesce struct {
	*mem.Backend
	early    func(contract.Outcome) contract.Outcome
	quiesced atomic.Bool
}

type flipAttempt struct {
	contract.Attempt
	b *flipOnQuiesce
}

func (a flipAttempt) Poll() contract.Outcome {
	o := a.Attempt.Poll()
	if o == nil || a.b.quiesced.Load() {
		return o
	}
	return a.b.early(o)
}

func (f *flipOnQuiesce) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	a, err := f.Backend.Fetch(ext, r)
	if a == nil {
		return nil, err
	}
	return flipAttempt{Attempt: a, b: f}, err
}

func (f *flipOnQuiesce) unwrap(list []contract.Attempt) []contract.Attempt {
	out := make([]contract.Attempt, len(list))
	for i, a := range list {
		if fa, ok := a.(flipAttempt); ok {
			a = fa.Attempt
		}
		out[i] = a
	}
	return out
}

func (f *flipOnQuiesce) Settle(ctx context.Context, list []contract.Attempt) error {
	return f.Backend.Settle(ctx, f.unwrap(list))
}

func (f *flipOnQuiesce) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	f.quiesced.Store(true)
	return f.Backend.Quiesce(ctx, f.unwrap(list))
}

// flipTrials runs 100 example trials, Settle first, against a fetcher that
// answers early(outcome) until Quiesce is called, and counts the rules the
// kit reports.
func flipTrials(mode mem.Mode, early func(contract.Outcome) contract.Outcome) map[string]int {
	newFlip := func(m Memory) (FetchSubject, error) {
		b, err := mem.New(m, mem.WithMode(mode))
		if err != nil {
			return FetchSubject{}, err
		}
		return FetchSubject{Fetcher: &flipOnQuiesce{Backend: b, early: early}, Put: b.Put, Close: b.Close}, nil
	}
	reported := map[string]int{}
	for seed := range 100 {
		tr := exampleTrial(seed)
		tr.QuiesceFirst = false // Settle first: the early answers are seen
		err := fetchTrial(newFlip, tr, newConfig(nil))
		var v *Violation
		if errors.As(err, &v) {
			reported[v.Rule]++
		}
	}
	return reported
}

// A fetch of names never stored that answers Failed, then a miss, is both a
// changed outcome and (at first) a miss reported as a failure: the kit
// reports the change.
func TestKitReportsAChangedOutcomeUnderStability(t *testing.T) {
	reported := flipTrials(mem.Miss, func(contract.Outcome) contract.Outcome {
		return contract.Failed{Reason: "changes its mind later"}
	})
	assert.Positive(t, reported[RuleStable], "%v", reported)
	assert.Zero(t, reported[RuleKnownMiss], "a changed outcome was blamed on the known-miss rule: %v", reported)
}

// An answer that changes within its kind — Delivered with one name fewer,
// then Delivered with all — is a changed outcome too.
func TestKitReportsAServedSetThatChanges(t *testing.T) {
	reported := flipTrials(mem.Normal, func(o contract.Outcome) contract.Outcome {
		d, ok := o.(contract.Delivered)
		if !ok || d.Served.Len() == 0 {
			return o
		}
		var names []contract.Name
		for n := range d.Served.All() {
			names = append(names, n)
		}
		return contract.Delivered{Served: contract.NewNameSet(names[1:]...)}
	})
	assert.Positive(t, reported[RuleStable], "%v", reported)
}

// rapid's failure file goes where FailFiles says, never into the package's
// testdata/, and the report names the new place; by default it goes to
// DefaultFailDir.
func TestKitFailFilesGoWhereAsked(t *testing.T) {
	list := func() []string {
		var files []string
		_ = filepath.WalkDir("testdata/rapid", func(path string, d fs.DirEntry, err error) error {
			if err == nil {
				files = append(files, path)
			}
			return nil
		})
		return files
	}
	before := list() // another failed test of this run may have left its own
	dir := filepath.Join(t.TempDir(), "fails")
	failure := Run("TestKitFailFilesGoWhereAsked", func(tb TB) { CheckFetcher(tb, brokenFetcher(memtest.WriteAfterQuiesce), FailFiles(dir)) })
	require.Error(t, failure)
	files, err := filepath.Glob(filepath.Join(dir, "*.fail"))
	require.NoError(t, err)
	assert.Len(t, files, 1, failure.Error())
	assert.Equal(t, before, list(), "the kit left files or folders in the package's testdata/rapid")
	if len(files) == 1 {
		assert.Contains(t, failure.Error(), "-rapid.failfile="+strconv.Quote(files[0]))
	}
	assert.Equal(t, filepath.Join(os.TempDir(), "kvready-conformance"), DefaultFailDir())
	assert.Equal(t, DefaultFailDir(), newConfig(nil).failDir)
}

// rapid prints the drawn trial with %#v: names appear as short hex prefixes,
// never as 32-byte arrays.
func TestTrialPrintsShortNames(t *testing.T) {
	for seed := range 20 {
		tr := exampleTrial(seed)
		s := fmt.Sprintf("%#v", tr)
		assert.Less(t, len(s), 160+40*len(tr.Units), s)
		assert.NotContains(t, s, "0x")
		for _, u := range tr.Units {
			assert.Contains(t, s, fmt.Sprintf("%x…", u.Name[:4]))
		}
	}
}

// Run reports a passing check as nil, a failing one as an error holding what
// it printed, and stops the check at FailNow without failing the caller.
func TestRun(t *testing.T) {
	assert.NoError(t, Run("pass", func(tb TB) { tb.Logf("fine") }))
	err := Run("fail", func(tb TB) {
		tb.Errorf("first %d", 1)
		tb.FailNow()
		tb.Errorf("never")
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "first 1")
	assert.NotContains(t, err.Error(), "never")
	assert.Panics(t, func() { _ = Run("panics", func(TB) { panic("boom") }) }, "other panics propagate")
}

// exampleTrial is the trial the kit's generator draws from seed, with the
// default options.
func exampleTrial(seed int) trial { return trialGen(newConfig(nil), 0).Example(seed) }
