package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
)

// The fault tests drive the backend as a KV cache manager does — many leases
// in flight, each a fetch or a publication of a few blocks × layer groups in
// staging slots of its own; Quiesce asked from the submission on, with the
// containment deadline an engine would fix (the attempt's bound plus a
// grace); a lease's slots reused only once Quiesce answered true — while a
// fault hits the store. A checker that knows nothing of the backend's
// internals judges every attempt from what it can see: the canaries and
// poison in staging, what was published and confirmed, and what each fetch
// returned.

// grace is the containment margin the fault tests allow past an attempt's
// bound, measured from its submission: what an engine's drain grace must
// cover. It is well inside the engine's default drain grace (10s), and wide
// enough for a loaded 2-core machine running the race detector.
const grace = 2 * time.Second

// rigGroups and rigBlocks shape a lease: rigBlocks blocks × rigGroups layer
// groups, one unit each.
const (
	rigGroups = 2
	rigBlocks = 2
)

// ghost blocks are never published: serving one is corruption.
const ghost = 1 << 20

// rig drives one backend through phases, with lanes leases in flight.
type rig struct {
	t         *testing.T
	b         *kvredis.Backend
	mem       *staging
	slotBytes int
	bound     time.Duration
	lanes     int

	fresh atomic.Int64 // the next never-used block for a publication

	mu      sync.Mutex
	epoch   int                 // data-loss events so far (a restart, a failover)
	known   map[int]int         // block → the epoch it was confirmed stored in; durable: -1
	uses    []int               // per lane: how many leases it has run
	dead    []bool              // per lane: a lease was contained; its slots are never reused
	poisons map[[2]int][]byte   // (group, slot) → what was written after the last proof
	counts  map[string]int      // "phase/kind" → attempts
	byLane  []map[string]int    // per lane: "phase/kind" → attempts
	notes   map[string][]string // a few examples per count, for the log
}

// newRig sets up staging for lanes leases over b (whose Memory must be
// mem) and returns the rig.
func newRig(t *testing.T, b *kvredis.Backend, mem *staging, slotBytes int, bound time.Duration, lanes int) *rig {
	r := &rig{t: t, b: b, mem: mem, slotBytes: slotBytes, bound: bound, lanes: lanes,
		known: map[int]int{}, uses: make([]int, lanes), dead: make([]bool, lanes),
		poisons: map[[2]int][]byte{}, counts: map[string]int{}, byLane: make([]map[string]int, lanes),
		notes: map[string][]string{}}
	for l := range lanes {
		r.byLane[l] = map[string]int{}
	}
	r.fresh.Store(1000)
	return r
}

// rigStaging is staging for lanes leases of slotBytes rows.
func rigStaging(lanes, slotBytes int) *staging {
	return newStaging(rigGroups, lanes*rigBlocks, slotBytes)
}

// phase says what the checker may accept while it runs.
type phase struct {
	name string
	// lossy: units may vanish at any moment (eviction); a miss of a known
	// unit proves nothing.
	lossy bool
	// noFetchFailures: the store answers throughout; a failed fetch is a
	// failure reported where a miss (or a hit) was due.
	noFetchFailures bool
	// publish is the share of leases that publish fresh blocks (0..1).
	publish float64
}

// lease is one attempt the rig made and what it saw.
type lease struct {
	lane, use int
	publish   bool
	blocks    []int
	epoch     int // at submission
	units     []contract.Unit
}

func (l *lease) String() string {
	op := "fetch"
	if l.publish {
		op = "publish"
	}
	return fmt.Sprintf("lane %d lease %d (%s of blocks %v, epoch %d)", l.lane, l.use, op, l.blocks, l.epoch)
}

// seed publishes blocks 0..n-1 (each lease sequentially, retried while the
// store fails) and marks them known; durable ones stay known across
// data-loss events (a Cluster's replicated seed).
func (r *rig) seed(n int, durable bool) {
	for lo := 0; lo < n; lo += rigBlocks {
		blocks := []int{lo, lo + 1}
		for try := 0; ; try++ {
			require.Less(r.t, try, 100, "the store never accepted the seed")
			if o := r.one(phase{name: "seed"}, 0, true, blocks); o != nil {
				if _, ok := o.(contract.Delivered); ok {
					break
				}
			}
		}
	}
	if durable {
		r.mu.Lock()
		for blk := range n {
			r.known[blk] = -1
		}
		r.mu.Unlock()
	}
}

// lossEvent records that the store may have lost what it held: units known
// in earlier epochs are no longer expected.
func (r *rig) lossEvent() {
	r.mu.Lock()
	r.epoch++
	r.mu.Unlock()
}

