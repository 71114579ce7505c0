//go:build !kvready_mutants

package staging

// mutant reports whether a deliberately broken safety guard is switched on. In
// a normal build it is constant false and every mutation is compiled out; see
// mutant_on.go.
func mutant(string) bool { return false }
