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
// the suite does not kill is a missing property.
func Mutants() []string { return append([]string(nil), mutantNames...) }

// mutantNames are the engine's safety guards that make mutants breaks, one at a
// time. Each entry says what the broken engine does.
var mutantNames = []string{
	"trust-quiesce-false",      // takes Quiesce false or an error as proof
	"quiesce-timeout-as-proof", // takes a Quiesce that timed out as proof
	"miss-as-failure",          // reports an empty Delivered as a failure
	"skip-copy-wait",           // answers readiness before the copies land
	"copy-before-fence",        // copies served rows to the device before access is proven over
	"copy-after-release",       // copies into the device rows of a lease the owner released
	"accept-unasked",           // trusts served names that were never asked for
	"ignore-generation",        // accepts a handle (and evidence) whatever its generation
	"no-stability-check",       // never catches an answer changed after the first
	"stability-kind-only",      // compares only the kind of a re-polled answer
	"late-outcome-wins",        // lets a late outcome overwrite the timeout
	"free-quarantined",         // returns quarantined slots to the allocator
	"ignore-device-loss",       // never asks whether the device was lost
	"never-ask-proof",          // never asks Quiesce at all
	"never-retry",              // asks Quiesce once and never again after false
	"containment-from-notice",  // measures the containment deadline from when the engine notices
	"extent-rebuilt-in-place",  // reuses a quarantined lease's extent for the next lease
	"close-no-cancel",          // leaves a pending lease without its local cancel at Close
	"stall-by-fragmentation",   // never takes an ungrantable lease out of the line
	"masks-not-cleared",        // (staging) reuses served masks of more than 32 rows without clearing them
}