// run drives every live lane through phase p until stop is closed or each
// has run max leases, and returns when they have all returned.
func (r *rig) run(p phase, stop <-chan struct{}, max int) {
	var wg sync.WaitGroup
	for lane := range r.lanes {
		wg.Go(func() {
			for i := 0; i < max; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if r.isDead(lane) {
					return
				}
				publish := float64((lane*7+i*3)%10) < 10*p.publish
				r.one(p, lane, publish, r.pick(lane, i, publish))
			}
		})
	}
	wg.Wait()
}

// start runs phase p in the background; the returned func stops it and
// waits for every lane.
func (r *rig) start(p phase, max int) (stopAndWait func()) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { r.run(p, stop, max); close(done) }()
	return func() {
		close(stop)
		receive(r.t, done, "the lanes to stop")
	}
}

// pick chooses a lease's blocks: fresh ones to publish; known ones to fetch,
// now and then with a ghost.
func (r *rig) pick(lane, i int, publish bool) []int {
	if publish {
		n := r.fresh.Add(rigBlocks)
		return []int{int(n) - 2, int(n) - 1}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var known []int
	for blk := range r.known {
		known = append(known, blk)
	}
	sort.Ints(known)
	if len(known) == 0 || (lane+i)%7 == 0 {
		return []int{ghost + lane, ghost + r.lanes + i%rigBlocks}
	}
	a := known[(lane*31+i*17)%len(known)]
	b := known[(lane*13+i*29+1)%len(known)]
	if a == b {
		return []int{a}
	}
	return []int{a, b}
}

func (r *rig) isDead(lane int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dead[lane]
}

// count records one attempt of kind in phase p, on lane.
func (r *rig) count(p phase, lane int, kind, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := p.name + "/" + kind
	r.counts[k]++
	r.byLane[lane][k]++
	if len(r.notes[k]) < 2 && note != "" {
		r.notes[k] = append(r.notes[k], note)
	}
}

// one runs one lease on lane and checks it; it returns the outcome, or nil
// if the lease was contained (Quiesce did not prove its access over in time).
func (r *rig) one(p phase, lane int, publish bool, blocks []int) contract.Outcome {
	t := r.t
	r.mu.Lock()
	use := r.uses[lane]
	r.uses[lane]++
	l := &lease{lane: lane, use: use, publish: publish, blocks: blocks, epoch: r.epoch}
	r.mu.Unlock()

	// The slots must hold what was written after the last proof.
	for k, blk := range blocks {
		for g := range rigGroups {
			slot := lane*rigBlocks + k
			r.mu.Lock()
			want := r.poisons[[2]int{g, slot}]
			r.mu.Unlock()
			if want != nil && !bytes.Equal(r.mem.rows[g][slot], want) {
				t.Errorf("%v: slot (%d,%d) was written after Quiesce answered true for the lease before", l, g, slot)
			}
			if publish {
				copy(r.mem.rows[g][slot], content(blk, g, r.slotBytes))
			} else {
				copy(r.mem.rows[g][slot], canary(g, slot, r.slotBytes))
			}
			l.units = append(l.units, unit(blk, g, slot))
		}
	}
	e, err := contract.NewCacheExtent([]byte(ext), l.units, false)
	require.NoError(t, err)
	submitted := time.Now()
	var a contract.Attempt
	if publish {
		a, err = r.b.Publish(e)
	} else {
		a, err = r.b.Fetch(e, nil)
	}
	if err != nil {
		return r.refused(p, l, err)
	}
	// The containment deadline an engine fixes at submission.
	ctx, cancel := context.WithDeadline(context.Background(), submitted.Add(r.bound+grace))
	ok, qerr := r.b.Quiesce(ctx, []contract.Attempt{a})
	cancel()
	if !ok || qerr != nil {
		t.Errorf("%v: contained: Quiesce did not prove its access over within its bound %v + %v of its submission: %v, %v (outcome %v)",
			l, r.bound, grace, ok, qerr, a.Poll())
		r.mu.Lock()
		r.dead[lane] = true
		r.mu.Unlock()
		r.count(p, lane, "contained", l.String())
		return nil
	}
	sctx, scancel := context.WithTimeout(context.Background(), wait)
	err = r.b.Settle(sctx, []contract.Attempt{a})
	scancel()
	require.NoError(t, err, "%v: no outcome", l)
	o := a.Poll()
	r.check(p, l, o)
	r.reuse(l)
	return o
}

// reuse poisons the lease's slots, as their next tenant would write them:
// the next lease on the lane finds the poison intact, or the backend wrote
// them after its proof (or after refusing the submission).
func (r *rig) reuse(l *lease) {
	for k := range l.blocks {
		for g := range rigGroups {
			slot := l.lane*rigBlocks + k
			pz := poisonOf(g, slot, l.use, r.slotBytes)
			copy(r.mem.rows[g][slot], pz)
			r.mu.Lock()
			r.poisons[[2]int{g, slot}] = pz
			r.mu.Unlock()
		}
	}
}

// refusalPause is how long a lane waits after a refusal before its next
// lease, as a manager recomputes instead: lanes do not spin while the store
// is held for down.
const refusalPause = 5 * time.Millisecond

// refused judges a submission refused at once. Only a store held for down
// may refuse, and never in a phase where it answers throughout. Nothing
// escaped, so the slots are reused at once, without a Quiesce: the next
// lease's check finds them as this one left them, or the backend wrote them.
func (r *rig) refused(p phase, l *lease, err error) contract.Outcome {
	t := r.t
	switch {
	case !errors.Is(err, contract.ErrSubmissionRejected):
		t.Errorf("%v: submission refused without saying nothing escaped (contract.ErrSubmissionRejected): %v", l, err)
	case !errors.Is(err, kvredis.ErrUnavailable):
		t.Errorf("%v: submission refused for another reason than a store held for down: %v", l, err)
	case p.noFetchFailures:
		t.Errorf("%v: refused while the store answered throughout: %v", l, err)
	}
	if !strings.Contains(err.Error(), "store unavailable") {
		t.Errorf("%v: a refusal that does not say the store is unavailable: %v", l, err)
	}
	if !l.publish {
		for _, u := range l.units {
			if !r.mem.untouched(u.LocalGroup, u.Local) {
				t.Errorf("%v: a refused fetch wrote unit (%d,%d)", l, u.LocalGroup, u.Local)
			}
		}
	}
	r.count(p, l.lane, "refused", l.String()+": "+err.Error())
	r.reuse(l)
	time.Sleep(refusalPause)
	return contract.Failed{Reason: err.Error()}
}

// check judges one lease's outcome and staging.
func (r *rig) check(p phase, l *lease, o contract.Outcome) {
	t := r.t
	r.mu.Lock()
	settledEpoch := r.epoch
	known := map[int]int{}
	for blk, e := range r.known {
		known[blk] = e
	}
	r.mu.Unlock()
	requested := map[contract.Name]bool{}
	for _, u := range l.units {
		requested[u.Name] = true
	}
	var kind string
	switch o := o.(type) {
	case contract.Delivered:
		for n := range o.Served.All() {
			if !requested[n] {
				t.Errorf("%v: served a name it was not asked for", l)
			}
		}
		switch {
		case l.publish && o.Served.Len() != len(l.units):
			t.Errorf("%v: a publication delivered %d of %d units; SET NX stores every unit or fails", l, o.Served.Len(), len(l.units))
		case l.publish:
			kind = "published"
			if l.epoch == settledEpoch {
				r.mu.Lock()
				for _, blk := range l.blocks {
					if _, ok := r.known[blk]; !ok {
						r.known[blk] = l.epoch
					}
				}
				r.mu.Unlock()
			}
		case o.Served.Len() == len(l.units):
			kind = "served"
		case o.Served.Len() == 0:
			kind = "missed"
		default:
			kind = "partial"
		}
		if l.publish {
			break
		}
		for _, u := range l.units {
			blk := blockOf(l, u)
			row := r.mem.rows[u.LocalGroup][u.Local]
			switch {
			case o.Served.Has(u.Name) && blk >= ghost:
				t.Errorf("%v: served block %d, which was never published", l, blk)
			case o.Served.Has(u.Name) && !bytes.Equal(row, content(blk, u.LocalGroup, r.slotBytes)):
				t.Errorf("%v: served unit (block %d, group %d) holds other bytes than were published", l, blk, u.LocalGroup)
			case !o.Served.Has(u.Name) && !r.mem.untouched(u.LocalGroup, u.Local):
				t.Errorf("%v: unserved unit (block %d, group %d) was written", l, blk, u.LocalGroup)
			}
			e, isKnown := known[blk]
			stable := e == -1 || (e == l.epoch && l.epoch == settledEpoch)
			if !o.Served.Has(u.Name) && isKnown && stable && !p.lossy {
				t.Errorf("%v: known block %d (stored in epoch %d, nothing lost since) reported as a miss: a failure taken for a miss", l, blk, e)
			}
		}
	case contract.Failed:
		kind = "failed"
		if !l.publish && p.noFetchFailures {
			t.Errorf("%v: failed while the store answered throughout (a miss or a hit was due): %s", l, o.Reason)
		}
		r.checkUndefined(l)
	case contract.Cancelled:
		t.Errorf("%v: cancelled, though nobody asked", l)
	default:
		t.Errorf("%v: outcome %v", l, o)
	}
	if kind != "" {
		note := l.String()
		if f, ok := o.(contract.Failed); ok {
			note += ": " + f.Reason
		}
		r.count(p, l.lane, kind, note)
	}
}

// checkUndefined: a failed fetch's rows are undefined by the contract, but
// this backend lands only a value of the row's length, in order: each row
// holds its canary, its whole content, or — a value cut off part way by a
// dropped connection or the bound, read straight into the row — a first part
// of its content over the rest of its canary. Anything else is a wrong write.
func (r *rig) checkUndefined(l *lease) {
	if l.publish {
		return
	}
	for _, u := range l.units {
		blk := blockOf(l, u)
		row := r.mem.rows[u.LocalGroup][u.Local]
		want, was := content(blk, u.LocalGroup, r.slotBytes), canary(u.LocalGroup, u.Local, r.slotBytes)
		landed := 0
		for landed < len(row) && row[landed] == want[landed] {
			landed++
		}
		if !bytes.Equal(row[landed:], was[landed:]) {
			r.t.Errorf("%v: a failed fetch left unit (block %d, group %d) holding neither its canary nor its content, nor a first part of its content over its canary", l, blk, u.LocalGroup)
		}
	}
}

func blockOf(l *lease, u contract.Unit) int {
	return l.blocks[(u.Local-l.lane*rigBlocks)%rigBlocks]
}

// poisonOf is what the rig writes into a slot once Quiesce answered true.
func poisonOf(g, slot, use, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(0x3C ^ g*5 ^ slot*17 ^ use*7 ^ i*13)
	}
	return b
}

