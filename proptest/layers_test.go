package proptest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// Layer by layer (SPEC §4 rule 16), in the model suite: some of its cases
// give the engine a layout in which each memory group's slot holds several
// layers — spans that are not the whole slot, a layer's bytes in one or two
// spans, bytes that belong to no layer, layers that only one group has — and
// the model judges every answer per layer from the device's side: which
// copies the spy saw land, and the bytes of the device rows.

const rule16 = "rule 16, layer by layer"

// quad is the granularity of the model's layer spans: a row's pattern names
// its writer in the first byte of every four (pattern), so a span of whole
// quads always shows whose bytes it holds.
const quad = 4

// layerPlan is the model's own account of the layout it gives the engine.
type layerPlan struct {
	// ids are the global layer ids, ascending: the engine's layer order
	// (layer k is ids[k]).
	ids []int
	// spans[g][k] are layer k's spans in a slot of memory group g (none:
	// group g has no bytes of that layer).
	spans [][][]staging.Span
	// cfg is what the engine is configured with; nil: whole-slot copies,
	// one layer.
	cfg [][]staging.LayerSpans
}

// wholeSlot is the plan of an engine configured without layers.
func wholeSlot() layerPlan {
	p := layerPlan{ids: []int{0}}
	for range modelGroups {
		p.spans = append(p.spans, [][]staging.Span{{{Offset: 0, Size: slotBytes}}})
	}
	return p
}

// drawLayerPlan draws, half of the time, a layered layout: two to four
// layers with ids that need not be contiguous, each memory group holding a
// subset of them, each quad of a slot given to one of the group's layers or
// to none.
func drawLayerPlan(t *rapid.T) layerPlan {
	if !rapid.Bool().Draw(t, "layered") {
		return wholeSlot()
	}
	n := rapid.IntRange(2, 4).Draw(t, "layers")
	stride := rapid.IntRange(1, 3).Draw(t, "layer_id_stride")
	cfg := make([][]staging.LayerSpans, modelGroups)
	for g := range cfg {
		var mine []int
		for k := range n {
			if rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("g%d_has_layer%d", g, k)) != 0 {
				mine = append(mine, k*stride)
			}
		}
		if len(mine) == 0 {
			mine = []int{rapid.IntRange(0, n-1).Draw(t, fmt.Sprintf("g%d_only_layer", g)) * stride}
		}
		owner := make([]int, slotBytes/quad) // index into mine; -1: no layer's
		some := false
		for q := range owner {
			owner[q] = rapid.IntRange(-1, len(mine)-1).Draw(t, fmt.Sprintf("g%d_quad%d", g, q))
			some = some || owner[q] >= 0
		}
		if !some {
			owner[0] = 0
		}
		for i, id := range mine {
			ls := staging.LayerSpans{Layer: id}
			for q, o := range owner {
				if o != i {
					continue
				}
				if n := len(ls.Spans); n > 0 && ls.Spans[n-1].End() == q*quad {
					ls.Spans[n-1].Size += quad
					continue
				}
				ls.Spans = append(ls.Spans, staging.Span{Offset: q * quad, Size: quad})
			}
			cfg[g] = append(cfg[g], ls)
		}
	}
	return planOf(cfg)
}

// planOf lays cfg out in the engine's layer order, as the model reads it.
func planOf(cfg [][]staging.LayerSpans) layerPlan {
	p := layerPlan{cfg: cfg}
	for _, layers := range cfg {
		for _, ls := range layers {
			p.ids = append(p.ids, ls.Layer)
		}
	}
	slices.Sort(p.ids)
	p.ids = slices.Compact(p.ids)
	for _, layers := range cfg {
		g := make([][]staging.Span, len(p.ids))
		for _, ls := range layers {
			k := slices.Index(p.ids, ls.Layer)
			g[k] = ls.Spans
		}
		p.spans = append(p.spans, g)
	}
	return p
}

