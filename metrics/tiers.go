package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// TierStats is what one tier of a backend of tiers (backend/tiers) did, in
// units (rows) unless it says otherwise. Its fields are backend/tiers
// TierStats's, in the same order and of the same types, so that one converts
// into the other (metrics.TierStats(s)) and a field added there fails to
// compile at the conversion until it is added here, and exported: the
// metrics package stays an adapter that imports no backend.
type TierStats struct {
	Name                                    string
	Handed, Hits, Misses, Failed            uint64
	Published, PublishFailed                uint64
	Promoted, PromoteFailed, PromoteSkipped uint64
	Rejected                                uint64
	NoOutcome                               uint64
	Violations                              uint64
	CancelErrors                            uint64
	Bytes                                   int64
	Sized                                   bool
	Evictions                               uint64
}

// WatchTiers has the collector export stats, asked at each scrape, as the
// kvready_tier_* families, one series set per tier named by its tier label:
// a backend of tiers behind the engine (backend/tiers:
// func() []metrics.TierStats { ... metrics.TierStats(s) ... } over
// Backend.Stats). Without it those families are not sent; nil stops them.
// Safe from any goroutine.
func (c *Collector) WatchTiers(stats func() []TierStats) {
	if stats == nil {
		c.tiers.Store(nil)
		return
	}
	c.tiers.Store(&stats)
}

// collectTiers sends the watched tiers' counters, if any. A tier named like
// an earlier one is sent as an invalid metric, which fails the scrape naming
// it: two tiers' counts under one label would be summed by nobody and
// overwritten by the registry.
func (c *Collector) collectTiers(ch chan<- prometheus.Metric) {
	f := c.tiers.Load()
	if f == nil {
		return
	}
	seen := map[string]bool{}
	for _, s := range (*f)() {
		if seen[s.Name] {
			ch <- prometheus.NewInvalidMetric(c.desc[tierFetchUnits],
				fmt.Errorf("metrics: two tiers are named %q; want unique tier names (backend/tiers.New refuses them)", s.Name))
			continue
		}
		seen[s.Name] = true
		c.collectTier(ch, &s)
	}
}

// collectTier sends one tier's series.
func (c *Collector) collectTier(ch chan<- prometheus.Metric, s *TierStats) {
	send := func(f family, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(c.desc[f], t, v, append([]string{s.Name}, labels...)...)
		if err != nil {
			m = prometheus.NewInvalidMetric(c.desc[f], err)
		}
		ch <- m
	}
	for _, r := range []struct {
		result string
		v      uint64
	}{{"hit", s.Hits}, {"miss", s.Misses}, {"failed", s.Failed}} {
		send(tierFetchUnits, prometheus.CounterValue, float64(r.v), r.result)
	}
	for _, p := range []struct {
		kind, result string
		v            uint64
	}{
		{"write_through", "accepted", s.Published}, {"write_through", "failed", s.PublishFailed},
		{"promotion", "accepted", s.Promoted}, {"promotion", "failed", s.PromoteFailed},
		{"promotion", "skipped", s.PromoteSkipped},
	} {
		send(tierPublishUnits, prometheus.CounterValue, float64(p.v), p.kind, p.result)
	}
	for _, x := range []struct {
		fault string
		v     uint64
	}{{"rejected", s.Rejected}, {"no_outcome", s.NoOutcome}, {"violation", s.Violations}, {"cancel_error", s.CancelErrors}} {
		send(tierFaults, prometheus.CounterValue, float64(x.v), x.fault)
	}
	send(tierEvictions, prometheus.CounterValue, float64(s.Evictions))
	if s.Sized {
		send(tierBytes, prometheus.GaugeValue, float64(s.Bytes))
	}
}
