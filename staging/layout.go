package staging

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// LayoutIDVersion is the reference's layout id version. A new field left out at
// its default keeps it; changing an existing field's encoding or meaning bumps it.
const LayoutIDVersion = 2

// Layout describes how a manager's blocks are laid out, without addresses or slot
// counts: the input of [Layout.ID]. Its JSON form is the one `kvready layout id`
// reads (see testdata/layout-simple.json).
type Layout struct {
	TokensPerBlock int
	// PoolGroups holds each device pool group's slot widths, in pool order.
	PoolGroups  map[int][]int
	LayerGroups []LayerGroup
	Buffers     []Buffer
}

// LayerGroup is one layer group. Window, SinkBlocks and Shard say which blocks
// exist and which share this rank holds; they stay out of the layout id.
type LayerGroup struct {
	Kind       string // "attention" or "state"
	Window     *int
	SinkBlocks int
	PoolGroup  int
	Layers     []int // global layer ids
	Shard      Shard
}

// Buffer is one buffer of one layer in a page: Size bytes at Offset in the slot of
// pool Pool = (pool group, pool index).
type Buffer struct {
	Layer     int
	Role      string
	Pool      [2]int
	Offset    int
	Size      int
	Mapper    Mapper
	Geometry  Geometry
	LocalOnly bool // peers skip it; it still rides along where whole slots are copied
	Expansion int
}

// Mapper says how a buffer's bytes split across tensor-parallel ranks.
type Mapper string

// The mapper kinds. The empty Mapper means Indexed.
const (
	Indexed    Mapper = "INDEXED"
	Replicated Mapper = "REPLICATED"
	NHD        Mapper = "NHD"
	Sectioned  Mapper = "SECTIONED"
)

// Geometry is a buffer's resharding geometry; nil fields are absent.
type Geometry struct {
	SectionBytes []int `json:"section_bytes"`
	BytesPerHead *int  `json:"bytes_per_head"`
	NumHeads     *int  `json:"num_heads"`
}

// jsonLayout is the input format; it differs from Layout only where JSON must:
// object keys are strings, defaults need to be told from zero values.
type jsonLayout struct {
	TokensPerBlock *int             `json:"tokens_per_block"`
	PoolGroups     map[string][]int `json:"pool_groups"`
	LayerGroups    []jsonLayerGroup `json:"layer_groups"`
	Buffers        []jsonBuffer     `json:"buffers"`
}

type jsonLayerGroup struct {
	Kind       string `json:"kind"`
	Window     *int   `json:"window"`
	SinkBlocks int    `json:"sink_blocks"`
	PoolGroup  *int   `json:"pool_group"`
	Layers     []int  `json:"layers"`
	Shard      *struct {
		Count *int `json:"count"`
		Index *int `json:"index"`
	} `json:"shard"`
}

type jsonBuffer struct {
	Layer     *int      `json:"layer"`
	Role      *string   `json:"role"`
	Pool      *[]int    `json:"pool"`
	Offset    *int      `json:"offset"`
	Size      *int      `json:"size"`
	Mapper    *string   `json:"mapper"`
	Geometry  *Geometry `json:"geometry"`
	Transfer  *bool     `json:"transfer"`
	Expansion *int      `json:"expansion"`
}

// ErrLoneSurrogate is wrapped by ParseLayout's error for a JSON string holding
// a UTF-16 surrogate escape that is not half of a pair ("\ud800" alone, or a low
// surrogate first). Python keeps such a code unit in a string and hashes it as
// written; a Go string cannot hold it, so kvready refuses instead of hashing a
// replacement.
var ErrLoneSurrogate = errors.New("a lone UTF-16 surrogate in a JSON string")

// ErrNotJSON is wrapped by ParseLayout's error when the input is not one JSON
// object at all (a syntax error, truncated input, data after the object), as
// opposed to JSON that is not a valid layout.
var ErrNotJSON = errors.New("staging: layout JSON: not a JSON object")

