// Package simulate is kvready's demonstration: a simulated KV cache manager
// serving a stream of requests whose prompts share prefixes, every fetch and
// publish going through a real engine (package readiness) over the in-process
// backend (backend/mem) and the simulated GPU (gpu/sim), watched by an
// independent checker.
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
// The simulation runs on a virtual clock. Backend deliveries are held at a gate
// and released when the clock reaches their sampled latency; the driver then
// waits until the delivery's goroutine has finished, so every write a delivery
// makes — including the poison a failed or cancelled one writes after its
// outcome — lands at a known virtual instant. The engine runs inline (no
// background goroutines) and the GPU completes copies on the same clock, so a
// run is deterministic for a seed apart from its wall-clock measurements.
package simulate
