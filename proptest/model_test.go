package proptest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// The rules of SPEC §4 (revision 2), by name. Every failure of the model suite
// starts with one of them, so a red run says which promise broke.
const (
	rule1  = "rule 1, no slot is recycled before its fence"
	rule2  = "rule 2, misses never appear as failures"
	rule3  = "rule 3, outcomes latch once"
	rule4  = "rule 4, logical delivery never races backend access"
	rule5  = "rule 5, unproven is retried, then contained — never assumed"
	rule6  = "rule 6, what a backend was handed stays the lease's until its fence"
	rule7  = "rule 7, stale handles are refused"
	rule8  = "rule 8, liveness"
	rule9  = "rule 9, deadlines never release"
	rule10 = "rule 10, shutdown"
	rule11 = "rule 11, caller mistakes are refused at the door"
	rule12 = "rule 12, a real store never eats staging capacity"
	rule17 = "rule 17, the engine owns the memory it lends"
	rule18 = "rule 18, safe for concurrent callers"
	rule19 = "rule 19, a cancel answers the logical and the physical result apart"
	ruleA  = "allocator invariant"
	// ruleCancel is SPEC §2's cancellation extension.
	ruleCancel = "cancel requests (§2), one per failed attempt, recorded, never a proof"
)

const (
	modelGroups = 2
	modelSlots  = 24
	bigBlocks   = 17 // 2 × 17 = 34 rows: past the 32-row line where views index their names
)

// mLease is the model's knowledge of one lease, built from what the test did
// and what the backend, the device and the bytes of staging showed.
type mLease struct {
	serial   int
	h        readiness.Handle
	kind     readiness.Kind
	groups   int
	blocks   int
	known    int
	rows     []staging.Row
	deadline time.Time // explicit deadline; zero: from the submission
	reject   bool
	escape   bool
	instant  bool // answered at submission
	lentAt   time.Time

	granted     bool
	slots       []slotID // in row order, once granted
	gone        bool
	quarantined bool
	releaseReq  bool
	releasedAt  int // the step the owner released it at; -1: not
	cancelled   bool
	withdrawn   bool // the owner's cancel came before its submission: the engine releases it without a release request
	closedReq   bool
	timedOut    bool // a synced round passed its deadline with no answer taken
	copyFailed  bool // a local copy touching it failed or its device was lost
	settledSeen bool // a synced round took in its access proof, and no copy of it was in flight
	refused     map[gpu.DevicePtr]bool
	seen        readiness.OutcomeKind
	submitAt    time.Time // when the backend was handed it
	// Layer by layer (rule 16), in the engine's layer order, plus one (0:
	// none): the highest layer a copy was queued for, the first layer a copy
	// that never landed belonged to, and the first the engine said failed.
	layerIssued int
	layerFailed int
	saidFailed  int // the first layer the engine answered failed, plus one
	// A layerwise publish (Request.Layerwise): how many layers the owner
	// reported computed, and whether it released the lease before it had
	// reported them all (the publish is withdrawn: nothing is submitted).
	layerwise       bool
	computed        int
	lentCopies      int // the spy's copies when it was lent
	withdrawnLayers bool
	// old: the lease belongs to an engine the model restarted away (rule
	// 17); its handle may name a lease of the new engine, so it is never
	// used again.
	old bool
}

// model is the reference the engine is checked against after every step.
type model struct {
	t     *rapid.T
	core  bool
	clock *sim.ManualClock
	dev   modelDevice
	spy   *spy
	mem   *staging.Memory
	be    *adversary
	d     driver
	step  int

	leases      []*mLease
	bySerial    map[int]*mLease
	byDevice    map[gpu.DevicePtr]*mLease
	rowBases    []gpu.DevicePtr // every lease's device rows, ascending (rowOf)
	plan        layerPlan       // the layers the engine's copies go in
	owner       map[slotID]*mLease
	lastOwner   map[slotID]*mLease // who held a free slot last, for a failure's message
	quarantined map[slotID]bool
	serials     int
	lost        bool
	health      *xidHealth
	closed      bool
	contained   map[readiness.Handle][]readiness.Containment
	copyFaults  []string
	policy      readiness.Policy
	halt        error           // why the engine halted (the fatal policy), once it did
	haltStats   readiness.Stats // the counters when it halted: nothing is released after
	halts       int             // OnHalt calls (the runner)
	outstanding int             // the bound on submissions outstanding (0: none)
	// Restarts (rule 17, the runner only): the world every engine is built
	// from, which engine's callbacks count (epoch), the engines restarted
	// away, the slots the memory keeps out of circulation for every later
	// engine, and what the running engine left out when its claim ended.
	w         worldConfig
	epoch     int
	retired   []driver
	inherited map[slotID]bool
	// unknownOut counts slots kept out of circulation that the model
	// cannot name: granted by the allocator to the head of the line in a
	// round that halted, before the core took the grant in (restart).
	unknownOut int
	handed     map[slotID]bool
}

func newModel(t *rapid.T, core bool) *model {
	dev, err := sim.New(0, 1<<22)
	must(t, err)
	return newModelOn(t, core, dev, staging.GoHeap)
}

// newModelOn is newModel on another device, with staging from host.
func newModelOn(t *rapid.T, onCore bool, dev modelDevice, host staging.Alloc) *model {
	m := &model{t: t, core: onCore, clock: newClock(), bySerial: map[int]*mLease{}, byDevice: map[gpu.DevicePtr]*mLease{},
		owner: map[slotID]*mLease{}, lastOwner: map[slotID]*mLease{}, quarantined: map[slotID]bool{}, contained: map[readiness.Handle][]readiness.Containment{}}
	var err error
	m.dev = dev
	inner, err := m.dev.NewStream()
	must(t, err)
	gs := make([]staging.Group, modelGroups)
	for g := range gs {
		gs[g] = staging.Group{Slots: modelSlots, SlotBytes: slotBytes}
	}
	m.mem, err = staging.NewMemory(host, gs...)
	must(t, err)
	for g := range modelGroups {
		for s := range modelSlots {
			row, _ := m.mem.Row(g, s)
			fill(row, tagCanary)
		}
	}
	m.health = &xidHealth{dev: m.dev}
	m.spy = newSpy(m.dev, inner, m.mem)
	m.spy.onCopy = m.judgeCopy
	m.spy.rowOf = m.rowOf
	m.plan = drawLayerPlan(t)
	m.be = newAdversary(m.mem)
	m.be.device = func(serial, g, b int) []byte { return pattern(tagContent, serial, rowID(g, b)) }
	m.be.staged = m.publishedSpans
	m.policy = rapid.SampledFrom([]readiness.Policy{readiness.Quarantine, readiness.Quarantine, readiness.Recover, readiness.Fatal}).Draw(t, "policy")
	m.outstanding = rapid.SampledFrom([]int{0, 0, 1, 3}).Draw(t, "max_outstanding")
	probes := rapid.Bool().Draw(t, "probes")
	w := worldConfig{mem: m.mem, be: m.be, stream: m.spy, health: m.health, clock: m.clock, probes: probes,
		policy:      m.policy,
		outstanding: m.outstanding,
		layers:      m.plan.cfg}
	if onCore {
		w.perLayer = rapid.Bool().Draw(t, "event_per_layer")
	}
	m.w, m.inherited = w, map[slotID]bool{}
	w = m.hooked()
	if onCore {
		m.d, err = newCoreDriver(w)
	} else {
		m.d, err = newRunnerDriver(w)
	}
	must(t, err)
	if n := m.d.layers(); n != len(m.plan.ids) {
		t.Fatalf("%s: the engine copies in %d layers; its layout has %d (%v)", rule16, n, len(m.plan.ids), m.plan.ids)
	}
	return m
}

func must(t rapid.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
}

func (m *model) fail(rule, format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s: %s", rule, fmt.Sprintf(format, args...))
}

// round runs the engine; a synced round is followed by the strong checks.
func (m *model) round(synced bool) {
	m.step++
	if err := m.d.round(synced); err != nil {
		m.fail(rule8, "the engine did not catch up: %v", err)
	}
	m.checkHalt(synced)
	// A halted engine takes nothing in: what a synced round would prove about
	// progress no longer holds, only safety does.
	m.check(synced && m.halt == nil)
}

// checkHalt holds rule 5's fatal policy: the engine halts at its first
// containment, tells its owner once, and from then on lends nothing and
// releases nothing. Under the other policies it never halts.
func (m *model) checkHalt(synced bool) {
	err := m.d.err()
	st := m.d.stats()
	switch {
	case err == nil && m.halt != nil:
		m.fail(rule5, "the engine halted (%v) and then ran again", m.halt)
	case err == nil:
		if m.policy == readiness.Fatal && st.Containments > 0 {
			m.fail(rule5, "%d leases contained under the fatal policy, and the engine did not halt", st.Containments)
		}
	case m.policy != readiness.Fatal:
		m.fail(rule5, "the engine halted under the %v policy: %v", m.policy, err)
	case !errors.Is(err, readiness.ErrHalted):
		m.fail(rule5, "Err() = %v; want an error wrapping ErrHalted", err)
	case m.halt == nil:
		var fatal *readiness.FatalError
		if !errors.As(err, &fatal) || st.Containments == 0 {
			m.fail(rule5, "the engine halted without a containment: %v (%d containments)", err, st.Containments)
		}
		m.halt, m.haltStats = err, st
		m.releasesRefusedOnHalt()
	default:
		if st.Released != m.haltStats.Released || st.SlotsFree > m.haltStats.SlotsFree || st.Lent != m.haltStats.Lent {
			m.fail(rule5, "the halted engine went on: released %d -> %d, free slots %d -> %d, lent %d -> %d",
				m.haltStats.Released, st.Released, m.haltStats.SlotsFree, st.SlotsFree, m.haltStats.Lent, st.Lent)
		}
	}
	if m.halt != nil && synced && !m.core && m.halts != 1 {
		m.fail(rule5, "OnHalt was called %d times; want once", m.halts)
	}
}

