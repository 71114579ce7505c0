package readiness_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// settle waits, on the owner goroutine, until the lease can go no further
// without its owner: Wait runs rounds as the engine's goroutines wake it (a
// backend's answer, a copy event), with no sleep loop. The context bounds it.
func settle(eng *readiness.Engine, h readiness.Handle) readiness.LeaseInfo {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := eng.Wait(ctx, h, readiness.UntilSettled)
	if err != nil {
		panic(err)
	}
	return info
}

// drain shuts the engine down: Close, then rounds as they have work until
// every slot is back.
func drain(eng *readiness.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := eng.Shutdown(ctx); err != nil {
		panic(err)
	}
}

// A fetch of three blocks of which the store holds the first two: once the
// backend's access is proven over, the two served rows are copied to the
// device, readiness extends the request to 64 tokens, and the slots return at
// the release.
func Example_fetch() {
	// A simulated device whose copies complete as soon as they are queued.
	dev, _ := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	stream, _ := dev.NewStream()
	// The simulated device copies from the Go heap; a real GPU needs pinned
	// memory: staging.NewMemory with the driver's host allocator.
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 16})
	store, _ := mem.New(staged)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: 32, Fetcher: store, Stream: stream})
	if err != nil {
		panic(err)
	}

	req := readiness.Request{Kind: readiness.Fetch}
	for block := range 3 {
		var name contract.Name
		name[0] = byte(block + 1)
		if block < 2 { // an earlier publication left blocks 0 and 1 in the store
			store.Put(staging.ExtentName, name, bytes.Repeat([]byte{byte('a' + block)}, 16))
		}
		gpuBlock, _ := dev.Alloc(16)
		req.Rows = append(req.Rows, staging.Row{Name: name, Group: 0, Block: block, Device: gpuBlock})
	}
	h, err := eng.Lend(req)
	if err != nil {
		panic(err)
	}
	info := settle(eng, h)
	iv, _ := eng.Readiness(h)
	landed := make([]byte, 16)
	_ = dev.Read(landed, req.Rows[1].Device)
	fmt.Println(info.State, info.Outcome, "readiness:", iv)
	fmt.Printf("block 1 on the device: %q\n", landed[:4])

	_ = eng.Release(h) // complete: the slots go back now
	fmt.Println("free slots:", eng.Stats().SlotsFree)
	drain(eng)
	// Output:
	// logically_complete partial readiness: [0, 64]
	// block 1 on the device: "bbbb"
	// free slots: 8
}

// A publish copies device blocks into staging, waits for the copy's event,
// and only then lends the slots to the backend, which stores them.
func Example_publish() {
	dev, _ := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	stream, _ := dev.NewStream()
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	store, _ := mem.New(staged)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: 32, Publisher: store, Stream: stream})
	if err != nil {
		panic(err)
	}

	var name contract.Name
	name[0] = 42
	gpuBlock, _ := dev.Alloc(16)
	_ = dev.Write(gpuBlock, bytes.Repeat([]byte{'k'}, 16))
	h, err := eng.Lend(readiness.Request{Kind: readiness.Publish,
		Rows: []staging.Row{{Name: name, Group: 0, Block: 0, Device: gpuBlock}}})
	if err != nil {
		panic(err)
	}
	settle(eng, h)
	_ = eng.Release(h)
	row, ok := store.Get(staging.ExtentName, name)
	fmt.Printf("stored: %v %q\n", ok, row[:4])
	st := eng.Stats()
	fmt.Println("served:", st.Outcomes[readiness.Served], "released:", st.Released)
	drain(eng)
	// Output:
	// stored: true "kkkk"
	// served: 1 released: 1
}

