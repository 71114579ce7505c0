package proptest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"pgregory.net/rapid"
)

// The rules of SPEC §4, by name. Every failure of the model suite starts with
// one of them, so a red run says which promise broke.
const (
	rule1 = "rule 1, no slot is recycled before its fence"
	rule2 = "rule 2, misses never appear as failures"
	rule3 = "rule 3, outcomes latch once"
	rule4 = "rule 4, unproven means quarantined"
	rule5 = "rule 5, stale handles are refused"
	rule6 = "rule 6, liveness"
	rule7 = "rule 7, deadlines never release"
	ruleA = "allocator invariant"
)

const (
	modelGroups = 2
	modelSlots  = 4
	drainGrace  = 5 * time.Second
)

// mLease is the model's knowledge of one lease, built from what the test did
// and what the backend, the device and the bytes of staging showed.
type mLease struct {
	serial   int
	h        readiness.Handle
	kind     readiness.Kind
	groups   int
	blocks   int
	rows     []readiness.Row
	deadline time.Time
	reject   bool

	granted     bool
	slots       []slotID // in row order, once granted
	gone        bool
	quarantined bool
	unknownQ    bool // quarantined before the model saw its slots
	releaseReq  bool
	copyFailAt  int // the round before which a copy touching it failed; -1: none
	seen        readiness.OutcomeKind
}

// model is the reference the engine is checked against after every step.
type model struct {
	t      *rapid.T
	clock  *sim.ManualClock
	dev    *sim.Device
	spy    *spy
	mem    *readiness.Memory
	be     *scripted
	eng    *readiness.Engine
	round  int
	lastAt time.Time // the clock at the latest engine round

	leases      []*mLease
	bySerial    map[int]*mLease
	byDevice    map[gpu.DevicePtr]*mLease
	owner       map[slotID]*mLease
	quarantined map[slotID]bool
	unknownQ    [modelGroups]int // quarantined slots the model never saw, by group
	lost        bool
	lostAt      int
	closed      bool
	closedAt    time.Time
	contained   int
}

