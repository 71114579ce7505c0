package redis

import (
	"fmt"
	"strings"

	"github.com/kvready/kvready/contract"
)

// SlotPolicy decides which hash slot of a Redis Cluster a unit's key falls in.
// Every key carries a hash tag (the part between the first '{' and the next
// '}'), which Cluster hashes instead of the whole key; the policy decides what
// the tag is computed from. The key layout is the same on a single server,
// where the tag changes nothing.
type SlotPolicy int

const (
	// SlotPerBlock (the default) tags a key with a hash of the first 48 bytes
	// of the unit name: the 16-byte namespace and the 32-byte block key of the
	// staging name layout (SPEC §3). Every layer group and shard of one block
	// then lands in one slot, on one node: a fetch of a block touches one node,
	// and losing or evicting a node loses whole blocks instead of punching a
	// hole into many (a block is usable only when every layer group arrived).
	// Blocks still spread evenly over the slots, since block keys are hashes.
	SlotPerBlock SlotPolicy = iota
	// SlotPerUnit tags a key with a hash of the whole 54-byte name, so every
	// unit is placed on its own. Use it for names that do not follow the
	// staging layout; correctness never depends on the policy, only placement.
	SlotPerUnit
)

// String names the policy.
func (p SlotPolicy) String() string {
	switch p {
	case SlotPerBlock:
		return "per-block"
	case SlotPerUnit:
		return "per-unit"
	}
	return fmt.Sprintf("SlotPolicy(%d)", int(p))
}

// blockBytes is how many leading name bytes SlotPerBlock hashes: the
// namespace (16) and the block key (32).
const blockBytes = 48

// tagDigits is the length of a hash tag: a 64-bit hash in hexadecimal.
const tagDigits = 16

// DefaultPrefix is the key prefix when WithPrefix is not given.
const DefaultPrefix = "kvready:"

// checkPrefix refuses a prefix that would move the hash tag out of the key's
// tag, or that is too long to be a sensible key prefix.
func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("prefix %q contains '{' or '}': Redis Cluster would hash that instead of the key's own hash tag", p)
	}
	if len(p) > 1024 {
		return fmt.Errorf("prefix is %d bytes; want at most 1024", len(p))
	}
	return nil
}

// fnv1a64 is FNV-1a, 64 bits. The tag must be the same in every process and
// every version that shares a store, so it is spelled out here rather than
// taken from a library whose algorithm could change.
func fnv1a64(b []byte) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for _, c := range b {
		h ^= uint64(c)
		h *= prime
	}
	return h
}

const hexDigits = "0123456789abcdef"

// appendKey appends the key of (extent, name):
//
//	prefix "{" tag "}" extent "/" name
//
// where tag is the 16 lowercase hex digits of FNV-1a-64 over the name bytes the
// policy selects and name is the 54 raw bytes. The name ends the key at a fixed
// length, so the layout is unambiguous whatever bytes the extent name holds.
func appendKey(dst []byte, prefix string, policy SlotPolicy, extent string, n *contract.Name) []byte {
	tagged := n[:blockBytes]
	if policy == SlotPerUnit {
		tagged = n[:]
	}
	h := fnv1a64(tagged)
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(h>>uint(shift))&0xf])
	}
	dst = append(dst, '}')
	dst = append(dst, extent...)
	dst = append(dst, '/')
	return append(dst, n[:]...)
}
