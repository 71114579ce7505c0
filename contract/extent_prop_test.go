package contract_test

import (
	"errors"
	"testing"

	"github.com/kvready/kvready/contract"
	"pgregory.net/rapid"
)

// TestDuplicateCheckAgreesWithAMap: both duplicate checks (pairwise for small
// extents, hashed for large ones) refuse exactly the unit lists a map says have a
// repeated name.
func TestDuplicateCheckAgreesWithAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 120).Draw(t, "units")
		alphabet := rapid.IntRange(1, 400).Draw(t, "distinct names available")
		units := make([]contract.Unit, n)
		seen := map[contract.Name]bool{}
		dup := false
		for i := range units {
			k := rapid.IntRange(0, alphabet-1).Draw(t, "name")
			var nm contract.Name
			nm[7], nm[40] = byte(k), byte(k>>8)
			units[i] = contract.Unit{Name: nm, Local: i}
			dup = dup || seen[nm]
			seen[nm] = true
		}
		var e contract.CacheExtent
		err := e.Reset([]byte("x"), units, false)
		if dup != errors.Is(err, contract.ErrDuplicateUnit) {
			t.Fatalf("duplicate present: %v, error: %v", dup, err)
		}
		if !dup && err != nil {
			t.Fatalf("unexpected error %v", err)
		}
	})
}
