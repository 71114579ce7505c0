package ucx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/kvready/kvready/transfer"
)

// ErrMalformed is wrapped by every refusal of a malformed address or key.
var ErrMalformed = errors.New("ucx: malformed address or key")

const (
	addrMagic   = "KVUA"
	keyMagic    = "KVUK"
	wireVersion = 1
	// maxWorkerAddress bounds what a decoder accepts for a UCP worker
	// address (a few hundred bytes in practice), so a hostile blob never
	// makes it allocate much.
	maxWorkerAddress = 1 << 16
	maxRkey          = 1 << 16
)

// address is what Transport.Address publishes: who the worker is and how
// to reach it.
type address struct {
	peer   transfer.Peer
	inc    transfer.Incarnation
	worker []byte // ucp_worker_get_address
}

func (a address) append(dst []byte) []byte {
	dst = append(dst, addrMagic...)
	dst = append(dst, wireVersion, uint8(len(a.peer)))
	dst = append(dst, a.peer...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.inc))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(a.worker)))
	return append(dst, a.worker...)
}

func decodeAddress(b []byte) (address, error) {
	r := wireReader{b: b, what: "address"}
	r.magic(addrMagic)
	name := r.bytes(int(r.u8()))
	inc := transfer.Incarnation(r.u64())
	worker := r.bytes(int(r.u32()))
	if err := r.end(); err != nil {
		return address{}, err
	}
	a := address{peer: transfer.Peer(name), inc: inc, worker: append([]byte(nil), worker...)}
	switch {
	case a.peer == "":
		return address{}, fmt.Errorf("%w: the address names no peer; a peer name of 1 to %d bytes expected", ErrMalformed, transfer.MaxPeerLen)
	case a.inc == 0:
		return address{}, fmt.Errorf("%w: the address of %q has incarnation 0; an incarnation >= 1 expected", ErrMalformed, a.peer)
	case len(a.worker) == 0 || len(a.worker) > maxWorkerAddress:
		return address{}, fmt.Errorf("%w: the address of %q carries a worker address of %d bytes; 1 to %d expected", ErrMalformed, a.peer, len(a.worker), maxWorkerAddress)
	}
	return a, nil
}

// key is a packed remote key: whose registration, which one, and how to
// reach it in the registration's mode.
type key struct {
	mode   Mode
	owner  transfer.Peer
	inc    transfer.Incarnation
	len    uint64
	region uint64 // Checked: the owner's table slot
	gen    uint64 // Checked: the registration's generation (never reused)
	base   uint64 // OneSided: the remote address of byte 0
	rkey   []byte // OneSided: ucp_rkey_pack
}

func (k key) append(dst []byte) []byte {
	// One allocation for the whole key, not one per field that outgrows dst.
	dst = slices.Grow(dst, len(keyMagic)+3+len(k.owner)+4*8+4+len(k.rkey))
	dst = append(dst, keyMagic...)
	dst = append(dst, wireVersion, uint8(k.mode), uint8(len(k.owner)))
	dst = append(dst, k.owner...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(k.inc))
	dst = binary.BigEndian.AppendUint64(dst, k.len)
	if k.mode == Checked {
		dst = binary.BigEndian.AppendUint64(dst, k.region)
		return binary.BigEndian.AppendUint64(dst, k.gen)
	}
	dst = binary.BigEndian.AppendUint64(dst, k.base)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(k.rkey)))
	return append(dst, k.rkey...)
}

