// Package proptest is the proof that kvready keeps its promises (SPEC §4, §6,
// §8), and the conformance kit a backend author runs against their own
// backend.
//
// The kit is this package's API: [CheckFetcher] and [CheckPublisher] run
// random extents over real staging memory filled with canary bytes against a
// backend built fresh for each trial, and fail the test with a [Violation]
// naming the contract rule that broke.
//
// The package's tests hold the rest of the proof: a model-based property
// suite over the readiness engine (TestModel: every action in any order, the
// seven rules of SPEC §4 and the allocator's invariants checked after every
// step, in the bytes of staging memory), the bug zoo (TestBugZoo: one script
// per incident under testdata/bugzoo, replayed against the engine and a naive
// manager), and the command `make mutants` runs (proptest/mutants), which
// breaks each safety guard of the engine in turn and checks that the suite
// notices. See docs/testing.md.
package proptest