func newModel(t *rapid.T) *model {
	m := &model{t: t, clock: newClock(), bySerial: map[int]*mLease{}, byDevice: map[gpu.DevicePtr]*mLease{}, owner: map[slotID]*mLease{}, quarantined: map[slotID]bool{}}
	var err error
	m.dev, err = sim.New(0, 1<<22)
	must(t, err)
	inner, err := m.dev.NewStream()
	must(t, err)
	gs := make([]readiness.Group, modelGroups)
	for g := range gs {
		gs[g] = readiness.Group{Slots: modelSlots, SlotBytes: slotBytes}
	}
	m.mem, err = readiness.NewMemory(gs...)
	must(t, err)
	m.spy = newSpy(m.dev, inner, m.mem)
	m.be = newScripted(m.mem, &m.round)
	m.be.device = func(serial, g, b int) []byte { return pattern(tagContent, serial, rowID(g, b)) }
	for g := range modelGroups {
		for s := range modelSlots {
			row, _ := m.mem.Row(g, s)
			fill(row, tagCanary)
		}
	}
	m.eng, err = readiness.New(readiness.Config{
		Memory: m.mem, TokensPerBlock: tpb, Fetcher: m.be, Publisher: m.be,
		Stream: m.spy, Health: m.dev, Clock: m.clock, Inline: true,
		RequestTimeout: time.Minute, DrainGrace: drainGrace, Logger: discardLogger(),
		OnContainment: func(readiness.Containment) { m.contained++ },
	})
	must(t, err)
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

// progress runs one engine round.
func (m *model) progress() {
	m.round++
	m.lastAt = m.clock.Now()
	m.eng.Progress()
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

func (m *model) attempt(l *mLease) *attempt { return m.be.byID[l.serial] }

// proven reports whether the backend's access to l's slots is over, as the
// backend itself knows it: rejected, never submitted, or Quiesce said true.
func (m *model) proven(l *mLease) bool {
	a := m.attempt(l)
	return l.reject || a == nil || a.ended
}

func (m *model) copiesInFlight(l *mLease) bool {
	for _, r := range l.rows {
		if m.spy.inFlight(r.Device) {
			return true
		}
	}
	return false
}

// quarantinedIn counts group g's slots out of circulation.
func (m *model) quarantinedIn(g int) int {
	n := m.unknownQ[g]
	for s := range m.quarantined {
		if s.g == g {
			n++
		}
	}
	return n
}

func (m *model) quarantinedSlots() int {
	n := 0
	for g := range modelGroups {
		n += m.quarantinedIn(g)
	}
	return n
}

// ---- actions ----

func (m *model) lend(t *rapid.T) {
	l := &mLease{serial: len(m.leases) + 1, copyFailAt: -1}
	l.kind = readiness.Fetch
	if rapid.Bool().Draw(t, "publish") {
		l.kind = readiness.Publish
	}
	l.groups = rapid.IntRange(1, modelGroups).Draw(t, "groups")
	l.blocks = rapid.IntRange(1, 3).Draw(t, "blocks")
	l.deadline = m.clock.Now().Add(time.Duration(rapid.IntRange(1, 6).Draw(t, "deadline_s")) * time.Second)
	l.reject = rapid.IntRange(0, 7).Draw(t, "reject") == 0
	req := readiness.Request{Kind: l.kind, Deadline: l.deadline}
	for g := range l.groups {
		for b := range l.blocks {
			p := gpu.DevicePtr(1) // never used: a lost device takes no lease
			if !m.lost {
				var err error
				p, err = m.dev.Alloc(slotBytes)
				must(t, err)
			}
			if l.kind == readiness.Publish && !m.lost {
				must(t, m.dev.Write(p, pattern(tagContent, l.serial, rowID(g, b))))
			}
			req.Rows = append(req.Rows, readiness.Row{Name: nameOf(l.serial, g, b), Group: g, Block: b, Device: p})
		}
	}
	l.rows = req.Rows
	m.be.reject[l.serial] = l.reject
	h, err := m.eng.Lend(req)
	switch {
	case m.closed:
		if !errors.Is(err, readiness.ErrClosed) {
			m.fail(rule6, "Lend after Close = %v; want ErrClosed", err)
		}
		return
	case m.lost && m.round > m.lostAt:
		if !errors.Is(err, readiness.ErrDeviceLost) {
			m.fail(rule4, "Lend after the device was lost = %v; want ErrDeviceLost (a lost device takes no new leases)", err)
		}
		return
	case l.blocks > modelSlots-m.quarantinedIn(0) || (l.groups > 1 && l.blocks > modelSlots-m.quarantinedIn(1)):
		if !errors.Is(err, readiness.ErrInvalidRequest) {
			m.fail(ruleA, "Lend of %d blocks with %d slots quarantined = %v; want ErrInvalidRequest", l.blocks, m.quarantinedSlots(), err)
		}
		return
	case err != nil:
		m.fail(ruleA, "Lend of %d rows: %v", len(req.Rows), err)
	}
	l.h = h
	m.leases = append(m.leases, l)
	for _, r := range l.rows {
		m.byDevice[r.Device] = l
	}
	m.bySerial[l.serial] = l
}

// pending returns the live leases whose attempt has no outcome yet.
func (m *model) pendingAttempts() []*mLease {
	var out []*mLease
	for _, l := range m.live() {
		if a := m.attempt(l); a != nil && a.outcome == nil {
			out = append(out, l)
		}
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
	kinds := []string{"all", "some", "none", "failed", "cancelled", "extra"}
	switch {
	case a.ended: // it may touch memory no more: only answers that write nothing
		kinds = []string{"none", "failed", "cancelled"}
	case a.dirty: // it already wrote: a miss or partial would leave garbage as "untouched"
		kinds = []string{"all", "failed", "cancelled"}
	}
	var asked []contract.Name
	for _, u := range a.units {
		asked = append(asked, u.Name)
	}
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
		a.outcome = contract.Delivered{}
	case "failed":
		a.outcome = contract.Failed{Reason: "scripted transport error"}
	case "cancelled":
		a.outcome = contract.Cancelled{ByPeer: rapid.Bool().Draw(t, "by_peer")}
	case "extra":
		m.be.deliver(a, asked)
		a.outcome = contract.Delivered{Served: contract.NewNameSet(append(asked, nameOf(9999, 0, 0))...)}
	}
}

func (m *model) change(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.live() {
		if a := m.attempt(l); a != nil && a.first != nil && sameOutcome(a.first, a.outcome) {
			cands = append(cands, l)
		}
	}
	if len(cands) == 0 {
		return
	}
	a := m.attempt(pick(t, "lease", cands))
	a.changedAt = m.round
	if _, ok := a.first.(contract.Delivered); ok {
		a.outcome = contract.Failed{Reason: "changed its mind"}
	} else {
		a.outcome = contract.Delivered{}
	}
}

func (m *model) quiesceAnswer(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.live() {
		if a := m.attempt(l); a != nil && !a.ended && a.mode == quiesceTrue {
			cands = append(cands, l)
		}
	}
	if len(cands) == 0 {
		return
	}
	a := m.attempt(pick(t, "lease", cands))
	a.mode = rapid.SampledFrom([]quiesceMode{quiesceFalse, quiesceError}).Draw(t, "mode")
}

// lateWrite makes a transfer that has not ended write again: legal, and
// exactly what a slot recycled too early is hit by.
func (m *model) lateWrite(t *rapid.T) {
	var cands []*attempt
	for _, l := range m.leases { // gone leases too: their transfers may go on
		a := m.attempt(l)
		if a == nil || a.ended {
			continue
		}
		switch a.outcome.(type) {
		case nil, contract.Failed, contract.Cancelled:
			cands = append(cands, a)
		}
	}
	if len(cands) == 0 {
		return
	}
	m.be.lateWrite(pick(t, "attempt", cands))
}

func (m *model) copyEvent(t *rapid.T) {
	if !m.spy.pending() {
		return
	}
	ok := rapid.IntRange(0, 4).Draw(t, "copy_fails") != 0
	slots := m.spy.resolve(ok)
	if !ok {
		m.copiesFailed(slots)
	}
}

func (m *model) copiesFailed(rows []gpu.DevicePtr) {
	for _, p := range rows {
		if l := m.byDevice[p]; l != nil && l.copyFailAt < 0 {
			l.copyFailAt = m.round
		}
	}
}

func (m *model) release(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.live() {
		if !l.releaseReq || l.quarantined { // a quarantined lease is released to retire its handle
			cands = append(cands, l)
		}
	}
	if len(cands) == 0 {
		return
	}
	l := pick(t, "lease", cands)
	if err := m.eng.Release(l.h); err != nil {
		m.fail(rule6, "Release(%v) of a live lease: %v", l.h, err)
	}
	l.releaseReq = true
}

func (m *model) stale(t *rapid.T) {
	var cands []*mLease
	for _, l := range m.leases {
		if l.gone {
			cands = append(cands, l)
		}
	}
	if len(cands) == 0 {
		return
	}
	l := pick(t, "lease", cands)
	before := m.eng.Stats()
	_, e1 := m.eng.Lease(l.h)
	_, e2 := m.eng.Readiness(l.h)
	_, e3 := m.eng.Runs(l.h, nil)
	e4 := m.eng.Release(l.h)
	for i, err := range []error{e1, e2, e3, e4} {
		if !errors.Is(err, readiness.ErrStaleHandle) {
			m.fail(rule5, "call %d with the released handle %v answered %v; want ErrStaleHandle", i, l.h, err)
		}
	}
	if after := m.eng.Stats(); after != before {
		m.fail(rule5, "a call with the stale handle %v changed the engine: %+v -> %+v", l.h, before, after)
	}
}

func (m *model) deviceLost() {
	if m.lost {
		return
	}
	m.dev.Lose("Xid 79: GPU has fallen off the bus")
	m.lost, m.lostAt = true, m.round
	m.copiesFailed(m.spy.lose())
}

func (m *model) close() {
	if m.closed {
		return
	}
	m.round++
	m.lastAt = m.clock.Now()
	m.closed, m.closedAt = true, m.clock.Now()
	m.eng.Close()
}

// ---- checks ----

// check compares the engine with the model after a step.
func (m *model) check() {
	m.t.Helper()
	for _, f := range m.be.faults {
		m.fail(rule1, "%s", f)
	}
	for _, l := range m.leases {
		if !l.gone {
			m.checkLease(l)
		}
	}
	m.checkBytes()
	m.checkCounts()
}

func (m *model) checkLease(l *mLease) {
	info, err := m.eng.Lease(l.h)
	if err != nil {
		if !errors.Is(err, readiness.ErrStaleHandle) {
			m.fail(rule5, "Lease(%v) = %v; want the lease or ErrStaleHandle", l.h, err)
		}
		m.gone(l)
		return
	}
	if info.Handle != l.h || info.Rows != len(l.rows) || info.Kind != l.kind {
		m.fail(rule5, "Lease(%v) describes another lease: %+v", l.h, info)
	}
	if !l.granted && info.State != fsm.Waiting {
		m.granted(l, info.State)
	}
	a := m.attempt(l)
	switch info.State {
	case fsm.AccessFenced:
		if !m.proven(l) {
			m.fail(rule1, "lease %d is access_fenced, but its backend never proved access over (quiesce never answered true)", l.serial)
		}
		fallthrough
	case fsm.LogicallyComplete:
		if m.copiesInFlight(l) {
			m.fail(rule1, "lease %d is %v while a local copy touching its slots is still in flight", l.serial, info.State)
		}
		m.checkReadiness(l, info)
	case fsm.Quarantined:
		if !l.quarantined {
			l.quarantined = true
			for _, s := range l.slots {
				m.quarantined[s] = true
			}
			if !l.granted {
				l.unknownQ = true
				for g := range l.groups {
					m.unknownQ[g] += l.blocks
				}
			}
		}
		m.checkQuarantineReason(l)
	}
	if info.State != fsm.Quarantined {
		if a != nil && a.unproven && m.round > a.unprovAt {
			m.fail(rule4, "lease %d: Quiesce answered false or an error for its attempt, yet it is %v, not quarantined", l.serial, info.State)
		}
		if l.copyFailAt >= 0 && m.round > l.copyFailAt {
			m.fail(rule4, "lease %d: a local copy touching it failed (or its device was lost), yet it is %v, not quarantined", l.serial, info.State)
		}
	}
	m.checkOutcome(l, info)
}

// granted records the slots the engine lent and checks the allocator's
// invariants: one contiguous run per group, no slot lent twice, no
// quarantined slot lent again, strict arrival order.
func (m *model) granted(l *mLease, st fsm.State) {
	runs, err := m.eng.Runs(l.h, nil)
	if err != nil {
		m.fail(rule5, "Runs(%v): %v", l.h, err)
	}
	if len(runs) == 0 {
		return // quarantined before the model saw its slots
	}
	l.granted = true
	for _, x := range m.leases {
		if x == l {
			break
		}
		if !x.gone && !x.granted {
			info, err := m.eng.Lease(x.h)
			if err != nil || info.State != fsm.Waiting {
				continue
			}
			if info.Ungrantable {
				// Taken out of the line because quarantine left too few slots:
				// check that it really can never be granted.
				if x.blocks <= modelSlots-m.quarantinedIn(0) && (x.groups < 2 || x.blocks <= modelSlots-m.quarantinedIn(1)) {
					m.fail(ruleA, "lease %d (%d blocks) reported ungrantable with only %d slots quarantined", x.serial, x.blocks, m.quarantinedSlots())
				}
				continue
			}
			m.fail(ruleA, "lease %d was granted before lease %d, lent earlier and still waiting: grants must follow arrival order", l.serial, x.serial)
		}
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
			if m.quarantined[s] {
				m.fail(rule4, "quarantined slot %v lent again to lease %d", s, l.serial)
			}
			row, _ := m.mem.Row(s.g, s.s)
			if !filled(row, tagCanary) {
				m.fail(rule1, "slot %v, just lent to lease %d, was written while free: %x", s, l.serial, row)
			}
			copy(row, pattern(tagStamp, l.serial, rowID(r.Group, k)))
			m.owner[s] = l
			l.slots = append(l.slots, s)
		}
	}
}

// gone checks that a lease the engine no longer knows was allowed to go, and
// returns its slots to the model's free set with fresh canaries.
func (m *model) gone(l *mLease) {
	l.gone = true
	switch {
	case l.quarantined:
		if !l.releaseReq {
			m.fail(rule4, "quarantined lease %d vanished without the manager releasing it", l.serial)
		}
		return // its slots stay out of circulation for ever
	case !l.granted:
		if !l.releaseReq && !m.closed {
			m.fail(rule6, "waiting lease %d vanished without a release or Close", l.serial)
		}
	default:
		if !l.releaseReq && !m.closed {
			m.fail(rule1, "lease %d was released without a release request or Close", l.serial)
		}
		if !m.proven(l) {
			m.fail(rule1, "lease %d's slots were recycled, but its backend never proved access over (an outcome, error, cancel, timeout, exit or close is no proof)", l.serial)
		}
		if m.copiesInFlight(l) {
			m.fail(rule1, "lease %d's slots were recycled while a local copy touching them was in flight", l.serial)
		}
		if l.copyFailAt >= 0 {
			m.fail(rule4, "lease %d's slots were recycled although a copy touching them failed", l.serial)
		}
	}
	for _, s := range l.slots {
		delete(m.owner, s)
		row, _ := m.mem.Row(s.g, s.s)
		fill(row, tagCanary)
	}
}

func (m *model) checkQuarantineReason(l *mLease) {
	a := m.attempt(l)
	if (a != nil && a.unproven) || l.copyFailAt >= 0 || m.lost {
		return
	}
	start := l.deadline
	if m.closed && m.closedAt.Before(start) {
		start = m.closedAt
	}
	if !m.lastAt.Before(start.Add(drainGrace)) {
		return // a drain grace period expired
	}
	m.fail(rule4, "lease %d was quarantined with no unproven answer, failed copy, lost device or expired drain", l.serial)
}

// expected lists the outcome kinds the engine may report for l, from the
// backend's first answer (what the engine polled) alone.
func (m *model) checkOutcome(l *mLease, info readiness.LeaseInfo) {
	a := m.attempt(l)
	var allowed []readiness.OutcomeKind
	rule := rule2
	switch {
	case l.reject && a == nil:
		allowed = []readiness.OutcomeKind{readiness.NoOutcome, readiness.Failed}
	case a == nil || a.first == nil:
		allowed = []readiness.OutcomeKind{readiness.NoOutcome}
		if !m.lastAt.Before(l.deadline) {
			allowed = append(allowed, readiness.Failed)
		}
		rule = rule7
	case a.extra:
		allowed, rule = []readiness.OutcomeKind{readiness.Failed}, rule3
	default:
		switch o := a.first.(type) {
		case contract.Delivered:
			switch {
			case o.Served.Len() == 0:
				allowed = []readiness.OutcomeKind{readiness.Missed}
			case o.Served.Len() == len(a.units):
				allowed = []readiness.OutcomeKind{readiness.Served, readiness.Failed}
			default:
				allowed = []readiness.OutcomeKind{readiness.Partial, readiness.Failed}
			}
		default:
			allowed = []readiness.OutcomeKind{readiness.Failed}
		}
	}
	if !slices.Contains(allowed, info.Outcome) {
		m.fail(rule, "lease %d: the backend answered %v first, the engine reports %v (allowed: %v; reason %q)", l.serial, firstOf(a), info.Outcome, allowed, info.Reason)
	}
	if l.seen != readiness.NoOutcome && info.Outcome != l.seen {
		if info.Outcome != readiness.Failed || a == nil || a.changed == 0 {
			m.fail(rule3, "lease %d: latched outcome moved from %v to %v without a changed answer", l.serial, l.seen, info.Outcome)
		}
	}
	l.seen = info.Outcome
	// Rule 3: an answer that changed after the engine latched it and before
	// access was proven must be caught when the proof arrives: the engine
	// polls once more and finds it. The backend sees that poll, or its absence.
	if a != nil && a.first != nil && a.ended && a.changedAt >= 0 && a.firstAt <= a.endedAt &&
		a.changedAt <= a.endedAt && m.round > a.endedAt && a.changed == 0 && info.State != fsm.Quarantined {
		m.fail(rule3, "lease %d: the backend changed its answer from %v to %v before access was proven, and the engine never checked it again", l.serial, a.first, a.outcome)
	}
	// Rule 7: a submitted lease with no answer by its deadline fails with a timeout.
	if a != nil && a.first == nil && info.State != fsm.Quarantined && !m.lastAt.Before(l.deadline) {
		if info.Outcome != readiness.Failed || !strings.Contains(info.Reason, "timeout") {
			m.fail(rule7, "lease %d: submitted, no outcome, deadline %v passed (engine at %v), yet it reports %v in %v (%q)", l.serial, l.deadline, m.lastAt, info.Outcome, info.State, info.Reason)
		}
	}
}

func firstOf(a *attempt) any {
	if a == nil || a.first == nil {
		return "nothing"
	}
	return a.first
}

// checkReadiness compares the readiness answer and the device bytes with what
// the backend served.
func (m *model) checkReadiness(l *mLease, info readiness.LeaseInfo) {
	if l.kind != readiness.Fetch {
		return
	}
	iv, err := m.eng.Readiness(l.h)
	if err != nil {
		m.fail(rule2, "lease %d in %v: Readiness: %v", l.serial, info.State, err)
	}
	want := 0
	if info.Outcome == readiness.Served || info.Outcome == readiness.Partial {
		served := m.attempt(l).first.(contract.Delivered).Served
		for b := range l.blocks {
			all := true
			for g := range l.groups {
				all = all && served.Has(nameOf(l.serial, g, b))
			}
			if !all {
				break
			}
			want++
		}
		for _, r := range l.rows {
			if !served.Has(r.Name) || m.lost { // a lost device answers no reads
				continue
			}
			got := make([]byte, slotBytes)
			must(m.t, m.dev.Read(got, r.Device))
			if w := pattern(tagContent, l.serial, rowID(r.Group, r.Block)); string(got) != string(w) {
				m.fail(rule1, "lease %d is %v but served row (%d,%d) on the device holds %x, not %x: readiness answered before the copy landed, or from a recycled slot", l.serial, info.State, r.Group, r.Block, got, w)
			}
		}
	}
	if iv != (staging.Interval{RestartFloor: 0, UsableUntil: want * tpb}) {
		m.fail(rule2, "lease %d (%v): readiness %v; want [0, %d]", l.serial, info.Outcome, iv, want*tpb)
	}
}

// checkBytes reads every staging slot: a free slot must still hold its
// canary, a lent one only what its own lease's transfer, copy or manager put
// there. A late write into a recycled slot shows up here, in the bytes.
func (m *model) checkBytes() {
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
					m.fail(rule1, "free slot %v was written after it was recycled: %x", id, row)
				}
				continue
			}
			r := l.rows[slices.Index(l.slots, id)]
			own := rowID(r.Group, r.Block)
			if string(row) != string(pattern(tagStamp, l.serial, own)) &&
				string(row) != string(pattern(tagContent, l.serial, own)) &&
				string(row) != string(pattern(tagLate, l.serial, 0xFF)) &&
				!filled(row, sim.Poison) {
				m.fail(rule1, "slot %v of lease %d holds bytes another transfer wrote: %x", id, l.serial, row)
			}
		}
	}
}

