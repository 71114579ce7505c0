package staging

import (
	"errors"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func twoRunView(t *testing.T) *View {
	t.Helper()
	v, err := NewView(
		GroupRun{LayerGroup: 0, Ordinals: []int{0, 1, 2}, Names: []contract.Name{nameOf(0), nameOf(1), nameOf(2)}, Addresses: []int{1, 2, 3}},
		GroupRun{LayerGroup: 1, Ordinals: []int{0, 1}, Names: []contract.Name{nameOf(10), nameOf(11)}, Addresses: []int{4, 5}},
	)
	require.NoError(t, err)
	return v
}

func TestServedMasks(t *testing.T) {
	v := twoRunView(t)
	for _, tc := range []struct {
		name   string
		served []contract.Name
		want   [][]bool
	}{
		{"miss", nil, [][]bool{{false, false, false}, {false, false}}},
		{"all", []contract.Name{nameOf(0), nameOf(1), nameOf(2), nameOf(10), nameOf(11)}, [][]bool{{true, true, true}, {true, true}}},
		{"holes stay holes", []contract.Name{nameOf(0), nameOf(2), nameOf(11)}, [][]bool{{true, false, true}, {false, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServedMasks(v, contract.NewNameSet(tc.served...))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestServedMasksRefusals(t *testing.T) {
	v := twoRunView(t)
	_, err := ServedMasks(v, contract.NewNameSet(nameOf(0), nameOf(99)))
	assert.ErrorIs(t, err, ErrUnknownServed)
	assert.ErrorContains(t, err, nameOf(99).String()[:16])

	dup, err := NewView(
		GroupRun{LayerGroup: 0, Ordinals: []int{0}, Names: []contract.Name{nameOf(1)}, Addresses: []int{1}},
		GroupRun{LayerGroup: 1, Ordinals: []int{0}, Names: []contract.Name{nameOf(1)}, Addresses: []int{2}},
	)
	require.NoError(t, err)
	_, err = ServedMasks(dup, contract.NewNameSet(nameOf(1)))
	assert.ErrorIs(t, err, ErrDuplicateName)

	unplaced, err := NewView(GroupRun{LayerGroup: 0, Ordinals: []int{0}})
	require.NoError(t, err)
	_, err = ServedMasks(unplaced, contract.NameSet{})
	assert.ErrorIs(t, err, ErrUnplacedView)
}

func TestServedMasksIntoDoesNotAllocate(t *testing.T) {
	v, _ := bigView(t, 4096)
	served := make([]contract.Name, 0, 2048)
	for i := 0; i < 4096; i += 2 {
		served = append(served, nameOf(i))
	}
	set := contract.NewNameSet(served...)
	masks, err := ServedMasksInto(nil, v, set)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(20, func() {
		if masks, err = ServedMasksInto(masks, v, set); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
	assert.True(t, masks[0][4094])
	assert.False(t, masks[0][4095])
}

// TestServedMasksMatchAModelAtEverySize: small views (pairwise, per-row
// lookups) and large ones (the name index) give the masks a plain map gives,
// and refuse a served name outside the view.
func TestServedMasksMatchAModelAtEverySize(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var runs []GroupRun
		next := 0
		for g := range rapid.IntRange(1, 3).Draw(t, "runs") {
			n := rapid.IntRange(0, 60).Draw(t, "rows")
			r := GroupRun{LayerGroup: g, Part: 0}
			for k := range n {
				r.Ordinals = append(r.Ordinals, k)
				r.Names = append(r.Names, nameOf(next))
				r.Addresses = append(r.Addresses, 0x1000+64*next)
				next++
			}
			runs = append(runs, r)
		}
		v, err := NewView(runs...)
		if err != nil {
			t.Fatal(err)
		}
		served := map[contract.Name]bool{}
		var names []contract.Name
		for i := range next {
			if rapid.Bool().Draw(t, "served") {
				served[nameOf(i)] = true
				names = append(names, nameOf(i))
			}
		}
		stranger := rapid.Bool().Draw(t, "a name not in the view")
		if stranger {
			names = append(names, nameOf(next+7))
		}
		masks, err := ServedMasks(v, contract.NewNameSet(names...))
		if stranger {
			if !errors.Is(err, ErrUnknownServed) {
				t.Fatalf("a served name outside the view gave %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range runs {
			for k, n := range r.Names {
				if masks[i][k] != served[n] {
					t.Fatalf("run %d row %d: mask %v, served %v", i, k, masks[i][k], served[n])
				}
			}
		}
	})
}
