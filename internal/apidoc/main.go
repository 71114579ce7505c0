// Command apidoc writes docs/api.md: the exported surface an embedder of
// kvready sees — package readiness, and the contract and staging packages
// whose names its API uses — on one page, from the packages' own doc
// comments. Run it from the module root:
//
//	go run ./internal/apidoc > docs/api.md
//
// Its test fails when docs/api.md is stale. Given package directories as
// arguments it renders those instead (to count another surface).
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// embedder lists the packages an embedder imports besides one backend and one
// device (README, "Embedding it"), in the order the page shows them.
var embedder = []string{"readiness", "contract", "staging"}

const module = "github.com/kvready/kvready"

func main() {
	pkgs := embedder
	if len(os.Args) > 1 {
		pkgs = os.Args[1:]
	}
	if err := write(os.Stdout, ".", pkgs); err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
}

// write renders the page for the packages under root (the module root).
func write(w io.Writer, root string, pkgs []string) error {
	var body bytes.Buffer
	total := 0
	for _, rel := range pkgs {
		p, err := load(filepath.Join(root, rel), module+"/"+rel)
		if err != nil {
			return err
		}
		total += render(&body, p)
	}
	fmt.Fprintf(w, "# The embedder's API\n\n")
	fmt.Fprintf(w, "What a program that embeds kvready names: package `readiness` (the engine), and the\n")
	fmt.Fprintf(w, "`contract` and `staging` packages its API uses — %d exported identifiers (constants,\n", total)
	fmt.Fprintf(w, "variables, functions, types, methods and fields). The rest of an embedding is one backend\n")
	fmt.Fprintf(w, "(`backend/mem`, `backend/redis` or your own) and one device (`gpu/sim`, `gpu/cuda`,\n")
	fmt.Fprintf(w, "`gpu/nvml`); the lifecycle table (`fsm`) stays behind the engine, which names its\n")
	fmt.Fprintf(w, "states, outcomes and kinds itself. Generated from the doc comments by `go run ./internal/apidoc > docs/api.md`; its\n")
	fmt.Fprintf(w, "test fails when this page is stale.\n")
	_, err := w.Write(body.Bytes())
	return err
}

type pkg struct {
	fset *token.FileSet
	d    *doc.Package
}

// load parses the package's non-test files.
func load(dir, path string) (*pkg, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		if e.Type()&fs.ModeType != 0 || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	d, err := doc.NewFromFiles(fset, files, path)
	if err != nil {
		return nil, err
	}
	return &pkg{fset: fset, d: d}, nil
}

// render writes one package's section and returns how many exported
// identifiers it lists.
func render(w io.Writer, p *pkg) int {
	n := 0
	fmt.Fprintf(w, "\n## %s\n\n`import \"%s\"`: %s\n", p.d.Name, p.d.ImportPath, p.d.Synopsis(p.d.Doc))
	if len(p.d.Consts)+len(p.d.Vars)+len(p.d.Funcs) > 0 {
		fmt.Fprintf(w, "\n")
		n += values(w, p, p.d.Consts, "")
		n += values(w, p, p.d.Vars, "")
		n += funcs(w, p, p.d.Funcs, "")
	}
	for _, t := range p.d.Types {
		fmt.Fprintf(w, "\n- `%s`: %s\n", typeHead(p, t), p.d.Synopsis(t.Doc))
		n++
		n += fields(w, p, t)
		n += values(w, p, t.Consts, "  ")
		n += values(w, p, t.Vars, "  ")
		n += funcs(w, p, t.Funcs, "  ")
		n += funcs(w, p, t.Methods, "  ")
	}
	return n
}

