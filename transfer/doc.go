// Package transfer is the peer-transfer contract (SPEC §2 "Peer transfers"):
// a request's KV cache moved from prefill workers straight into decode
// workers' device pages, with the same fence as the store — the pages return
// to their manager only when every accessor is proven settled, never on an
// outcome, a report or a timeout.
//
// It renders three things of the reference (TensorRT-LLM's
// disaggregation/base/backend.py, disaggregation/lifecycle.py and the
// acceptance ledger's rows A, B and C):
//
//   - The request-scoped contract: an [Extent] lends one request's [Chunk]
//     (block ids per layer group, a [CacheKind] per group, the token range,
//     an explicit IsLast) to [Fetcher.Fetch] from a named [Peer] or to
//     [Publisher.Publish]; the [Outcome] is [Delivered] (token_end),
//     [Failed] or [Cancelled], the last two with ReportsPending — which is
//     never a release condition. [Chunk.Usable] reads a delivery per kind:
//     PAGED up to token_end, STATE only at its exact checkpoint.
//   - The transceiver lifecycle: versioned [Capabilities] agreed by
//     [Negotiate] before any address is published (a [Cohort] cannot exist
//     without an [Agreement] per accessor, so nothing is published to a peer
//     lacking what the session needs); the [Logical] and [Physical] results
//     apart ([CancelResult], with SafeToReuse); a submission fence; a bounded
//     [ShutdownResult]. [Lifecycle] is the surface; [Transceiver]
//     implements it. Unknown sessions and cut-short waits answer InDoubt or
//     a disposition that is not reusable: nothing fabricates quiescence.
//   - Identity (ledger row C): every piece of [Evidence] names its attempt
//     ([SessionKey]) and its peer's [Incarnation]. Evidence from an older
//     attempt, another incarnation or an accessor not expected is refused,
//     as are duplicates and replays; a cancel that overtakes a creation
//     leaves a tombstone ([Sessions.Cancel]) that refuses the late creation.
//
// The decisions live in a pure core — [Cohort], one session's state machine
// with exact writer tracking, and [Sessions], the table of them — which
// starts no goroutine and reads no clock: every call takes the time, and
// the deadlines fixed at submission are applied before an input is judged.
// A refused input changes nothing. [Transceiver] is the thin driver that
// serialises callers, reads the clock and waits with a context (etcd raft's
// Node beside RawNode, as package readiness is built).
//
// [Transport] is the communication engine's surface, shaped on UCX's UCP so
// that the UCX binding (issue #42) is an adapter: registered [Memory] with
// packed remote keys and a [Revocation] that says what it proved, endpoints
// with one-sided puts and gets, active messages for reports, endpoint and
// worker flush, endpoint errors. The wire forms of evidence and of an
// advertisement ([AppendEvidence], [DecodeEvidence], [AppendCapabilities],
// [DecodeCapabilities]) are what its active messages carry. Package
// transfer/sim is an in-process, deterministic, adversarial Transport for
// tests and simulation.
//
// Why here, at the root beside contract, and not inside it: this is a second
// contract, pinned in a different reference file, whose words collide with
// the store contract's (its Delivered carries a token_end, the store's a set
// of served names; its extent names a request, the store's must never), and
// it is keyed by request and attempt where the store is content-addressed.
// Keeping it apart keeps contract's thirteen symbols what the seed pins and
// lets both be named without aliases. It imports only the standard library,
// so contract, staging, fsm and readiness may all build on it.
//
// The vocabulary of the physical question is defined here again rather than
// imported: fsm.Physical (and readiness's dispositions, and the
// readiness.CancelResult and Logical being added there) sit above this
// package. The names are the reference's, the same in both; the engine
// integration maps readiness's disposition onto [Physical] by name. Unlike
// fsm.Physical, this zero value is no disposition and is not reusable.
//
// Left for the engine integration (issue #41 items 2, 5 and 6; see
// docs/transfers.md): device pages lent to a transfer as leases in the
// engine's declared table, drawn in the diagrams, with readiness per layer
// and per kind, proven by the model suite; kvready simulate --disagg with
// the page checker and the naive foil; and a conformance kit for
// transports. Per-layer readiness (rule 16) is not in this package: Usable
// answers per kind for a whole delivery. The reference's acceptance ledger
// is mapped onto this package's tests in docs/testing.md.
package transfer
