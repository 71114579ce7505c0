package proptest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// SPEC §4 rules 15 and 19 (its settling half; model_test.go names its cancel
// half), named in the tiered model's failures.
const (
	rule15       = "rule 15, a backend's fault is the backend's"
	rule19Settle = "rule 19, every accessor settles"
)

// tierWait is the stack's own wait (tiers.WithWait) in the suite: far longer
// than a case runs, so that what the stack answers follows from what the
// tier doubles did, never from real time (no tier double's Quiesce waits
// for its context: quiesceTimeout is not drawn here).
const tierWait = time.Minute

// tierModel is the model suite drawing tiered backends (SPEC §4 rule 19):
// the shipped runner over a stack of 1–3 tier doubles (tiers_world_test.go),
// rapid choosing the stack (each tier fetching, publishing or both, with a
// non-blocking probe or without, promotion on or off) and each tier's
// behaviour per lease. It reuses the model's world, driver, grants and
// counts; what the engine must report follows docs/tiers.md, computed from
// what each tier double did (want), not from package tiers.
type tierModel struct {
	*model
	w     *tierWorld
	stack *tiers.Backend
	shim  *stackShim
}

func newTierModel(t *rapid.T) *tierModel {
	dev, err := sim.New(0, 1<<22)
	must(t, err)
	m := &model{t: t, clock: newClock(), dev: dev, bySerial: map[int]*mLease{}, byDevice: map[gpu.DevicePtr]*mLease{},
		owner: map[slotID]*mLease{}, lastOwner: map[slotID]*mLease{}, quarantined: map[slotID]bool{}, contained: map[readiness.Handle][]readiness.Containment{},
		inherited: map[slotID]bool{}, policy: readiness.Quarantine}
	inner, err := dev.NewStream()
	must(t, err)
	gs := make([]staging.Group, modelGroups)
	for g := range gs {
		gs[g] = staging.Group{Slots: modelSlots, SlotBytes: slotBytes}
	}
	m.mem, err = staging.NewMemory(staging.GoHeap, gs...)
	must(t, err)
	for g := range modelGroups {
		for s := range modelSlots {
			row, _ := m.mem.Row(g, s)
			fill(row, tagCanary)
		}
	}
	m.health = &xidHealth{dev: dev}
	m.spy = newSpy(dev, inner, m.mem)
	tm := &tierModel{model: m}
	m.spy.onCopy = tm.judgeCopy
	tm.w = newTierWorld(m.mem, rapid.IntRange(1, 3).Draw(t, "tiers"), rapid.IntRange(0, 3).Draw(t, "promotion") != 0)
	m.be = tm.w.tiers[0].adversary // its lock is every tier's: the model's reads exclude them all
	tm.stack = tm.buildStack(t)
	tm.shim = &stackShim{b: tm.stack, atts: map[int]contract.Attempt{}}
	m.outstanding = rapid.SampledFrom([]int{0, 0, 3}).Draw(t, "max_outstanding")
	m.w = worldConfig{mem: m.mem, be: m.be, stream: m.spy, health: m.health, clock: m.clock, policy: m.policy,
		outstanding: m.outstanding, fetcher: tm.shim, publisher: tm.shim}
	if rapid.Bool().Draw(t, "probes") {
		m.w.fetcher, m.w.publisher = probingShim{tm.shim}, probingShim{tm.shim}
	}
	m.d, err = newRunnerDriver(m.hooked())
	must(t, err)
	return tm
}

// buildStack draws each tier's roles and probe, and builds the stack.
func (tm *tierModel) buildStack(t *rapid.T) *tiers.Backend {
	var ts []tiers.Tier
	for i, d := range tm.w.tiers {
		var fp interface {
			contract.Fetcher
			contract.Publisher
		} = d
		if rapid.Bool().Draw(t, fmt.Sprintf("tier%d_probe", i)) {
			fp = probingTier{d}
		}
		tier := tiers.Tier{Name: fmt.Sprintf("t%d", i)}
		switch rapid.SampledFrom([]string{"both", "both", "fetch", "publish"}).Draw(t, fmt.Sprintf("tier%d_role", i)) {
		case "both":
			tier.Fetcher, tier.Publisher, d.fetcher, d.pub = fp, fp, true, true
		case "fetch":
			tier.Fetcher, d.fetcher = fp, true
		default:
			tier.Publisher, d.pub = fp, true
		}
		ts = append(ts, tier)
	}
	// A stack that cannot fetch (or publish) rejects every such lease: the
	// last tier does both then, so that the draws reach the tiers.
	if last := tm.w.tiers[len(ts)-1]; !slices.ContainsFunc(tm.w.tiers, func(d *tierDouble) bool { return d.fetcher }) ||
		!slices.ContainsFunc(tm.w.tiers, func(d *tierDouble) bool { return d.pub }) {
		fp := ts[len(ts)-1].Fetcher
		if fp == nil {
			fp = ts[len(ts)-1].Publisher.(contract.Fetcher)
		}
		ts[len(ts)-1].Fetcher, ts[len(ts)-1].Publisher = fp, fp.(contract.Publisher)
		last.fetcher, last.pub = true, true
	}
	opts := []tiers.Option{tiers.WithWait(tierWait)}
	if !tm.w.promote {
		opts = append(opts, tiers.WithoutPromotion())
	}
	stack, err := tiers.New(ts, opts...)
	must(t, err)
	t.Cleanup(func() { _ = stack.Close() })
	return stack
}

