package readiness_test

import (
	"bytes"
	"fmt"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/readiness/core"
	"github.com/kvready/kvready/staging"
)

// progressUntil runs the engine, with the simulated device completing its
// copies, until the lease is in state want (bounded). A real manager calls
// Progress from its scheduling loop instead; backend/mem delivers on its own
// goroutines, so the lease gets there within a few rounds.
func progressUntil(eng *readiness.Engine, dev *sim.Device, h readiness.Handle, want fsm.State) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		dev.CompleteAll()
		eng.Progress()
		if info, err := eng.Lease(h); err != nil || info.State == want {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
	panic("the lease never reached " + want.String())
}

// drain closes the engine and runs it until it has drained.
func drain(eng *readiness.Engine, dev *sim.Device) {
	for !eng.Close().Drained {
		dev.CompleteAll()
		time.Sleep(100 * time.Microsecond)
	}
}

// A fetch of three blocks of which the store holds the first two: once the
// backend's access is proven over, the two served rows are copied to the
// device, readiness extends the request to 64 tokens, and the slots return at
// the release.
func Example_fetch() {
	dev, _ := sim.New(0, 1<<16)
	stream, _ := dev.NewStream()
	// The simulated device copies from the Go heap; a real GPU needs pinned
	// memory: staging.NewMemory with the driver's host allocator.
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 16})
	store, _ := mem.New(staged)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{
		Core: core.Config{
			Memory:         staged,
			TokensPerBlock: 32,
		},
		Fetcher: store,
		Stream:  stream,
	})
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
		req.Rows = append(req.Rows, readiness.Row{Name: name, Group: 0, Block: block, Device: gpuBlock})
	}
	h, err := eng.Lend(req)
	if err != nil {
		panic(err)
	}
	progressUntil(eng, dev, h, fsm.LogicallyComplete)

	info, _ := eng.Lease(h)
	iv, _ := eng.Readiness(h)
	landed := make([]byte, 16)
	_ = dev.Read(landed, req.Rows[1].Device)
	fmt.Println(info.State, info.Outcome, "readiness:", iv)
	fmt.Printf("block 1 on the device: %q\n", landed[:4])

	_ = eng.Release(h) // complete: the slots go back now
	fmt.Println("free slots:", eng.Stats().SlotsFree)
	drain(eng, dev)
	// Output:
	// logically_complete partial readiness: [0, 64]
	// block 1 on the device: "bbbb"
	// free slots: 8
}

// A publish copies device blocks into staging, waits for the copy's event,
// and only then lends the slots to the backend, which stores them.
func Example_publish() {
	dev, _ := sim.New(0, 1<<16)
	stream, _ := dev.NewStream()
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	store, _ := mem.New(staged)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{
		Core: core.Config{
			Memory:         staged,
			TokensPerBlock: 32,
		},
		Publisher: store,
		Stream:    stream,
	})
	if err != nil {
		panic(err)
	}

	var name contract.Name
	name[0] = 42
	gpuBlock, _ := dev.Alloc(16)
	_ = dev.Write(gpuBlock, bytes.Repeat([]byte{'k'}, 16))
	h, err := eng.Lend(readiness.Request{Kind: readiness.Publish,
		Rows: []readiness.Row{{Name: name, Group: 0, Block: 0, Device: gpuBlock}}})
	if err != nil {
		panic(err)
	}
	progressUntil(eng, dev, h, fsm.LogicallyComplete)
	_ = eng.Release(h)
	row, ok := store.Get(staging.ExtentName, name)
	fmt.Printf("stored: %v %q\n", ok, row[:4])
	st := eng.Stats()
	fmt.Println("served:", st.Outcomes[readiness.Served], "released:", st.Released)
	drain(eng, dev)
	// Output:
	// stored: true "kkkk"
	// served: 1 released: 1
}
