// Package transporttest is the conformance kit for transports: the checks
// the author of a transfer.Transport (a UCX binding, a NIXL one, a
// simulation) runs, from a test of their own package, against their own
// implementation of the transport contract (docs/transfers.md, "The
// transport, shaped on UCX"), as testing/fstest.TestFS checks a file
// system and package conformance checks a store backend.
//
// The author writes a [Harness]: from a seed, a [Net] that starts processes
// by name (each a transfer.Transport able to reach the others), lets the
// network move one [Net.Step] at a time, and — where it can — kills them
// ([Killer]). [Check] then runs random transfers with canary bytes: two to
// four processes register memory full of random bytes and draw puts, gets,
// messages, endpoint and worker flushes, closes, revocations, keys that
// must not work and deaths, interleaved with progress. Each completion's
// claim is read against the bytes themselves; no byte outside an
// operation's range may change; every request must complete within a bound
// of progress rounds; every call to the transport runs under a hang bound,
// so a transport that blocks or never completes fails the check with the
// rule named, and never hangs it:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Check(t, func(seed uint64) (transporttest.Net, error) {
//			return mytransport.NewLoopbackNet(seed) // Join, Step, Close (and Kill)
//		})
//	}
//
// A failure is a [Violation] naming the rule broken (the Rule… constants),
// what the kit saw, and rapid's replay; trials are drawn with rapid
// (RAPID_CHECKS of them), and a Net deterministic from its seed replays and
// shrinks exactly.
//
// The kit demands only what the contract promises: a message is not
// ordered with the puts posted before it, an operation cut short by a
// death or a revocation may have landed or not, a revocation that answered
// RevokedNewOnly may let posted operations land, a dead process's posted
// puts may still land. transfer/sim conforms with each of those faults;
// its DONE faults that lose, duplicate or replay a message do not, and the
// kit names them.
package transporttest
