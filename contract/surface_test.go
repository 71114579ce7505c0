package contract_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// backendSurface is the contract's 13-symbol backend surface. Adding, removing or
// renaming one is a contract change and needs a new Revision.
var backendSurface = []string{
	"Unit", "CacheExtent", "Delivered", "Failed", "Cancelled", "Outcome", "Attempt",
	"ErrSubmissionRejected", "Route", "Registration", "Fetcher", "Publisher", "PoolRegistrar",
}

// support lists the package's other exported names: the pinned revision, name
// values, and the runtime profile. None of them is part of what a backend
// implements.
var support = []string{
	"Revision", "RevisionCancelRequest", "CancelDisposition", "CancelUnsupported", "CancelRequested",
	"Cancellable", "RequestCancel", "Notifier", "QuiesceProber", "Access", "AccessUnknown", "AccessEnded", "AccessUnproven", "NameSize", "Name", "NameFromBytes", "NameSet", "NewNameSet",
	"NewCacheExtent", "ErrDuplicateUnit", "ErrInvalidHint",
	"Profile", "Parallelism", "SupportedProfile",
	"SupportedBackendKind", "SupportedManagerKind", "SupportedCacheDType", "SupportedAttentionBackend",
	"SupportedAttentionKind", "SupportedLayout", "SupportedStaging",
	"Problem", "Unsupported", "Missing", "UnknownKey", "WrongType", "DuplicateKey",
	"FieldError", "ProfileError", "SyntaxError", "IsProfileError", "DecodeProfile", "LoadProfile",
}

// TestSurfaceIsPinned parses the package and checks that its exported
// package-level names are exactly the backend surface plus the declared support.
func TestSurfaceIsPinned(t *testing.T) {
	require.Len(t, backendSurface, 13)
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var got []string
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), ".go") || strings.HasSuffix(entry.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, entry.Name(), nil, 0)
		require.NoError(t, err)
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					got = append(got, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							got = append(got, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								got = append(got, n.Name)
							}
						}
					}
				}
			}
		}
	}
	want := append(slices.Clone(backendSurface), support...)
	assert.ElementsMatch(t, want, got)
}
