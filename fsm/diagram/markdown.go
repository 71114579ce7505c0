package diagram

import (
	"fmt"
	"strings"

	"github.com/kvready/kvready/fsm"
)

// intro is the hand-written part of docs/states.md; everything after it is
// generated from the table. It is written with ~ for Markdown's backquote, which
// a Go raw string cannot hold.
var intro = strings.ReplaceAll(introText, "~", "`")

const introText = `# The lease lifecycle

Every lease — the staging slots of one fetch or one publish — has exactly one
state. The lifecycle (SPEC §4, revision 3) is declared once, in
~fsm/lifecycle.go~: the engine runs from the table compiled from that
declaration, and this page and the drawings in ~docs/diagrams/~ are generated
from the same table. The tests check the table against an oracle written by hand
from the SPEC, rule by rule.

Revision 3 keeps every rule of revision 2 and adds four things. What entering a
state *does* (place, copy in, submit, ask for a proof, copy out, free,
quarantine, contain, recover) is declared with the state, as data, and drawn.
An owner's cancellation request is evidence like any other (~cancel_requested~,
~cancel_answered~). A lease waits for admission to the backend in ~staged~, so
that the request deadline measures the backend's service and never the
engine's queue (rule 12). A contained lease rests in ~contained~, where the
containment policy decides what follows (rule 5).

Revision 2 corrected revision 1, which copied a fetch's rows from staging to the
device, and answered readiness, before the backend's access was proven over. A
backend that answered Delivered may still be touching staging (a retried write,
a lagging DMA): bytes copied out before the proof can be torn. The outcome
is latched and visible at once — a miss can be rescheduled for recompute
immediately — but nothing is copied until the fence.

## How to read it

For every (state, event) pair the declaration says exactly one of:

- **move**: the lease goes to the next state. A move may latch the lease's
  logical outcome, its *result* (served, partial, missed, failed, cancelled,
  rejected, timeout, violation), declared with the move so that the engine never
  maps states to outcomes by hand. Drawn as solid arrows, the result in
  parentheses.
- **latch**: the evidence arrived early (an access proof before the outcome, a
  release before the fence); the lease records it, keeps its state, and the
  declaration says what keeping it means there. After every later move the
  engine re-delivers latched events, lowest event first, until none applies.
  Drawn as dashed self-loops, ~event / latch~.
- **refuse**: the evidence changes nothing, for the declared reason (a stale
  handle, an outcome already latched, a fence that stands). Not drawn: see the
  tables below.

Besides its pairs, a state may declare **completions**: guarded moves it takes
the moment a lease enters it, before its own work, when a *guard* holds for the
lease — ~[fetch]~ (a fetch has nothing to copy into staging), ~[never_exposed]~
(a rejection proves nothing escaped), ~[nothing_to_copy]~ (a miss, a failure, a
publish, or a lease its owner already released). Guards read only what the lease
already holds; the engine never invents an event to push a lease along. A state
tries its completions in the order listed. Drawn as dotted arrows, ~[guard]~.

## The rules it encodes

1. **No slot is recycled before its fence.** From every state that holds slots,
   the only way to ~released~ passes through ~access_fenced~ — backend access
   proven over: Quiesce answered true, the submission was rejected, or nothing
   was ever exposed — and then ~logically_complete~, every local copy landed.
   Only ~waiting~, which holds nothing, is released directly. An outcome, a
   failure, a cancellation, a timeout, a request exit or a shutdown never
   releases anything.
2. **Misses never appear as failures**, nor failures as misses: ~outcome_missed~
   leads only to ~missed~ with the result ~missed~; a Cancelled latches
   ~cancelled~, never ~failed~.
3. **Outcomes latch once.** In ~served~, ~partial~, ~missed~ and ~failed~ a
   second outcome is refused. A changed answer, or names never asked for,
   arrives as ~contract_violation~: it fails a delivery, whose rows are then
   never trusted, and leaves a miss a miss.
4. **Logical delivery never races backend access.** The staging→device copies of
   the served whole rows are issued only on entering ~access_fenced~, which is
   entered only through ~access_proven~, the ~[never_exposed]~ completion or the
   ~[withdrawn]~ one. Readiness is answerable from ~logically_complete~ on,
   once they landed. Once the owner released the lease nothing more is copied
   (~[nothing_to_copy]~), but copies already issued land before the slots
   return.
5. **Unproven is retried, then contained — never assumed.** ~access_unproven~
   (Quiesce false, or an error) never moves a lease: the drain starts, the
   engine asks again with backoff, and a later ~access_proven~ fences it. The
   **containment deadline is fixed at submission** — the request deadline plus
   the drain grace, earlier if the drain starts earlier — never measured from
   when the engine notices. **Quarantine is only by containment**: when that
   deadline passes with access or a local copy still unproven (~copy_unproven~:
   a copy that failed without a completion record, or a lost device),
   ~containment~ moves the lease to ~contained~ and the engine signals it once.
   What follows is the embedder's containment policy. Under *quarantine* (the
   default) and *fatal*, and for what nothing could ever prove (no attempt, a
   local copy involved, a lost device), the ~[not_recoverable]~ completion
   passes the lease through to ~quarantined~ at once and the slots never
   return; fatal also halts the engine, which then releases nothing. Under
   *recover* the lease rests in ~contained~, the backend is asked again at a
   slow cadence, and a later ~access_proven~ fences it (signalled as
   recovered). Slots are never freed to unstick the pool.
6. **What a backend was handed stays the lease's until its fence** (the extent,
   its units, the attempt); a quarantined lease keeps it for ever. This is the
   engine's to keep; the table gives it the fence to wait for.
7. **Stale handles are refused**: ~released~ refuses everything.
8. **Liveness.** From every state a terminal state is reachable, and from every
   state that holds slots ~released~ is — except ~copy_unproven~, which only a
   failed copy enters. A lease that quarantine holes leave ungrantable latches
   ~slots_unavailable~ and is reported at once.
9. **Deadlines.** The request deadline moves only a submitted lease, to ~failed~
   with the result ~timeout~; before submission the ~[deadline_passed]~
   completion does the same. It starts the drain and never releases anything.
10. **Shutdown.** A waiting lease is released by ~close~ with the result
    ~cancelled~. Every lease that holds slots keeps the close (a latch) and
    keeps progressing: one still waiting for an outcome gets the engine's local
    Cancelled at once (~outcome_cancelled~), and each is released once proven
    and complete — or contained. Close never releases a lease before its fence.
11. **Caller mistakes are refused at the door**: a copy the device refused
    before it started (~copy_refused~) is not unproven and quarantines nothing;
    a publish whose staging is incomplete fails without being submitted. Every
    piece of evidence enters the core through one door; a refusal changes
    nothing — no state, latch, reason or counter.
12. **A real store never eats staging capacity**: a lease waits in ~staged~,
    before submission, until the backend's bound on outstanding submissions
    admits it (~admission_granted~), and its request deadline is armed at
    submission. A cancellation request (~cancel_requested~) before the outcome
    asks the backend to stop early; its answer (~cancel_answered~) is recorded
    and changes neither the outcome nor the collection of access evidence.
13. **The owner is woken, never made to poll**: not a state of the table; the
    runner wakes its owner when a round has work (docs/engine.md).
`

