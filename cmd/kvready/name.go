package main

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kvready/kvready/staging"
)

func init() {
	register(command{name: "name", summary: "derive, or explain, KV row and staging part names", run: runName})
}

var nameCommands = []subcommand{
	{name: "derive", summary: "print the 108-hex-digit name of one row", run: runNameDerive},
	{name: "part", summary: "print the name of the staging part serving some layer groups", run: runNamePart},
	{name: "explain", summary: "split a name into namespace, block key, group and shard", run: runNameExplain},
}

func runName(e *env, args []string) int { return dispatch(e, "name", nameCommands, args) }

// argError is a malformed or refused argument, already naming its flag.
type argError struct {
	flag   string
	msg    string
	status int
}

func (a *argError) Error() string { return a.flag + ": " + a.msg }

func malformed(flag, format string, args ...any) *argError {
	return &argError{flag: flag, msg: fmt.Sprintf(format, args...), status: exitUsage}
}

func refused(flag string, err error) *argError {
	return &argError{flag: flag, msg: err.Error(), status: exitFail}
}

func refusedf(flag, format string, args ...any) *argError {
	return &argError{flag: flag, msg: fmt.Sprintf(format, args...), status: exitFail}
}

func (e *env) argFail(a *argError) int {
	e.errorf("%s", a.Error())
	return a.status
}

// parseHex reads a hex flag; want is the byte length it must have, or -1 for any.
func parseHex(flag, s string, want int) ([]byte, *argError) {
	if len(s)%2 != 0 {
		return nil, malformed(flag, "odd number of hex digits (%d)", len(s))
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, malformed(flag, "not hexadecimal: %v", err)
	}
	if want >= 0 && len(b) != want {
		return nil, malformed(flag, "%d bytes (%d hex digits); want %d bytes (%d hex digits)", len(b), len(s), want, 2*want)
	}
	return b, nil
}

// parseInts reads a comma-separated list of non-negative integers.
func parseInts(flag, s string) ([]int, *argError) {
	if s == "" {
		return []int{}, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return nil, malformed(flag, "%q is not a non-negative integer", p)
		}
		out[i] = v
	}
	return out, nil
}

// missingLayers is the refusal of a name command given no --layers.
var missingLayers = malformed("--layers", "missing; want local groups separated by / and global layer ids by , (e.g. 4,5/0,1,2,3)")

// parseLayers reads local layer groups separated by "/", global ids by ",".
// Every entry is a group, an empty one included: "4,5//0" is three groups, the
// middle one empty, and "" is one empty group. As in the reference lender,
// nothing else is checked: a layer may be in two groups, or twice in one; the
// canonical order only reads each group's smallest id, and an empty group
// sorts last.
func parseLayers(s string) ([][]int, *argError) {
	parts := strings.Split(s, "/")
	layers := make([][]int, 0, len(parts))
	for _, g := range parts {
		ids, err := parseInts("--layers", g)
		if err != nil {
			return nil, err
		}
		layers = append(layers, ids)
	}
	return layers, nil
}

// splitGroups splits a per-group flag value on "/". An empty entry — a
// leading, trailing or doubled "/" — is refused: a shard is never empty.
func splitGroups(flag, s string) ([]string, *argError) {
	parts := strings.Split(s, "/")
	for i, p := range parts {
		if p == "" {
			return nil, malformed(flag, "entry %d of %q is empty (a leading, trailing or doubled /); want one count:index per layer group", i, s)
		}
	}
	return parts, nil
}

// parseShards reads count:index per local group; empty means every group whole.
func parseShards(s string, groups int) ([]staging.Shard, *argError) {
	shards := make([]staging.Shard, groups)
	if s == "" {
		for i := range shards {
			shards[i] = staging.Whole
		}
		return shards, nil
	}
	parts, aerr := splitGroups("--shards", s)
	if aerr != nil {
		return nil, aerr
	}
	if len(parts) != groups {
		return nil, malformed("--shards", "%d shards for %d layer groups; want one count:index per group", len(parts), groups)
	}
	for i, p := range parts {
		c, x, ok := strings.Cut(p, ":")
		count, err1 := strconv.Atoi(c)
		index, err2 := strconv.Atoi(x)
		if !ok || err1 != nil || err2 != nil {
			return nil, malformed("--shards", "%q is not count:index", p)
		}
		shards[i] = staging.Shard{Count: count, Index: index}
		if err := shards[i].Validate(); err != nil {
			return nil, refused("--shards", err)
		}
	}
	return shards, nil
}

