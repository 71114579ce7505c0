package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// Every rule the conformance kit declares (a Rule… constant of package
// conformance) has an identifier, and kvready.h lists exactly the identifiers,
// in order: a rule added to the kit cannot reach a C or Python caller as "".
func TestEveryKitRuleHasAnIdentifier(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../conformance/kit.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	ast.Inspect(f, func(n ast.Node) bool {
		v, ok := n.(*ast.ValueSpec)
		if !ok || len(v.Names) != 1 || !strings.HasPrefix(v.Names[0].Name, "Rule") || len(v.Values) != 1 {
			return true
		}
		if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			text, _ := strconv.Unquote(lit.Value)
			declared = append(declared, text)
		}
		return true
	})
	if len(declared) < 20 {
		t.Fatalf("found only %d rules in conformance/kit.go; the pattern no longer matches the sources", len(declared))
	}
	var texts, ids []string
	for _, r := range rules {
		texts, ids = append(texts, r.text), append(ids, r.id)
	}
	if !slices.Equal(texts, declared) {
		t.Errorf("rules in cabi/conformance.go name\n  %q\nthe kit declares\n  %q", texts, declared)
	}
	header, err := os.ReadFile("kvready.h")
	if err != nil {
		t.Fatal(err)
	}
	h := string(header)
	i := strings.Index(h, "The identifiers:")
	j := strings.Index(h, "(rule is empty")
	if i < 0 || j < i {
		t.Fatal("kvready.h no longer lists the rules' identifiers after \"The identifiers:\"")
	}
	listed := strings.Fields(strings.ReplaceAll(h[i+len("The identifiers:"):j], "*", " "))
	if !slices.Equal(listed, ids) {
		t.Errorf("kvready.h lists\n  %q\nthe identifiers are\n  %q", listed, ids)
	}
}
