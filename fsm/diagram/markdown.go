package diagram

import (
	"fmt"
	"strings"

	"github.com/kvready/kvready/fsm"
)

// intro is the hand-written part of docs/states.md; everything after it is
// generated from the table.
const intro = `# The lease lifecycle

Every lease — the staging slots of one fetch or one publish — has exactly one
state. The lifecycle is declared once, in ` + "`fsm/lifecycle.go`" + `: for every
(state, event) pair it says one of three things.

- **move**: the lease goes to the next state;
- **latch**: the evidence arrived early (an access proof before the outcome, a
  release request before the fence); the lease records it and keeps its state.
  After every later move the engine re-delivers latched events, lowest event
  first, until none applies. Latches are the guards drawn as dashed self-loops;
- **refuse**: the evidence changes nothing, for the declared reason (a stale
  handle, an outcome already latched, slots that never return).

The engine runs from the table compiled from that declaration; the tests check
it (every pair declared once; agreement with a looplab/fsm machine built from the
same declaration; no release without the fence; no miss turned into a failure;
release reachable from every live state); this page and the diagrams in
` + "`docs/diagrams/`" + ` are drawn from it.

The safety rules it encodes: slots return to the allocator only from
` + "`access_fenced`" + ` — backend access proven over **and** every local copy
landed — or from ` + "`waiting`" + `, which holds none. An outcome, a failure, a
cancellation, a deadline or a shutdown never releases anything. Evidence that
access may not have ended sends the slots to ` + "`quarantined`" + ` for ever.
`

// Markdown returns docs/states.md: the hand-written introduction, then the
// Mermaid diagram (rendered by GitHub), the states, the events, and what every
// event does in every state, refusals with their reasons.
func Markdown(t *fsm.Table) string {
	var b strings.Builder
	b.WriteString(intro)
	b.WriteString("\n<!-- Everything below is " + header + ". Regenerate with `make diagrams`; `make test` fails when it is stale. -->\n\n")

	b.WriteString("## Diagram\n\n")
	b.WriteString("Moves are solid arrows labelled with their events; latches are self-loops\n")
	b.WriteString("labelled `event / latch`. Refusals are not drawn: see the tables below.\n")
	b.WriteString("Graphviz renderings: [lifecycle.svg](diagrams/lifecycle.svg), [lifecycle.dot](diagrams/lifecycle.dot).\n\n")
	b.WriteString("```mermaid\n")
	b.WriteString(Mermaid(t))
	b.WriteString("```\n\n")

	b.WriteString("## States\n\n")
	b.WriteString("| state | meaning | the slots |\n|---|---|---|\n")
	for s := range fsm.NumStates {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s, cell(s.Meaning()), cell(s.Slots()))
	}

	b.WriteString("\n## Events\n\n")
	b.WriteString("Latched events are re-delivered in this order.\n\n")
	b.WriteString("| # | event | evidence |\n|---|---|---|\n")
	for e := range fsm.NumEvents {
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", e, e, cell(e.Meaning()))
	}

	b.WriteString("\n## Every pair at a glance\n\n")
	b.WriteString("`→ state`: move; `latch`: kept and re-delivered later; `·`: refused (reasons below).\n\n")
	b.WriteString("| state \\ event |")
	for e := range fsm.NumEvents {
		fmt.Fprintf(&b, " `%s` |", e)
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", int(fsm.NumEvents)))
	b.WriteString("\n")
	for s := range fsm.NumStates {
		fmt.Fprintf(&b, "| `%s` |", s)
		for e := range fsm.NumEvents {
			en := t.Lookup(s, e)
			switch en.Kind {
			case fsm.Move:
				fmt.Fprintf(&b, " → %s |", en.Next)
			case fsm.Latch:
				b.WriteString(" latch |")
			default:
				b.WriteString(" · |")
			}
		}
		b.WriteString("\n")
	}

	b.WriteString("\n## What each event does, state by state\n")
	for s := range fsm.NumStates {
		fmt.Fprintf(&b, "\n### `%s`\n\n%s %s\n\n", s, s.Meaning(), s.Slots())
		b.WriteString("| event | does | next state, or why refused |\n|---|---|---|\n")
		for _, kind := range []fsm.Kind{fsm.Move, fsm.Latch, fsm.Refuse} {
			for e := range fsm.NumEvents {
				en := t.Lookup(s, e)
				if en.Kind != kind {
					continue
				}
				switch kind {
				case fsm.Move:
					fmt.Fprintf(&b, "| `%s` | move | `%s` |\n", e, en.Next)
				case fsm.Latch:
					b.WriteString("| `" + e.String() + "` | latch | kept; re-delivered after the next move |\n")
				default:
					fmt.Fprintf(&b, "| `%s` | refuse | %s |\n", e, cell(en.Reason()))
				}
			}
		}
	}
	return b.String()
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