// jsonError rewrites a decoding error in the layout's own terms: the field at
// fault and the JSON type wanted, never a Go type name.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("%w: %v at byte %d", ErrNotJSON, syntax, syntax.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the input ends before the layout object does", ErrNotJSON)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the layout"
		}
		return fmt.Errorf("staging: layout: %s: got %s, want %s", field, typ.Value, jsonKind(typ.Type))
	}
	return fmt.Errorf("staging: layout JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another JSON value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// ParseLayout reads a layout description from JSON and validates it. Unknown keys,
// missing required keys and trailing data are refused, as is every layout
// [Layout.Validate] refuses. So is input Go cannot represent as the reference
// does: bytes that are not UTF-8 (wrapping [ErrNotJSON]) and a lone UTF-16
// surrogate escape such as "\ud800" in any JSON string (wrapping
// [ErrLoneSurrogate]). Go's decoder would silently turn either into U+FFFD, and
// a role holding it would then take the layout id of a role holding U+FFFD.
func ParseLayout(data []byte) (Layout, error) {
	if !utf8.Valid(data) {
		return Layout{}, fmt.Errorf("%w: the input is not UTF-8 (first bad byte at offset %d)", ErrNotJSON, invalidUTF8At(data))
	}
	var in jsonLayout
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return Layout{}, jsonError(err)
	}
	if _, err := dec.Token(); err == nil {
		return Layout{}, fmt.Errorf("%w: data after the layout object", ErrNotJSON)
	}
	if at, unit, lone := loneSurrogate(data); lone {
		return Layout{}, fmt.Errorf("staging: layout: %w: \\u%04x at byte %d; a Go string cannot hold it as the reference's Python string does, and replacing it with U+FFFD would give the layout id of a different layout; want a valid code point (a high surrogate followed at once by a low one)",
			ErrLoneSurrogate, unit, at)
	}
	if t := bytes.TrimSpace(data); bytes.Equal(t, []byte("null")) {
		// null decodes into the struct as nothing at all: say what the
		// document is rather than which field it lacks.
		return Layout{}, errors.New("staging: layout: the document is null, not an object; want one JSON object")
	}
	if in.TokensPerBlock == nil {
		return Layout{}, errors.New("staging: layout: tokens_per_block is missing")
	}
	if in.PoolGroups == nil {
		return Layout{}, errors.New("staging: layout: pool_groups is missing")
	}
	l := Layout{TokensPerBlock: *in.TokensPerBlock, PoolGroups: make(map[int][]int, len(in.PoolGroups))}
	for key, widths := range in.PoolGroups {
		g, err := strconv.Atoi(key)
		if err != nil || g < 0 || strconv.Itoa(g) != key {
			return Layout{}, fmt.Errorf("staging: layout: pool_groups key %q is not a non-negative decimal integer", key)
		}
		l.PoolGroups[g] = widths
	}
	for i, jg := range in.LayerGroups {
		g := LayerGroup{Kind: jg.Kind, Window: jg.Window, SinkBlocks: jg.SinkBlocks, Layers: jg.Layers, Shard: Whole}
		if jg.PoolGroup == nil {
			return Layout{}, fmt.Errorf("staging: layout: layer_groups[%d].pool_group is missing", i)
		}
		g.PoolGroup = *jg.PoolGroup
		if jg.Shard != nil {
			if jg.Shard.Count == nil || jg.Shard.Index == nil {
				return Layout{}, fmt.Errorf("staging: layout: layer_groups[%d].shard needs both count and index", i)
			}
			g.Shard = Shard{Count: *jg.Shard.Count, Index: *jg.Shard.Index}
		}
		l.LayerGroups = append(l.LayerGroups, g)
	}
	for i, jb := range in.Buffers {
		b, err := jb.buffer()
		if err != nil {
			return Layout{}, fmt.Errorf("staging: layout: buffers[%d]: %w", i, err)
		}
		l.Buffers = append(l.Buffers, b)
	}
	if err := l.Validate(); err != nil {
		return Layout{}, err
	}
	return l, nil
}

