package proptest

import (
	"time"

	"github.com/kvready/kvready/conformance"
	"github.com/kvready/kvready/contract"
)

// The backend conformance kit moved to package conformance
// (github.com/kvready/kvready/conformance). What follows forwards to it, so
// that code written against proptest keeps building; new code imports
// conformance. To move, replace the import path and the package name:
// every name below exists there, unchanged.

// Memory is the staging memory the kit lends a backend under test.
//
// Deprecated: use conformance.Memory.
type Memory = conformance.Memory

// FetchSubject is one fetching backend under test.
//
// Deprecated: use conformance.FetchSubject.
type FetchSubject = conformance.FetchSubject

// PublishSubject is one publishing backend under test.
//
// Deprecated: use conformance.PublishSubject.
type PublishSubject = conformance.PublishSubject

// NewFetcher builds a fetching backend over the kit's staging memory.
//
// Deprecated: use conformance.NewFetcher.
type NewFetcher = conformance.NewFetcher

// NewPublisher builds a publishing backend over the kit's staging memory.
//
// Deprecated: use conformance.NewPublisher.
type NewPublisher = conformance.NewPublisher

// Option adjusts a conformance check.
//
// Deprecated: use conformance.Option.
type Option = conformance.Option

// Violation is one broken rule, found by a conformance check.
//
// Deprecated: use conformance.Violation.
type Violation = conformance.Violation

// TB is what the kit needs of a test.
//
// Deprecated: use conformance.TB.
type TB = conformance.TB

// The rules the kit checks, as named in a Violation.
//
// Deprecated: use the conformance.Rule… constants.
const (
	RuleServedSubset      = conformance.RuleServedSubset
	RuleUnservedUntouched = conformance.RuleUnservedUntouched
	RuleOutsideUntouched  = conformance.RuleOutsideUntouched
	RuleServedContent     = conformance.RuleServedContent
	RuleStable            = conformance.RuleStable
	RuleNoLateWrite       = conformance.RuleNoLateWrite
	RuleKnownMiss         = conformance.RuleKnownMiss
	RuleRejectedNoEffect  = conformance.RuleRejectedNoEffect
	RuleProbe             = conformance.RuleProbe
	RuleQuiesceCancelled  = conformance.RuleQuiesceCancelled
	RuleAttemptOrError    = conformance.RuleAttemptOrError
	RuleSettle            = conformance.RuleSettle
	RulePublishedContent  = conformance.RulePublishedContent
	RulePublishReadOnly   = conformance.RulePublishReadOnly
)

// CheckFetcher runs the conformance kit against a fetching backend.
//
// Deprecated: use conformance.CheckFetcher, which this calls.
func CheckFetcher(t TB, newSubject NewFetcher, opts ...Option) {
	t.Helper()
	conformance.CheckFetcher(t, newSubject, opts...)
}

// CheckPublisher runs the conformance kit against a publishing backend.
//
// Deprecated: use conformance.CheckPublisher, which this calls.
func CheckPublisher(t TB, newSubject NewPublisher, opts ...Option) {
	t.Helper()
	conformance.CheckPublisher(t, newSubject, opts...)
}

// MayFail declares that the backend fails or cancels deliveries on purpose.
//
// Deprecated: use conformance.MayFail.
func MayFail() Option { return conformance.MayFail() }

// Wait bounds each Settle and Quiesce call the kit makes.
//
// Deprecated: use conformance.Wait.
func Wait(d time.Duration) Option { return conformance.Wait(d) }

// FailFiles names the directory where the kit keeps rapid's failure files.
//
// Deprecated: use conformance.FailFiles.
func FailFiles(dir string) Option { return conformance.FailFiles(dir) }

// DefaultFailDir is where the kit keeps failure files by default.
//
// Deprecated: use conformance.DefaultFailDir.
func DefaultFailDir() string { return conformance.DefaultFailDir() }

// Run runs a check outside go test and returns its report as an error.
//
// Deprecated: use conformance.Run.
func Run(name string, check func(t TB)) error { return conformance.Run(name, check) }

// sameOutcome reports whether two outcomes are the same answer (the model
// suite compares answers with it).
func sameOutcome(x, y contract.Outcome) bool {
	if a, ok := x.(contract.Delivered); ok {
		b, ok := y.(contract.Delivered)
		return ok && a.Served.Equal(b.Served)
	}
	return x == y
}
