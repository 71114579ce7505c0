// Package grow grows the engine's per-lease tables in steps of a sixteenth.
//
// append grows a large slice by about a quarter (and a small one by double),
// so a table kept for every lease in flight carries, on average, about a
// tenth of unused capacity, and up to a quarter. Growing by a sixteenth
// bounds that to a sixteenth, at the price of copying each element about
// sixteen times on the way up (a memmove of a few hundred bytes per lease): a
// table grows only past its previous peak, never in steady state.
package grow

// min is the smallest capacity Len allocates, so that small tables do not
// reallocate on every lease.
const min = 64

// Len returns s with length n, its first len(s) elements kept and the rest
// zero. Capacity grows, when it must, to n plus a sixteenth.
func Len[S ~[]E, E any](s S, n int) S {
	if n <= len(s) {
		return s[:n]
	}
	if n <= cap(s) {
		old := len(s)
		s = s[:n]
		clear(s[old:])
		return s
	}
	grown := make(S, n, max(n+n/16, min))
	copy(grown, s)
	return grown
}
