package readiness_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// snapshot is everything a refused call must leave as it was: every lease's
// description, the counters, and the work the core asks for.
type snapshot struct {
	infos []readiness.LeaseInfo
	errs  []string
	stats readiness.Stats
	ready string
}

func take(c *readiness.Core, hs []readiness.Handle) snapshot {
	var s snapshot
	for _, h := range hs {
		info, err := c.Lease(h)
		s.infos = append(s.infos, info)
		if err != nil {
			s.errs = append(s.errs, err.Error())
		} else {
			s.errs = append(s.errs, "")
		}
	}
	s.stats = c.Stats()
	rd := c.Ready()
	s.ready = describeReady(rd)
	return s
}

func describeReady(rd *readiness.Ready) string {
	return fmt.Sprintf("%v %v %v %v %v %v %v %v", rd.Submissions, rd.Copies, rd.CopyLeases, rd.Proofs, rd.Overdue, rd.Cancels, rd.Forget, rd.Containments)
}

// TestRefusedCallsChangeNothing drives random owner calls and evidence of
// every kind — most of it out of place — into a core, and checks the door's
// promise: a call that returns an error leaves every lease's LeaseInfo, the
// Stats and the Ready exactly as they were (SPEC §4 rule 11, §7).
func TestRefusedCallsChangeNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 6, SlotBytes: 16}, staging.Group{Slots: 6, SlotBytes: 16})
		if err != nil {
			t.Fatal(err)
		}
		c, err := readiness.NewCore(readiness.Config{Memory: mem, TokensPerBlock: 32, RequestTimeout: time.Second, DrainGrace: time.Second,
			QuiesceTimeout: 100 * time.Millisecond, KeepReleased: 3, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(100, 0)
		c.Tick(now)
		var hs []readiness.Handle
		first := map[readiness.Handle]contract.Name{} // each lease's first row
		refusals := 0
		for step := range rapid.IntRange(1, 120).Draw(t, "steps") {
			_ = step
			before := take(c, hs)
			var h readiness.Handle
			if len(hs) > 0 {
				h = hs[rapid.IntRange(0, len(hs)-1).Draw(t, "lease")]
			}
			var err error
			switch op := rapid.IntRange(0, 10).Draw(t, "op"); op {
			case 0:
				rows := rapid.IntRange(0, 5).Draw(t, "rows")
				req := readiness.Request{Kind: readiness.Kind(rapid.IntRange(0, 3).Draw(t, "kind")), KnownBlocks: rapid.IntRange(-1, 2).Draw(t, "known")}
				if rapid.Bool().Draw(t, "well_formed") {
					// Most leases a manager lends are good ones: they go deep
					// into the lifecycle, where out-of-place evidence meets
					// latched outcomes, reasons and proofs.
					req = readiness.Request{Kind: readiness.Kind(rapid.IntRange(1, 2).Draw(t, "good_kind"))}
					for i := range max(rows, 1) {
						var n contract.Name
						n[0], n[1], n[2] = byte(len(hs)), byte(i), 1
						req.Rows = append(req.Rows, staging.Row{Name: n, Group: i % 2, Block: i / 2, Device: 0x1000})
					}
					rows = 0
				}
				for i := range rows {
					var n contract.Name
					n[0], n[1] = byte(len(hs)), byte(i)
					if rapid.IntRange(0, 9).Draw(t, "dup") == 0 {
						n[0], n[1] = 0, 0
					}
					req.Rows = append(req.Rows, staging.Row{Name: n, Group: rapid.IntRange(-1, 2).Draw(t, "group"),
						Block: rapid.IntRange(-1, 4).Draw(t, "block"), Device: gpu.DevicePtr(rapid.IntRange(0, 1).Draw(t, "dev") * 0x1000)})
				}
				var l readiness.Handle
				l, err = c.Lend(req)
				if err == nil {
					hs = append(hs, l)
					if len(req.Rows) > 0 {
						first[l] = req.Rows[0].Name
					}
				}
			case 1:
				err = c.Release(h)
			case 2:
				_, err = c.Cancel(h)
			case 3:
				err = c.Retry(h)
			case 4:
				now = now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(t, "ms")) * time.Millisecond)
				c.Tick(now)
			case 5:
				c.Advance()
			case 6:
				if rapid.IntRange(0, 4).Draw(t, "really_close") == 0 {
					c.Close()
				}
			case 7:
				// The evidence the lease's state waits for, so that leases
				// reach the states where the rest arrives out of place.
				err = c.Step(natural(t, c, h, first[h]))
			default:
				ev := readiness.Evidence{What: readiness.Observed(rapid.IntRange(0, 14).Draw(t, "what")), Lease: h,
					Row: rapid.IntRange(-1, 6).Draw(t, "row"), Reason: "because",
					Disposition: contract.CancelDisposition(rapid.IntRange(0, 3).Draw(t, "disposition"))}
				if rapid.Bool().Draw(t, "stale") {
					ev.Lease = readiness.HandleOf(ev.Lease.Uint64() + 1<<32)
				}
				ev.Layer = rapid.IntRange(-1, 2).Draw(t, "layer")
				ev.Outcome = drawOutcome(t, first[h])
				err = c.Step(ev)
			}
			if err == nil {
				continue
			}
			refusals++
			after := take(c, hs)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("a refused call (%v) changed something:\nbefore %+v\nafter  %+v", err, before, after)
			}
		}
		t.Logf("%d refusals", refusals)
	})
}

// drawOutcome draws an answer of every kind: pending, a miss, the lease's
// own first row served, a name never asked for, two failures, and a
// cancellation by the peer and a local one.
func drawOutcome(t *rapid.T, first contract.Name) contract.Outcome {
	var unknown contract.Name
	unknown[0] = byte(rapid.IntRange(0, 3).Draw(t, "served"))
	return rapid.SampledFrom([]contract.Outcome{nil, contract.Delivered{}, contract.Delivered{Served: contract.NewNameSet(first)},
		contract.Delivered{Served: contract.NewNameSet(unknown)}, contract.Failed{Reason: "no"}, contract.Failed{Reason: "other"},
		contract.Cancelled{ByPeer: true}, contract.Cancelled{ByPeer: false}}).Draw(t, "outcome")
}

// natural is the evidence a lease in its state waits for: a submission
// answered, an outcome, a proof, its copies landed.
func natural(t *rapid.T, c *readiness.Core, h readiness.Handle, first contract.Name) readiness.Evidence {
	ev := readiness.Evidence{Lease: h}
	info, err := c.Lease(h)
	if err != nil {
		return ev
	}
	switch info.State {
	case readiness.StateAdmitted:
		ev.What = readiness.SubmitAccepted
	case readiness.StateRequested:
		ev.What = readiness.PollAnswered
		switch rapid.IntRange(0, 3).Draw(t, "natural_outcome") {
		case 0:
			ev.Outcome = contract.Failed{Reason: "natural failure"}
		case 1:
			ev.Outcome = contract.Cancelled{ByPeer: true}
		case 2:
			ev.Outcome = contract.Delivered{}
		default:
			ev.Outcome = contract.Delivered{Served: contract.NewNameSet(first)}
		}
	case readiness.StateAccessFenced:
		ev.What = readiness.CopiesDone
	default:
		ev.What = readiness.QuiesceTrue
		if rapid.IntRange(0, 3).Draw(t, "natural_unproven") == 0 {
			ev.What, ev.Reason = readiness.QuiesceUnproven, "not yet"
		}
	}
	return ev
}