// stackShim is the stack as the engine takes it, keeping each lease's
// attempt. It hides the stack's probe (probingShim shows it).
type stackShim struct {
	b    *tiers.Backend
	mu   sync.Mutex
	atts map[int]contract.Attempt
}

func (s *stackShim) keep(ext contract.CacheExtent, a contract.Attempt, err error) (contract.Attempt, error) {
	if a != nil && ext.Len() > 0 {
		if serial, _, _, ok := parseName(ext.Unit(0).Name); ok {
			s.mu.Lock()
			s.atts[serial] = a
			s.mu.Unlock()
		}
	}
	return a, err
}

func (s *stackShim) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	a, err := s.b.Fetch(ext, r)
	return s.keep(ext, a, err)
}

func (s *stackShim) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	a, err := s.b.Publish(ext)
	return s.keep(ext, a, err)
}

func (s *stackShim) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	return s.b.Quiesce(ctx, list)
}

func (s *stackShim) Settle(ctx context.Context, list []contract.Attempt) error {
	return s.b.Settle(ctx, list)
}

func (s *stackShim) Probe(ctx context.Context, name []byte, units []contract.Name) (contract.NameSet, bool, error) {
	return s.b.Probe(ctx, name, units)
}

func (s *stackShim) OpenRoute(h map[string]string) (contract.Route, error) { return s.b.OpenRoute(h) }

type probingShim struct{ *stackShim }

func (p probingShim) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	return p.b.TryQuiesce(list)
}

// ---- what the stack must answer, from what each tier double did ----

// tierWant is what the engine must report for a lease: an outcome kind
// (NoOutcome while the tiers have not all answered), the names served or
// accepted, and a cancel's by_peer.
type tierWant struct {
	kind   readiness.OutcomeKind
	served contract.NameSet
	byPeer bool
}

func delivered(served []contract.Name, rows int) tierWant {
	w := tierWant{served: contract.NewNameSet(served...)}
	switch n := w.served.Len(); {
	case n == 0:
		w.kind = readiness.Missed
	case n == rows:
		w.kind = readiness.Served
	default:
		w.kind = readiness.Partial
	}
	return w
}

// want is docs/tiers.md's table applied to the tier doubles' records: a
// fetch asks the tiers that fetch in order, each for the units the ones
// above it did not serve, and is Delivered with the union only when each
// tier asked delivered; the first tier that rejected, escaped, failed,
// served a name it was not handed or was cancelled ends it, Failed (or
// Cancelled) — never a miss, never Delivered over a failed tier's units — and
// a rejection by the first tier is the stack's. A publication is written
// through to every tier that publishes at once. Guarded.
func (w *tierWorld) want(l *mLease) tierWant {
	if l.kind == readiness.Publish {
		return w.wantPublish(l)
	}
	left := map[contract.Name]bool{}
	for _, r := range l.rows {
		left[r.Name] = true
	}
	var served []contract.Name
	asked := false
	for i, d := range w.tiers {
		if !d.fetcher || len(left) == 0 {
			continue
		}
		r := w.rec(i, l.serial, tierFetch)
		switch {
		case r == nil:
			return tierWant{}
		case r.rejected && !asked:
			return tierWant{kind: readiness.Rejected}
		case r.rejected, r.escaped:
			return tierWant{kind: readiness.Failed}
		}
		asked = true
		switch o := r.a.first.(type) {
		case nil:
			return tierWant{}
		case contract.Failed:
			return tierWant{kind: readiness.Failed}
		case contract.Cancelled:
			return tierWant{kind: readiness.Cancelled, byPeer: o.ByPeer}
		case contract.Delivered:
			if r.a.extra {
				return tierWant{kind: readiness.Failed}
			}
			for n := range o.Served.All() {
				if left[n] {
					delete(left, n)
					served = append(served, n)
				}
			}
		}
	}
	if !asked {
		return tierWant{kind: readiness.Rejected} // no tier fetches
	}
	return delivered(served, len(l.rows))
}

func (w *tierWorld) wantPublish(l *mLease) tierWant {
	var recs []*tierRec
	for i, d := range w.tiers {
		if !d.pub {
			continue
		}
		r := w.rec(i, l.serial, tierPublish)
		if r == nil {
			return tierWant{}
		}
		recs = append(recs, r)
	}
	rejected := 0
	for _, r := range recs {
		switch {
		case r.rejected:
			rejected++
		case !r.escaped && r.a.first == nil:
			return tierWant{} // the stack waits for every tier's answer
		}
	}
	switch {
	case rejected == len(recs):
		return tierWant{kind: readiness.Rejected}
	case rejected > 0:
		return tierWant{kind: readiness.Failed}
	}
	var accepted []contract.Name
	var cancelled *tierWant
	for _, r := range recs {
		if r.escaped || r.a.extra {
			return tierWant{kind: readiness.Failed}
		}
		switch o := r.a.first.(type) {
		case contract.Failed:
			return tierWant{kind: readiness.Failed}
		case contract.Cancelled:
			if cancelled == nil || o.ByPeer {
				cancelled = &tierWant{kind: readiness.Cancelled, byPeer: o.ByPeer}
			}
		case contract.Delivered:
			accepted = slices.AppendSeq(accepted, o.Served.All())
		}
	}
	if cancelled != nil {
		return *cancelled
	}
	return delivered(accepted, len(l.rows))
}

