package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/words"
)

func init() {
	register(command{name: "profile", summary: "validate a runtime profile, or print the supported one", run: runProfile})
}

var profileCommands = []subcommand{
	{name: "validate", summary: "validate a profile JSON file (- reads standard input)", run: runProfileValidate},
	{name: "example", summary: "print the supported runtime profile", run: runProfileExample},
}

func runProfile(e *env, args []string) int { return dispatch(e, "profile", profileCommands, args) }

// exampleBackendRevision names the backend build in the printed example; a real
// assembly names its own.
const exampleBackendRevision = "backend-mem-0.1.0"

func runProfileExample(e *env, args []string) int {
	fs := newFlags(e, "profile example", "")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() > 0 {
		e.errorf("profile example takes no arguments, got %q", fs.Args())
		return exitUsage
	}
	out, err := json.MarshalIndent(contract.SupportedProfile(exampleBackendRevision), "", "  ")
	if err != nil {
		e.errorf("encoding the example profile: %v", err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "%s\n", out)
	return exitOK
}

func runProfileValidate(e *env, args []string) int {
	fs := newFlags(e, "profile validate", "FILE   (- reads standard input)")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() != 1 {
		e.errorf("profile validate takes exactly one FILE (or -), got %d arguments", fs.NArg())
		return exitUsage
	}
	data, err := readInput(e, fs.Arg(0))
	if err != nil {
		e.errorf("%v", err)
		return exitUsage
	}
	_, err = contract.LoadProfile(data)
	var pe *contract.ProfileError
	switch {
	case err == nil:
		fmt.Fprintln(e.stdout, "profile ok")
		return exitOK
	case errors.As(err, &pe) && oneJSONObject(data): // read, and refused
		for _, v := range pe.Violations {
			fmt.Fprintln(e.stdout, cutLong(v.Error()))
		}
		e.errorf("profile refused: %s", words.Count(len(pe.Violations), "violation"))
		return exitFail
	default:
		e.errorf("%s: %v", fs.Arg(0), err)
		return exitUsage
	}
}

// readInput reads the named file, or standard input for "-".
func readInput(e *env, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(e.stdin)
	}
	return os.ReadFile(name)
}
