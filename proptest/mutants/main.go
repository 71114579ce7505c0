// Command mutants is `make mutants`: it breaks each safety guard of the engine,
// one at a time, and runs the property suites against the broken engine — the
// runner users embed and the core stepped synchronously — and the engine's
// deterministic tests, and prints which caught it. A mutant the property
// suites do not kill is a promise they do not check.
//
// A mutant is a source patch (mutants.go): a pattern replaced inside one
// declaration of a production package (anchor.go), so that it survives the
// declaration moving between files or being reformatted. Nothing in the tree
// changes and no production file carries a test hook: each mutant's patched
// files are written to a scratch directory and the test binaries are compiled
// from an overlay of them (go test -overlay). An edit whose declaration is
// gone, or whose pattern no longer occurs exactly once inside it, stops the
// run before anything is tested: the mutant must be updated with the code it
// breaks.
//
//	go run ./proptest/mutants [-run REGEXP]
//
// The test binaries run with RAPID_NOFAILFILE set (a mutant's failure is
// expected and must not be kept as a regression input), RAPID_CHECKS from the
// environment (default 100) and shrinking bounded to 2s.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

func main() { os.Exit(run()) }

// suite is one test binary: the package it tests and the tests it runs.
type suite struct {
	pkg, dir, run string
}

var (
	// The property suites: a mutant they do not kill fails the run.
	property = []suite{
		{pkg: "./proptest", dir: "proptest", run: "^TestModel|^TestBugZoo"},
		{pkg: "./readiness", dir: "readiness", run: "^TestRefused|^TestLayerNeverReady|^TestLayerwisePublishNever|^TestBackendFaults|^TestHandoffs|^TestLayerwisePublishWaits"},
		{pkg: "./backend/peer", dir: "backend/peer", run: "^TestEngineOverAdversarialPeers$|^TestSender"},
		{pkg: "./backend/mem", dir: "backend/mem", run: "^TestEvictedRowIsNotRecycledWhileRead$|^TestRecycledRowsUnderConcurrentFetches$|^TestAdoptStoresTheBytesItIsHanded$"},
		{pkg: "./backend/tiers", dir: "backend/tiers", run: "^TestTee|^TestReused"},
		{pkg: "./backend/redis", dir: "backend/redis", run: "^TestGatherConn|^TestPublishOverOpen"},
	}
	// The deterministic tests: reported beside, for information.
	regression = []suite{
		{pkg: "./readiness", dir: "readiness", run: "^TestTranscripts|^Example|^TestRule|^TestRegression|^TestMiss|^TestPublish|^TestRefused"},
	}
)

