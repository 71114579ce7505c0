package conformance

import (
	"strings"

	"github.com/kvready/kvready/contract"
)

// Accessors is an optional capability of an attempt that is the work of
// several accessors — a backend of tiers (backend/tiers) hands a unit to a
// local tier, then to a shared one, and promotes it back. For a unit,
// AccessorsOf describes each accessor it was handed to and what that one
// answered (e.g. `tier 1 "redis" fetch: not served`). When the kit finds a
// rule broken on a unit's row, it adds this account to the violation, so
// that the report names the accessors that could have touched it (SPEC §4
// rule 15: a backend's fault is the backend's, and here the tier's).
type Accessors interface {
	AccessorsOf(unit contract.Name) []string
}

// accessorsOf is the account Accessors gives of n, as a suffix for a
// violation's detail; "" for an attempt without the capability.
func accessorsOf(a contract.Attempt, n contract.Name) string {
	acc, ok := a.(Accessors)
	if !ok {
		return ""
	}
	var list []string
	func() {
		defer func() { _ = recover() }() // the attempt's fault is reported by the rule already
		list = acc.AccessorsOf(n)
	}()
	if len(list) == 0 {
		return "; the unit was handed to no accessor"
	}
	return "; the unit was handed to " + strings.Join(list, ", ")
}

// accessorsAt is accessorsOf for the unit at (group, slot), if any.
func (s *session) accessorsAt(at [2]int) string {
	u, ok := s.tr.inExtent(at[0], at[1])
	if !ok {
		return ""
	}
	return accessorsOf(s.a, u.Name)
}
