package diagram

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
)

// drawn is what a drawing says, parsed back from its text.
type drawn struct {
	// moves maps (state, event) to "next result" ("next" alone without one).
	moves map[[2]string]string
	// completions maps a state to its "[guard] next result" items, in order.
	completions map[string][]string
	// latches maps every drawn (state, event) latch to its drawn effects.
	latches map[[2]string]string
	// effects maps a state to its drawn "entry / …" and "rest / …" lines.
	effects map[string][]string
	// labels are the label lines of every edge, for the SVG check.
	labels []string
}

// causeRE is one cause: the event or [guard], the result, +marks, keep, and a
// latch's {effects}.
var causeRE = regexp.MustCompile(`^(\[?[a-z_]+\]?)(?: \(([a-z]+)\))?((?: \+[a-z]+)*)( keep)?(?: \{([a-z_+]+)\})?$`)

// parseEdge records one drawn edge, from → to, whose label lines are items.
func (d *drawn) parseEdge(t *testing.T, from, to string, items []string) (kind edgeKind) {
	t.Helper()
	d.labels = append(d.labels, items...)
	if last := items[len(items)-1]; strings.HasSuffix(last, " / latch") {
		items[len(items)-1] = strings.TrimSuffix(last, " / latch")
		assert.Equal(t, from, to, "latch %v is not a self-loop", items)
		for _, item := range items {
			m := causeRE.FindStringSubmatch(item)
			require.NotNil(t, m, "latch label %q", item)
			key := [2]string{from, m[1]}
			_, dup := d.latches[key]
			assert.False(t, dup, "(%s, %s) drawn twice", from, m[1])
			d.latches[key] = m[5]
		}
		return latchEdge
	}
	assert.NotEqual(t, from, to, "%v: only latches are self-loops", items)
	for _, item := range items {
		m := causeRE.FindStringSubmatch(item)
		require.NotNil(t, m, "label %q", item)
		target := strings.Join(strings.Fields(to+" "+m[2]+m[3]+m[4]), " ")
		if strings.HasPrefix(m[1], "[") {
			require.Len(t, items, 1, "a completion is drawn on its own: %v", items)
			d.completions[from] = append(d.completions[from], m[1]+" "+target)
			kind = completionEdge
			continue
		}
		key := [2]string{from, m[1]}
		_, dup := d.moves[key]
		assert.False(t, dup, "(%s, %s) drawn twice", from, m[1])
		d.moves[key] = target
	}
	return kind
}

// check compares the drawing with the table: every move with its target and
// result, every completion in order, every latch, and nothing else.
func (d *drawn) check(t *testing.T, tab *fsm.Table) {
	t.Helper()
	moves, latches := 0, 0
	for s := range fsm.NumStates {
		for e := range fsm.NumEvents {
			key := [2]string{s.String(), e.String()}
			en := tab.Lookup(s, e)
			switch en.Action {
			case fsm.Move:
				moves++
				want := en.Next.String()
				if en.Result != fsm.NoResult {
					want += " " + en.Result.String()
				}
				for _, mk := range en.Marks.List() {
					want += " +" + mk.String()
				}
				if en.Keep {
					want += " keep"
				}
				assert.Equal(t, want, d.moves[key], "move (%s, %s)", s, e)
			case fsm.Latch:
				latches++
				fx, drawn := d.latches[key]
				assert.True(t, drawn, "latch (%s, %s) is not drawn", s, e)
				assert.Equal(t, strings.ReplaceAll(en.Effects.String(), ", ", "+"), fx, "what keeping (%s, %s) does", s, e)
			default:
				_, isMove := d.moves[key]
				_, isLatch := d.latches[key]
				assert.False(t, isMove || isLatch, "refused (%s, %s) is drawn", s, e)
			}
		}
		var want []string
		for _, c := range tab.Completions(s) {
			w := fsm.CompletionName(c.Guard) + " " + c.Next.String()
			if c.Result != fsm.NoResult {
				w += " " + c.Result.String()
			}
			want = append(want, w)
		}
		assert.Equal(t, want, d.completions[s.String()], "completions of %s, in order", s)
		if d.effects != nil {
			var lines []string
			if fx := tab.OnEntry(s); fx != 0 {
				lines = append(lines, "entry / "+fx.String())
			}
			if fx := tab.AtRest(s); fx != 0 {
				lines = append(lines, "rest / "+fx.String())
			}
			for _, mk := range tab.MarksOf(s).List() {
				lines = append(lines, "+"+mk.String())
			}
			assert.Equal(t, lines, d.effects[s.String()], "the effects drawn in %s", s)
		}
	}
	assert.Equal(t, moves, len(d.moves), "moves drawn")
	assert.Equal(t, latches, len(d.latches), "latches drawn")
	require.Positive(t, moves)
	require.Positive(t, latches)
}

