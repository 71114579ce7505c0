package tiers_test

import (
	"context"
	"fmt"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// rows is staging memory: one layer group of 8-byte slots. In a KV cache
// manager, the engine's staging provides Row.
type rows [][]byte

func (r rows) Row(group, slot int) ([]byte, bool) {
	if group != 0 || slot < 0 || slot >= len(r) {
		return nil, false
	}
	return r[slot], true
}

// A local tier of 64 bytes in front of a second, shared tier (here another
// in-memory backend; backend/redis in production). The shared tier serves
// block 1, which the stack then promotes into the local tier; block 0 was
// local already.
func Example() {
	staging := rows{make([]byte, 8), make([]byte, 8)}
	local, _ := mem.New(staging, mem.WithCapacityBytes(64))
	shared, _ := mem.New(staging)
	defer local.Close()
	defer shared.Close()
	stack, err := tiers.New([]tiers.Tier{
		{Name: "local", Fetcher: local, Publisher: local},
		{Name: "shared", Fetcher: shared, Publisher: shared},
	})
	if err != nil {
		panic(err)
	}
	defer stack.Close()

	var b0, b1 contract.Name
	b0[0], b1[0] = 1, 2
	local.Put("kv:1", b0, []byte("block-0!"))
	shared.Put("kv:1", b1, []byte("block-1!"))
	ext, _ := contract.NewCacheExtent([]byte("kv:1"),
		[]contract.Unit{{Name: b0, Local: 0}, {Name: b1, Local: 1}}, false)

	ctx := context.Background()
	a, err := stack.Fetch(ext, nil)
	if err != nil {
		panic(err)
	}
	_ = stack.Settle(ctx, []contract.Attempt{a})
	fmt.Println("outcome:", a.Poll())
	// Only Quiesce answering true — every tier's access over, the promotion
	// into the local tier included — lets the caller read or reuse the rows.
	if ok, _ := stack.Quiesce(ctx, []contract.Attempt{a}); ok {
		fmt.Printf("slots: %s %s\n", staging[0], staging[1])
	}
	row, _ := local.Get("kv:1", b1)
	fmt.Printf("promoted into local: %s\n", row)
	for _, s := range stack.Stats() {
		fmt.Printf("%s: %d handed, %d hits, %d misses, %d promoted in, %d bytes\n", s.Name, s.Handed, s.Hits, s.Misses, s.Promoted, s.Bytes)
	}
	// Output:
	// outcome: delivered(2 served)
	// slots: block-0! block-1!
	// promoted into local: block-1!
	// local: 2 handed, 1 hits, 1 misses, 1 promoted in, 16 bytes
	// shared: 1 handed, 1 hits, 0 misses, 0 promoted in, 8 bytes
}
