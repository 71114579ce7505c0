package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/kvready/kvready/staging"
)

func init() {
	register(command{name: "staging", summary: "size the staging memory a layout needs", run: runStaging})
}

var stagingCommands = []subcommand{
	{name: "size", summary: "print the staging slots and bytes per pool group for fetches of N tokens", run: runStagingSize},
}

func runStaging(e *env, args []string) int { return dispatch(e, "staging", stagingCommands, args) }

const stagingSizeSynopsis = `--layout FILE --fetch-tokens N (--max-fetches M | --max-bytes B) [--json]

Rows per device pool group that any whole-block range of at most N tokens can
need (ceil(N/T) per layer group; a window group at most its sink blocks plus
ceil(window/T)), and the slots to allocate: M fetches, or B bytes split by each
pool group's share of one fetch, rounded down to whole slots (with both, the
smaller). A row of a pool group is one slot of each of its pools. Refused (exit
1) when B is below one fetch (the message says how many bytes one fetch needs)
or the layout has nothing to stage; exit 2 when N or M is so large that the
bytes overflow a 64-bit count, as for any value out of range. A suggestion
above 2147483647 slots in a pool group, the most the engine lends, is printed
as computed with a note saying so.
`

func runStagingSize(e *env, args []string) int {
	fs := newFlags(e, "staging size", stagingSizeSynopsis)
	layoutPath := fs.String("layout", "", "the layout JSON `FILE` (- reads standard input)")
	var o staging.SizingOptions
	fs.IntVar(&o.FetchTokens, "fetch-tokens", 0, "the longest fetch, in tokens")
	fs.IntVar(&o.MaxFetches, "max-fetches", 0, "fetches the slots hold at once")
	fs.IntVar(&o.MaxBytes, "max-bytes", 0, "cap on the staging bytes (never below one fetch)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	if a := stagingSizeUsage(fs, o); a != nil {
		return e.argFail(a)
	}
	l, status, ok := loadLayout(e, *layoutPath)
	if !ok {
		return status
	}
	s, err := l.SlotCounts(o)
	if errors.Is(err, staging.ErrSizeOverflow) {
		// A size past a byte count is a value out of range, as -1 is.
		flag := "--max-fetches"
		if _, one := l.SlotCounts(staging.SizingOptions{FetchTokens: o.FetchTokens, MaxFetches: 1}); errors.Is(one, staging.ErrSizeOverflow) {
			flag = "--fetch-tokens"
		}
		e.errorf("%s: %v; want a value whose staging bytes fit a 64-bit count", flag, err)
		return exitUsage
	}
	if err != nil {
		e.errorf("%s: %v", *layoutPath, err)
		return exitFail
	}
	if *asJSON {
		return printJSON(e, sizingJSON(o, s))
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "pool group\trows per fetch\tpage bytes\tslots\tbytes\t")
	total := 0
	for _, g := range s.Groups {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t\n", g.PoolGroup, g.FetchRows, g.PageBytes, g.Slots, g.Bytes())
		total += g.Bytes()
	}
	_ = w.Flush()
	fmt.Fprintf(e.stdout, "one fetch of %d tokens: %d bytes; staging: %d bytes\n", o.FetchTokens, s.OneFetch, total)
	for _, g := range s.Groups {
		if g.Slots > staging.MaxSlots {
			fmt.Fprintln(e.stdout, overEngineLimit(g))
		}
	}
	return exitOK
}

// overEngineLimit says that a suggestion (the reference's arithmetic, kept)
// is more slots than the engine and the C ABI lend from one pool group.
func overEngineLimit(g staging.GroupSizing) string {
	return fmt.Sprintf("note: pool group %d: %d slots is more than the engine can lend (at most %d slots per pool group); allocate at most %d",
		g.PoolGroup, g.Slots, staging.MaxSlots, staging.MaxSlots)
}

// stagingSizeUsage refuses flags that cannot make a sizing request.
func stagingSizeUsage(fs *flag.FlagSet, o staging.SizingOptions) *argError {
	switch {
	case fs.NArg() > 0:
		return malformed("staging size", "takes no arguments, got %q", fs.Args())
	case !given(fs, "layout"):
		return malformed("--layout", "missing; want the layout JSON file")
	case o.FetchTokens < 1:
		return malformed("--fetch-tokens", "%d; want at least 1 token (missing?)", o.FetchTokens)
	case !given(fs, "max-fetches") && !given(fs, "max-bytes"):
		return malformed("--max-fetches", "neither --max-fetches nor --max-bytes is given; want at least one")
	case given(fs, "max-fetches") && o.MaxFetches < 1:
		return malformed("--max-fetches", "%d; want at least 1", o.MaxFetches)
	case given(fs, "max-bytes") && o.MaxBytes < 1:
		return malformed("--max-bytes", "%d; want at least 1", o.MaxBytes)
	}
	return nil
}

type poolGroupSizeJSON struct {
	PoolGroup int `json:"pool_group"`
	FetchRows int `json:"fetch_rows"`
	PageBytes int `json:"page_bytes"`
	Slots     int `json:"slots"`
	Bytes     int `json:"bytes"`
	// OverEngineLimit: Slots is more than the engine lends from one pool
	// group (staging.MaxSlots); Note says so in words.
	OverEngineLimit bool   `json:"over_engine_limit,omitempty"`
	Note            string `json:"note,omitempty"`
}

type stagingSizeJSON struct {
	FetchTokens   int                 `json:"fetch_tokens"`
	OneFetchBytes int                 `json:"one_fetch_bytes"`
	TotalBytes    int                 `json:"total_bytes"`
	PoolGroups    []poolGroupSizeJSON `json:"pool_groups"`
}

func sizingJSON(o staging.SizingOptions, s staging.Sizing) stagingSizeJSON {
	out := stagingSizeJSON{FetchTokens: o.FetchTokens, OneFetchBytes: s.OneFetch, PoolGroups: []poolGroupSizeJSON{}}
	for _, g := range s.Groups {
		pg := poolGroupSizeJSON{PoolGroup: g.PoolGroup, FetchRows: g.FetchRows, PageBytes: g.PageBytes, Slots: g.Slots, Bytes: g.Bytes()}
		if g.Slots > staging.MaxSlots {
			pg.OverEngineLimit, pg.Note = true, overEngineLimit(g)
		}
		out.PoolGroups = append(out.PoolGroups, pg)
		out.TotalBytes += g.Bytes()
	}
	return out
}

func printJSON(e *env, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		e.errorf("%v", err)
		return exitFail
	}
	fmt.Fprintln(e.stdout, string(b))
	return exitOK
}

// loadLayout reads and parses the layout at path: exit 2 when it cannot be
// read or is not one JSON object, 1 when it is one and is not a valid layout.
func loadLayout(e *env, path string) (staging.Layout, int, bool) {
	data, err := readInput(e, path)
	if err != nil {
		e.errorf("--layout: %v", err)
		return staging.Layout{}, exitUsage, false
	}
	l, err := staging.ParseLayout(data)
	if err != nil {
		return staging.Layout{}, e.layoutRefused(path, data, err), false
	}
	return l, exitOK, true
}
