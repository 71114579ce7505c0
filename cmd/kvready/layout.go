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
	warnOverlaps(e, fs.Arg(0), l)
	fmt.Fprintln(e.stdout, hex.EncodeToString(id[:]))
	return exitOK
}

// maxOverlapWarnings bounds the warning lines one layout prints.
const maxOverlapWarnings = 8

// warnOverlaps prints, on stderr, a warning for buffers whose bytes overlap in
// one slot. They are hashed, never refused: the reference hashes such layouts
// (its layer_membership test has two layers' buffers at one offset), and
// kvready must give them the same id; but two buffers sharing bytes usually
// mean a mistaken description, so a person should hear of it.
func warnOverlaps(e *env, file string, l staging.Layout) {
	overlaps := l.Overlaps()
	for i, o := range overlaps {
		if i == maxOverlapWarnings {
			e.errorf("warning: %s: %d more overlapping buffers not listed", file, len(overlaps)-i)
			break
		}
		e.errorf("warning: %s: %s; hashed as the reference hashes it", file, o.Describe(l))
	}
}
