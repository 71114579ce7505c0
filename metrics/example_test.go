package metrics_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/metrics"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// One engine exported to Prometheus: the collector is the engine's Observer
// and is registered like any other. A real manager serves the registry with
// promhttp.HandlerFor; scrapes are answered at the owner's next round.
func Example() {
	c := metrics.New(prometheus.Labels{"device": "0"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	dev, _ := sim.New(0, 1<<16)
	stream, _ := dev.NewStream()
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 8, SlotBytes: 16})
	store, _ := mem.New(staged)
	defer store.Close()
	eng, err := readiness.New(readiness.Config{Memory: staged, TokensPerBlock: 32, Fetcher: store, Stream: stream, Observer: c})
	if err != nil {
		panic(err)
	}

	var name contract.Name
	name[0] = 1
	store.Put(staging.ExtentName, name, make([]byte, 16))
	row, _ := dev.Alloc(16)
	h, _ := eng.Lend(readiness.Request{Kind: readiness.Fetch, Rows: []staging.Row{{Name: name, Device: row}}})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		dev.CompleteAll()
		eng.Progress() // the owner's scheduling loop
		if info, _ := eng.Lease(h); info.State.Answerable() {
			break
		}
	}
	_ = eng.Release(h)
	for !eng.Close().Drained {
		dev.CompleteAll()
	}

	// A drained engine's last snapshot is final: this scrape does not wait.
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "kvready_leases_lent_total" || (mf.GetName() == "kvready_outcomes_total" && m.GetCounter().GetValue() > 0) {
				fmt.Println(mf.GetName(), labels(m), m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// kvready_leases_lent_total device=0 1
	// kvready_outcomes_total device=0,outcome=served 1
}