// layerOf names the layer whose span a copy of n bytes at off into a row of
// group g is; ok is false when it is no span of any layer.
func (p layerPlan) layerOf(g, off, n int) (k int, ok bool) {
	for k, spans := range p.spans[g] {
		if slices.Contains(spans, staging.Span{Offset: off, Size: n}) {
			return k, true
		}
	}
	return 0, false
}

// all returns every span of every layer of group g.
func (p layerPlan) all(g int) []staging.Span {
	var out []staging.Span
	for _, spans := range p.spans[g] {
		out = append(out, spans...)
	}
	return out
}

// index records the device rows of a lease the engine took, for rowOf.
func (m *model) index(l *mLease) {
	for _, r := range l.rows {
		m.byDevice[r.Device] = l
		i, _ := slices.BinarySearch(m.rowBases, r.Device)
		m.rowBases = slices.Insert(m.rowBases, i, r.Device)
	}
}

// rowOf finds the device row an address lies in by range: a layer's copy
// starts inside its row, not at its first byte.
func (m *model) rowOf(p gpu.DevicePtr) (gpu.DevicePtr, int) {
	i, found := slices.BinarySearch(m.rowBases, p)
	if found {
		return p, 0
	}
	if i > 0 && p < m.rowBases[i-1]+slotBytes {
		return m.rowBases[i-1], int(p - m.rowBases[i-1])
	}
	return p, 0 // no row of any lease: the copy names itself
}

// rowOfLease returns the row of l whose device memory is p.
func rowOfLease(l *mLease, p gpu.DevicePtr) (staging.Row, bool) {
	for _, r := range l.rows {
		if r.Device == p {
			return r, true
		}
	}
	return staging.Row{}, false
}

// judgeLayerCopy is called as each staging→device copy of a lease is queued:
// it moves exactly one span of one layer of the row's group — never bytes of
// no layer, never a torn span — and the lease's copies go in layer order.
func (m *model) judgeLayerCopy(l *mLease, c spyCopy) {
	r, _ := rowOfLease(l, c.dev)
	k, ok := m.plan.layerOf(r.Group, c.off, c.n)
	switch {
	case !ok:
		m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d: a copy of %d bytes at %d into row (%d,%d) is no span of a layer of its group (%v)",
			rule16, l.serial, c.n, c.off, r.Group, r.Block, m.plan.spans[r.Group]))
	case k+1 < l.layerIssued:
		m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d: a copy of layer %d was queued after one of layer %d: copies go in layer order",
			rule16, l.serial, k, l.layerIssued-1))
	default:
		l.layerIssued = max(l.layerIssued, k+1)
	}
}

// copiesFailed records copies that never landed: their leases' copies
// failed, and for a staging→device copy, from which layer on.
func (m *model) copiesFailed(copies []spyCopy) {
	for _, c := range copies {
		l := m.byDevice[c.dev]
		if l == nil {
			continue
		}
		l.copyFailed = true
		if !c.toDevice {
			continue
		}
		r, _ := rowOfLease(l, c.dev)
		if k, ok := m.plan.layerOf(r.Group, c.off, c.n); ok && (l.layerFailed == 0 || k+1 < l.layerFailed) {
			l.layerFailed = k + 1
		}
	}
}

