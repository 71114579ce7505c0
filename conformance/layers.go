package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// Layer by layer (SPEC §4 rule 16): one trial in layeredOneIn hands the
// backend to a readiness engine configured with layers, on a simulated
// device, instead of driving it directly. The engine copies each layer's
// spans of the served rows to the device once the backend proved its access
// over, and says per layer when they landed. What concerns the backend: the
// bytes each layer carries to the device are the stored content, so a
// backend that writes after Quiesce answered true (or serves other bytes)
// shows in the layer that carried them; a backend that legally writes until
// Quiesce says true never lets a layer read ready before the proof.

// layeredOneIn: one trial in this many goes through an engine with layers.
const layeredOneIn = 4

// layeredTokensPerBlock is the layered trials' block size: any will do.
const layeredTokensPerBlock = 16

// The layered trials' engine runs on a manual clock that moves
// layeredTick whenever nothing else can happen (the back-off between
// Quiesce retries, at most layeredBackoff, passes on it); a trial stops
// waiting once the backend answered layeredUnproven times that its access is
// not over, and then moves the clock past the lease's containment deadline
// (request timeout plus grace: layeredDeadline each), so that its engine
// drains.
const (
	layeredTick      = 2 * time.Millisecond
	layeredBackoff   = 8 * time.Millisecond
	layeredUnproven  = 8
	layeredDeadline  = time.Minute
	layeredDrainWait = time.Second
)

// drawLayers draws a layered layout of a slot of slotBytes for each of
// groups memory groups: two to four layers with ids that need not be
// contiguous, each group holding some of them, each quarter of a slot given
// to one of its group's layers or to none (every group holds some bytes).
func drawLayers(t *rapid.T, groups, slotBytes int) [][]staging.LayerSpans {
	n := rapid.IntRange(2, 4).Draw(t, "layers")
	stride := rapid.IntRange(1, 3).Draw(t, "layer_id_stride")
	part := slotBytes / 4
	out := make([][]staging.LayerSpans, groups)
	for g := range out {
		var ids []int
		for k := range n {
			if rapid.IntRange(0, 3).Draw(t, "has_layer") != 0 {
				ids = append(ids, k*stride)
			}
		}
		if len(ids) == 0 {
			ids = []int{rapid.IntRange(0, n-1).Draw(t, "only_layer") * stride}
		}
		owner := make([]int, 4) // index into ids, or -1: bytes of no layer
		some := false
		for q := range owner {
			owner[q] = rapid.IntRange(-1, len(ids)-1).Draw(t, "quarter_of")
			some = some || owner[q] >= 0
		}
		if !some {
			owner[0] = 0
		}
		for i, id := range ids {
			ls := staging.LayerSpans{Layer: id}
			for q, o := range owner {
				switch {
				case o != i:
				case len(ls.Spans) > 0 && ls.Spans[len(ls.Spans)-1].End() == q*part:
					ls.Spans[len(ls.Spans)-1].Size += part
				default:
					ls.Spans = append(ls.Spans, staging.Span{Offset: q * part, Size: part})
				}
			}
			out[g] = append(out[g], ls)
		}
	}
	return out
}

// layersString prints a layered layout: each group's layers and spans.
func layersString(layers [][]staging.LayerSpans) string {
	var b strings.Builder
	for g, group := range layers {
		if g > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "group %d:", g)
		for _, ls := range group {
			fmt.Fprintf(&b, " %d%v", ls.Layer, ls.Spans)
		}
	}
	return b.String()
}

// proofWatch wraps the backend under test: it records whether its access
// was proven over (Quiesce true, TryQuiesce ended) or its submission was
// rejected, and the staging memory at the proof, from whatever goroutine the
// engine asks on.
type proofWatch struct {
	contract.Fetcher
	mem *staging.Memory

	mu       sync.Mutex
	proven   bool
	rejected bool
	unproven int              // answers that proved nothing
	atProof  [][][]byte       // [group][slot] at the first proof
	last     contract.Attempt // the attempt the engine was handed, for a violation's account of its accessors
}

func (w *proofWatch) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	a, err := w.Fetcher.Fetch(ext, r)
	w.mu.Lock()
	if a == nil && errors.Is(err, contract.ErrSubmissionRejected) {
		w.rejected = true
	}
	if a != nil {
		w.last = a
	}
	w.mu.Unlock()
	return a, err
}

// accessorsOf is the account of n's accessors the engine's attempt gives.
func (w *proofWatch) accessorsOf(n contract.Name) string {
	w.mu.Lock()
	a := w.last
	w.mu.Unlock()
	if a == nil {
		return ""
	}
	return accessorsOf(a, n)
}

