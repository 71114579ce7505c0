// Package diagram draws the lease lifecycle of package fsm — Mermaid, Graphviz
// DOT, SVG — and writes the generated reference docs/states.md, all from the
// compiled table, so that what reviewers read is what the engine runs.
//
// The drawings show the declared table only (no current state). Moves are solid
// edges labelled with their events, each followed by the outcome it latches in
// parentheses, the marks it gives (+exposed) and "keep" when it keeps its event
// latched; completions — guarded moves a state takes the moment it is entered —
// are dotted edges labelled "[guard]" (and their outcome); latches are dashed
// self-loops labelled "event {effects} / latch". Each state is drawn with its
// declared effects: "entry / …" (whenever it is entered) and "rest / …" (only
// where a lease comes to rest). Refusals are too many to draw and
// are listed in the Markdown reference with their reasons. The states that decide
// slot safety stand out: quarantined (red), contained (orange), access_fenced
// (green), released (grey), and copy_unproven (amber, a warning: only
// containment follows).
package diagram

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/goccy/go-graphviz"

	"github.com/kvready/kvready/fsm"
)

// edgeKind is what a drawn edge stands for.
type edgeKind uint8

const (
	moveEdge edgeKind = iota
	completionEdge
	latchEdge
)

// cause is one event of an edge, the outcome it latches, the marks it gives,
// whether it keeps its event latched, and what keeping a latch does.
type cause struct {
	Event   fsm.Event
	Result  fsm.Result
	Marks   fsm.Marks
	Keep    bool
	Effects fsm.Effects
}

// edge is one drawn arrow: every event that moves (or latches, for a latch edge)
// From to To, or one completion.
type edge struct {
	From, To fsm.State
	Kind     edgeKind
	// Causes are the events of a move or latch edge.
	Causes []cause
	// Guard, Result and Marks are a completion edge's guard, latched outcome
	// and marks.
	Guard  fsm.Guard
	Result fsm.Result
	Marks  fsm.Marks
}

// edges lists the table's completions, moves and latches as arrows, state by
// state: first the state's completions in the order they are tried, then its
// moves grouped by target in the order of each group's first event, then one
// self-loop with its latches.
func edges(t *fsm.Table) []edge {
	var out []edge
	for s := range fsm.NumStates {
		for _, c := range t.Completions(s) {
			out = append(out, edge{From: s, To: c.Next, Kind: completionEdge, Guard: c.Guard, Result: c.Result, Marks: c.Marks})
		}
		index := map[fsm.State]int{}
		for e := range fsm.NumEvents {
			en := t.Lookup(s, e)
			if en.Action != fsm.Move {
				continue
			}
			i, ok := index[en.Next]
			if !ok {
				i = len(out)
				index[en.Next] = i
				out = append(out, edge{From: s, To: en.Next, Kind: moveEdge})
			}
			out[i].Causes = append(out[i].Causes, cause{Event: e, Result: en.Result, Marks: en.Marks, Keep: en.Keep})
		}
		latch := edge{From: s, To: s, Kind: latchEdge}
		for e := range fsm.NumEvents {
			if en := t.Lookup(s, e); en.Action == fsm.Latch {
				latch.Causes = append(latch.Causes, cause{Event: e, Effects: en.Effects})
			}
		}
		if len(latch.Causes) > 0 {
			out = append(out, latch)
		}
	}
	return out
}

// withResult appends the outcome a move latches, in parentheses.
func withResult(name string, r fsm.Result) string {
	if r == fsm.NoResult {
		return name
	}
	return name + " (" + r.String() + ")"
}

// withMarks appends the marks a move gives, each as +mark.
func withMarks(name string, m fsm.Marks) string {
	for _, mk := range m.List() {
		name += " +" + mk.String()
	}
	return name
}

// causeLabel is one cause of an edge: the event, the outcome it latches, its
// marks, "keep", and a latch's effects in braces.
func causeLabel(c cause) string {
	l := withMarks(withResult(c.Event.String(), c.Result), c.Marks)
	if c.Keep {
		l += " keep"
	}
	if c.Effects != 0 {
		l += " {" + strings.ReplaceAll(c.Effects.String(), ", ", "+") + "}"
	}
	return l
}

