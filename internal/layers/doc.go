// Package layers holds no code: its test holds the module to its import
// rule — contract ← staging ← fsm ← readiness at the core, the adapters
// (backend, gpu implementations, metrics, conformance) at the edge, simulate
// and the programs on top — and keeps looplab/fsm out of the binaries users
// run. The rule is written out here by hand, not derived from the imports it
// checks, so a new upward import fails the test.
package layers
