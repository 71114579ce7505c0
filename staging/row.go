package staging

import (
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
)

// Row is one block of one layer group that a request moves: its content name
// (the lender's, copied byte for byte), its local layer group, its block
// ordinal within the request, and the device memory holding the block. It is
// staging's unit — one slot of one pool group — so the engine that lends the
// slots and the embedder that names them share this one type.
//
// Block ordinals count from the start of the request's sequence: block b holds
// token positions [b·T, (b+1)·T). A fetch's rows start at or after the
// request's known blocks — the blocks the request already has are never
// fetched again — and a publish's rows are any blocks the device holds.
type Row struct {
	Name   contract.Name
	Group  int
	Block  int
	Device gpu.DevicePtr
}

// GroupBlocks is one layer group's arrived block ordinals: after a partial
// hit, which rows of the group landed on the device (not only the contiguous
// interval readiness answers).
type GroupBlocks struct {
	Group  int
	Blocks []int
}
