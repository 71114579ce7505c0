package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/kvready/kvready"

// rank is each package's layer. A package may import one of a strictly lower
// rank, or one of its own rank under the same top directory (backend/mem may
// use backend/pools; metrics may not use backend/mem). A package missing
// here fails the test: a new package says where it sits.
var rank = map[string]int{
	// Interfaces and leaves: no module imports of their own.
	"contract":            0,
	"gpu":                 0, // the device interface the core waits on, not a device
	"internal/grow":       0, // how the engine's per-lease tables grow: the standard library only
	"internal/words":      0, // counts in English ("1 lease"): the standard library only
	"internal/sidebyside": 0, // benchmarks' ways measured lease by lease: the standard library only
	"internal/kittb":      0, // the test kits' recording TB and fail-file mover: rapid and the standard library only
	"transfer":            0, // the request-scoped peer-transfer contract, lifecycle and pure session core: the standard library only

	"staging": 1,

	"fsm":             2,
	"fsm/declaration": 2,
	"fsm/diagram":     2,

	"readiness": 4,

	// Adapters at the edge.
	"backend/mem":          5,
	"backend/mem/memtest":  5, // the broken modes: imported by tests and the test library only
	"backend/notify":       5,
	"backend/peer":         5, // a peer transfer as a backend: imports only contract and transfer
	"backend/pools":        5,
	"backend/redis":        5,
	"backend/tiers":        5, // a stack of backends: imports only contract and backend/notify
	"gpu/cuda":             5,
	"gpu/cuda/fakecuda":    5,
	"gpu/nvml":             5,
	"gpu/sim":              5,
	"transfer/sim":         5, // the simulated, adversarial transport: an adapter at the edge, like gpu/sim
	"transfer/ucx":         5, // the UCX transport (cgo to libucp): an adapter at the edge, beside transfer/sim
	"transfer/ucxpipe":     5, // two processes meeting over transfer/ucx through their pipes: imports transfer and transfer/ucx
	"metrics":              5,
	"conformance":          6, // runs trials through an engine on the simulated device
	"internal/redistest":   5,
	"internal/readme":      5,
	"internal/benchreport": 7,
	"internal/apidoc":      7,

	// The transport conformance kit: imports only transfer and internal/kittb.
	"transfer/transporttest": 5,

	// On top.
	"proptest":           6,
	"simulate":           6,
	"cabi":               7,
	"cmd/kvready":        7,
	"proptest/mutants":   7,
	"internal/layers":    7,
	"internal/peerucx":   6, // two-process tests of the engine over backend/peer over transfer/ucx: test files only
	"internal/ucxfigure": 6, // SPEC §5's UCX figure: ucx_perftest's runner and parser; the engine in its test files only
	"examples/shutdown":  7, // the Ctrl-C pattern for Go embedders: a program, imported by nothing
}

type listed struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
}

func goList(t *testing.T) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

func local(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	return strings.CutPrefix(path, module+"/")
}

// allowed says whether from may import to; both must have a rank.
func allowed(from, to string) bool {
	rf, rt := rank[from], rank[to]
	return rt < rf || (rt == rf && top(to) == top(from))
}

func top(path string) string {
	dir, _, _ := strings.Cut(path, "/")
	return dir
}

// TestNoPackageImportsUpward checks every non-test import of every package
// in the module against the rank table.
func TestNoPackageImportsUpward(t *testing.T) {
	for _, p := range goList(t) {
		from, _ := local(p.ImportPath)
		rf, ok := rank[from]
		if !assert(t, ok, "package %s has no layer in internal/layers: say where it sits", from) {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := local(imp)
			if !ok {
				continue
			}
			rt, ok := rank[to]
			if !assert(t, ok, "package %s imported by %s has no layer in internal/layers", to, from) {
				continue
			}
			assert(t, allowed(from, to), "%s (layer %d) imports %s (layer %d): imports only go down", from, rf, to, rt)
		}
	}
}

// TestShippedProgramsDoNotLinkLooplab: looplab/fsm declares and draws the
// machine at build time; the engine runs the compiled table, so neither the
// kvready binary nor the C library may carry it.
func TestShippedProgramsDoNotLinkLooplab(t *testing.T) {
	shipped := map[string]bool{"cmd/kvready": true, "cabi": true, "readiness": true, "simulate": true}
	seen := 0
	for _, p := range goList(t) {
		from, _ := local(p.ImportPath)
		if !shipped[from] {
			continue
		}
		seen++
		for _, d := range p.Deps {
			assert(t, !strings.HasPrefix(d, "github.com/looplab/"), "%s links %s", from, d)
		}
	}
	require.Equal(t, len(shipped), seen, "every shipped package was listed")
}

// TestEmbeddersImportTheEngineOnly: package readiness is the one an
// embedder imports, and it names every state, outcome and kind an embedder
// reads. The table (package fsm) is imported only where the lifecycle is
// declared, run or drawn: by fsm's own packages, by readiness, and by the
// command that draws it (cmd/kvready's diagram) — never by the C library,
// simulate, conformance or metrics to name a state — and no runnable example
// of the engine imports it.
func TestEmbeddersImportTheEngineOnly(t *testing.T) {
	const table = module + "/fsm"
	drawsOrRuns := map[string]bool{"fsm/declaration": true, "fsm/diagram": true, "readiness": true, "cmd/kvready": true}
	for _, p := range goList(t) {
		from, _ := local(p.ImportPath)
		if drawsOrRuns[from] {
			continue
		}
		assert(t, !slices.Contains(p.Imports, table), "%s imports fsm; name states through readiness.State", from)
	}
	examples := 0
	for _, dir := range []string{"readiness", "metrics"} {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*_test.go"))
		require.NoError(t, err)
		for _, name := range files {
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			require.NoError(t, err)
			isExample := false
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
					isExample = true
				}
			}
			if !isExample {
				continue
			}
			examples++
			for _, imp := range f.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				assert(t, path != table, "the example %s imports %s; an example embeds package readiness alone", name, path)
			}
		}
	}
	require.GreaterOrEqual(t, examples, 3, "example files found")
}

// The rule is the premise: if the table itself is wrong the test must be
// able to say so, so check the checker on an import that goes up.
func TestTheRuleRefusesAnUpwardImport(t *testing.T) {
	up := func(from, to string) bool { return !allowed(from, to) }
	require.True(t, up("fsm", "readiness"))
	require.True(t, up("contract", "staging"))
	require.True(t, up("metrics", "backend/mem"))
	require.True(t, up("backend/redis", "simulate"))
	require.False(t, up("backend/mem", "backend/pools"))
	require.False(t, up("readiness", "fsm"))
}

func assert(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
	return ok
}