// changed reports whether a tier the stack's answer is built from (its
// fetch or write-through, not a promotion) gave the stack a changed answer
// (rule 3): a Poll after the first answered otherwise (attempt.changes), or
// its answer when its own Quiesce proved its access over differs from the
// first (attempt.changedBeforeEnd: the stack's re-poll at its proof, after
// every tier's, reads that answer). That is a changed answer exactly as any
// reader of Poll can see one. That the model's change action ran
// (tierRec.changed) is not: a tier changed, then changed back before any
// Poll read it (Delivered{} → Failed → Delivered{}, and Delivered{} at its
// proof) gave every Poll the same answer, and no stack — nor the engine over
// that tier alone — can tell it from a tier that never changed
// (TestTierOracleChangedIsWhatAPollCanSee). Guarded.
func (w *tierWorld) changed(serial int) bool {
	for _, r := range w.recs(serial) {
		if r.role != tierPromote && r.a.answerChanged() {
			return true
		}
	}
	return false
}

// answerChanged reports whether a Poll of the attempt answered otherwise
// than its first answer, or its answer at its proof differs from the first.
// Guarded.
func (a *attempt) answerChanged() bool {
	return a != nil && (a.changes > 0 || a.changedBeforeEnd)
}

// accessor names a submission of the lease that may still touch its slots
// (an attempt not proven over, or one that escaped), or "" when none may.
// Guarded.
func (w *tierWorld) accessor(serial int) string {
	for _, r := range w.recs(serial) {
		if !r.ended() {
			return fmt.Sprintf("tier %d's %v (escaped %v)", r.tier, r.role, r.escaped)
		}
	}
	return ""
}

// mayStillTouch is accessor, taking the lock.
func (tm *tierModel) mayStillTouch(l *mLease) string {
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	return tm.w.accessor(l.serial)
}

// escaped reports whether a submission of the lease escaped: its end can
// never be proven, so the lease can only be contained. Guarded.
func (w *tierWorld) escaped(serial int) bool {
	for _, r := range w.recs(serial) {
		if r.escaped {
			return true
		}
	}
	return false
}

// ---- actions ----

func (tm *tierModel) lend(t *rapid.T) {
	m := tm.model
	m.serials++
	l := &mLease{serial: m.serials, releasedAt: -1, refused: map[gpu.DevicePtr]bool{}, kind: readiness.Fetch}
	if rapid.IntRange(0, 2).Draw(t, "publish") == 0 {
		l.kind = readiness.Publish
	}
	l.groups = rapid.IntRange(1, modelGroups).Draw(t, "groups")
	l.blocks = rapid.IntRange(1, 4).Draw(t, "blocks")
	// Any tier may answer a fetch at submission, the first on the engine's
	// round, the others on the stack's goroutine: a slot may hold the
	// lease's content before the model sees it granted (granted, gone).
	l.instant = l.kind == readiness.Fetch
	req := readiness.Request{Kind: l.kind}
	for g := range l.groups {
		for b := range l.blocks {
			p, err := m.dev.Alloc(slotBytes)
			must(t, err)
			tag := tagDevice
			if l.kind == readiness.Publish {
				tag = tagContent
			}
			must(t, m.dev.Write(p, pattern(tag, l.serial, rowID(g, b))))
			req.Rows = append(req.Rows, staging.Row{Name: nameOf(l.serial, g, b), Group: g, Block: b, Device: p})
		}
	}
	l.rows = req.Rows
	tm.drawTiers(t, l)
	h, err := m.d.lend(req)
	switch {
	case m.hopeless(l.groups, l.blocks):
		if !errors.Is(err, readiness.ErrUngrantable) {
			m.fail(rule8, "Lend of %d blocks over %d groups, which no run quarantine left could hold = %v; want ErrUngrantable", l.blocks, l.groups, err)
		}
		return
	case err != nil:
		m.fail(ruleA, "Lend of %d rows: %v", len(req.Rows), err)
	}
	l.h, l.lentAt = h, m.clock.Now()
	m.leases = append(m.leases, l)
	m.index(l)
	m.bySerial[l.serial] = l
}

// drawTiers draws how each tier answers the lease's submissions: rejected,
// escaped, answered at once, its cancel answer, and a first Quiesce that
// blocks until a gate opens, or answers false before true.
func (tm *tierModel) drawTiers(t *rapid.T, l *mLease) {
	type draw struct {
		reject, escape, instant bool
		cancel                  cancelMode
		block                   bool
		notYet                  int // > 0: its Quiesce answers false that many times, then true
	}
	// one in n, drawn away from rapid's favourite small values, so that a
	// rejection or an escape — each of which ends a lease, an escape
	// quarantining its slots for good — stays rare enough for the pool to
	// last a sequence; shrinking still moves toward none of them.
	oneIn := func(n int, label string) bool { return rapid.IntRange(0, n-1).Draw(t, label) == n/2 }
	draws := make([]draw, len(tm.w.tiers))
	for i := range draws {
		draws[i] = draw{
			reject:  oneIn(16, fmt.Sprintf("t%d_reject", i)),
			escape:  oneIn(48, fmt.Sprintf("t%d_escape", i)),
			instant: oneIn(6, fmt.Sprintf("t%d_instant", i)),
			cancel:  cancelMode(rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("t%d_cancel_mode", i))),
			block:   oneIn(8, fmt.Sprintf("t%d_blocking_quiesce", i)),
		}
		// One tier in three proves late — false once or twice, then true —
		// so that leases wait on one tier while the others are done, and an
		// answer may change between the stack's and its proof.
		if oneIn(3, fmt.Sprintf("t%d_late_proof", i)) {
			draws[i].notYet = rapid.IntRange(1, 2).Draw(t, fmt.Sprintf("t%d_not_yet", i))
		}
	}
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	tm.w.fetches[l.serial] = l.kind == readiness.Fetch
	for i, d := range tm.w.tiers {
		x := draws[i]
		d.reject[l.serial], d.escape[l.serial], d.instant[l.serial], d.cancel[l.serial] = x.reject, x.escape, x.instant, x.cancel
		switch {
		case x.block:
			d.quiesce[l.serial] = quiesceBlock
		case x.notYet > 0:
			d.quiesce[l.serial], d.notYet[l.serial] = quiesceNotYet, x.notYet
		}
	}
}

