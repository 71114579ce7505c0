package readiness_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/kvready/kvready/readiness"
)

// Config's doc comments state defaults ("(default 30s)") for the reader of
// godoc; withDefaults sets them. Every default a field's comment states is
// the one readiness.Defaults() holds, and every non-zero default is stated:
// the comments are no second declaration that can drift.
func TestConfigDocsStateTheDefaults(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var fields *ast.FieldList
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Config" {
			fields = ts.Type.(*ast.StructType).Fields
		}
		return fields == nil
	})
	if fields == nil {
		t.Fatal("config.go declares no Config")
	}
	d := reflect.ValueOf(readiness.Defaults())
	stated := regexp.MustCompile(`default\s+(\d+(?:ns|µs|ms|s|m|h)?)\b`)
	checked := 0
	for _, fl := range fields.List {
		var want []string // the non-zero integer defaults of the field's names
		for _, n := range fl.Names {
			switch v := d.FieldByName(n.Name); {
			case v.Type() == reflect.TypeFor[time.Duration]() && v.Int() != 0:
				want = append(want, time.Duration(v.Int()).String())
			case v.CanInt() && v.Int() != 0:
				want = append(want, fmt.Sprint(v.Int()))
			}
		}
		var said []string
		for _, m := range stated.FindAllStringSubmatch(fl.Doc.Text(), -1) {
			said = append(said, m[1])
		}
		for _, s := range said {
			if !slices.Contains(want, s) {
				t.Errorf("Config.%s's comment says default %s; readiness.Defaults() holds %v", fl.Names[0].Name, s, want)
			}
		}
		for _, w := range want {
			checked++
			if !slices.Contains(said, w) {
				t.Errorf("Config.%s defaults to %s, which its comment does not state (\"default %s\")", fl.Names[0].Name, w, w)
			}
		}
	}
	if checked < 8 {
		t.Errorf("checked %d defaults; the test no longer finds them", checked)
	}
}
