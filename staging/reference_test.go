package staging

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// This file checks layout ids against the reference's algorithm
// (tensorrt_llm/_torch/pyexecutor/kv_cache/sharing/_layout.py, LAYOUT_ID_VERSION
// 2) in two independent ways: golden values that CPython's json.dumps printed
// for documents built by hand from that algorithm, and an oracle written here
// from the algorithm's description (not from canon.go or layout.go) that a
// property compares with Layout.Document on random layouts, overlapping
// buffers, empty groups and shared layers included.

// refMakeLayout is the reference test suite's make_layout(layers=...) in
// kvready's types: pool group 0 has a 100- and a 40-byte pool, pool group 1 a
// 64-byte one; layer group 0 (full attention) holds layers[0], layer group 1
// (window 64) layers[1]; each layer of group 0 has a "key" of 50 bytes at
// 50×(layer/2) in pool (0,0) and a "scale" of 20 bytes at 20×(layer/2) in pool
// (0,1), each layer of group 1 a 64-byte "key" in pool (1,0).
func refMakeLayout(layers [2][]int) Layout {
	window := 64
	l := Layout{
		TokensPerBlock: 32,
		PoolGroups:     map[int][]int{0: {100, 40}, 1: {64}},
		LayerGroups: []LayerGroup{
			{Kind: "attention", PoolGroup: 0, Layers: layers[0], Shard: Whole},
			{Kind: "attention", Window: &window, PoolGroup: 1, Layers: layers[1], Shard: Whole},
		},
	}
	for _, layer := range layers[0] {
		l.Buffers = append(l.Buffers,
			Buffer{Layer: layer, Role: "key", Pool: [2]int{0, 0}, Offset: 50 * (layer / 2), Size: 50, Mapper: Indexed, Expansion: 1},
			Buffer{Layer: layer, Role: "scale", Pool: [2]int{0, 1}, Offset: 20 * (layer / 2), Size: 20, Mapper: Indexed, Expansion: 1})
	}
	for _, layer := range layers[1] {
		l.Buffers = append(l.Buffers, Buffer{Layer: layer, Role: "key", Pool: [2]int{1, 0}, Size: 64, Mapper: Indexed, Expansion: 1})
	}
	return l
}

func oneBuffer(role string) Layout {
	return Layout{TokensPerBlock: 32, PoolGroups: map[int][]int{0: {64}},
		LayerGroups: []LayerGroup{{Kind: "attention", PoolGroup: 0, Layers: []int{0}, Shard: Whole}},
		Buffers:     []Buffer{{Layer: 0, Role: role, Pool: [2]int{0, 0}, Size: 64, Mapper: Indexed, Expansion: 1}}}
}

