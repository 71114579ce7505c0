package simulate

import (
	"fmt"
	"image/color"
	"io"
	"net/url"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/kvready/kvready/backend/tiers"
)

// TierSummary is what one tier of a stack did in a run: its backend/tiers
// Stats, in rows unless they say otherwise, beside the tier as the run built
// it.
type TierSummary struct {
	tiers.TierStats
	// Store is the tier as given: mem, mem?capacity=BYTES, or the Redis URL
	// (password redacted).
	Store string
	// CapacityBytes bounds an in-process tier (0: unbounded; a Redis tier's
	// bound is the server's own).
	CapacityBytes int64
}

// tierHits returns the rows each tier of the stack served so far, in tier
// order; nil without a stack.
func (t *transport) tierHits() []uint64 {
	if t.stack == nil {
		return nil
	}
	stats := t.stack.Stats()
	out := make([]uint64, len(stats))
	for i, s := range stats {
		out[i] = s.Hits
	}
	return out
}

// tierSummaries returns what each tier of the stack did; nil without one.
func (t *transport) tierSummaries() []TierSummary {
	if t.stack == nil {
		return nil
	}
	stats := t.stack.Stats()
	out := make([]TierSummary, len(stats))
	for i, s := range stats {
		spec := t.specs[i]
		store := spec.String()
		if u, err := url.Parse(spec.URL); spec.URL != "" && err == nil {
			store = u.Redacted()
		}
		out[i] = TierSummary{TierStats: s, Store: store, CapacityBytes: spec.CapacityBytes}
	}
	return out
}

// tierJSON is one tier in the JSON summary.
type tierJSON struct {
	Name           string  `json:"name"`
	Store          string  `json:"store"`
	CapacityBytes  *int64  `json:"capacity_bytes"` // null: unbounded, or a server's own bound
	Handed         uint64  `json:"handed"`
	Hits           uint64  `json:"hits"`
	Misses         uint64  `json:"misses"`
	Failed         uint64  `json:"failed"`
	HitRatio       float64 `json:"hit_ratio"` // hits over handed
	Published      uint64  `json:"published"`
	PublishFailed  uint64  `json:"publish_failed"`
	Promoted       uint64  `json:"promoted"`
	PromoteFailed  uint64  `json:"promote_failed"`
	PromoteSkipped uint64  `json:"promote_skipped"`
	Rejected       uint64  `json:"rejected"`
	NoOutcome      uint64  `json:"no_outcome"`
	Violations     uint64  `json:"violations"`
	CancelErrors   uint64  `json:"cancel_errors"`
	Evictions      uint64  `json:"evictions"`
	Bytes          *int64  `json:"bytes"` // null: the tier does not report its bytes
}

// tiersJSON is the tiers part of the JSON summary: null without a stack.
func tiersJSON(ts []TierSummary) []tierJSON {
	if ts == nil {
		return nil
	}
	out := make([]tierJSON, len(ts))
	for i, t := range ts {
		j := tierJSON{Name: t.Name, Store: t.Store, Handed: t.Handed, Hits: t.Hits, Misses: t.Misses, Failed: t.Failed,
			HitRatio: t.HitRate(), Published: t.Published, PublishFailed: t.PublishFailed, Promoted: t.Promoted,
			PromoteFailed: t.PromoteFailed, PromoteSkipped: t.PromoteSkipped, Rejected: t.Rejected,
			NoOutcome: t.NoOutcome, Violations: t.Violations, CancelErrors: t.CancelErrors, Evictions: t.Evictions}
		if t.CapacityBytes > 0 {
			c := t.CapacityBytes
			j.CapacityBytes = &c
		}
		if t.Sized {
			b := t.Bytes
			j.Bytes = &b
		}
		out[i] = j
	}
	return out
}

