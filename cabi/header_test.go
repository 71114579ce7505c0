package main

import (
	"go/build/constraint"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every exported function is declared in kvready.h, and every function
// kvready.h declares is exported: the compiler checks the prototypes that
// exist against the exports (a mismatch is a build error); this checks that
// none is missing on either side. The test library's own exports (files built
// only with the kvready_testkit tag) are declared inside kvready.h's
// #ifdef KVREADY_TESTKIT blocks, and nothing else is: a C program built
// against libkvready.so cannot call what only libkvready_testkit.so has.
func TestHeaderDeclaresEveryExport(t *testing.T) {
	header, err := os.ReadFile("kvready.h")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[bool][]string{} // by testkit-only
	testkit := false
	for line := range strings.SplitSeq(string(header), "\n") {
		switch {
		case strings.HasPrefix(line, "#ifdef KVREADY_TESTKIT"):
			testkit = true
		case testkit && strings.HasPrefix(line, "#endif"):
			testkit = false
		}
		if m := regexp.MustCompile(`^(?:int|uint32_t) (kvready_\w+)\(`).FindStringSubmatch(line); m != nil {
			declared[testkit] = append(declared[testkit], m[1])
		}
	}
	if testkit {
		t.Fatal("kvready.h: an #ifdef KVREADY_TESTKIT block is never closed")
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	exported := map[bool][]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		only, err := testkitOnly(src)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, m := range regexp.MustCompile(`(?m)^//export (kvready_\w+)$`).FindAllSubmatch(src, -1) {
			exported[only] = append(exported[only], string(m[1]))
		}
	}
	if n := len(exported[false]); n < 40 {
		t.Fatalf("found only %d exports; the pattern no longer matches the sources", n)
	}
	if n := len(exported[true]); n < 2 {
		t.Fatalf("found %d exports in kvready_testkit files, want the conformance kit's and the benchmark's", n)
	}
	for _, only := range []bool{false, true} {
		where := map[bool]string{false: "outside", true: "inside"}[only]
		slices.Sort(declared[only])
		slices.Sort(exported[only])
		for _, name := range exported[only] {
			if _, ok := slices.BinarySearch(declared[only], name); !ok {
				t.Errorf("%s is exported (testkit only: %v) but kvready.h does not declare it %s #ifdef KVREADY_TESTKIT", name, only, where)
			}
		}
		for _, name := range declared[only] {
			if _, ok := slices.BinarySearch(exported[only], name); !ok {
				t.Errorf("kvready.h declares %s %s #ifdef KVREADY_TESTKIT, but no file built %s exports it", name, where,
					map[bool]string{false: "into libkvready.so", true: "only with the kvready_testkit tag"}[only])
			}
		}
	}
}

// testkitOnly reports whether a Go file is built only into the test library:
// its build constraint holds with the kvready_testkit tag and fails without.
func testkitOnly(src []byte) (bool, error) {
	for line := range strings.SplitSeq(string(src), "\n") {
		if strings.HasPrefix(line, "package ") {
			break
		}
		if !constraint.IsGoBuild(line) {
			continue
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			return false, err
		}
		with := expr.Eval(func(tag string) bool { return tag == "kvready_testkit" || tag == "linux" || tag == "cgo" })
		without := expr.Eval(func(tag string) bool { return tag == "linux" || tag == "cgo" })
		return with && !without, nil
	}
	return false, nil
}