func (w *proofWatch) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	ok, err := w.Fetcher.Quiesce(ctx, list)
	if ok && err == nil {
		w.prove()
	} else {
		w.notYet()
	}
	return ok, err
}

func (w *proofWatch) notYet() {
	w.mu.Lock()
	w.unproven++
	w.mu.Unlock()
}

// stuck reports whether the backend answered so many times that its access
// is not over that a layered trial stops waiting for it.
func (w *proofWatch) stuck() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.proven && w.unproven >= layeredUnproven
}

// prove records the proof and what staging held then.
func (w *proofWatch) prove() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.proven {
		return
	}
	w.proven, w.atProof = true, snapshot(w.mem)
}

// snapshot copies every slot of mem: [group][slot].
func snapshot(mem *staging.Memory) [][][]byte {
	out := make([][][]byte, mem.NumGroups())
	for g := range out {
		for s := range mem.Group(g).Slots {
			row, _ := mem.Row(g, s)
			out[g] = append(out[g], slices.Clone(row))
		}
	}
	return out
}

// fenced reports whether the backend's access was proven over, or never
// began.
func (w *proofWatch) fenced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proven || w.rejected
}

// stagedAtProof returns slot s of group g as it was at the proof.
func (w *proofWatch) stagedAtProof(g, s int) ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.proven || s < 0 {
		return nil, false
	}
	return w.atProof[g][s], true
}

// probingWatch is proofWatch for a backend with a non-blocking probe, which
// the engine asks first: an answer that access ended is a proof too.
type probingWatch struct {
	*proofWatch
	p contract.QuiesceProber
}

func (w probingWatch) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	ans, err := w.p.TryQuiesce(list)
	switch {
	case ans == contract.AccessEnded && err == nil:
		w.prove()
	case err != nil || ans == contract.AccessUnproven:
		w.notYet()
	}
	return ans, err
}

// layerSeen is what the device held when a layer first read ready, and what
// staging held when its copies ran.
type layerSeen struct {
	ready  bool
	fenced bool       // the backend's access was proven over (or never began) by then
	device [][]byte   // each row of the request, as the device held it
	staged [][][]byte // [group][slot] before the device event that landed it; nil: none ran
}

// layeredFetchTrial fetches the trial's units through an engine that copies
// them layer by layer, completing one device event at a time, and judges
// each layer as it reads ready.
func layeredFetchTrial(newSubject NewFetcher, tr trial, cfg config) error {
	_, err := layeredFetch(newSubject, tr, cfg)
	return err
}

// layeredResult is what a layered trial saw: how many layers read ready
// before the lease's readiness was answerable, and how many rows arrived.
type layeredResult struct {
	early, arrived int
}

