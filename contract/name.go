package contract

import (
	"encoding/hex"
	"fmt"
	"iter"
	"unsafe"
)

// NameSize is the length in bytes of a unit name: a 16-byte namespace, a 32-byte
// block key and three big-endian uint16 fields (group, shard count, shard index).
const NameSize = 54

// Name is the opaque identity of one unit of content. It is a fixed-size value so
// that names compare with ==, hash as map keys and never allocate. Names are
// compared for equality and for nothing else; their structure belongs to the
// lender that derived them.
type Name [NameSize]byte

// NameFromBytes copies b into a Name. It fails unless b holds exactly NameSize
// bytes.
func NameFromBytes(b []byte) (Name, error) {
	var n Name
	if len(b) != NameSize {
		return n, fmt.Errorf("contract: a unit name is %d bytes, got %d", NameSize, len(b))
	}
	copy(n[:], b)
	return n, nil
}

// String returns the name as 108 lowercase hexadecimal digits.
func (n Name) String() string { return hex.EncodeToString(n[:]) }

// NameSet is an immutable set of unit names, the Go counterpart of the
// reference's frozenset. The zero NameSet is empty and ready to use.
type NameSet struct {
	m map[Name]struct{}
}

// NewNameSet returns the set of the given names; repeated names count once.
// The set does not refer to names after it returns.
func NewNameSet(names ...Name) NameSet {
	if len(names) == 0 {
		return NameSet{}
	}
	m := make(map[Name]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return NameSet{m: m}
}

// Has reports whether n is in the set.
func (s NameSet) Has(n Name) bool {
	_, ok := s.m[n]
	return ok
}

// Len returns the number of distinct names in the set.
func (s NameSet) Len() int { return len(s.m) }

// Equal reports whether s and t hold the same names. Two sets built by one
// NewNameSet call are equal at once, without comparing names.
func (s NameSet) Equal(t NameSet) bool {
	if len(s.m) != len(t.m) {
		return false
	}
	if len(s.m) == 0 || sameMap(s.m, t.m) {
		return true
	}
	for n := range s.m {
		if _, ok := t.m[n]; !ok {
			return false
		}
	}
	return true
}

// sameMap reports whether a and b are one map. Go compares maps only with
// nil, so this compares the map headers' addresses.
func sameMap(a, b map[Name]struct{}) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}

// All yields every name in the set, in no particular order.
func (s NameSet) All() iter.Seq[Name] {
	return func(yield func(Name) bool) {
		for n := range s.m {
			if !yield(n) {
				return
			}
		}
	}
}
