package readiness_test

import (
	"bytes"
	"fmt"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// One engine per device. A manager with two tensor-parallel ranks (or two
// GPUs) runs one engine per device — its own staging memory, stream, health
// and backend view — and lends each request once per rank, for that rank's
// shard of the KV cache. The request may compute from a token only when every
// rank has it: the readiness it acts on is the minimum of the ranks'
// UsableUntil. Rank 1's store holds one block fewer, so the request is ready
// up to 64 tokens, not 96. With CUDA, each engine's device is
// cuda.Open(rank) and its staging staging.NewMemory(dev.HostAlloc, ...).
func Example_oneEnginePerDevice() {
	const ranks, blocks, tpb = 2, 3, 32
	type rank struct {
		dev   *sim.Device
		eng   *readiness.Engine
		store *mem.Backend
		h     readiness.Handle
	}
	var rs []*rank
	for id := range ranks {
		dev, _ := sim.New(id, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
		stream, _ := dev.NewStream()
		staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 16})
		store, _ := mem.New(staged)
		defer store.Close()
		eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: tpb, Fetcher: store, Stream: stream,
			Device: id, Health: dev}) // each engine asks about its own device
		if err != nil {
			panic(err)
		}
		rs = append(rs, &rank{dev: dev, eng: eng, store: store})
	}

	// The shard of block b on rank r has its own name; rank 1 has only
	// blocks 0 and 1 stored.
	name := func(r, b int) contract.Name {
		var n contract.Name
		n[0], n[1] = byte(r+1), byte(b+1)
		return n
	}
	for r, rk := range rs {
		for b := range blocks - r {
			rk.store.Put(staging.ExtentName, name(r, b), bytes.Repeat([]byte{byte('a' + b)}, 16))
		}
	}
	for r, rk := range rs {
		req := readiness.Request{Kind: readiness.Fetch}
		for b := range blocks {
			p, _ := rk.dev.Alloc(16)
			req.Rows = append(req.Rows, staging.Row{Name: name(r, b), Block: b, Device: p})
		}
		h, err := rk.eng.Lend(req)
		if err != nil {
			panic(err)
		}
		rk.h = h
	}

	usable := blocks * tpb
	for r, rk := range rs {
		settle(rk.eng, rk.h)
		iv, _ := rk.eng.Readiness(rk.h)
		fmt.Printf("rank %d: ready up to %d tokens\n", r, iv.UsableUntil)
		usable = min(usable, iv.UsableUntil)
	}
	fmt.Println("the request computes from token", usable)
	for _, rk := range rs {
		_ = rk.eng.Release(rk.h)
		drain(rk.eng)
	}
	// Output:
	// rank 0: ready up to 96 tokens
	// rank 1: ready up to 64 tokens
	// the request computes from token 64
}