// releasesRefusedOnHalt releases, the moment the model learns of a halt,
// every live lease its owner has not released: a halted engine takes no
// owner call and changes nothing (rule 5's fatal policy). Left to the release
// action's draws, a run that halts late may never ask.
func (m *model) releasesRefusedOnHalt() {
	for _, l := range m.live() {
		if l.releaseReq {
			continue
		}
		before, berr := m.d.lease(l.h)
		if err := m.d.release(l.h); !errors.Is(err, readiness.ErrHalted) {
			m.fail(rule5, "Release(%v) on the halted engine = %v; want ErrHalted", l.h, err)
		}
		if after, aerr := m.d.lease(l.h); after != before || (aerr == nil) != (berr == nil) {
			m.fail(rule5, "a Release refused by the halted engine changed lease %d: %+v (%v) -> %+v (%v)", l.serial, before, berr, after, aerr)
		}
	}
}

func (m *model) live() []*mLease {
	var out []*mLease
	for _, l := range m.leases {
		if !l.gone {
			out = append(out, l)
		}
	}
	return out
}

// pick draws one of xs by index, so a failing run's log stays readable.
func pick[T any](t *rapid.T, label string, xs []T) T {
	return xs[rapid.IntRange(0, len(xs)-1).Draw(t, label)]
}

// attempt returns what the backend knows of l's submission, or nil.
func (m *model) attempt(l *mLease) *attempt {
	m.be.mu.Lock()
	defer m.be.mu.Unlock()
	return m.be.byID[l.serial]
}

// read reads an attempt's fields under the backend's lock.
func (m *model) read(l *mLease, f func(a *attempt)) bool {
	m.be.mu.Lock()
	defer m.be.mu.Unlock()
	a := m.be.byID[l.serial]
	if a == nil {
		return false
	}
	f(a)
	return true
}

// ended reports whether the backend's access to l's slots is over, as the
// backend itself knows it: rejected, never submitted, or Quiesce said true.
func (m *model) ended(l *mLease) bool {
	ended := true
	m.read(l, func(a *attempt) { ended = a.ended })
	return ended
}

func (m *model) copiesInFlight(l *mLease) bool {
	for _, r := range l.rows {
		if m.spy.inFlight(r.Device) {
			return true
		}
	}
	return false
}

// longestUsable is the model's longest run of slots of group g with no
// quarantined slot: the most a lease can ever be granted there.
func (m *model) longestUsable(g int) int {
	best, run := 0, 0
	for s := range modelSlots {
		if m.quarantined[slotID{g, s}] {
			run = 0
			continue
		}
		run++
		best = max(best, run)
	}
	return best
}

func (m *model) hopeless(groups, blocks int) bool {
	for g := range groups {
		if blocks > m.longestUsable(g) {
			return true
		}
	}
	return false
}

// ---- actions ----

func (m *model) lend(t *rapid.T) {
	m.serials++ // every attempt takes a serial: names never repeat, even after a refused Lend
	l := &mLease{serial: m.serials, releasedAt: -1, refused: map[gpu.DevicePtr]bool{}}
	l.kind = readiness.Fetch
	if rapid.IntRange(0, 2).Draw(t, "publish") == 0 {
		l.kind = readiness.Publish
	}
	l.groups = rapid.IntRange(1, modelGroups).Draw(t, "groups")
	l.blocks = rapid.IntRange(1, 4).Draw(t, "blocks")
	if rapid.IntRange(0, 9).Draw(t, "big") == 0 {
		l.groups, l.blocks = 2, bigBlocks
	}
	if rapid.Bool().Draw(t, "known") {
		l.known = rapid.IntRange(1, 3).Draw(t, "known_blocks")
	}
	if rapid.IntRange(0, 3).Draw(t, "explicit_deadline") == 0 {
		l.deadline = m.clock.Now().Add(time.Duration(rapid.IntRange(0, 6).Draw(t, "deadline_s")) * time.Second)
	}
	switch rapid.IntRange(0, 11).Draw(t, "submission") {
	case 0:
		l.reject = true
	case 1:
		l.escape = true
	case 2, 3:
		l.instant = true
	}
	badRow := -1
	if !m.lost && !m.closed && rapid.IntRange(0, 15).Draw(t, "bad_device_row") == 0 {
		badRow = 0
	}
	if l.kind == readiness.Publish && rapid.Bool().Draw(t, "layerwise") {
		l.layerwise = true
	}
	req := readiness.Request{Kind: l.kind, Deadline: l.deadline, KnownBlocks: l.known, Layerwise: l.layerwise}
	for g := range l.groups {
		for b := range l.blocks {
			p := gpu.DevicePtr(1) // never used: a lost device takes no lease
			if !m.lost {
				var err error
				p, err = m.dev.Alloc(slotBytes)
				must(t, err)
				tag := tagDevice
				if l.kind == readiness.Publish {
					tag = tagContent
				}
				must(t, m.dev.Write(p, pattern(tag, l.serial, rowID(g, l.known+b))))
			}
			req.Rows = append(req.Rows, staging.Row{Name: nameOf(l.serial, g, l.known+b), Group: g, Block: l.known + b, Device: p})
		}
	}
	if badRow >= 0 {
		must(t, m.dev.Free(req.Rows[badRow].Device)) // the caller lends a page it no longer owns
	}
	l.rows = req.Rows
	m.be.mu.Lock()
	m.be.reject[l.serial], m.be.escape[l.serial], m.be.instant[l.serial] = l.reject, l.escape, l.instant
	m.be.cancel[l.serial] = cancelMode(rapid.IntRange(0, 3).Draw(t, "cancel_mode"))
	// One attempt in four starts with a Quiesce that blocks (until the gate
	// opens, or until its context ends), so that a call is still out when the
	// engine's clock passes its QuiesceTimeout: that is no proof.
	if rapid.IntRange(0, 3).Draw(t, "blocking_quiesce") == 0 {
		m.be.quiesce[l.serial] = rapid.SampledFrom([]quiesceMode{quiesceBlock, quiesceTimeout}).Draw(t, "first_mode")
	}
	m.be.mu.Unlock()
	stats := m.d.stats()
	h, err := m.d.lend(req)
	switch {
	case m.halt != nil:
		if !errors.Is(err, readiness.ErrHalted) {
			m.fail(rule5, "Lend on the halted engine = %v; want ErrHalted", err)
		}
		return
	case m.closed:
		if !errors.Is(err, readiness.ErrClosed) {
			m.fail(rule10, "Lend after Close = %v; want ErrClosed", err)
		}
		return
	case m.lost:
		if err == nil {
			m.fail(rule1, "Lend after the device was lost succeeded: a lost device takes no new leases")
		}
		return
	case badRow >= 0:
		if !errors.Is(err, readiness.ErrInvalidRequest) {
			m.fail(rule11, "Lend with a device row the stream cannot address = %v; want ErrInvalidRequest", err)
		}
		if after := m.d.stats(); after.Lent != stats.Lent || after.SlotsFree != stats.SlotsFree {
			m.fail(rule11, "a refused Lend changed the engine: %+v -> %+v", stats, after)
		}
		return
	case m.hopeless(l.groups, l.blocks):
		if !errors.Is(err, readiness.ErrUngrantable) {
			m.fail(rule8, "Lend of %d blocks over %d groups, which no run quarantine left could hold = %v; want ErrUngrantable", l.blocks, l.groups, err)
		}
		return
	case m.unknownOut > 0 && errors.Is(err, readiness.ErrUngrantable):
		// Slots out of circulation the model cannot name (unknownOut) may
		// break the run it thinks is there: the engine knows better.
		return
	case err != nil:
		m.fail(ruleA, "Lend of %d rows: %v", len(req.Rows), err)
	}
	l.h, l.lentAt, l.lentCopies = h, m.clock.Now(), len(m.spy.copies)
	m.leases = append(m.leases, l)
	m.index(l)
	m.bySerial[l.serial] = l
}

// answerable returns live leases whose attempt has no outcome yet.
func (m *model) pendingAttempts() []*mLease {
	var out []*mLease
	for _, l := range m.leases {
		m.read(l, func(a *attempt) {
			if a.outcome == nil {
				out = append(out, l)
			}
		})
	}
	return out
}

