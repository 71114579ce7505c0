package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/kvready/kvready/transfer"
)

// The offer: the addresses a receiver hands one writer once the session is
// created — after negotiation, and after the session's pages were recorded
// exposed. On the wire it is an active message's payload in the style of
// package transfer's evidence: a magic ("KVTO"), a format byte, fixed
// big-endian fields, then length-prefixed names and pages. A decoder
// accepts exactly one valid encoding, so every accepted offer re-encodes to
// its own bytes (FuzzDecodeOffer holds that).

// ErrWire is wrapped by every error decoding an offer or a cancel.
var ErrWire = errors.New("peer: malformed message")

// Limits on an offer's variable parts, so a decoder never allocates what a
// hostile peer asks for.
const (
	MaxOfferPages = math.MaxUint16 // pages in one offer
	MaxKeyLen     = 4096           // bytes of one packed remote key
)

const (
	offerMagic    = "KVTO"
	offerFormat   = 1
	offerFixedLen = 4 + 1 + 8 + 4 + 2 + 1 + 8 + 8 + 8 + 8 + 2 + 1 + 1
	pageFixedLen  = 4 + 4 + 8 + 4 + 2
)

// OfferPage is one page's address: the packed remote key of the
// registration it lies in, and where in it.
type OfferPage struct {
	Group, Index int // the page's place in the chunk (Page.Group, Page.Index)
	Key          []byte
	Offset       int
	Len          int
}

// Offer is what one writer is handed: the session it writes for, as which
// accessor and which life of its peer (the agreement's), the receiver (and
// its life) the addresses belong to, the token span, and every page's
// address. Every writer of a session is handed every page: which part of
// which page each writes is the writers' own division.
type Offer struct {
	Session     transfer.SessionKey
	Writer      transfer.AccessorID
	Incarnation transfer.Incarnation // the writer's peer's life the session was agreed with
	Receiver    transfer.Peer
	ReceiverInc transfer.Incarnation
	Tokens      transfer.TokenRange
	Pages       []OfferPage
}

// Validate reports every mistake in o at once, as a *transfer.InputError:
// an attempt or incarnation of 0, an empty or overlong peer name, an unknown
// role, a bad token range, no page or too many, and a page with a negative
// or overlong coordinate, an empty or overlong key, a negative offset, a
// length below 1, or a place already named.
func (o Offer) Validate() error {
	m := mistakes{what: "offer"}
	if o.Session.Attempt == 0 {
		m.add("session.attempt", "0", "an attempt id >= 1")
	}
	checkAccessor(&m, "writer", o.Writer)
	if o.Incarnation == 0 {
		m.add("incarnation", "0", "an incarnation >= 1")
	}
	checkPeer(&m, "receiver", o.Receiver)
	if o.ReceiverInc == 0 {
		m.add("receiver_incarnation", "0", "an incarnation >= 1")
	}
	if t := o.Tokens; t.Start < 0 || t.End < t.Start {
		m.add("tokens", t.String(), "0 <= start <= end")
	}
	if len(o.Pages) == 0 || len(o.Pages) > MaxOfferPages {
		m.add("pages", fmt.Sprintf("%d pages", len(o.Pages)), fmt.Sprintf("1 to %d", MaxOfferPages))
	}
	seen := make(map[[2]int]int, len(o.Pages))
	for i, pg := range o.Pages {
		// Named only for a mistake: a valid offer allocates no field name.
		field := func() string { return "pages[" + strconv.Itoa(i) + "]" }
		if pg.Group < 0 || pg.Group > math.MaxUint32 || pg.Index < 0 || pg.Index > math.MaxUint32 {
			m.add(field(), fmt.Sprintf("group %d index %d", pg.Group, pg.Index), "a group and index in [0, 2^32)")
		}
		if j, dup := seen[[2]int{pg.Group, pg.Index}]; dup {
			m.add(field(), fmt.Sprintf("group %d index %d", pg.Group, pg.Index), fmt.Sprintf("a page not already named (pages[%d])", j))
		}
		seen[[2]int{pg.Group, pg.Index}] = i
		if len(pg.Key) == 0 || len(pg.Key) > MaxKeyLen {
			m.add(field()+".key", fmt.Sprintf("%d bytes", len(pg.Key)), fmt.Sprintf("1 to %d bytes", MaxKeyLen))
		}
		if pg.Offset < 0 {
			m.add(field()+".offset", strconv.Itoa(pg.Offset), "an offset >= 0")
		}
		if pg.Len < 1 || pg.Len > math.MaxUint32 {
			m.add(field()+".len", strconv.Itoa(pg.Len), "a length in [1, 2^32)")
		}
	}
	return m.result()
}