// effectLines are a state's declared effects, one line each for entry and rest.
func effectLines(t *fsm.Table, s fsm.State) []string {
	var out []string
	if fx := t.OnEntry(s); fx != 0 {
		out = append(out, "entry / "+fx.String())
	}
	if fx := t.AtRest(s); fx != 0 {
		out = append(out, "rest / "+fx.String())
	}
	for _, mk := range t.MarksOf(s).List() {
		out = append(out, "+"+mk.String())
	}
	return out
}

// label is an edge's text: its causes joined by sep, "/ latch" after a
// latch's events, or a completion's "[guard]".
func label(e edge, sep string) string {
	if e.Kind == completionEdge {
		return withMarks(withResult(fsm.CompletionName(e.Guard), e.Result), e.Marks)
	}
	parts := make([]string, len(e.Causes))
	for i, c := range e.Causes {
		parts[i] = causeLabel(c)
	}
	l := strings.Join(parts, sep)
	if e.Kind == latchEdge {
		l += " / latch"
	}
	return l
}

// terminal reports whether no move and no completion leaves s in t.
func terminal(t *fsm.Table, s fsm.State) bool {
	if len(t.Completions(s)) > 0 {
		return false
	}
	for e := range fsm.NumEvents {
		if t.Lookup(s, e).Action == fsm.Move {
			return false
		}
	}
	return true
}

// header opens every drawing, naming its source.
const header = "generated by `kvready diagram` from fsm/lifecycle.go; do not edit"

// The colours of the states that decide slot safety, shared by every drawing.
const (
	quarantineStyle = "fill:#fde2e2,stroke:#b91c1c,stroke-width:3px,color:#7f1d1d"
	fenceStyle      = "fill:#dcfce7,stroke:#15803d,stroke-width:3px,color:#14532d"
	doneStyle       = "fill:#e5e7eb,stroke:#374151,stroke-width:2px"
	warningStyle    = "fill:#fef3c7,stroke:#b45309,stroke-width:2px,stroke-dasharray:5 3,color:#78350f"
	containedStyle  = "fill:#ffedd5,stroke:#c2410c,stroke-width:3px,color:#7c2d12"
)