func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func runNameDerive(e *env, args []string) int {
	fs := newFlags(e, "name derive", "--layout-hex HEX (--scope-hex HEX | --scope-file PATH) --layers 4,5/0,1,2,3 [--shards 4:3/1:0] --group N --key-hex HEX")
	layoutHex := fs.String("layout-hex", "", "the layout id, in hex")
	scopeHex := fs.String("scope-hex", "", "the scope, in hex")
	scopeFile := fs.String("scope-file", "", "a file holding the scope bytes")
	layersArg := fs.String("layers", "", "global layer ids per local group: groups by /, ids by , (an empty entry is an empty group)")
	shardsArg := fs.String("shards", "", "count:index per local group, by /; omitted: every group whole")
	groupArg := fs.String("group", "", "the row's local layer group")
	keyHex := fs.String("key-hex", "", "the row's 32-byte block key, in hex")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() > 0 {
		e.errorf("name derive takes only flags, got %q", fs.Args())
		return exitUsage
	}
	var scope []byte
	var aerr *argError
	switch {
	case given(fs, "scope-hex") && given(fs, "scope-file"):
		aerr = malformed("--scope-hex", "give either --scope-hex or --scope-file, not both")
	case given(fs, "scope-hex"):
		scope, aerr = parseHex("--scope-hex", *scopeHex, -1)
	case given(fs, "scope-file"):
		b, err := os.ReadFile(*scopeFile)
		if err != nil {
			aerr = malformed("--scope-file", "%v", err)
		}
		scope = b
	default:
		aerr = malformed("--scope-hex", "missing; give --scope-hex or --scope-file")
	}
	if aerr == nil && len(scope) > staging.MaxScope {
		flagName := "--scope-hex"
		if given(fs, "scope-file") {
			flagName = "--scope-file"
		}
		aerr = refused(flagName, fmt.Errorf("scope is %d bytes; at most %d fit its length prefix", len(scope), staging.MaxScope))
	}
	if aerr != nil {
		return e.argFail(aerr)
	}
	id, aerr := identityFlags(*layoutHex, scope, *layersArg, given(fs, "layers"), *shardsArg)
	if aerr != nil {
		return e.argFail(aerr)
	}
	if !given(fs, "group") {
		return e.argFail(malformed("--group", "missing; want the row's local layer group"))
	}
	g, err := strconv.Atoi(*groupArg)
	if err != nil {
		return e.argFail(malformed("--group", "%q is not an integer", *groupArg))
	}
	keyBytes, aerr := parseHex("--key-hex", *keyHex, staging.KeySize)
	if aerr != nil {
		return e.argFail(aerr)
	}
	name, err := id.Name(g, staging.Key(keyBytes))
	if err != nil {
		return e.argFail(refused("--group", err))
	}
	fmt.Fprintln(e.stdout, name.String())
	return exitOK
}

// identityFlags builds the identity the name flags describe; layersGiven says
// whether --layers was given at all ("" given is one empty group).
func identityFlags(layoutHex string, scope []byte, layersArg string, layersGiven bool, shardsArg string) (*staging.Identity, *argError) {
	layoutID, aerr := parseHex("--layout-hex", layoutHex, -1)
	if aerr != nil {
		return nil, aerr
	}
	if len(layoutID) == 0 {
		return nil, malformed("--layout-hex", "missing or empty: %v", staging.ErrEmptyLayoutID) // an empty value is a missing one: exit 2
	}
	if !layersGiven {
		return nil, missingLayers
	}
	layers, aerr := parseLayers(layersArg)
	if aerr != nil {
		return nil, aerr
	}
	shards, aerr := parseShards(shardsArg, len(layers))
	if aerr != nil {
		return nil, aerr
	}
	id, err := staging.NewIdentity(scope, layoutID, layers, shards)
	if err != nil {
		return nil, refused("--layout-hex", err)
	}
	return id, nil
}

func runNamePart(e *env, args []string) int {
	fs := newFlags(e, "name part", "--layout-hex HEX --layers 4,5/0,1,2,3 --groups 0,1")
	layoutHex := fs.String("layout-hex", "", "the layout id, in hex")
	layersArg := fs.String("layers", "", "global layer ids per local group: groups by /, ids by , (an empty entry is an empty group)")
	groupsArg := fs.String("groups", "", "the local layer groups the part serves, by ,")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() > 0 {
		e.errorf("name part takes only flags, got %q", fs.Args())
		return exitUsage
	}
	id, aerr := identityFlags(*layoutHex, nil, *layersArg, given(fs, "layers"), "")
	if aerr != nil {
		return e.argFail(aerr)
	}
	if *groupsArg == "" {
		return e.argFail(malformed("--groups", "missing; want the local layer groups the part serves, e.g. 0,1"))
	}
	groups, aerr := parseInts("--groups", *groupsArg)
	if aerr != nil {
		return e.argFail(aerr)
	}
	part, err := id.PartName(groups)
	if err != nil {
		return e.argFail(refused("--groups", err))
	}
	fmt.Fprintln(e.stdout, part)
	return exitOK
}

func runNameExplain(e *env, args []string) int {
	fs := newFlags(e, "name explain", "HEX   (a 108-hex-digit name)")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if fs.NArg() != 1 {
		e.errorf("name explain takes exactly one name, got %d arguments", fs.NArg())
		return exitUsage
	}
	n, err := staging.ParseName(fs.Arg(0))
	if err != nil {
		e.errorf("name: %v", err)
		return exitUsage
	}
	f, err := staging.Explain(n)
	if err != nil {
		e.errorf("name: %v", err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "namespace: %x\nblock key: %x\ncanonical group: %d\nshard count: %d\nshard index: %d\n",
		f.Namespace[:], f.Key[:], f.Group, f.Shard.Count, f.Shard.Index)
	return exitOK
}
