// Command kvready validates runtime profiles, derives and explains KV names and
// layout ids, draws the slot lifecycle, and runs the simulated KV cache manager.
//
// Exit status, the same for every command: 0 done; 1 the input was read and is
// invalid (an unsupported profile, an invalid layout), or the run was unsafe;
// 2 a usage error, or input that cannot be read at all (a missing file, text
// that is not JSON). -h prints the usage once, to stdout, and exits 0.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// env is what a command may touch, so that tests can run commands in process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// errorf writes one error line to stderr, long values cut (cutLong).
func (e *env) errorf(format string, args ...any) {
	fmt.Fprint(e.stderr, cutLong(fmt.Sprintf("kvready: "+format, args...))+"\n")
}

// command is one top-level sub-command. Each registers itself from its own file,
// so that adding a command touches no shared list.
type command struct {
	name    string
	summary string
	run     func(e *env, args []string) int
}

var commands []command

func register(c command) { commands = append(commands, c) }

func main() {
	os.Exit(run(&env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

func run(e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(e.stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(e, args[1:])
		}
	}
	e.errorf("unknown command %q; run 'kvready -h' for the list", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kvready <command> [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	sorted := slices.Clone(commands)
	slices.SortFunc(sorted, func(a, b command) int { return strings.Compare(a.name, b.name) })
	for _, c := range sorted {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'kvready <command> -h' for a command's usage.")
}