// AppendOffer appends o's wire form to dst. It refuses an offer that does
// not validate, appending nothing.
func AppendOffer(dst []byte, o Offer) ([]byte, error) {
	if err := o.Validate(); err != nil {
		return dst, err
	}
	be := binary.BigEndian
	n := offerFixedLen + len(o.Writer.Peer) + len(o.Receiver)
	for _, pg := range o.Pages {
		n += pageFixedLen + len(pg.Key)
	}
	dst = slices.Grow(dst, n) // one allocation, not one per field that outgrows dst
	dst = append(dst, offerMagic...)
	dst = append(dst, offerFormat)
	dst = be.AppendUint64(dst, uint64(o.Session.Request))
	dst = be.AppendUint32(dst, uint32(o.Session.Attempt))
	dst = be.AppendUint16(dst, o.Writer.Rank)
	dst = append(dst, byte(o.Writer.Role))
	dst = be.AppendUint64(dst, uint64(o.Incarnation))
	dst = be.AppendUint64(dst, uint64(o.ReceiverInc))
	dst = be.AppendUint64(dst, uint64(o.Tokens.Start))
	dst = be.AppendUint64(dst, uint64(o.Tokens.End))
	dst = be.AppendUint16(dst, uint16(len(o.Pages)))
	dst = append(dst, byte(len(o.Writer.Peer)), byte(len(o.Receiver)))
	dst = append(dst, o.Writer.Peer...)
	dst = append(dst, o.Receiver...)
	for _, pg := range o.Pages {
		dst = be.AppendUint32(dst, uint32(pg.Group))
		dst = be.AppendUint32(dst, uint32(pg.Index))
		dst = be.AppendUint64(dst, uint64(pg.Offset))
		dst = be.AppendUint32(dst, uint32(pg.Len))
		dst = be.AppendUint16(dst, uint16(len(pg.Key)))
		dst = append(dst, pg.Key...)
	}
	return dst, nil
}

