package transfer

import (
	"errors"
	"fmt"
)

// Outcome is how one request-scoped delivery ended, logically: exactly one of
// [Delivered], [Failed] or [Cancelled]. The set is closed. A nil Outcome means
// the delivery has not ended.
//
// Latch the kind, not the value: ReportsPending turns from true to false as
// owed reports arrive, so a stored Failed or Cancelled carries a stale one.
//
// No outcome, and no value of ReportsPending, proves that a peer has stopped
// touching the pages: reports and data travel on different channels and are
// not ordered. Only settlement of every accessor (see [Cohort]) does.
type Outcome interface {
	fmt.Stringer
	outcome()
}

// Delivered: the ask was met, up to TokenEnd — an absolute token offset, one
// value for every layer group, read by each group's kind ([Chunk.Usable]): a
// bound for PAGED, a checkpoint for STATE. A delivery owes no report (its
// ReportsPending is always false): success still owed a report is Failed or
// Cancelled.
type Delivered struct {
	TokenEnd int64
}

// String describes the outcome.
func (d Delivered) String() string { return fmt.Sprintf("delivered(token_end %d)", d.TokenEnd) }

// Failed: the transfer could not be completed; the destination's contents
// are undefined. ReportsPending says whether a report owed to the transfer
// has yet to arrive. It says nothing about hardware and is never a release
// condition: a Failed with ReportsPending false still lends its pages until
// every accessor is settled.
type Failed struct {
	Reason         string
	ReportsPending bool
}

// String describes the outcome.
func (f Failed) String() string {
	return fmt.Sprintf("failed(%s%s)", f.Reason, pendingNote(f.ReportsPending))
}

// Cancelled: someone asked the whole transfer to stop and it ended without
// delivering. A local cancel is an ordinary end; a peer's (ByPeer) is a
// transfer error. ReportsPending, as for Failed, is never a release
// condition: a cancelled transfer's peers may still be writing.
type Cancelled struct {
	ByPeer         bool
	ReportsPending bool
}

// String describes the outcome.
func (c Cancelled) String() string {
	who := "local"
	if c.ByPeer {
		who = "by peer"
	}
	return fmt.Sprintf("cancelled(%s%s)", who, pendingNote(c.ReportsPending))
}

func pendingNote(pending bool) string {
	if pending {
		return ", reports pending"
	}
	return ""
}

func (Delivered) outcome() {}
func (Failed) outcome()    {}
func (Cancelled) outcome() {}

// ReportsPending reports o's ReportsPending: false for Delivered and for nil.
// It answers whether a report owed to the transfer is still to come, and
// nothing else: it is not permission to reuse memory.
func ReportsPending(o Outcome) bool {
	switch o := o.(type) {
	case Failed:
		return o.ReportsPending
	case Cancelled:
		return o.ReportsPending
	}
	return false
}

// Attempt is one submitted request-scoped delivery.
type Attempt interface {
	// Poll never blocks. It returns nil until the delivery concludes, then an
	// outcome of the same kind for ever (ReportsPending may turn false). A
	// failure is reported as soon as it is known, possibly before every
	// report is in.
	Poll() Outcome
}

// ErrSubmissionRejected is wrapped by a Fetch or Publish that refused before
// anything escaped: no address was published to a peer and no operation was
// posted, so there is nothing to wait for. Once anything escaped, the
// submission must answer an Attempt and report Failed through it instead.
var ErrSubmissionRejected = errors.New("transfer: submission rejected before anything escaped")

// Peer names a process in a transfer (a prefill or decode worker): stable
// across its restarts, which are told apart by [Incarnation].
type Peer string

// Fetcher pulls a request's cache from a peer: the receiver's pages are the
// destination.
type Fetcher interface {
	// Fetch starts pulling ext from src. An implementation must honour src or
	// refuse it (wrapping ErrSubmissionRejected); quietly reading from
	// another peer is a disagreement nothing would report.
	Fetch(ext Extent, src Peer) (Attempt, error)
}

// Publisher offers a request's cache to the peers it is owed to: the sender's
// pages are the source, read by its own puts or by remote gets.
type Publisher interface {
	// Publish starts offering ext. Whether a reader sees the extent only once
	// all of it landed is the implementation's to guarantee.
	Publish(ext Extent) (Attempt, error)
}