// Mermaid returns the lifecycle as a Mermaid state diagram. Mermaid cannot
// style single transitions, so completions are told apart by their "[guard]"
// label and latches by "/ latch".
func Mermaid(t *fsm.Table) string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	b.WriteString("    %% " + header + "\n")
	b.WriteString("    classDef quarantine " + quarantineStyle + "\n")
	b.WriteString("    classDef fence " + fenceStyle + "\n")
	b.WriteString("    classDef done " + doneStyle + "\n")
	b.WriteString("    classDef warning " + warningStyle + "\n")
	b.WriteString("    classDef contained " + containedStyle + "\n")
	fmt.Fprintf(&b, "    [*] --> %s\n", fsm.Waiting)
	for s := range fsm.NumStates {
		for _, line := range effectLines(t, s) {
			fmt.Fprintf(&b, "    %s : %s\n", s, line)
		}
	}
	for _, e := range edges(t) {
		fmt.Fprintf(&b, "    %s --> %s : %s\n", e.From, e.To, label(e, ", "))
	}
	for s := range fsm.NumStates {
		if terminal(t, s) {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	fmt.Fprintf(&b, "    class %s quarantine\n", fsm.Quarantined)
	fmt.Fprintf(&b, "    class %s fence\n", fsm.AccessFenced)
	fmt.Fprintf(&b, "    class %s done\n", fsm.Released)
	fmt.Fprintf(&b, "    class %s warning\n", fsm.CopyUnproven)
	fmt.Fprintf(&b, "    class %s contained\n", fsm.Contained)
	return b.String()
}

// nodeStyle is the DOT attributes that set the safety-relevant states apart.
func nodeStyle(s fsm.State) string {
	switch s {
	case fsm.Quarantined:
		return ` shape=octagon fillcolor="#fde2e2" color="#b91c1c" penwidth=3 fontcolor="#7f1d1d"`
	case fsm.AccessFenced:
		return ` fillcolor="#dcfce7" color="#15803d" penwidth=3 fontcolor="#14532d"`
	case fsm.Released:
		return ` fillcolor="#e5e7eb" color="#374151" peripheries=2`
	case fsm.CopyUnproven:
		return ` style="rounded,filled,dashed" fillcolor="#fef3c7" color="#b45309" penwidth=2 fontcolor="#78350f"`
	case fsm.Contained:
		return ` fillcolor="#ffedd5" color="#c2410c" penwidth=3 fontcolor="#7c2d12"`
	}
	return ""
}

// edgeStyle is the DOT attributes of an edge: its line by kind (solid move,
// dotted completion, dashed latch), its colour by the state it enters.
func edgeStyle(e edge) string {
	var attrs string
	switch e.Kind {
	case latchEdge:
		return ` style=dashed color="#6b7280" fontcolor="#4b5563"`
	case completionEdge:
		attrs = " style=dotted penwidth=2 arrowhead=vee"
	}
	switch e.To {
	case fsm.Quarantined:
		attrs += ` color="#b91c1c" fontcolor="#b91c1c"`
	case fsm.AccessFenced:
		attrs += ` color="#15803d" fontcolor="#15803d"`
		if e.Kind == moveEdge {
			attrs += " penwidth=2"
		}
	case fsm.CopyUnproven:
		attrs += ` color="#b45309" fontcolor="#b45309"`
	case fsm.Contained:
		attrs += ` color="#c2410c" fontcolor="#c2410c"`
	}
	return attrs
}

// DOT returns the lifecycle as a Graphviz digraph.
func DOT(t *fsm.Table) string {
	var b strings.Builder
	b.WriteString("// " + header + "\n")
	b.WriteString("digraph lifecycle {\n")
	b.WriteString("  rankdir=TB;\n")
	b.WriteString("  nodesep=0.6;\n")
	b.WriteString("  labelloc=t;\n")
	b.WriteString("  fontname=\"Helvetica\";\n")
	b.WriteString("  label=\"kvready lease lifecycle, revision 3\\nsolid: move (outcome latched, +marks, keep)   dotted: [guard] completion on entry   dashed: latch {effects}\\nin each state: entry / effects on entering, rest / effects where a lease comes to rest\";\n")
	b.WriteString("  node [shape=box style=\"rounded,filled\" fillcolor=white fontname=\"Helvetica\"];\n")
	b.WriteString("  edge [fontname=\"Helvetica\" fontsize=10];\n")
	b.WriteString("  start [shape=point width=0.15 label=\"\"];\n")
	for s := range fsm.NumStates {
		text := s.String()
		for _, line := range effectLines(t, s) {
			text += "\\n" + line
		}
		fmt.Fprintf(&b, "  %s [label=\"%s\"%s];\n", s, text, nodeStyle(s))
	}
	// The outcome states share a rank, and the terminal states the bottom one,
	// so every path reads downwards.
	b.WriteString("  { rank=same;")
	for s := range fsm.NumStates {
		if t.Outcome(s) {
			fmt.Fprintf(&b, " %s;", s)
		}
	}
	b.WriteString(" }\n")
	b.WriteString("  { rank=sink;")
	for s := range fsm.NumStates {
		if terminal(t, s) {
			fmt.Fprintf(&b, " %s;", s)
		}
	}
	b.WriteString(" }\n")
	fmt.Fprintf(&b, "  start -> %s;\n", fsm.Waiting)
	for _, e := range edges(t) {
		fmt.Fprintf(&b, "  %s -> %s [label=\"%s\"%s];\n", e.From, e.To, label(e, "\\n"), edgeStyle(e))
	}
	b.WriteString("}\n")
	return b.String()
}

// SVG renders the DOT drawing to SVG with Graphviz compiled to WebAssembly (pure
// Go: nothing to install). Its output is the same on every run.
func SVG(ctx context.Context, t *fsm.Table) ([]byte, error) {
	g, err := graphviz.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("diagram: starting graphviz: %w", err)
	}
	defer g.Close()
	graph, err := graphviz.ParseBytes([]byte(DOT(t)))
	if err != nil {
		return nil, fmt.Errorf("diagram: graphviz refused the DOT drawing: %w", err)
	}
	defer graph.Close()
	var buf bytes.Buffer
	if err := g.Render(ctx, graph, graphviz.SVG, &buf); err != nil {
		return nil, fmt.Errorf("diagram: rendering SVG: %w", err)
	}
	return buf.Bytes(), nil
}
