// Package proptest is the proof that kvready keeps its promises (SPEC §4, §6,
// §8).
//
// The package's tests hold it: a model-based property suite over the
// readiness engine (TestModel: every action in any order, the seven rules of
// SPEC §4 and the allocator's invariants checked after every step, in the
// bytes of staging memory), the bug zoo (TestBugZoo: one script per incident
// under testdata/bugzoo, replayed against the engine and a naive manager), and
// the command `make mutants` runs (proptest/mutants), which breaks each safety
// guard of the engine in turn and checks that the suite notices. See
// docs/testing.md.
//
// The backend conformance kit that used to live here is package conformance;
// the names exported here forward to it and are deprecated.
package proptest
