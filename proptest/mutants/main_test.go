package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every mutant must still apply to the code it breaks, and compile: a mutant
// whose text has gone tests nothing, one that no longer compiles would read as
// killed, and make mutants (not run by make test) would only find out later.
func TestEveryMutantApplies(t *testing.T) {
	root, err := moduleRoot("go")
	require.NoError(t, err)
	scratch := t.TempDir()
	seen := map[string]bool{}
	for _, m := range mutants {
		require.False(t, seen[m.name], "mutant %s listed twice", m.name)
		seen[m.name] = true
		require.NotEmpty(t, m.what, m.name)
		overlay, err := m.overlay(root, scratch)
		require.NoError(t, err, m.name)
		require.NoError(t, m.compiles("go", root, overlay), m.name)
	}
	require.GreaterOrEqual(t, len(mutants), 20)
}