func newDrawn() *drawn {
	return &drawn{moves: map[[2]string]string{}, completions: map[string][]string{}, latches: map[[2]string]string{}}
}

// mermaidEdge matches one drawn transition: "    from --> to : label".
var mermaidEdge = regexp.MustCompile(`^    ([a-z_]+) --> ([a-z_]+) : (.+)$`)

// mermaidEffects matches one line of a state's effects: "    state : entry / …".
var mermaidEffects = regexp.MustCompile(`^    ([a-z_]+) : ((?:entry|rest) / .+|\+[a-z]+)$`)

// TestMermaidDrawsTheTable parses the Mermaid drawing back and checks that it
// is exactly the table's moves (with the outcomes they latch), completions and
// latches: nothing missing, nothing invented.
func TestMermaidDrawsTheTable(t *testing.T) {
	tab := fsm.Lifecycle()
	d := newDrawn()
	d.effects = map[string][]string{}
	for _, line := range strings.Split(Mermaid(tab), "\n") {
		if m := mermaidEdge.FindStringSubmatch(line); m != nil {
			d.parseEdge(t, m[1], m[2], strings.Split(m[3], ", "))
		} else if m := mermaidEffects.FindStringSubmatch(line); m != nil {
			d.effects[m[1]] = append(d.effects[m[1]], m[2])
		}
	}
	d.check(t, tab)
	m := Mermaid(tab)
	assert.True(t, strings.HasPrefix(m, "stateDiagram-v2\n    %% "+header+"\n"))
	assert.Contains(t, m, "    [*] --> waiting\n")
	assert.Contains(t, m, "    quarantined --> [*]\n")
	assert.Contains(t, m, "    released --> [*]\n")
	assert.Equal(t, 2, strings.Count(m, "--> [*]"), "only the terminal states end")
}

// dotNode matches one DOT state: `  state [label="state\nentry / …" attrs];`.
var dotNode = regexp.MustCompile(`^  ([a-z_]+) \[label="([^"]+)".*\];$`)

// dotEdge matches one DOT edge: `  from -> to [label="l1\nl2" attrs];`.
var dotEdge = regexp.MustCompile(`^  ([a-z_]+) -> ([a-z_]+) \[label="([^"]+)"(.*)\];$`)

// TestDOTDrawsTheTable parses the DOT drawing back like the Mermaid one, and
// checks each kind of edge has its line style: solid moves, dotted
// completions, dashed latches.
func TestDOTDrawsTheTable(t *testing.T) {
	tab := fsm.Lifecycle()
	d := newDrawn()
	d.effects = map[string][]string{}
	edgesSeen := 0
	for _, line := range strings.Split(DOT(tab), "\n") {
		if m := dotNode.FindStringSubmatch(line); m != nil {
			lines := strings.Split(m[2], `\n`)
			require.Equal(t, m[1], lines[0], "a node is labelled with its state first")
			if len(lines) > 1 {
				d.effects[m[1]] = lines[1:]
			}
			continue
		}
		m := dotEdge.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		edgesSeen++
		switch d.parseEdge(t, m[1], m[2], strings.Split(m[3], `\n`)) {
		case latchEdge:
			assert.Contains(t, m[4], "style=dashed", line)
		case completionEdge:
			assert.Contains(t, m[4], "style=dotted", line)
		default:
			assert.NotContains(t, m[4], "style=", "a move is solid: %s", line)
		}
	}
	d.check(t, tab)
	assert.Equal(t, len(edges(tab)), edgesSeen)
	assert.Equal(t, edgesSeen+1, strings.Count(DOT(tab), " -> "), "one line per edge plus the start arrow")
}

func TestSafetyStatesStandOut(t *testing.T) {
	tab := fsm.Lifecycle()
	m := Mermaid(tab)
	assert.Contains(t, m, "class quarantined quarantine\n")
	assert.Contains(t, m, "class access_fenced fence\n")
	assert.Contains(t, m, "class released done\n")
	assert.Contains(t, m, "class copy_unproven warning\n")
	assert.Contains(t, m, "classDef warning "+warningStyle+"\n")
	d := DOT(tab)
	assert.Regexp(t, `(?m)^  quarantined \[label="quarantined\\nentry / quarantine" shape=octagon fillcolor="#fde2e2"`, d)
	assert.Regexp(t, `(?m)^  access_fenced \[label="access_fenced\\nentry / end_access, forget\\nrest / copy_out\\n\+fenced" fillcolor="#dcfce7"`, d)
	assert.Regexp(t, `(?m)^  released \[label="released\\nentry / free, retire" fillcolor="#e5e7eb"`, d)
	assert.Regexp(t, `(?m)^  copy_unproven \[label="copy_unproven\\nentry / start_drain" style="rounded,filled,dashed" fillcolor="#fef3c7"`, d)
	assert.Regexp(t, `(?m)^  \{ rank=sink; quarantined; released; \}$`, d)
	assert.Regexp(t, `(?m)^  \{ rank=same; served; partial; missed; failed; \}$`, d)
	assert.Regexp(t, `(?m)^  served -> access_fenced \[label="access_proven" color="#15803d"`, d)
	assert.Regexp(t, `(?m)^  failed -> access_fenced \[label="\[never_exposed\]" style=dotted`, d)
	assert.Regexp(t, `(?m)^  requested -> contained \[label="containment" color="#c2410c"`, d)
	assert.Regexp(t, `(?m)^  contained -> quarantined \[label="\[not_recoverable\]" style=dotted penwidth=2 arrowhead=vee color="#b91c1c"`, d)
	assert.Contains(t, m, "class contained contained\n")
	assert.Regexp(t, `(?m)^  requested -> failed \[label="outcome_failed \(failed\)\\noutcome_cancelled \(cancelled\)`, d)
}