// finish closes the backend (every goroutine of it ends), then checks that
// no slot was written after its last proof, and that no lease was contained.
func (r *rig) finish() {
	require.NoError(r.t, r.b.Close())
	r.mu.Lock()
	defer r.mu.Unlock()
	for gs, want := range r.poisons {
		if !bytes.Equal(r.mem.rows[gs[0]][gs[1]], want) {
			r.t.Errorf("slot (%d,%d) was written after Quiesce answered true for its last lease", gs[0], gs[1])
		}
	}
	var keys []string
	for k := range r.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-28s %5d  %s\n", k, r.counts[k], strings.Join(r.notes[k], "; "))
	}
	r.t.Logf("attempts by phase and outcome:\n%s", b.String())
	for lane, d := range r.dead {
		if d {
			r.t.Errorf("lane %d had a lease contained: its slots would never return", lane)
		}
	}
}

// total is how many attempts of phase/kind all lanes have seen.
func (r *rig) total(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[key]
}

// attempts is how many attempts lane has made in phase p, of any kind.
func (r *rig) attempts(lane int, p phase) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, v := range r.byLane[lane] {
		if strings.HasPrefix(k, p.name+"/") {
			n += v
		}
	}
	return n
}

// waitLanes waits, bounded, until every live lane has made at least n
// attempts in phase p.
func (r *rig) waitLanes(p phase, n int) {
	waitFor(r.t, fmt.Sprintf("every lane to make %d attempts in phase %s", n, p.name), func() bool {
		for lane := range r.lanes {
			if !r.isDead(lane) && r.attempts(lane, p) < n {
				return false
			}
		}
		return true
	})
}