func (m *model) outcome(t *rapid.T) {
	cands := m.pendingAttempts()
	if len(cands) == 0 {
		return
	}
	l := pick(t, "lease", cands)
	a := m.attempt(l)
	var asked []contract.Name
	for _, u := range a.units {
		asked = append(asked, u.Name)
	}
	kinds := []string{"all", "all", "some", "none", "failed", "cancelled", "extra"}
	m.read(l, func(a *attempt) {
		if a.ended { // it may touch memory no more: only answers that write nothing
			kinds = []string{"none", "failed", "cancelled"}
		}
	})
	switch rapid.SampledFrom(kinds).Draw(t, "outcome") {
	case "all":
		m.be.deliver(a, asked)
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
		m.be.deliver(a, some)
	case "none":
		m.be.set(a, contract.Delivered{})
	case "failed":
		m.be.set(a, contract.Failed{Reason: "adversary: transport error"})
	case "cancelled":
		m.be.set(a, contract.Cancelled{ByPeer: rapid.Bool().Draw(t, "by_peer")})
	case "extra":
		m.be.deliver(a, asked)
		m.be.set(a, contract.Delivered{Served: contract.NewNameSet(append(asked, nameOf(9999, 0, 0))...)})
	}
}

// change makes the backend change its answer after giving one: usually within
// its kind (Delivered of fewer or other names), sometimes to another kind.
func (m *model) change(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.leases {
		m.read(l, func(a *attempt) {
			if a.first != nil && !a.ended {
				cands = append(cands, l)
			}
		})
	}
	if len(cands) == 0 {
		return
	}
	a := m.attempt(pick(t, "lease", cands))
	m.be.mu.Lock()
	defer m.be.mu.Unlock()
	switch o := a.outcome.(type) {
	case contract.Delivered:
		if o.Served.Len() > 0 && rapid.IntRange(0, 3).Draw(t, "across") != 0 {
			var fewer []contract.Name
			for n := range o.Served.All() {
				fewer = append(fewer, n)
			}
			slices.SortFunc(fewer, func(x, y contract.Name) int { return slices.Compare(x[:], y[:]) })
			a.outcome = contract.Delivered{Served: contract.NewNameSet(fewer[:len(fewer)-1]...)}
			return
		}
		a.outcome = contract.Failed{Reason: "adversary: changed its mind"}
	default:
		a.outcome = contract.Delivered{}
	}
}

func (m *model) quiesceMode(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.leases {
		m.read(l, func(a *attempt) {
			if !a.ended {
				cands = append(cands, l)
			}
		})
	}
	if len(cands) == 0 {
		return
	}
	l := pick(t, "lease", cands)
	mode := rapid.SampledFrom([]quiesceMode{quiesceTrue, quiesceFalse, quiesceError, quiesceBlock, quiesceTimeout, quiesceNotYet}).Draw(t, "mode")
	m.read(l, func(a *attempt) {
		a.mode = mode
		switch mode {
		case quiesceBlock:
			a.gate = make(chan struct{})
		case quiesceNotYet:
			a.notYet = rapid.IntRange(1, 3).Draw(t, "not_yet")
		}
	})
}

// unblock lets every blocked Quiesce answer true from now on.
func (m *model) unblock() {
	m.be.mu.Lock()
	defer m.be.mu.Unlock()
	for _, a := range m.be.byID {
		if a.mode == quiesceBlock && a.gate != nil {
			close(a.gate)
			a.gate = nil
			a.mode = quiesceTrue
		}
	}
}

// lateWrite makes a transfer that has not ended write again: legal, and
// exactly what a slot recycled too early is hit by.
func (m *model) lateWrite(t *rapid.T) {
	var cands []*attempt
	m.be.mu.Lock()
	for _, a := range m.be.byID {
		if !a.ended {
			cands = append(cands, a)
		}
	}
	m.be.mu.Unlock()
	if len(cands) == 0 {
		return
	}
	slices.SortFunc(cands, func(x, y *attempt) int { return x.serial - y.serial })
	m.be.lateWrite(pick(t, "attempt", cands))
}

func (m *model) copyEvent(t *rapid.T) {
	if !m.spy.pending() {
		return
	}
	ok := rapid.IntRange(0, 5).Draw(t, "copy_fails") != 0
	m.be.mu.Lock() // the copy reads or writes staging the backend may be writing
	copies := m.spy.resolve(ok)
	m.be.mu.Unlock()
	if !ok {
		m.copiesFailed(copies)
	}
}

func (m *model) release(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.live() {
		if !l.releaseReq {
			cands = append(cands, l)
		}
	}
	if len(cands) == 0 {
		return
	}
	l := pick(t, "lease", cands)
	if m.halt != nil {
		if err := m.d.release(l.h); !errors.Is(err, readiness.ErrHalted) {
			m.fail(rule5, "Release on the halted engine = %v; want ErrHalted", err)
		}
		return
	}
	info, _ := m.d.lease(l.h)
	if err := m.d.release(l.h); err != nil {
		m.fail(rule7, "Release(%v) of a live lease: %v", l.h, err)
	}
	l.releaseReq, l.releasedAt = true, m.step
	m.withdrawLayers(l, info.State)
	if rapid.Bool().Draw(t, "reuse_pages") {
		// The manager gives the device pages to another request at once:
		// nothing may be copied into them from now on.
		for _, r := range l.rows {
			if !m.lost {
				_ = m.dev.Write(r.Device, pattern(0x77, l.serial, 0))
			}
		}
	}
}

// cancel is the owner's cancel, drawn for a lease in any state (SPEC §2): a
// lease still waiting for its outcome latches a local Cancelled; one not yet
// submitted is withdrawn — no request (there is no attempt), its slots back
// without a release, a publish's once its copies landed; a submission handed
// out goes ahead and the cancel follows its answer. Any other lease (its
// outcome latched) refuses it, and a refused cancel changes nothing.
func (m *model) cancel(t *rapid.T) {
	live := m.live()
	if len(live) == 0 {
		return
	}
	l := pick(t, "lease", live)
	info, err := m.d.lease(l.h)
	if err != nil {
		return
	}
	before := m.d.stats()
	res, err := m.d.cancel(l.h)
	after, afterErr := m.d.lease(l.h)
	m.checkCancelResult(l, res, err, info, after, afterErr)
	pending := info.Outcome == readiness.NoOutcome
	switch {
	case m.halt != nil:
		if !errors.Is(err, readiness.ErrHalted) {
			m.fail(rule5, "Cancel on the halted engine = %v; want ErrHalted", err)
		}
	case pending && info.State == readiness.StateRequested:
		if err != nil {
			m.fail(rule2, "Cancel of a lease still waiting for its outcome: %v", err)
		}
		l.cancelled = true
		if after.Outcome != readiness.Cancelled || after.ByPeer {
			m.fail(rule2, "a local cancel latched %v (by peer %v); want cancelled, not by the peer", after.Outcome, after.ByPeer)
		}
	case pending && (info.State == readiness.StateWaiting || info.State == readiness.StateGranted || info.State == readiness.StateStaged || info.State == readiness.StateAdmitted):
		if err != nil {
			m.fail(ruleCancel, "Cancel of lease %d, not yet submitted (%v): %v; a cancel before submission withdraws the lease", l.serial, info.State, err)
			return
		}
		l.cancelled = true
		l.withdrawn = info.State != readiness.StateAdmitted
		m.withdrawLayers(l, info.State)
		if afterErr != nil {
			m.fail(rule7, "Lease(%v) after its cancel: %v; want the withdrawn lease, readable", l.h, afterErr)
			return
		}
		switch info.State {
		case readiness.StateWaiting, readiness.StateStaged:
			if after.State != readiness.StateReleased || after.Outcome != readiness.Cancelled || after.ByPeer || after.Exposed {
				m.fail(ruleCancel, "lease %d, cancelled in %v, is %v %v (by peer %v, exposed %v); want released at once, cancelled locally, never exposed",
					l.serial, info.State, after.State, after.Outcome, after.ByPeer, after.Exposed)
			}
			if st := m.d.stats(); st.CancelRequests != before.CancelRequests {
				m.fail(ruleCancel, "lease %d, withdrawn before its submission, made a cancel request: there is no attempt", l.serial)
			}
		default:
			// A publish's copies land first; a submission handed out is
			// answered first. A layerwise publish with no copy in flight
			// has nothing to wait for.
			if after.State != info.State && !(l.layerwise && !m.copiesInFlight(l) && after.State == readiness.StateReleased) {
				m.fail(ruleCancel, "lease %d, cancelled in %v, moved to %v before its copies landed or its submission was answered", l.serial, info.State, after.State)
			}
		}
	case err == nil:
		m.fail(rule3, "Cancel in %v (outcome %v) was accepted; an outcome already latched stays", info.State, info.Outcome)
	default:
		if afterErr != nil || after != info {
			m.fail(rule3, "a refused Cancel (%v) changed lease %d: %+v -> %+v (%v)", err, l.serial, info, after, afterErr)
		}
		st := m.d.stats()
		st.Refused, before.Refused = 0, 0
		st.Handoffs, before.Handoffs = 0, 0 // the engine's goroutines hand off whenever they run
		if st != before {
			m.fail(rule3, "a refused Cancel (%v) changed the engine: %+v -> %+v", err, before, st)
		}
	}
}