func TestSVGIsDeterministicAndComplete(t *testing.T) {
	ctx := context.Background()
	tab := fsm.Lifecycle()
	first, err := SVG(ctx, tab)
	require.NoError(t, err)
	second, err := SVG(ctx, tab)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(first, second), "two renderings differ: the committed SVG could never be fresh")
	svg := string(first)
	for s := range fsm.NumStates {
		assert.Contains(t, svg, "<title>"+s.String()+"</title>")
	}
	// Every label line of every edge is drawn as text.
	d := newDrawn()
	for _, line := range strings.Split(DOT(tab), "\n") {
		if m := dotEdge.FindStringSubmatch(line); m != nil {
			d.parseEdge(t, m[1], m[2], strings.Split(m[3], `\n`))
		}
	}
	require.NotEmpty(t, d.labels)
	for _, l := range d.labels {
		assert.Contains(t, svg, ">"+html.EscapeString(l)+"</text>", "label %q", l)
	}
	assert.Contains(t, svg, `fill="#fef3c7"`, "copy_unproven is drawn as a warning")
	assert.Contains(t, svg, `fill="#fde2e2"`, "quarantined is red")
	assert.Contains(t, svg, "stroke-dasharray", "latches and completions are not solid")
}

// section returns the Markdown from heading to the next heading of the same
// level.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "no section %q", heading)
	rest := md[i+1:]
	level := heading[:strings.Index(heading, " ")+1]
	if next := strings.Index(rest[1:], "\n"+level); next >= 0 {
		rest = rest[:next+1]
	}
	return rest
}

