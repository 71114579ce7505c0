package contract_test

import (
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func name(b byte) contract.Name {
	var n contract.Name
	n[0], n[contract.NameSize-1] = b, b
	return n
}

func TestNameFromBytes(t *testing.T) {
	for _, tc := range []struct {
		size int
		ok   bool
	}{{0, false}, {53, false}, {54, true}, {55, false}} {
		b := make([]byte, tc.size)
		for i := range b {
			b[i] = byte(i)
		}
		n, err := contract.NameFromBytes(b)
		if !tc.ok {
			assert.ErrorContains(t, err, "54 bytes", "size %d", tc.size)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, b, n[:])
		assert.Len(t, n.String(), 108)
	}
}

func TestNameSet(t *testing.T) {
	var empty contract.NameSet
	assert.Equal(t, 0, empty.Len())
	assert.False(t, empty.Has(name(1)))

	s := contract.NewNameSet(name(1), name(2), name(1))
	assert.Equal(t, 2, s.Len(), "repeated names count once")
	assert.True(t, s.Has(name(1)))
	assert.True(t, s.Has(name(2)))
	assert.False(t, s.Has(name(3)))
	var got []contract.Name
	for n := range s.All() {
		got = append(got, n)
	}
	assert.ElementsMatch(t, []contract.Name{name(1), name(2)}, got)
}

func TestNameSetEqual(t *testing.T) {
	a := contract.NewNameSet(name(1), name(2))
	assert.True(t, a.Equal(a), "a set equals itself")
	assert.True(t, a.Equal(contract.NewNameSet(name(2), name(1))), "order does not matter")
	assert.False(t, a.Equal(contract.NewNameSet(name(1), name(3))))
	assert.False(t, a.Equal(contract.NewNameSet(name(1))))
	assert.True(t, contract.NameSet{}.Equal(contract.NewNameSet()), "empty sets are equal")
	assert.False(t, contract.NameSet{}.Equal(a))
}

func TestNewCacheExtent(t *testing.T) {
	ns := []byte("trtllm:shared-kv:staging:1")
	for _, tc := range []struct {
		desc  string
		name  []byte
		units []contract.Unit
		err   string
	}{
		{desc: "empty extent is valid", name: ns},
		{desc: "distinct units", name: ns, units: []contract.Unit{{Name: name(1)}, {Name: name(2), LocalGroup: 1, Local: 7}}},
		{desc: "empty extent with an empty name is valid", name: nil},
		{desc: "empty extent with a zero-length name is valid", name: []byte{}},
		{desc: "empty name with units is valid", name: nil, units: []contract.Unit{{Name: name(1)}, {Name: name(2), Local: 1}}},
		{desc: "zero-length name with units is valid", name: []byte{}, units: []contract.Unit{{Name: name(1)}}},
		{desc: "empty name does not excuse duplicates", name: nil, units: []contract.Unit{{Name: name(1)}, {Name: name(1), Local: 1}}, err: "share a name"},
		{desc: "negative group", name: ns, units: []contract.Unit{{Name: name(1), LocalGroup: -1}}, err: "negative local coordinate"},
		{desc: "negative slot", name: ns, units: []contract.Unit{{Name: name(1), Local: -3}}, err: "unit 0"},
		{desc: "duplicate names", name: ns, units: []contract.Unit{{Name: name(1)}, {Name: name(1), Local: 1}}, err: "share a name"},
		{desc: "duplicate among many", name: ns, units: manyUnits(100, 42), err: "units 42 and 100"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			e, err := contract.NewCacheExtent(tc.name, tc.units, true)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.Zero(t, e.Len())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, string(tc.name), e.Name())
			assert.True(t, e.IsLast())
			assert.Equal(t, len(tc.units), e.Len())
			if len(tc.units) > 0 {
				assert.Equal(t, tc.units, e.Units())
			}
		})
	}
}

func TestDuplicateUnitIsTyped(t *testing.T) {
	_, err := contract.NewCacheExtent([]byte("x"), []contract.Unit{{Name: name(9)}, {Name: name(9)}}, false)
	assert.ErrorIs(t, err, contract.ErrDuplicateUnit)
}

// manyUnits returns n distinct units plus, when dup >= 0, a repeat of unit dup,
// enough to take the hashing path of the duplicate check.
func manyUnits(n, dup int) []contract.Unit {
	units := make([]contract.Unit, 0, n+1)
	for i := range n {
		var nm contract.Name
		nm[0], nm[1] = byte(i), byte(i>>8)
		units = append(units, contract.Unit{Name: nm, Local: i})
	}
	if dup >= 0 {
		units = append(units, units[dup])
	}
	return units
}

func TestExtentSnapshotsUnits(t *testing.T) {
	units := []contract.Unit{{Name: name(1)}, {Name: name(2), Local: 1}}
	e, err := contract.NewCacheExtent([]byte("x"), units, false)
	require.NoError(t, err)
	units[0].Local = 99
	assert.Equal(t, 0, e.Unit(0).Local, "a later change to the caller's slice must not reach the extent")
	out := e.Units()
	out[1].Local = 77
	assert.Equal(t, 1, e.Unit(1).Local, "Units returns a copy")
	count := 0
	for i, u := range e.All() {
		assert.Equal(t, e.Unit(i), u)
		count++
	}
	assert.Equal(t, 2, count)
}

func TestResetLeavesExtentUnchangedOnError(t *testing.T) {
	e, err := contract.NewCacheExtent([]byte("first"), []contract.Unit{{Name: name(1)}}, true)
	require.NoError(t, err)
	err = e.Reset([]byte("second"), []contract.Unit{{Name: name(2)}, {Name: name(2)}}, false)
	require.Error(t, err)
	assert.Equal(t, "first", e.Name())
	assert.Equal(t, 1, e.Len())
	assert.True(t, e.IsLast())

	require.NoError(t, e.Reset([]byte("second"), []contract.Unit{{Name: name(3)}, {Name: name(4)}}, false))
	assert.Equal(t, "second", e.Name())
	assert.Equal(t, 2, e.Len())
	assert.False(t, e.IsLast())
}

func TestResetDoesNotAllocate(t *testing.T) {
	ns := []byte("trtllm:shared-kv:staging:1")
	for _, n := range []int{16, 4096} { // the pairwise and the hashed duplicate checks
		units := manyUnits(n, -1)
		e, err := contract.NewCacheExtent(ns, units, false)
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(100, func() {
			if err := e.Reset(ns, units, true); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, "Reset of %d units with an unchanged name and enough capacity must not allocate", n)
	}
}

func TestOutcomes(t *testing.T) {
	for _, tc := range []struct {
		o    contract.Outcome
		text string
	}{
		{contract.Delivered{}, "delivered(miss)"},
		{contract.Delivered{Served: contract.NewNameSet(name(1), name(2))}, "delivered(2 served)"},
		{contract.Failed{Reason: "timeout"}, "failed(timeout)"},
		{contract.Cancelled{ByPeer: true}, "cancelled(by peer)"},
		{contract.Cancelled{}, "cancelled(local)"},
	} {
		assert.Equal(t, tc.text, tc.o.String())
	}
	assert.True(t, contract.Delivered{}.Miss(), "an empty Delivered is a miss")
	assert.False(t, contract.Delivered{Served: contract.NewNameSet(name(1))}.Miss())
}