// eventRange returns the events that may carry a layer of l: from the first
// recorded once its first copy was queued — a layer with no bytes in its rows
// has an event with no copy of its own, recorded before the next layer's
// copies — to the first recorded after its last copy (and any recorded at
// the same point). Events of other leases
// may lie between: the range is what the model cannot tell apart, so it
// only ever excuses, never blames (mayHaveFailed, eventsPending). ok is
// false while a copy of l is not followed by any event.
func (m *model) eventRange(l *mLease) (lo, hi int, ok bool) {
	first, last := -1, -1
	for _, r := range l.rows {
		for _, i := range m.spy.byRow[r.Device] {
			if first < 0 || i < first {
				first = i
			}
			last = max(last, i)
		}
	}
	ev := m.spy.events
	if l.layerwise {
		// A layerwise publish's layers are queued round after round, as
		// they are reported, an empty one with an event of its own (so is
		// the withdrawal of one released before every layer was): any
		// event since it was lent may carry one.
		lo, _ = slices.BinarySearchFunc(ev, l.lentCopies, func(e spyEvent, at int) int { return e.at - at })
		return lo, len(ev) - 1, true
	}
	if first < 0 {
		return 0, -1, true
	}
	lo, _ = slices.BinarySearchFunc(ev, first, func(e spyEvent, at int) int { return e.at - at })
	hi, _ = slices.BinarySearchFunc(ev, last+1, func(e spyEvent, at int) int { return e.at - at })
	if hi == len(ev) {
		return lo, hi - 1, false
	}
	// Layers with no bytes in l's rows after its last copy have events of
	// their own, recorded there too.
	for hi+1 < len(ev) && ev[hi+1].at == ev[hi].at {
		hi++
	}
	return lo, hi, true
}

// mayHaveFailed reports whether a copy of l, or an event that may carry one
// of its layers, failed.
func (m *model) mayHaveFailed(l *mLease) bool {
	if l.copyFailed {
		return true
	}
	lo, hi, _ := m.eventRange(l)
	for i := lo; i <= hi && i < len(m.spy.events); i++ {
		if m.spy.events[i].status == gpu.Failed {
			return true
		}
	}
	return false
}

// eventsPending reports whether a copy of l, or an event that may carry one
// of its layers, has not resolved.
func (m *model) eventsPending(l *mLease) bool {
	lo, hi, ok := m.eventRange(l)
	if !ok {
		return true
	}
	for i := lo; i <= hi && i < len(m.spy.events); i++ {
		if m.spy.events[i].status == gpu.Pending {
			return true
		}
	}
	return false
}

// copiedRows returns the rows of l into which a staging→device copy was
// queued: the rows the engine copies (judgeCopy holds that they may be).
func (m *model) copiedRows(l *mLease) []staging.Row {
	var out []staging.Row
	for _, r := range l.rows {
		if m.spy.issued(r.Device) {
			out = append(out, r)
		}
	}
	return out
}

// layerArrived is how many blocks from the first unknown one have layer k's
// spans on the device in every row.
func (m *model) layerArrived(l *mLease, k int) int {
	arrived := 0
	for b := range l.blocks {
		for _, r := range l.rows {
			if r.Block == l.known+b && !m.spy.covered(r.Device, m.plan.spans[r.Group][k]) {
				return arrived
			}
		}
		arrived++
	}
	return arrived
}

// checkLayers judges every layer of a fetch as the engine answers it, from
// the device's side: a layer reads ready only once every copy of its spans
// into the lease's copied rows landed (and some were queued, before the
// lease's readiness is answerable), never once a copy of it or of an earlier
// layer failed nor once the engine answered that it failed, and the interval it answers covers only blocks whose rows
// hold that layer; the bytes of its spans are the staged content. After a
// synced round, a layer whose copies (and every earlier layer's) all landed
// reads ready.
func (m *model) checkLayers(l *mLease, info readiness.LeaseInfo, synced bool) {
	if l.kind != readiness.Fetch {
		if _, _, err := m.d.layerReadiness(l.h, 0); !errors.Is(err, readiness.ErrNotReady) {
			m.fail(rule16, "lease %d is a publish; LayerReadiness(0) = %v, want ErrNotReady", l.serial, err)
		}
		return
	}
	answerable := info.State == readiness.StateLogicallyComplete
	for k := range m.plan.ids {
		iv, st, err := m.d.layerReadiness(l.h, k)
		if err != nil {
			m.fail(rule16, "lease %d (%v): LayerReadiness(%d): %v", l.serial, info.State, k, err)
		}
		if st == readiness.LayerFailed && (l.saidFailed == 0 || k+1 < l.saidFailed) {
			l.saidFailed = k + 1
		}
		if st == readiness.LayerReady {
			m.judgeReadyLayer(l, info, k, iv, answerable, "LayerReadiness")
			continue
		}
		if synced && m.layerLanded(l, k) && !m.mayHaveFailed(l) && !m.lost && info.State == readiness.StateAccessFenced {
			m.fail(rule16, "lease %d: every copy of layers 0..%d landed and a synced round took them in; layer %d reads %v, want ready", l.serial, k, k, st)
		}
	}
}

