package redis_test

import (
	"context"
	"fmt"
	"os"
	"time"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
)

// rows is staging memory: one layer group of 16-byte slots. In a KV cache
// manager, the engine's staging provides Row.
type rows [][]byte

func (r rows) Row(group, slot int) ([]byte, bool) {
	if group != 0 || slot < 0 || slot >= len(r) {
		return nil, false
	}
	return r[slot], true
}

// One manager publishes a row; another (here the same backend, into another
// slot) fetches it back. The store is whatever KVREADY_REDIS_URL names: the
// tests point it at a redis-server of their own.
func ExampleOpen() {
	staging := rows{make([]byte, 16), make([]byte, 16)}
	ctx := context.Background()
	store, err := kvredis.Open(ctx, os.Getenv("KVREADY_REDIS_URL"), staging, // e.g. redis://127.0.0.1:6379/0
		kvredis.WithPrefix("example:"), kvredis.WithTTL(time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	var block contract.Name
	copy(block[:], "the 54-byte name of block 0, layer group 0")
	extent := func(slot int) contract.CacheExtent {
		e, _ := contract.NewCacheExtent([]byte("trtllm:shared-kv:staging:1"),
			[]contract.Unit{{Name: block, LocalGroup: 0, Local: slot}}, false)
		return e
	}

	copy(staging[0], "sixteen bytes kv")
	pub, err := store.Publish(extent(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = store.Settle(ctx, []contract.Attempt{pub})
	fmt.Println("publish:", pub.Poll())

	fetch, err := store.Fetch(extent(1), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = store.Settle(ctx, []contract.Attempt{fetch})
	fmt.Println("fetch:", fetch.Poll())
	// Only Quiesce answering true lets the caller read (or reuse) the rows.
	if done, _ := store.Quiesce(ctx, []contract.Attempt{pub, fetch}); done {
		fmt.Printf("slot 1: %s\n", staging[1])
	}
	// Output:
	// publish: delivered(1 served)
	// fetch: delivered(1 served)
	// slot 1: sixteen bytes kv
}