// DecodeOffer reads one offer from exactly b. It refuses, wrapping ErrWire,
// a message too short or too long for what its lengths say, a wrong magic or
// format, a token or offset beyond int64, and an offer that does not
// validate (naming every mistake). The pages' keys are copies: b may be
// reused.
func DecodeOffer(b []byte) (Offer, error) {
	r := reader{b: b}
	if len(b) < offerFixedLen {
		return Offer{}, fmt.Errorf("%w: %d bytes; at least %d expected", ErrWire, len(b), offerFixedLen)
	}
	if string(b[:4]) != offerMagic {
		return Offer{}, fmt.Errorf("%w: starts %q; %q expected", ErrWire, b[:4], offerMagic)
	}
	if b[4] != offerFormat {
		return Offer{}, fmt.Errorf("%w: format %d; %d expected", ErrWire, b[4], offerFormat)
	}
	r.off = 5
	var o Offer
	o.Session.Request = transfer.RequestID(r.u64())
	o.Session.Attempt = transfer.AttemptID(r.u32())
	o.Writer.Rank = r.u16()
	o.Writer.Role = transfer.Role(r.u8())
	o.Incarnation = transfer.Incarnation(r.u64())
	o.ReceiverInc = transfer.Incarnation(r.u64())
	start, end := r.u64(), r.u64()
	if start > math.MaxInt64 || end > math.MaxInt64 {
		return Offer{}, fmt.Errorf("%w: token range [%d,%d) exceeds %d", ErrWire, start, end, int64(math.MaxInt64))
	}
	o.Tokens = transfer.TokenRange{Start: int64(start), End: int64(end)}
	n := int(r.u16())
	writerLen, receiverLen := int(r.u8()), int(r.u8())
	if !r.has(writerLen + receiverLen) {
		return Offer{}, fmt.Errorf("%w: %d bytes left for names of %d and %d bytes", ErrWire, r.left(), writerLen, receiverLen)
	}
	o.Writer.Peer = transfer.Peer(r.bytes(writerLen))
	o.Receiver = transfer.Peer(r.bytes(receiverLen))
	o.Pages = make([]OfferPage, 0, min(n, r.left()/pageFixedLen))
	for i := range n {
		if !r.has(pageFixedLen) {
			return Offer{}, fmt.Errorf("%w: page %d of %d: %d bytes left, %d expected", ErrWire, i, n, r.left(), pageFixedLen)
		}
		pg := OfferPage{Group: int(r.u32()), Index: int(r.u32())}
		off, length, keyLen := r.u64(), r.u32(), int(r.u16())
		if off > math.MaxInt64 {
			return Offer{}, fmt.Errorf("%w: page %d: offset %d exceeds %d", ErrWire, i, off, int64(math.MaxInt64))
		}
		pg.Offset, pg.Len = int(off), int(length)
		if !r.has(keyLen) {
			return Offer{}, fmt.Errorf("%w: page %d: %d bytes left for a key of %d", ErrWire, i, r.left(), keyLen)
		}
		pg.Key = append([]byte(nil), r.bytes(keyLen)...)
		o.Pages = append(o.Pages, pg)
	}
	if r.left() != 0 {
		return Offer{}, fmt.Errorf("%w: %d bytes after the last page", ErrWire, r.left())
	}
	if err := o.Validate(); err != nil {
		return Offer{}, fmt.Errorf("%w: %w", ErrWire, err)
	}
	return o, nil
}

// The cancel: a receiver's request that one writer it offered stop
// (IN_FLIGHT_CANCELLATION), sent on the owner's cancel and on the session's
// deadline. It is a request, never evidence: the receiver's pages still
// return only when the writer is proven settled — by its final report after
// its flush, a revocation that fences, or never (containment). On the wire,
// in the offer's style: a magic ("KVTX"), a format byte, fixed big-endian
// fields, then the length-prefixed names and reason; DecodeCancel accepts
// exactly one encoding (FuzzDecodeCancel holds that).

const (
	cancelMagic    = "KVTX"
	cancelFormat   = 1
	cancelFixedLen = 4 + 1 + 8 + 4 + 2 + 1 + 8 + 8 + 1 + 1 + 2
)

// Cancel asks one writer to stop writing for a session: the session, the
// writer and the life of its peer the session was agreed with, the
// receiver and its life (whose addresses the writer holds), and why.
type Cancel struct {
	Session     transfer.SessionKey
	Writer      transfer.AccessorID
	Incarnation transfer.Incarnation // the writer's peer's life the session was agreed with
	Receiver    transfer.Peer
	ReceiverInc transfer.Incarnation
	Reason      string // at most transfer.MaxReasonLen bytes; may be empty
}

// Validate reports every mistake in c at once, as a *transfer.InputError:
// an attempt or incarnation of 0, an empty or overlong peer name, an
// unknown role, and an overlong reason.
func (c Cancel) Validate() error {
	m := mistakes{what: "cancel"}
	if c.Session.Attempt == 0 {
		m.add("session.attempt", "0", "an attempt id >= 1")
	}
	checkAccessor(&m, "writer", c.Writer)
	if c.Incarnation == 0 {
		m.add("incarnation", "0", "an incarnation >= 1")
	}
	checkPeer(&m, "receiver", c.Receiver)
	if c.ReceiverInc == 0 {
		m.add("receiver_incarnation", "0", "an incarnation >= 1")
	}
	if len(c.Reason) > transfer.MaxReasonLen {
		m.add("reason", fmt.Sprintf("%d bytes", len(c.Reason)), fmt.Sprintf("at most %d bytes", transfer.MaxReasonLen))
	}
	return m.result()
}