// layerLanded reports whether layer k of l had a copy queued and every
// queued copy of l's layers 0..k landed.
func (m *model) layerLanded(l *mLease, k int) bool {
	some := false
	for _, r := range l.rows {
		for _, i := range m.spy.byRow[r.Device] {
			c := m.spy.copies[i]
			if !c.toDevice {
				continue
			}
			j, ok := m.plan.layerOf(r.Group, c.off, c.n)
			if !ok || j > k {
				continue
			}
			if !m.spy.landedCopy(i) {
				return false
			}
			some = some || j == k
		}
	}
	return some
}

// judgeReadyLayer holds what a ready layer k of l promises (how names the
// call that said so).
func (m *model) judgeReadyLayer(l *mLease, info readiness.LeaseInfo, k int, iv staging.Interval, answerable bool, how string) {
	if l.layerFailed != 0 && k+1 >= l.layerFailed {
		m.fail(rule16, "lease %d: %s says layer %d is ready, but a copy of layer %d failed (or its device was lost) before it landed", l.serial, how, k, l.layerFailed-1)
	}
	if l.saidFailed != 0 && k+1 >= l.saidFailed {
		m.fail(rule16, "lease %d: %s says layer %d is ready, after the engine answered that layer %d failed: a failed layer never becomes ready", l.serial, how, k, l.saidFailed-1)
	}
	rows := m.copiedRows(l)
	if !answerable && len(rows) == 0 {
		m.fail(rule16, "lease %d (%v): %s says layer %d is ready before any copy of it was queued", l.serial, info.State, how, k)
	}
	for _, r := range rows {
		spans := m.plan.spans[r.Group][k]
		if !m.spy.covered(r.Device, spans) {
			m.fail(rule16, "lease %d (%v): %s says layer %d is ready, but its spans %v of row (%d,%d) have not all landed on the device", l.serial, info.State, how, k, spans, r.Group, r.Block)
		}
		if m.lost || l.releaseReq {
			continue // the device cannot be read, or the pages are the manager's again
		}
		got := make([]byte, slotBytes)
		must(m.t, m.dev.Read(got, r.Device))
		want := pattern(tagContent, l.serial, rowID(r.Group, r.Block))
		for _, sp := range spans {
			if string(got[sp.Offset:sp.End()]) != string(want[sp.Offset:sp.End()]) {
				m.fail(rule16, "lease %d: %s says layer %d is ready; row (%d,%d) holds %x in its span %+v, not the staged %x",
					l.serial, how, k, r.Group, r.Block, got[sp.Offset:sp.End()], sp, want[sp.Offset:sp.End()])
			}
		}
	}
	// A lease its owner released before anything was copied answers what
	// its backend served (the engine's whole-lease Readiness does too): the
	// owner gave its pages away, so the interval says nothing about them.
	if l.releaseReq && len(rows) == 0 {
		return
	}
	if most := (l.known + m.layerArrived(l, k)) * tpb; iv.UsableUntil > most || iv.RestartFloor != 0 {
		m.fail(rule16, "lease %d: %s says layer %d is ready with %v; the device holds that layer for blocks up to %d tokens", l.serial, how, k, iv, most)
	}
}