// pick draws one of the submissions f accepts, in a fixed order.
func (tm *tierModel) pickRec(t *rapid.T, f func(r *tierRec) bool) *tierRec {
	tm.w.mu.Lock()
	var cands []*tierRec
	for _, d := range tm.w.tiers {
		for _, r := range d.recs {
			if r.a != nil && f(r) {
				cands = append(cands, r)
			}
		}
	}
	tm.w.mu.Unlock()
	if len(cands) == 0 {
		return nil
	}
	return pick(t, "submission", cands)
}

// outcome makes a tier answer one of its submissions: all, some or none of
// what it was handed, failed, cancelled, or with a name it was not handed.
func (tm *tierModel) outcome(t *rapid.T) {
	r := tm.pickRec(t, func(r *tierRec) bool { return r.a.outcome == nil })
	if r == nil {
		return
	}
	var asked []contract.Name
	for _, u := range r.units {
		asked = append(asked, u.Name)
	}
	// A fetch misses more often than a single backend's: what a tier does
	// not serve goes to the next one.
	kinds := []string{"all", "all", "some", "some", "none", "none", "failed", "cancelled", "extra"}
	tm.w.mu.Lock()
	if r.a.ended { // it may touch memory no more: only answers that write nothing
		kinds = []string{"none", "failed", "cancelled"}
	}
	tm.w.mu.Unlock()
	switch rapid.SampledFrom(kinds).Draw(t, "outcome") {
	case "all":
		tm.w.deliver(r, asked)
	case "some":
		var some []contract.Name
		for i, n := range asked {
			if rapid.Bool().Draw(t, fmt.Sprintf("serve%d", i)) {
				some = append(some, n)
			}
		}
		if len(some) == 0 || len(some) == len(asked) {
			some = asked[:max(1, len(asked)-1)]
		}
		tm.w.deliver(r, some)
	case "none":
		tm.w.deliver(r, nil)
	case "failed":
		tm.w.set(r, contract.Failed{Reason: "tier double: transport error"})
	case "cancelled":
		tm.w.set(r, contract.Cancelled{ByPeer: rapid.Bool().Draw(t, "by_peer")})
	case "extra":
		tm.w.deliver(r, asked, nameOf(9999, 0, 0))
	}
}

// change makes a tier change an answer the stack has read, before its own
// proof: usually within its kind (fewer names served), sometimes to another.
// The answer alone changes: a lagging write of the rows it served finishes
// first, and it writes no more (lateWrite). (A tier
// that also wrote what its first answer vouched for could get torn bytes
// promoted into the tiers above it: the stack promotes on the first answer,
// after the serving tier's proof alone. The suite does not draw that.)
// Drawn again for the same submission, a change may undo the last one
// (Failed, then Delivered{} again): whether any reader saw it is
// tierWorld.changed's to say.
func (tm *tierModel) change(t *rapid.T) {
	r := tm.pickRec(t, func(r *tierRec) bool { return r.a.first != nil && !r.a.ended })
	if r == nil {
		return
	}
	across := rapid.IntRange(0, 3).Draw(t, "across") == 0
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	tm.w.changeLocked(r, across)
}

// changeLocked is change, once drawn: a Delivered serving names serves one
// fewer (or, across, is Failed); a Delivered serving none is Failed; any
// other answer becomes Delivered{}. Guarded.
func (w *tierWorld) changeLocked(r *tierRec, across bool) {
	if r.a.ended { // proven meanwhile, on the stack's or the engine's goroutine: too late to change
		return
	}
	r.changed = true
	w.finishLocked(r)
	switch o := r.a.outcome.(type) {
	case contract.Delivered:
		if o.Served.Len() > 0 && !across {
			fewer := slices.SortedFunc(o.Served.All(), func(x, y contract.Name) int { return slices.Compare(x[:], y[:]) })
			r.a.outcome = contract.Delivered{Served: contract.NewNameSet(fewer[:len(fewer)-1]...)}
			return
		}
		r.a.outcome = contract.Failed{Reason: "tier double: changed its mind"}
	default:
		r.a.outcome = contract.Delivered{}
	}
}

// quiesceMode sets how a tier answers Quiesce for one of its submissions
// not yet proven (never quiesceTimeout: see tierWait).
func (tm *tierModel) quiesceMode(t *rapid.T) {
	r := tm.pickRec(t, func(r *tierRec) bool { return !r.a.ended })
	if r == nil {
		return
	}
	mode := rapid.SampledFrom([]quiesceMode{quiesceTrue, quiesceFalse, quiesceError, quiesceBlock, quiesceNotYet}).Draw(t, "mode")
	notYet := rapid.IntRange(1, 3).Draw(t, "not_yet")
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	if r.a.mode == quiesceBlock && r.a.gate != nil {
		close(r.a.gate) // a call waiting on it answers; the new mode holds from now on
		r.a.gate = nil
	}
	r.a.mode, r.a.notYet = mode, notYet
	if mode == quiesceBlock {
		r.a.gate = make(chan struct{})
	}
}

