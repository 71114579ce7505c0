package readiness

import (
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
)

// Ready is the work a Core hands its caller, as etcd raft's RawNode hands out
// its Ready: the core decides, the caller performs, then reports what happened
// through the core's evidence methods. The slices belong to the core and are
// reused: read them, perform the work, then call [Core.Advance] before
// reporting evidence.
type Ready struct {
	// Submissions are staged leases to hand to their backend now: call Fetch
	// or Publish with the extent, then report Submitted (keeping the attempt),
	// Rejected (an error wrapping contract.ErrSubmissionRejected and no
	// attempt) or Escaped (any other failure: something may have escaped).
	Submissions []Submission
	// Copies are the local copies to queue on the stream, in order; then record
	// one event after them. When it completes report CopiesLanded for every
	// lease in CopyLeases; when it fails, CopyFailed. A copy the device refused
	// before it started is reported with CopyRefused (the lease's other copies
	// still land with the event); a copy that failed in any other way with
	// CopyFailed, and that lease's remaining copies are skipped.
	Copies []Copy
	// CopyLeases are the leases whose copies are in Copies, once each, in the
	// order of their first copy.
	CopyLeases []Handle
	// Quiesce are leases whose backend access must now be proven over: call
	// the backend's Quiesce with their attempts (never on the owner goroutine
	// when it may block) and report Proven or Unproven. After Unproven, ask
	// again later: only a true answer ends the drain, and the containment
	// deadline does not wait.
	Quiesce []Handle
	// Forget are leases whose backend access is proven over (or was never
	// given): their attempts are no longer needed.
	Forget []Handle
	// Containments are the leases contained in this round: their slots are
	// quarantined for ever. Keep what their backend was handed.
	Containments []Containment
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
	// Staging is the row's staging slot.
	Staging []byte
}

// Empty reports whether the Ready holds no work.
func (r *Ready) Empty() bool {
	return len(r.Submissions) == 0 && len(r.Copies) == 0 && len(r.Quiesce) == 0 &&
		len(r.Forget) == 0 && len(r.Containments) == 0
}

func (r *Ready) reset() {
	clear(r.Submissions)
	clear(r.Copies)
	clear(r.Containments)
	r.Submissions, r.Copies, r.CopyLeases = r.Submissions[:0], r.Copies[:0], r.CopyLeases[:0]
	r.Quiesce, r.Forget, r.Containments = r.Quiesce[:0], r.Forget[:0], r.Containments[:0]
}
