package staging_test

import (
	"crypto/sha256"
	"fmt"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/staging"
)

// A lease's life in staging: slots granted, rows named, an extent built, the
// backend's served set turned into masks and the masks into readiness.
func Example() {
	alloc, _ := staging.NewAllocator([]int{8})
	ticket, _ := alloc.Request([]int{3}) // three blocks of one layer group
	runs, _ := alloc.Runs(ticket, nil)

	scope := sha256.Sum256([]byte("model weights and tokenizer"))
	layoutID := sha256.Sum256([]byte("layout"))
	id, _ := staging.NewIdentity(scope[:], layoutID[:], [][]int{{0, 1}}, []staging.Shard{staging.Whole})
	partName, _ := id.PartName([]int{0})
	part := staging.Part{Name: partName, Address: 0x10000, NBytes: 8 * 4096, SlotBytes: 4096, Slots: 8}

	run := staging.GroupRun{LayerGroup: 0, Part: 0}
	for i := range runs[0].Count {
		name, _ := id.Name(0, staging.Key{byte(i)})
		run.Ordinals = append(run.Ordinals, i)
		run.Names = append(run.Names, name)
		run.Addresses = append(run.Addresses, part.SlotAddress(runs[0].First+i))
	}
	view, _ := staging.NewView(run)
	extent, _ := staging.BuildExtent(view, []staging.Part{part}, []byte(staging.ExtentName), true)
	fmt.Println("units:", extent.Len(), "first slot:", extent.Unit(0).Local)

	// The backend served blocks 0 and 2: the hole at 1 stops readiness at block 1.
	served := contract.NewNameSet(run.Names[0], run.Names[2])
	masks, _ := staging.ServedMasks(view, served)
	iv, _ := staging.ReadinessOfView(32, 0, view, masks)
	fmt.Println("masks:", masks[0], "usable until:", iv.UsableUntil)

	// Only after the backend's access is proven over do the slots go back.
	fmt.Println(alloc.Free(ticket) == nil, alloc.FreeSlots(0))
	// Output:
	// units: 3 first slot: 0
	// masks: [true false true] usable until: 32
	// true 8
}