// checkCancelResult checks what a cancel of l answered (res, err) against
// the lease read before (info) and after it (after, afterErr; afterErr set:
// the handle reads nothing). The memory is reusable exactly when nothing
// touches it: the lease waits for slots or for admission (never handed to a
// backend, no copy in flight), or it is logically complete or released
// (every accessor's access proven over, every local copy landed) — an oracle
// read from the state, never from the disposition's own function. Physical
// is the lease's disposition after the cancel, or IN_DOUBT for a handle that
// reads nothing; no answer is retryable.
func (m *model) checkCancelResult(l *mLease, res readiness.CancelResult, err error, info, after readiness.LeaseInfo, afterErr error) {
	want := readiness.LogicalAlreadyTerminal
	switch {
	case m.halt != nil:
		want = readiness.LogicalRejected
	case err == nil:
		want = readiness.LogicalAccepted
	case afterErr != nil:
		want = readiness.LogicalNotFound
	}
	if res.Logical != want || res.Retryable {
		m.fail(rule19, "Cancel of lease %d (%v, error %v) answered %v (retryable %v); want %v, never retryable", l.serial, info.State, err, res.Logical, res.Retryable, want)
	}
	if afterErr != nil {
		if res.Physical != readiness.DispositionInDoubt || res.SafeToReuse() {
			m.fail(rule19, "Cancel of lease %d, whose handle reads nothing (%v), answered %v: memory nobody can see is IN_DOUBT", l.serial, afterErr, res.Physical)
		}
		return
	}
	var reusable bool
	switch after.State {
	case readiness.StateWaiting, readiness.StateStaged, readiness.StateLogicallyComplete, readiness.StateReleased:
		reusable = true
	}
	if res.Physical != after.Disposition || res.SafeToReuse() != reusable {
		m.fail(rule19, "Cancel of lease %d answered %v (safe %v); the lease reads %v in %v: want its disposition, safe exactly when waiting, staged, complete or released",
			l.serial, res.Physical, res.SafeToReuse(), after.Disposition, after.State)
	}
}

func (m *model) retry(t *rapid.T) {
	live := m.live()
	if len(live) == 0 {
		return
	}
	if err := m.d.retry(pick(t, "lease", live).h); err != nil && !errors.Is(err, readiness.ErrStaleHandle) && (m.halt == nil || !errors.Is(err, readiness.ErrHalted)) {
		m.fail(rule5, "Retry: %v", err)
	}
}

func (m *model) stale(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.leases {
		if l.gone && !l.old {
			cands = append(cands, l)
		}
	}
	if len(cands) == 0 {
		return
	}
	l := pick(t, "lease", cands)
	before := m.d.stats()
	if m.halt != nil {
		return // the halted engine refuses every call with ErrHalted first
	}
	if err := m.d.release(l.h); !errors.Is(err, readiness.ErrStaleHandle) {
		m.fail(rule7, "Release of the retired handle %v answered %v; want ErrStaleHandle", l.h, err)
	}
	res, cancelErr := m.d.cancel(l.h)
	if cancelErr == nil {
		m.fail(rule7, "Cancel of the retired handle %v was accepted", l.h)
	}
	info, err := m.d.lease(l.h)
	m.checkCancelResult(l, res, cancelErr, info, info, err)
	if err == nil && info.State != readiness.StateReleased {
		m.fail(rule7, "the retired handle %v reads a lease in %v", l.h, info.State)
	} else if err != nil && !errors.Is(err, readiness.ErrStaleHandle) {
		m.fail(rule7, "Lease(%v) = %v; want the released lease or ErrStaleHandle", l.h, err)
	}
	if _, err := m.d.runs(l.h); err != nil && !errors.Is(err, readiness.ErrStaleHandle) {
		m.fail(rule7, "Runs(%v) = %v", l.h, err)
	}
	after := m.d.stats()
	after.StaleEvidence, before.StaleEvidence = 0, 0
	after.Refused, before.Refused = 0, 0
	after.Handoffs, before.Handoffs = 0, 0 // the engine's goroutines hand off whenever they run
	if after != before {
		m.fail(rule7, "calls with the retired handle %v changed the engine: %+v -> %+v", l.h, before, after)
	}
}

// deviceLost loses the device: either it dies (every queued event fails) or
// NVML reports an Xid while the device still answers — its in-flight copies
// are unproven all the same, and its later completions prove nothing.
func (m *model) deviceLost(t *rapid.T) {
	if m.lost {
		return
	}
	m.lost = true
	if rapid.Bool().Draw(t, "xid_only") {
		m.health.xid = "Xid 48: double-bit ECC error"
		m.copiesFailed(m.spy.unresolved())
		return
	}
	m.dev.Lose("Xid 79: GPU has fallen off the bus")
	m.copiesFailed(m.spy.lose())
}

// xidHealth is the device's health as NVML reports it: lost when the device
// is, or when an Xid was reported for it.
type xidHealth struct {
	dev gpu.Health
	xid string
}

func (h *xidHealth) Lost(device int) (bool, string) {
	if h.xid != "" {
		return true, h.xid
	}
	return h.dev.Lost(device)
}

func (m *model) close() {
	if m.closed {
		return
	}
	type before struct {
		l    *mLease
		info readiness.LeaseInfo
	}
	var was []before
	for _, l := range m.live() {
		if info, err := m.d.lease(l.h); err == nil {
			was = append(was, before{l, info})
		}
	}
	m.closed = true
	m.d.close()
	defer func() {
		// Close hands the memory over as it returns: what the engine holds
		// then, read before any later round frees more (rule 17).
		m.check(false)
		m.handed = m.outOfCirculation()
	}()
	if m.halt != nil {
		return // the halted engine takes nothing in, Close included
	}
	for _, b := range was {
		b.l.closedReq = true
		m.withdrawLayers(b.l, b.info.State)
		info, err := m.d.lease(b.l.h)
		if err != nil {
			continue
		}
		if b.info.State == readiness.StateRequested && b.info.Outcome == readiness.NoOutcome {
			b.l.cancelled = true
			if info.Outcome != readiness.Cancelled || info.ByPeer {
				m.fail(rule10, "lease %d was waiting for its outcome at Close; it reports %v, want a local Cancelled at once", b.l.serial, info.Outcome)
			}
		}
	}
}

// judgeCopy is called by the spy as each copy is queued: a staging→device
// copy of a fetched row is issued only after the backend's access was proven
// over, only for a row the backend served, and never once the owner released
// the lease.
func (m *model) judgeCopy(c spyCopy) {
	l := m.byDevice[c.dev]
	if l != nil && !c.toDevice {
		m.judgePublishCopy(l, c)
	}
	if l == nil || !c.toDevice {
		return
	}
	m.judgeLayerCopy(l, c)
	var ended, served bool
	m.read(l, func(a *attempt) {
		ended = a.ended
		if d, ok := a.first.(contract.Delivered); ok {
			for _, r := range l.rows {
				if r.Device == c.dev {
					served = d.Served.Has(r.Name)
				}
			}
		}
	})
	switch {
	case !ended:
		m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d: a staging→device copy was issued before its backend's access was proven over", rule4, l.serial))
	case l.releaseReq:
		m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d: a copy into its device rows was issued after the owner released it (step %d)", rule4, l.serial, l.releasedAt))
	case !served:
		m.copyFaults = append(m.copyFaults, fmt.Sprintf("%s: lease %d: a row its backend did not serve was copied to the device", rule4, l.serial))
	}
}

// ---- checks ----

// check compares the engine with the model after a step. The safety checks
// hold whatever the engine's goroutines have seen; after a synced round the
// strong checks also hold: every piece of evidence was taken in.
func (m *model) check(synced bool) {
	m.t.Helper()
	m.be.mu.Lock()
	faults := append([]string(nil), m.be.faults...)
	m.be.mu.Unlock()
	for _, f := range faults {
		m.fail(rule1, "%s", f)
	}
	for _, f := range m.copyFaults {
		m.t.Fatalf("%s", f)
	}
	for _, f := range m.be.heldChanged() {
		m.fail(rule6, "%s", f)
	}
	for _, l := range m.leases {
		if !l.gone {
			m.checkLease(l, synced)
		}
	}
	m.checkAdmission()
	m.checkBytes()
	m.checkCounts()
}

func (m *model) checkLease(l *mLease, synced bool) {
	info, err := m.d.lease(l.h)
	if err != nil && !errors.Is(err, readiness.ErrStaleHandle) {
		m.fail(rule7, "Lease(%v) = %v; want the lease or ErrStaleHandle", l.h, err)
	}
	if err != nil || info.State == readiness.StateReleased {
		m.gone(l)
		return
	}
	if info.Handle != l.h || info.Rows != len(l.rows) || info.Kind != l.kind {
		m.fail(rule7, "Lease(%v) describes another lease: %+v", l.h, info)
	}
	if os.Getenv("MODEL_DEBUG") != "" {
		fmt.Printf("step %d lease %d %v %v granted=%v\n", m.step, l.serial, info.State, info.Outcome, l.granted)
	}
	if !l.granted && info.State != readiness.StateWaiting {
		m.granted(l, info.State)
	}
	if a := m.attempt(l); a != nil && l.submitAt.IsZero() {
		l.submitAt = m.clock.Now()
	}
	switch info.State {
	case readiness.StateAccessFenced, readiness.StateLogicallyComplete:
		if !m.ended(l) {
			m.fail(rule1, "lease %d is %v, but its backend never proved access over", l.serial, info.State)
		}
		if info.State == readiness.StateLogicallyComplete && m.copiesInFlight(l) {
			m.fail(rule1, "lease %d is logically_complete while a local copy touching its slots is in flight", l.serial)
		}
		if info.State == readiness.StateLogicallyComplete {
			m.checkReadiness(l, info)
		}
	case readiness.StateQuarantined:
		m.sawQuarantine(l, info)
	case readiness.StateContained:
		m.sawContained(l, info)
	}
	m.checkOutcome(l, info, synced)
	m.checkLayers(l, info, synced)
	m.checkWithdrawn(l)
	if synced {
		m.checkSynced(l, info)
		if m.ended(l) && m.attempt(l) != nil && info.State != readiness.StateQuarantined && !m.copiesInFlight(l) && !m.eventsPending(l) && !m.mayHaveFailed(l) && !m.lost {
			l.settledSeen = true
		}
	}
}