func TestMarkdownDescribesEveryPair(t *testing.T) {
	tab := fsm.Lifecycle()
	md := Markdown(tab)
	assert.True(t, strings.HasPrefix(md, "# The lease lifecycle\n"))
	assert.Contains(t, md, "```mermaid\n"+Mermaid(tab)+"```\n")
	// What a move stores is spelled out where the move is.
	assert.Contains(t, section(t, md, "### `requested`"), "| `outcome_cancelled` | move | `failed`, latching `cancelled`; stores reason, by_peer, first_answer |")
	assert.Contains(t, section(t, md, "### `failed`"), "| `cancel_answered` | latch | kept: recorded on the lease: it changes neither the outcome nor the collection of access evidence; stores cancel_reply |")
	stores := section(t, md, "## Stores")
	for st := range fsm.NumStores {
		assert.Contains(t, stores, fmt.Sprintf("| `%s` | %s |", st, cell(st.Meaning())))
	}
	assert.Contains(t, stores, "`outcome_cancelled` in `requested`")
	assert.Contains(t, section(t, md, "## Effects"), "| `request_cancel` | Ask the backend once, best effort, to stop (only where it returned an attempt). It proves nothing. Only for a lease marked `attempted`; passed by otherwise. |")
	for s := range fsm.NumStates {
		sec := section(t, md, "### `"+s.String()+"`")
		for e := range fsm.NumEvents {
			en := tab.Lookup(s, e)
			var row string
			switch en.Action {
			case fsm.Move:
				row = fmt.Sprintf("| `%s` | move | `%s`%s |", e, en.Next, latching(en.Result)+moveExtras(en))
			case fsm.Latch:
				row = fmt.Sprintf("| `%s` | latch | kept: %s%s%s |", e, cell(en.Reason()), doing(en.Effects), storing(en.Stores))
			default:
				row = fmt.Sprintf("| `%s` | refuse | %s |", e, cell(en.Reason()))
			}
			assert.Contains(t, sec, row, "section %s", s)
		}
		for _, c := range tab.Completions(s) {
			assert.Contains(t, sec, fmt.Sprintf("- `%s` → `%s`%s\n", fsm.CompletionName(c.Guard), c.Next, latching(c.Result)))
		}
		assert.Contains(t, section(t, md, "## States"),
			fmt.Sprintf("| `%s` | %s | %s | %s |", s, cell(s.Meaning()), cell(s.Slots()), orDash(strings.Join(groupsOf(tab, s), ", "))))
	}
	assert.Contains(t, section(t, md, "## States"), "| `requested` | Submitted; the outcome is pending. | The backend may read or write them at any time. | holds slots, exposed, containable |")
	assert.Contains(t, section(t, md, "## States"), "| `logically_complete` | Every local copy landed: readiness is answerable. | Nothing touches them: they return once the owner releases the lease. | holds slots, answerable |")
	for e := range fsm.NumEvents {
		assert.Contains(t, section(t, md, "## Events"), fmt.Sprintf("| %d | `%s` | %s |", e, e, e.Meaning()))
	}
	guards := section(t, md, "## Guards")
	for g := range fsm.NumGuards {
		assert.Contains(t, guards, fmt.Sprintf("| `%s` | %s |", g, cell(g.Meaning())))
	}
	assert.Contains(t, guards, "| `never_exposed` | The backend never saw the slots: the submission was rejected, or never made. | `failed` |")
	completions := section(t, md, "## Completions")
	assert.Contains(t, completions, "| `staged` | `[deadline_passed]` | `failed` | `timeout` |")
	assert.Contains(t, completions, "| `access_fenced` | `[nothing_to_copy]` | `logically_complete` | — |")
	results := section(t, md, "## Results")
	assert.Contains(t, results, "| `missed` | no | `requested` `outcome_missed` → `missed` |")
	assert.Contains(t, results, "| `timeout` | yes | `staged` `[deadline_passed]` → `failed`<br>`staged` `deadline` → `failed`<br>`requested` `deadline` → `failed` |")
	assert.Contains(t, results, "`requested` `outcome_cancelled` → `failed`")
	assert.NotContains(t, results, "| `none` |")
	for s := range fsm.NumStates {
		for e := range fsm.NumEvents {
			if en := tab.Lookup(s, e); en.Action == fsm.Move && en.Result != fsm.NoResult {
				assert.Contains(t, results, fmt.Sprintf("`%s` `%s` → `%s`", s, e, en.Next))
			}
		}
	}
	latches := section(t, md, "## Latches")
	for s := range fsm.NumStates {
		for e := range fsm.NumEvents {
			if en := tab.Lookup(s, e); en.Action == fsm.Latch {
				assert.Regexp(t, regexp.MustCompile("(?m)^\\| `"+s.String()+"` \\| [^|]*`"+e.String()+"`[^|]*\\| "+regexp.QuoteMeta(cell(en.Reason()))+" \\| "+regexp.QuoteMeta(orDash(en.Effects.String()))+" \\|$"), latches, "(%s, %s)", s, e)
			}
		}
	}
	effects := section(t, md, "## Effects")
	for fx := range fsm.NumEffects {
		assert.Contains(t, effects, fmt.Sprintf("| `%s` | %s", fx, cell(fx.Meaning())))
	}
	assert.Contains(t, effects, "| `copy_out` | "+cell(fsm.CopyOut.Meaning())+" | resting in `access_fenced` |")
	assert.Contains(t, effects, "keeping `access_unproven` in `served`")
	assert.Contains(t, section(t, md, "### `failed`"), "Entering it: start_drain, request_cancel.\nAt rest in it: ask_proof.\n")
	assert.Contains(t, section(t, md, "## Marks"), "| `exposed` | The backend was handed the slots. | `admitted` `submitted` → `requested`<br>`admitted` `submit_escaped` → `failed` |")
	glance := section(t, md, "## Every pair at a glance")
	assert.Contains(t, glance, "| `staged` | [cancel_withdrawn] → access_fenced<br>[withdrawn] → access_fenced<br>[staging_incomplete] → failed<br>[deadline_passed] → failed |")
	assert.Equal(t, int(fsm.NumStates), strings.Count(glance, "\n| `"), "one row per state")
	assert.Contains(t, glance, "| `requested` | — | · |")
	assert.Contains(t, section(t, md, "## States"), "| `waiting` | Queued for staging slots, in arrival order. | Holds none. | — |")
	for _, phrase := range []string{
		"revision 2",
		"issued only on entering `access_fenced`",
		"**containment deadline is fixed at submission** — the request deadline plus\n   the drain grace, earlier if the drain starts earlier",
		"**Quarantine is only by containment**",
		"- **move**:", "- **latch**:", "- **refuse**:", "**completions**",
	} {
		assert.Contains(t, md, phrase)
	}
}

func TestCellEscapesPipes(t *testing.T) {
	assert.Equal(t, `a \| b`, cell("a | b"))
}