// checkCounts compares the allocator's counts with the model's.
func (m *model) checkCounts() {
	st := m.eng.Stats()
	q := m.quarantinedSlots()
	if st.SlotsQuarantined != q {
		m.fail(rule4, "the engine counts %d quarantined slots, the model %d: quarantined slots never return", st.SlotsQuarantined, q)
	}
	// The allocator grants inside Lend and Release; the engine takes the
	// grant in its next round. So a waiting lease may already hold slots.
	held, waiting := 0, 0
	for _, l := range m.live() {
		switch {
		case l.granted && !l.quarantined:
			held += len(l.rows)
		case !l.granted && !l.quarantined:
			waiting += len(l.rows)
		}
	}
	if st.SlotsHeld < held || st.SlotsHeld > held+waiting || st.SlotsFree+st.SlotsHeld+st.SlotsQuarantined != modelGroups*modelSlots {
		m.fail(ruleA, "slots held %d free %d; the model has %d held, %d waiting, %d quarantined of %d", st.SlotsHeld, st.SlotsFree, held, waiting, q, modelGroups*modelSlots)
	}
	var missed, violations uint64
	for _, l := range m.leases {
		a := m.attempt(l)
		if a == nil || a.first == nil {
			continue
		}
		if d, ok := a.first.(contract.Delivered); ok && d.Served.Len() == 0 && !a.extra {
			missed++
		}
		if a.extra {
			violations++
		}
		violations += uint64(a.changed)
	}
	if st.Outcomes.Missed != missed {
		m.fail(rule2, "the engine counts %d misses; the backend answered %d", st.Outcomes.Missed, missed)
	}
	if st.Outcomes.Violations != violations {
		m.fail(rule3, "the engine counts %d contract violations; the backend committed %d (unasked names, changed answers)", st.Outcomes.Violations, violations)
	}
	if st.InvariantBreaches != 0 {
		m.fail(ruleA, "the engine counted %d allocator refusals", st.InvariantBreaches)
	}
}