// values lists a group of constants or variables on one line per group.
func values(w io.Writer, p *pkg, vs []*doc.Value, indent string) int {
	n := 0
	for _, v := range vs {
		var names []string
		for _, name := range v.Names {
			if token.IsExported(name) {
				names = append(names, "`"+name+"`")
			}
		}
		if len(names) == 0 {
			continue
		}
		n += len(names)
		kind := "const"
		if v.Decl.Tok == token.VAR {
			kind = "var"
		}
		what := p.d.Synopsis(v.Doc)
		if what == "" {
			what = specDoc(p, v.Decl)
		}
		fmt.Fprintf(w, "%s- %s %s: %s\n", indent, kind, strings.Join(names, ", "), what)
	}
	return n
}

// specDoc is the first exported spec's own doc, for a group with none.
func specDoc(p *pkg, d *ast.GenDecl) string {
	for _, s := range d.Specs {
		if vs, ok := s.(*ast.ValueSpec); ok {
			for _, c := range []*ast.CommentGroup{vs.Doc, vs.Comment} {
				if c != nil {
					return p.d.Synopsis(c.Text())
				}
			}
		}
	}
	return ""
}

func funcs(w io.Writer, p *pkg, fs []*doc.Func, indent string) int {
	for _, f := range fs {
		fmt.Fprintf(w, "%s- `%s`: %s\n", indent, signature(p, f.Decl), p.d.Synopsis(f.Doc))
	}
	return len(fs)
}

// signature prints a function's declaration without its body or doc.
func signature(p *pkg, d *ast.FuncDecl) string {
	c := *d
	c.Body, c.Doc = nil, nil
	return node(p, &c)
}

// typeHead prints "type T struct", "type T interface" or the definition of
// any other type.
func typeHead(p *pkg, t *doc.Type) string {
	for _, s := range t.Decl.Specs {
		ts, ok := s.(*ast.TypeSpec)
		if !ok || ts.Name.Name != t.Name {
			continue
		}
		eq := " "
		if ts.Assign.IsValid() {
			eq = " = "
		}
		switch ts.Type.(type) {
		case *ast.StructType:
			return "type " + t.Name + eq + "struct"
		case *ast.InterfaceType:
			return "type " + t.Name + eq + "interface"
		}
		return "type " + t.Name + eq + node(p, ts.Type)
	}
	return "type " + t.Name
}

// fields lists a struct's exported fields, or an interface's methods, one
// line each with the first sentence of their doc.
func fields(w io.Writer, p *pkg, t *doc.Type) int {
	n := 0
	for _, s := range t.Decl.Specs {
		ts, ok := s.(*ast.TypeSpec)
		if !ok || ts.Name.Name != t.Name {
			continue
		}
		var list *ast.FieldList
		switch x := ts.Type.(type) {
		case *ast.StructType:
			list = x.Fields
		case *ast.InterfaceType:
			list = x.Methods
		default:
			return 0
		}
		for _, f := range list.List {
			var names []string
			for _, name := range f.Names {
				if token.IsExported(name.Name) {
					names = append(names, name.Name)
				}
			}
			if len(f.Names) == 0 { // embedded
				if name := embeddedName(f.Type); token.IsExported(name) {
					names = append(names, name)
				}
			}
			if len(names) == 0 {
				continue
			}
			n += len(names)
			typ := node(p, f.Type)
			if _, isFunc := f.Type.(*ast.FuncType); isFunc && len(f.Names) > 0 {
				typ = strings.TrimPrefix(typ, "func")
			} else {
				typ = " " + typ
			}
			if len(f.Names) == 0 {
				typ = ""
			}
			decl := "`" + strings.Join(names, ", ") + typ + "`"
			what := ""
			if f.Doc != nil {
				what = p.d.Synopsis(f.Doc.Text())
			} else if f.Comment != nil {
				what = p.d.Synopsis(f.Comment.Text())
			}
			if what == "" {
				fmt.Fprintf(w, "  - %s\n", decl)
				continue
			}
			fmt.Fprintf(w, "  - %s: %s\n", decl, what)
		}
	}
	return n
}

func embeddedName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return embeddedName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(x.X)
	}
	return ""
}

// node prints a syntax node on one line.
func node(p *pkg, n any) string {
	var b bytes.Buffer
	if err := (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, p.fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
