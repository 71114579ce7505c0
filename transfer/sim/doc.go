// Package sim is a simulated, adversarial peer-transfer network: every
// [Node] is a transfer.Transport, in process, deterministic from a seed.
// It is the test double the transfer tests use (and, with the engine
// integration, kvready simulate --disagg): nothing happens on its own, and
// each [Network.Step] performs one action a real network could perform
// next, chosen by the seeded generator — a put lands, a get reads, a
// message arrives, a flush completes, or a scripted [Writer] makes its next
// move.
//
// Its puts write into real byte slices — the memory a receiver registered,
// its "device pages" — reading their source only when they land, so a
// checker sees sentinels overwritten and writes that land late. [Faults]
// are the knobs: reports that overtake the data they report, a DONE lost,
// masked, duplicated or replayed after the session ended, puts that outlive
// a dead sender, a revocation that cannot recall what was posted; the
// writers' [Behaviour] adds a writer that never reports, one that fails and
// writes on, and one that submits after its lease ended (vLLM #55470).
// [Network.Restart] kills a process and starts a new incarnation of it.
//
// [Network.MayWrite] is the oracle: whether anything can still write into a
// registration, by the network's own record of what is posted and what its
// writers will still post — never by a session's state — so a property can
// check that pages are never reported reusable while a writer may write.
package sim
