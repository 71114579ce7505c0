package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
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
// line that names the command. Every command builds its flags here and parses
// them with parseFlags: -h, bad flags and their exit statuses then behave the
// same in every command, including ones added later.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kvready "+strings.TrimSpace(name+" "+synopsis))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args. It returns done=true with the exit status when the
// command should stop: 0 after -h (usage once, on stdout), 2 after a bad flag
// (one line on stderr naming it, long values cut).
func parseFlags(e *env, fs *flag.FlagSet, args []string) (done bool, status int) {
	out := fs.Output()
	fs.SetOutput(io.Discard) // the flag package prints usage on every error: hold it back
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(e.stdout)
		fs.Usage()
		fs.SetOutput(out)
		return true, exitOK
	}
	if err != nil {
		// The flag package's message names the bad flag; its usage dump is
		// left to -h.
		e.errorf("%v; run 'kvready %s -h' for the usage", err, fs.Name())
		return true, exitUsage
	}
	return false, exitOK
}

// Values echoed in messages are cut to this many bytes.
const (
	longWord = 96
	keepWord = 40
)

// cutLong returns s with every run of non-space bytes longer than longWord
// cut to its first keepWord bytes and a note of its length: a message names
// a huge value, it never echoes it whole.
func cutLong(s string) string {
	if len(s) <= longWord {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && !isSpace(s[j]) {
			j++
		}
		if j-i > longWord {
			keep := i + keepWord
			for keep > i && !utf8.RuneStart(s[keep]) {
				keep--
			}
			fmt.Fprintf(&b, "%s…(cut: %d bytes in all)", s[i:keep], j-i)
		} else {
			b.WriteString(s[i:j])
		}
		for j < len(s) && isSpace(s[j]) {
			b.WriteByte(s[j])
			j++
		}
		i = j
	}
	return b.String()
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }
