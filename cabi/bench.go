//go:build kvready_testkit

package main

/*
#include "cgo.h"
*/
import "C"

import (
	"runtime"
	"time"
	"unsafe"

	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

//export kvready_sim_device_new_instant
func kvready_sim_device_new_instant(memBytes C.int64_t, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if out == nil {
		return fail(0, invalid("kvready_sim_device_new_instant: device (the out-parameter) is NULL"))
	}
	if memBytes <= 0 || memBytes > 1<<36 {
		return fail(0, invalid("kvready_sim_device_new_instant: %d bytes; want 1 byte to 64 GiB", memBytes))
	}
	return newSim(int64(memBytes), []sim.Option{sim.WithLatency(sim.WallClock{}, 0)}, out)
}

//export kvready_bench_go_lifecycle
func kvready_bench_go_lifecycle(h C.uint64_t, devh C.uint64_t, reqs *C.kv_crequest, nReqs C.size_t, n C.int64_t, ns *C.int64_t) (st C.int) {
	defer guard(uint64(h), &st)
	e, err := engineOf(h)
	if err != nil {
		return fail(uint64(h), err)
	}
	d, err := simOf(devh, "kvready_bench_go_lifecycle")
	if err != nil {
		return fail(uint64(h), err)
	}
	if reqs == nil || nReqs == 0 || nReqs > 256 || n <= 0 || ns == nil {
		return fail(uint64(h), invalid("kvready_bench_go_lifecycle: %d requests, n %d; want 1 to 256 requests, n > 0 and ns", nReqs, n))
	}
	rs := unsafe.Slice((*C.kvready_request)(unsafe.Pointer(reqs)), int(nReqs))
	batch := make([]readiness.Request, len(rs))
	for i := range rs {
		r, err := e.request(&rs[i])
		if err != nil {
			return fail(uint64(h), err)
		}
		r.Rows = append([]staging.Row(nil), r.Rows...)
		batch[i] = r
	}
	hs := make([]readiness.Handle, len(batch))
	start := time.Now()
	for done := int64(0); done < int64(n); {
		k := int(min(int64(len(batch)), int64(n)-done))
		for i := range k {
			lh, err := e.eng.Lend(batch[i])
			if err != nil {
				return fail(uint64(h), err)
			}
			hs[i] = lh
		}
		for spins := 0; e.eng.Count(readiness.StateLogicallyComplete) < k; spins++ {
			d.CompleteAll()
			e.wake.drain()
			e.eng.Progress()
			e.takeChanges(nil, nil, 0)
			if spins > 2 {
				runtime.Gosched()
			}
			if spins > 10_000_000 {
				return fail(uint64(h), statusf(C.KVREADY_ERR_TIMEOUT, "kvready_bench_go_lifecycle: leases never completed: %v", e.eng.Stats().Leases))
			}
		}
		for i := range k {
			if err := e.eng.Release(hs[i]); err != nil {
				return fail(uint64(h), err)
			}
		}
		done += int64(k)
	}
	*ns = C.int64_t(time.Since(start))
	return C.KVREADY_OK
}
