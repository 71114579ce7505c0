package readiness_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// The refusal property for every state: TestRefusedCallsChangeNothing draws
// its evidence at random, so a refusal that only one state makes (a
// Cancelled{by_peer} after the outcome latched, say) may never be drawn
// there. TestRefusedEvidenceOfEveryKindInEveryState walks every state a lease
// can reach, breadth first over the moves below, and in each fires every
// piece of evidence the battery holds — every kind, every outcome kind,
// Cancelled by the peer and locally — each on a fresh core replayed to that
// state: a refusal must leave LeaseInfo, Stats and Ready exactly as they were.

// refusalWorld is one lease (the target) behind a blocker that holds every
// slot, and a holder of the one admission (MaxOutstanding 1): the target
// starts out waiting, and is staged while the holder is outstanding.
type refusalWorld struct {
	c       *readiness.Core
	holder  readiness.Handle
	blocker readiness.Handle
	target  readiness.Handle
	names   [2]contract.Name
	now     time.Time
}

type worldMove struct {
	name string
	do   func(w *refusalWorld) error
}

func step(what readiness.Observed, o contract.Outcome) func(w *refusalWorld) error {
	return func(w *refusalWorld) error {
		return w.c.Step(readiness.Evidence{What: what, Lease: w.target, Outcome: o, Reason: "because", Disposition: contract.CancelRequested})
	}
}

// refusalMoves take the target through the lifecycle: every answer a backend,
// the device, the owner and the clock can give.
func refusalMoves(n [2]contract.Name) []worldMove {
	return []worldMove{
		{"free the slots", func(w *refusalWorld) error { return withdraw(w, w.blocker) }},
		{"free the admission", func(w *refusalWorld) error { return withdraw(w, w.holder) }},
		{"submitted", step(readiness.SubmitAccepted, nil)},
		{"rejected", step(readiness.SubmitRejected, nil)},
		{"escaped", step(readiness.SubmitEscaped, nil)},
		{"served", step(readiness.PollAnswered, contract.Delivered{Served: contract.NewNameSet(n[0], n[1])})},
		{"partial", step(readiness.PollAnswered, contract.Delivered{Served: contract.NewNameSet(n[0])})},
		{"missed", step(readiness.PollAnswered, contract.Delivered{})},
		{"failed", step(readiness.PollAnswered, contract.Failed{Reason: "no"})},
		{"cancelled by peer", step(readiness.PollAnswered, contract.Cancelled{ByPeer: true})},
		{"cancelled", step(readiness.PollAnswered, contract.Cancelled{})},
		{"poll panicked", step(readiness.PollPanicked, nil)},
		{"proven", step(readiness.QuiesceTrue, nil)},
		{"unproven", step(readiness.QuiesceUnproven, nil)},
		{"copies done", step(readiness.CopiesDone, nil)},
		{"copy lost", step(readiness.CopyLost, nil)},
		{"copy refused", step(readiness.CopyRefusedByDevice, nil)},
		{"cancel replied", step(readiness.CancelReplied, nil)},
		{"device gone", func(w *refusalWorld) error {
			return w.c.Step(readiness.Evidence{What: readiness.DeviceGone, Reason: "gone"})
		}},
		{"release", func(w *refusalWorld) error { return w.c.Release(w.target) }},
		{"cancel", func(w *refusalWorld) error { _, err := w.c.Cancel(w.target); return err }},
		{"retry", func(w *refusalWorld) error { return w.c.Retry(w.target) }},
		{"close", func(w *refusalWorld) error { w.c.Close(); return nil }},
		{"1.5 s pass", func(w *refusalWorld) error { w.now = w.now.Add(1500 * time.Millisecond); w.c.Tick(w.now); return nil }},
	}
}

// withdraw releases h and refuses its submission, if it was admitted: it is
// withdrawn, nothing escaped.
func withdraw(w *refusalWorld, h readiness.Handle) error {
	if err := w.c.Release(h); err != nil {
		return err
	}
	_ = w.c.Step(readiness.Evidence{What: readiness.SubmitRejected, Lease: h, Reason: "full"})
	w.c.Tick(w.now) // the grants and admissions it made possible
	return nil
}