// settle is the liveness half: the backend answers everything, every copy
// completes, the manager releases everything; then every lease must go.
func (m *model) settle() {
	for range 40 {
		for _, l := range m.pendingAttempts() {
			a := m.attempt(l)
			if a.ended {
				a.outcome = contract.Failed{Reason: "ended without an answer"}
				continue
			}
			var asked []contract.Name
			for _, u := range a.units {
				asked = append(asked, u.Name)
			}
			m.be.deliver(a, asked)
		}
		for m.spy.pending() {
			m.spy.resolve(true)
		}
		m.progress()
		m.check()
		for _, l := range m.live() {
			if !l.releaseReq || l.quarantined {
				if err := m.eng.Release(l.h); err != nil {
					m.fail(rule6, "Release(%v): %v", l.h, err)
				}
				l.releaseReq = true
			}
		}
		m.check()
		if len(m.live()) == 0 {
			break
		}
	}
	quarantine := m.quarantinedSlots() > 0
	for _, l := range m.live() {
		if !quarantine {
			info, _ := m.eng.Lease(l.h)
			m.fail(rule6, "lease %d is still %v after the backend answered, every copy landed and the manager released it", l.serial, info.State)
		}
		if info, err := m.eng.Lease(l.h); err == nil && info.State != fsm.Waiting {
			m.fail(rule6, "lease %d is stuck in %v", l.serial, info.State)
		}
	}
	if !quarantine && m.eng.Stats().SlotsFree != modelGroups*modelSlots {
		m.fail(rule6, "with nothing quarantined, %d of %d slots are free at the end", m.eng.Stats().SlotsFree, modelGroups*modelSlots)
	}
	if m.closed && !m.eng.Report().Drained {
		m.fail(rule6, "closed engine not drained: %+v", m.eng.Report())
	}
}

