package staging

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func simpleLayout(t *testing.T) Layout {
	t.Helper()
	data, err := os.ReadFile("testdata/layout-simple.json")
	require.NoError(t, err)
	l, err := ParseLayout(data)
	require.NoError(t, err)
	return l
}

func TestLayoutDocumentSimple(t *testing.T) {
	doc, err := simpleLayout(t).Document()
	require.NoError(t, err)
	assert.Equal(t, `{"buffers":[`+
		`{"layer":0,"offset":0,"role":"key","size":16384},{"layer":0,"offset":16384,"role":"value","size":16384},`+
		`{"layer":1,"offset":32768,"role":"key","size":16384},{"layer":1,"offset":49152,"role":"value","size":16384}],`+
		`"groups":[{"layers":[0,1],"slot_bytes":[65536]}],"tokens_per_block":32,"v":2}`, string(doc))
}

func TestLayoutDocumentNonDefaults(t *testing.T) {
	four := 4
	l := Layout{
		TokensPerBlock: 32,
		PoolGroups:     map[int][]int{0: {64, 32}, 7: {16}},
		LayerGroups: []LayerGroup{
			{Kind: "state", PoolGroup: 7, Layers: []int{9, 3}, Shard: Shard{2, 1}},
			{Kind: "attention", PoolGroup: 0, Layers: []int{0}, Shard: Whole},
		},
		Buffers: []Buffer{
			{Layer: 3, Role: "conv", Pool: [2]int{7, 0}, Offset: 0, Size: 16, Mapper: Sectioned,
				Geometry: Geometry{SectionBytes: []int{8, 8}}, LocalOnly: true, Expansion: 4},
			{Layer: 0, Role: "k\u00e9y<&>\U0001F600\"\x01", Pool: [2]int{0, 1}, Offset: 0, Size: 32, Mapper: NHD,
				Geometry: Geometry{BytesPerHead: &four, NumHeads: nil}, Expansion: 1},
			{Layer: 0, Role: "a", Pool: [2]int{0, 0}, Offset: 0, Size: 32, Geometry: Geometry{BytesPerHead: &four, NumHeads: nil, SectionBytes: nil}, Expansion: 2},
		},
	}
	doc, err := l.Document()
	require.NoError(t, err)
	assert.Equal(t, `{"buffers":[`+
		`{"expansion":2,"geometry":{"bytes_per_head":4},"layer":0,"offset":0,"role":"a","size":32},`+
		`{"geometry":{"bytes_per_head":4},"layer":0,"mapper":"NHD","offset":64,"role":"k\u00e9y<&>\ud83d\ude00\"\u0001","size":32},`+
		`{"expansion":4,"geometry":{"section_bytes":[8,8]},"layer":3,"mapper":"SECTIONED","offset":0,"role":"conv","size":16,"transfer":false}],`+
		`"groups":[{"layers":[0],"slot_bytes":[64,32]},{"kind":"state","layers":[3,9],"slot_bytes":[16]}],"tokens_per_block":32,"v":2}`, string(doc))
}

