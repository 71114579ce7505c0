package simulate_test

import (
	"context"
	"fmt"

	"github.com/kvready/kvready/simulate"
)

// The same workload, served by the engine and by a manager that frees staging
// slots on outcome, error or timeout: the checker tells them apart.
func Example() {
	cfg := simulate.Defaults()
	cfg.Requests = 300
	engine, _ := simulate.Run(context.Background(), cfg, nil)
	cfg.Naive = true
	naive, _ := simulate.Run(context.Background(), cfg, nil)
	fmt.Println("engine: recycled before fence:", engine.RecycledBeforeFence, "misses reported as failures:", engine.MissesReportedAsFailures)
	fmt.Println("naive recycles before the fence:", naive.RecycledBeforeFence > 0)
	// Output:
	// engine: recycled before fence: 0 misses reported as failures: 0
	// naive recycles before the fence: true
}
