package staging

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvready/kvready/contract"
)

// KeyFormatVersion is the reference lender's name format version. Changing the
// format bumps it, so that names of the old format miss instead of hitting wrongly.
const KeyFormatVersion = 2

// Sizes of the fields of a name, in bytes.
const (
	NamespaceSize = 16
	KeySize       = 32
	// MaxScope is the longest scope whose length fits the u16 length prefix.
	MaxScope = 0xFFFF
	// partLayoutHex is how many hex digits of the layout id a part name keeps.
	partLayoutHex = 16
)

// namespaceMagic opens every namespace digest.
const namespaceMagic = "trtllm-kv-object"

// Key is a row's 32-byte block key, derived by the lender from the tokens it covers.
type Key [KeySize]byte

// Namespace is the 16 bytes every name of one (scope, layout) starts with.
type Namespace [NamespaceSize]byte

// ErrEmptyLayoutID reports a namespace asked for without a layout id: names without
// one would mix incompatible bytes.
var ErrEmptyLayoutID = errors.New("staging: layout id is empty; a namespace without one would mix incompatible bytes")

// NewNamespace derives the namespace of scope and layoutID: the first 16 bytes of
// SHA-256 over "trtllm-kv-object", u16(2), then scope and layoutID, each behind
// its u16 length. It refuses an empty layoutID and a scope over [MaxScope] bytes.
func NewNamespace(scope, layoutID []byte) (Namespace, error) {
	var ns Namespace
	if len(layoutID) == 0 {
		return ns, ErrEmptyLayoutID
	}
	if len(layoutID) > MaxScope {
		return ns, fmt.Errorf("staging: layout id is %d bytes; at most %d fit its length prefix", len(layoutID), MaxScope)
	}
	if len(scope) > MaxScope {
		return ns, fmt.Errorf("staging: scope is %d bytes; at most %d fit its length prefix", len(scope), MaxScope)
	}
	h := sha256.New()
	var u [2]byte
	h.Write([]byte(namespaceMagic))
	h.Write(binary.BigEndian.AppendUint16(u[:0], KeyFormatVersion))
	h.Write(binary.BigEndian.AppendUint16(u[:0], uint16(len(scope))))
	h.Write(scope)
	h.Write(binary.BigEndian.AppendUint16(u[:0], uint16(len(layoutID))))
	h.Write(layoutID)
	copy(ns[:], h.Sum(nil))
	return ns, nil
}

// emptyGroupSort is where a layer group without layers sorts: the reference uses
// 1<<62 as the default minimum, so a group whose smallest id is at least that ties
// with an empty one and keeps its local order, exactly as there.
const emptyGroupSort = 1 << 62

// CanonicalOrder returns each local layer group's canonical index: groups ordered
// by their smallest global layer id (an empty group last), ties kept in local
// order. Pipeline parallelism does not change it, so peers agree on it.
func CanonicalOrder(layers [][]int) []int {
	order := make([]int, len(layers))
	for i := range order {
		order[i] = i
	}
	low := func(g int) int {
		if len(layers[g]) == 0 {
			return emptyGroupSort
		}
		return slices.Min(layers[g])
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(low(a), low(b)) })
	canonical := make([]int, len(layers))
	for index, local := range order {
		canonical[local] = index
	}
	return canonical
}

// Shard is the share of a layer group's content one rank holds: Index of Count.
// Shard{1, 0} is the whole content, which every rank names alike.
type Shard struct {
	Count int
	Index int
}

// Whole is the shard of unsharded content.
var Whole = Shard{Count: 1, Index: 0}

// Validate refuses a count below 1, an index outside [0, Count) and values that
// do not fit a name's u16 fields.
func (s Shard) Validate() error {
	if s.Count < 1 || s.Count > 0xFFFF || s.Index < 0 || s.Index >= s.Count {
		return fmt.Errorf("staging: shard %d of %d; want a count in [1, 65535] and 0 <= index < count", s.Index, s.Count)
	}
	return nil
}

// Identity names one manager's rows and staging parts. It is immutable once built
// and safe for concurrent use.
type Identity struct {
	namespace Namespace
	layoutID  []byte
	canonical []int
	suffixes  [][6]byte
}

