// Package simulate is kvready's demonstration: a simulated KV cache manager
// serving a stream of requests whose prompts share prefixes, every fetch and
// publish going through a real engine (package readiness) over the in-process
// backend (backend/mem) — or a Redis-compatible server (backend/redis) — and
// the simulated GPU (gpu/sim), watched by an independent checker.
//
// The checker does not read the engine's counters. It watches what physically
// happens: the staging bytes each backend delivery changes, the slots each
// lease is granted, the Quiesce answers the backend gives, the copy events the
// device completes, and the bytes that end up in device rows. From that alone it
// counts slots recycled before their fence and misses reported as failures.
//
// The same workload can be run with a naive manager (Config.Naive) that frees
// staging slots as soon as it sees an outcome, an error or a timeout — the bug
// behind the incidents in kvready's specification. The checker then shows the
// corruption that policy causes.
//
// # Time
//
// Over the in-process store the simulation runs on a virtual clock. Backend
// deliveries are held at a gate and released when the clock reaches their
// sampled latency; the driver then waits until the delivery's goroutine has
// finished, so every write a delivery makes — including the poison a failed or
// cancelled one writes after its outcome — lands at a known virtual instant.
// Each round is one Engine.Sync, which waits until the engine's goroutines
// have caught up, and the GPU completes copies on the same clock, so a run is
// deterministic for a seed apart from its wall-clock measurements.
//
// # Layer by layer
//
// With Config.Layerwise the engine copies each fetch layer by layer (SPEC §4
// rule 16) on a device whose copies take their bytes over a bandwidth, and
// the driver computes each fetch's forward pass on the simulated device
// twice: layer by layer, each layer once Engine.LayerReadiness says it is
// ready, and the whole lease first. The checker learns from the copies'
// device addresses which event follows each layer's copy into each row, and
// asks the device, not the engine, whether it completed when the manager
// reads the layer. Publishes go layer by layer too (Request.Layerwise): the
// driver computes each layer on a compute stream and reports it with
// Engine.Computed behind its event; the checker verifies, from the streams'
// events and waits, that no layer was saved before it was computed, that
// every unit handed to the backend holds every layer, and that a publish
// withdrawn before its last layer was never submitted and held its slots
// until its queued copies landed. MeasureLayerFigure runs SPEC §5's layer
// figure.
//
// # A real store
//
// With Config.Backend a redis:// URL the store is a Redis-compatible server
// that other processes may share, and it answers in real time, so the run does
// too: the engine, the device and the arrivals are on the system clock, and
// each round is one Engine.Progress, which never blocks. Faults are not
// injected (the server's behaviour is the workload); determinism is not
// promised, safety is — the checker watches the same things and reads the
// store back through a connection of its own. Block names derive from the
// seed alone, so a second run of the workload against the same server and
// prefix is served what the first published.
//
// # Tiers
//
// With Config.Backend a comma-separated list of stores (ParseTiers), such as
// mem?capacity=1MiB,redis://HOST:PORT, the store is a stack of tiers
// (backend/tiers): in-process tiers bounded in bytes in front of the shared
// one. It runs on real time like a Redis store, since the stack chains its
// tiers on goroutines of its own. The checker reads back what each ended
// request left in the shared tier and in the in-process tiers above it, and
// Summary.Tiers (the table, the JSON, the report) says what each tier did.
//
// # Disaggregated serving
//
// RunDisagg (kvready simulate --disagg) moves each request's KV cache from
// prefill processes straight into the decode side's pages over the
// simulated transport (transfer/sim), with its faults: writers that fail and
// write on, never report, or post after their DONE; DONEs lost, masked,
// duplicated or replayed; reports before data; restarted peers whose posted
// puts still land; cancels and deadlines. The kvready manager is the engine
// lending its staging slots to backend/peer's Receiver; the naive one frees
// the pages when the transfer's outcome arrives. A page checker watches the
// pages themselves — their bytes after every network step, and the
// network's own record (sim.Network.MayWrite) at every free — and counts
// what the naive manager does wrong.
package simulate