// unblock opens every tier's gates: blocked Quiesce calls answer true.
func (tm *tierModel) unblock() {
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	for _, d := range tm.w.tiers {
		for _, r := range d.recs {
			if a := r.a; a != nil && a.mode == quiesceBlock && a.gate != nil {
				close(a.gate)
				a.gate, a.mode = nil, quiesceTrue
			}
		}
	}
}

func (tm *tierModel) lateWrite(t *rapid.T) {
	if r := tm.pickRec(t, func(r *tierRec) bool { return !r.a.ended }); r != nil {
		tm.w.lateWrite(r)
	}
}

// copyEvent completes the oldest copy event (the tiered suite fails no
// copy: the engine's copy faults are the plain model's).
func (tm *tierModel) copyEvent(*rapid.T) {
	tm.w.mu.Lock() // the copy reads staging a tier may be writing
	defer tm.w.mu.Unlock()
	tm.spy.resolve(true)
}

func (tm *tierModel) release(t *rapid.T) {
	var cands []*mLease
	for _, l := range tm.live() {
		if !l.releaseReq {
			cands = append(cands, l)
		}
	}
	if len(cands) == 0 {
		return
	}
	l := pick(t, "lease", cands)
	if err := tm.d.release(l.h); err != nil {
		tm.fail(rule7, "Release(%v) of a live lease: %v", l.h, err)
	}
	l.releaseReq, l.releasedAt = true, tm.step
}

// cancel is the owner's cancel: a lease still waiting for the stack's
// answer latches a local Cancelled at once (and the stack is asked to stop
// handing units on); one not yet submitted is withdrawn; any other refuses.
func (tm *tierModel) cancel(t *rapid.T) {
	live := tm.live()
	if len(live) == 0 {
		return
	}
	l := pick(t, "lease", live)
	info, err := tm.d.lease(l.h)
	if err != nil {
		return
	}
	_, err = tm.d.cancel(l.h)
	after, _ := tm.d.lease(l.h)
	switch {
	case info.Outcome == readiness.NoOutcome && info.State == readiness.StateRequested:
		if err != nil || after.Outcome != readiness.Cancelled || after.ByPeer {
			tm.fail(ruleCancel, "Cancel of lease %d waiting for the stack's answer: %v, then %v (by peer %v); want a local Cancelled at once", l.serial, err, after.Outcome, after.ByPeer)
		}
		l.cancelled = true
	case err == nil:
		l.cancelled = true
		l.withdrawn = info.Outcome == readiness.NoOutcome && info.State != readiness.StateAdmitted
	}
}

// ---- checks ----

// round runs the engine and checks it. (The stack answers on its own
// goroutine, after the tiers did: even a synced round may come before the
// engine hears of it, so no check expects an outcome from a round; the
// liveness phases do.)
func (tm *tierModel) round(synced bool) {
	tm.step++
	if err := tm.d.round(synced); err != nil {
		tm.fail(rule8, "the engine did not catch up: %v", err)
	}
	if err := tm.d.err(); err != nil {
		tm.fail(rule15, "the engine halted with a stack of tiers: %v", err)
	}
	tm.check()
}

// check compares the engine with the model after a step.
func (tm *tierModel) check() {
	tm.t.Helper()
	tm.w.mu.Lock()
	faults := slices.Concat(tm.w.faults, tm.w.storedForeign(), tm.w.heldChanged())
	tm.w.mu.Unlock()
	for _, f := range faults {
		tm.t.Fatalf("%s", f)
	}
	for _, f := range tm.copyFaults {
		tm.t.Fatalf("%s", f)
	}
	for _, l := range tm.leases {
		if !l.gone {
			tm.checkLease(l)
		}
	}
	tm.checkBytes()
	tm.checkCounts()
}

func (tm *tierModel) checkLease(l *mLease) {
	info, err := tm.d.lease(l.h)
	if err != nil && !errors.Is(err, readiness.ErrStaleHandle) {
		tm.fail(rule7, "Lease(%v) = %v; want the lease or ErrStaleHandle", l.h, err)
	}
	if err != nil || info.State == readiness.StateReleased {
		tm.gone(l)
		return
	}
	if !l.granted && info.State != readiness.StateWaiting {
		tm.granted(l, info.State)
	}
	switch info.State {
	case readiness.StateAccessFenced, readiness.StateLogicallyComplete:
		if who := tm.mayStillTouch(l); who != "" {
			tm.fail(rule19Settle, "lease %d is %v while %s of its units may still touch its slots", l.serial, info.State, who)
		}
		if info.State == readiness.StateLogicallyComplete {
			if tm.copiesInFlight(l) {
				tm.fail(rule1, "lease %d is logically_complete while a local copy touching its slots is in flight", l.serial)
			}
			tm.checkDevice(l, info)
		}
	case readiness.StateQuarantined:
		tm.sawQuarantine(l)
	}
	tm.checkOutcome(l, info)
}