// TestReferenceLayoutIDs: documents and ids printed by CPython's
// json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True) over the
// reference's layout document, built by hand. "documented" is byte for byte
// the encoding the reference's test_layout_id_is_the_hash_of_the_documented_
// version_2_encoding spells out; "layer_membership" is that test suite's
// variant whose two layers' buffers share offset 0 of pool group 0's slot,
// which kvready refused before.
func TestReferenceLayoutIDs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout Layout
		doc    string
		id     string
	}{
		{"documented", refMakeLayout([2][]int{{0}, {1}}),
			`{"buffers":[{"layer":0,"offset":0,"role":"key","size":50},{"layer":0,"offset":100,"role":"scale","size":20},{"layer":1,"offset":0,"role":"key","size":64}],"groups":[{"layers":[0],"slot_bytes":[100,40]},{"layers":[1],"slot_bytes":[64]}],"tokens_per_block":32,"v":2}`,
			"0d13233b73d5533e3e49b1c581feadb2a7469967b5a78c55fbd3b5eade0b12d1"},
		{"default", refMakeLayout([2][]int{{0, 2}, {1}}),
			`{"buffers":[{"layer":0,"offset":0,"role":"key","size":50},{"layer":0,"offset":100,"role":"scale","size":20},{"layer":1,"offset":0,"role":"key","size":64},{"layer":2,"offset":50,"role":"key","size":50},{"layer":2,"offset":120,"role":"scale","size":20}],"groups":[{"layers":[0,2],"slot_bytes":[100,40]},{"layers":[1],"slot_bytes":[64]}],"tokens_per_block":32,"v":2}`,
			"c97357456f0613fbdcb8d2a8ee3d9b070eff9852adf794c6b8229a91c7beeb69"},
		{"layer_membership", refMakeLayout([2][]int{{0, 1}, {2}}),
			`{"buffers":[{"layer":0,"offset":0,"role":"key","size":50},{"layer":0,"offset":100,"role":"scale","size":20},{"layer":1,"offset":0,"role":"key","size":50},{"layer":1,"offset":100,"role":"scale","size":20},{"layer":2,"offset":0,"role":"key","size":64}],"groups":[{"layers":[0,1],"slot_bytes":[100,40]},{"layers":[2],"slot_bytes":[64]}],"tokens_per_block":32,"v":2}`,
			"846aaa84b4a7f9bd3d55414d1ac058efcb6e4df44c2a7d138542c91d8d407d58"},
		{"no layer groups", Layout{TokensPerBlock: 32, PoolGroups: map[int][]int{0: {64}},
			Buffers: []Buffer{{Layer: 0, Role: "k", Pool: [2]int{0, 0}, Size: 64, Mapper: Indexed, Expansion: 1}}},
			`{"buffers":[{"layer":0,"offset":0,"role":"k","size":64}],"groups":[],"tokens_per_block":32,"v":2}`,
			"6f8c0d01154e9596b9c2282fefc6f673e14ad2fbf6ca56f46e8ab982d7a881d5"},
		{"an empty group last, a layer in two groups and twice in one", Layout{TokensPerBlock: 16, PoolGroups: map[int][]int{0: {32}, 1: {8}},
			LayerGroups: []LayerGroup{
				{Kind: "attention", PoolGroup: 0, Layers: []int{}, Shard: Whole},
				{Kind: "attention", PoolGroup: 0, Layers: []int{4}, Shard: Whole},
				{Kind: "attention", PoolGroup: 1, Layers: []int{4, 1, 1}, Shard: Whole},
			},
			Buffers: []Buffer{
				{Layer: 4, Role: "k", Pool: [2]int{0, 0}, Size: 32, Mapper: Indexed, Expansion: 1},
				{Layer: 1, Role: "k", Pool: [2]int{1, 0}, Size: 8, Mapper: Indexed, Expansion: 1},
			}},
			`{"buffers":[{"layer":1,"offset":0,"role":"k","size":8},{"layer":4,"offset":0,"role":"k","size":32}],"groups":[{"layers":[1,1,4],"slot_bytes":[8]},{"layers":[4],"slot_bytes":[32]},{"layers":[],"slot_bytes":[32]}],"tokens_per_block":16,"v":2}`,
			"bcb414d1a86f1ab238dc38d63e02fcc06d694700a83168f04e58544d95a22ce8"},
		// CPython gives a role of "\ud800" (a lone surrogate) the id
		// 5ea36cc0fe227c26fbffc1b7e4c718827738d00c1acfb2167270060341584cff, not
		// this one: replacing the surrogate by U+FFFD would collide with it.
		{"replacement character role", oneBuffer("\ufffd"),
			`{"buffers":[{"layer":0,"offset":0,"role":"\ufffd","size":64}],"groups":[{"layers":[0],"slot_bytes":[64]}],"tokens_per_block":32,"v":2}`,
			"6205ebf50182f7643bfdfa2f304135217168d51c289b56cc99ad4c4addda71cf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.layout.Validate())
			doc, err := tc.layout.Document()
			require.NoError(t, err)
			assert.Equal(t, tc.doc, string(doc))
			id, err := tc.layout.ID()
			require.NoError(t, err)
			assert.Equal(t, tc.id, hex.EncodeToString(id[:]))
			assert.Equal(t, tc.doc, oracleDocument(tc.layout), "the oracle agrees with CPython")
		})
	}
	// The reference's test: layer membership moves the id.
	membership, err := refMakeLayout([2][]int{{0, 1}, {2}}).ID()
	require.NoError(t, err)
	base, err := refMakeLayout([2][]int{{0, 2}, {1}}).ID()
	require.NoError(t, err)
	assert.NotEqual(t, base, membership)
}