// twoLayers is the layout of the layer-by-layer examples: one layer group,
// two layers, key and value of 4 bytes each per layer in a 16-byte slot.
var twoLayers = staging.Layout{
	TokensPerBlock: 32,
	PoolGroups:     map[int][]int{0: {16}},
	LayerGroups:    []staging.LayerGroup{{Kind: "attention", PoolGroup: 0, Layers: []int{0, 1}, Shard: staging.Whole}},
	Buffers: []staging.Buffer{
		{Layer: 0, Role: "key", Offset: 0, Size: 4, Expansion: 1}, {Layer: 0, Role: "value", Offset: 4, Size: 4, Expansion: 1},
		{Layer: 1, Role: "key", Offset: 8, Size: 4, Expansion: 1}, {Layer: 1, Role: "value", Offset: 12, Size: 4, Expansion: 1},
	},
}

// A fetch layer by layer (SPEC §4 rule 16), as a connector's
// wait_for_layer_load does: the layout's two layers each get their own copies
// and event, and the manager computes layer l as soon as WaitLayer says its
// bytes landed, without waiting for the later layers.
func Example_layerByLayer() {
	dev, _ := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	stream, _ := dev.NewStream()
	layers, err := readiness.LayersOf(twoLayers)
	if err != nil {
		panic(err)
	}
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	store, _ := mem.New(staged)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: 32, Layers: layers, Fetcher: store, Stream: stream})
	if err != nil {
		panic(err)
	}
	var name contract.Name
	name[0] = 7
	store.Put(staging.ExtentName, name, []byte("k0k0v0v0k1k1v1v1"))
	gpuBlock, _ := dev.Alloc(16)
	h, err := eng.Lend(readiness.Request{Kind: readiness.Fetch, Rows: []staging.Row{{Name: name, Device: gpuBlock}}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for l := range eng.Layers() {
		iv, err := eng.WaitLayer(ctx, h, l)
		if err != nil {
			panic(err) // errors.Is(err, readiness.ErrLayerFailed): recompute the lease's rows
		}
		layer := make([]byte, 8)
		_ = dev.Read(layer, gpuBlock+gpu.DevicePtr(8*l))
		fmt.Printf("layer %d ready %v: %q\n", l, iv, layer) // compute layer l here
	}
	_ = eng.Release(h)
	drain(eng)
	// Output:
	// layer 0 ready [0, 32]: "k0k0v0v0"
	// layer 1 ready [0, 32]: "k1k1v1v1"
}

// A publish layer by layer (SPEC §4 rule 16), as a connector's save_kv_layer
// does: the manager computes each layer on its compute stream and reports it
// with the event recorded after it; the layer's device→staging copy waits
// behind that event on the engine's stream, and the publish is submitted
// once every layer landed in staging.
func Example_layerwisePublish() {
	dev, _ := sim.New(0, 1<<16, sim.WithLatency(sim.WallClock{}, 0))
	copies, _ := dev.NewStream()
	compute, _ := dev.NewStream()
	layers, err := readiness.LayersOf(twoLayers)
	if err != nil {
		panic(err)
	}
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	store, _ := mem.New(staged)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: 32, Layers: layers, Publisher: store, Stream: copies})
	if err != nil {
		panic(err)
	}
	var name contract.Name
	name[0] = 9
	gpuBlock, _ := dev.Alloc(16)
	h, err := eng.Lend(readiness.Request{Kind: readiness.Publish, Layerwise: true, Rows: []staging.Row{{Name: name, Device: gpuBlock}}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Layers are reported once the lease holds its staging slots.
	if _, err := eng.Wait(ctx, h, readiness.UntilGranted); err != nil {
		panic(err)
	}
	for l, kv := range []string{"k0k0v0v0", "k1k1v1v1"} {
		_ = dev.Write(gpuBlock+gpu.DevicePtr(8*l), []byte(kv)) // "compute layer l"
		_ = compute.(*sim.Stream).Compute(0)
		computed, _ := compute.Record()
		if err := eng.Computed(h, l, computed); err != nil { // save_kv_layer
			panic(err)
		}
	}
	info, err := eng.Wait(ctx, h, readiness.UntilSettled) // wait_for_save
	if err != nil {
		panic(err)
	}
	stored, _ := store.Get(staging.ExtentName, name)
	fmt.Printf("%v, stored %q\n", info.Outcome, stored)
	_ = eng.Release(h)
	drain(eng)
	// Output:
	// served, stored "k0k0v0v0k1k1v1v1"
}
