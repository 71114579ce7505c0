package mem_test

import (
	"testing"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/conformance"
	"github.com/kvready/kvready/contract"
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
func kitChecks(mode mem.Mode, capacity int) []conformance.Option {
	opts := []conformance.Option{conformance.Wait(bound)}
	switch {
	case mode == mem.Fail, mode == mem.CancelLocal, mode == mem.CancelByPeer, capacity > 0:
		opts = append(opts, conformance.MayFail())
	}
	return opts
}

// TestConformance runs the conformance kit against every mode, with
// an unbounded store and with one that evicts.
func TestConformance(t *testing.T) {
	for _, mode := range mem.Modes() {
		for _, capacity := range []int{0, kitCapacity} {
			name := mode.String()
			if capacity > 0 {
				name += "/capacity"
			}
			t.Run(name, func(t *testing.T) {
				t.Run("fetch", func(t *testing.T) {
					conformance.CheckFetcher(t, func(m conformance.Memory) (conformance.FetchSubject, error) {
						b, err := mem.New(m, kitOpts(mode, capacity)...)
						if err != nil {
							return conformance.FetchSubject{}, err
						}
						return conformance.FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
					}, kitChecks(mode, capacity)...)
				})
				t.Run("publish", func(t *testing.T) {
					conformance.CheckPublisher(t, func(m conformance.Memory) (conformance.PublishSubject, error) {
						b, err := mem.New(m, kitOpts(mode, capacity)...)
						if err != nil {
							return conformance.PublishSubject{}, err
						}
						// An evicting store cannot read back everything it
						// published: Get only where it keeps everything.
						var get func(string, contract.Name) ([]byte, bool)
						if capacity == 0 {
							get = b.Get
						}
						return conformance.PublishSubject{Publisher: b, Get: get, Close: b.Close}, nil
					}, kitChecks(mode, capacity)...)
				})
			})
		}
	}
}