// A lone UTF-16 surrogate cannot live in a Go string: ParseLayout refuses it,
// naming the escape and where it is, instead of hashing U+FFFD in its place.
func TestParseLayoutRefusesLoneSurrogates(t *testing.T) {
	layout := func(role string) string {
		return `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[{"kind":"attention","pool_group":0,"layers":[0]}],` +
			`"buffers":[{"layer":0,"role":"` + role + `","pool":[0,0],"offset":0,"size":64}]}`
	}
	for _, tc := range []struct {
		role string
		want string // "" when valid
	}{
		{`\ud800`, `\ud800`},
		{`\uDBFF`, `\udbff`},
		{`\udc00`, `\udc00`},
		{`\udc00\ud800`, `\udc00`},
		{`\ud800\ud800`, `\ud800`},
		{`\ud800\u0041`, `\ud800`},
		{`\ud800x\udc00`, `\ud800`},
		{`k\ud83d\ude00\ud800`, `\ud800`},
		{`\ud83d\ude00`, ""},
		{`\uD83D\uDE00`, ""},
		{`\ufffd`, ""},
		{`\\ud800`, ""},
		{`\\\ud83d\ude00`, ""},
		{`\"\ud800`, `\ud800`},
		{`\u00e9\ud7ff\ue000`, ""},
	} {
		t.Run(tc.role, func(t *testing.T) {
			l, err := ParseLayout([]byte(layout(tc.role)))
			if tc.want == "" {
				require.NoError(t, err)
				_, err = l.ID()
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrLoneSurrogate)
			assert.False(t, errors.Is(err, ErrNotJSON), "valid JSON, not a valid layout")
			assert.Contains(t, err.Error(), tc.want+" at byte ")
			at := strings.Index(layout(tc.role), `"role":"`) + len(`"role":"`)
			assert.Contains(t, err.Error(), fmt.Sprintf("at byte %d", at+strings.Index(strings.ToLower(tc.role), tc.want)))
		})
	}
	// A surrogate anywhere, not only in a role, is refused the same way.
	_, err := ParseLayout([]byte(strings.Replace(layout("k"), `"attention"`, `"attention\udfff"`, 1)))
	assert.ErrorIs(t, err, ErrLoneSurrogate)
}

// A role that is not valid UTF-8 would be hashed as U+FFFD; Validate refuses
// it, and ParseLayout refuses input that is not UTF-8 as not JSON at all.
func TestInvalidUTF8IsRefused(t *testing.T) {
	for _, tc := range []struct {
		role string
		bad  int // where in the role the first bad byte is
	}{{"\xff", 0}, {"k\xc3", 1}, {"\xed\xa0\x80" /* a surrogate, UTF-8 encoded */, 0}, {"\u00e9\xe9", 2}} {
		err := oneBuffer(tc.role).Validate()
		assert.ErrorContains(t, err, fmt.Sprintf("role is not valid UTF-8 (first bad byte at offset %d)", tc.bad), "%q", tc.role)
		_, err = oneBuffer(tc.role).ID()
		assert.Error(t, err)
		prefix := `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[{"layer":0,"role":"`
		_, err = ParseLayout([]byte(prefix + tc.role + `","pool":[0,0],"offset":0,"size":64}]}`))
		assert.ErrorIs(t, err, ErrNotJSON, "%q", tc.role)
		assert.ErrorContains(t, err, fmt.Sprintf("not UTF-8 (first bad byte at offset %d)", len(prefix)+tc.bad))
	}
}