func layeredFetch(newSubject NewFetcher, tr trial, cfg config) (res layeredResult, err error) {
	groups := make([]staging.Group, tr.Groups)
	for g := range groups {
		groups[g] = staging.Group{Slots: tr.Slots, SlotBytes: tr.SlotBytes}
	}
	mem, err := staging.NewMemory(staging.GoHeap, groups...)
	if err != nil {
		return res, fmt.Errorf("conformance: staging for a layered trial: %w", err)
	}
	for g := range tr.Groups {
		for s := range tr.Slots {
			row, _ := mem.Row(g, s)
			for i := range row {
				row[i] = canary(g, s*tr.SlotBytes+i)
			}
		}
	}
	sub, err := newSubject(mem)
	if err != nil {
		return res, fmt.Errorf("conformance: building the backend: %w", err)
	}
	defer closeSubject(sub.Close)
	if sub.Fetcher == nil || sub.Put == nil {
		return res, fmt.Errorf("conformance: the FetchSubject needs a Fetcher and Put")
	}
	for _, u := range tr.Units {
		if u.Stored {
			sub.Put(kitExtent, u.Name, u.Content)
		}
	}
	dev, err := sim.New(0, 1<<16)
	if err != nil {
		return res, err
	}
	stream, err := dev.NewStream()
	if err != nil {
		return res, err
	}
	watch := &proofWatch{Fetcher: sub.Fetcher, mem: mem}
	var fetcher contract.Fetcher = watch
	if p, ok := sub.Fetcher.(contract.QuiesceProber); ok {
		fetcher = probingWatch{watch, p}
	}
	clock := sim.NewManualClock(time.Unix(1_800_000_000, 0))
	eng, err := readiness.New(readiness.Config{
		Memory: mem, TokensPerBlock: layeredTokensPerBlock, ExtentName: []byte(kitExtent), Layers: tr.Layers,
		Fetcher: fetcher, Stream: stream, Health: dev, Clock: clock,
		RequestTimeout: layeredDeadline, DrainGrace: layeredDeadline, QuiesceTimeout: cfg.wait, MaxRetryBackoff: layeredBackoff,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return res, fmt.Errorf("conformance: an engine with layers %s: %w", layersString(tr.Layers), err)
	}
	var h readiness.Handle
	lent := false
	defer func() {
		// Whatever the backend did, the engine lets go: the owner releases
		// the lease, and a lease still unproven is contained once the clock
		// passes its containment deadline.
		if lent {
			_ = eng.Release(h)
		}
		clock.Advance(3 * layeredDeadline)
		ctx, cancel := context.WithTimeout(context.Background(), layeredDrainWait)
		defer cancel()
		_, _ = eng.Shutdown(ctx)
	}()
	req := readiness.Request{Kind: readiness.Fetch}
	before := make([][]byte, len(tr.Units))
	for i, u := range tr.Units {
		p, err := dev.Alloc(tr.SlotBytes)
		if err != nil {
			return res, err
		}
		before[i] = make([]byte, tr.SlotBytes)
		for j := range before[i] {
			before[i][j] = reused(u.Group, u.Slot*tr.SlotBytes+j) ^ 0xFF
		}
		if err := dev.Write(p, before[i]); err != nil {
			return res, err
		}
		req.Rows = append(req.Rows, staging.Row{Name: u.Name, Group: u.Group, Block: u.Slot, Device: p})
	}
	if h, err = eng.Lend(req); err != nil {
		return res, fmt.Errorf("conformance: lending %d rows to an engine with layers %s: %w", len(req.Rows), layersString(tr.Layers), err)
	}
	lent = true

	seen := make([]layerSeen, eng.Layers())
	var runs []staging.Run
	var staged [][][]byte // staging before the latest device event ran
	deadline := time.Now().Add(cfg.wait)
	var info readiness.LeaseInfo
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.wait)
		_, serr := eng.Sync(ctx)
		cancel()
		if serr != nil {
			return res, fmt.Errorf("conformance: through an engine with layers: %w", serr)
		}
		if info, err = eng.Lease(h); err != nil {
			return res, fmt.Errorf("conformance: through an engine with layers: %w", err)
		}
		if runs == nil && info.State != readiness.StateWaiting {
			runs, _ = eng.Runs(h, nil)
		}
		for k := range seen {
			_, st, err := eng.LayerReadiness(h, k)
			if err != nil {
				return res, fmt.Errorf("conformance: through an engine with layers: layer %d: %w", k, err)
			}
			if st == readiness.LayerReady && !seen[k].ready {
				seen[k] = layerSeen{ready: true, fenced: watch.fenced(), device: deviceRows(dev, req.Rows, tr.SlotBytes), staged: staged}
				if info.State != readiness.StateLogicallyComplete {
					res.early++
				}
			}
		}
		if layeredDone(info) || watch.stuck() || time.Now().After(deadline) {
			break
		}
		// The simulated device copies when an event completes: what staging
		// holds just before is what the copies carry. It is read only once
		// the backend's access is over (before, the engine copies nothing).
		if watch.fenced() {
			staged = snapshot(mem)
		}
		if n, _ := dev.CompleteNext(stream, 1); n > 0 {
			continue
		}
		clock.Advance(layeredTick)
		select {
		case <-eng.Wake():
		case <-time.After(time.Millisecond):
		}
	}
	if info.State != readiness.StateLogicallyComplete {
		return res, nil // nothing landed for good: the other trials judge what the backend did
	}
	arrived, err := eng.Arrived(h, nil)
	if err != nil {
		return res, fmt.Errorf("conformance: through an engine with layers: %w", err)
	}
	for _, a := range arrived {
		res.arrived += len(a.Blocks)
	}
	return res, judgeLayers(tr, req.Rows, before, seen, arrived, runs, watch, deviceRows(dev, req.Rows, tr.SlotBytes))
}

// layeredDone reports whether a layered trial's lease can go no further
// without its owner.
func layeredDone(info readiness.LeaseInfo) bool {
	switch info.State {
	case readiness.StateLogicallyComplete, readiness.StateQuarantined, readiness.StateContained, readiness.StateReleased:
		return true
	}
	return false
}

