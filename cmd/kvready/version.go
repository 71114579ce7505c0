package main

import (
	"fmt"

	"github.com/kvready/kvready/contract"
)

// version is the kvready release; builds may set it with
// -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func init() {
	register(command{name: "version", summary: "print the kvready version and the pinned contract revision", run: runVersion})
}

func runVersion(e *env, args []string) int {
	fs := newFlags(e, "version", "   (prints the kvready version and the pinned contract revision; kvready --version does the same)")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() > 0 {
		e.errorf("version takes no arguments, got %q", fs.Args())
		return exitUsage
	}
	fmt.Fprintf(e.stdout, "kvready %s\ncontract revision %s\n", version, contract.Revision)
	return exitOK
}
