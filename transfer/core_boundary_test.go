package transfer

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pure core — Cohort and Sessions, in the files core*.go — starts no
// goroutine, touches no channel, reads no clock and imports nothing but the
// standard library's value packages; Transceiver, its driver, does the
// waiting. This test keeps it so, as readiness/boundary_test.go does for
// the engine's core.

var pureImports = map[string]bool{
	"cmp": true, "errors": true, "fmt": true, "maps": true, "slices": true, "strings": true, "time": true,
}

var clockReads = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
	"NewTimer": true, "NewTicker": true, "Tick": true,
}

func impurities(name string, src any) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var found []string
	at := func(n ast.Node, what string) {
		found = append(found, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); !pureImports[path] {
			at(imp, "imports "+path)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			at(n, "starts a goroutine")
		case *ast.SendStmt, *ast.SelectStmt, *ast.ChanType:
			at(n, "uses a channel")
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				at(n, "receives from a channel")
			}
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" && clockReads[n.Sel.Name] {
				at(n, "reads the clock: time."+n.Sel.Name)
			}
		}
		return true
	})
	return found, nil
}

func TestCoreIsPure(t *testing.T) {
	files, err := filepath.Glob("core*.go")
	require.NoError(t, err)
	var cores []string
	for _, f := range files {
		if ok, _ := filepath.Match("*_test.go", f); !ok {
			cores = append(cores, f)
		}
	}
	require.GreaterOrEqual(t, len(cores), 3, "the core files: %v", cores)
	for _, f := range cores {
		found, err := impurities(f, nil)
		require.NoError(t, err)
		assert.Empty(t, found, "%s", f)
	}
}

// The checker is checked: each impurity it exists to catch is caught.
func TestImpuritiesAreFound(t *testing.T) {
	src := `package p
import ("time"; "os")
func f(c chan int) { go f(c); c <- 1; <-c; _ = time.Now(); select {} }`
	found, err := impurities("p.go", src)
	require.NoError(t, err)
	assert.Len(t, found, 7, "%v", found) // os, go, chan type, send, receive, time.Now, select
}
