package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAPIDocIsFresh regenerates docs/api.md and compares it with the
// committed page, so that the embedder's surface on one page stays true.
func TestAPIDocIsFresh(t *testing.T) {
	root := filepath.Join("..", "..")
	var got bytes.Buffer
	require.NoError(t, write(&got, root, embedder))
	want, err := os.ReadFile(filepath.Join(root, "docs", "api.md"))
	require.NoError(t, err)
	if got.String() != string(want) {
		t.Errorf("docs/api.md is stale: run `go run ./internal/apidoc > docs/api.md` (or make api-doc) and commit the result")
	}
}

// The page lists what an embedder names and nothing behind the engine: the
// runner's own vocabulary is there, the core's and the table's are not, and
// every exported identifier of a package is counted once.
func TestAPIDocListsTheEmbeddersSurface(t *testing.T) {
	var page bytes.Buffer
	require.NoError(t, write(&page, filepath.Join("..", ".."), embedder))
	s := page.String()
	for _, want := range []string{
		"`type Config struct`", "`type State uint8`", "`func (s State) Held() bool`", "`func (s State) Terminal() bool`",
		"`type LeaseInfo struct`", "`type Stats struct`", "`type Policy uint8`", "`type Row struct`",
		"`func (e *Engine) Count(s State) int`", "`Containment Policy`",
	} {
		assert.Contains(t, s, want)
	}
	for _, banned := range []string{"core.", "fsm."} {
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "- `") {
				decl := strings.SplitN(line, "`", 3)[1]
				assert.NotContains(t, decl, banned, "a declaration on the page names the %s package", strings.TrimSuffix(banned, "."))
			}
		}
	}
}

// A package with no Go files, or one that does not parse, is an error, never
// an empty section.
func TestAPIDocRefusesAMissingPackage(t *testing.T) {
	var page bytes.Buffer
	err := write(&page, t.TempDir(), []string{"nothing"})
	require.Error(t, err)
	assert.Empty(t, page.String(), "nothing is written on an error")
}