func (jb jsonBuffer) buffer() (Buffer, error) {
	switch {
	case jb.Layer == nil:
		return Buffer{}, errors.New("layer is missing")
	case jb.Role == nil:
		return Buffer{}, errors.New("role is missing")
	case jb.Pool == nil:
		return Buffer{}, errors.New("pool is missing")
	case len(*jb.Pool) != 2:
		return Buffer{}, fmt.Errorf("pool has %d entries; want [pool group, pool index]", len(*jb.Pool))
	case jb.Offset == nil:
		return Buffer{}, errors.New("offset is missing")
	case jb.Size == nil:
		return Buffer{}, errors.New("size is missing")
	}
	b := Buffer{Layer: *jb.Layer, Role: *jb.Role, Pool: [2]int{(*jb.Pool)[0], (*jb.Pool)[1]},
		Offset: *jb.Offset, Size: *jb.Size, Mapper: Indexed, Expansion: 1}
	if jb.Mapper != nil {
		b.Mapper = Mapper(*jb.Mapper)
	}
	if jb.Geometry != nil {
		b.Geometry = *jb.Geometry
	}
	if jb.Transfer != nil {
		b.LocalOnly = !*jb.Transfer
	}
	if jb.Expansion != nil {
		b.Expansion = *jb.Expansion
	}
	return b, nil
}

// Validate refuses a layout whose id would be meaningless: a non-positive
// tokens_per_block or slot width, an unknown kind, mapper or pool, a negative
// layer id, an invalid shard, a duplicate (layer, role), a role that is not
// valid UTF-8, a non-positive size, a negative offset, a buffer past its slot,
// an expansion that does not divide tokens_per_block, and geometry
// inconsistent with the size.
//
// It accepts what the reference hashes: no layer group at all, a layer group
// without layers, a layer in two groups, and buffers whose bytes overlap in
// one slot (the reference's own layer_membership test hashes two layers'
// buffers at one offset). [Layout.Overlaps] lists such buffers for a caller
// that wants to warn.
func (l Layout) Validate() error {
	if l.TokensPerBlock < 1 {
		return fmt.Errorf("staging: layout: tokens_per_block is %d; want at least 1", l.TokensPerBlock)
	}
	for g, widths := range l.PoolGroups {
		if g < 0 {
			return fmt.Errorf("staging: layout: pool group %d is negative", g)
		}
		if len(widths) == 0 {
			return fmt.Errorf("staging: layout: pool group %d has no pools; want at least one slot width", g)
		}
		for i, w := range widths {
			if w < 1 {
				return fmt.Errorf("staging: layout: pool group %d pool %d has slot width %d; want at least 1", g, i, w)
			}
		}
	}
	for i, g := range l.LayerGroups {
		if err := g.validate(l); err != nil {
			return fmt.Errorf("staging: layout: layer_groups[%d]: %w", i, err)
		}
	}
	seen := make(map[layerRole]int, len(l.Buffers))
	for i, b := range l.Buffers {
		if err := b.validate(l); err != nil {
			return fmt.Errorf("staging: layout: buffers[%d]: %w", i, err)
		}
		k := layerRole{b.Layer, b.Role}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("staging: layout: buffers[%d] and buffers[%d] are both (layer %d, role %q); each (layer, role) may appear once", j, i, b.Layer, b.Role)
		}
		seen[k] = i
	}
	return nil
}

// Overlap is two buffers of a layout whose bytes share part of one pool's
// slot: A and B index the layout's Buffers, A < B.
type Overlap struct {
	A, B int
	// Pool is the (pool group, pool index) whose slot both lie in.
	Pool [2]int
	// From and To bound the bytes both cover: [From, To) of the slot.
	From, To int
}

