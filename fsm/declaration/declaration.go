// Package declaration renders the compiled lease lifecycle of package fsm as
// github.com/looplab/fsm event descriptions: the form the lifecycle is declared
// in for comparison with looplab, which the tests and benchmarks drive beside
// the compiled table. looplab is never on the per-lease path, and nothing the
// kvready command or the engine imports links it: only this package does.
package declaration

import (
	looplab "github.com/looplab/fsm"

	"github.com/kvready/kvready/fsm"
)

// Of returns t's moves and latches as looplab event descriptions, state by
// state: first the state's completions in the order they are tried (an event
// named by its guard in brackets, such as "[fetch]", see fsm.CompletionName),
// then its moves and its latches in event order. A latch is a self-loop (Dst
// equals its only Src). Refusals are every pair it leaves out; fsm.Table.Lookup
// gives their reasons. The result is a fresh copy.
func Of(t *fsm.Table) []looplab.EventDesc {
	var out []looplab.EventDesc
	for s := range fsm.NumStates {
		src := s.String()
		for _, c := range t.Completions(s) {
			out = append(out, looplab.EventDesc{Name: fsm.CompletionName(c.Guard), Src: []string{src}, Dst: c.Next.String()})
		}
		for _, kind := range []fsm.Action{fsm.Move, fsm.Latch} {
			for e := range fsm.NumEvents {
				if en := t.Lookup(s, e); en.Action == kind {
					out = append(out, looplab.EventDesc{Name: e.String(), Src: []string{src}, Dst: en.Next.String()})
				}
			}
		}
	}
	return out
}

// Lifecycle returns Of(fsm.Lifecycle()).
func Lifecycle() []looplab.EventDesc { return Of(fsm.Lifecycle()) }
