// Package conformance is the backend conformance kit: the checks a backend
// author runs, from a test of their own package, against their own
// implementation of the kvready backend contract (SPEC §6).
//
// [CheckFetcher] and [CheckPublisher] run random extents over real staging
// memory filled with canary bytes against a backend built fresh for each
// trial (rapid: RAPID_CHECKS trials), and fail the test with a [Violation]
// naming the contract rule that broke, the trial it broke in, and (rapid's
// report) the seed that replays the check:
//
//	func TestConformance(t *testing.T) {
//		conformance.CheckFetcher(t, func(m conformance.Memory) (conformance.FetchSubject, error) {
//			b, err := mybackend.New(m) // resolves units through m.Row(local_group, local)
//			if err != nil {
//				return conformance.FetchSubject{}, err
//			}
//			return conformance.FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
//		})
//	}
//
// One fetch trial in four goes through a readiness engine configured with
// layers (SPEC §4 rule 16) on a simulated device instead: each layer that
// reads ready must carry the stored bytes of the units that arrived, never
// before the backend proved its access over, so a write after Quiesce
// answered true shows in the layer that carried it ([RuleNoLateWrite]).
//
// After Quiesce answers true the kit owns the memory again: it reuses every
// row (served, unserved and outside the extent) by writing fresh canaries,
// and watches them for a window sized from the backend's observed latency,
// never shorter than a floor of tens of milliseconds ([WatchFloor]). A write
// seen there is reported as [RuleNoLateWrite], even when it wrote the bytes
// the row already held. Attempts that are [contract.Cancellable] are asked to
// cancel before the outcome, after it and after the proof, and checked
// against the rules of the +cancel-request-v1 extension (RuleCancel…).
//
// Under the race detector the same late write is also a data race between
// the backend's goroutine and the kit's reads: go test -race reports it with
// both stacks. Without -race the canary window names the rule. See
// docs/testing.md.
//
// This package was proptest's kit; proptest keeps deprecated forwarding
// wrappers, so code written against proptest.CheckFetcher still builds.
package conformance