// Markdown returns docs/states.md: the hand-written introduction, then the
// Mermaid diagram (rendered by GitHub), the states, events, guards and
// completions, the results each move latches, the meaning of every latch, and
// what every event does in every state, refusals with their reasons.
func Markdown(t *fsm.Table) string {
	var b strings.Builder
	b.WriteString(intro)
	b.WriteString("\n<!-- Everything below is " + header + ". Regenerate with `make diagrams`; `make test` fails when it is stale. -->\n\n")

	b.WriteString("## Diagram\n\n")
	b.WriteString("Moves are solid arrows labelled with their events, each followed by the outcome it\n")
	b.WriteString("latches in parentheses; completions are arrows labelled `[guard]`; latches are\n")
	b.WriteString("self-loops labelled `event / latch`. Refusals are not drawn: see the tables below.\n")
	b.WriteString("Graphviz renderings, with completions dotted and latches dashed:\n")
	b.WriteString("[lifecycle.svg](diagrams/lifecycle.svg), [lifecycle.dot](diagrams/lifecycle.dot).\n\n")
	b.WriteString("```mermaid\n")
	b.WriteString(Mermaid(t))
	b.WriteString("```\n\n")

	b.WriteString("## States\n\n")
	b.WriteString("The groups are derived from the table: *holds slots* (from the grant until released\n")
	b.WriteString("or quarantined), *exposed* (the backend may touch the slots: its access proof is\n")
	b.WriteString("awaited), *containable* (containment can still quarantine it), *answerable*\n")
	b.WriteString("(readiness can be answered), *outcome* (entered with a latched outcome) and\n")
	b.WriteString("*terminal* (nothing leaves it). The physical disposition (SPEC §4 rule 19, the\n")
	b.WriteString("reference's words) is read from the same groups, the lease's marks and its result: a\n")
	b.WriteString("state lists every disposition a lease in it can have (see below).\n\n")
	b.WriteString("| state | meaning | the slots | groups | physical |\n|---|---|---|---|---|\n")
	for s := range fsm.NumStates {
		var phys []string
		for _, p := range t.PhysicalIn(s) {
			phys = append(phys, "`"+p.String()+"`")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", s, cell(s.Meaning()), cell(s.Slots()), orDash(strings.Join(groupsOf(t, s), ", ")), strings.Join(phys, ", "))
	}

	b.WriteString("\n## Physical dispositions\n\n")
	b.WriteString("Memory is reusable only in `NOT_EXPOSED` and the `QUIESCED_*` dispositions; a cancel or a\n")
	b.WriteString("failure answers the logical result at once and the physical one apart.\n\n")
	b.WriteString("| disposition | meaning |\n|---|---|\n")
	for p := range fsm.NumPhysical {
		fmt.Fprintf(&b, "| `%s` | %s |\n", p, cell(p.Meaning()))
	}

	b.WriteString("\n## Events\n\n")
	b.WriteString("Latched events are re-delivered in this order.\n\n")
	b.WriteString("| # | event | evidence |\n|---|---|---|\n")
	for e := range fsm.NumEvents {
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", e, e, cell(e.Meaning()))
	}

	b.WriteString("\n## Guards\n\n")
	b.WriteString("Facts the engine knows about a lease when it enters a state; a completion moves\n")
	b.WriteString("the lease when its guard holds.\n\n")
	b.WriteString("| guard | holds when | tested on entering |\n|---|---|---|\n")
	for g := range fsm.NumGuards {
		var where []string
		for s := range fsm.NumStates {
			for _, c := range t.Completions(s) {
				if c.Guard == g {
					where = append(where, "`"+s.String()+"`")
				}
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", g, cell(g.Meaning()), strings.Join(where, ", "))
	}

	b.WriteString("\n## Completions\n\n")
	b.WriteString("Taken the moment a lease enters the state, before the state's own work, in this\n")
	b.WriteString("order: the first whose guard holds moves the lease.\n\n")
	b.WriteString("| on entering | guard | moves to | latches |\n|---|---|---|---|\n")
	for s := range fsm.NumStates {
		for _, c := range t.Completions(s) {
			fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | %s |\n", s, fsm.CompletionName(c.Guard), c.Next, resultCell(c.Result))
		}
	}

	b.WriteString("\n## Results\n\n")
	b.WriteString("The logical outcome a lease reports is latched by the move that declares it, and\n")
	b.WriteString("by nothing else. A miss is never a failure; a cancellation is never folded into one.\n\n")
	b.WriteString("| result | a failure of the request | latched by |\n|---|---|---|\n")
	for r := fsm.NoResult + 1; r < fsm.NumResults; r++ {
		var by []string
		for s := range fsm.NumStates {
			for _, c := range t.Completions(s) {
				if c.Result == r {
					by = append(by, fmt.Sprintf("`%s` `%s` → `%s`", s, fsm.CompletionName(c.Guard), c.Next))
				}
			}
			for e := range fsm.NumEvents {
				if en := t.Lookup(s, e); en.Action == fsm.Move && en.Result == r {
					by = append(by, fmt.Sprintf("`%s` `%s` → `%s`", s, e, en.Next))
				}
			}
		}
		failure := "no"
		if r.Failure() {
			failure = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r, failure, strings.Join(by, "<br>"))
	}

	b.WriteString("\n## Effects\n\n")
	b.WriteString("What entering a state does is declared with the state, as data: *entry* effects\n")
	b.WriteString("run whenever the state is entered, *rest* effects only where a lease comes to rest\n")
	b.WriteString("(a lease a completion moves on at once never starts the work of the state it\n")
	b.WriteString("passes). What keeping a latch does is declared with the latch. The engine performs\n")
	b.WriteString("them through one switch, in this order, and nowhere else.\n\n")
	b.WriteString("| effect | does | declared on |\n|---|---|---|\n")
	for fx := range fsm.NumEffects {
		var where []string
		for s := range fsm.NumStates {
			if t.OnEntry(s).Has(fx) {
				where = append(where, fmt.Sprintf("entering `%s`", s))
			}
			if t.AtRest(s).Has(fx) {
				where = append(where, fmt.Sprintf("resting in `%s`", s))
			}
			for e := range fsm.NumEvents {
				if en := t.Lookup(s, e); en.Action == fsm.Latch && en.Effects.Has(fx) {
					where = append(where, fmt.Sprintf("keeping `%s` in `%s`", e, s))
				}
			}
		}
		meaning := fx.Meaning()
		for _, mk := range fx.Needs().List() {
			meaning += fmt.Sprintf(" Only for a lease marked `%s`; passed by otherwise.", mk)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", fx, cell(meaning), strings.Join(where, "<br>"))
	}

	b.WriteString("\n## Stores\n\n")
	b.WriteString("What an accepted move or latch takes from its evidence and keeps on the lease is\n")
	b.WriteString("declared beside the move's effects, as data, and performed by the same switch,\n")
	b.WriteString("before the effects, in this order. A refused event stores nothing; a completion,\n")
	b.WriteString("or a latched event re-delivered later, stores nothing either: only the event was\n")
	b.WriteString("kept, not its evidence.\n\n")
	b.WriteString("| store | keeps | declared on |\n|---|---|---|\n")
	for st := range fsm.NumStores {
		var where []string
		for s := range fsm.NumStates {
			for e := range fsm.NumEvents {
				if en := t.Lookup(s, e); en.Action != fsm.Refuse && en.Stores.Has(st) {
					where = append(where, fmt.Sprintf("`%s` in `%s`", e, s))
				}
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", st, cell(st.Meaning()), strings.Join(where, "<br>"))
	}

	b.WriteString("\n## Marks\n\n")
	b.WriteString("Facts a lease acquires by a move and never loses: what it has been through, which\n")
	b.WriteString("no state alone says. Guards and the engine's invariants read them.\n\n")
	b.WriteString("| mark | means | given by |\n|---|---|---|\n")
	for mk := range fsm.NumMarks {
		var by []string
		for s := range fsm.NumStates {
			if t.MarksOf(s).Has(mk) {
				by = append(by, fmt.Sprintf("entering `%s`", s))
			}
			for e := range fsm.NumEvents {
				if en := t.Lookup(s, e); en.Action == fsm.Move && en.Marks.Has(mk) {
					by = append(by, fmt.Sprintf("`%s` `%s` → `%s`", s, e, en.Next))
				}
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", mk, cell(mk.Meaning()), strings.Join(by, "<br>"))
	}

	b.WriteString("\n## Latches\n\n")
	b.WriteString("Evidence kept for a later state, and what keeping it means where it is kept.\n\n")
	b.WriteString("| state | events | what keeping them means | does |\n|---|---|---|---|\n")
	for s := range fsm.NumStates {
		type kept struct {
			meaning string
			effects fsm.Effects
		}
		var order []kept
		byMeaning := map[kept][]string{}
		for e := range fsm.NumEvents {
			if en := t.Lookup(s, e); en.Action == fsm.Latch {
				k := kept{en.Reason(), en.Effects}
				if _, ok := byMeaning[k]; !ok {
					order = append(order, k)
				}
				byMeaning[k] = append(byMeaning[k], "`"+e.String()+"`")
			}
		}
		for _, k := range order {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s, strings.Join(byMeaning[k], ", "), cell(k.meaning), orDash(k.effects.String()))
		}
	}

	b.WriteString("\n## Every pair at a glance\n\n")
	b.WriteString("`→ state`: move; `latch`: kept and re-delivered later; `·`: refused (reasons below).\n")
	b.WriteString("Completions are in the first column.\n\n")
	b.WriteString("| state \\ event | on entry |")
	for e := range fsm.NumEvents {
		fmt.Fprintf(&b, " `%s` |", e)
	}
	b.WriteString("\n|---|---|")
	b.WriteString(strings.Repeat("---|", int(fsm.NumEvents)))
	b.WriteString("\n")
	for s := range fsm.NumStates {
		var entry []string
		for _, c := range t.Completions(s) {
			entry = append(entry, fmt.Sprintf("%s → %s", fsm.CompletionName(c.Guard), c.Next))
		}
		fmt.Fprintf(&b, "| `%s` | %s |", s, orDash(strings.Join(entry, "<br>")))
		for e := range fsm.NumEvents {
			en := t.Lookup(s, e)
			switch en.Action {
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
		if fx := t.OnEntry(s); fx != 0 {
			fmt.Fprintf(&b, "Entering it: %s.\n", fx)
		}
		if fx := t.AtRest(s); fx != 0 {
			fmt.Fprintf(&b, "At rest in it: %s.\n", fx)
		}
		if mk := t.MarksOf(s); mk != 0 {
			var names []string
			for _, m := range mk.List() {
				names = append(names, m.String())
			}
			fmt.Fprintf(&b, "Entering it marks the lease %s.\n", strings.Join(names, ", "))
		}
		if t.OnEntry(s) != 0 || t.AtRest(s) != 0 || t.MarksOf(s) != 0 {
			b.WriteString("\n")
		}
		if cs := t.Completions(s); len(cs) > 0 {
			b.WriteString("On entering, in this order:\n\n")
			for _, c := range cs {
				fmt.Fprintf(&b, "- `%s` → `%s`%s\n", fsm.CompletionName(c.Guard), c.Next, latching(c.Result))
			}
			b.WriteString("\n")
		}
		b.WriteString("| event | does | next state, what keeping it means, or why refused |\n|---|---|---|\n")
		for _, kind := range []fsm.Action{fsm.Move, fsm.Latch, fsm.Refuse} {
			for e := range fsm.NumEvents {
				en := t.Lookup(s, e)
				if en.Action != kind {
					continue
				}
				switch kind {
				case fsm.Move:
					fmt.Fprintf(&b, "| `%s` | move | `%s`%s |\n", e, en.Next, latching(en.Result)+moveExtras(en))
				case fsm.Latch:
					fmt.Fprintf(&b, "| `%s` | latch | kept: %s%s%s |\n", e, cell(en.Reason()), doing(en.Effects), storing(en.Stores))
				default:
					fmt.Fprintf(&b, "| `%s` | refuse | %s |\n", e, cell(en.Reason()))
				}
			}
		}
	}
	return b.String()
}

// groupsOf names the derived groups s belongs to.
func groupsOf(t *fsm.Table, s fsm.State) []string {
	var out []string
	for _, g := range []struct {
		name string
		in   bool
	}{
		{"holds slots", t.Holding(s)},
		{"exposed", t.Exposed(s)},
		{"containable", t.Containable(s)},
		{"answerable", t.Answerable(s)},
		{"outcome", t.Outcome(s)},
		{"terminal", terminal(t, s)},
	} {
		if g.in {
			out = append(out, g.name)
		}
	}
	return out
}

// latching is the text after a move's next state: the outcome it latches.
func latching(r fsm.Result) string {
	if r == fsm.NoResult {
		return ""
	}
	return ", latching `" + r.String() + "`"
}

// moveExtras is the text after a move's result: the marks it gives, and
// whether it keeps its event latched.
func moveExtras(en fsm.Entry) string {
	var out string
	for _, m := range en.Marks.List() {
		out += ", marking `" + m.String() + "`"
	}
	if en.Keep {
		out += ", keeping the event latched"
	}
	return out + storing(en.Stores)
}

// storing is the text after a move or latch: what it takes from its evidence.
func storing(st fsm.Stores) string {
	if st == 0 {
		return ""
	}
	return "; stores " + st.String()
}

// doing is the text after a latch's meaning: what keeping it does.
func doing(fx fsm.Effects) string {
	if fx == 0 {
		return ""
	}
	return " (" + fx.String() + ")"
}

// resultCell is a result in a table cell: its name, or a dash for none.
func resultCell(r fsm.Result) string {
	if r == fsm.NoResult {
		return "—"
	}
	return "`" + r.String() + "`"
}

// orDash is text for a table cell, or a dash when there is none.
func orDash(text string) string {
	if text == "" {
		return "—"
	}
	return text
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
