package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// goList runs `go list -deps` with the given tags on a package of this module.
func goList(t *testing.T, tags, pkg string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	args := []string{"list", "-deps"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := exec.CommandContext(ctx, goBin, append(args, pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s %s: %v\n%s", strings.Join(args, " "), pkg, err, out)
	}
	return strings.Fields(string(out))
}

// testCode is what a shipped binary must not link: Go's testing (which
// registers and parses flags in the host process), rapid, the conformance
// kits built on both (for backends and for transports) and what they share,
// and the broken backends.
var testCode = []string{
	"testing", "pgregory.net/rapid",
	"github.com/kvready/kvready/conformance",
	"github.com/kvready/kvready/transfer/transporttest",
	"github.com/kvready/kvready/internal/kittb",
	"github.com/kvready/kvready/backend/mem/memtest",
	"github.com/kvready/kvready/proptest",
}

// libkvready.so (this package built as make lib builds it: no tags) and the
// kvready command link no test code, and the library does not link flag at
// all: it never reads or registers the host process's flags. The test library
// (the kvready_testkit tag) does link the kit — which shows the listing sees
// what the tag adds.
func TestShippedBinariesLinkNoTestCode(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		{".", append([]string{"flag"}, testCode...)},
		{"../cmd/kvready", testCode},
	} {
		deps := goList(t, "", tc.pkg)
		if len(deps) < 20 {
			t.Fatalf("go list -deps %s listed %d packages; want the whole graph", tc.pkg, len(deps))
		}
		for _, p := range deps {
			if slices.Contains(tc.forbidden, p) || strings.HasPrefix(p, "testing/") {
				t.Errorf("%s links %s; a shipped binary must not (test code belongs in the test library, built with -tags kvready_testkit)", tc.pkg, p)
			}
		}
	}
	kit := goList(t, "kvready_testkit", ".")
	for _, p := range []string{"testing", "pgregory.net/rapid", "github.com/kvready/kvready/conformance", "github.com/kvready/kvready/backend/mem/memtest"} {
		if !slices.Contains(kit, p) {
			t.Errorf("the test library (-tags kvready_testkit) does not link %s; it carries the conformance kit and the fault backends", p)
		}
	}
}
