package tiers

import "github.com/kvready/kvready/contract"

// SameAttempt reports whether two of the stack's handles hold one attempt:
// the later lease's reused the earlier's (attempt.ref).
func SameAttempt(x, y contract.Attempt) bool { return x.(*handle).a == y.(*handle).a }
