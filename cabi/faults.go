//go:build kvready_testkit

package main

/*
#cgo CFLAGS: -DKVREADY_TESTKIT
#include "cgo.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/mem/memtest"
	"github.com/kvready/kvready/contract"
)

// The test library (make lib-testkit, bin/libkvready_testkit.so) is this
// package built with the kvready_testkit tag: the production library plus the
// conformance kit, the in-library benchmark and the fault backends below.
// CFLAGS -DKVREADY_TESTKIT makes kvready.h declare the test-only functions,
// so their prototypes are checked against the exports as every other's.

// openFault opens the test library's fault backends: "instant:" and
// "mem:?mode=M" (M a correct mode of backend/mem or a broken one of
// backend/mem/memtest). ok is false for any other URL.
func openFault(raw string, u *url.URL, m *memory) (b *backend, ok bool, err error) {
	if u.Scheme == "instant" {
		in := &instant{}
		return &backend{fetcher: in, publisher: in, close: func() error { return nil }}, true, nil
	}
	if raw != "mem" && u.Scheme != "mem" || !u.Query().Has("mode") {
		return nil, false, nil
	}
	q := u.Query()
	for k := range q {
		if k != "mode" && k != "capacity" && k != "capacity_bytes" {
			return nil, true, invalid("kvready_backend_open %s: unknown parameter %q; want mode, capacity or capacity_bytes", raw, k)
		}
	}
	v := q.Get("mode")
	for _, md := range mem.Modes() {
		if md.String() == v {
			b, err := openMem(raw, q, m, mem.WithMode(md))
			return b, true, err
		}
	}
	for _, f := range memtest.Faults() {
		if f.String() == v {
			return openBroken(raw, q, m, f)
		}
	}
	return nil, true, invalid("kvready_backend_open %s: mode %q; want one of %v or the broken %v", raw, v, mem.Modes(), memtest.Faults())
}

// openBroken opens backend/mem broken as f (memtest), with the query's
// capacity.
func openBroken(raw string, q url.Values, m *memory, f memtest.Fault) (*backend, bool, error) {
	opts, err := memCapacity(raw, q)
	if err != nil {
		return nil, true, err
	}
	b, err := memtest.New(m.rows, f, opts...)
	if err != nil {
		return nil, true, invalid("kvready_backend_open %s: %v", raw, err)
	}
	return memBackend(b), true, nil
}

// ---- instant: the benchmarks' backend ----------------------------------------

// instant answers every submission at once: every unit served (a publication
// accepted), Quiesce true. It touches no memory, so what a fetch "serves" is
// whatever staging held: it is for measuring the engine and the ABI, and for
// smoke tests, never for content.
//
// A one-unit attempt is made once per name and reused (its answer never
// changes, and the engine keeps attempts by lease, not by identity), so that
// in steady state a lifecycle allocates nothing in the backend, as
// BenchmarkLifecycle's backend does: the C figure is compared with that
// benchmark, and a backend allocating a set per lease would add the
// collector's work to one side only. The attempts are kept in a
// direct-mapped array read without a lock, as that backend's are (a slice
// indexed by the name): a mutex and a map keyed by the 54-byte name cost
// about 350 instructions a lease (callgrind, issue #40), which the program
// the C figure is compared with does not pay.
type instant struct {
	cache [instantCached]atomic.Pointer[instantAttempt]
}

// instantCached is how many one-unit attempts instant keeps, each in the
// slot its name's first bytes pick; a name whose slot holds another name's
// attempt gets a fresh one, which takes the slot.
const instantCached = 1 << 12

type instantAttempt struct {
	name contract.Name
	o    contract.Outcome
}

func (a *instantAttempt) Poll() contract.Outcome { return a.o }

func (in *instant) Fetch(extent contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	return in.serve(extent), nil
}

func (in *instant) Publish(extent contract.CacheExtent) (contract.Attempt, error) {
	return in.serve(extent), nil
}

func (in *instant) serve(extent contract.CacheExtent) contract.Attempt {
	if extent.Len() == 1 {
		name := extent.Unit(0).Name
		slot := &in.cache[binary.LittleEndian.Uint64(name[:8])%instantCached]
		if a := slot.Load(); a != nil && a.name == name {
			return a
		}
		a := &instantAttempt{name: name, o: contract.Delivered{Served: contract.NewNameSet(name)}}
		slot.Store(a)
		return a
	}
	names := make([]contract.Name, 0, extent.Len())
	for _, u := range extent.All() {
		names = append(names, u.Name)
	}
	return &instantAttempt{o: contract.Delivered{Served: contract.NewNameSet(names...)}}
}

func (*instant) Quiesce(ctx context.Context, _ []contract.Attempt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return true, nil
}

// TryQuiesce knows at once: nothing ever touches memory.
func (*instant) TryQuiesce([]contract.Attempt) (contract.Access, error) {
	return contract.AccessEnded, nil
}

func (*instant) Settle(context.Context, []contract.Attempt) error { return nil }

func (*instant) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}

func (*instant) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("kvready: instant: OpenRoute: %w", errors.ErrUnsupported)
}
