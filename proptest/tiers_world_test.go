package proptest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/staging"
)

// The tiered world (SPEC §4 rule 19): the engine's backend is a stack of
// tiers (backend/tiers) over one to three tier doubles. A tier double is the
// suite's adversary — it keeps what it was handed and resolves it lazily,
// writes late until its own Quiesce says true, blocks, fails, answers false
// and then true, escapes, changes its answer — with what a tier needs
// besides: a completion callback (the stack waits on it), answers per tier
// for the units the tiers above it left, and a record of every submission
// it saw (fetch, write-through publication, promotion), from which the
// model computes what the stack must answer without asking package tiers.
// Every tier double shares one lock, which guards the staging bytes they
// write and the model reads.

// tierRole is what a tier double was handed a lease's units for.
type tierRole uint8

const (
	tierFetch   tierRole = iota // a fetch: it writes the rows it serves
	tierPublish                 // a write-through publication: it reads the rows
	tierPromote                 // a promotion of units a lower tier served: it reads the rows
)

func (r tierRole) String() string { return [...]string{"fetch", "publish", "promotion"}[r] }

// tierRec is one submission a tier double saw. Guarded by the shared lock.
type tierRec struct {
	tier     int
	serial   int
	role     tierRole
	units    []contract.Unit
	rejected bool     // refused with ErrSubmissionRejected: nothing escaped
	escaped  bool     // failed after posting the transfer: it may write, and no attempt proves its end
	a        *attempt // nil when rejected
	// changed: the model changed its answer after the stack had read it
	// (whether a reader saw the change is tierWorld.changed's to say: the
	// model may change it back before any Poll).
	changed bool
	// saved holds, per unit index, what a row held before a write made
	// before the answer; a unit it then does not serve gets it back (the
	// contract: the destinations of units not served are left untouched).
	saved map[int][]byte
}

// outcomeIfAny is the attempt's first answer, nil for none or no attempt.
// Guarded.
func (a *attempt) outcomeIfAny() contract.Outcome {
	if a == nil {
		return nil
	}
	return a.first
}

// ended reports whether the submission can touch memory no more. Guarded.
func (r *tierRec) ended() bool { return !r.escaped && (r.a == nil || r.a.ended) }

// tierWorld is what the tier doubles share: the lock, the memory, what the
// model knows of the leases, and the faults the doubles saw.
type tierWorld struct {
	mu      *sync.Mutex
	mem     *staging.Memory
	tiers   []*tierDouble
	promote bool         // the stack was built to promote
	fetches map[int]bool // serials of fetch leases (a publication of one is a promotion)
	gone    map[int]bool // serials whose slots the model saw return
	faults  []string
}

func newTierWorld(m *staging.Memory, n int, promote bool) *tierWorld {
	w := &tierWorld{mu: &sync.Mutex{}, mem: m, promote: promote, fetches: map[int]bool{}, gone: map[int]bool{}}
	for i := range n {
		d := &tierDouble{adversary: newAdversary(m), w: w, tier: i, waiters: map[*attempt][]func(){}, notYet: map[int]int{}}
		d.adversary.mu = w.mu
		w.tiers = append(w.tiers, d)
	}
	return w
}

func (w *tierWorld) fault(format string, args ...any) {
	w.faults = append(w.faults, fmt.Sprintf(format, args...))
}

// recs returns every submission of a lease's units, tier after tier.
// Guarded.
func (w *tierWorld) recs(serial int) []*tierRec {
	var out []*tierRec
	for _, d := range w.tiers {
		for _, r := range d.recs {
			if r.serial == serial {
				out = append(out, r)
			}
		}
	}
	return out
}

// rec is tier i's submission of the lease in a role (the first, for a
// promotion). Guarded.
func (w *tierWorld) rec(i, serial int, role tierRole) *tierRec {
	for _, r := range w.tiers[i].recs {
		if r.serial == serial && r.role == role {
			return r
		}
	}
	return nil
}

// tierDouble is one tier: the adversary's quiesce machinery and answers,
// per tier.
type tierDouble struct {
	*adversary
	w       *tierWorld
	tier    int
	fetcher bool // the stack fetches from it
	pub     bool // the stack publishes (and promotes) into it
	recs    []*tierRec
	waiters map[*attempt][]func() // completion callbacks not yet called
	notYet  map[int]int           // per lease: Quiesce calls answered false before true (with quiesceNotYet)
}

// tierHandle is what the stack holds of a tier double's attempt: the
// adversary's handle, with a completion callback.
type tierHandle struct {
	advAttempt
	d *tierDouble
}