// throughFault runs the during phase on every lane, applies fault once each
// lane has made two attempts, lets each make ten more, shows the store serves
// again, and finishes the run. The fault must have failed some attempt, or
// the test proves nothing; what names it.
func (r *rig) throughFault(what string, fault func()) {
	stop := r.start(during, maxPerLane)
	r.waitLanes(during, 2)
	fault()
	r.waitLanes(during, 10)
	stop()
	r.servedAgain()
	r.finish()
	if r.total("during/failed")+r.total("during/refused") == 0 {
		r.t.Errorf("the %s failed nothing: the test proves nothing", what)
	}
}

// servedAgain shows that the store serves again after a fault: every lane,
// in turn, publishes fresh blocks and fetches them back, retrying (bounded)
// while the store still fails, until the fetch serves every unit.
func (r *rig) servedAgain() {
	p := phase{name: "after"}
	give := time.Now().Add(wait)
	for lane := range r.lanes {
		if r.isDead(lane) {
			continue
		}
		for try := 0; ; try++ {
			// Bounded in time, not tries: a store held for down refuses at
			// once until its probe sees it back.
			require.True(r.t, time.Now().Before(give), "lane %d: the store did not serve again within %v after the fault", lane, wait)
			blocks := r.pick(lane, try, true)
			if _, ok := r.one(p, lane, true, blocks).(contract.Delivered); !ok {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			o := r.one(p, lane, false, blocks)
			if d, ok := o.(contract.Delivered); ok && d.Served.Len() == rigBlocks*rigGroups {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