// refusalBattery is every piece of evidence fired at the target in each
// state: each kind the caller can report, PollAnswered with every outcome
// kind (a changed served set, a name never asked for, Cancelled by the peer
// and locally), malformed rows and layers, and the owner's calls.
func refusalBattery(n [2]contract.Name) []worldMove {
	var unknown contract.Name
	unknown[0] = 0xEE
	outcomes := []contract.Outcome{nil, contract.Delivered{}, contract.Delivered{Served: contract.NewNameSet(n[0])},
		contract.Delivered{Served: contract.NewNameSet(n[1])}, contract.Delivered{Served: contract.NewNameSet(n[0], n[1])},
		contract.Delivered{Served: contract.NewNameSet(unknown)}, contract.Failed{Reason: "no"}, contract.Failed{Reason: "other"},
		contract.Cancelled{ByPeer: true}, contract.Cancelled{ByPeer: false}}
	var out []worldMove
	for what := readiness.Observed(0); what <= readiness.LayerDone+1; what++ {
		if what == readiness.DeviceGone {
			continue // about no lease: the moves report it
		}
		for _, o := range outcomes {
			if what != readiness.PollAnswered && o != nil {
				continue
			}
			for _, row := range []int{0, -1, 2} {
				for _, layer := range []int{0, -1, 1} {
					for d := contract.CancelDisposition(0); d <= 3; d++ {
						if (row != 0 && what != readiness.CopyRefusedByDevice) || (layer != 0 && what != readiness.LayerDone && what != readiness.CopyLost) ||
							(d != contract.CancelRequested && what != readiness.CancelReplied) {
							continue
						}
						for _, reason := range []string{"because", ""} {
							if reason == "" && what != readiness.CancelReplied {
								continue // a reason refused must not be stored: one is enough
							}
							ev := readiness.Evidence{What: what, Outcome: o, Row: row, Layer: layer, Disposition: d, Reason: reason}
							out = append(out, worldMove{fmt.Sprintf("%v %v row %d layer %d disposition %d reason %q", what, o, row, layer, d, reason),
								func(w *refusalWorld) error { ev.Lease = w.target; return w.c.Step(ev) }})
						}
					}
				}
			}
		}
	}
	return append(out,
		worldMove{"release", func(w *refusalWorld) error { return w.c.Release(w.target) }},
		worldMove{"cancel", func(w *refusalWorld) error { _, err := w.c.Cancel(w.target); return err }},
		worldMove{"retry", func(w *refusalWorld) error { return w.c.Retry(w.target) }},
		worldMove{"device gone again", func(w *refusalWorld) error {
			return w.c.Step(readiness.Evidence{What: readiness.DeviceGone, Reason: "again"})
		}},
	)
}

// replay builds a fresh core and plays the moves path names.
func replay(t *testing.T, kind readiness.Kind, policy readiness.Policy, moves []worldMove, path []int) *refusalWorld {
	t.Helper()
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 3, SlotBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	w := &refusalWorld{now: time.Unix(100, 0)}
	w.c, err = readiness.NewCore(readiness.Config{Memory: mem, TokensPerBlock: 32, RequestTimeout: time.Second, DrainGrace: time.Second,
		QuiesceTimeout: 100 * time.Millisecond, KeepReleased: 4, MaxOutstanding: 1, Containment: policy, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	w.c.Tick(w.now)
	lend := func(serial byte, k readiness.Kind, rows int) readiness.Handle {
		var req readiness.Request
		req.Kind = k
		for i := range rows {
			var n contract.Name
			n[0], n[1] = serial, byte(i)
			req.Rows = append(req.Rows, staging.Row{Name: n, Group: 0, Block: i, Device: 0x1000})
		}
		h, err := w.c.Lend(req)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	w.holder = lend(0, readiness.Fetch, 1)
	w.blocker = lend(1, readiness.Fetch, 2)
	w.c.Tick(w.now) // the holder is admitted, the blocker takes the other slots
	w.target = lend(2, kind, 2)
	w.names[0][0], w.names[1][0], w.names[1][1] = 2, 2, 1
	for _, i := range path {
		_ = moves[i].do(w)
		w.c.Advance()
	}
	return w
}

func describePath(moves []worldMove, path []int) string {
	var s []string
	for _, i := range path {
		s = append(s, moves[i].name)
	}
	return "lend, " + strings.Join(s, ", ")
}

func TestRefusedEvidenceOfEveryKindInEveryState(t *testing.T) {
	var names [2]contract.Name
	names[0][0], names[1][0], names[1][1] = 2, 2, 1
	moves, battery := refusalMoves(names), refusalBattery(names)
	reached := map[readiness.State]bool{}
	refused := 0
	for _, kind := range []readiness.Kind{readiness.Fetch, readiness.Publish} {
		for _, policy := range []readiness.Policy{readiness.Quarantine, readiness.Recover} {
			// Breadth first: each distinct description of the target (its
			// LeaseInfo, the engine's halt) is expanded once, from the
			// shortest path that reached it.
			seen := map[string]bool{}
			frontier := [][]int{nil}
			for depth := 0; depth <= 6 && len(frontier) > 0; depth++ {
				var next [][]int
				for _, path := range frontier {
					w := replay(t, kind, policy, moves, path)
					info, err := w.c.Lease(w.target)
					key := fmt.Sprintf("%v %v %v %v %v %v %v %v %v %v %v %v", info.State, info.Outcome, info.ByPeer, info.ReleaseRequested,
						info.Exposed, info.Fenced, info.Contained, err, w.c.Err() != nil, w.c.Closed(), w.c.Stats().Outstanding, w.c.Stats().SlotsFree)
					if seen[key] {
						continue
					}
					seen[key] = true
					if err == nil {
						reached[info.State] = true
					}
					for b := range battery {
						w := replay(t, kind, policy, moves, path)
						hs := []readiness.Handle{w.holder, w.blocker, w.target}
						before := take(w.c, hs)
						err := battery[b].do(w)
						if err == nil {
							continue
						}
						refused++
						if after := take(w.c, hs); !reflect.DeepEqual(before, after) {
							t.Fatalf("%v %v, %s: refused %s (%v), and it changed something:\nbefore %+v\nafter  %+v",
								kind, policy, describePath(moves, path), battery[b].name, err, before, after)
						}
					}
					for i := range moves {
						next = append(next, append(append([]int(nil), path...), i))
					}
				}
				frontier = next
			}
		}
	}
	t.Logf("%d refusals checked", refused)
	for s := readiness.State(0); int(s) < readiness.NumStates; s++ {
		if !reached[s] {
			t.Errorf("no path reached %v: the walk misses a state", s)
		}
	}
}
