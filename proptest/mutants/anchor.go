package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// An edit is anchored to a declaration and a pattern, never to a file and
// its exact text: a refactor that moves a function to another file of its
// package, re-indents it or realigns it leaves the mutant applying, and one
// that changes what the guard says leaves it stale — loudly.
type edit struct {
	// pkg is the package's directory, relative to the module root.
	pkg string
	// decl names the top-level declaration the pattern lies in: a function
	// ("findHopeless"), a method ("Core.due", pointer receiver or not) or a
	// var, const or type ("declaration").
	decl string
	// old is Go source text, matched with any amount of white space
	// between its words (gofmt's alignment and indentation are not part of
	// the guard). It must match exactly once inside decl.
	old string
	// new replaces the match.
	new string
}

// errStale says a mutant no longer applies to the code it breaks.
var errStale = errors.New("stale mutant: update it with the code it breaks")

// apply returns the package's files with e made: patched holds the sources
// already patched by earlier edits of the same mutant (file path → source),
// and is updated.
func (e edit) apply(root string, patched map[string]string) error {
	files, err := sources(filepath.Join(root, e.pkg), patched)
	if err != nil {
		return err
	}
	var (
		hits       []string
		file       string
		start, end int
	)
	for _, f := range files {
		fset := token.NewFileSet()
		parsed, err := parser.ParseFile(fset, f.path, f.src, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", f.path, err)
		}
		for _, d := range parsed.Decls {
			if !declares(d, e.decl) {
				continue
			}
			hits = append(hits, fmt.Sprintf("%s:%d", filepath.Base(f.path), fset.Position(d.Pos()).Line))
			file, start, end = f.path, fset.Position(d.Pos()).Offset, fset.Position(d.End()).Offset
		}
	}
	switch len(hits) {
	case 0:
		return fmt.Errorf("%w: %s declares no %s", errStale, e.pkg, e.decl)
	case 1:
	default:
		return fmt.Errorf("%w: %s declares %s %d times (%s); want one", errStale, e.pkg, e.decl, len(hits), strings.Join(hits, ", "))
	}
	var src string
	for _, f := range files {
		if f.path == file {
			src = f.src
		}
	}
	re, err := pattern(e.old)
	if err != nil {
		return err
	}
	found := re.FindAllStringIndex(src[start:end], -1)
	if len(found) != 1 {
		return fmt.Errorf("%w: the pattern occurs %d times in %s (%s), want exactly once:\n%s", errStale, len(found), e.decl, hits[0], e.old)
	}
	patched[file] = src[:start+found[0][0]] + e.new + src[start+found[0][1]:]
	return nil
}

type source struct{ path, src string }

// sources reads the package's non-test Go files that the default build
// context compiles (a file for another platform could declare the same name),
// taking a file's patched text where an earlier edit made one.
func sources(dir string, patched map[string]string) ([]source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errStale, err)
	}
	var out []source
	for _, ent := range entries {
		name := ent.Name()
		if ent.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		path := filepath.Join(dir, name)
		src, ok := patched[path]
		if !ok {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			src = string(b)
		}
		out = append(out, source{path, src})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

// declares reports whether d declares name: "f", "T.m" for a method of T or
// *T, or a var, const or type.
func declares(d ast.Decl, name string) bool {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil || len(d.Recv.List) == 0 {
			return d.Name.Name == name
		}
		recv, method, ok := strings.Cut(name, ".")
		return ok && method == d.Name.Name && receiver(d.Recv.List[0].Type) == recv
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.Name == name {
						return true
					}
				}
			case *ast.TypeSpec:
				if s.Name.Name == name {
					return true
				}
			}
		}
	}
	return false
}

// receiver names a method's receiver type, without pointer or type
// parameters.
func receiver(x ast.Expr) string {
	for {
		switch t := x.(type) {
		case *ast.StarExpr:
			x = t.X
		case *ast.IndexExpr:
			x = t.X
		case *ast.IndexListExpr:
			x = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// pattern compiles Go source text into a regular expression that matches it
// with any white space between its words: white space stays required between
// two word characters (`return x`), and may be absent elsewhere.
func pattern(text string) (*regexp.Regexp, error) {
	words := strings.Fields(text)
	if len(words) == 0 {
		return nil, fmt.Errorf("%w: an empty pattern matches everywhere", errStale)
	}
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			if wordChar(words[i-1][len(words[i-1])-1]) && wordChar(w[0]) {
				b.WriteString(`\s+`)
			} else {
				b.WriteString(`\s*`)
			}
		}
		b.WriteString(regexp.QuoteMeta(w))
	}
	return regexp.Compile(b.String())
}

func wordChar(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
