// Package metrics exports a readiness engine's counters to Prometheus: a
// prometheus.Collector over one engine, with the families docs/operations.md
// describes — leases by state, moves by cause, outcomes by kind, slots by pool
// group, Quiesce calls and retries, containments, ungrantable leases, stale
// evidence, and the readiness and fence latency histograms.
//
// The engine never imports Prometheus. A Collector is the engine's
// readiness.Observer: a scrape asks for a snapshot, the engine copies its
// counters at the end of its next round, on the owner goroutine, and the scrape
// reads that copy — never the engine. An engine with no Observer pays nothing;
// with one, a round pays an atomic load and a move a counter increment
// (docs/performance.md: BenchmarkLifecycle/engine-metrics against /engine).
//
// Every family is prefixed kvready_, counts in base units (seconds, leases,
// slots), and carries only bounded labels — state, event, outcome, group — and
// the constant labels the user chooses, such as the device of one engine
// among several. No lease is ever named.
package metrics