// TestModel is the model-based property suite: any sequence of the actions
// below, the model's invariants after every step, and liveness at the end.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newModel(t)
		// Every action but the bare rounds is followed, half the time, by an
		// engine round: evidence then usually reaches the engine before the
		// next action, which steers sequences deep into the lifecycle, while
		// the other half keeps the interleavings where evidence piles up.
		then := func(action func(*rapid.T)) func(*rapid.T) {
			return func(t *rapid.T) {
				action(t)
				if rapid.Bool().Draw(t, "then_progress") {
					m.progress()
				}
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"lend":         then(m.lend),
			"lend_more":    then(m.lend),
			"progress":     func(*rapid.T) { m.progress() },
			"outcome":      then(m.outcome),
			"change":       then(m.change),
			"quiesce":      then(m.quiesceAnswer),
			"late_write":   then(m.lateWrite),
			"copy":         then(m.copyEvent),
			"release":      then(m.release),
			"stale_handle": m.stale,
			"deadline": then(func(t *rapid.T) {
				m.clock.Advance(time.Duration(rapid.IntRange(1, 4).Draw(t, "advance_s")) * time.Second)
			}),
			"device_lost": then(func(t *rapid.T) {
				if rapid.IntRange(0, 15).Draw(t, "really") == 0 { // rare: it ends most of the story
					m.deviceLost()
				}
			}),
			"close": then(func(t *rapid.T) {
				if rapid.IntRange(0, 7).Draw(t, "really") == 0 {
					m.close()
				}
			}),
			"": func(*rapid.T) { m.check() },
		})
		m.settle()
	})
}