func TestLayoutIDIgnoresLocalFacts(t *testing.T) {
	// Windows, sinks, shards, local numbering and pool group ids stay out of the id.
	base := simpleLayout(t)
	want, err := base.ID()
	require.NoError(t, err)
	w := 128
	moved := base
	moved.LayerGroups = []LayerGroup{{Kind: "attention", Window: &w, SinkBlocks: 2, PoolGroup: 0, Layers: []int{1, 0}, Shard: Shard{2, 1}}}
	got, err := moved.ID()
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestParseLayoutRefusals(t *testing.T) {
	valid := `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[{"kind":"attention","window":null,"sink_blocks":0,"pool_group":0,"layers":[0],"shard":{"count":1,"index":0}}],"buffers":[%s]}`
	buf := func(b string) string { return strings.Replace(valid, "%s", b, 1) }
	for _, tc := range []struct{ name, json, want string }{
		{"duplicate layer and role", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8},{"layer":0,"role":"k","pool":[0,0],"offset":8,"size":8}`), "each (layer, role) may appear once"},
		{"buffer in unknown pool group", buf(`{"layer":0,"role":"k","pool":[3,0],"offset":0,"size":8}`), "pool group 3, which is not in the layout"},
		{"buffer in unknown pool", buf(`{"layer":0,"role":"k","pool":[0,1],"offset":0,"size":8}`), "lies in pool 1 of pool group 0"},
		{"zero size", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":0}`), "want a positive size"},
		{"negative offset", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":-1,"size":8}`), "non-negative offset"},
		{"past the slot", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":60,"size":8}`), "run past the 64-byte slot"},
		{"expansion not dividing", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"expansion":3}`), "expansion 3 does not divide 32"},
		{"zero expansion", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"expansion":0}`), "expansion 0"},
		{"sections not summing", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"geometry":{"section_bytes":[4,2]}}`), "do not sum to 8"},
		{"sections too many", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"geometry":{"section_bytes":[4,8]}}`), "exceed"},
		{"heads not whole", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"geometry":{"bytes_per_head":3}}`), "whole number of 3-byte heads"},
		{"heads times size", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"geometry":{"bytes_per_head":4,"num_heads":3}}`), "3 heads of 4 bytes"},
		{"zero heads", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"geometry":{"num_heads":0}}`), "num_heads 0"},
		{"unknown mapper", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"mapper":"HND"}`), "mapper \"HND\""},
		{"missing size", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0}`), "size is missing"},
		{"short pool", buf(`{"layer":0,"role":"k","pool":[0],"offset":0,"size":8}`), "pool has 1 entries"},
		{"unknown key", buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8,"colour":1}`), "unknown field"},
		{"trailing data", buf(``) + "{}", "data after"},
		{"not an integer", strings.Replace(buf(``), `32`, `32.5`, 1), "tokens_per_block"},
		{"zero tokens per block", strings.Replace(buf(``), `32`, `0`, 1), "tokens_per_block is 0"},
		{"missing tokens per block", `{"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[]}`, "tokens_per_block is missing"},
		{"bad pool group key", strings.Replace(buf(``), `"0":`, `"00":`, 1), `pool_groups key "00"`},
		{"zero slot width", strings.Replace(buf(``), `[64]`, `[0]`, 1), "slot width 0"},
		{"no pools", strings.Replace(buf(``), `[64]`, `[]`, 1), "has no pools"},
		{"unknown kind", strings.Replace(buf(``), `"attention"`, `"mamba"`, 1), `kind "mamba"`},
		{"group in unknown pool group", strings.Replace(buf(``), `"pool_group":0`, `"pool_group":2`, 1), "pool_group 2 is not in"},
		{"shard outside count", strings.Replace(buf(``), `"index":0`, `"index":1`, 1), "shard 1 of 1"},
		{"negative layer", strings.Replace(buf(``), `"layers":[0]`, `"layers":[-1]`, 1), "layer id -1"},
		{"not JSON", `{`, "layout JSON"},
		{"null is not an object", " null\n", "the document is null, not an object"},
		{"lone high surrogate in a role", buf(`{"layer":0,"role":"k\ud800","pool":[0,0],"offset":0,"size":8}`), `\ud800 at byte`},
		{"lone low surrogate in a role", buf(`{"layer":0,"role":"\uDC00k","pool":[0,0],"offset":0,"size":8}`), `lone UTF-16 surrogate in a JSON string: \udc00`},
		{"role not UTF-8", buf(`{"layer":0,"role":"k` + "\xff" + `","pool":[0,0],"offset":0,"size":8}`), "not UTF-8"},
		{"wrong type names the field, not the Go type", strings.Replace(buf(``), `32`, `"32"`, 1), `tokens_per_block: got string, want an integer`},
		{"wrong type deep inside", strings.Replace(buf(``), `"layers":[0]`, `"layers":{}`, 1), `layer_groups.layers: got object, want an array`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLayout([]byte(tc.json))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := ParseLayout([]byte(buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8}`)))
	assert.NoError(t, err, "the base of the table is valid")
	_, err = ParseLayout([]byte(buf(`{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8},{"layer":0,"role":"v","pool":[0,0],"offset":8,"size":8}`)))
	assert.NoError(t, err, "adjacent buffers do not overlap")
}

// What the reference hashes, kvready hashes (SPEC §3, "and nothing else"):
// each of these was refused before and is a valid layout now.
func TestParseLayoutAcceptsWhatTheReferenceHashes(t *testing.T) {
	valid := `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[%g],"buffers":[%b]}`
	group := `{"kind":"attention","window":null,"sink_blocks":0,"pool_group":0,"layers":%s,"shard":{"count":1,"index":0}}`
	layout := func(groups, buffers string) string {
		return strings.NewReplacer("%g", groups, "%b", buffers).Replace(valid)
	}
	key := `{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":8}`
	for _, tc := range []struct {
		name, json string
		overlaps   int
	}{
		{"overlapping buffers", layout(strings.Replace(group, "%s", "[0]", 1), key+`,{"layer":0,"role":"v","pool":[0,0],"offset":4,"size":16}`), 1},
		{"two layers at one offset", layout(strings.Replace(group, "%s", "[0,1]", 1), key+`,{"layer":1,"role":"k","pool":[0,0],"offset":0,"size":8}`), 1},
		{"a buffer inside another", layout(strings.Replace(group, "%s", "[0,1]", 1), `{"layer":0,"role":"k","pool":[0,0],"offset":0,"size":64},{"layer":1,"role":"k","pool":[0,0],"offset":8,"size":8},{"layer":1,"role":"v","pool":[0,0],"offset":16,"size":8}`), 2},
		{"no layer groups", layout(``, key), 0},
		{"no layer groups and no buffers", layout(``, ``), 0},
		{"an empty layer group", layout(strings.Replace(group, "%s", "[]", 1)+","+strings.Replace(group, "%s", "[0]", 1), key), 0},
		{"a layer in two groups", layout(strings.Replace(group, "%s", "[0]", 1)+","+strings.Replace(group, "%s", "[0]", 1), key), 0},
		{"a layer twice in one group", layout(strings.Replace(group, "%s", "[0,0]", 1), key), 0},
		{"an escaped backslash before u is no escape", layout(strings.Replace(group, "%s", "[0]", 1), `{"layer":0,"role":"\\ud800","pool":[0,0],"offset":0,"size":8}`), 0},
		{"a surrogate pair", layout(strings.Replace(group, "%s", "[0]", 1), `{"layer":0,"role":"\ud83d\ude00","pool":[0,0],"offset":0,"size":8}`), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ParseLayout([]byte(tc.json))
			require.NoError(t, err)
			_, err = l.ID()
			require.NoError(t, err)
			assert.Len(t, l.Overlaps(), tc.overlaps)
		})
	}
}