// granted records the slots the engine lent and checks the allocator's
// invariants: one contiguous run per group, no slot lent twice, no quarantined
// slot lent again, strict arrival order among leases that could be granted.
func (m *model) granted(l *mLease, st readiness.State) {
	runs, err := m.d.runs(l.h)
	if err != nil {
		m.fail(rule7, "Runs(%v): %v", l.h, err)
	}
	if len(runs) == 0 {
		return // quarantined before the model saw its slots
	}
	l.granted = true
	for _, x := range m.leases {
		if x == l {
			break
		}
		if x.gone || x.granted {
			continue
		}
		info, err := m.d.lease(x.h)
		if err != nil || info.State != readiness.StateWaiting || info.Ungrantable {
			continue
		}
		m.fail(ruleA, "lease %d was granted before lease %d, lent earlier and still waiting: grants follow arrival order", l.serial, x.serial)
	}
	if len(runs) != l.groups {
		m.fail(ruleA, "lease %d got %d runs for %d groups", l.serial, len(runs), l.groups)
	}
	for i, r := range runs {
		if r.Group != i || r.Count != l.blocks || r.First < 0 || r.First+r.Count > modelSlots {
			m.fail(ruleA, "lease %d: run %+v; want group %d, %d slots inside the pool", l.serial, r, i, l.blocks)
		}
		for k := range r.Count {
			s := slotID{r.Group, r.First + k}
			if o := m.owner[s]; o != nil {
				m.fail(rule1, "slot %v lent to lease %d while lease %d still holds it", s, l.serial, o.serial)
			}
			if m.inherited[s] {
				m.fail(rule17, "slot %v, quarantined or held by an engine restarted away, lent by a new engine to lease %d", s, l.serial)
			}
			if m.quarantined[s] {
				m.fail(rule5, "quarantined slot %v lent again to lease %d", s, l.serial)
			}
			row, _ := m.mem.Row(s.g, s.s)
			m.be.mu.Lock()
			clean := filled(row, tagCanary)
			// A lease answered at submission was written in the round that
			// granted it, before the model saw the grant: its own content is
			// the one thing its slots may hold already.
			own := l.instant && l.kind == readiness.Fetch && string(row) == string(pattern(tagContent, l.serial, rowID(r.Group, l.known+k)))
			if !own {
				copy(row, pattern(tagStamp, l.serial, rowID(r.Group, l.known+k)))
			}
			m.be.mu.Unlock()
			if !clean && !own {
				m.fail(rule1, "slot %v, just lent to lease %d, was written while free", s, l.serial)
			}
			m.owner[s] = l
			l.slots = append(l.slots, s)
		}
	}
	_ = st
}

// gone checks that a lease the engine released was allowed to go, and returns
// its slots to the model's free set with fresh canaries.
func (m *model) gone(l *mLease) {
	l.gone = true
	switch {
	case l.quarantined:
		if !l.releaseReq {
			m.fail(rule5, "quarantined lease %d was retired without the owner releasing it", l.serial)
		}
		return // its slots stay out of circulation for ever
	case !l.granted:
		if !l.releaseReq && !m.closed && !l.withdrawn {
			m.fail(rule8, "waiting lease %d went without a release, a cancel or Close", l.serial)
		}
	default:
		if !l.releaseReq && !m.closed && !l.withdrawn && !(l.cancelled && m.attempt(l) == nil && !l.escape) {
			m.fail(rule1, "lease %d was released without a release request, a cancel before its exposure, or Close", l.serial)
		}
		if !m.ended(l) {
			m.fail(rule1, "lease %d's slots were recycled, but its backend never proved access over (an outcome, error, cancel, timeout, exit or close is no proof)", l.serial)
		}
		if m.copiesInFlight(l) {
			m.fail(rule1, "lease %d's slots were recycled while a local copy touching them was in flight", l.serial)
		}
		if l.copyFailed {
			m.fail(rule5, "lease %d's slots were recycled although a copy touching them failed", l.serial)
		}
	}
	m.be.mu.Lock()
	defer m.be.mu.Unlock()
	for _, s := range l.slots {
		delete(m.owner, s)
		m.lastOwner[s] = l
		row, _ := m.mem.Row(s.g, s.s)
		if m.rewrittenAtSubmission(row) {
			continue // lent again, and written, in the round that released it
		}
		fill(row, tagCanary)
	}
}

// rewrittenAtSubmission reports a free slot holding the content of a lease
// answered at submission that the model has not seen granted yet: the round
// that released the slot lent it again, and the backend wrote it before
// returning. The check at the grant then finds the lease's own content; any
// other lease's content there fails it.
func (m *model) rewrittenAtSubmission(row []byte) bool {
	if row[0] != tagContent {
		return false
	}
	for _, x := range m.leases {
		if x.instant && !x.granted && !x.gone && byte(x.serial) == row[1] {
			return true
		}
	}
	return false
}

// checkAdmission holds rule 12: never more submissions outstanding at the
// backend — exposed, not fenced, not given up on — than the bound.
func (m *model) checkAdmission() {
	if m.outstanding == 0 {
		return
	}
	n := 0
	for _, l := range m.leases {
		if l.gone {
			continue
		}
		info, err := m.d.lease(l.h)
		if err != nil {
			continue
		}
		if info.Exposed && !info.Fenced && info.State != readiness.StateContained && info.State != readiness.StateQuarantined {
			n++
		}
	}
	if n > m.outstanding {
		m.fail(rule12, "%d submissions outstanding at the backend; the bound is %d", n, m.outstanding)
	}
}

// sawContained checks a lease resting in contained: only under the Recover
// policy (the others pass through to quarantined at once), only for a lease
// whose backend returned an attempt, signalled once; its slots stay held.
func (m *model) sawContained(l *mLease, info readiness.LeaseInfo) {
	if m.policy != readiness.Recover {
		m.fail(rule5, "lease %d rests in contained under the %v policy: only recover waits there", l.serial, m.policy)
	}
	if m.attempt(l) == nil || l.escape {
		m.fail(rule5, "lease %d rests in contained without an attempt: nothing could ever prove it", l.serial)
	}
	if n := len(m.contained[l.h]); n != 1 {
		m.fail(rule5, "lease %d is contained; OnContainment was called %d times for it, want once", l.serial, n)
	}
	if m.clock.Now().Before(l.lentAt.Add(drainGrace)) {
		m.fail(rule5, "lease %d was contained at %v, before the grace (%v) had passed since it was even lent (%v)", l.serial, m.clock.Now(), drainGrace, l.lentAt)
	}
}

// sawQuarantine checks a quarantine: only by containment, only with something
// unproven, never before the grace after the earliest possible trigger, once.
func (m *model) sawQuarantine(l *mLease, info readiness.LeaseInfo) {
	if !l.quarantined {
		l.quarantined = true
		for _, s := range l.slots {
			m.quarantined[s] = true
		}
		// Containment wins at its deadline over evidence the engine has not
		// taken in yet; evidence a synced round took in earlier is proof.
		if l.settledSeen {
			m.fail(rule5, "lease %d was quarantined after a synced round had taken in its access proof and every copy's completion", l.serial)
		}
		if m.clock.Now().Before(l.lentAt.Add(drainGrace)) {
			m.fail(rule5, "lease %d was quarantined at %v, before the grace (%v) had passed since it was even lent (%v)", l.serial, m.clock.Now(), drainGrace, l.lentAt)
		}
	}
	// Under Recover a lease contained, proven after all, and contained again
	// (the copies its fence issued never landed) is signalled each time.
	if n := len(m.contained[l.h]); n != 1 && !(m.policy == readiness.Recover && n == 2) {
		m.fail(rule5, "lease %d is quarantined; OnContainment was called %d times for it, want once", l.serial, n)
	}
	if !l.releaseReq && info.ReleaseRequested {
		m.fail(rule7, "lease %d reports a release it was never asked", l.serial)
	}
}

// expectedOutcome classifies a first answer.
func expectedOutcome(a *attempt) readiness.OutcomeKind {
	if a.extra {
		return readiness.Violation
	}
	switch o := a.first.(type) {
	case contract.Delivered:
		switch {
		case o.Served.Len() == 0:
			return readiness.Missed
		case o.Served.Len() == len(a.units):
			return readiness.Served
		default:
			return readiness.Partial
		}
	case contract.Failed:
		return readiness.Failed
	case contract.Cancelled:
		return readiness.Cancelled
	}
	return readiness.NoOutcome
}

