//go:build kvready_mutants

package readiness

import "os"

// activeMutant names the one safety guard this test binary breaks, from the
// environment variable KVREADY_MUTANT. Only builds with the kvready_mutants tag
// (make mutants) contain this file: a mutant is never reachable in a normal
// build.
var activeMutant = os.Getenv("KVREADY_MUTANT")

func mutant(name string) bool { return name == activeMutant }

// Mutants lists every guard that make mutants flips, one at a time. A mutant
// the property suite does not kill is a missing property.
func Mutants() []string { return append([]string(nil), mutantNames...) }

// mutantNames are the engine's safety guards that make mutants breaks, one at a
// time. Each entry says what the broken engine does.
var mutantNames = []string{
	"fence-on-outcome",    // takes an outcome as proof that access ended
	"trust-quiesce-false", // takes Quiesce false or an error as proof
	"miss-as-failure",     // reports an empty Delivered as a failure
	"skip-copy-wait",      // reports a fetch's device copies landed when queued
	"accept-unasked",      // ignores served names that were not asked for
	"ignore-generation",   // accepts a handle whatever its generation
	"deadline-fences",     // takes a deadline as proof that access ended
	"no-stability-check",  // never re-polls to catch a changed answer
	"free-quarantined",    // returns quarantined slots to the allocator
	"ignore-device-loss",  // never asks whether the device was lost
	"close-fences",        // takes Close as proof that access ended
}
