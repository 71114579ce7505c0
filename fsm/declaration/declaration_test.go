package declaration_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/fsm/declaration"
)

// TestEveryMoveAndLatchOnce checks the rendering against the table: one
// description per move, latch and completion, each naming its state.
func TestEveryMoveAndLatchOnce(t *testing.T) {
	tab := fsm.Lifecycle()
	want := 0
	for s := range fsm.NumStates {
		want += len(tab.Completions(s))
		for e := range fsm.NumEvents {
			if tab.Lookup(s, e).Action != fsm.Refuse {
				want++
			}
		}
	}
	decl := declaration.Lifecycle()
	require.Len(t, decl, want)
	seen := map[string]bool{}
	for _, d := range decl {
		require.Len(t, d.Src, 1)
		key := d.Src[0] + " " + d.Name
		assert.False(t, seen[key], "%s described twice", key)
		seen[key] = true
	}
}

// TestShippedBinaryDoesNotLinkLooplab: looplab is for declaring and comparing,
// never shipped. The kvready command and the engine must not depend on it.
func TestShippedBinaryDoesNotLinkLooplab(t *testing.T) {
	for _, pkg := range []string{"github.com/kvready/kvready/cmd/kvready", "github.com/kvready/kvready/readiness"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.NotContains(t, strings.Fields(string(out)), "github.com/looplab/fsm", "%s links looplab", pkg)
	}
}
