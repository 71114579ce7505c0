package readme

import (
	"context"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fenced returns the body of the first fenced block of the given language
// after the heading, and what follows it.
func fenced(t *testing.T, text, after, lang string) (body, rest string) {
	t.Helper()
	i := strings.Index(text, after)
	require.GreaterOrEqual(t, i, 0, "README.md has no %q", after)
	open := "```" + lang + "\n"
	j := strings.Index(text[i:], open)
	require.GreaterOrEqual(t, j, 0, "no ```%s block after %q", lang, after)
	start := i + j + len(open)
	k := strings.Index(text[start:], "\n```\n")
	require.GreaterOrEqual(t, k, 0, "the ```%s block after %q is not closed", lang, after)
	return text[start : start+k+1], text[start+k:]
}

// goTool finds the go command, or fails saying how to get it.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	// Not on PATH: the Go this project's machines carry, or $GOROOT's.
	for _, root := range []string{os.Getenv("GOROOT"), "/usr/local/go"} {
		if root == "" {
			continue
		}
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	t.Fatal("the go command is not on PATH, in $GOROOT/bin or in /usr/local/go/bin: install Go 1.26 (https://go.dev/dl) and put it on PATH")
	return ""
}

// readmeProgram returns the README's embedding block and the output the
// README says it prints.
func readmeProgram(t *testing.T) (root, prog, want string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	prog, rest := fenced(t, string(readme), "## Embedding it", "go")
	want, _ = fenced(t, rest, "It prints:", "text")
	return root, prog, want
}

// buildProgram builds files as a fresh module that requires this one
// (replaced by the working tree; the repository's go.sum holds every hash, so
// no network is needed when the module cache has the dependencies), vets it,
// and returns the binary.
func buildProgram(ctx context.Context, t *testing.T, root string, files map[string]string) string {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod)
	require.NotNil(t, goLine, "go.mod has no go line")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)

	dir := t.TempDir()
	files["go.mod"] = "module example.com/embed\n\n" + string(goLine) + "\n\nrequire github.com/kvready/kvready v0.0.0\n\n" +
		"replace github.com/kvready/kvready => " + root + "\n"
	files["go.sum"] = string(sum)
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	bin := filepath.Join(dir, "embed")
	for _, args := range [][]string{{"vet", "."}, {"build", "-o", bin, "."}} {
		cmd := exec.CommandContext(ctx, goTool(t), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in a fresh module:\n%s", strings.Join(args, " "), out)
	}
	return bin
}

// The README's embedding block is a complete program: it is gofmt-clean,
// builds in a fresh module that requires this one, runs, and prints what the
// README says it prints.
func TestReadmeProgramBuildsAndRuns(t *testing.T) {
	root, prog, want := readmeProgram(t)
	require.True(t, strings.HasPrefix(prog, "// Command ") || strings.Contains(prog, "\npackage main\n"), "the block is a package main program")
	formatted, err := format.Source([]byte(prog))
	require.NoError(t, err, "the README program does not parse")
	assert.Equal(t, string(formatted), prog, "the README program is not gofmt-clean")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildProgram(ctx, t, root, map[string]string{"main.go": prog})
	cmd := exec.CommandContext(ctx, bin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "running the README program: %s", stderr.String())
	assert.Equal(t, want, string(out), "the README shows what the program prints")
	assert.Empty(t, stderr.String())
}

// The README program is what an embedder writes: at most 100 lines, naming
// the engine's package, the contract and staging, one backend and one device
// — never the lifecycle table (fsm) behind the
// engine.
func TestReadmeProgramIsSmall(t *testing.T) {
	_, prog, _ := readmeProgram(t)
	assert.LessOrEqual(t, strings.Count(prog, "\n"), 100, "lines in the README program")
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", prog, parser.ImportsOnly)
	require.NoError(t, err)
	const module = "github.com/kvready/kvready/"
	var backends, devices []string
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		require.NoError(t, err)
		pkg, ours := strings.CutPrefix(path, module)
		switch {
		case !ours:
			assert.NotContains(t, path, ".", "the README program imports %s; want the standard library and kvready only", path)
		case pkg == "readiness" || pkg == "contract" || pkg == "staging":
		case strings.HasPrefix(pkg, "backend/"):
			backends = append(backends, pkg)
		case strings.HasPrefix(pkg, "gpu/"):
			devices = append(devices, pkg)
		default:
			t.Errorf("the README program imports %s; want readiness, contract, staging, one backend and one device", path)
		}
	}
	assert.Len(t, backends, 1, "backends the README program imports")
	assert.Len(t, devices, 1, "devices the README program imports")
}

// neverProven is a file added to the README program: its backend is the
// README's, except that Quiesce never proves access over, so every lease is
// contained and quarantined.
const neverProven = `package main

import (
	"context"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

type neverProven struct{ *mem.Backend }

func (neverProven) Quiesce(context.Context, []contract.Attempt) (bool, error) { return false, nil }

func (neverProven) TryQuiesce([]contract.Attempt) (contract.Access, error) {
	return contract.AccessUnproven, nil
}

func unproven(b *mem.Backend, err error) (neverProven, error) { return neverProven{b}, err }
`

// The README program and its serve helper survive a backend
// that quarantines every lease: releasing a quarantined lease gives up the
// claim and waiting for it returns, so the program never exits on a
// quarantine (with short deadlines, so that containment comes quickly).
func TestReadmeProgramSurvivesQuarantine(t *testing.T) {
	root, prog, _ := readmeProgram(t)
	for _, r := range []struct{ old, new string }{
		{"mem.New(staged)", "unproven(mem.New(staged))"},
		{"Memory: staged, TokensPerBlock: layout.TokensPerBlock,",
			"Memory: staged, TokensPerBlock: layout.TokensPerBlock, RequestTimeout: 50 * time.Millisecond, DrainGrace: 50 * time.Millisecond, QuiesceTimeout: 20 * time.Millisecond,"},
	} {
		require.Equal(t, 1, strings.Count(prog, r.old), "the README program no longer has %q once", r.old)
		prog = strings.Replace(prog, r.old, r.new, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildProgram(ctx, t, root, map[string]string{"main.go": prog, "unproven.go": neverProven})
	cmd := exec.CommandContext(ctx, bin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the README program exited on a quarantine: %s", stderr.String())
	assert.Contains(t, string(out), "publish: quarantined")
	assert.Contains(t, string(out), "fetch: quarantined")
	assert.Contains(t, string(out), "slots free: 8 of 16", "the quarantined slots stay out")
	assert.Contains(t, string(out), "drained; slots quarantined: 8")
	assert.Contains(t, stderr.String(), "contained:", "OnContainment said so")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