func run() int {
	only := flag.String("run", "", "run only the mutants whose name matches this regular expression")
	check := flag.Bool("check", false, "only check that every mutant still applies to the code it breaks, and compiles")
	flag.Parse()
	filter, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants: -run:", err)
		return 2
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	checks := os.Getenv("RAPID_CHECKS")
	if checks == "" {
		checks = "100"
	}
	root, err := moduleRoot(goCmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	scratch, err := os.MkdirTemp("", "kvready-mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	defer os.RemoveAll(scratch)
	// Every mutant must apply before anything runs: a stale one stops the
	// run at once, never after the others were tested.
	stale := 0
	for _, m := range mutants {
		overlay, err := m.overlay(root, scratch)
		if err == nil && *check {
			err = m.compiles(goCmd, root, overlay)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutants: %s: %v\n", m.name, err)
			stale++
		}
	}
	if stale > 0 {
		fmt.Fprintf(os.Stderr, "mutants: %d of %d mutants no longer apply\n", stale, len(mutants))
		return 1
	}
	if *check {
		fmt.Printf("%d mutants apply\n", len(mutants))
		return 0
	}

	// The unbroken engine must pass first: a suite that fails anyway kills
	// every mutant and proves nothing.
	for _, s := range append(append([]suite(nil), property...), regression...) {
		if out, err := s.exec(goCmd, root, scratch, nil, checks); err != nil {
			fmt.Fprintf(os.Stderr, "mutants: %s fails on the unbroken engine: %v\n%s", s.pkg, err, out)
			return 2
		}
	}
	failRe := regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	ruleRe := regexp.MustCompile(`(rule \d+, [^:]+|allocator invariant|invariant broken \([^)]*\): [^;]+)`)
	killed, total := 0, 0
	fmt.Printf("%-26s %-9s %-52s %s\n", "mutant", "property", "how", "deterministic tests")
	for _, m := range mutants {
		if !filter.MatchString(m.name) {
			continue
		}
		total++
		overlay, err := m.overlay(root, scratch)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutants: %s: %v\n", m.name, err)
			return 2
		}
		verdict, how := "SURVIVED", "the property suites passed with this guard broken"
		for _, s := range property {
			out, err := s.exec(goCmd, root, scratch, overlay, checks)
			if errors.Is(err, errBuild) {
				fmt.Fprintf(os.Stderr, "mutants: %s: the mutant is stale, not killed: %v\n%s", m.name, err, out)
				return 2
			}
			if err == nil {
				continue
			}
			verdict = "killed"
			var tests []string
			for _, f := range failRe.FindAllStringSubmatch(string(out), -1) {
				if !strings.Contains(f[1], "/") && len(tests) < 2 {
					tests = append(tests, f[1])
				}
			}
			how = strings.Join(tests, ", ")
			if r := ruleRe.FindString(string(out)); r != "" {
				how += " (" + r + ")"
			}
			if len(tests) == 0 {
				how = firstLine(out)
			}
			break
		}
		if verdict == "killed" {
			killed++
		}
		var failed []string
		for _, s := range regression {
			out, err := s.exec(goCmd, root, scratch, overlay, checks)
			if err != nil {
				for _, f := range failRe.FindAllStringSubmatch(string(out), -1) {
					if !strings.Contains(f[1], "/") {
						failed = append(failed, f[1])
					}
				}
				if len(failed) == 0 {
					failed = append(failed, s.pkg+": "+firstLine(out))
				}
			}
		}
		reg := "passed (not caught)"
		if len(failed) > 0 {
			reg = fmt.Sprintf("%d failed: %s", len(failed), strings.Join(first(failed, 3), ", "))
		}
		fmt.Printf("%-26s %-9s %-52s %s\n", m.name, verdict, how, reg)
	}
	fmt.Printf("%d/%d mutants killed by the property suites\n", killed, total)
	if killed != total {
		return 1
	}
	return 0
}

// overlay writes the mutant's patched files to the scratch directory and
// returns the overlay file go build reads.
func (m mutant) overlay(root, scratch string) (string, error) {
	dir := filepath.Join(scratch, m.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	patched := map[string]string{}
	for _, e := range m.edits {
		if err := e.apply(root, patched); err != nil {
			return "", err
		}
	}
	replace := map[string]string{}
	for file, src := range patched {
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return "", err
		}
		out := filepath.Join(dir, strings.ReplaceAll(rel, string(filepath.Separator), "_"))
		if err := os.WriteFile(out, []byte(src), 0o644); err != nil {
			return "", err
		}
		replace[file] = out
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "overlay.json")
	return path, os.WriteFile(path, b, 0o644)
}

// exec compiles s's test binary (from the overlay, if any) and runs it.
func (s suite) exec(goCmd, root, scratch string, overlay any, checks string) ([]byte, error) {
	bin := filepath.Join(scratch, strings.ReplaceAll(s.dir, "/", "_")+".test")
	args := []string{"test", "-c", "-o", bin}
	if path, ok := overlay.(string); ok && path != "" {
		args = append(args, "-overlay", path)
	}
	build := exec.Command(goCmd, append(args, s.pkg)...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return out, fmt.Errorf("%w: building %s: %w", errBuild, s.pkg, err)
	}
	cmd := exec.Command(bin, "-test.count=1", "-test.run", s.run)
	cmd.Dir = filepath.Join(root, s.dir)
	// Shrinking a mutant's failure only makes the report prettier: keep it short.
	cmd.Env = append(os.Environ(), "RAPID_NOFAILFILE=1", "RAPID_CHECKS="+checks, "RAPID_SHRINKTIME=2s")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// errBuild says a test binary did not compile: with a mutant's overlay, the
// mutant is broken (its replacement no longer fits the code), never killed.
var errBuild = errors.New("does not compile")

// compiles builds the packages a mutant edits, from its overlay.
func (m mutant) compiles(goCmd, root, overlay string) error {
	var pkgs []string
	for _, e := range m.edits {
		if p := "./" + e.pkg; !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	build := exec.Command(goCmd, append([]string{"build", "-overlay", overlay}, pkgs...)...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %v\n%s", errBuild, err, out)
	}
	return nil
}

func moduleRoot(goCmd string) (string, error) {
	out, err := exec.Command(goCmd, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run it inside the kvready module")
	}
	return filepath.Dir(mod), nil
}

func firstLine(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if len(line) > 80 {
		line = line[:80] + "…"
	}
	return line
}

func first(xs []string, n int) []string {
	if len(xs) > n {
		return append(xs[:n:n], "…")
	}
	return xs
}
