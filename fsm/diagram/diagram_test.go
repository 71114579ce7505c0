package diagram

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
)

// mermaidEdge matches one drawn transition: "    from --> to : events[ / latch]".
var mermaidEdge = regexp.MustCompile(`^    ([a-z_]+) --> ([a-z_]+) : (.+)$`)

// TestMermaidDrawsEveryMoveAndLatch parses the drawing back and checks that it
// is exactly the table's moves and latches: nothing missing, nothing invented,
// latches labelled as such.
func TestMermaidDrawsEveryMoveAndLatch(t *testing.T) {
	tab := fsm.Lifecycle()
	drawn := map[[2]string]string{} // (state, event) → target
	latches := map[[2]string]bool{}
	for _, line := range strings.Split(Mermaid(tab), "\n") {
		m := mermaidEdge.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		label, isLatch := strings.CutSuffix(m[3], " / latch")
		assert.Equal(t, m[1] == m[2], isLatch, "line %q: self-loops and only they are latches", line)
		for _, ev := range strings.Split(label, ", ") {
			key := [2]string{m[1], ev}
			_, dup := drawn[key]
			assert.False(t, dup, "(%s, %s) drawn twice", m[1], ev)
			drawn[key] = m[2]
			latches[key] = isLatch
		}
	}
	n := 0
	for s := range fsm.NumStates {
		for e := range fsm.NumEvents {
			en := tab.Lookup(s, e)
			to, ok := drawn[[2]string{s.String(), e.String()}]
			if en.Kind == fsm.Refuse {
				assert.False(t, ok, "refused (%s, %s) is drawn", s, e)
				continue
			}
			n++
			assert.True(t, ok, "(%s, %s) is not drawn", s, e)
			assert.Equal(t, en.Next.String(), to, "(%s, %s)", s, e)
			assert.Equal(t, en.Kind == fsm.Latch, latches[[2]string{s.String(), e.String()}], "(%s, %s)", s, e)
		}
	}
	assert.Equal(t, n, len(drawn))
}

func TestSafetyStatesStandOut(t *testing.T) {
	m := Mermaid(fsm.Lifecycle())
	assert.Contains(t, m, "class quarantined quarantine\n")
	assert.Contains(t, m, "class access_fenced fence\n")
	assert.Contains(t, m, "class released done\n")
	assert.NotContains(t, m, "\n    waiting --> waiting", "no current-state highlight or idle loops")
	d := DOT(fsm.Lifecycle())
	assert.Regexp(t, `(?m)^  quarantined \[label="quarantined" shape=octagon fillcolor="#fde2e2"`, d)
	assert.Regexp(t, `(?m)^  access_fenced \[label="access_fenced" fillcolor="#dcfce7"`, d)
	assert.Regexp(t, `(?m)^  requested -> requested \[label="access_proven\\nrelease_requested\\nclose / latch" style=dashed`, d)
	assert.Regexp(t, `(?m)^  logically_complete -> access_fenced \[label="access_proven" color="#15803d"`, d)
}

// TestDOTEdgesMatchTable checks the DOT drawing has one edge per (from, to) pair
// of the table, labelled with all its events.
func TestDOTEdgesMatchTable(t *testing.T) {
	tab := fsm.Lifecycle()
	d := DOT(tab)
	for _, e := range edges(tab) {
		want := fmt.Sprintf("  %s -> %s [label=\"%s", e.From, e.To, strings.Join(names(e.Events), `\n`))
		assert.Equal(t, 1, strings.Count(d, want), "edge %s -> %s", e.From, e.To)
	}
	assert.Equal(t, len(edges(tab))+1, strings.Count(d, " -> "), "one line per edge plus the start arrow")
}

func TestSVGIsDeterministic(t *testing.T) {
	ctx := context.Background()
	first, err := SVG(ctx, fsm.Lifecycle())
	require.NoError(t, err)
	second, err := SVG(ctx, fsm.Lifecycle())
	require.NoError(t, err)
	assert.True(t, bytes.Equal(first, second), "two renderings differ: the committed SVG could never be fresh")
	for s := range fsm.NumStates {
		assert.Contains(t, string(first), "<title>"+s.String()+"</title>")
	}
	assert.Contains(t, string(first), "close / latch", "latch labels are drawn")
}

func TestMarkdownListsEveryPair(t *testing.T) {
	tab := fsm.Lifecycle()
	md := Markdown(tab)
	assert.True(t, strings.HasPrefix(md, "# The lease lifecycle\n"))
	assert.Contains(t, md, "```mermaid\n"+Mermaid(tab)+"```\n")
	for s := range fsm.NumStates {
		section := md[strings.Index(md, "\n### `"+s.String()+"`\n"):]
		if next := strings.Index(section[1:], "\n### "); next >= 0 {
			section = section[:next+1]
		}
		for e := range fsm.NumEvents {
			en := tab.Lookup(s, e)
			var row string
			switch en.Kind {
			case fsm.Move:
				row = fmt.Sprintf("| `%s` | move | `%s` |", e, en.Next)
			case fsm.Latch:
				row = fmt.Sprintf("| `%s` | latch |", e)
			default:
				row = fmt.Sprintf("| `%s` | refuse | %s |", e, en.Reason())
			}
			assert.Contains(t, section, row, "section %s", s)
		}
		assert.Contains(t, md, fmt.Sprintf("| `%s` | %s | %s |", s, s.Meaning(), s.Slots()))
	}
	for e := range fsm.NumEvents {
		assert.Contains(t, md, fmt.Sprintf("| %d | `%s` | %s |", e, e, e.Meaning()))
	}
}

func TestCellEscapesPipes(t *testing.T) {
	assert.Equal(t, `a \| b`, cell("a | b"))
}