// layerAction asks the engine for one layer of one live lease — WaitLayer on
// the runner, with a short deadline; a bad layer now and then, which must be
// refused and change nothing — and judges the answer.
func (m *model) layerAction(t *rapid.T) {
	live := m.live()
	if len(live) == 0 || m.halt != nil {
		return
	}
	// Most of the time the lease is one whose layers are being copied, or
	// one of whose copies failed: where an early or a wrong answer would be.
	var copying, failing []*mLease
	for _, x := range live {
		switch {
		case x.kind != readiness.Fetch:
		case x.layerFailed > 0 || x.saidFailed > 0:
			failing = append(failing, x)
		case x.layerIssued > 0:
			copying = append(copying, x)
		}
	}
	var l *mLease
	switch which := rapid.IntRange(0, 2).Draw(t, "which_lease"); {
	case which == 0 && len(failing) > 0:
		l = pick(t, "failing_lease", failing)
	case which <= 1 && len(copying) > 0:
		l = pick(t, "copying_lease", copying)
	default:
		l = pick(t, "lease", live)
	}
	if rapid.IntRange(0, 7).Draw(t, "bad_layer") == 0 {
		k := pick(t, "layer", []int{-1, len(m.plan.ids)})
		before := m.d.stats()
		if _, _, err := m.d.layerReadiness(l.h, k); !errors.Is(err, readiness.ErrInvalidRequest) {
			m.fail(rule11, "LayerReadiness(%d) of an engine with %d layers = %v; want ErrInvalidRequest", k, len(m.plan.ids), err)
		}
		after := m.d.stats()
		after.Handoffs, before.Handoffs = 0, 0
		if after != before {
			m.fail(rule11, "a refused LayerReadiness changed the engine: %+v -> %+v", before, after)
		}
		return
	}
	if l.kind != readiness.Fetch {
		return
	}
	k := rapid.IntRange(0, len(m.plan.ids)-1).Draw(t, "layer")
	if f := max(l.layerFailed, l.saidFailed); f > 0 && rapid.Bool().Draw(t, "at_failed_layer") {
		k = f - 1
	}
	m.step++
	iv, st, err := m.d.waitLayer(l.h, k)
	m.checkHalt(false) // the wait ran rounds: a containment may have halted the engine
	info, ierr := m.d.lease(l.h)
	switch {
	case st == readiness.LayerReady && ierr == nil:
		// A released lease's layers read ready only if its readiness was
		// answerable when it went.
		answerable := info.State == readiness.StateLogicallyComplete || info.State == readiness.StateReleased
		m.judgeReadyLayer(l, info, k, iv, answerable, "WaitLayer")
	case st == readiness.LayerFailed:
		if !errors.Is(err, readiness.ErrLayerFailed) {
			m.fail(rule16, "lease %d: WaitLayer(%d) ended failed with %v; want an error wrapping ErrLayerFailed", l.serial, k, err)
		}
		if !m.lost && !m.mayHaveFailed(l) {
			m.fail(rule16, "lease %d: WaitLayer(%d) failed (%v), but no copy of layer %d or an earlier one failed", l.serial, k, err, k)
		}
	}
	m.check(false)
}

// layerWait bounds a WaitLayer of the model: long enough for a round, short
// enough that a layer that does not land costs little.
const layerWait = 2 * time.Millisecond

// waitLayer on the runner: WaitLayer, bounded, and what it ended with.
func (d *runnerDriver) waitLayer(h readiness.Handle, k int) (staging.Interval, readiness.LayerStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), layerWait)
	defer cancel()
	iv, err := d.eng.WaitLayer(ctx, h, k)
	switch {
	case err == nil:
		return iv, readiness.LayerReady, nil
	case errors.Is(err, readiness.ErrLayerFailed):
		return iv, readiness.LayerFailed, err
	case errors.Is(err, readiness.ErrNotReady):
		return iv, readiness.LayerNever, err
	}
	return iv, readiness.LayerPending, err
}

func (d *runnerDriver) layerReadiness(h readiness.Handle, k int) (staging.Interval, readiness.LayerStatus, error) {
	return d.eng.LayerReadiness(h, k)
}

