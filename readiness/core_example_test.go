package readiness_test

import (
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// The core without I/O, driven by hand as etcd raft's RawNode is: every step
// reads Ready, acknowledges it with Advance, performs the work and reports
// what happened through the one door, Step. Nothing is copied to the device
// before the access proof.
func Example() {
	staged, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 2, SlotBytes: 16})
	c, _ := readiness.NewCore(readiness.Config{Memory: staged, TokensPerBlock: 32})
	c.Tick(time.Unix(100, 0))
	var name contract.Name
	name[0] = 7
	h, _ := c.Lend(readiness.Request{Kind: readiness.Fetch, Rows: []staging.Row{{Name: name, Device: 0x1000}}})

	show := func(what string) {
		info, _ := c.Lease(h)
		rd := c.Ready()
		fmt.Printf("%-16s %-18v submit %d, proofs %d, copies %d\n", what, info.State, len(rd.Submissions), len(rd.Proofs), len(rd.Copies))
		c.Advance() // the work is taken: a real caller performs it now
	}
	c.Tick(time.Unix(100, 0)) // the round takes the grant: staged, admitted, the extent handed out
	show("tick")
	_ = c.Step(readiness.Evidence{What: readiness.SubmitAccepted, Lease: h}) // the backend returned an attempt
	show("submitted")
	_ = c.Step(readiness.Evidence{What: readiness.PollAnswered, Lease: h, Outcome: contract.Delivered{Served: contract.NewNameSet(name)}})
	show("served")
	_ = c.Step(readiness.Evidence{What: readiness.QuiesceTrue, Lease: h}) // only now are rows copied
	show("proven")
	_ = c.Step(readiness.Evidence{What: readiness.CopiesDone, Lease: h}) // the event after the copies completed
	iv, _ := c.Readiness(h)
	show("copies landed")
	fmt.Println("readiness:", iv)
	err := c.Step(readiness.Evidence{What: readiness.QuiesceTrue, Lease: h})
	fmt.Println("a late proof:", err)
	_ = c.Release(h)
	info, _ := c.Lease(h)
	fmt.Println(info.State == readiness.StateReleased)
	// Output:
	// tick             admitted           submit 1, proofs 0, copies 0
	// submitted        requested          submit 0, proofs 0, copies 0
	// served           served             submit 0, proofs 1, copies 0
	// proven           access_fenced      submit 0, proofs 0, copies 1
	// copies landed    logically_complete submit 0, proofs 0, copies 0
	// readiness: [0, 32]
	// a late proof: fsm: access_proven refused in state logically_complete: access already proven over: the fence stands and a late answer changes nothing
	// true
}