// NewIdentity builds the names of a manager whose local layer group g holds the
// global layer ids layers[g] and the share shards[g] of its content. It refuses an
// empty layoutID, a scope over [MaxScope] bytes, a shard count that differs from
// the group count, and an invalid shard.
func NewIdentity(scope, layoutID []byte, layers [][]int, shards []Shard) (*Identity, error) {
	if len(shards) != len(layers) {
		return nil, fmt.Errorf("staging: %d layer groups but %d shards; want one shard per group", len(layers), len(shards))
	}
	if len(layers) > 0xFFFF {
		return nil, fmt.Errorf("staging: %d layer groups; at most 65535 fit a name's group field", len(layers))
	}
	ns, err := NewNamespace(scope, layoutID)
	if err != nil {
		return nil, err
	}
	id := &Identity{namespace: ns, layoutID: slices.Clone(layoutID), canonical: CanonicalOrder(layers)}
	id.suffixes = make([][6]byte, len(layers))
	for g, s := range shards {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("layer group %d: %w", g, err)
		}
		binary.BigEndian.PutUint16(id.suffixes[g][0:], uint16(id.canonical[g]))
		binary.BigEndian.PutUint16(id.suffixes[g][2:], uint16(s.Count))
		binary.BigEndian.PutUint16(id.suffixes[g][4:], uint16(s.Index))
	}
	return id, nil
}

// Namespace returns the 16 bytes every name of this identity starts with.
func (id *Identity) Namespace() Namespace { return id.namespace }

// Groups returns the number of local layer groups.
func (id *Identity) Groups() int { return len(id.canonical) }

// Canonical returns local layer group g's canonical index, or an error for an
// unknown group.
func (id *Identity) Canonical(g int) (int, error) {
	if g < 0 || g >= len(id.canonical) {
		return 0, fmt.Errorf("staging: unknown layer group %d; this identity has groups 0..%d", g, len(id.canonical)-1)
	}
	return id.canonical[g], nil
}

// Name returns the name of the row of local layer group g with block key key:
// namespace ‖ key ‖ u16 canonical index ‖ u16 shard count ‖ u16 shard index.
func (id *Identity) Name(g int, key Key) (contract.Name, error) {
	var n contract.Name
	if _, err := id.Canonical(g); err != nil {
		return n, err
	}
	copy(n[:NamespaceSize], id.namespace[:])
	copy(n[NamespaceSize:NamespaceSize+KeySize], key[:])
	copy(n[NamespaceSize+KeySize:], id.suffixes[g][:])
	return n, nil
}

// PartName names the staging part that serves the local layer groups: the first
// 16 hex digits of the layout id, ":lg", then the sorted distinct canonical
// indices of the groups joined by "+". Instances laid out alike name it alike.
func (id *Identity) PartName(groups []int) (string, error) {
	canon := make([]int, 0, len(groups))
	for _, g := range groups {
		c, err := id.Canonical(g)
		if err != nil {
			return "", err
		}
		canon = append(canon, c)
	}
	slices.Sort(canon)
	canon = slices.Compact(canon)
	prefix := hex.EncodeToString(id.layoutID)
	prefix = prefix[:min(len(prefix), partLayoutHex)]
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(":lg")
	for i, c := range canon {
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(c))
	}
	return b.String(), nil
}

// NameFields are the parts of a name, as [Explain] reads them.
type NameFields struct {
	Namespace Namespace
	Key       Key
	Group     int // canonical layer-group index
	Shard     Shard
}

// Explain splits a name into its fields. A name is opaque to everyone but its
// lender; Explain exists so that a person can see why a store missed. It refuses a
// name whose shard fields no lender could have written (count 0, index ≥ count).
func Explain(n contract.Name) (NameFields, error) {
	var f NameFields
	copy(f.Namespace[:], n[:NamespaceSize])
	copy(f.Key[:], n[NamespaceSize:NamespaceSize+KeySize])
	tail := n[NamespaceSize+KeySize:]
	f.Group = int(binary.BigEndian.Uint16(tail[0:]))
	f.Shard = Shard{Count: int(binary.BigEndian.Uint16(tail[2:])), Index: int(binary.BigEndian.Uint16(tail[4:]))}
	if err := f.Shard.Validate(); err != nil {
		return NameFields{}, fmt.Errorf("staging: name %s… has impossible shard fields: %w", n.String()[:16], err)
	}
	return f, nil
}

// ParseName reads a name from its 108 hexadecimal digits (either case).
func ParseName(s string) (contract.Name, error) {
	var n contract.Name
	if len(s) != 2*contract.NameSize {
		return n, fmt.Errorf("staging: a name is %d hex digits, got %d", 2*contract.NameSize, len(s))
	}
	if _, err := hex.Decode(n[:], []byte(s)); err != nil {
		return contract.Name{}, fmt.Errorf("staging: name is not hexadecimal: %w", err)
	}
	return n, nil
}

// Identity returns the names of a manager laid out as l, in the namespace of
// scope: its layer ids and shards come from l's layer groups and its layout id
// from [Layout.ID].
func (l Layout) Identity(scope []byte) (*Identity, error) {
	id, err := l.ID()
	if err != nil {
		return nil, err
	}
	layers := make([][]int, len(l.LayerGroups))
	shards := make([]Shard, len(l.LayerGroups))
	for i, g := range l.LayerGroups {
		layers[i], shards[i] = g.Layers, g.Shard
	}
	return NewIdentity(scope, id[:], layers, shards)
}