// checkOutcome compares the engine's latched outcome with what the backend
// answered first, the deadline, the owner's cancel and Close.
func (m *model) checkOutcome(l *mLease, info readiness.LeaseInfo, synced bool) {
	a := m.attempt(l)
	var first contract.Outcome
	var want readiness.OutcomeKind
	changed := false
	if a != nil {
		m.be.mu.Lock()
		first, want, changed = a.first, expectedOutcome(a), a.changes > 0 || !sameOutcome(a.first, a.outcome)
		m.be.mu.Unlock()
	}
	got := info.Outcome
	// Rule 2: a miss is never a failure, a failure never a miss.
	if want == readiness.Missed && got.Failure() && got != readiness.Cancelled && got != readiness.TimedOut {
		m.fail(rule2, "lease %d: the backend answered a miss first; the engine reports %v", l.serial, got)
	}
	if got == readiness.Missed && want != readiness.Missed {
		m.fail(rule2, "lease %d reports a miss; the backend answered %v first", l.serial, first)
	}
	// Rule 3: once latched, an outcome moves only to a violation, after a
	// changed answer that had been served.
	if l.seen != readiness.NoOutcome && got != l.seen {
		if got != readiness.Violation || !changed || (l.seen != readiness.Served && l.seen != readiness.Partial) {
			m.fail(rule3, "lease %d: the latched outcome moved from %v to %v", l.serial, l.seen, got)
		}
	}
	if got != readiness.NoOutcome {
		switch got {
		case readiness.Rejected:
			if !l.reject {
				m.fail(rule3, "lease %d reports a rejection its backend never made", l.serial)
			}
		case readiness.TimedOut:
			if !l.timedOut && (a == nil || a.first != nil) && l.deadline.IsZero() {
				if m.clock.Now().Before(l.submitAt.Add(requestTimeout)) && !l.submitAt.IsZero() {
					m.fail(rule9, "lease %d timed out before its deadline", l.serial)
				}
			}
		}
	}
	prev := l.seen
	l.seen = got
	if !synced || a == nil || l.escape || l.cancelled {
		return
	}
	// After a synced round the engine took in everything. In a round, the
	// deadline fires before any answer is taken: an answer the engine had
	// not latched by the round in which the deadline passed is a timeout.
	m.be.mu.Lock()
	hasFirst := a.first != nil
	m.be.mu.Unlock()
	deadline := l.deadline
	if deadline.IsZero() && !l.submitAt.IsZero() {
		deadline = l.submitAt.Add(requestTimeout)
	}
	switch {
	case prev == readiness.NoOutcome && !deadline.IsZero() && !m.clock.Now().Before(deadline):
		if got != readiness.TimedOut {
			m.fail(rule9, "lease %d: no outcome latched when its deadline %v passed (now %v); it reports %v in %v, want a timeout", l.serial, deadline, m.clock.Now(), got, info.State)
		}
		l.timedOut = true
	case prev == readiness.NoOutcome && hasFirst:
		if got != want && got != readiness.Violation {
			m.fail(rule3, "lease %d: the backend answered %v first; the engine reports %v, want %v", l.serial, first, got, want)
		}
	}
	if l.timedOut && got != readiness.TimedOut {
		m.fail(rule9, "lease %d timed out; a later answer changed its outcome to %v", l.serial, got)
	}
}

// checkSynced holds after a synced round: the engine has taken in every piece
// of evidence made observable before it.
func (m *model) checkSynced(l *mLease, info readiness.LeaseInfo) {
	now := m.clock.Now()
	a := m.attempt(l)
	m.checkCancels(l, info, a)
	var ended, changedBeforeEnd bool
	if a != nil {
		m.be.mu.Lock()
		ended, changedBeforeEnd = a.ended, a.changedBeforeEnd
		m.be.mu.Unlock()
	}
	deadline := l.deadline
	if deadline.IsZero() && !l.submitAt.IsZero() {
		deadline = l.submitAt.Add(requestTimeout)
	}
	// Rule 3: an answer changed before the proof is caught by the re-poll.
	if changedBeforeEnd && ended && (info.State == readiness.StateAccessFenced || info.State == readiness.StateLogicallyComplete) &&
		(l.seen == readiness.Served || l.seen == readiness.Partial) && info.Outcome != readiness.Violation {
		m.fail(rule3, "lease %d: its backend changed its answer before access was proven; the engine still reports %v", l.serial, info.Outcome)
	}
	// Rule 1: a proof the backend gave is taken in once the outcome is
	// latched — whenever it comes, even after its call timed out on the
	// engine's clock.
	if ended && a != nil && info.Outcome != readiness.NoOutcome && m.dev != nil {
		switch info.State {
		case readiness.StateRequested, readiness.StateServed, readiness.StatePartial, readiness.StateMissed, readiness.StateFailed:
			m.fail(rule5, "lease %d: its backend proved access over and the outcome is latched, yet it is still %v", l.serial, info.State)
		}
	}
	// Rule 5: the containment deadline is fixed at submission: nothing
	// submitted stays unproven past the request deadline plus the grace.
	if a != nil && !deadline.IsZero() && !now.Before(deadline.Add(drainGrace)) && !info.Contained {
		switch info.State {
		case readiness.StateLogicallyComplete, readiness.StateQuarantined, readiness.StateContained, readiness.StateWaiting, readiness.StateGranted:
		default:
			m.fail(rule5, "lease %d is %v at %v, past its request deadline %v plus the grace: it must be contained", l.serial, info.State, now, deadline)
		}
	}
	// Rule 8: a waiting lease that quarantine made hopeless is reported.
	if info.State == readiness.StateWaiting {
		hopeless := m.hopeless(l.groups, l.blocks)
		if hopeless && !info.Ungrantable {
			m.fail(rule8, "lease %d needs %d contiguous slots per group, which quarantine left nowhere; it is not reported ungrantable", l.serial, l.blocks)
		}
		if info.Ungrantable && !hopeless {
			m.fail(rule8, "lease %d is reported ungrantable, but a run of %d slots can still be granted", l.serial, l.blocks)
		}
	}
}

// checkCancels holds after a synced round (SPEC §2, +cancel-request-v1): a
// lease whose outcome is a failure of any kind and whose backend returned an
// attempt has had exactly one cancel request; a delivered one none; the answer
// — a disposition, or the error or panic — is recorded on the lease.
func (m *model) checkCancels(l *mLease, info readiness.LeaseInfo, a *attempt) {
	if a == nil || l.escape {
		return
	}
	m.be.mu.Lock()
	cancels, mode := a.cancels, a.cancelMode
	m.be.mu.Unlock()
	failure := info.Outcome.Failure() && info.Outcome != readiness.Rejected
	switch {
	case cancels > 1:
		m.fail(ruleCancel, "lease %d: %d cancel requests; the engine sends exactly one", l.serial, cancels)
	case cancels > 0 && !failure:
		m.fail(ruleCancel, "lease %d reports %v, yet its backend was asked to cancel", l.serial, info.Outcome)
	case failure && cancels == 0:
		m.fail(ruleCancel, "lease %d latched %v with an attempt, and its backend was never asked to cancel", l.serial, info.Outcome)
	case cancels == 1 && info.State != readiness.StateReleased:
		switch mode {
		case cancelRequested:
			if info.CancelDisposition != contract.CancelRequested {
				m.fail(ruleCancel, "lease %d: the backend answered the cancel requested; the lease records %v %q", l.serial, info.CancelDisposition, info.CancelError)
			}
		case cancelUnsupported:
			if info.CancelDisposition != contract.CancelUnsupported {
				m.fail(ruleCancel, "lease %d: the backend answered the cancel unsupported; the lease records %v %q", l.serial, info.CancelDisposition, info.CancelError)
			}
		default:
			if info.CancelError == "" {
				m.fail(ruleCancel, "lease %d: the backend's cancel failed (%v); the lease records no error", l.serial, mode)
			}
		}
	}
}

// checkReadiness compares the readiness answer with what the device received:
// the rows whose staging→device copy completed, from the first unknown block.
func (m *model) checkReadiness(l *mLease, info readiness.LeaseInfo) {
	iv, err := m.d.readiness(l.h)
	if l.kind != readiness.Fetch {
		if !errors.Is(err, readiness.ErrNotReady) {
			m.fail(rule2, "lease %d is a publish; Readiness = %v, want ErrNotReady", l.serial, err)
		}
		return
	}
	if err != nil {
		m.fail(rule2, "lease %d in %v: Readiness: %v", l.serial, info.State, err)
	}
	arrived := 0
	for b := range l.blocks {
		all := true
		for _, r := range l.rows {
			if r.Block == l.known+b {
				all = all && m.spy.covered(r.Device, m.plan.all(r.Group))
			}
		}
		if !all {
			break
		}
		arrived++
	}
	for _, r := range l.rows {
		if m.lost || l.releaseReq {
			continue
		}
		got := make([]byte, slotBytes)
		must(m.t, m.dev.Read(got, r.Device))
		// Every layer's spans of a row that arrived hold the staged content;
		// the bytes of no layer, and every byte of a row that did not
		// arrive, hold what the device row held before.
		content, before := pattern(tagContent, l.serial, rowID(r.Group, r.Block)), pattern(tagDevice, l.serial, rowID(r.Group, r.Block))
		want := slices.Clone(before)
		if m.spy.covered(r.Device, m.plan.all(r.Group)) {
			for _, sp := range m.plan.all(r.Group) {
				copy(want[sp.Offset:sp.End()], content[sp.Offset:sp.End()])
			}
		}
		if string(got) != string(want) {
			m.fail(rule4, "lease %d: served row (%d,%d) on the device holds %x, not %x: copied torn, early, outside its layers' spans, or from a recycled slot", l.serial, r.Group, r.Block, got, want)
		}
	}
	want := staging.Interval{RestartFloor: 0, UsableUntil: (l.known + arrived) * tpb}
	if iv != want {
		m.fail(rule2, "lease %d (%v): readiness %v; the device received %d blocks from block %d: want %v", l.serial, info.Outcome, iv, arrived, l.known, want)
	}
}