func decodeKey(b []byte) (key, error) {
	r := wireReader{b: b, what: "key"}
	r.magic(keyMagic)
	k := key{mode: Mode(r.u8())}
	k.owner = transfer.Peer(r.bytes(int(r.u8())))
	k.inc = transfer.Incarnation(r.u64())
	k.len = r.u64()
	switch k.mode {
	case Checked:
		k.region, k.gen = r.u64(), r.u64()
	case OneSided:
		k.base = r.u64()
		k.rkey = append([]byte(nil), r.bytes(int(r.u32()))...)
	default:
		if r.err == nil {
			r.err = fmt.Errorf("%w: key mode %d; %d (checked) or %d (one-sided) expected", ErrMalformed, k.mode, Checked, OneSided)
		}
	}
	if err := r.end(); err != nil {
		return key{}, err
	}
	switch {
	case k.owner == "" || k.inc == 0:
		return key{}, fmt.Errorf("%w: the key names owner %q incarnation %d; a named owner and an incarnation >= 1 expected", ErrMalformed, k.owner, k.inc)
	case k.len == 0:
		return key{}, fmt.Errorf("%w: the key covers 0 bytes; a registration of at least 1 byte expected", ErrMalformed)
	case k.mode == Checked && k.gen == 0:
		return key{}, fmt.Errorf("%w: the key names generation 0; a generation >= 1 expected", ErrMalformed)
	case k.mode == OneSided && (len(k.rkey) == 0 || len(k.rkey) > maxRkey):
		return key{}, fmt.Errorf("%w: the key carries a UCX rkey of %d bytes; 1 to %d expected", ErrMalformed, len(k.rkey), maxRkey)
	}
	return k, nil
}

// wireReader reads a fixed big-endian layout; the first mistake sticks.
type wireReader struct {
	b    []byte
	off  int
	what string
	err  error
}

func (r *wireReader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = fmt.Errorf("%w: the %s ends at byte %d; %d more expected", ErrMalformed, r.what, len(r.b), r.off+n-len(r.b))
		return false
	}
	return true
}

func (r *wireReader) magic(m string) {
	if !r.need(len(m) + 1) {
		return
	}
	if string(r.b[:len(m)]) != m || r.b[len(m)] != wireVersion {
		r.err = fmt.Errorf("%w: the %s starts %q version %d; %q version %d expected", ErrMalformed, r.what, r.b[:len(m)], r.b[len(m)], m, wireVersion)
		return
	}
	r.off = len(m) + 1
}

func (r *wireReader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *wireReader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	r.off += 4
	return binary.BigEndian.Uint32(r.b[r.off-4:])
}

func (r *wireReader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	r.off += 8
	return binary.BigEndian.Uint64(r.b[r.off-8:])
}

func (r *wireReader) bytes(n int) []byte {
	if !r.need(n) {
		return nil
	}
	r.off += n
	return r.b[r.off-n : r.off]
}

func (r *wireReader) end() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%w: the %s has %d bytes after its end", ErrMalformed, r.what, len(r.b)-r.off)
	}
	return r.err
}

// maxBundled bounds the messages one bundle carries, and a bundle's bytes
// are bounded by MaxMessage plus their framing: a bundle stays an eager
// active message, as each message alone would be.
const maxBundled = 256

// appendBundle frames msgs (2 to maxBundled, MaxMessage bytes in all at
// most) as one active message's data: each a big-endian uint32 length,
// then its bytes. The header's count says how many there are.
func appendBundle(dst []byte, msgs [][]byte) []byte {
	for _, m := range msgs {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m)))
		dst = append(dst, m...)
	}
	return dst
}

// splitBundle answers the count messages a bundle's data frames, each a
// slice of b capped at its end (so appending to one never writes the
// next); an empty one is nil. The caller hands over b: drain's copy out of
// UCX's buffer, already the handlers' own, is not copied again. It accepts exactly one encoding: 2 to maxBundled messages, each
// of its stated length, MaxMessage bytes in all at most, nothing after.
func splitBundle(b []byte, count int) ([][]byte, error) {
	if count < 2 || count > maxBundled {
		return nil, fmt.Errorf("%w: a bundle of %d messages; 2 to %d expected", ErrMalformed, count, maxBundled)
	}
	if len(b) > MaxMessage+4*count {
		return nil, fmt.Errorf("%w: a bundle of %d bytes for %d messages; at most %d expected", ErrMalformed, len(b), count, MaxMessage+4*count)
	}
	r := wireReader{b: b, what: "bundle"}
	out := make([][]byte, 0, count)
	for range count {
		m := r.bytes(int(r.u32()))
		if r.err != nil {
			return nil, r.err
		}
		if len(m) == 0 {
			m = nil
		}
		out = append(out, m[:len(m):len(m)])
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return out, nil
}
