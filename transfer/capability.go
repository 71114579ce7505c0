package transfer

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Capability is one independently negotiable lifecycle capability, as the
// reference's transceiver lifecycle lists them. Its numeric value is its bit
// on the wire: stable, never reused.
type Capability uint8

// The capabilities, in the reference's order.
const (
	AttemptIdentity              Capability = iota // every piece of evidence names its attempt
	EndpointIncarnation                            // and its peer's incarnation
	AllocationGenerationLeases                     // published addresses belong to one allocation generation, revoked before reuse
	CancelBeforeCreateTombstones                   // a cancel that overtakes a session's creation refuses the late creation
	PublicationGate                                // nothing is published before the session admits it
	InFlightCancellation                           // a transfer in flight can be asked to stop
	ExactWriterTracking                            // every writer a session expects is known before it exposes anything
	SubmissionFence                                // no operation is posted for a session after its fence
	PerOperationQuiescence                         // an accessor's final DONE is sent only after its own flush completed
	EndpointWideQuiescence                         // a flush or close of a whole endpoint proves its accesses over
	DirectTransfer                                 // writes go straight into the peer's pages
	BounceTransfer                                 // writes go through a registered bounce buffer, then a local copy
	MultiWriter                                    // several writers (ranks, KV and auxiliary) fill one session
	GenerationFirst                                // the decode side allocates and publishes before prefill runs
	PipelineParallel                               // pipeline-parallel peers
	TensorParallel                                 // tensor-parallel peers
	AttentionDataParallel                          // attention data-parallel peers
	TerminalResultReplay                           // a terminal result can be asked for again, and answers the same
	numCapabilities
)

var capabilityNames = [numCapabilities]string{
	"ATTEMPT_IDENTITY", "ENDPOINT_INCARNATION", "ALLOCATION_GENERATION_LEASES",
	"CANCEL_BEFORE_CREATE_TOMBSTONES", "PUBLICATION_GATE", "IN_FLIGHT_CANCELLATION",
	"EXACT_WRITER_TRACKING", "SUBMISSION_FENCE", "PER_OPERATION_QUIESCENCE",
	"ENDPOINT_WIDE_QUIESCENCE", "DIRECT_TRANSFER", "BOUNCE_TRANSFER", "MULTI_WRITER",
	"GENERATION_FIRST", "PIPELINE_PARALLEL", "TENSOR_PARALLEL", "ATTENTION_DATA_PARALLEL",
	"TERMINAL_RESULT_REPLAY",
}

// String spells the capability as the reference does, or "capability(N)".
func (c Capability) String() string {
	if c < numCapabilities {
		return capabilityNames[c]
	}
	return "capability(" + strconv.Itoa(int(c)) + ")"
}

// CapabilitySet is a set of capabilities, one bit each.
type CapabilitySet uint64

// KnownCapabilities is every capability ProtocolVersion defines.
const KnownCapabilities CapabilitySet = 1<<numCapabilities - 1

// Caps makes a set of the capabilities given.
func Caps(cs ...Capability) CapabilitySet {
	var s CapabilitySet
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

// Has reports whether c is in s.
func (s CapabilitySet) Has(c Capability) bool { return c < 64 && s&(1<<c) != 0 }

// Missing returns what of required s lacks.
func (s CapabilitySet) Missing(required CapabilitySet) CapabilitySet { return required &^ s }

// String lists the capabilities in declared order, comma-separated; bits no
// capability names are written as capability(N). The empty set is "none".
func (s CapabilitySet) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for rest := uint64(s); rest != 0; rest &= rest - 1 {
		names = append(names, Capability(bits.TrailingZeros64(rest)).String())
	}
	return strings.Join(names, ", ")
}

// ProtocolVersion is the lifecycle protocol this package speaks. Version 0
// is a peer that never advertised (one that predates negotiation), which no
// session can run with.
const ProtocolVersion uint16 = 1

// Capabilities is what one side advertises before any address is published:
// who it is (peer and incarnation: an advertisement is about one life of a
// process), the protocol version it speaks and what it supports.
type Capabilities struct {
	Peer        Peer
	Incarnation Incarnation
	Version     uint16
	Supported   CapabilitySet
}

