//go:build kvready_testkit

package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

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