// waitLayer on the core: one round, then the layer's answer (the core has
// no wait of its own).
func (d *coreDriver) waitLayer(h readiness.Handle, k int) (staging.Interval, readiness.LayerStatus, error) {
	_ = d.round(false)
	iv, st, err := d.layerReadiness(h, k)
	if err == nil && st == readiness.LayerFailed {
		err = fmt.Errorf("%w: layer %d of %v", readiness.ErrLayerFailed, k, h)
	}
	return iv, st, err
}

func (d *coreDriver) layerReadiness(h readiness.Handle, k int) (staging.Interval, readiness.LayerStatus, error) {
	iv, st, err := d.c.LayerReadiness(coreHandle(h), k)
	return iv, readiness.LayerStatus(st), err
}

// ---- the layerwise publish (Request.Layerwise) ----

// publishedSpans is what the adversary must find staged, from the device, in
// a row of group g when the lease with serial submits: every layer's spans
// for a layerwise publish, the whole row (nil) for any other.
func (m *model) publishedSpans(serial, g int) []staging.Span {
	if l := m.bySerial[serial]; l != nil && l.layerwise {
		return m.plan.all(g)
	}
	return nil
}

// withdrawLayers records a layerwise publish the owner let go of (release,
// cancel, Close) in st, before reporting every layer computed: it is
// withdrawn, and nothing of it may ever be submitted.
func (m *model) withdrawLayers(l *mLease, st readiness.State) {
	if l.layerwise && l.computed < len(m.plan.ids) && (st == readiness.StateWaiting || st == readiness.StateGranted) {
		l.withdrawnLayers = true
	}
}

// computedAction reports the next layer of a granted layerwise publish
// computed (the zero event: synchronised already), as vLLM's save_kv_layer
// does; now and then a layer out of turn, or a lease that is no granted
// layerwise publish, which must be refused and change nothing.
func (m *model) computedAction(t *rapid.T) {
	if m.halt != nil {
		return
	}
	var cands []*mLease
	for _, l := range m.live() {
		if l.layerwise && l.computed < len(m.plan.ids) {
			cands = append(cands, l)
		}
	}
	live := m.live()
	if len(live) == 0 {
		return
	}
	l := pick(t, "lease", live)
	if len(cands) > 0 && rapid.IntRange(0, 3).Draw(t, "layerwise_lease") != 0 {
		l = pick(t, "computed_lease", cands)
	}
	k := l.computed
	if rapid.IntRange(0, 5).Draw(t, "out_of_turn") == 0 {
		k = pick(t, "bad_computed", []int{l.computed - 1, l.computed + 1, len(m.plan.ids)})
	}
	info, ierr := m.d.lease(l.h)
	if ierr != nil {
		return
	}
	before := m.d.stats()
	err := m.d.computed(l.h, k)
	if os.Getenv("MODEL_DEBUG") != "" {
		fmt.Printf("  computed lease %d layer %d: %v\n", l.serial, k, err)
	}
	ok := l.layerwise && k == l.computed && k < len(m.plan.ids) && info.State == readiness.StateGranted &&
		!l.releaseReq && !l.cancelled && !l.closedReq
	switch {
	case ok && err != nil:
		m.fail(rule16, "lease %d (%v): Computed(%d), its next layer: %v", l.serial, info.State, k, err)
	case ok:
		l.computed++
	case err == nil:
		m.fail(rule16, "lease %d (%v, layerwise %v, %d of %d layers computed, released %v, cancelled %v): Computed(%d) was accepted",
			l.serial, info.State, l.layerwise, l.computed, len(m.plan.ids), l.releaseReq, l.cancelled, k)
	default:
		after, _ := m.d.lease(l.h)
		st := m.d.stats()
		st.Refused, before.Refused = 0, 0
		st.Handoffs, before.Handoffs = 0, 0
		if after != info || st != before {
			m.fail(rule11, "a refused Computed(%d) (%v) changed lease %d or the engine: %+v -> %+v, %+v -> %+v", k, err, l.serial, info, after, before, st)
		}
	}
}

