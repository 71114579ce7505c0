// Command mutants is `make mutants`: it breaks each safety guard of the
// readiness engine, one at a time, runs the property suite against the broken
// engine — the runner users embed and the core stepped synchronously — and
// the engine's deterministic regression tests, and prints which caught it. A
// mutant the property suite does not kill is a promise it does not check.
//
// It must be built with the kvready_mutants tag, the only build in which the
// engine's guards can be switched off:
//
//	go run -tags kvready_mutants ./proptest/mutants
//
// Each mutant runs the test binaries, built once, with KVREADY_MUTANT naming
// the guard to break, RAPID_NOFAILFILE set (a mutant's failure is expected and
// must not be kept as a regression input) and RAPID_CHECKS from the
// environment (default 100), with shrinking bounded to 2s.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	os.Exit(run())
}

// suiteOf is one test binary: the package it tests and the tests it runs.
type suiteOf struct {
	pkg, dir, run string
	bin           string
}

func run() int {
	names := mutantNames()
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, "mutants: no mutants listed; build with -tags kvready_mutants (go run -tags kvready_mutants ./proptest/mutants)")
		return 2
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	dir, err := os.MkdirTemp("", "kvready-mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	property := &suiteOf{pkg: "./proptest", dir: "proptest", run: "^TestModel|^TestBugZoo"}
	regression := &suiteOf{pkg: "./readiness", dir: "readiness", run: "^TestRule|^TestRegression|^TestMiss|^TestPublish"}
	for _, s := range []*suiteOf{property, regression} {
		s.bin = filepath.Join(dir, filepath.Base(s.dir)+".test")
		build := exec.Command(goCmd, "test", "-c", "-tags", "kvready_mutants", "-o", s.bin, s.pkg)
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "mutants: building %s with -tags kvready_mutants: %v\n", s.pkg, err)
			return 2
		}
	}
	checks := os.Getenv("RAPID_CHECKS")
	if checks == "" {
		checks = "100"
	}
	// The unbroken engine must pass first: a suite that fails anyway kills
	// every mutant and proves nothing.
	for _, s := range []*suiteOf{property, regression} {
		if out, err := s.exec("", checks); err != nil {
			fmt.Fprintf(os.Stderr, "mutants: %s fails on the unbroken engine: %v\n%s", s.pkg, err, out)
			return 2
		}
	}
	failRe := regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	ruleRe := regexp.MustCompile(`(rule \d+, [^:]+|allocator invariant|conformance: [a-z -]+)`)
	killed := 0
	fmt.Printf("%-26s %-9s %-44s %s\n", "mutant", "property", "how", "regression tests")
	for _, name := range names {
		out, err := property.exec(name, checks)
		verdict, how := "SURVIVED", "the property suite passed with this guard broken"
		if err != nil {
			killed++
			verdict = "killed"
			var tests []string
			for _, m := range failRe.FindAllStringSubmatch(string(out), -1) {
				if !strings.Contains(m[1], "/") && len(tests) < 2 {
					tests = append(tests, m[1])
				}
			}
			how = strings.Join(tests, ", ")
			if m := ruleRe.FindString(string(out)); m != "" {
				how += " (" + m + ")"
			}
		}
		rout, rerr := regression.exec(name, checks)
		reg := "passed (not caught)"
		if rerr != nil {
			var tests []string
			for _, m := range failRe.FindAllStringSubmatch(string(rout), -1) {
				if !strings.Contains(m[1], "/") {
					tests = append(tests, m[1])
				}
			}
			reg = fmt.Sprintf("%d failed: %s", len(tests), strings.Join(first(tests, 3), ", "))
		}
		fmt.Printf("%-26s %-9s %-44s %s\n", name, verdict, how, reg)
	}
	fmt.Printf("%d/%d mutants killed by the property suite\n", killed, len(names))
	if killed != len(names) {
		return 1
	}
	return 0
}

func first(xs []string, n int) []string {
	if len(xs) > n {
		return append(xs[:n:n], "…")
	}
	return xs
}

func (s *suiteOf) exec(mutant, checks string) ([]byte, error) {
	cmd := exec.Command(s.bin, "-test.count=1", "-test.run", s.run)
	cmd.Dir = s.dir
	// Shrinking a mutant's failure only makes the report prettier: keep it short.
	cmd.Env = append(os.Environ(), "KVREADY_MUTANT="+mutant, "RAPID_NOFAILFILE=1", "RAPID_CHECKS="+checks, "RAPID_SHRINKTIME=2s")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
