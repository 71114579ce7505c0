package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvready/kvready/staging"
)

func init() {
	register(command{name: "readiness", summary: "answer where a request may resume, for a layout and a set of arrived rows", run: runReadiness})
}

// maxCLIBlock bounds the block ordinals the readiness command takes, so that a
// typo cannot ask for gigabytes of arrival masks.
const maxCLIBlock = 1 << 20

const readinessSynopsis = `--layout FILE --arrived ROWS [--known K] [--end E] [--json]

Prints the interval [restart_floor, usable_until] of token positions where a
request may resume once ROWS have arrived (and their local copies landed), with
each layer group's window and sinks from the layout, and the blocks each group
reads at usable_until.

ROWS lists the arrived block ordinals of every layer group of the layout, in
layout order: groups separated by /, ordinals by commas, A-B an inclusive
range, an empty group as nothing. For a layout of two groups:
    --arrived 0-9/0,8-9     group 0 has blocks 0..9; group 1 blocks 0, 8 and 9
    --arrived 0-3/          group 1 has nothing
    --arrived ""            for a layout of one group: nothing arrived
K is the first block not already known (default 0): blocks below it count as
present. E is one past the last block the fetch staged (default: one past the
last arrived block); rows of a window group before its window need not be
staged or arrived. Ordinals are at most 1048576.
`

func runReadiness(e *env, args []string) int {
	fs := newFlags(e, "readiness", readinessSynopsis)
	layoutPath := fs.String("layout", "", "the layout JSON `FILE` (- reads standard input)")
	arrivedArg := fs.String("arrived", "", "arrived block ordinals per layer group (see above)")
	known := fs.Int("known", 0, "the first block not already known")
	endArg := fs.Int("end", -1, "one past the last staged block; -1: one past the last arrived block")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if done, status := parseFlags(e, fs, args); done {
		return status
	}
	switch {
	case fs.NArg() > 0:
		return e.argFail(malformed("readiness", "takes no arguments, got %q", fs.Args()))
	case !given(fs, "layout"):
		return e.argFail(malformed("--layout", "missing; want the layout JSON file"))
	case !given(fs, "arrived"):
		// An empty value is given: it lists one layer group with nothing
		// arrived, as the synopsis says (the reference computes that case).
		return e.argFail(malformed("--arrived", "missing; want the arrived block ordinals per layer group, e.g. 0-9/0,8-9 (0-3/ when the second group has none, \"\" when the only group has none)"))
	case *known < 0 || *known > maxCLIBlock:
		return e.argFail(malformed("--known", "%d; want 0..%d", *known, maxCLIBlock))
	case given(fs, "end") && (*endArg < 0 || *endArg > maxCLIBlock):
		return e.argFail(malformed("--end", "%d; want 0..%d", *endArg, maxCLIBlock))
	}
	rows, a := parseArrived(*arrivedArg)
	if a != nil {
		return e.argFail(a)
	}
	l, status, ok := loadLayout(e, *layoutPath)
	if !ok {
		return status
	}
	arrived, a := arrivalMatrix(rows, len(l.LayerGroups), *known, *endArg)
	if a != nil {
		return e.argFail(a)
	}
	attn := l.AttentionOf()
	iv, err := staging.WindowedReadiness(l.TokensPerBlock, *known, attn, arrived)
	if err != nil {
		e.errorf("%s: %v", *layoutPath, err)
		return exitFail
	}
	reads := make([][]staging.BlockRange, len(attn))
	for g, at := range attn {
		low, high := at.Needed(l.TokensPerBlock, 0, iv.UsableUntil/l.TokensPerBlock, iv.UsableUntil)
		for _, r := range []staging.BlockRange{low, high} {
			if r.Len() > 0 {
				reads[g] = append(reads[g], r)
			}
		}
	}
	if *asJSON {
		return printJSON(e, readinessJSON(iv, attn, reads))
	}
	fmt.Fprintf(e.stdout, "interval %v: restart_floor %d, usable_until %d (block %d)\n",
		iv, iv.RestartFloor, iv.UsableUntil, iv.UsableUntil/l.TokensPerBlock)
	for g, at := range attn {
		kind := "full attention"
		if at.Windowed() {
			kind = fmt.Sprintf("window %d tokens, %d sink blocks", at.Window, at.SinkBlocks)
		}
		fmt.Fprintf(e.stdout, "layer group %d (%s): reads %s\n", g, kind, formatRanges(reads[g]))
	}
	return exitOK
}

