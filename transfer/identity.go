package transfer

import (
	"fmt"
	"strconv"
)

// RequestID names one request across the prefill and decode sides (the
// reference's extent name: a globally unique non-negative integer).
type RequestID uint64

// AttemptID numbers the attempts to move one request's cache: a retry is a
// new attempt. The zero value is never issued, so evidence that forgot its
// attempt is refused rather than taken for the first.
type AttemptID uint32

// SessionKey is the identity of one attempt of one request: what every piece
// of evidence names, and what a session is found by.
type SessionKey struct {
	Request RequestID
	Attempt AttemptID
}

// String writes the key as "request/attempt".
func (k SessionKey) String() string {
	return strconv.FormatUint(uint64(k.Request), 10) + "/" + strconv.FormatUint(uint64(k.Attempt), 10)
}

// Incarnation tells apart the lives of one peer: a process that dies and
// comes back is a new incarnation, and nothing the old one said or does
// settles anything the new one was handed (or the reverse). The zero value is
// never issued.
type Incarnation uint64

// Role says which of an attempt's writers (or readers) an accessor is.
type Role uint8

const (
	// RoleKV moves the KV cache pages.
	RoleKV Role = iota + 1
	// RoleAux moves the auxiliary buffers that travel beside them (first
	// tokens, draft tokens, scales): a separate writer with its own reports.
	RoleAux
)

// String names the role: "kv", "aux", or "role(N)".
func (r Role) String() string {
	switch r {
	case RoleKV:
		return "kv"
	case RoleAux:
		return "aux"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Valid reports whether r is RoleKV or RoleAux.
func (r Role) Valid() bool { return r == RoleKV || r == RoleAux }

// AccessorID names one accessor of a session's pages: on the receiver, a
// writer (one peer's rank, KV or auxiliary); on the sender, a reader of its
// source pages (its own puts, or a remote get). Exact writer tracking means a
// session knows every AccessorID it expects before it exposes anything.
type AccessorID struct {
	Peer Peer
	Rank uint16
	Role Role
}

// String writes the accessor as "peer/rank/role".
func (a AccessorID) String() string {
	return fmt.Sprintf("%s/%d/%s", a.Peer, a.Rank, a.Role)
}

// EvidenceKind says what a piece of [Evidence] claims.
type EvidenceKind uint8

const (
	// Report: the accessor posted its writes up to TokenEnd. Progress only:
	// it may arrive before the data it reports (reports and data travel
	// apart), so it proves nothing about the pages.
	Report EvidenceKind = iota + 1
	// Done: the accessor finished, reaching TokenEnd; its final report. A
	// peer that granted PER_OPERATION_QUIESCENCE sends it only after its own
	// flush completed, and then it settles the accessor; otherwise it is
	// logical only.
	Done
	// Failure: the accessor failed (Reason); its final report. It settles
	// nothing: a failed writer, or its siblings, may still be writing.
	Failure
	// PeerCancel: the accessor's side cancelled the transfer. Not a final
	// report: the accessor still owes one.
	PeerCancel
	// Quiesced: the transport proved this accessor's access over (its
	// per-operation proof). Settles the accessor, and nothing else.
	Quiesced
	numEvidenceKinds
)

var evidenceNames = [numEvidenceKinds]string{"", "report", "done", "failure", "peer-cancel", "quiesced"}

// String names the kind, or "evidence(N)" for a value outside the set.
func (k EvidenceKind) String() string {
	if k >= 1 && k < numEvidenceKinds {
		return evidenceNames[k]
	}
	return "evidence(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is one of the evidence kinds.
func (k EvidenceKind) Valid() bool { return k >= 1 && k < numEvidenceKinds }

// carriesTokens and carriesReason say which fields a kind uses; the others
// must be zero, so two encodings never mean one piece of evidence.
func (k EvidenceKind) carriesTokens() bool { return k == Report || k == Done }
func (k EvidenceKind) carriesReason() bool { return k == Failure }

// Limits on the variable-length fields of evidence and advertisements, so a
// decoder never allocates what a hostile peer asks for.
const (
	MaxPeerLen   = 255
	MaxReasonLen = 1024
)

// Evidence is one claim about a session's pages, from an accessor or from the
// transport about one: a write report, a DONE, a failure, a peer's cancel, a
// quiescence answer. Every piece carries the attempt it is about (Session)
// and the incarnation of the accessor's peer, so evidence from an old attempt
// or a dead incarnation is refused instead of settling a new one.
type Evidence struct {
	Kind        EvidenceKind
	Session     SessionKey
	Accessor    AccessorID
	Incarnation Incarnation
	TokenEnd    int64  // Report and Done: how far the accessor reached (absolute)
	Reason      string // Failure: why
}

// String writes the evidence for logs and test failures.
func (e Evidence) String() string {
	s := fmt.Sprintf("%s %s from %s#%d", e.Kind, e.Session, e.Accessor, e.Incarnation)
	if e.Kind.carriesTokens() {
		s += fmt.Sprintf(" token_end %d", e.TokenEnd)
	}
	if e.Kind.carriesReason() {
		s += " (" + e.Reason + ")"
	}
	return s
}

// Validate reports every mistake in e at once, as an *InputError: an unknown
// kind or role, a zero attempt or incarnation, an empty or overlong peer
// name, a negative token_end, an overlong reason, or a field set that its
// kind does not carry.
func (e Evidence) Validate() error {
	m := mistakes{what: "evidence"}
	if !e.Kind.Valid() {
		m.add("kind", e.Kind.String(), "report, done, failure, peer-cancel or quiesced")
	}
	if e.Session.Attempt == 0 {
		m.add("session.attempt", "0", "an attempt id >= 1")
	}
	checkPeer(&m, "accessor.peer", e.Accessor.Peer)
	if !e.Accessor.Role.Valid() {
		m.add("accessor.role", e.Accessor.Role.String(), "kv or aux")
	}
	if e.Incarnation == 0 {
		m.add("incarnation", "0", "an incarnation >= 1")
	}
	switch {
	case e.TokenEnd < 0:
		m.add("token_end", strconv.FormatInt(e.TokenEnd, 10), "a token offset >= 0")
	case e.TokenEnd != 0 && !e.Kind.carriesTokens():
		m.add("token_end", strconv.FormatInt(e.TokenEnd, 10), "0: only report and done carry one")
	}
	switch {
	case len(e.Reason) > MaxReasonLen:
		m.add("reason", fmt.Sprintf("%d bytes", len(e.Reason)), fmt.Sprintf("at most %d bytes", MaxReasonLen))
	case e.Reason != "" && !e.Kind.carriesReason():
		m.add("reason", strconv.Quote(e.Reason), "empty: only failure carries one")
	}
	return m.result()
}

// validPeer is checkPeer's test, for a caller that names the field only
// when it fails.
func validPeer(p Peer) bool { return p != "" && len(p) <= MaxPeerLen }

func checkPeer(m *mistakes, field string, p Peer) {
	switch {
	case p == "":
		m.add(field, `""`, "a non-empty peer name")
	case len(p) > MaxPeerLen:
		m.add(field, fmt.Sprintf("%d bytes", len(p)), fmt.Sprintf("at most %d bytes", MaxPeerLen))
	}
}
