// Command kvready validates runtime profiles, derives and explains KV names and
// layout ids, draws the slot lifecycle, and runs the simulated KV cache manager.
//
// Exit status, one meaning per code in every command (exitStatuses, printed
// by kvready -h):
//
//	0    done
//	1    refused: the input was read and breaks a rule (a profile with
//	     violations, an invalid layout, layers, shards, groups or arrived rows
//	     the layout or identity does not allow), or the run failed, was unsafe
//	     or did not finish
//	2    usage: the command line is wrong (an unknown command or flag, a value
//	     that does not parse, is out of range at either end — a size that
//	     overflows a byte count included — missing or empty, flags that do not
//	     go together, the wrong arguments), or an input cannot be used at all
//	     (a missing or unreadable file, bytes that are not one JSON object —
//	     JSON null included — an output file or report directory it cannot
//	     write, an address it cannot listen on)
//	3    capacity lost (simulate): the run was safe and every request ended,
//	     but leases were contained (their slots quarantined, or recovered
//	     later) or refused for lack of slots, and nothing in the run asked for
//	     it; or the engine halted under --containment fatal
//	130  interrupted (Ctrl-C, SIGTERM): simulate prints the summary so far and
//	     writes its report first
//
// -h prints the usage once, to stdout, and exits 0.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/kvready/kvready/simulate"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
	// exitCapacity: simulate lost staging capacity it was not asked to lose,
	// or its engine halted under the fatal containment policy.
	exitCapacity = 3
	// exitInterrupted: Ctrl-C or SIGTERM stopped a run (128 + SIGINT).
	exitInterrupted = 130
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
	prefillProcess()
	os.Exit(run(&env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

// prefillProcess makes this process the prefill process of a disaggregated
// run over UCX when one started it (kvready simulate --disagg --transport
// ucx re-executes itself with simulate.DisaggPrefillEnv set): internal, not
// a command. It never returns then.
func prefillProcess() {
	if spec, ok := os.LookupEnv(simulate.DisaggPrefillEnv); ok {
		os.Exit(simulate.RunDisaggPrefill(spec, os.Stdin, os.Stdout))
	}
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
	case "-version", "--version":
		return runVersion(e, args[1:])
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
	fmt.Fprintln(w, "Run 'kvready <command> -h' for a command's usage; 'kvready --version' is 'kvready version'.")
	fmt.Fprintln(w)
	fmt.Fprint(w, exitStatuses)
}

// exitStatuses is what every command's exit status means; kvready -h prints
// it and README.md repeats it.
const exitStatuses = `exit status, the same in every command:
  0    done
  1    refused: the input was read and breaks a rule (a profile with violations,
       an invalid layout, layers, shards, groups or arrived rows the layout or
       identity does not allow), or the run failed, was unsafe or did not
       finish
  2    usage: the command line is wrong (an unknown command or flag, a value
       that does not parse, is out of range at either end — a size that
       overflows a byte count included — missing or empty, flags that do not
       go together, the wrong arguments), or an input cannot be used at all (a
       missing or unreadable file, bytes that are not one JSON object — JSON
       null included — an output file or report directory it cannot write, an
       address it cannot listen on)
  3    capacity lost (simulate): the run was safe and every request ended,
       but leases were contained (their slots quarantined, or recovered later)
       or refused for lack of slots, and nothing in the run asked for it
       (--never-proves-rate, --device-loss-at, --naive); or the engine halted
       under --containment fatal
  130  interrupted (Ctrl-C, SIGTERM): simulate prints the summary so far and
       writes its report first
`