// Lone surrogates, by an oracle that knows which UTF-16 code units it wrote:
// random strings of code units, each written as an escape (either case) or,
// when it is a whole character, as UTF-8, with escaped quotes and backslashes
// between them. ParseLayout refuses the role exactly when a surrogate is not
// paired, and otherwise hashes the role the oracle decodes.
func TestLoneSurrogateProperty(t *testing.T) {
	units := rapid.SampledFrom([]uint16{'a', '"', '\\', 0x7f, 0xe9, 0xfffd, 0xd7ff, 0xe000, 0xd800, 0xdbff, 0xdc00, 0xdfff, 0xd83d, 0xde00})
	rapid.Check(t, func(t *rapid.T) {
		us := rapid.SliceOfN(units, 0, 8).Draw(t, "units")
		var text strings.Builder
		for i := 0; i < len(us); i++ {
			u := us[i]
			isHigh := u >= 0xd800 && u <= 0xdbff
			paired := isHigh && i+1 < len(us) && us[i+1] >= 0xdc00 && us[i+1] <= 0xdfff
			escape := rapid.Bool().Draw(t, "escape") || (u >= 0xd800 && u <= 0xdfff && !paired)
			switch {
			case u == '"' || u == '\\':
				text.WriteString(`\` + string(rune(u)))
			case escape && rapid.Bool().Draw(t, "upper"):
				fmt.Fprintf(&text, `\u%04X`, u)
			case escape:
				fmt.Fprintf(&text, `\u%04x`, u)
			case paired:
				text.WriteString(string(utf16.DecodeRune(rune(u), rune(us[i+1]))))
				i++
			default:
				text.WriteRune(rune(u))
			}
		}
		lone := false
		for i := 0; i < len(us); i++ {
			switch u := us[i]; {
			case u >= 0xd800 && u <= 0xdbff && i+1 < len(us) && us[i+1] >= 0xdc00 && us[i+1] <= 0xdfff:
				i++
			case u >= 0xd800 && u <= 0xdfff:
				lone = true
			}
		}
		data := `{"tokens_per_block":32,"pool_groups":{"0":[64]},"layer_groups":[],"buffers":[{"layer":0,"role":"` + text.String() + `","pool":[0,0],"offset":0,"size":64}]}`
		l, err := ParseLayout([]byte(data))
		if lone {
			if !errors.Is(err, ErrLoneSurrogate) {
				t.Fatalf("%s: want a lone-surrogate refusal, got %v", text.String(), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", text.String(), err)
		}
		if want := string(utf16.Decode(us)); l.Buffers[0].Role != want {
			t.Fatalf("%s: role %q, want %q", text.String(), l.Buffers[0].Role, want)
		}
	})
}

// TestLayoutDocumentMatchesOracle: on random valid layouts — overlapping
// buffers, empty layer groups, no layer groups, a layer in several groups or
// twice in one, non-ASCII roles, every optional buffer field — the document
// is what the oracle builds from the reference's algorithm.
func TestLayoutDocumentMatchesOracle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := randomLayout(t)
		if err := l.Validate(); err != nil {
			t.Fatalf("a layout the reference hashes was refused: %v", err)
		}
		doc, err := l.Document()
		if err != nil {
			t.Fatal(err)
		}
		if want := oracleDocument(l); string(doc) != want {
			t.Fatalf("document\n%s\nwant\n%s", doc, want)
		}
		id, _ := l.ID()
		if id != sha256.Sum256([]byte(oracleDocument(l))) {
			t.Fatal("the id is not the SHA-256 of the document")
		}
	})
}

func randomLayout(t *rapid.T) Layout {
	tpb := rapid.SampledFrom([]int{1, 2, 4, 8, 16, 32}).Draw(t, "tokens_per_block")
	l := Layout{TokensPerBlock: tpb, PoolGroups: map[int][]int{}}
	poolGroups := rapid.SliceOfNDistinct(rapid.IntRange(0, 9), 1, 3, rapid.ID[int]).Draw(t, "pool groups")
	for _, g := range poolGroups {
		l.PoolGroups[g] = rapid.SliceOfN(rapid.IntRange(1, 48), 1, 3).Draw(t, "slot widths")
	}
	for range rapid.IntRange(0, 4).Draw(t, "layer groups") {
		l.LayerGroups = append(l.LayerGroups, LayerGroup{
			Kind:      rapid.SampledFrom([]string{"attention", "state"}).Draw(t, "kind"),
			PoolGroup: rapid.SampledFrom(poolGroups).Draw(t, "pool group"),
			Layers:    rapid.SliceOfN(rapid.IntRange(0, 7), 0, 4).Draw(t, "layers"),
			Shard:     Whole,
		})
	}
	seen := map[layerRole]bool{}
	for range rapid.IntRange(0, 6).Draw(t, "buffers") {
		b := Buffer{
			Layer:     rapid.IntRange(0, 7).Draw(t, "layer"),
			Role:      rapid.SampledFrom([]string{"key", "value", "k\u00e9y", "<&>", "\x7f", "\U0001F600", "a\"b\\", "\ufffd"}).Draw(t, "role"),
			Mapper:    rapid.SampledFrom([]Mapper{Indexed, Replicated, NHD, Sectioned}).Draw(t, "mapper"),
			LocalOnly: rapid.Bool().Draw(t, "local only"),
			Expansion: 1,
		}
		if seen[layerRole{b.Layer, b.Role}] {
			continue
		}
		seen[layerRole{b.Layer, b.Role}] = true
		g := rapid.SampledFrom(poolGroups).Draw(t, "buffer pool group")
		pool := rapid.IntRange(0, len(l.PoolGroups[g])-1).Draw(t, "pool")
		width := l.PoolGroups[g][pool]
		b.Pool = [2]int{g, pool}
		b.Offset = rapid.IntRange(0, width-1).Draw(t, "offset")
		b.Size = rapid.IntRange(1, width-b.Offset).Draw(t, "size")
		for e := tpb; e >= 1; e /= 2 {
			if rapid.Bool().Draw(t, "expansion") {
				b.Expansion = e
				break
			}
		}
		switch rapid.IntRange(0, 3).Draw(t, "geometry") {
		case 1:
			one, size := 1, b.Size
			b.Geometry = Geometry{BytesPerHead: &size, NumHeads: &one}
		case 2:
			b.Geometry = Geometry{SectionBytes: []int{b.Size}}
		case 3:
			one := 1
			b.Geometry = Geometry{BytesPerHead: &one}
		}
		l.Buffers = append(l.Buffers, b)
	}
	return l
}

// oracleDocument builds the reference's layout document as generic values and
// encodes it as Python's json.dumps(sort_keys=True, separators=(",", ":"),
// ensure_ascii=True) does.
func oracleDocument(l Layout) string {
	type ranked struct{ low, local int }
	ranks := make([]ranked, len(l.LayerGroups))
	for g, lg := range l.LayerGroups {
		low := 1 << 62 // min(layers, default=1 << 62)
		for _, id := range lg.Layers {
			low = min(low, id)
		}
		ranks[g] = ranked{low, g}
	}
	slices.SortFunc(ranks, func(a, b ranked) int { return cmp.Or(cmp.Compare(a.low, b.low), cmp.Compare(a.local, b.local)) })
	groups := []any{}
	for _, r := range ranks {
		lg := l.LayerGroups[r.local]
		layers := []any{}
		sorted := slices.Sorted(slices.Values(lg.Layers))
		for _, id := range sorted {
			layers = append(layers, id)
		}
		entry := map[string]any{"layers": layers, "slot_bytes": ints(l.PoolGroups[lg.PoolGroup])}
		if lg.Kind != "attention" {
			entry["kind"] = lg.Kind
		}
		groups = append(groups, entry)
	}
	type entry struct {
		layer int
		role  string
		doc   map[string]any
	}
	var entries []entry
	for _, b := range l.Buffers {
		offset := b.Offset
		for _, w := range l.PoolGroups[b.Pool[0]][:b.Pool[1]] {
			offset += w
		}
		d := map[string]any{"layer": b.Layer, "role": b.Role, "offset": offset, "size": b.Size}
		if b.Mapper != Indexed && b.Mapper != "" {
			d["mapper"] = string(b.Mapper)
		}
		geometry := map[string]any{}
		if b.Geometry.SectionBytes != nil {
			geometry["section_bytes"] = ints(b.Geometry.SectionBytes)
		}
		if b.Geometry.BytesPerHead != nil {
			geometry["bytes_per_head"] = *b.Geometry.BytesPerHead
		}
		if b.Geometry.NumHeads != nil {
			geometry["num_heads"] = *b.Geometry.NumHeads
		}
		if len(geometry) > 0 {
			d["geometry"] = geometry
		}
		if b.LocalOnly {
			d["transfer"] = false
		}
		if b.Expansion != 1 {
			d["expansion"] = b.Expansion
		}
		entries = append(entries, entry{b.Layer, b.Role, d})
	}
	// Python compares str by code point, which for valid UTF-8 is byte order.
	slices.SortStableFunc(entries, func(a, b entry) int { return cmp.Or(cmp.Compare(a.layer, b.layer), strings.Compare(a.role, b.role)) })
	buffers := []any{}
	for _, e := range entries {
		buffers = append(buffers, e.doc)
	}
	var out strings.Builder
	pyDumps(&out, map[string]any{"v": LayoutIDVersion, "tokens_per_block": l.TokensPerBlock, "groups": groups, "buffers": buffers})
	return out.String()
}

func ints(vs []int) []any {
	out := []any{}
	for _, v := range vs {
		out = append(out, v)
	}
	return out
}

// pyDumps writes v as CPython's json.dumps with sorted keys, compact
// separators and ensure_ascii: strings go out as UTF-16 code units, printable
// ASCII as itself, the five short escapes, and everything else as \uXXXX.
func pyDumps(out *strings.Builder, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range v {
				if !yield(k) {
					return
				}
			}
		})
		out.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				out.WriteByte(',')
			}
			pyDumps(out, k)
			out.WriteByte(':')
			pyDumps(out, v[k])
		}
		out.WriteByte('}')
	case []any:
		out.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				out.WriteByte(',')
			}
			pyDumps(out, x)
		}
		out.WriteByte(']')
	case int:
		fmt.Fprint(out, v)
	case bool:
		fmt.Fprint(out, v)
	case string:
		short := map[uint16]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\b': `\b`, '\f': `\f`}
		out.WriteByte('"')
		for _, u := range utf16.Encode([]rune(v)) {
			switch s, ok := short[u]; {
			case ok:
				out.WriteString(s)
			case u >= 0x20 && u < 0x7f:
				out.WriteByte(byte(u))
			default:
				fmt.Fprintf(out, `\u%04x`, u)
			}
		}
		out.WriteByte('"')
	default:
		panic(fmt.Sprintf("pyDumps: %T", v))
	}
}
