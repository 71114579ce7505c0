package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/fsm/diagram"
)

func init() {
	register(command{name: "diagram", summary: "draw the lease lifecycle (mermaid, dot, svg) or write docs/states.md (markdown)", run: runDiagram})
}

// diagramFormats are the renderings `kvready diagram --format` accepts, in the
// order its usage lists them.
var diagramFormats = []string{"mermaid", "dot", "svg", "markdown"}

// renderDiagram renders the declared lifecycle in format.
func renderDiagram(ctx context.Context, format string) ([]byte, error) {
	t := fsm.Lifecycle()
	switch format {
	case "mermaid":
		return []byte(diagram.Mermaid(t)), nil
	case "dot":
		return []byte(diagram.DOT(t)), nil
	case "svg":
		return diagram.SVG(ctx, t)
	case "markdown":
		return []byte(diagram.Markdown(t)), nil
	}
	return nil, fmt.Errorf("unknown format %q: want one of %s", format, strings.Join(diagramFormats, ", "))
}

func runDiagram(e *env, args []string) int {
	fs := newFlags(e, "diagram", "--format "+strings.Join(diagramFormats, "|")+" [--out FILE]")
	format := fs.String("format", "mermaid", "rendering: "+strings.Join(diagramFormats, ", "))
	out := fs.String("out", "", "write to FILE instead of standard output")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() > 0 {
		e.errorf("diagram takes no arguments, got %q", fs.Args())
		return exitUsage
	}
	data, err := renderDiagram(context.Background(), *format)
	if err != nil {
		e.errorf("diagram: %v", err)
		return exitUsage
	}
	if *out == "" {
		if _, err := e.stdout.Write(data); err != nil {
			e.errorf("diagram: writing standard output: %v", err)
			return exitFail
		}
		return exitOK
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		// An output that cannot be written is an input that cannot be used
		// (exit 2), as simulate's --report directory is.
		e.errorf("--out: %v; want a file this process can write", err)
		return exitUsage
	}
	return exitOK
}
