package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// The wire forms of evidence and of an advertisement: what a transport
// carries as an active message's payload (UCX's ucp_am_send_nbx) and what
// two sides exchange before any address is published. Both are fixed
// layouts, big-endian, with a magic, a format byte and length-prefixed
// names; a decoder refuses anything but one exact, valid encoding, so every
// accepted message re-encodes to the same bytes.

// ErrWire is wrapped by every decoding error.
var ErrWire = errors.New("transfer: malformed wire message")

const (
	wireFormat       = 1
	evidenceMagic    = "KVTE"
	capabilityMagic  = "KVTC"
	evidenceFixedLen = 4 + 1 + 1 + 8 + 4 + 8 + 2 + 1 + 8 + 1 + 2 // through the two length prefixes
	capsFixedLen     = 4 + 1 + 2 + 8 + 8 + 1
)

// AppendEvidence appends ev's wire form to dst. It refuses evidence that
// does not validate (Evidence.Validate), appending nothing.
func AppendEvidence(dst []byte, ev Evidence) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return dst, err
	}
	// One allocation, not one per field that outgrows dst.
	dst = slices.Grow(dst, evidenceFixedLen+len(ev.Accessor.Peer)+len(ev.Reason))
	dst = append(dst, evidenceMagic...)
	dst = append(dst, wireFormat, byte(ev.Kind))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ev.Session.Request))
	dst = binary.BigEndian.AppendUint32(dst, uint32(ev.Session.Attempt))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ev.Incarnation))
	dst = binary.BigEndian.AppendUint16(dst, ev.Accessor.Rank)
	dst = append(dst, byte(ev.Accessor.Role))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ev.TokenEnd))
	dst = append(dst, byte(len(ev.Accessor.Peer)))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(ev.Reason)))
	dst = append(dst, ev.Accessor.Peer...)
	dst = append(dst, ev.Reason...)
	return dst, nil
}

// DecodeEvidence reads one piece of evidence from exactly b. It refuses,
// wrapping ErrWire, a short or long message, a wrong magic or format, a
// token_end beyond int64, lengths that disagree with the message, and
// evidence that does not validate (naming every mistake).
func DecodeEvidence(b []byte) (Evidence, error) {
	r := reader{b: b, what: "evidence"}
	if err := r.header(evidenceMagic, evidenceFixedLen); err != nil {
		return Evidence{}, err
	}
	var ev Evidence
	ev.Kind = EvidenceKind(r.u8())
	ev.Session.Request = RequestID(r.u64())
	ev.Session.Attempt = AttemptID(r.u32())
	ev.Incarnation = Incarnation(r.u64())
	ev.Accessor.Rank = r.u16()
	ev.Accessor.Role = Role(r.u8())
	end := r.u64()
	if end > math.MaxInt64 {
		return Evidence{}, fmt.Errorf("%w: evidence token_end %d exceeds %d", ErrWire, end, int64(math.MaxInt64))
	}
	ev.TokenEnd = int64(end)
	peerLen, reasonLen := int(r.u8()), int(r.u16())
	if err := r.rest(peerLen + reasonLen); err != nil {
		return Evidence{}, err
	}
	ev.Accessor.Peer = Peer(r.bytes(peerLen))
	ev.Reason = string(r.bytes(reasonLen))
	if err := ev.Validate(); err != nil {
		return Evidence{}, fmt.Errorf("%w: %w", ErrWire, err)
	}
	return ev, nil
}

// AppendCapabilities appends the advertisement's wire form to dst. It
// refuses an advertisement with no peer name or an overlong one, no
// incarnation or version 0, appending nothing.
func AppendCapabilities(dst []byte, c Capabilities) ([]byte, error) {
	if err := c.validate(); err != nil {
		return dst, err
	}
	dst = append(dst, capabilityMagic...)
	dst = append(dst, wireFormat)
	dst = binary.BigEndian.AppendUint16(dst, c.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Incarnation))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Supported))
	dst = append(dst, byte(len(c.Peer)))
	return append(dst, c.Peer...), nil
}

// DecodeCapabilities reads one advertisement from exactly b, refusing
// (wrapping ErrWire) what AppendCapabilities would not write. Capability
// bits this version does not know are kept: a newer peer may advertise
// them, and Negotiate drops them.
func DecodeCapabilities(b []byte) (Capabilities, error) {
	r := reader{b: b, what: "advertisement"}
	if err := r.header(capabilityMagic, capsFixedLen); err != nil {
		return Capabilities{}, err
	}
	var c Capabilities
	c.Version = r.u16()
	c.Incarnation = Incarnation(r.u64())
	c.Supported = CapabilitySet(r.u64())
	peerLen := int(r.u8())
	if err := r.rest(peerLen); err != nil {
		return Capabilities{}, err
	}
	c.Peer = Peer(r.bytes(peerLen))
	if err := c.validate(); err != nil {
		return Capabilities{}, fmt.Errorf("%w: %w", ErrWire, err)
	}
	return c, nil
}

func (c Capabilities) validate() error {
	m := mistakes{what: "advertisement"}
	checkPeer(&m, "peer", c.Peer)
	if c.Incarnation == 0 {
		m.add("incarnation", "0", "an incarnation >= 1")
	}
	if c.Version == 0 {
		m.add("version", "0", "a protocol version >= 1")
	}
	return m.result()
}

// reader walks a message whose fixed part's length was checked first, so
// its fixed-width reads cannot run off the end.
type reader struct {
	b    []byte
	off  int
	what string
}

func (r *reader) header(magic string, fixed int) error {
	if len(r.b) < fixed {
		return fmt.Errorf("%w: %s of %d bytes; at least %d expected", ErrWire, r.what, len(r.b), fixed)
	}
	if string(r.b[:4]) != magic {
		return fmt.Errorf("%w: %s starts %q; %q expected", ErrWire, r.what, r.b[:4], magic)
	}
	if r.b[4] != wireFormat {
		return fmt.Errorf("%w: %s format %d; %d expected", ErrWire, r.what, r.b[4], wireFormat)
	}
	r.off = 5
	return nil
}

// rest checks that exactly n bytes follow.
func (r *reader) rest(n int) error {
	if got := len(r.b) - r.off; got != n {
		return fmt.Errorf("%w: %s has %d bytes after its fixed part; its length prefixes say %d", ErrWire, r.what, got, n)
	}
	return nil
}

func (r *reader) u8() uint8 { r.off++; return r.b[r.off-1] }
func (r *reader) u16() uint16 {
	r.off += 2
	return binary.BigEndian.Uint16(r.b[r.off-2:])
}
func (r *reader) u32() uint32 {
	r.off += 4
	return binary.BigEndian.Uint32(r.b[r.off-4:])
}
func (r *reader) u64() uint64 {
	r.off += 8
	return binary.BigEndian.Uint64(r.b[r.off-8:])
}
func (r *reader) bytes(n int) []byte {
	r.off += n
	return r.b[r.off-n : r.off]
}
