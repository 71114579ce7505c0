package contract_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kvready/kvready/contract"
)

// tinyStore is a single-source, in-process Fetcher: it serves what it holds and
// reports everything else as a miss. Its copies run on a goroutine, so only
// Quiesce can say when they stopped touching the caller's memory.
type tinyStore struct {
	rows    map[contract.Name][]byte
	staging [][]byte // local slot index → staging row
}

type tinyAttempt struct {
	done    chan struct{}
	mu      sync.Mutex
	outcome contract.Outcome
}

func (a *tinyAttempt) Poll() contract.Outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outcome
}

func (s *tinyStore) Fetch(extent contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	a := &tinyAttempt{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		var served []contract.Name
		for _, u := range extent.All() {
			if row, ok := s.rows[u.Name]; ok {
				copy(s.staging[u.Local], row)
				served = append(served, u.Name)
			}
		}
		a.mu.Lock()
		a.outcome = contract.Delivered{Served: contract.NewNameSet(served...)}
		a.mu.Unlock()
	}()
	return a, nil
}

func (s *tinyStore) Quiesce(ctx context.Context, attempts []contract.Attempt) (bool, error) {
	for _, at := range attempts {
		select {
		case <-at.(*tinyAttempt).done:
		case <-ctx.Done():
			return false, ctx.Err() // a cancelled wait never proves access ended
		}
	}
	return true, nil
}

func (s *tinyStore) Settle(ctx context.Context, attempts []contract.Attempt) error {
	_, err := s.Quiesce(ctx, attempts) // this store's outcome and access end together
	return err
}

func (s *tinyStore) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil // cannot answer more cheaply than a fetch
}

func (s *tinyStore) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("tiny store has one source: %w", errors.ErrUnsupported)
}

// Example shows the caller's side of one fetch: submit, poll for the logical
// outcome, then ask Quiesce before the staging slots may be reused.
func Example() {
	var hit, miss contract.Name
	hit[0], miss[0] = 1, 2
	store := &tinyStore{
		rows:    map[contract.Name][]byte{hit: []byte("kv-bytes")},
		staging: [][]byte{make([]byte, 8), make([]byte, 8)},
	}
	var _ contract.Fetcher = store

	extent, err := contract.NewCacheExtent([]byte("trtllm:shared-kv:staging:1"),
		[]contract.Unit{{Name: hit, Local: 0}, {Name: miss, Local: 1}}, true)
	if err != nil {
		panic(err)
	}
	attempt, err := store.Fetch(extent, nil)
	if err != nil {
		panic(err) // an error wrapping contract.ErrSubmissionRejected would mean nothing escaped
	}
	if err := store.Settle(context.Background(), []contract.Attempt{attempt}); err != nil {
		panic(err)
	}
	d := attempt.Poll().(contract.Delivered)
	fmt.Println("outcome:", d, "hit served:", d.Served.Has(hit), "miss served:", d.Served.Has(miss))
	fmt.Printf("staging slot 0: %q\n", store.staging[0])

	// The outcome says nothing about memory access. Only Quiesce does.
	quiet, err := store.Quiesce(context.Background(), []contract.Attempt{attempt})
	fmt.Println("slots reusable:", quiet && err == nil)
	// Output:
	// outcome: delivered(1 served) hit served: true miss served: false
	// staging slot 0: "kv-bytes"
	// slots reusable: true
}
