package staging

import (
	"testing"

	"github.com/kvready/kvready/contract"
	"pgregory.net/rapid"
)

// TestMasksAndReadinessAgainstModel checks served masks and readiness against
// the plainest model: a mask entry is set iff its name was served, and a group's
// usable blocks are the served prefix of its ordinals.
func TestMasksAndReadinessAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tpb := rapid.IntRange(1, 64).Draw(t, "tokens_per_block")
		groups := rapid.IntRange(1, 4).Draw(t, "groups")
		blocks := rapid.IntRange(0, 12).Draw(t, "blocks")
		var runs []GroupRun
		var served []contract.Name
		isServed := map[contract.Name]bool{}
		want := blocks
		for g := range groups {
			run := GroupRun{LayerGroup: g}
			prefix := -1
			for b := range blocks {
				n := nameOf(g*1000 + b)
				run.Ordinals = append(run.Ordinals, b)
				run.Names = append(run.Names, n)
				run.Addresses = append(run.Addresses, 1+b)
				if rapid.Bool().Draw(t, "served") {
					served = append(served, n)
					isServed[n] = true
				} else if prefix < 0 {
					prefix = b
				}
			}
			if prefix >= 0 {
				want = min(want, prefix)
			}
			runs = append(runs, run)
		}
		v, err := NewView(runs...)
		if err != nil {
			t.Fatal(err)
		}
		masks, err := ServedMasks(v, contract.NewNameSet(served...))
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range runs {
			for k, n := range r.Names {
				if masks[i][k] != isServed[n] {
					t.Fatalf("run %d row %d: mask %v, served %v", i, k, masks[i][k], isServed[n])
				}
			}
		}
		iv, err := ReadinessOfView(tpb, 0, v, masks)
		if err != nil {
			t.Fatal(err)
		}
		if iv != (Interval{0, want * tpb}) {
			t.Fatalf("readiness %v, model [0, %d]", iv, want*tpb)
		}
		if extra := nameOf(999999); rapid.Bool().Draw(t, "add unknown") {
			if _, err := ServedMasks(v, contract.NewNameSet(append(served, extra)...)); err == nil {
				t.Fatal("a served name outside the view was accepted")
			}
		}
	})
}
