package readiness

import (
	"fmt"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
)

// Ready is the work a Core hands its caller, as etcd raft's RawNode hands out
// its Ready: the core decides, the caller performs, then reports what happened
// through [Core.Step]. The slices belong to the core and are reused: read them,
// call [Core.Advance], perform the work, then report the evidence.
type Ready struct {
	// Submissions are staged leases to hand to their backend now: call Fetch
	// or Publish with the extent, then report SubmitAccepted (keeping the
	// attempt), SubmitRejected (an error wrapping contract.ErrSubmissionRejected
	// and no attempt) or SubmitEscaped (any other failure, or a panic).
	Submissions []Submission
	// Copies are the local copies to queue on the stream, in order; then record
	// one event after them. When it completes report CopiesDone for every
	// lease in CopyLeases; when it fails, CopyLost. A copy the device refused
	// before it started is reported with CopyRefusedByDevice (the lease's other
	// copies still land with the event); a copy that failed in any other way
	// with CopyLost, and that lease's remaining copies are skipped.
	Copies []Copy
	// CopyLeases are the leases whose copies are in Copies, once each, in the
	// order of their first copy.
	CopyLeases []Handle
	// Layers says where each lease's layers end in Copies, in order (SPEC §4
	// rule 16): queue Copies[:After], then record an event; when it
	// completes report LayerDone for Lease and Layer (the last layer's may
	// be CopiesDone), when it fails CopyLost with Layer. An event recorded
	// before a later layer's copies are queued lets the layer be read
	// before the next one lands; for a fetch or a whole publish, a caller
	// that records one event after all of them and reports CopiesDone is
	// correct too, only slower to answer per layer. A layerwise publish's
	// layers come in later Readys, so its landings are only ever reported
	// per layer (LayerDone): CopiesDone is refused for it. A lease's marks
	// are contiguous, in layer order.
	Layers []LayerMark
	// Proofs are leases whose backend access must now be proven over: call
	// the backend's Quiesce with their attempts (never on the owner goroutine,
	// which it may block), poll each attempt again after a true answer and
	// report PollAnswered then QuiesceTrue, or QuiesceUnproven. At most one
	// call per lease is outstanding.
	Proofs []Proof
	// Overdue are leases whose outstanding Quiesce call outlived
	// QuiesceTimeout on the engine's clock: cancel its context. The core has
	// already taken it as unproven; a later answer is still reported.
	Overdue []Handle
	// Cancels are leases whose attempt must be asked, once, to stop:
	// contract.RequestCancel on the attempt (it must not block; recover a
	// panic), then report CancelReplied with the disposition or the error. It
	// proves nothing and releases nothing.
	Cancels []Handle
	// Forget are leases whose backend access is proven over (or was never
	// given): their attempts are no longer needed.
	Forget []Handle
	// Containments are the leases contained in this round: their slots are
	// quarantined (or, under the Recover policy, held out of use). Keep what
	// their backend was handed.
	Containments []Containment
	// Recovered are contained leases whose access a later Quiesce proved over
	// (Recover policy): their slots return as any fenced lease's do.
	Recovered []Handle
}

// LayerMark is where one layer of a lease's copies ends in Ready.Copies.
type LayerMark struct {
	Lease Handle
	// Layer is the layer's index in the core's layer order (0 for a
	// publish, whose copies are one layer).
	Layer int
	// After is the index in Ready.Copies just past the layer's copies.
	After int
	// Behind, when not zero, is the owner's event the layer's copies wait
	// for (a layerwise publish's computed layer, SPEC §4 rule 16): put the
	// stream behind it (gpu.Waiter) before queuing them. If the stream
	// cannot wait for it, queue none of them and report each as refused
	// (CopyRefusedByDevice): nothing touched their memory.
	Behind gpu.Event
}

// Submission asks for one lease's extent to be handed to its backend.
type Submission struct {
	Lease Handle
	Kind  Kind
	// Extent belongs to the lease until its fence (for ever if it is
	// quarantined): the backend may keep it and read it late. Never modify it.
	Extent *contract.CacheExtent
}

// Copy asks for one copy between staging and device memory.
type Copy struct {
	Lease Handle
	// Row is the row's index in the lease's request.
	Row int
	// ToDevice is a fetch's staging→device copy; otherwise a publish's
	// device→staging copy.
	ToDevice bool
	Device   gpu.DevicePtr
	// Staging is the row's staging bytes the copy moves: its whole slot, or
	// one layer's span of it (Device is then offset alike).
	Staging []byte
	// Layer is the copy's layer in the core's layer order.
	Layer int
}

// Proof asks for one lease's access proof.
type Proof struct {
	Lease Handle
	Kind  Kind
}

// Empty reports whether the Ready holds no work.
func (r *Ready) Empty() bool {
	return len(r.Submissions) == 0 && len(r.Copies) == 0 && len(r.Layers) == 0 && len(r.Proofs) == 0 && len(r.Overdue) == 0 &&
		len(r.Cancels) == 0 && len(r.Forget) == 0 && len(r.Containments) == 0 && len(r.Recovered) == 0
}

// rare reports whether the Ready holds any of the work most Readys hold
// none of (everything but submissions, copies and proofs), so that a runner
// passes it by with one test.
func (r *Ready) rare() bool {
	return len(r.Overdue)+len(r.Cancels)+len(r.Forget)+len(r.Containments)+len(r.Recovered) > 0
}