// Overlaps lists buffers whose bytes overlap in one slot of a pool: for every
// buffer that starts inside another one of the same pool, it names the one it
// starts in that reaches furthest, so a layout has overlapping buffers exactly
// when the list is not empty, and it never holds more entries than buffers.
// The list is in (pool, offset) order. Overlapping buffers are valid (the
// reference hashes them; see [Layout.Validate]): the list is for a caller
// that wants to warn, since two buffers sharing bytes usually mean a mistaken
// description. Buffers of a non-positive size are skipped.
func (l Layout) Overlaps() []Overlap {
	order := make([]int, 0, len(l.Buffers))
	for i, b := range l.Buffers {
		if b.Size > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := l.Buffers[i], l.Buffers[j]
		return cmp.Or(cmp.Compare(a.Pool[0], b.Pool[0]), cmp.Compare(a.Pool[1], b.Pool[1]), cmp.Compare(a.Offset, b.Offset), cmp.Compare(i, j))
	})
	var out []Overlap
	reach := -1 // the buffer of the current pool reaching furthest so far
	for _, k := range order {
		b := l.Buffers[k]
		if reach < 0 || l.Buffers[reach].Pool != b.Pool {
			reach = k
			continue
		}
		r := l.Buffers[reach]
		// Sorted by offset, r starts at or before b; it is the one reaching
		// furthest, so b overlaps some earlier buffer exactly when it starts
		// before r ends.
		if b.Offset < r.Offset+r.Size {
			out = append(out, Overlap{A: min(reach, k), B: max(reach, k), Pool: b.Pool,
				From: b.Offset, To: min(b.Offset+b.Size, r.Offset+r.Size)})
		}
		if b.Offset+b.Size > r.Offset+r.Size {
			reach = k
		}
	}
	return out
}

// Describe says, for a person, which buffers of l an overlap names and which
// bytes they share.
func (o Overlap) Describe(l Layout) string {
	if o.A < 0 || o.B >= len(l.Buffers) || o.A >= o.B {
		return fmt.Sprintf("buffers[%d] and buffers[%d] overlap (not buffers of this layout)", o.A, o.B)
	}
	a, b := l.Buffers[o.A], l.Buffers[o.B]
	return fmt.Sprintf("buffers[%d] (layer %d, role %q; bytes %d..%d) and buffers[%d] (layer %d, role %q; bytes %d..%d) share bytes %d..%d of the slot of pool %v",
		o.A, a.Layer, a.Role, a.Offset, a.Offset+a.Size, o.B, b.Layer, b.Role, b.Offset, b.Offset+b.Size, o.From, o.To, o.Pool)
}

type layerRole struct {
	layer int
	role  string
}

func (g LayerGroup) validate(l Layout) error {
	if g.Kind != "attention" && g.Kind != "state" {
		return fmt.Errorf("kind %q; want \"attention\" or \"state\"", g.Kind)
	}
	if g.Window != nil && *g.Window < 1 {
		return fmt.Errorf("window %d; want null or at least 1", *g.Window)
	}
	if g.SinkBlocks < 0 {
		return fmt.Errorf("sink_blocks %d; want at least 0", g.SinkBlocks)
	}
	if _, ok := l.PoolGroups[g.PoolGroup]; !ok {
		return fmt.Errorf("pool_group %d is not in the layout's pool_groups", g.PoolGroup)
	}
	for _, id := range g.Layers {
		if id < 0 {
			return fmt.Errorf("layer id %d is negative", id)
		}
	}
	return g.Shard.Validate()
}