// checkOutcome holds the engine's outcome to what the tiers did (want):
// exactly its kind once the stack answered — a miss only when every tier
// asked missed and none failed, a failure never a miss — or a failure when a
// tier changed an answer the stack had read (rule 3), and never a trusted
// delivery once the lease is fenced after such a change; a timeout only past
// the request deadline; a local cancel only for the owner's. A latched
// outcome never moves, except to a violation after a delivery.
func (tm *tierModel) checkOutcome(l *mLease, info readiness.LeaseInfo) {
	got := info.Outcome
	if l.seen != readiness.NoOutcome && got != l.seen && (got != readiness.Violation || (l.seen != readiness.Served && l.seen != readiness.Partial)) {
		tm.fail(rule3, "lease %d: the latched outcome moved from %v to %v", l.serial, l.seen, got)
	}
	l.seen = got
	if got == readiness.NoOutcome {
		return
	}
	tm.w.mu.Lock()
	want, changed := tm.w.want(l), tm.w.changed(l.serial)
	tm.w.mu.Unlock()
	fenced := info.State == readiness.StateAccessFenced || info.State == readiness.StateLogicallyComplete
	switch {
	case changed && fenced && (got == readiness.Served || got == readiness.Partial):
		tm.fail(rule3, "lease %d: a tier changed an answer the stack had read before the stack's proof; the fenced lease still reports %v, trusted", l.serial, got)
	case got == readiness.TimedOut:
		if tm.clock.Now().Before(l.lentAt.Add(requestTimeout)) {
			tm.fail(rule9, "lease %d timed out before its request deadline", l.serial)
		}
	case got == readiness.Cancelled && !info.ByPeer && l.cancelled:
	case changed && (got == readiness.Failed || got == readiness.Violation):
	case want.kind == readiness.NoOutcome:
		tm.fail(rule2, "lease %d reports %v (%q), but its tiers have not all answered", l.serial, got, info.Reason)
	case got != want.kind || got == readiness.Cancelled && info.ByPeer != want.byPeer:
		tm.fail(rule2, "lease %d reports %v (by peer %v, %q); its tiers' answers make it %v (by peer %v)", l.serial, got, info.ByPeer, info.Reason, want.kind, want.byPeer)
	}
}

// checkDevice: a logically complete fetch's device rows hold the content of
// every row a tier served (and the engine reports served), and their old
// bytes elsewhere.
func (tm *tierModel) checkDevice(l *mLease, info readiness.LeaseInfo) {
	if l.kind != readiness.Fetch || l.releaseReq {
		return
	}
	tm.w.mu.Lock()
	want := tm.w.want(l)
	tm.w.mu.Unlock()
	delivered := info.Outcome == readiness.Served || info.Outcome == readiness.Partial
	for _, r := range l.rows {
		got := make([]byte, slotBytes)
		must(tm.t, tm.dev.Read(got, r.Device))
		exp := pattern(tagDevice, l.serial, rowID(r.Group, r.Block))
		if delivered && want.served.Has(r.Name) {
			exp = pattern(tagContent, l.serial, rowID(r.Group, r.Block))
		}
		if string(got) != string(exp) {
			tm.fail(rule4, "lease %d (%v): device row (%d,%d) holds %x, not %x: copied torn, early, unserved, or from a recycled slot", l.serial, info.Outcome, r.Group, r.Block, got, exp)
		}
	}
}

// judgeCopy is called by the spy as each copy is queued: a staging→device
// copy of a fetched row is issued only once every tier handed the lease's
// units proved its own access over (promotions included), only for a row a
// tier served in a stack that delivered, and never once the owner released
// the lease.
func (tm *tierModel) judgeCopy(c spyCopy) {
	l := tm.byDevice[c.dev]
	if l == nil || !c.toDevice {
		return
	}
	var name contract.Name
	for _, r := range l.rows {
		if r.Device == c.dev {
			name = r.Name
		}
	}
	tm.w.mu.Lock()
	who, want, changed := tm.w.accessor(l.serial), tm.w.want(l), tm.w.changed(l.serial)
	tm.w.mu.Unlock()
	switch {
	case who != "":
		tm.copyFaults = append(tm.copyFaults, fmt.Sprintf("%s: lease %d: a staging→device copy was issued while %s of its units may still touch its slots", rule19Settle, l.serial, who))
	case l.releaseReq:
		tm.copyFaults = append(tm.copyFaults, fmt.Sprintf("%s: lease %d: a copy into its device rows was issued after the owner released it", rule4, l.serial))
	case changed:
		tm.w.mu.Lock()
		desc := tm.w.describe(l.serial)
		tm.w.mu.Unlock()
		tm.copyFaults = append(tm.copyFaults, fmt.Sprintf("%s: lease %d: a row was copied to the device although a tier changed an answer the stack had read, before its proof; its submissions: %s", rule3, l.serial, desc))
	case !want.served.Has(name) || (want.kind != readiness.Served && want.kind != readiness.Partial):
		tm.copyFaults = append(tm.copyFaults, fmt.Sprintf("%s: lease %d: a row no tier served in a delivered stack (%v) was copied to the device", rule4, l.serial, want.kind))
	}
}

// gone checks that a lease the engine released was allowed to go: its
// slots return only when no tier handed its units may still touch them
// (rule 19) and no local copy is in flight. From then on a tier handed its
// units is a fault (tierDouble.judgeLocked), and its slots get fresh
// canaries.
func (tm *tierModel) gone(l *mLease) {
	l.gone = true
	switch {
	case l.quarantined:
		if !l.releaseReq {
			tm.fail(rule5, "quarantined lease %d was retired without the owner releasing it", l.serial)
		}
		return
	case !l.releaseReq && !tm.closed && !l.withdrawn:
		tm.fail(rule1, "lease %d was released without a release request, a cancel before its submission, or Close", l.serial)
	}
	if who := tm.mayStillTouch(l); who != "" {
		tm.fail(rule19Settle, "lease %d's slots returned while %s of its units may still touch them", l.serial, who)
	}
	if tm.copiesInFlight(l) {
		tm.fail(rule1, "lease %d's slots returned while a local copy touching them was in flight", l.serial)
	}
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	tm.w.gone[l.serial] = true
	for _, s := range l.slots {
		delete(tm.owner, s)
		row, _ := tm.mem.Row(s.g, s.s)
		if tm.rewrittenAtSubmission(row) {
			continue // lent again, and written by a tier, in the round that released it
		}
		fill(row, tagCanary)
	}
}