func (r *Ready) reset() {
	// Most Readys a round takes hold no submission, copy or containment:
	// clearing an empty slice still calls the runtime.
	if len(r.Submissions) > 0 {
		clear(r.Submissions)
	}
	if len(r.Copies) > 0 {
		clear(r.Copies)
	}
	if len(r.Containments) > 0 {
		clear(r.Containments)
	}
	r.Submissions, r.Copies, r.CopyLeases, r.Layers = r.Submissions[:0], r.Copies[:0], r.CopyLeases[:0], r.Layers[:0]
	r.Proofs, r.Overdue, r.Cancels = r.Proofs[:0], r.Overdue[:0], r.Cancels[:0]
	r.Forget, r.Containments, r.Recovered = r.Forget[:0], r.Containments[:0], r.Recovered[:0]
}

// Observed is what a piece of evidence reports.
type Observed uint8

// What the caller observed. Each names the lease (DeviceGone names none).
const (
	// SubmitAccepted: the backend accepted a submission and returned an
	// attempt; keep the attempt until the lease is forgotten.
	SubmitAccepted Observed = iota + 1
	// SubmitRejected: the backend refused a submission with an error wrapping
	// contract.ErrSubmissionRejected: nothing escaped.
	SubmitRejected
	// SubmitEscaped: a submission failed without an attempt (any other error,
	// a panic): something may have escaped, and nothing can prove it ended.
	SubmitEscaped
	// PollAnswered: what the attempt's Poll answered (Outcome; nil while
	// pending). The first answer is latched; a later one that differs is a
	// contract violation.
	PollAnswered
	// PollPanicked: Poll panicked (or answered something that is no outcome
	// by other means the caller caught): a contract violation.
	PollPanicked
	// QuiesceTrue: Quiesce answered true for the lease's attempt.
	QuiesceTrue
	// QuiesceUnproven: Quiesce answered false, failed or panicked.
	QuiesceUnproven
	// CopiesDone: the event recorded after the lease's copies completed (a
	// fetch's, or a whole publish's; a layerwise publish's are reported per
	// layer, LayerDone).
	CopiesDone
	// CopyRefusedByDevice: the device refused the copy of Row before it
	// started: nothing touches its memory.
	CopyRefusedByDevice
	// CopyLost: the lease's copies failed without a completion record (or
	// their event failed): they may still touch its slots.
	CopyLost
	// CancelReplied: the attempt answered the engine's cancel request
	// (Disposition), or failed (Reason).
	CancelReplied
	// DeviceGone: the device is lost; every lease with copies in flight has
	// them unproven, and no new lease is lent.
	DeviceGone
	// LayerDone: the event recorded after Layer's copies of the lease
	// completed (Ready.Layers). Events on one stream complete in order, so
	// every earlier layer landed too; the last layer's is CopiesDone.
	LayerDone

	numObserved
)

// The evidence the core makes itself — its owner's calls, its clock, its
// pump, an effect reporting back — enters through the same door as the
// caller's and is classified by the same switch. [Core.Step] refuses it from
// outside: only the core's clock can say that a deadline passed.
const (
	ownerReleased    Observed = numObserved + iota // Release
	ownerCancelled                                 // Cancel
	ownerRetried                                   // Retry
	ownerClosed                                    // Close, for each lease
	deadlineDue                                    // the request deadline passed with no outcome
	containmentDue                                 // the containment deadline passed
	quiesceOverdue                                 // the outstanding Quiesce call outlived its timeout
	backoffDue                                     // the back-off before asking Quiesce again ran out
	slotsGranted                                   // the allocator lent the slots
	slotsHopeless                                  // quarantine left no run that could hold the lease
	admissionGranted                               // the backend's admission bound has room
	extentRefused                                  // staging refused to build the extent (Reason)
	deviceLostCopy                                 // the device was lost with the lease's copies in flight (Reason)
	ownerComputed                                  // Computed: a layerwise publish's next layer (Layer, behind)
)

var observedNames = [numObserved]string{
	SubmitAccepted: "submit_accepted", SubmitRejected: "submit_rejected", SubmitEscaped: "submit_escaped",
	PollAnswered: "poll_answered", PollPanicked: "poll_panicked", QuiesceTrue: "quiesce_true",
	QuiesceUnproven: "quiesce_unproven", CopiesDone: "copies_done", CopyRefusedByDevice: "copy_refused_by_device",
	CopyLost: "copy_lost", CancelReplied: "cancel_replied", DeviceGone: "device_gone",
	LayerDone: "layer_done",
}

// String names what was observed.
func (o Observed) String() string {
	if o > 0 && o < numObserved {
		return observedNames[o]
	}
	return fmt.Sprintf("observed(%d)", uint8(o))
}

// Evidence is one thing the core's caller observed, reported through
// [Core.Step]: the one door through which the world enters the core. A plain
// value, so that runners can queue it.
type Evidence struct {
	What  Observed
	Lease Handle
	// Outcome is a PollAnswered answer.
	Outcome contract.Outcome
	// Row is a CopyRefusedByDevice row's index in the lease's request.
	Row int
	// Layer is a LayerDone layer, or a CopyLost's first layer whose copies
	// failed (0, every layer, when the caller cannot say).
	Layer int
	// behind is the owner's event a computed layer's copies wait for.
	behind gpu.Event
	// Reason says why (a rejection, an error, a panic, an unproven answer).
	Reason string
	// Disposition is a CancelReplied answer (zero when Reason says it failed).
	Disposition contract.CancelDisposition
}
