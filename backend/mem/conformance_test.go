package mem_test

import (
	"testing"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/proptest"
)

// kitCapacity is small enough that most trials of the kit evict.
const kitCapacity = 2

func kitOpts(mode mem.Mode, capacity int) []mem.Option {
	return []mem.Option{mem.WithMode(mode), mem.WithCapacity(capacity), mem.WithSlowQuiesce(time.Millisecond)}
}

// kitChecks are the kit's options for a mode and a capacity. Faulty modes fail
// or cancel on purpose, so a failure can't be told from a miss reported as a
// failure. An evicting store forgets names the kit stored, which the kit's
// probe check would read as a failure hidden as an empty answer; MayFail turns
// off exactly that check and the known-miss one, which the unbounded runs and
// TestEvictedNameIsAMiss cover.
func kitChecks(mode mem.Mode, capacity int) []proptest.Option {
	opts := []proptest.Option{proptest.Wait(bound)}
	switch {
	case mode == mem.Fail, mode == mem.CancelLocal, mode == mem.CancelByPeer, capacity > 0:
		opts = append(opts, proptest.MayFail())
	}
	return opts
}

// TestConformance runs the conformance kit against every correct mode, with
// an unbounded store and with one that evicts.
func TestConformance(t *testing.T) {
	for _, mode := range mem.Modes() {
		if mode.Broken() {
			continue
		}
		for _, capacity := range []int{0, kitCapacity} {
			name := mode.String()
			if capacity > 0 {
				name += "/capacity"
			}
			t.Run(name, func(t *testing.T) {
				t.Run("fetch", func(t *testing.T) {
					proptest.CheckFetcher(t, func(m proptest.Memory) (proptest.FetchSubject, error) {
						b, err := mem.New(m, kitOpts(mode, capacity)...)
						if err != nil {
							return proptest.FetchSubject{}, err
						}
						return proptest.FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
					}, kitChecks(mode, capacity)...)
				})
				t.Run("publish", func(t *testing.T) {
					proptest.CheckPublisher(t, func(m proptest.Memory) (proptest.PublishSubject, error) {
						b, err := mem.New(m, kitOpts(mode, capacity)...)
						if err != nil {
							return proptest.PublishSubject{}, err
						}
						// An evicting store cannot read back everything it
						// published: Get only where it keeps everything.
						var get func(string, contract.Name) ([]byte, bool)
						if capacity == 0 {
							get = b.Get
						}
						return proptest.PublishSubject{Publisher: b, Get: get, Close: b.Close}, nil
					}, kitChecks(mode, capacity)...)
				})
			})
		}
	}
}
