package main

import (
	"encoding/hex"
	"fmt"

	"github.com/kvready/kvready/staging"
)

func init() {
	register(command{name: "layout", summary: "compute the layout id of a layout description", run: runLayout})
}

var layoutCommands = []subcommand{
	{name: "id", summary: "print the 64-hex-digit layout id of a layout JSON file (- reads standard input)", run: runLayoutID},
}

func runLayout(e *env, args []string) int { return dispatch(e, "layout", layoutCommands, args) }

func runLayoutID(e *env, args []string) int {
	fs := newFlags(e, "layout id", "FILE   (- reads standard input)")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() != 1 {
		e.errorf("layout id takes exactly one FILE (or -), got %d arguments", fs.NArg())
		return exitUsage
	}
	data, err := readInput(e, fs.Arg(0))
	if err != nil {
		e.errorf("%v", err)
		return exitUsage
	}
	l, err := staging.ParseLayout(data)
	if err != nil {
		return e.layoutRefused(fs.Arg(0), data, err)
	}
	id, err := l.ID()
	if err != nil {
		e.errorf("%s: invalid layout: %v", fs.Arg(0), err)
		return exitFail
	}
	fmt.Fprintln(e.stdout, hex.EncodeToString(id[:]))
	return exitOK
}