// checkBytes reads every staging slot: a free slot must still hold its
// canary, a lent one only what its own lease's transfer, copy or manager put
// there. A late write into a recycled slot shows up here, in the bytes.
func (m *model) checkBytes() {
	// The backend writes staging from its own goroutines, under its lock.
	// A failure unlocks first (describe takes the lock), so the deferred
	// unlock must not run again as the failure's panic unwinds.
	m.be.mu.Lock()
	locked := true
	unlock := func() { locked = false; m.be.mu.Unlock() }
	defer func() {
		if locked {
			m.be.mu.Unlock()
		}
	}()
	for g := range modelGroups {
		for s := range modelSlots {
			id := slotID{g, s}
			if m.quarantined[id] {
				continue
			}
			row, _ := m.mem.Row(g, s)
			l := m.owner[id]
			if l == nil {
				if !filled(row, tagCanary) {
					unlock()
					m.fail(rule1, "free slot %v was written after it was recycled: %x; it was last lent to %s%s", id, row, m.lastLent(id), m.describe())
				}
				continue
			}
			r := l.rows[slices.Index(l.slots, id)]
			own := rowID(r.Group, r.Block)
			if l.layerwise {
				if !m.layerwiseSlotHolds(l, r, row) {
					unlock()
					m.fail(rule1, "slot %v of lease %d, a layerwise publish, holds bytes another transfer wrote, or a layer's bytes outside its spans: %x", id, l.serial, row)
				}
				continue
			}
			if string(row) != string(pattern(tagStamp, l.serial, own)) &&
				string(row) != string(pattern(tagContent, l.serial, own)) &&
				string(row) != string(pattern(tagLate, l.serial, 0xFF)) &&
				// A publish's device→staging copy reads its source when it
				// lands: a page the owner reused after releasing it.
				!(l.kind == readiness.Publish && string(row) == string(pattern(0x77, l.serial, 0))) &&
				!filled(row, sim.Poison) {
				m.fail(rule1, "slot %v of lease %d holds bytes another transfer wrote: %x", id, l.serial, row)
			}
		}
	}
}

// lastLent names the lease that held a free slot last, as the model saw it.
func (m *model) lastLent(id slotID) string {
	l := m.lastOwner[id]
	if l == nil {
		return "no lease the model saw granted"
	}
	return fmt.Sprintf("lease %d (%s, instant %v, released at step %d, cancelled %v, withdrawn %v, escape %v)", l.serial, l.kind, l.instant, l.releasedAt, l.cancelled, l.withdrawn, l.escape)
}

// describe lists every lease and its attempt, for a failure's message.
func (m *model) describe() string {
	var b strings.Builder
	for _, l := range m.leases {
		info, err := m.d.lease(l.h)
		fmt.Fprintf(&b, "\n  lease %d %v %s slots %v gone %v release %v reject %v escape %v: %v %v %q (err %v)", l.serial, l.h, l.kind, l.slots, l.gone, l.releaseReq, l.reject, l.escape, info.State, info.Outcome, info.Reason, err)
		m.be.mu.Lock()
		if a := m.be.byID[l.serial]; a != nil {
			fmt.Fprintf(&b, "\n    attempt: outcome %v first %v ended %v mode %v units %v", a.outcome, a.first, a.ended, a.mode, a.units)
		}
		m.be.mu.Unlock()
	}
	return b.String()
}

// checkCounts compares the allocator's counts with the model's.
func (m *model) checkCounts() {
	st := m.d.stats()
	if st.SlotsQuarantined != len(m.quarantined)+m.unknownOut && m.knownQuarantine() {
		m.fail(rule5, "the engine counts %d quarantined slots, the model %d (and %d it cannot name): quarantined slots never return", st.SlotsQuarantined, len(m.quarantined), m.unknownOut)
	}
	if st.SlotsFree+st.SlotsHeld+st.SlotsQuarantined != modelGroups*modelSlots {
		m.fail(ruleA, "slots held %d free %d quarantined %d; want %d in all", st.SlotsHeld, st.SlotsFree, st.SlotsQuarantined, modelGroups*modelSlots)
	}
	if st.InvariantBreaches != 0 {
		m.fail(ruleA, "the engine counted %d invariant breaches", st.InvariantBreaches)
	}
}

// knownQuarantine reports whether the model saw the slots of every
// quarantined lease (a lease quarantined before the model saw its grant is
// impossible: grants are seen after every step).
func (m *model) knownQuarantine() bool {
	for _, l := range m.leases {
		if l.quarantined && !l.granted {
			return false
		}
	}
	return true
}

// reuseAfterQuarantine releases every quarantined lease the owner still
// holds and at once lends, served and proven, a one-row lease: if the
// engine let go of what a quarantined lease's backend was handed, the very
// quarantineEscaped lends one lease whose submission escapes — the backend
// keeps the extent it was handed and may still write, but returns no attempt
// to prove its end — and runs the clock past its containment deadline. Every
// run then ends with a quarantined lease whose backend still holds its
// extent, and reuseAfterQuarantine checks that nothing handed to it is rebuilt
// for the next lease (rule 6), whatever the drawn actions were.
func (m *model) quarantineEscaped() {
	if m.closed || m.lost || m.unknownOut > 0 || m.hopeless(1, 1) {
		return
	}
	l := m.lendFetch(1, 1, true)
	for range 8 {
		m.round(true)
		m.clock.Advance(drainGrace)
	}
	m.round(true)
	if !l.quarantined {
		info, _ := m.d.lease(l.h)
		m.fail(rule5, "lease %d escaped at its submission and is %v past its containment deadline; want quarantined", l.serial, info.State)
	}
}

// next lease would rebuild it under the backend's feet (rule 6).
func (m *model) reuseAfterQuarantine() {
	for _, q := range m.leases {
		if !q.quarantined || q.gone {
			continue
		}
		if !q.releaseReq {
			must(m.t, m.d.release(q.h))
			q.releaseReq = true
		}
		if m.closed || m.lost || m.hopeless(1, 1) {
			continue
		}
		// One row is enough: an extent rebuilt in place overwrites unit 0
		// of whatever the quarantined backend holds.
		m.lendServed(1, 1, -1)
	}
	m.round(true)
}

// reuseLargeView serves a lease of more than 32 rows in full, then lends one
// of the same shape that is served in part: the second may reuse the first's
// structures, and nothing of the first's arrivals may stay in them.
func (m *model) reuseLargeView() {
	if m.closed || m.lost || m.hopeless(modelGroups, bigBlocks) {
		return
	}
	m.lendServed(modelGroups, bigBlocks, -1)
	m.lendServed(modelGroups, bigBlocks, 1)
}

// lendServed lends a fetch of groups × blocks rows whose backend serves its
// first served rows (all when served < 0) and proves at once, runs it to
// completion and releases it.
func (m *model) lendServed(groups, blocks, served int) {
	if m.unknownOut > 0 {
		return // slots out that the model cannot name: it cannot say the pool holds the lease
	}
	l := m.lendFetch(groups, blocks, false)
	// The backend cooperates, but its Quiesce runs under a real timeout
	// (quiesceWait): on a loaded machine a proof can miss it and be retried
	// after a back-off on the clock. So the clock moves past the longest
	// back-off every round, and the rounds go on until the lease is done —
	// bounded well inside its request deadline, so that a lease that never
	// completes is still a failure, not a containment.
	for i := 0; i < lendServedRounds; i++ {
		m.round(true)
		if a := m.attempt(l); a != nil && m.pendingOutcome(a) {
			m.be.deliver(a, asked(a, served))
		}
		m.be.mu.Lock()
		for m.spy.pending() {
			m.spy.resolve(true)
		}
		m.be.mu.Unlock()
		if i >= 3 && m.settledIn(l, readiness.StateLogicallyComplete, readiness.StateReleased) {
			break
		}
		m.clock.Advance(2 * maxBackoff)
	}
	if err := m.d.release(l.h); err == nil {
		l.releaseReq = true
	}
	for range lendServedRounds {
		m.round(true)
		if m.settledIn(l, readiness.StateReleased) {
			break
		}
		m.clock.Advance(2 * maxBackoff)
	}
}

