// Package staging names staged KV rows and manages the staging memory they sit in.
//
// It holds everything between a KV cache manager's layout and the shared backend
// contract: row and part names byte-compatible with the reference lender
// (KEY_FORMAT_VERSION 2), layout ids (LAYOUT_ID_VERSION 2), staging parts and
// their geometry, the FIFO slot allocator with quarantine, lease views and the
// extents built from them, served masks, and the readiness interval a fetch
// yields — per layer group, with sliding windows and sink blocks — together
// with the rows a fetch needs and the staging a layout needs (fetch rows and
// slot counts, as the reference sizes them).
//
// Two identities never mix here. A [contract.Name] identifies content and is
// copied byte for byte from the lender; staging never re-derives one. A unit's
// (LocalGroup, Local) identifies physical staging memory in this process.
//
// The hot paths — [Allocator], [ExtentBuilder], [ServedMasksInto] and
// [Readiness] — allocate nothing in steady state, so that an engine can drive
// thousands of leases a second through them. The other functions are
// conveniences built on those.
package staging
