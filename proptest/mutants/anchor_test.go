package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writePkg lays out a package under a scratch module root and returns the
// root.
func writePkg(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, src := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
	}
	return root
}

const guard = `package p

type Core struct{ n int }

func (c *Core) admit() bool {
	if c.n < 4 {
		return true
	}
	return false
}

func other(c *Core) bool {
	if c.n < 4 {
		return true
	}
	return false
}
`

func TestEditAnchoredToItsDeclaration(t *testing.T) {
	e := edit{pkg: "p", decl: "Core.admit", old: "if c.n < 4 {", new: "if true {"}
	for name, files := range map[string]map[string]string{
		"as written": {"a.go": guard},
		"moved to another file of the package": {
			"a.go": "package p\n\ntype Core struct{ n int }\n",
			"b.go": strings.Replace(guard, "package p\n\ntype Core struct{ n int }\n", "package p\n", 1),
		},
		"reformatted": {"a.go": strings.ReplaceAll(strings.ReplaceAll(guard, "\t", "  "), "c.n < 4", "c.n<4")},
		"beside a file for another platform that declares it too": {
			"a.go":       guard,
			"a_other.go": "//go:build plan9\n\npackage p\n\nfunc (c *Core) admit() bool { if c.n < 4 { return false }; return true }\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := writePkg(t, files)
			patched := map[string]string{}
			require.NoError(t, e.apply(root, patched))
			require.Len(t, patched, 1, "only the file that changed is patched")
			for _, src := range patched {
				admit := src[strings.Index(src, "func (c *Core) admit"):]
				admit = admit[:strings.Index(admit, "\n}\n")]
				require.Contains(t, admit, "if true {")
				require.NotContains(t, src[strings.Index(src, "func other"):], "if true", "the same text elsewhere is left alone")
			}
		})
	}
}

func TestStaleEditFailsLoudly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		e     edit
		files map[string]string
		want  string
	}{
		{"the declaration is gone", edit{"p", "Core.grant", "if c.n < 4 {", "if true {"}, map[string]string{"a.go": guard}, "declares no Core.grant"},
		{"a function of that name is no method", edit{"p", "admit", "if c.n < 4 {", "if true {"}, map[string]string{"a.go": guard}, "declares no admit"},
		{"the guard changed", edit{"p", "Core.admit", "if c.n <= 4 {", "if true {"}, map[string]string{"a.go": guard}, "occurs 0 times in Core.admit"},
		{"the guard occurs twice", edit{"p", "Core.admit", "return", "return !"}, map[string]string{"a.go": guard}, "occurs 2 times"},
		{"declared twice", edit{"p", "other", "if c.n < 4 {", "if true {"},
			map[string]string{"a.go": guard, "b.go": "package p\n\nfunc init() {}\n\nvar other = 1\n"}, "declares other 2 times"},
		{"the package is gone", edit{"q", "other", "x", "y"}, map[string]string{"a.go": guard}, "no such file"},
		{"an empty pattern", edit{"p", "other", " \n", "y"}, map[string]string{"a.go": guard}, "empty pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := writePkg(t, tc.files)
			err := tc.e.apply(root, map[string]string{})
			require.ErrorIs(t, err, errStale)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestPatternKeepsWordsApart(t *testing.T) {
	re, err := pattern("return x\n\t+ y")
	require.NoError(t, err)
	require.True(t, re.MatchString("return   x+y"))
	require.False(t, re.MatchString("returnx + y"), "white space between two words stays required")
}