// lendFetch lends a fetch of groups × blocks rows the pool can hold (a
// refusal fails rule 8); escape makes its submission fail without an attempt
// while the backend keeps the extent and may write.
func (m *model) lendFetch(groups, blocks int, escape bool) *mLease {
	m.serials++
	l := &mLease{serial: m.serials, releasedAt: -1, refused: map[gpu.DevicePtr]bool{}, kind: readiness.Fetch,
		groups: groups, blocks: blocks, lentAt: m.clock.Now(), escape: escape}
	m.be.mu.Lock()
	m.be.escape[l.serial] = escape
	m.be.mu.Unlock()
	req := readiness.Request{Kind: readiness.Fetch}
	for g := range l.groups {
		for b := range l.blocks {
			p, err := m.dev.Alloc(slotBytes)
			must(m.t, err)
			must(m.t, m.dev.Write(p, pattern(tagDevice, l.serial, rowID(g, b))))
			req.Rows = append(req.Rows, staging.Row{Name: nameOf(l.serial, g, b), Group: g, Block: b, Device: p})
		}
	}
	l.rows = req.Rows
	h, err := m.d.lend(req)
	if err != nil {
		m.fail(rule8, "Lend of a lease the pool can hold: %v", err)
	}
	l.h = h
	m.leases = append(m.leases, l)
	m.bySerial[l.serial] = l
	m.index(l)
	return l
}

// lendServedRounds bounds lendServed: 2·maxBackoff per round stays far inside
// the request deadline (64 × 16 ms ≈ 1 s of a 3 s deadline).
const lendServedRounds = 64

// settledIn reports whether the lease is in one of the states.
func (m *model) settledIn(l *mLease, states ...readiness.State) bool {
	info, err := m.d.lease(l.h)
	return err == nil && slices.Contains(states, info.State)
}

func (m *model) pendingOutcome(a *attempt) bool {
	m.be.mu.Lock()
	defer m.be.mu.Unlock()
	return a.outcome == nil
}

// settleHalted ends a run whose engine halted (the fatal policy): however
// the backend cooperates and the clock moves, nothing is released, lent or
// freed (checkHalt after every round, Close included).
func (m *model) settleHalted() {
	m.unblock()
	for range 4 {
		m.be.mu.Lock()
		for m.spy.pending() {
			m.spy.resolve(true)
		}
		m.be.mu.Unlock()
		m.clock.Advance(drainGrace)
		m.round(true)
	}
	m.close()
	m.round(true)
}

// settle is the liveness half. First the backend cooperates — it answers
// everything, proves every access, every copy completes, the owner releases
// everything — for less than any containment deadline: every lease whose
// access can be proven must go, without containment. Then the clock runs past
// every deadline: every lease goes or is contained.
func (m *model) settle() {
	m.unblock()
	m.be.mu.Lock()
	for _, a := range m.be.byID {
		a.mode, a.notYet = quiesceTrue, 0
	}
	clear(m.be.quiesce) // leases submitted from now on cooperate too
	m.be.mu.Unlock()
	start := m.clock.Now()
	for range 30 {
		if m.halt != nil {
			m.settleHalted()
			return
		}
		m.computeAll()
		for _, l := range m.pendingAttempts() {
			a := m.attempt(l)
			if m.ended(l) {
				m.be.set(a, contract.Failed{Reason: "adversary: ended without an answer"})
				continue
			}
			var asked []contract.Name
			for _, u := range a.units {
				asked = append(asked, u.Name)
			}
			m.be.deliver(a, asked)
		}
		m.be.mu.Lock()
		for m.spy.pending() {
			m.spy.resolve(true)
		}
		m.be.mu.Unlock()
		m.clock.Advance(2 * maxBackoff)
		m.round(true)
		if m.halt != nil {
			continue
		}
		for _, l := range m.live() {
			if !l.releaseReq {
				if err := m.d.release(l.h); err != nil {
					m.fail(rule8, "Release(%v): %v", l.h, err)
				}
				l.releaseReq, l.releasedAt = true, m.step
			}
		}
		m.round(true)
	}
	for _, l := range m.live() {
		info, err := m.d.lease(l.h)
		if err != nil {
			continue
		}
		deadline := l.deadline
		if deadline.IsZero() {
			deadline = l.submitAt.Add(requestTimeout)
		}
		cooperative := !l.escape && !m.mayHaveFailed(l) && !m.lost && !l.quarantined && !info.Ungrantable &&
			!(info.State == readiness.StateWaiting && m.hopeless(l.groups, l.blocks))
		if cooperative && (l.submitAt.IsZero() || m.clock.Now().Before(deadline.Add(drainGrace))) && start.Before(deadline.Add(drainGrace)) {
			m.fail(rule8, "lease %d is still %v (%v, %q) after its backend answered and proved everything, every copy landed and the owner released it", l.serial, info.State, info.Outcome, info.Reason)
		}
	}
	for range 8 {
		m.clock.Advance(drainGrace)
		m.round(true)
	}
	if m.halt != nil {
		m.settleHalted()
		return
	}
	for _, l := range m.live() {
		info, _ := m.d.lease(l.h)
		if info.State == readiness.StateWaiting && info.Ungrantable {
			continue
		}
		if !l.quarantined {
			m.fail(rule8, "lease %d is stuck in %v", l.serial, info.State)
		}
	}
	m.quarantineEscaped()
	if m.halt != nil {
		m.settleHalted()
		return
	}
	m.reuseAfterQuarantine()
	m.reuseLargeView()
	if st := m.d.stats(); st.SlotsFree+st.SlotsQuarantined != modelGroups*modelSlots {
		m.fail(rule8, "at the end %d slots are free and %d quarantined of %d: every other slot must have returned", st.SlotsFree, st.SlotsQuarantined, modelGroups*modelSlots)
	}
	m.close()
	m.round(true)
	for _, l := range m.live() {
		if l.quarantined && !l.releaseReq {
			must(m.t, m.d.release(l.h))
			l.releaseReq = true
		}
	}
	m.round(true)
	if !m.d.drained() {
		m.fail(rule10, "the closed engine did not drain: %s", m.pending())
	}
	m.drainRetired()
}

// pending names what a liveness check found still pending: every lease the
// owner has not seen go, with its state, and the slots still lent.
func (m *model) pending() string {
	var out []string
	for _, l := range m.live() {
		info, err := m.d.lease(l.h)
		if err != nil {
			out = append(out, fmt.Sprintf("lease %d (%v)", l.serial, err))
			continue
		}
		out = append(out, fmt.Sprintf("lease %d %v (%v, %q)", l.serial, info.State, info.Outcome, info.Reason))
	}
	st := m.d.stats()
	return fmt.Sprintf("%d slots still lent, %d submissions outstanding at the backend; leases: %s", st.SlotsHeld, st.Outstanding, strings.Join(out, "; "))
}

// run draws one sequence of actions with the model's checks after every
// step, then the liveness phase.
func (m *model) run(t *rapid.T) {
	// Most actions are followed by a synced round, so evidence reaches the
	// engine before the next action and the strong checks apply; some by a
	// bare round that races the engine's goroutines; some by nothing, so that
	// evidence piles up.
	then := func(action func(*rapid.T)) func(*rapid.T) {
		return func(t *rapid.T) {
			action(t)
			switch rapid.IntRange(0, 9).Draw(t, "then") {
			case 0:
				m.check(false)
			case 1:
				m.round(false)
			default:
				m.round(true)
			}
		}
	}
	actions := []struct {
		name   string
		weight int
		do     func(*rapid.T)
	}{
		{"lend", 5, then(m.lend)},
		{"round", 2, func(*rapid.T) { m.round(true) }},
		{"outcome", 5, then(m.outcome)},
		{"change", 1, then(m.change)},
		{"quiesce", 2, then(m.quiesceMode)},
		{"unblock", 1, then(func(*rapid.T) { m.unblock() })},
		{"late_write", 2, then(m.lateWrite)},
		{"copy", 4, then(m.copyEvent)},
		{"layer", 3, m.layerAction},
		{"computed", 4, then(m.computedAction)},
		{"release", 3, then(m.release)},
		{"cancel", 1, then(m.cancel)},
		{"retry", 1, then(m.retry)},
		{"stale_handle", 1, m.stale},
		{"concurrent", 2, then(m.concurrent)},
		{"tick", 2, then(func(t *rapid.T) {
			m.clock.Advance(time.Duration(rapid.IntRange(1, 20).Draw(t, "advance_ms")) * time.Millisecond)
		})},
		{"time_passes", 1, then(func(t *rapid.T) {
			m.clock.Advance(time.Duration(rapid.IntRange(1, 6).Draw(t, "advance_s")) * time.Second)
		})},
		{"device_lost", 1, then(func(t *rapid.T) {
			if rapid.IntRange(0, 20).Draw(t, "really") == 0 { // rare: it ends most of the story
				m.deviceLost(t)
			}
		})},
		{"restart", 1, then(m.restart)},
		{"close", 1, then(func(t *rapid.T) {
			if rapid.IntRange(0, 10).Draw(t, "really") == 0 {
				m.close()
			}
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
	m.settle()
}

// maxSteps is the most actions a sequence draws: RAPID_STEPS, default 60.
func maxSteps() int {
	if n, err := strconv.Atoi(os.Getenv("RAPID_STEPS")); err == nil && n > 0 {
		return n
	}
	return 60
}

// TestModelRunner is the model-based suite against the runner users embed:
// readiness.Engine with its goroutines, real timing and -race.
func TestModelRunner(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { newModel(t, false).run(t) })
}

// TestModelCore is the same suite against the I/O-free core, stepped
// deterministically by a driver that shares no code with the runner.
func TestModelCore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { newModel(t, true).run(t) })
}