// Agreement is the result of a successful [Negotiate] with one incarnation of
// one peer: the version both speak and the capabilities both sides granted.
// It is made only by Negotiate — the zero value is no agreement — so a
// session, which needs one per accessor, cannot exist before negotiation, and
// nothing can be published to a peer that lacks a capability the session
// needs.
type Agreement struct {
	peer        Peer
	incarnation Incarnation
	version     uint16
	granted     CapabilitySet
}

// Peer is the peer the agreement was made with.
func (a Agreement) Peer() Peer { return a.peer }

// Incarnation is the life of the peer the agreement was made with; a new
// incarnation needs a new agreement.
func (a Agreement) Incarnation() Incarnation { return a.incarnation }

// Version is the protocol version both sides speak: the lower of the two.
func (a Agreement) Version() uint16 { return a.version }

// Granted is every capability both sides support.
func (a Agreement) Granted() CapabilitySet { return a.granted }

// Valid reports whether a came from Negotiate.
func (a Agreement) Valid() bool { return a.version != 0 }

// NegotiationError names everything that made a negotiation fail: the
// capabilities required that each side lacks, and the advertisements'
// own mistakes (no peer name, no incarnation, version 0).
type NegotiationError struct {
	Peer          Peer
	Mistakes      []Mistake
	MissingLocal  CapabilitySet // required, not supported here
	MissingRemote CapabilitySet // required, not supported by the peer
	Unknown       CapabilitySet // required, but no capability of ProtocolVersion
}

// Error names the peer and every reason at once.
func (e *NegotiationError) Error() string {
	var parts []string
	for _, m := range e.Mistakes {
		parts = append(parts, m.String())
	}
	if e.MissingRemote != 0 {
		parts = append(parts, fmt.Sprintf("peer %q lacks %s", e.Peer, e.MissingRemote))
	}
	if e.MissingLocal != 0 {
		parts = append(parts, "this side lacks "+e.MissingLocal.String())
	}
	if e.Unknown != 0 {
		parts = append(parts, fmt.Sprintf("required %s: unknown at protocol version %d", e.Unknown, ProtocolVersion))
	}
	return fmt.Sprintf("transfer: negotiation with peer %q refused: %s", e.Peer, strings.Join(parts, "; "))
}

// Negotiate agrees the capabilities for sessions with one incarnation of a
// peer, before any address is published to it. It refuses, naming every
// reason at once in a *NegotiationError, when either advertisement has no
// peer name, no incarnation or version 0, when the peer or this side lacks a
// capability in required, or when required names a capability this version
// does not define. Bits either side advertises beyond KnownCapabilities are
// dropped: a newer peer may know more, and nothing here can use it.
func Negotiate(local, remote Capabilities, required CapabilitySet) (Agreement, error) {
	e := &NegotiationError{Peer: remote.Peer}
	m := mistakes{what: "advertisement"}
	for _, side := range []struct {
		name string
		caps Capabilities
	}{{"local", local}, {"remote", remote}} {
		checkPeer(&m, side.name+".peer", side.caps.Peer)
		if side.caps.Incarnation == 0 {
			m.add(side.name+".incarnation", "0", "an incarnation >= 1")
		}
		if side.caps.Version == 0 {
			m.add(side.name+".version", "0", "a protocol version >= 1 (0 never advertised)")
		}
	}
	e.Mistakes = m.list
	e.Unknown = required &^ KnownCapabilities
	e.MissingRemote = (remote.Supported & KnownCapabilities).Missing(required & KnownCapabilities)
	e.MissingLocal = (local.Supported & KnownCapabilities).Missing(required & KnownCapabilities)
	if len(e.Mistakes) > 0 || e.Unknown != 0 || e.MissingRemote != 0 || e.MissingLocal != 0 {
		return Agreement{}, e
	}
	return Agreement{
		peer:        remote.Peer,
		incarnation: remote.Incarnation,
		version:     min(local.Version, remote.Version, ProtocolVersion),
		granted:     local.Supported & remote.Supported & KnownCapabilities,
	}, nil
}
