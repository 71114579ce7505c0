package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// Every exported function is declared in kvready.h, and every function
// kvready.h declares is exported: the compiler checks the prototypes that
// exist against the exports (a mismatch is a build error); this checks that
// none is missing on either side.
func TestHeaderDeclaresEveryExport(t *testing.T) {
	header, err := os.ReadFile("kvready.h")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, m := range regexp.MustCompile(`(?m)^(?:int|uint32_t) (kvready_\w+)\(`).FindAllSubmatch(header, -1) {
		declared = append(declared, string(m[1]))
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^//export (kvready_\w+)$`).FindAllSubmatch(src, -1) {
			exported = append(exported, string(m[1]))
		}
	}
	slices.Sort(declared)
	slices.Sort(exported)
	if len(exported) < 40 {
		t.Fatalf("found only %d exports; the pattern no longer matches the sources", len(exported))
	}
	for _, name := range exported {
		if _, ok := slices.BinarySearch(declared, name); !ok {
			t.Errorf("%s is exported but kvready.h does not declare it", name)
		}
	}
	for _, name := range declared {
		if _, ok := slices.BinarySearch(exported, name); !ok {
			t.Errorf("kvready.h declares %s, but nothing exports it", name)
		}
	}
}

// brokenRule names the rule of rapid's verdict, which comes before the
// trials' own output, and nothing when no rule is named.
func TestBrokenRuleFindsTheVerdict(t *testing.T) {
	report := "[rapid] failed: conformance: " + rules[3].text + ": x\n...\nconformance: " + rules[5].text + ": y"
	if got := brokenRule(report); got != rules[3].id {
		t.Errorf("brokenRule = %q, want %q (the verdict comes first)", got, rules[3].id)
	}
	if got := brokenRule("panic: boom"); got != "" {
		t.Errorf("brokenRule of a report naming no rule = %q, want empty", got)
	}
}