// judgePublishCopy is called as each device→staging copy of a lease is
// queued: a layerwise publish's copy is one span of a layer the owner
// reported computed; any other publish copies whole rows.
func (m *model) judgePublishCopy(l *mLease, c spyCopy) {
	r, _ := rowOfLease(l, c.dev)
	if !l.layerwise {
		if c.off != 0 || c.n != slotBytes {
			m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d, a publish not layerwise: a copy of %d bytes at %d of row (%d,%d); want whole rows", rule16, l.serial, c.n, c.off, r.Group, r.Block))
		}
		return
	}
	k, ok := m.plan.layerOf(r.Group, c.off, c.n)
	switch {
	case !ok:
		m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d: a publish's copy of %d bytes at %d of row (%d,%d) is no span of a layer of its group (%v)",
			rule16, l.serial, c.n, c.off, r.Group, r.Block, m.plan.spans[r.Group]))
	case k >= l.computed:
		m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d: layer %d of a layerwise publish was copied to staging before the owner reported it computed (%d reported)",
			rule16, l.serial, k, l.computed))
	}
}

// checkWithdrawn holds that a layerwise publish withdrawn before every layer
// was reported is never submitted.
func (m *model) checkWithdrawn(l *mLease) {
	if l.withdrawnLayers && m.attempt(l) != nil {
		m.fail(rule16, "lease %d, a layerwise publish let go of with %d of %d layers reported computed, was submitted", l.serial, l.computed, len(m.plan.ids))
	}
}

func (d *runnerDriver) computed(h readiness.Handle, layer int) error {
	return d.eng.Computed(h, layer, gpu.Event{})
}

func (d *coreDriver) computed(h readiness.Handle, layer int) error {
	return d.c.Computed(coreHandle(h), layer, gpu.Event{})
}

// layerwiseSlotHolds reports whether the staging slot of row r of the
// layerwise publish l holds only what may be there: the stamp the model put
// there at the grant outside every layer's spans, and in each span the stamp,
// the row's device content (its layer's copy landed), a page the owner
// reused after releasing it, or the poison of a failed copy.
func (m *model) layerwiseSlotHolds(l *mLease, r staging.Row, row []byte) bool {
	stamp, content := pattern(tagStamp, l.serial, rowID(r.Group, r.Block)), pattern(tagContent, l.serial, rowID(r.Group, r.Block))
	reused := pattern(0x77, l.serial, 0)
	in := make([]bool, len(row))
	for _, sp := range m.plan.all(r.Group) {
		got := row[sp.Offset:sp.End()]
		if string(got) != string(stamp[sp.Offset:sp.End()]) && string(got) != string(content[sp.Offset:sp.End()]) &&
			string(got) != string(reused[sp.Offset:sp.End()]) && !filled(got, sim.Poison) {
			return false
		}
		for i := sp.Offset; i < sp.End(); i++ {
			in[i] = true
		}
	}
	for i := range row {
		if !in[i] && row[i] != stamp[i] {
			return false
		}
	}
	return true
}

// computeAll reports every layer not yet reported of each granted layerwise
// publish the owner still holds: the liveness phase's owner computes
// everything.
func (m *model) computeAll() {
	for _, l := range m.live() {
		if !l.layerwise || l.releaseReq || l.cancelled || l.closedReq {
			continue
		}
		for l.computed < len(m.plan.ids) {
			if info, err := m.d.lease(l.h); err != nil || info.State != readiness.StateGranted {
				break
			}
			if err := m.d.computed(l.h, l.computed); err != nil {
				m.fail(rule16, "lease %d: Computed(%d) in the liveness phase: %v", l.serial, l.computed, err)
			}
			l.computed++
		}
	}
}
