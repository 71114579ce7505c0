// Command mutants is `make mutants`: it breaks each safety guard of the
// readiness engine, one at a time, runs the property suite against the broken
// engine, and prints how many broken engines the suite caught. A mutant that
// survives is a promise the suite does not check.
//
// It must be built with the kvready_mutants tag, the only build in which the
// engine's guards can be switched off:
//
//	go run -tags kvready_mutants ./proptest/mutants
//
// Each mutant runs one test binary, built once, with KVREADY_MUTANT naming the
// guard to break, RAPID_NOFAILFILE set (a mutant's failure is expected and
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
	bin := filepath.Join(dir, "proptest.test")
	build := exec.Command(goCmd, "test", "-c", "-tags", "kvready_mutants", "-o", bin, "./proptest")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "mutants: building the suite with -tags kvready_mutants:", err)
		return 2
	}
	checks := os.Getenv("RAPID_CHECKS")
	if checks == "" {
		checks = "100"
	}
	// The unbroken engine must pass first: a suite that fails anyway kills
	// every mutant and proves nothing.
	if out, err := suite(bin, "", checks); err != nil {
		fmt.Fprintf(os.Stderr, "mutants: the suite fails on the unbroken engine: %v\n%s", err, out)
		return 2
	}
	failRe := regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	ruleRe := regexp.MustCompile(`(rule \d, [a-z ]+|allocator invariant|conformance: [a-z -]+)`)
	killed := 0
	for _, name := range names {
		out, err := suite(bin, name, checks)
		if err == nil {
			fmt.Printf("SURVIVED %-22s the suite passed with this guard broken: a missing property\n", name)
			continue
		}
		killed++
		var tests []string
		for _, m := range failRe.FindAllStringSubmatch(string(out), -1) {
			if !strings.Contains(m[1], "/") || len(tests) < 3 {
				tests = append(tests, m[1])
			}
		}
		rule := ""
		if m := ruleRe.FindString(string(out)); m != "" {
			rule = " (" + m + ")"
		}
		fmt.Printf("killed   %-22s by %s%s\n", name, strings.Join(tests, ", "), rule)
	}
	fmt.Printf("%d/%d mutants killed\n", killed, len(names))
	if killed != len(names) {
		return 1
	}
	return 0
}

func suite(bin, mutant, checks string) ([]byte, error) {
	cmd := exec.Command(bin, "-test.count=1")
	cmd.Dir = "proptest"
	// Shrinking a mutant's failure only makes the report prettier: keep it short.
	cmd.Env = append(os.Environ(), "KVREADY_MUTANT="+mutant, "RAPID_NOFAILFILE=1", "RAPID_CHECKS="+checks, "RAPID_SHRINKTIME=2s")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