// No refusal names a Go type, and input that is not JSON at all is told from
// JSON that is not a layout (ErrNotJSON: `kvready layout id` exits 2, not 1).
func TestParseLayoutErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		in      string
		notJSON bool
	}{
		{"hello", true}, {"", true}, {`{"tokens_per_block":`, true}, {`{} {}`, true},
		{`{"tokens_per_block":"x"}`, false}, {`{"pool_groups":[1]}`, false}, {`[]`, false}, {`null`, false},
		{`{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[{"kind":7}]}`, false},
	} {
		_, err := ParseLayout([]byte(tc.in))
		require.Error(t, err, tc.in)
		assert.Equal(t, tc.notJSON, errors.Is(err, ErrNotJSON), "%q: %v", tc.in, err)
		assert.NotRegexp(t, `jsonLayout|jsonLayerGroup|jsonBuffer|Go struct|Go value|\bint\b`, err.Error(), tc.in)
	}
}

// Overlap, by an oracle that compares every pair of buffers: Overlaps reports
// something exactly when two buffers of one pool share a byte, every pair it
// reports does share the bytes it names, and no more pairs than buffers.
// Validate accepts overlapping buffers, as the reference hashes them.
func TestLayoutOverlapProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := Layout{TokensPerBlock: 1, PoolGroups: map[int][]int{0: {64, 64}},
			LayerGroups: []LayerGroup{{Kind: "attention", PoolGroup: 0, Layers: []int{0}, Shard: Whole}}}
		n := rapid.IntRange(0, 6).Draw(t, "n")
		for i := range n {
			off := rapid.IntRange(0, 63).Draw(t, "offset")
			size := rapid.IntRange(1, 64-off).Draw(t, "size")
			pool := rapid.IntRange(0, 1).Draw(t, "pool")
			l.Buffers = append(l.Buffers, Buffer{Layer: i, Role: "k", Pool: [2]int{0, pool}, Offset: off, Size: size, Mapper: Indexed, Expansion: 1})
		}
		overlap := false
		shared := func(a, b Buffer) (from, to int) {
			from, to = -1, -1
			for x := a.Offset; x < a.Offset+a.Size; x++ {
				if a.Pool == b.Pool && x >= b.Offset && x < b.Offset+b.Size {
					if from < 0 {
						from = x
					}
					to = x + 1
				}
			}
			return from, to
		}
		for i, a := range l.Buffers {
			for _, b := range l.Buffers[i+1:] {
				if from, _ := shared(a, b); from >= 0 {
					overlap = true
				}
			}
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("Validate refused a layout the reference hashes: %v", err)
		}
		got := l.Overlaps()
		if overlap != (len(got) > 0) {
			t.Fatalf("overlap %v, Overlaps %v", overlap, got)
		}
		if len(got) > len(l.Buffers) {
			t.Fatalf("%d overlaps of %d buffers", len(got), len(l.Buffers))
		}
		for _, o := range got {
			if o.A >= o.B {
				t.Fatalf("overlap %+v is not ordered", o)
			}
			a, b := l.Buffers[o.A], l.Buffers[o.B]
			from, to := shared(a, b)
			if from < 0 || o.From != from || o.To != to || o.Pool != a.Pool {
				t.Fatalf("overlap %+v: the buffers share [%d, %d)", o, from, to)
			}
			if d := o.Describe(l); !strings.Contains(d, fmt.Sprintf("buffers[%d]", o.A)) || !strings.Contains(d, fmt.Sprintf("buffers[%d]", o.B)) {
				t.Fatalf("description %q does not name the buffers", d)
			}
		}
	})
}
