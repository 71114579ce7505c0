// Package peer puts a peer transfer behind the engine's fence: a transfer
// is one more backend of readiness.Engine, and the transfer's cohort of
// writers (on the receiver) or the sender's own puts (on the sender) is the
// accessor whose proof the engine's Quiesce waits for (SPEC §2 "Peer
// transfers", §4 rules 16–19). The lifecycle table does not change: a lease
// of pages lent to a transfer goes Requested → outcome → AccessFenced →
// CopyOut of the served rows (the bounce buffers scattered into the device
// pages, layer by layer) → LogicallyComplete → Released, or, when the
// writers never settle, Contained/Quarantined — never reuse.
//
// The staging slots the engine lends are the pages the peers write: bounce
// buffers registered with the transport. A Receiver (the decode side) is a
// contract.Fetcher whose attempts are sessions of a transfer.Transceiver:
//
//   - The owner negotiates with each prefill process (Connect, from its
//     advertisement) before anything is published to it, and tells the
//     receiver each request before lending its pages (Expect(Plan)), which
//     answers the pages' unit names (PageName). The owner lends one row per
//     page under that name; Fetch finds the plan from the extent's names
//     alone and refuses, with contract.ErrSubmissionRejected, an extent that
//     is not exactly one plan's pages, or a writer not agreed with.
//   - Fetch creates the session (deadlines fixed now), registers the pages
//     (each session under its own registration when Leased), records them
//     exposed, and hands each writer its Offer: the packed keys and offsets
//     of every page — over an endpoint by default, through a seam in tests.
//   - Evidence comes in through the transport's handlers, run by Progress:
//     a message is evidence only if it speaks for the peer and life of the
//     endpoint it came on; an endpoint error fails the sessions of that
//     life. Progress is called by a driver goroutine (ReceiverConfig.Poll)
//     or by the owner.
//   - The outcome maps by kind: the cohort's Delivered(token_end) is
//     contract.Delivered naming the pages served (Served: a PAGED page once
//     its span is in, a STATE slot only at its exact checkpoint), Failed is
//     Failed (latched at once on one writer's failure), Cancelled is
//     Cancelled{ByPeer}. Poll never blocks and never changes its answer.
//   - Quiesce and TryQuiesce answer true only when the session's physical
//     disposition is reusable — after the revocation, for a leased session,
//     which Progress makes once the outcome is latched — and never wait;
//     IN_DOUBT answers false for ever, so the engine contains the lease at
//     its own deadline. The first true retires the session.
//
// A Sender (the prefill side) is a contract.Publisher: the publish lease
// holds the source pages (the publish's device→staging copies fill the
// bounce buffers); Publish waits for the receiver's offer, posts a put from
// every slot, flushes the endpoint and only then sends DONE. Its Quiesce is
// true only once every put it posted completed, and it never posts after.
//
// The package imports contract, transfer and the standard library only; it
// never sees the engine. docs/transfers.md says how it maps onto the table,
// and what TestEngineOverAdversarialPeers and TestSenderSlotsOutliveTheirPuts
// — the shipped engine over this package over transfer/sim — prove.
package peer