func (b Buffer) validate(l Layout) error {
	at := fmt.Sprintf("(layer %d, role %q)", b.Layer, b.Role)
	if !utf8.ValidString(b.Role) {
		return fmt.Errorf("%s: role is not valid UTF-8 (first bad byte at offset %d); hashing it would replace that byte with U+FFFD and give the id of another layout; want valid UTF-8",
			at, invalidUTF8At([]byte(b.Role)))
	}
	if b.Layer < 0 {
		return fmt.Errorf("%s: layer is negative", at)
	}
	widths, ok := l.PoolGroups[b.Pool[0]]
	if !ok {
		return fmt.Errorf("%s lies in pool group %d, which is not in the layout", at, b.Pool[0])
	}
	if b.Pool[1] < 0 || b.Pool[1] >= len(widths) {
		return fmt.Errorf("%s lies in pool %d of pool group %d, which has pools 0..%d", at, b.Pool[1], b.Pool[0], len(widths)-1)
	}
	if b.Size < 1 || b.Offset < 0 {
		return fmt.Errorf("%s: %d bytes at offset %d; want a positive size and a non-negative offset", at, b.Size, b.Offset)
	}
	if b.Offset > widths[b.Pool[1]]-b.Size {
		return fmt.Errorf("%s: %d bytes at offset %d run past the %d-byte slot", at, b.Size, b.Offset, widths[b.Pool[1]])
	}
	switch b.Mapper {
	case Indexed, Replicated, NHD, Sectioned, "":
	default:
		return fmt.Errorf("%s: mapper %q; want INDEXED, REPLICATED, NHD or SECTIONED", at, b.Mapper)
	}
	if b.Expansion < 1 || l.TokensPerBlock%b.Expansion != 0 {
		return fmt.Errorf("%s: expansion %d does not divide %d tokens per block", at, b.Expansion, l.TokensPerBlock)
	}
	if err := b.Geometry.check(b.Size); err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	return nil
}

func (g Geometry) check(size int) error {
	if g.SectionBytes != nil {
		sum := 0
		for _, s := range g.SectionBytes {
			if s < 1 {
				return fmt.Errorf("geometry: section sizes must be positive, got %v", g.SectionBytes)
			}
			if sum > size-s {
				return fmt.Errorf("geometry: sections %v exceed the %d-byte size", g.SectionBytes, size)
			}
			sum += s
		}
		if sum != size {
			return fmt.Errorf("geometry: sections %v do not sum to %d bytes", g.SectionBytes, size)
		}
	}
	if g.BytesPerHead != nil {
		if *g.BytesPerHead < 1 {
			return fmt.Errorf("geometry: bytes_per_head %d; want at least 1", *g.BytesPerHead)
		}
		if size%*g.BytesPerHead != 0 {
			return fmt.Errorf("geometry: %d bytes is not a whole number of %d-byte heads", size, *g.BytesPerHead)
		}
	}
	if g.NumHeads != nil && *g.NumHeads < 1 {
		return fmt.Errorf("geometry: num_heads %d; want at least 1", *g.NumHeads)
	}
	if g.BytesPerHead != nil && g.NumHeads != nil && size/(*g.BytesPerHead) != *g.NumHeads {
		return fmt.Errorf("geometry: %d heads of %d bytes is not %d bytes", *g.NumHeads, *g.BytesPerHead, size)
	}
	return nil
}

// ID returns the layout id: SHA-256 of the canonical JSON of the layout document
// (see [Layout.Document]). It refuses what [Layout.Validate] refuses.
func (l Layout) ID() ([sha256.Size]byte, error) {
	doc, err := l.Document()
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(doc), nil
}

// Document returns the canonical JSON that the layout id hashes:
// {"v":2,"tokens_per_block":T,"groups":[…],"buffers":[…]} with groups in
// canonical order and buffers sorted by (layer, role). Addresses, windows, sinks,
// shards and local numbering stay out, so that peers laid out alike agree.
func (l Layout) Document() ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	layers := make([][]int, len(l.LayerGroups))
	for i, g := range l.LayerGroups {
		layers[i] = g.Layers
	}
	canonical := CanonicalOrder(layers)
	groups := make([]LayerGroup, len(l.LayerGroups))
	for local, g := range l.LayerGroups {
		groups[canonical[local]] = g
	}
	buffers := slices.Clone(l.Buffers)
	slices.SortFunc(buffers, func(a, b Buffer) int {
		if c := cmp.Compare(a.Layer, b.Layer); c != 0 {
			return c
		}
		return compareString(a.Role, b.Role)
	})

	var w canonWriter
	w.raw(`{"buffers":[`)
	for i, b := range buffers {
		if i > 0 {
			w.raw(",")
		}
		l.writeBuffer(&w, b)
	}
	w.raw(`],"groups":[`)
	for i, g := range groups {
		if i > 0 {
			w.raw(",")
		}
		w.raw("{")
		if g.Kind != "attention" {
			w.raw(`"kind":`)
			w.str(g.Kind)
			w.raw(",")
		}
		w.raw(`"layers":`)
		sorted := slices.Clone(g.Layers)
		slices.Sort(sorted)
		w.ints(sorted)
		w.raw(`,"slot_bytes":`)
		w.ints(l.PoolGroups[g.PoolGroup])
		w.raw("}")
	}
	w.raw(`],"tokens_per_block":`)
	w.int(l.TokensPerBlock)
	w.raw(`,"v":`)
	w.int(LayoutIDVersion)
	w.raw("}")
	return w.b, nil
}