var (
	_ contract.Notifier    = tierHandle{}
	_ contract.Cancellable = tierHandle{}
)

// Notify calls f once the attempt has an answer: at once if it has one.
func (h tierHandle) Notify(f func()) {
	h.d.mu.Lock()
	if h.a.outcome != nil {
		h.d.mu.Unlock()
		f()
		return
	}
	h.d.waiters[h.a] = append(h.d.waiters[h.a], f)
	h.d.mu.Unlock()
}

// answered sets a's answer and returns the callbacks to call once the lock
// is released. Guarded.
func (d *tierDouble) answered(a *attempt, o contract.Outcome) []func() {
	a.outcome = o
	fs := d.waiters[a]
	delete(d.waiters, a)
	return fs
}

func callAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

func (d *tierDouble) Fetch(ext contract.CacheExtent, _ contract.Route) (contract.Attempt, error) {
	return d.submit(ext, false)
}

func (d *tierDouble) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return d.submit(ext, true)
}

// submit records what the stack handed the tier, judges it (a tier handed a
// lease whose slots returned; a promotion no lower tier's proof allowed;
// bytes published or promoted that are not the rows' content), and answers
// as the model drew for this tier and lease.
func (d *tierDouble) submit(ext contract.CacheExtent, publish bool) (contract.Attempt, error) {
	d.mu.Lock()
	if ext.Len() == 0 {
		d.mu.Unlock()
		return nil, fmt.Errorf("tier %d: empty extent: %w", d.tier, contract.ErrSubmissionRejected)
	}
	serial, _, _, ok := parseName(ext.Unit(0).Name)
	if !ok {
		d.mu.Unlock()
		return nil, fmt.Errorf("tier %d: unknown name: %w", d.tier, contract.ErrSubmissionRejected)
	}
	r := &tierRec{tier: d.tier, serial: serial, units: ext.Units()}
	switch {
	case !publish:
		r.role = tierFetch
	case d.w.fetches[serial]:
		r.role = tierPromote
	default:
		r.role = tierPublish
	}
	d.judgeLocked(r)
	d.recs = append(d.recs, r)
	if d.reject[serial] {
		r.rejected = true
		d.mu.Unlock()
		return nil, fmt.Errorf("tier %d: lease %d: %w", d.tier, serial, contract.ErrSubmissionRejected)
	}
	a := &attempt{serial: serial, publish: publish, held: ext, units: ext.Units(), cancelMode: d.cancel[serial], mode: d.quiesce[serial], notYet: d.notYet[serial]}
	if a.mode == quiesceBlock {
		a.gate = make(chan struct{})
	}
	names := make([]contract.Name, len(a.units))
	for i, u := range a.units {
		names[i] = u.Name
	}
	a.asked = contract.NewNameSet(names...)
	r.a = a
	if d.escape[serial] {
		r.escaped = true
		d.mu.Unlock()
		return nil, fmt.Errorf("tier %d: lease %d: the transport failed after posting the transfer", d.tier, serial)
	}
	var fs []func()
	if d.instant[serial] { // a hit answered before the call returns
		fs = d.answered(a, contract.Delivered{Served: a.asked})
		d.writeServedLocked(a)
	}
	d.mu.Unlock()
	callAll(fs)
	return tierHandle{advAttempt{b: d.adversary, a: a}, d}, nil
}

// judgeLocked checks a submission as it comes, against what the model knows
// and what the other tiers saw. Guarded.
func (d *tierDouble) judgeLocked(r *tierRec) {
	if d.w.gone[r.serial] {
		d.w.fault("%s: tier %d was handed lease %d's units for a %v after the lease's slots returned", rule19Settle, d.tier, r.serial, r.role)
	}
	for _, x := range d.recs {
		if x.serial == r.serial && x.role == r.role && r.role != tierPromote {
			d.w.fault("%s: tier %d was handed lease %d's units for a %v twice", rule19Settle, d.tier, r.serial, r.role)
		}
	}
	if r.role == tierFetch && !d.w.fetches[r.serial] {
		d.w.fault("%s: tier %d was asked to fetch the units of lease %d, a publish", rule19Settle, d.tier, r.serial)
	}
	if r.role == tierPromote {
		d.w.judgePromotionLocked(r)
	}
	if r.role == tierFetch {
		return
	}
	// A publication or a promotion reads the rows: they must hold their
	// content (a publish: what its device->staging copy staged; a
	// promotion: what the lower tier served, no longer torn).
	for _, u := range r.units {
		_, g, blk, _ := parseName(u.Name)
		row, _ := d.mem.Row(u.LocalGroup, u.Local)
		if want := pattern(tagContent, r.serial, rowID(g, blk)); string(row) != string(want) {
			d.w.fault("%s: tier %d was handed lease %d's row (%d,%d) for a %v while it held %x, not its content %x; its submissions: %s", rule19Settle, d.tier, r.serial, g, blk, r.role, row, want, d.w.describe(r.serial))
		}
	}
}

