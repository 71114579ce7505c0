package staging

import (
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func nameOf(i int) contract.Name {
	var n contract.Name
	n[0], n[1], n[2] = byte(i), byte(i>>8), byte(i>>16)
	n[53] = 1
	return n
}

var testParts = []Part{
	{Name: "p0", Address: 0x1000, NBytes: 4 * 64, SlotBytes: 64, Slots: 4},
	{Name: "p1", Address: 0x2000, NBytes: 2*128 + 100, SlotBytes: 128, Slots: 2},
}

func TestNewPartsRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []Part
		want  string
	}{
		{"zero address", []Part{{Address: 0, NBytes: 64, SlotBytes: 64, Slots: 1}}, "want positive integers"},
		{"zero slots", []Part{{Address: 1, NBytes: 64, SlotBytes: 64, Slots: 0}}, "want positive integers"},
		{"negative nbytes", []Part{{Address: 1, NBytes: -64, SlotBytes: 64, Slots: 1}}, "want positive integers"},
		{"slots past nbytes", []Part{{Address: 1, NBytes: 100, SlotBytes: 64, Slots: 2}}, "do not fit"},
		{"overlap", []Part{{Address: 100, NBytes: 64, SlotBytes: 64, Slots: 1}, {Address: 50, NBytes: 51, SlotBytes: 51, Slots: 1}}, "overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewParts(tc.parts)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	_, err := NewParts([]Part{{Address: 100, NBytes: 64, SlotBytes: 64, Slots: 1}, {Address: 164, NBytes: 64, SlotBytes: 64, Slots: 1}})
	assert.NoError(t, err, "adjacent parts do not overlap")
}

func TestBuildExtent(t *testing.T) {
	v, err := NewView(
		GroupRun{LayerGroup: 1, Ordinals: []int{0, 1}, Names: []contract.Name{nameOf(1), nameOf(2)}, Addresses: []int{0x1000 + 64*3, 0x1000 + 64}, Part: 0},
		GroupRun{LayerGroup: 0, Ordinals: []int{0}, Names: []contract.Name{nameOf(3)}, Addresses: []int{0x2000 + 128}, Part: 1},
	)
	require.NoError(t, err)
	e, err := BuildExtent(v, testParts, []byte(ExtentName), true)
	require.NoError(t, err)
	assert.Equal(t, ExtentName, e.Name())
	assert.True(t, e.IsLast())
	assert.Equal(t, []contract.Unit{
		{Name: nameOf(1), LocalGroup: 1, Local: 3},
		{Name: nameOf(2), LocalGroup: 1, Local: 1},
		{Name: nameOf(3), LocalGroup: 0, Local: 1},
	}, e.Units())
}

// The extent name is any bytes, the empty name included, with units or
// without: the reference's build_extent only asks that it be bytes, and its
// CacheExtent checks nothing of it.
func TestBuildExtentAnyName(t *testing.T) {
	v, err := NewView(GroupRun{LayerGroup: 0, Ordinals: []int{0}, Names: []contract.Name{nameOf(1)}, Addresses: []int{0x1000}, Part: 0})
	require.NoError(t, err)
	for _, name := range [][]byte{nil, {}, {0}, []byte("\xff\xfe"), []byte(ExtentName)} {
		e, err := BuildExtent(v, testParts, name, false)
		require.NoError(t, err, "%q", name)
		assert.Equal(t, string(name), e.Name())
		assert.Equal(t, []contract.Unit{{Name: nameOf(1), LocalGroup: 0, Local: 0}}, e.Units())
	}
}

func TestBuildExtentRefusals(t *testing.T) {
	row := func(g, part, addr, ord int, n contract.Name) GroupRun {
		return GroupRun{LayerGroup: g, Ordinals: []int{ord}, Names: []contract.Name{n}, Addresses: []int{addr}, Part: part}
	}
	for _, tc := range []struct {
		name string
		runs []GroupRun
		want string
	}{
		{"row before its part", []GroupRun{row(0, 0, 0x1000-64, 0, nameOf(1))}, "outside or misaligned"},
		{"row misaligned", []GroupRun{row(0, 0, 0x1000+1, 0, nameOf(1))}, "outside or misaligned"},
		{"row past capacity", []GroupRun{row(0, 0, 0x1000+4*64, 0, nameOf(1))}, "past its 4 slots"},
		{"row in the part's tail bytes", []GroupRun{row(0, 1, 0x2000+2*128, 0, nameOf(1))}, "past its 2 slots"},
		{"unknown part", []GroupRun{row(0, 2, 0x1000, 0, nameOf(1))}, "unknown part 2"},
		{"negative part", []GroupRun{row(0, -1, 0x1000, 0, nameOf(1))}, "unknown part -1"},
		{"two rows on one slot", []GroupRun{row(0, 0, 0x1000+64, 0, nameOf(1)), row(1, 0, 0x1000+64, 0, nameOf(2))}, "slot 1 of part 0"},
		{"negative ordinal", []GroupRun{row(0, 0, 0x1000, -1, nameOf(1))}, "negative block ordinal -1"},
		{"no names", []GroupRun{{LayerGroup: 0, Ordinals: []int{0}}}, "need staging names"},
		{"duplicate names", []GroupRun{row(0, 0, 0x1000, 0, nameOf(1)), row(1, 1, 0x2000, 0, nameOf(1))}, "share a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewView(tc.runs...)
			require.NoError(t, err)
			ps, err := NewParts(testParts)
			require.NoError(t, err)
			var b ExtentBuilder
			dst, err := contract.NewCacheExtent([]byte("before"), []contract.Unit{{Name: nameOf(9)}}, false)
			require.NoError(t, err)
			err = b.Build(&dst, v, ps, []byte(ExtentName), true)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, "before", dst.Name(), "a refused build leaves dst unchanged")
			assert.Equal(t, 1, dst.Len())
		})
	}
	_, err := BuildExtent(&View{}, []Part{{}}, []byte(ExtentName), false)
	assert.ErrorContains(t, err, "positive integers", "the convenient form validates parts")
}

func TestNewViewRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []GroupRun
		want string
	}{
		{"group twice", []GroupRun{{LayerGroup: 1}, {LayerGroup: 1}}, "both layer group 1"},
		{"negative group", []GroupRun{{LayerGroup: -1}}, "negative layer group"},
		{"names short", []GroupRun{{Ordinals: []int{0, 1}, Names: []contract.Name{{}}, Addresses: []int{1, 2}}}, "want as many of each"},
		{"addresses missing", []GroupRun{{Ordinals: []int{0}, Names: []contract.Name{{}}}}, "want as many of each"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewView(tc.runs...)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	v, err := NewView(GroupRun{LayerGroup: 3})
	require.NoError(t, err)
	assert.Error(t, v.Reset([]GroupRun{{LayerGroup: 2}, {LayerGroup: 2}}))
	assert.Equal(t, 3, v.Run(0).LayerGroup, "a refused Reset leaves the view unchanged")
}

// bigView is one run of n rows with distinct names on consecutive slots of one part.
func bigView(tb testing.TB, n int) (*View, Parts) {
	tb.Helper()
	run := GroupRun{LayerGroup: 0, Part: 0}
	for i := range n {
		run.Ordinals = append(run.Ordinals, i)
		run.Names = append(run.Names, nameOf(i))
		run.Addresses = append(run.Addresses, 0x1000+64*i)
	}
	v, err := NewView(run)
	require.NoError(tb, err)
	ps, err := NewParts([]Part{{Name: "p", Address: 0x1000, NBytes: 64 * n, SlotBytes: 64, Slots: n}})
	require.NoError(tb, err)
	return v, ps
}

func TestDuplicateFoundInLargeView(t *testing.T) {
	v, _ := bigView(t, 100)
	run := v.Run(0)
	run.Names[70] = run.Names[5]
	require.NoError(t, v.Reset([]GroupRun{run}))
	assert.ErrorIs(t, v.Duplicate(), ErrDuplicateName)
	assert.ErrorContains(t, v.Duplicate(), "row 5 of run 0 and row 70 of run 0")
}

func TestExtentBuilderDoesNotAllocate(t *testing.T) {
	// 32 rows: contract.CacheExtent.Reset hashes larger unit lists into a fresh map.
	v, ps := bigView(t, 32)
	var b ExtentBuilder
	var e contract.CacheExtent
	require.NoError(t, b.Build(&e, v, ps, []byte(ExtentName), false))
	allocs := testing.AllocsPerRun(100, func() {
		if err := b.Build(&e, v, ps, []byte(ExtentName), false); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
	assert.Equal(t, 32, e.Len())
}

// The reference's test_empty_view_and_miss_are_valid: an empty view has no
// addresses to expose and no delivered rows; building its extent and its
// masks is no error.
func TestEmptyViewAndMissAreValid(t *testing.T) {
	ext, err := BuildExtent(&View{}, nil, []byte(ExtentName), true)
	require.NoError(t, err)
	assert.Zero(t, ext.Len())
	assert.Equal(t, ExtentName, string(ext.Name()))
	assert.True(t, ext.IsLast())
	masks, err := ServedMasks(&View{}, contract.NameSet{})
	require.NoError(t, err)
	assert.Empty(t, masks)
}