// writeBuffer writes one buffer's document entry, keys sorted, fields at their
// defaults left out so that a new defaulted field keeps existing ids.
func (l Layout) writeBuffer(w *canonWriter, b Buffer) {
	w.raw("{")
	if b.Expansion != 1 {
		w.raw(`"expansion":`)
		w.int(b.Expansion)
		w.raw(",")
	}
	if g := b.Geometry; g.SectionBytes != nil || g.BytesPerHead != nil || g.NumHeads != nil {
		w.raw(`"geometry":{`)
		sep := ""
		if g.BytesPerHead != nil {
			w.raw(`"bytes_per_head":`)
			w.int(*g.BytesPerHead)
			sep = ","
		}
		if g.NumHeads != nil {
			w.raw(sep + `"num_heads":`)
			w.int(*g.NumHeads)
			sep = ","
		}
		if g.SectionBytes != nil {
			w.raw(sep + `"section_bytes":`)
			w.ints(g.SectionBytes)
		}
		w.raw("},")
	}
	w.raw(`"layer":`)
	w.int(b.Layer)
	if b.Mapper != Indexed && b.Mapper != "" {
		w.raw(`,"mapper":`)
		w.str(string(b.Mapper))
	}
	widths := l.PoolGroups[b.Pool[0]]
	offset := b.Offset
	for _, width := range widths[:b.Pool[1]] {
		offset += width
	}
	w.raw(`,"offset":`)
	w.int(offset)
	w.raw(`,"role":`)
	w.str(b.Role)
	w.raw(`,"size":`)
	w.int(b.Size)
	if b.LocalOnly {
		w.raw(`,"transfer":false`)
	}
	w.raw("}")
}

func compareString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// invalidUTF8At returns the offset of the first byte of b that does not start
// a valid UTF-8 sequence, or len(b).
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// loneSurrogate finds the first \uXXXX escape in a JSON string of data that is
// a UTF-16 surrogate not paired as JSON pairs them (a high surrogate D800–DBFF
// followed at once by an escaped low surrogate DC00–DFFF). It returns the
// escape's byte offset (at its backslash) and code unit. data must be valid
// JSON: it runs after the decoder has accepted it.
func loneSurrogate(data []byte) (at int, unit uint16, found bool) {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			start := i
			i++ // the escaped character
			if i+4 >= len(data) || data[i] != 'u' {
				continue
			}
			u, ok := hex4(data[i+1 : i+5])
			i += 4
			switch {
			case !ok || u < 0xD800 || u > 0xDFFF:
			case u <= 0xDBFF && i+6 < len(data) && data[i+1] == '\\' && data[i+2] == 'u':
				if low, ok := hex4(data[i+3 : i+7]); ok && low >= 0xDC00 && low <= 0xDFFF {
					i += 6 // the pair's low half
					continue
				}
				return start, u, true
			default:
				return start, u, true
			}
		}
	}
	return 0, 0, false
}

// hex4 reads four hexadecimal digits, either case.
func hex4(b []byte) (uint16, bool) {
	var v uint16
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint16(d)
	}
	return v, true
}