// judgePromotionLocked: a promotion publishes exactly the units one lower
// tier served, after that tier's own access to them was proven over, only
// when no tier of the lease failed, and only when the stack promotes.
// Guarded.
func (w *tierWorld) judgePromotionLocked(r *tierRec) {
	if !w.promote {
		w.fault("%s: tier %d was promoted into, but the stack was built without promotion", rule19Settle, r.tier)
		return
	}
	names := make([]contract.Name, len(r.units))
	for i, u := range r.units {
		names[i] = u.Name
	}
	promoted := contract.NewNameSet(names...)
	for k := r.tier + 1; k < len(w.tiers); k++ {
		lower := w.rec(k, r.serial, tierFetch)
		if lower == nil || lower.a == nil {
			continue
		}
		d, ok := lower.a.first.(contract.Delivered)
		if !ok || !d.Served.Equal(promoted) {
			continue
		}
		if !lower.a.ended {
			w.fault("%s: lease %d's units served by tier %d were promoted into tier %d before tier %d proved its access over (torn bytes)", rule19Settle, r.serial, k, r.tier, k)
		}
		for _, x := range w.recs(r.serial) {
			if x.role == tierFetch && (x.rejected || x.escaped || x.a != nil && !isDelivered(x.a.first)) {
				w.fault("%s: lease %d was promoted into tier %d although tier %d's fetch did not deliver", rule19Settle, r.serial, r.tier, x.tier)
			}
		}
		return
	}
	w.fault("%s: tier %d was promoted lease %d's units %v, which no lower tier served", rule19Settle, r.tier, r.serial, names)
}

func isDelivered(o contract.Outcome) bool {
	_, ok := o.(contract.Delivered)
	return ok
}

// unwrap checks that every listed attempt is this tier's and returns the
// adversary's handles; one that is not is a fault (a tier asked about
// another tier's attempt, or the stack's own).
func (d *tierDouble) unwrap(method string, list []contract.Attempt) ([]contract.Attempt, error) {
	out := make([]contract.Attempt, len(list))
	for i, x := range list {
		h, ok := x.(tierHandle)
		if !ok || h.d != d {
			d.mu.Lock()
			d.w.fault("%s: tier %d's %s was asked about an attempt (%T) it never returned", rule19Settle, d.tier, method, x)
			d.mu.Unlock()
			return nil, fmt.Errorf("tier %d: %s: attempt %d (%T) was not returned by this tier", d.tier, method, i, x)
		}
		out[i] = h.advAttempt
	}
	return out, nil
}

func (d *tierDouble) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	inner, err := d.unwrap("Quiesce", list)
	if err != nil {
		return false, err
	}
	return d.adversary.Quiesce(ctx, inner)
}