// parseArrived reads the --arrived syntax: groups by /, ordinals and inclusive
// A-B ranges by commas. It returns each group's ordinals, sorted and distinct.
func parseArrived(s string) ([][]int, *argError) {
	var out [][]int
	for _, group := range strings.Split(s, "/") {
		seen := map[int]bool{}
		var ords []int
		if group != "" {
			for _, item := range strings.Split(group, ",") {
				lo, hi, isRange := strings.Cut(item, "-")
				a, errA := strconv.Atoi(lo)
				b, errB := a, error(nil)
				if isRange {
					b, errB = strconv.Atoi(hi)
				}
				switch {
				case errA != nil || errB != nil || a < 0 || b < 0:
					return nil, malformed("--arrived", "%q is not a block ordinal or an A-B range of them", item)
				case a > b:
					return nil, malformed("--arrived", "range %q runs backwards; want A <= B", item)
				case b > maxCLIBlock:
					return nil, malformed("--arrived", "block %d; want at most %d", b, maxCLIBlock)
				}
				for o := a; o <= b; o++ {
					if !seen[o] {
						seen[o] = true
						ords = append(ords, o)
					}
				}
			}
		}
		slices.Sort(ords)
		out = append(out, ords)
	}
	return out, nil
}

// arrivalMatrix turns each group's arrived ordinals into its arrival mask from
// block known to end (end < 0: one past the last arrived block).
func arrivalMatrix(rows [][]int, groups, known, end int) ([][]bool, *argError) {
	if len(rows) != groups {
		return nil, &argError{flag: "--arrived", status: exitFail,
			msg: fmt.Sprintf("%d layer groups listed for a layout of %d; want one per layer group, separated by /", len(rows), groups)}
	}
	last := known
	for _, ords := range rows {
		if n := len(ords); n > 0 {
			last = max(last, ords[n-1]+1)
		}
	}
	if end < 0 {
		end = last
	}
	if end < last {
		return nil, &argError{flag: "--end", status: exitFail,
			msg: fmt.Sprintf("%d, but block %d arrived; want one past the last staged block", end, last-1)}
	}
	out := make([][]bool, groups)
	for g, ords := range rows {
		out[g] = make([]bool, max(0, end-known))
		for _, o := range ords {
			if o >= known {
				out[g][o-known] = true
			}
		}
	}
	return out, nil
}

func formatRanges(rs []staging.BlockRange) string {
	if len(rs) == 0 {
		return "no blocks"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r.Len() == 1 {
			parts[i] = fmt.Sprintf("block %d", r.Begin)
		} else {
			parts[i] = fmt.Sprintf("blocks %d-%d", r.Begin, r.End-1)
		}
	}
	return strings.Join(parts, ", ")
}

type groupReadsJSON struct {
	LayerGroup int      `json:"layer_group"`
	Window     *int     `json:"window"`
	SinkBlocks int      `json:"sink_blocks"`
	Reads      [][2]int `json:"reads"` // [begin, end) block ranges
}

type readinessOutJSON struct {
	RestartFloor int              `json:"restart_floor"`
	UsableUntil  int              `json:"usable_until"`
	Empty        bool             `json:"empty"`
	Groups       []groupReadsJSON `json:"groups"`
}

func readinessJSON(iv staging.Interval, attn []staging.Attention, reads [][]staging.BlockRange) readinessOutJSON {
	out := readinessOutJSON{RestartFloor: iv.RestartFloor, UsableUntil: iv.UsableUntil, Empty: iv.Empty(), Groups: []groupReadsJSON{}}
	for g, at := range attn {
		j := groupReadsJSON{LayerGroup: g, SinkBlocks: at.SinkBlocks, Reads: [][2]int{}}
		if at.Windowed() {
			w := at.Window
			j.Window = &w
		}
		for _, r := range reads[g] {
			j.Reads = append(j.Reads, [2]int{r.Begin, r.End})
		}
		out.Groups = append(out.Groups, j)
	}
	return out
}