// sawQuarantine records a quarantine: never before the grace since the
// lease was even lent (a drain starts at a failure, or at the request
// deadline), signalled once.
func (tm *tierModel) sawQuarantine(l *mLease) {
	if l.quarantined {
		return
	}
	l.quarantined = true
	for _, s := range l.slots {
		tm.quarantined[s] = true
	}
	if tm.clock.Now().Before(l.lentAt.Add(drainGrace)) {
		tm.fail(rule5, "lease %d was quarantined at %v, before the grace (%v) had passed since it was even lent (%v)", l.serial, tm.clock.Now(), drainGrace, l.lentAt)
	}
	if n := len(tm.contained[l.h]); n != 1 {
		tm.fail(rule5, "lease %d is quarantined; OnContainment was called %d times for it, want once", l.serial, n)
	}
}

// checkBytes reads every staging slot: a free one holds its canary; a lent
// one only what its own lease's grant, tiers or copies put there.
func (tm *tierModel) checkBytes() {
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	for g := range modelGroups {
		for s := range modelSlots {
			id := slotID{g, s}
			if tm.quarantined[id] {
				continue
			}
			row, _ := tm.mem.Row(g, s)
			l := tm.owner[id]
			if l == nil {
				if !filled(row, tagCanary) {
					tm.fail(rule19Settle, "free slot %v was written after it returned: %x", id, row)
				}
				continue
			}
			r := l.rows[slices.Index(l.slots, id)]
			own := rowID(r.Group, r.Block)
			if string(row) != string(pattern(tagStamp, l.serial, own)) &&
				string(row) != string(pattern(tagContent, l.serial, own)) &&
				string(row) != string(pattern(tagLate, l.serial, 0xFF)) {
				tm.fail(rule19Settle, "slot %v of lease %d holds bytes another transfer wrote: %x", id, l.serial, row)
			}
		}
	}
}

// ---- the run ----

// settle is the liveness half. First every tier cooperates — answers every
// submission, proves every access, every copy completes, the owner releases
// everything — and every lease none of whose submissions escaped must go
// before its containment deadline could pass; then the clock runs past
// every deadline and every lease must be gone or quarantined. At the end
// every slot is free or quarantined, Close drains, and the stack closes.
func (tm *tierModel) settle() {
	tm.unblock()
	tm.w.mu.Lock()
	for _, d := range tm.w.tiers {
		for _, r := range d.recs {
			if r.a != nil {
				r.a.mode, r.a.notYet = quiesceTrue, 0
			}
		}
		clear(d.quiesce) // submissions from now on (promotions) cooperate too
		clear(d.notYet)
	}
	tm.w.mu.Unlock()
	for i := 0; i < settleRounds && tm.stuck() != ""; i++ {
		tm.cooperate()
		time.Sleep(100 * time.Microsecond) // the stack's goroutine hands units on and promotes
		tm.clock.Advance(maxBackoff)
	}
	for _, l := range tm.live() {
		tm.w.mu.Lock()
		escaped := tm.w.escaped(l.serial)
		tm.w.mu.Unlock()
		if !escaped && !l.quarantined && tm.clock.Now().Before(l.lentAt.Add(requestTimeout+drainGrace)) {
			info, _ := tm.d.lease(l.h)
			tm.fail(rule8, "lease %d is still %v (%v, %q) after its tiers answered and proved everything, every copy landed and the owner released it (%s)", l.serial, info.State, info.Outcome, info.Reason, tm.stuck())
		}
	}
	for range 8 {
		tm.clock.Advance(drainGrace)
		tm.cooperate()
	}
	for _, l := range tm.live() {
		if !l.quarantined {
			info, _ := tm.d.lease(l.h)
			tm.fail(rule8, "lease %d is stuck in %v past every deadline", l.serial, info.State)
		}
	}
	if st := tm.d.stats(); st.SlotsFree+st.SlotsQuarantined != modelGroups*modelSlots {
		tm.fail(rule8, "at the end %d slots are free and %d quarantined of %d: every other slot must have returned", st.SlotsFree, st.SlotsQuarantined, modelGroups*modelSlots)
	}
	tm.closed = true
	tm.d.close()
	tm.round(true)
	if !tm.d.drained() {
		tm.fail(rule10, "the closed engine did not drain: %s", tm.pending())
	}
	if err := tm.stack.Close(); err != nil {
		tm.fail(rule10, "closing the stack: %v", err)
	}
	tm.check()
}

// settleRounds bounds the cooperative phase: maxBackoff of the model's
// clock each, well inside a request deadline (200 × 8 ms of 3 s).
const settleRounds = 200

// cooperate answers every submission not yet answered (all it was handed;
// one already proven over answers without writing), completes every copy,
// releases every lease and runs a synced round.
func (tm *tierModel) cooperate() {
	for {
		r := tm.pickFirst(func(r *tierRec) bool { return r.a.outcome == nil })
		if r == nil {
			break
		}
		tm.w.mu.Lock()
		ended := r.a.ended
		tm.w.mu.Unlock()
		if ended {
			tm.w.set(r, contract.Failed{Reason: "tier double: ended without an answer"})
			continue
		}
		var all []contract.Name
		for _, u := range r.units {
			all = append(all, u.Name)
		}
		tm.w.deliver(r, all)
	}
	tm.w.mu.Lock()
	for tm.spy.pending() {
		tm.spy.resolve(true)
	}
	tm.w.mu.Unlock()
	for _, l := range tm.live() {
		if !l.releaseReq {
			if err := tm.d.release(l.h); err != nil {
				tm.fail(rule8, "Release(%v): %v", l.h, err)
			}
			l.releaseReq, l.releasedAt = true, tm.step
		}
	}
	tm.round(true)
}