// Settle waits, honouring ctx, until every listed attempt has an answer.
func (d *tierDouble) Settle(ctx context.Context, list []contract.Attempt) error {
	for _, x := range list {
		h, ok := x.(tierHandle)
		if !ok || h.d != d {
			return fmt.Errorf("tier %d: Settle: attempt %T was not returned by this tier", d.tier, x)
		}
		done := make(chan struct{})
		var once sync.Once
		h.Notify(func() { once.Do(func() { close(done) }) })
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// probingTier is a tier double with a non-blocking probe beside its
// Quiesce (contract.QuiesceProber), as the adversary's probing is.
type probingTier struct{ *tierDouble }

var _ contract.QuiesceProber = probingTier{}

func (p probingTier) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	inner, err := p.unwrap("TryQuiesce", list)
	if err != nil {
		return contract.AccessUnknown, err
	}
	return probing{p.adversary}.TryQuiesce(inner)
}

// ---- what the model makes a tier double do ----

// deliver answers Delivered with served (a fetch writes their rows' content;
// a publication stores what its rows hold), gives back what it wrote before
// the answer into units it does not serve, and calls the completion
// callbacks. With extra, the answer also names units it was never handed
// (written first, answered in one step: the stack polls on its own
// goroutine). A submission already proven over serves nothing.
func (w *tierWorld) deliver(r *tierRec, served []contract.Name, extra ...contract.Name) {
	w.mu.Lock()
	d := w.tiers[r.tier]
	ended := r.a.ended
	if ended {
		// Proven meanwhile (the stack and the engine ask on their own
		// goroutines): it may touch the rows no more, so it serves nothing.
		served, extra = nil, nil
	}
	set := contract.NewNameSet(served...)
	fs := d.answered(r.a, contract.Delivered{Served: set})
	d.writeServedLocked(r.a)
	for i, u := range r.a.units {
		if old, ok := r.saved[i]; ok && !set.Has(u.Name) && !ended {
			row, _ := w.mem.Row(u.LocalGroup, u.Local)
			copy(row, old)
		}
	}
	if len(extra) > 0 {
		r.a.outcome = contract.Delivered{Served: contract.NewNameSet(append(slices.Clone(served), extra...)...)}
	}
	w.mu.Unlock()
	callAll(fs)
}

// set answers o without writing.
func (w *tierWorld) set(r *tierRec, o contract.Outcome) {
	w.mu.Lock()
	fs := w.tiers[r.tier].answered(r.a, o)
	w.mu.Unlock()
	callAll(fs)
}

// lateWrite is a transfer that goes on touching memory until its own
// Quiesce says true, within what the contract allows it: before its answer,
// any unit it was handed (kept to be given back if it then does not serve
// it); after Delivered, only the units it served (torn, rewritten before it
// ends); after a failure or a cancel, any of them. A publication or a
// promotion still reading stores what its rows hold now. A tier whose
// answer the model changed writes no more: the change is the one contract
// breach the model draws, never bytes behind it (see change).
func (w *tierWorld) lateWrite(r *tierRec) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := r.a
	if a == nil || a.ended || r.changed {
		return
	}
	a.late++
	d := w.tiers[r.tier]
	if a.publish {
		for i := range a.held.Len() {
			u := a.held.Unit(i)
			if row, ok := w.mem.Row(u.LocalGroup, u.Local); ok {
				d.store[u.Name] = slices.Clone(row)
			}
		}
		return
	}
	served, delivered := a.outcome.(contract.Delivered)
	for i := range a.held.Len() {
		u := a.held.Unit(i)
		row, ok := w.mem.Row(u.LocalGroup, u.Local)
		switch {
		case !ok:
			continue
		case a.outcome == nil:
			if r.saved == nil {
				r.saved = map[int][]byte{}
			}
			if _, kept := r.saved[i]; !kept {
				r.saved[i] = slices.Clone(row)
			}
		case delivered && !served.Served.Has(u.Name):
			continue
		case delivered:
			a.torn = true
		}
		copy(row, pattern(tagLate, a.serial, 0xFF))
	}
}

// finishLocked ends a torn fetch's lagging write now: the rows its answer
// served hold their content again. Guarded.
func (w *tierWorld) finishLocked(r *tierRec) {
	d, ok := r.a.outcome.(contract.Delivered)
	if r.a.publish || !r.a.torn || !ok {
		return
	}
	for i := range r.a.held.Len() {
		u := r.a.held.Unit(i)
		if _, g, blk, _ := parseName(u.Name); d.Served.Has(u.Name) {
			if row, ok := w.mem.Row(u.LocalGroup, u.Local); ok {
				copy(row, pattern(tagContent, r.a.serial, rowID(g, blk)))
			}
		}
	}
	r.a.torn = false
}

// storedForeign lists what a tier stored that is not the content of the row
// it names: a publication or a promotion that read a slot recycled under
// it, or torn bytes. Guarded.
func (w *tierWorld) storedForeign() []string {
	var out []string
	for _, d := range w.tiers {
		for n, v := range d.store {
			serial, g, blk, ok := parseName(n)
			if want := pattern(tagContent, serial, rowID(g, blk)); !ok || string(v) != string(want) {
				out = append(out, fmt.Sprintf("tier %d stored %x under lease %d's row (%d,%d), not its content %x", d.tier, v, serial, g, blk, want))
			}
		}
	}
	return out
}

// heldChanged reports a submission not yet ended whose extent no longer
// says what it said when the stack handed it (rule 6). Guarded.
func (w *tierWorld) heldChanged() []string {
	var out []string
	for _, d := range w.tiers {
		for _, r := range d.recs {
			if r.a == nil || r.a.ended {
				continue
			}
			for i, u := range r.a.units {
				if r.a.held.Len() != len(r.a.units) || r.a.held.Unit(i) != u {
					out = append(out, fmt.Sprintf("tier %d, lease %d's %v: the extent it holds was rebuilt in place: unit %d was %+v", r.tier, r.serial, r.role, i, u))
					break
				}
			}
		}
	}
	return out
}