// writeTiers prints what each tier of a stack did: the rows it served of
// those handed to it, what was written into it (through, and promoted from
// a lower tier), what it holds and evicted, and its faults when it had any.
func (s *Summary) writeTiers(tw io.Writer, row func(string, any)) {
	fmt.Fprintln(tw, "tiers (every fetch asks them in order, each for the rows the ones above did not serve; counts in rows)")
	for i, t := range s.Tiers {
		row(fmt.Sprintf("tier %d %s", i, t.Name), fmt.Sprintf("hits %d of %d handed (%.3f), misses %d, failed %d",
			t.Hits, t.Handed, t.HitRate(), t.Misses, t.Failed))
		row("  store", t.Store)
		row("  written", fmt.Sprintf("%d through (%d failed), %d promoted in (%d failed, %d skipped)",
			t.Published, t.PublishFailed, t.Promoted, t.PromoteFailed, t.PromoteSkipped))
		switch {
		case t.Sized && t.CapacityBytes > 0:
			row("  held", fmt.Sprintf("%d of %s, %d evictions", t.Bytes, byteSize(t.CapacityBytes), t.Evictions))
		case t.Sized:
			row("  held", fmt.Sprintf("%d bytes (unbounded), %d evictions", t.Bytes, t.Evictions))
		}
		if t.Rejected+t.NoOutcome+t.Violations+t.CancelErrors > 0 {
			row("  faults", fmt.Sprintf("rejected %d, no outcome %d, violations %d, cancel errors %d",
				t.Rejected, t.NoOutcome, t.Violations, t.CancelErrors))
		}
	}
}

// tierHitsSince says how many rows each tier served between two samples'
// counts (prev nil: from the start), as the over-time rows print it, and
// whether any tier served one.
func (s *Summary) tierHitsSince(now, prev []uint64) (string, bool) {
	if len(s.Tiers) == 0 || len(now) != len(s.Tiers) {
		return "", false
	}
	parts := make([]string, len(now))
	served := false
	for i, n := range now {
		var p uint64
		if i < len(prev) {
			p = min(prev[i], n)
		}
		parts[i] = s.Tiers[i].Name + " " + strconv.FormatUint(n-p, 10)
		served = served || n > p
	}
	return "; tier hits " + strings.Join(parts, ", "), served
}

// redisTier reports whether a Redis store is among the stack's tiers.
func (s *Summary) redisTier() bool {
	for _, t := range s.Tiers {
		if !strings.HasPrefix(t.Store, MemBackend) {
			return true
		}
	}
	return false
}

// byteSize prints a number of bytes as the summary does: exact, with the
// binary unit it fills when there is one (262144 bytes (256KiB)).
func byteSize(n int64) string {
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d bytes (%d%s)", n, n/u.n, u.suffix)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// tierColors are the tiers' colours in the report, first tier first: none
// of a state's, a manager's or a layerwise pass's.
var tierColors = []color.RGBA{{0, 150, 70, 255}, {150, 60, 170, 255}, {200, 150, 0, 255}, {90, 90, 90, 255}}

// tiersPlot draws the rows each tier served so far, over the run: a local
// tier's line steepens as it warms while the shared one's flattens. It
// returns nil, nil when the run sampled no tier hits.
func tiersPlot(s *Summary) (*plot.Plot, *plot.Legend) {
	if len(s.Tiers) == 0 || len(s.Timeline) == 0 {
		return nil, nil
	}
	p := newPlot()
	p.Title.Text = "Rows served by each tier so far (" + s.Manager + " manager)"
	p.X.Label.Text = s.clock() + " ms"
	p.Y.Label.Text = "rows served"
	legend := newLegend()
	top := uint64(0)
	for i, t := range s.Tiers {
		pts := make(plotter.XYs, 0, len(s.Timeline)+1)
		for _, smp := range s.Timeline {
			if i < len(smp.TierHits) {
				pts = append(pts, plotter.XY{X: ms(smp.At), Y: float64(smp.TierHits[i])})
			}
		}
		pts = append(pts, plotter.XY{X: ms(max(s.Virtual, s.Timeline[len(s.Timeline)-1].At)), Y: float64(t.Hits)})
		top = max(top, t.Hits)
		line, err := plotter.NewLine(pts)
		if err != nil {
			continue
		}
		line.Color, line.Width = tierColors[i%len(tierColors)], vg.Points(2)
		p.Add(line)
		legend.Add(fmt.Sprintf("tier %d %s", i, t.Name), line)
	}
	if top == 0 {
		return nil, nil
	}
	p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 1.1*float64(top)
	return p, legend
}
