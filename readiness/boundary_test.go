package readiness

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The I/O-free core (etcd raft's RawNode) lives in this package as the files
// core*.go, beside the runner (Node) that owns the goroutines: one
// vocabulary, two drivers. What keeps the core pure is this test, not a
// package boundary: a core file starts no goroutine, touches no channel,
// reads no clock, sleeps on nothing and imports no backend, device or
// operating-system package. docs/engine.md says why it is kept this way.

// coreImports is every import a core file may have.
var coreImports = map[string]bool{
	"errors": true, "fmt": true, "log/slog": true, "math/bits": true, "slices": true, "time": true,
	"github.com/kvready/kvready/contract":      true,
	"github.com/kvready/kvready/fsm":           true,
	"github.com/kvready/kvready/gpu":           true, // the Event and Status types the core waits on, not a device
	"github.com/kvready/kvready/internal/grow": true,
	"github.com/kvready/kvready/staging":       true,
}

// clockReads are the time functions that read the clock or wait on it.
var clockReads = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
	"NewTimer": true, "NewTicker": true, "Tick": true,
}

// impurities names every way src, a core file, does I/O or leaves the
// caller's goroutine.
func impurities(name string, src any) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var found []string
	at := func(n ast.Node, format string, args ...any) {
		found = append(found, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), fmt.Sprintf(format, args...)))
	}
	timeName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !coreImports[path] {
			at(imp, "imports %s", path)
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			at(n, "starts a goroutine")
		case *ast.SendStmt:
			at(n, "sends on a channel")
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				at(n, "receives from a channel")
			}
		case *ast.SelectStmt:
			at(n, "selects on channels")
		case *ast.ChanType:
			at(n, "declares a channel")
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && timeName != "" && id.Name == timeName && clockReads[n.Sel.Name] {
				at(n, "reads the clock (time.%s)", n.Sel.Name)
			}
		}
		return true
	})
	return found, nil
}

// coreFiles are the core's files: core.go and core_*.go, tests left out.
func coreFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("core*.go")
	require.NoError(t, err)
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			out = append(out, f)
		}
	}
	require.GreaterOrEqual(t, len(out), 10, "the core's files were found")
	return out
}

func TestCoreFilesDoNoIO(t *testing.T) {
	for _, name := range coreFiles(t) {
		found, err := impurities(name, nil)
		require.NoError(t, err)
		assert.Empty(t, found, "the core (core*.go) is I/O-free: move this to the runner")
	}
}

// The check is the premise, so check the checker: each impurity it looks for
// is caught, and a pure file passes.
func TestCoreCheckCatchesIO(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"package readiness\nfunc f() { go f() }", "starts a goroutine"},
		{"package readiness\nimport \"time\"\nfunc f() time.Time { return time.Now() }", "reads the clock (time.Now)"},
		{"package readiness\nimport t \"time\"\nfunc f() { t.Sleep(1) }", "reads the clock (time.Sleep)"},
		{"package readiness\nfunc f(c chan int) { c <- 1 }", "declares a channel"},
		{"package readiness\nfunc f(c chan int) { <-c }", "receives from a channel"},
		{"package readiness\nimport \"os\"\nvar _ = os.Args", "imports os"},
		{"package readiness\nimport \"github.com/kvready/kvready/backend/mem\"\nvar _ mem.Store", "imports github.com/kvready/kvready/backend/mem"},
		{"package readiness\nimport \"github.com/kvready/kvready/gpu/sim\"\nvar _ sim.Device", "imports github.com/kvready/kvready/gpu/sim"},
	} {
		found, err := impurities("x.go", tc.src)
		require.NoError(t, err)
		assert.True(t, strings.Contains(strings.Join(found, "\n"), tc.want), "%q: want %q in %v", tc.src, tc.want, found)
	}
	found, err := impurities("x.go", "package readiness\nimport \"time\"\nfunc f(d time.Duration) time.Time { return time.Unix(0, int64(d)) }")
	require.NoError(t, err)
	assert.Empty(t, found)
}

// The engine's rooms stay small enough for a newcomer to own one: no file of
// the package over 600 lines, no function over 70 (TigerBeetle's limit).
func TestEngineRoomsStaySmall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	seen := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		seen++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		lines := fset.File(f.Pos()).LineCount()
		assert.LessOrEqual(t, lines, 600, "%s: lines; split it by what it does", name)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			assert.LessOrEqual(t, n, 70, "%s: %s is %d lines; make it named steps", name, fn.Name.Name, n)
		}
	}
	require.Greater(t, seen, 20, "the package's files were found")
}