// AppendCancel appends c's wire form to dst. It refuses a cancel that does
// not validate, appending nothing.
func AppendCancel(dst []byte, c Cancel) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return dst, err
	}
	be := binary.BigEndian
	dst = append(dst, cancelMagic...)
	dst = append(dst, cancelFormat)
	dst = be.AppendUint64(dst, uint64(c.Session.Request))
	dst = be.AppendUint32(dst, uint32(c.Session.Attempt))
	dst = be.AppendUint16(dst, c.Writer.Rank)
	dst = append(dst, byte(c.Writer.Role))
	dst = be.AppendUint64(dst, uint64(c.Incarnation))
	dst = be.AppendUint64(dst, uint64(c.ReceiverInc))
	dst = append(dst, byte(len(c.Writer.Peer)), byte(len(c.Receiver)))
	dst = be.AppendUint16(dst, uint16(len(c.Reason)))
	dst = append(dst, c.Writer.Peer...)
	dst = append(dst, c.Receiver...)
	return append(dst, c.Reason...), nil
}

// DecodeCancel reads one cancel from exactly b. It refuses, wrapping
// ErrWire, a message too short or too long for what its lengths say, a
// wrong magic or format, and a cancel that does not validate (naming every
// mistake).
func DecodeCancel(b []byte) (Cancel, error) {
	if len(b) < cancelFixedLen {
		return Cancel{}, fmt.Errorf("%w: a cancel of %d bytes; at least %d expected", ErrWire, len(b), cancelFixedLen)
	}
	if string(b[:4]) != cancelMagic {
		return Cancel{}, fmt.Errorf("%w: starts %q; %q expected", ErrWire, b[:4], cancelMagic)
	}
	if b[4] != cancelFormat {
		return Cancel{}, fmt.Errorf("%w: cancel format %d; %d expected", ErrWire, b[4], cancelFormat)
	}
	r := reader{b: b, off: 5}
	var c Cancel
	c.Session.Request = transfer.RequestID(r.u64())
	c.Session.Attempt = transfer.AttemptID(r.u32())
	c.Writer.Rank = r.u16()
	c.Writer.Role = transfer.Role(r.u8())
	c.Incarnation = transfer.Incarnation(r.u64())
	c.ReceiverInc = transfer.Incarnation(r.u64())
	writerLen, receiverLen, reasonLen := int(r.u8()), int(r.u8()), int(r.u16())
	if r.left() != writerLen+receiverLen+reasonLen {
		return Cancel{}, fmt.Errorf("%w: a cancel with %d bytes after its fixed part; its length prefixes say %d", ErrWire, r.left(), writerLen+receiverLen+reasonLen)
	}
	c.Writer.Peer = transfer.Peer(r.bytes(writerLen))
	c.Receiver = transfer.Peer(r.bytes(receiverLen))
	c.Reason = string(r.bytes(reasonLen))
	if err := c.Validate(); err != nil {
		return Cancel{}, fmt.Errorf("%w: %w", ErrWire, err)
	}
	return c, nil
}

// isCancel reports whether msg claims to be a cancel (its magic), so a
// handler can tell it from an offer before decoding either.
func isCancel(msg []byte) bool { return len(msg) >= 4 && string(msg[:4]) == cancelMagic }

// reader walks a message; the caller checks has before each variable part,
// and the fixed part's length before the first read.
type reader struct {
	b   []byte
	off int
}

func (r *reader) left() int      { return len(r.b) - r.off }
func (r *reader) has(n int) bool { return n >= 0 && r.left() >= n }
func (r *reader) u8() uint8      { r.off++; return r.b[r.off-1] }
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
