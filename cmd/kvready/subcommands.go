package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// subcommand is one verb under a command ("profile validate").
type subcommand struct {
	name    string
	summary string
	run     func(e *env, args []string) int
}

// dispatch runs the verb named by args[0] among subs.
func dispatch(e *env, parent string, subs []subcommand, args []string) int {
	if len(args) == 0 {
		subUsage(e.stderr, parent, subs)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		subUsage(e.stdout, parent, subs)
		return exitOK
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(e, args[1:])
		}
	}
	e.errorf("unknown %s command %q; run 'kvready %s -h' for the list", parent, args[0], parent)
	return exitUsage
}

func subUsage(w io.Writer, parent string, subs []subcommand) {
	fmt.Fprintf(w, "usage: kvready %s <command> [arguments]\n\ncommands:\n", parent)
	for _, s := range subs {
		fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
	}
}

// newFlags returns a flag set that reports errors instead of exiting, with a usage
// line that names the command.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kvready %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args. It returns done=true with the exit status when the
// command should stop: 0 after -h (usage on stdout), 2 after a bad flag.
func parseFlags(e *env, fs *flag.FlagSet, args []string) (done bool, status int) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(e.stdout)
		fs.Usage()
		return true, exitOK
	}
	if err != nil {
		return true, exitUsage // the flag package has already named the bad flag
	}
	return false, exitOK
}
