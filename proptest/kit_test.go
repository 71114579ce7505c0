package proptest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvready/kvready/backend/mem"
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
func kitOptions(mode mem.Mode) []Option {
	switch mode {
	case mem.Fail, mem.CancelLocal, mem.CancelByPeer:
		return []Option{MayFail()}
	}
	return nil
}

// The kit passes backend/mem in every correct mode.
func TestKitPassesEveryCorrectMemMode(t *testing.T) {
	for _, mode := range mem.Modes() {
		if mode.Broken() {
			continue
		}
		t.Run(mode.String(), func(t *testing.T) {
			t.Run("fetch", func(t *testing.T) { CheckFetcher(t, memFetcher(mode), kitOptions(mode)...) })
			t.Run("publish", func(t *testing.T) { CheckPublisher(t, memPublisher(mode), kitOptions(mode)...) })
		})
	}
}

// The kit fails for every deliberately broken mode of backend/mem, naming the
// rule the mode breaks. It runs the kit's own trials (the generator
// CheckFetcher and CheckPublisher draw from) until one fails.
func TestKitCatchesEveryBrokenMemMode(t *testing.T) {
	want := map[mem.Mode]string{
		mem.WriteAfterQuiesce: RuleNoLateWrite,
		mem.WriteUnserved:     RuleUnservedUntouched,
		mem.FlipOutcome:       RuleStable,
		mem.ServeUnasked:      RuleServedSubset,
	}
	for _, mode := range mem.Modes() {
		if !mode.Broken() {
			continue
		}
		rule, ok := want[mode]
		require.True(t, ok, "broken mode %v has no expected rule: add it here", mode)
		t.Run(mode.String(), func(t *testing.T) {
			caught := func(run func(trial) error) bool {
				for seed := range 200 {
					err := run(trialGen.Example(seed))
					var v *Violation
					if errors.As(err, &v) && v.Rule == rule {
						return true
					}
				}
				return false
			}
			fetch := caught(func(tr trial) error { return fetchTrial(memFetcher(mode), tr, config(nil)) })
			publish := caught(func(tr trial) error { return publishTrial(memPublisher(mode), tr, config(nil)) })
			assert.True(t, fetch || publish, "the kit never reported %q for %v", rule, mode)
			if mode != mem.WriteUnserved { // a publication has no unserved destinations
				assert.True(t, fetch, "the fetch kit missed %v", mode)
			}
		})
	}
}

// A backend that reports a known miss as a failure is caught (mem has no such
// mode: the kit is pointed at Fail without declaring MayFail).
func TestKitCatchesAMissReportedAsFailure(t *testing.T) {
	for seed := range 200 {
		err := fetchTrial(memFetcher(mem.Fail), trialGen.Example(seed), config(nil))
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
