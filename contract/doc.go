// Package contract is the Go rendering of the shared, content-addressed KV backend
// contract (revision [Revision], or [RevisionCancelRequest] with the optional
// cancellation extension: [Cancellable], [RequestCancel], and the [Notifier]
// capability) and of the runtime profile that gates its use.
//
// The backend surface is thirteen symbols: [Unit], [CacheExtent], [Delivered],
// [Failed], [Cancelled], [Outcome], [Attempt], [ErrSubmissionRejected], [Route],
// [Registration], [Fetcher], [Publisher] and [PoolRegistrar]. Backends implement
// it; the readiness engine consumes it.
//
// Two identities must never be confused. A [Name] identifies content: the same
// bytes mean the same rows of the same model layout, on any machine. A unit's
// local coordinates (LocalGroup, Local) identify memory in this process: a staging
// slot, never a block ordinal, never sent to a peer.
//
// Two kinds of completion must never be confused either. An [Outcome] is a logical
// answer (what was delivered). Only a Quiesce call that answers true proves that a
// backend will never touch the listed memory again. No outcome of any kind — a
// success, a failure, a cancellation, a timeout — authorises reusing memory.
package contract

// Revision is the pinned upstream revision of the shared backend contract. A
// backend or runtime profile may name it or [RevisionCancelRequest] (the same
// contract with the cancellation extension); one that names any other
// revision is refused.
const Revision = "147ed68276e7fb89d5de60002d4e793a78707a8c"