// judgeLayers holds, for every layer that read ready, that the backend's
// access was proven over by then and that each row that arrived held that
// layer's stored bytes on the device; at the end, every arrived row holds the
// stored content in every layer's spans and nothing else of it changed.
func judgeLayers(tr trial, rows []staging.Row, before [][]byte, seen []layerSeen, arrived []staging.GroupBlocks, runs []staging.Run, watch *proofWatch, final [][]byte) error {
	got := func(g, b int) bool {
		for _, a := range arrived {
			if a.Group == g && slices.Contains(a.Blocks, b) {
				return true
			}
		}
		return false
	}
	order := layerOrder(tr.Layers)
	for k, s := range seen {
		if !s.ready {
			return fmt.Errorf("conformance: through an engine with layers: the lease's readiness is answerable, yet layer %d never read ready", k)
		}
		if !s.fenced {
			return fmt.Errorf("conformance: through an engine with layers: layer %d read ready before the backend's access was proven over", k)
		}
		for i, r := range rows {
			if !got(r.Group, r.Block) {
				continue
			}
			u := tr.Units[i]
			for _, sp := range order[r.Group][k] {
				on, want := s.device[i][sp.Offset:sp.End()], u.Content[sp.Offset:sp.End()]
				if string(on) == string(want) {
					continue
				}
				slot := slotOf(runs, r)
				var copied []byte // what staging held when the layer's copies ran
				if s.staged != nil && slot >= 0 {
					copied = s.staged[r.Group][slot][sp.Offset:sp.End()]
				}
				atProof, proven := watch.stagedAtProof(r.Group, slot)
				switch {
				case copied != nil && string(copied) == string(want):
					return fmt.Errorf("conformance: through an engine with layers %s: staging held unit (%d,%d)'s stored bytes %x at %d..%d when layer %d's copies ran, and the device received %x: the engine, not the backend, moved the wrong bytes",
						layersString(tr.Layers), r.Group, r.Block, want, sp.Offset, sp.End(), k, on)
				case proven && string(atProof[sp.Offset:sp.End()]) == string(want):
					return violation(RuleNoLateWrite, "unit (%d,%d) held its stored bytes in staging when Quiesce answered true; then something wrote it, after Quiesce answered true: layer %d carried %x to the device at bytes %d..%d, not the stored %x%s",
						r.Group, r.Block, k, on, sp.Offset, sp.End(), want, watch.accessorsOf(u.Name))
				}
				return violation(RuleServedContent, "unit (%d,%d) was served, and layer %d carried %x to the device at bytes %d..%d; stored %v %x%s",
					r.Group, r.Block, k, on, sp.Offset, sp.End(), u.Stored, want, watch.accessorsOf(u.Name))
			}
		}
	}
	// In the end a row that arrived holds its stored bytes in every layer's
	// spans, and every other byte of the request's rows is what it was.
	for i, r := range rows {
		want := slices.Clone(before[i])
		if got(r.Group, r.Block) {
			for _, spans := range order[r.Group] {
				for _, sp := range spans {
					copy(want[sp.Offset:sp.End()], tr.Units[i].Content[sp.Offset:sp.End()])
				}
			}
		}
		if string(final[i]) != string(want) {
			return fmt.Errorf("conformance: through an engine with layers %s: unit (%d,%d) (arrived %v) ends on the device as %x; want %x",
				layersString(tr.Layers), r.Group, r.Block, got(r.Group, r.Block), final[i], want)
		}
	}
	return nil
}

// layerOrder lays layers out in the engine's layer order (every layer id of
// every group, ascending): [group][k] spans.
func layerOrder(layers [][]staging.LayerSpans) [][][]staging.Span {
	var ids []int
	for _, group := range layers {
		for _, ls := range group {
			ids = append(ids, ls.Layer)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([][][]staging.Span, len(layers))
	for g, group := range layers {
		out[g] = make([][]staging.Span, len(ids))
		for _, ls := range group {
			out[g][slices.Index(ids, ls.Layer)] = ls.Spans
		}
	}
	return out
}

// slotOf is the staging slot the engine lent row r: its group's run, at the
// row's place in it (a layered trial's blocks are 0..n-1 in every group).
func slotOf(runs []staging.Run, r staging.Row) int {
	for _, run := range runs {
		if run.Group == r.Group {
			return run.First + r.Block
		}
	}
	return -1
}

// deviceRows reads every row of the request from the device.
func deviceRows(dev *sim.Device, rows []staging.Row, slotBytes int) [][]byte {
	out := make([][]byte, len(rows))
	for i, r := range rows {
		out[i] = make([]byte, slotBytes)
		_ = dev.Read(out[i], r.Device)
	}
	return out
}