// pickFirst is the first submission f accepts, without drawing.
func (tm *tierModel) pickFirst(f func(r *tierRec) bool) *tierRec {
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	for _, d := range tm.w.tiers {
		for _, r := range d.recs {
			if r.a != nil && f(r) {
				return r
			}
		}
	}
	return nil
}

// stuck names a live lease that may still go: not quarantined, and none of
// its submissions escaped ("" when there is none).
func (tm *tierModel) stuck() string {
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	for _, l := range tm.live() {
		if !l.quarantined && !tm.w.escaped(l.serial) {
			return fmt.Sprintf("lease %d, its tiers' submissions: %s", l.serial, tm.w.describe(l.serial))
		}
	}
	return ""
}

// describe lists a lease's submissions, for a failure's message. Guarded.
func (w *tierWorld) describe(serial int) string {
	var out []string
	for _, r := range w.recs(serial) {
		s := fmt.Sprintf("tier %d %v rejected %v escaped %v", r.tier, r.role, r.rejected, r.escaped)
		if r.a != nil {
			s += fmt.Sprintf(" answer %v first %v ended %v mode %v late %d changed %v saved %d", r.a.outcome, r.a.first, r.a.ended, r.a.mode, r.a.late, r.changed, len(r.saved))
		}
		out = append(out, s)
	}
	return fmt.Sprint(out)
}

func (tm *tierModel) run(t *rapid.T) {
	then := func(action func(*rapid.T)) func(*rapid.T) {
		return func(t *rapid.T) {
			action(t)
			switch rapid.IntRange(0, 9).Draw(t, "then") {
			case 0:
				tm.check()
			case 1:
				tm.round(false)
			default:
				tm.round(true)
			}
		}
	}
	actions := []struct {
		name   string
		weight int
		do     func(*rapid.T)
	}{
		{"lend", 5, then(tm.lend)},
		{"round", 2, func(*rapid.T) { tm.round(true) }},
		{"outcome", 8, then(tm.outcome)},
		{"change", 2, then(tm.change)},
		{"quiesce", 2, then(tm.quiesceMode)},
		{"unblock", 1, then(func(*rapid.T) { tm.unblock() })},
		{"late_write", 2, then(tm.lateWrite)},
		{"copy", 4, then(tm.copyEvent)},
		{"release", 3, then(tm.release)},
		{"cancel", 1, then(tm.cancel)},
		{"tick", 2, then(func(t *rapid.T) {
			tm.clock.Advance(time.Duration(rapid.IntRange(1, 20).Draw(t, "advance_ms")) * time.Millisecond)
		})},
		{"time_passes", 1, then(func(t *rapid.T) {
			tm.clock.Advance(time.Duration(rapid.IntRange(1, 6).Draw(t, "advance_s")) * time.Second)
		})},
	}
	var names []string
	byName := map[string]func(*rapid.T){}
	for _, a := range actions {
		byName[a.name] = a.do
		for range a.weight {
			names = append(names, a.name)
		}
	}
	steps := rapid.IntRange(maxSteps()/3, maxSteps()).Draw(t, "steps")
	for range steps {
		byName[rapid.SampledFrom(names).Draw(t, "action")](t)
	}
	tm.settle()
}

// TestModelRunnerTiers is the model-based suite with a stack of tiers as
// the engine's backend (SPEC §4 rule 19): the runner users embed over
// backend/tiers over 1–3 adversarial tier doubles, every step checked
// against the model — the outcome against what each tier did (docs/tiers.md),
// no copy and no slot returned while any tier handed the lease's units
// (a promotion included) may still touch them, every byte of staging, what
// the tiers stored — then the liveness phases.
func TestModelRunnerTiers(t *testing.T) {
	var mu sync.Mutex
	reached := map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		tm := newTierModel(rt)
		tm.run(rt)
		mu.Lock()
		defer mu.Unlock()
		tm.reached(reached)
	})
	// What the sequences reached, for a reader of -v: a generator that
	// stops reaching the lower tiers, promotions or changed answers shows
	// here.
	keys := slices.Sorted(maps.Keys(reached))
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %d", k, reached[k]))
	}
	t.Logf("reached: %s", strings.Join(out, ", "))
}

// reached counts what one sequence reached into counts.
func (tm *tierModel) reached(counts map[string]int) {
	tm.w.mu.Lock()
	defer tm.w.mu.Unlock()
	counts[fmt.Sprintf("stacks of %d", len(tm.w.tiers))]++
	for _, d := range tm.w.tiers {
		for _, r := range d.recs {
			counts[fmt.Sprintf("tier %d %v", r.tier, r.role)]++
			switch {
			case r.escaped:
				counts["escaped submissions"]++
			case r.a == nil:
				counts["rejected submissions"]++
			case r.changed:
				counts["changed answers"]++
			}
			if r.a != nil && r.a.late > 0 {
				counts["late writers"]++
			}
			if o, ok := r.a.outcomeIfAny().(contract.Delivered); ok && r.tier > 0 && r.role == tierFetch && o.Served.Len() > 0 {
				counts["fetches a lower tier served"]++
			}
		}
	}
	for _, l := range tm.leases {
		if l.seen != readiness.NoOutcome {
			counts["leases "+l.seen.String()]++
		}
		if l.quarantined {
			counts["leases quarantined"]++
		}
	}
}
