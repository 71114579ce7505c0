package proptest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// The bug zoo: every incident of SPEC §1 and §8, the two hazards of the
// reference's own tests, and its cancellation rules (§2), is a script under
// testdata/bugzoo, replayed against two managers over the same kind of world —
// the runner users embed, and a naive manager that frees on outcome, error,
// cancel, timeout or exit, queues the copy of whatever arrives to the device at
// once and reports any answer, or any failed submission, as a load of
// everything asked (the foil). Each script states what each manager must show.
//
// The language is one command a line; `#` starts a comment. Every command but
// `expect` runs in both worlds, in order:
//
//	slots N                         start both worlds with N staging slots (first line)
//	lend NAME fetch|publish [rows=K] [deadline=D] [submit=rejected]
//	                                ask for a lease of K rows (1) with a request deadline D
//	                                from now (1m); submit=rejected: the backend refuses its
//	                                submission (SubmissionRejected: nothing escaped)
//	round [N]                       N rounds (1) of the manager; unless copies are held, the
//	                                device performs what is queued (the engine's copies land
//	                                at the next round, the foil's within the round)
//	outcome NAME all|some=K|none|failed|cancelled|peer-cancelled
//	                                the backend answers (all and some=K write the served rows)
//	change NAME failed|all|some=K   the backend changes its answer
//	quiesce NAME true|false|error   how the backend answers Quiesce for NAME from now on
//	late-write NAME                 a transfer not yet proven over writes NAME's slots
//	late-read NAME                  a publication not yet proven over reads NAME's slots and
//	                                stores what it finds
//	reuse NAME                      the manager gives NAME's device pages to another request,
//	                                which writes them
//	timeout D                       the clock moves D
//	release NAME                    the owner is done with NAME
//	cancel NAME                     the owner cancels NAME (Engine.Cancel; the foil latches
//	                                cancelled, asks the backend once and frees); the answer is
//	                                kept for cancel.NAME
//	copies hold|land                hold: the device leaves every queued copy in flight (rounds
//	                                no longer perform them); land: it performs everything queued
//	                                now, in order, and rounds perform copies again
//	expect engine|naive KEY=VALUE…  what that world must show now
//
// The expectation keys read bytes and recorded facts: corrupted=yes|no (the
// canary check of every slot), free=N, quarantined=N, outcome.NAME,
// state.NAME, ready.NAME (usable_until or not-ready), device.NAME (what its
// device rows hold: untouched, content, torn, reused, foreign, mixed(…)),
// stored.NAME (intact, corrupt, absent: what the store holds under its names),
// inflight.NAME=yes|no (a copy to or from its device rows is queued on the
// device and not yet performed), cancels.NAME=N (the cancel requests its
// attempt received, as the backend counted them) and cancel.NAME
// (accepted, refused or none: how the manager answered the owner's last
// cancel).

// zooGrace is the zoo's drain grace: scripts move the clock past it to show
// containment.
const zooGrace = 5 * time.Second

// zooQuiesceWait is the runner's Quiesce timeout in the zoo. No script makes
// Quiesce block, so it is never waited out; it is long so that a true answer
// on a loaded machine is not set aside as late (a true that outlives its
// context proves nothing), which would leave the lease waiting for a retry
// the script's clock never reaches.
const zooQuiesceWait = 10 * time.Second

// manager is what a script drives.
type manager interface {
	lend(name string, serial int, publish bool, rows int, deadline time.Time, dev []gpu.DevicePtr) error
	round()
	release(name string) error
	cancel(name string) error
	owners() map[slotID]string // lease name per held slot; quarantined slots are absent
	quarantined() map[slotID]bool
	free() int
	outcome(name string) string
	state(name string) string
	ready(name string) string
}

// zooWorld is one manager's world: staging memory, the adversarial backend,
// the simulated device, the clock and the byte checks.
type zooWorld struct {
	t       *testing.T
	clock   *sim.ManualClock
	dev     *sim.Device
	stream  *zooStream
	held    bool // copies hold: rounds leave queued copies in flight
	mem     *staging.Memory
	be      *adversary
	slots   int
	serials map[string]int
	rows    map[string][]gpu.DevicePtr // each lease's device rows
	prev    map[slotID]string
	corrupt []string
}

func newZooWorld(t *testing.T, slots int) *zooWorld {
	w := &zooWorld{t: t, clock: newClock(), slots: slots, serials: map[string]int{}, rows: map[string][]gpu.DevicePtr{}, prev: map[slotID]string{}}
	var err error
	w.dev, err = sim.New(0, 1<<20)
	require.NoError(t, err)
	inner, err := w.dev.NewStream()
	require.NoError(t, err)
	w.stream = &zooStream{Stream: inner}
	w.mem, err = staging.NewMemory(staging.GoHeap, staging.Group{Slots: slots, SlotBytes: slotBytes})
	require.NoError(t, err)
	w.be = newAdversary(w.mem)
	for s := range slots {
		row, _ := w.mem.Row(0, s)
		fill(row, tagCanary)
	}
	return w
}

// runDevice performs everything queued on the device, unless copies are held.
func (w *zooWorld) runDevice() {
	if !w.held {
		w.dev.CompleteAll()
	}
}

// zooStream is a world's stream. It records the device row of every copy
// queued on it, so that a script can ask which lease's rows a copy still
// targets without asking the manager: the simulated stream performs its queue
// in order, so the last Queued() entries are the ones not yet performed.
type zooStream struct {
	gpu.Stream
	mu  sync.Mutex
	ops []gpu.DevicePtr // the device row of each queued copy; 0 for an event
}

func (z *zooStream) queued(p gpu.DevicePtr, err error) error {
	if err == nil {
		z.ops = append(z.ops, p)
	}
	return err
}

func (z *zooStream) CopyHtoD(dst gpu.DevicePtr, src []byte) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queued(dst, z.Stream.CopyHtoD(dst, src))
}

func (z *zooStream) CopyDtoH(dst []byte, src gpu.DevicePtr) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queued(src, z.Stream.CopyDtoH(dst, src))
}

func (z *zooStream) Record() (gpu.Event, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	ev, err := z.Stream.Record()
	return ev, z.queued(0, err)
}

// inFlight reports whether a copy to or from one of rows is queued and not
// yet performed.
func (z *zooStream) inFlight(rows []gpu.DevicePtr) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	pending := z.ops[len(z.ops)-z.Stream.(*sim.Stream).Queued():]
	for _, p := range pending {
		if p != 0 && slices.Contains(rows, p) {
			return true
		}
	}
	return false
}

func (w *zooWorld) attempt(name string) *attempt {
	w.be.mu.Lock()
	defer w.be.mu.Unlock()
	return w.be.byID[w.serials[name]]
}

// observe refreshes canaries and stamps as slots change hands, then reads
// every slot: a free slot must hold its canary, a lent one only its own
// lease's bytes. Anything else is a write that landed on recycled memory.
func (w *zooWorld) observe(m manager) {
	now := m.owners()
	q := m.quarantined()
	w.be.mu.Lock()
	defer w.be.mu.Unlock()
	for s := range w.slots {
		id := slotID{0, s}
		if q[id] {
			continue
		}
		row, _ := w.mem.Row(0, s)
		before, after := w.prev[id], now[id]
		if before != after {
			if after != "" && !filled(row, tagCanary) && before == "" {
				w.corrupt = append(w.corrupt, fmt.Sprintf("slot %d was written while free: %x", s, row))
			}
			fill(row, tagCanary)
			if after != "" {
				copy(row, pattern(tagStamp, w.serials[after], s))
			}
		}
		owner := now[id]
		if owner == "" {
			if !filled(row, tagCanary) {
				w.corrupt = append(w.corrupt, fmt.Sprintf("free slot %d written: %x", s, row))
				fill(row, tagCanary)
			}
			continue
		}
		sr := w.serials[owner]
		if (row[1] != byte(sr) || row[2] != byte(sr>>8)) && !filled(row, sim.Poison) {
			w.corrupt = append(w.corrupt, fmt.Sprintf("slot %d of %s holds another transfer's bytes: %x", s, owner, row))
		}
	}
	w.prev = now
}

// ---- the engine ----

type engineMgr struct {
	w      *zooWorld
	eng    *readiness.Engine
	hs     map[string]readiness.Handle
	slotsL map[string][]slotID
	quar   map[slotID]bool
}

func newEngineMgr(w *zooWorld) *engineMgr {
	e := &engineMgr{w: w, hs: map[string]readiness.Handle{}, slotsL: map[string][]slotID{}, quar: map[slotID]bool{}}
	w.be.device = func(serial, g, b int) []byte { return pattern(tagContent, serial, rowID(g, b)) }
	var err error
	e.eng, err = readiness.New(readiness.Config{
		Memory:          w.mem,
		TokensPerBlock:  tpb,
		RequestTimeout:  time.Minute,
		DrainGrace:      zooGrace,
		QuiesceTimeout:  zooQuiesceWait,
		RetryBackoff:    retryBackoff,
		MaxRetryBackoff: maxBackoff,
		Logger:          discardLogger(),
		Fetcher:         w.be,
		Publisher:       w.be,
		Stream:          w.stream,
		Health:          w.dev,
		Clock:           w.clock,
	})
	require.NoError(w.t, err)
	w.t.Cleanup(func() {
		w.held = false
		w.be.mu.Lock()
		for _, a := range w.be.byID {
			a.mode = quiesceTrue
		}
		w.be.mu.Unlock()
		for range 10 {
			if e.eng.Close().Drained {
				return
			}
			w.clock.Advance(zooGrace)
			e.round()
		}
	})
	return e
}

func (e *engineMgr) lend(name string, serial int, publish bool, rows int, deadline time.Time, dev []gpu.DevicePtr) error {
	req := readiness.Request{Kind: readiness.Fetch, Deadline: deadline}
	if publish {
		req.Kind = readiness.Publish
	}
	for b := range rows {
		req.Rows = append(req.Rows, staging.Row{Name: nameOf(serial, 0, b), Block: b, Device: dev[b]})
	}
	h, err := e.eng.Lend(req)
	if err == nil {
		e.hs[name] = h
	}
	return err
}

// round is one step of the runner: the device completes what is queued
// (unless copies are held) and the engine takes in everything observable.
func (e *engineMgr) round() {
	e.w.runDevice()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.eng.Sync(ctx)
	require.NoError(e.w.t, err)
}

func (e *engineMgr) release(name string) error { return e.eng.Release(e.hs[name]) }
func (e *engineMgr) cancel(name string) error  { _, err := e.eng.Cancel(e.hs[name]); return err }

func (e *engineMgr) owners() map[slotID]string {
	out := map[slotID]string{}
	for name, h := range e.hs {
		info, err := e.eng.Lease(h)
		if err != nil || info.State == readiness.StateReleased {
			delete(e.slotsL, name)
			continue
		}
		if info.State == readiness.StateQuarantined {
			for _, s := range e.slotsL[name] {
				e.quar[s] = true
			}
			continue
		}
		runs, _ := e.eng.Runs(h, nil)
		var ss []slotID
		for _, r := range runs {
			for k := range r.Count {
				ss = append(ss, slotID{r.Group, r.First + k})
				out[slotID{r.Group, r.First + k}] = name
			}
		}
		if len(ss) > 0 {
			e.slotsL[name] = ss
		}
	}
	return out
}

func (e *engineMgr) quarantined() map[slotID]bool { return e.quar }
func (e *engineMgr) free() int                    { return e.eng.Stats().SlotsFree }

func (e *engineMgr) outcome(name string) string {
	info, err := e.eng.Lease(e.hs[name])
	if err != nil {
		return "unknown"
	}
	return info.Outcome.String()
}

func (e *engineMgr) state(name string) string {
	info, err := e.eng.Lease(e.hs[name])
	if err != nil {
		return "retired"
	}
	return info.State.String()
}

func (e *engineMgr) ready(name string) string {
	iv, err := e.eng.Readiness(e.hs[name])
	if err != nil {
		return "not-ready"
	}
	return strconv.Itoa(iv.UsableUntil)
}

// ---- the naive foil ----

// naiveMgr is the manager the incidents had: it frees a lease's slots as soon
// as an outcome (of any kind), a timeout, a cancel or the request's exit
// arrives — with its own copies still queued on the device, if any are; it
// queues the copy of a fetch's staging rows to the device the moment an answer
// arrives — after the request exited or was cancelled too — and it reports
// every outcome, and a submission that failed, as a load of everything it
// asked for; a cancel overwrites whatever it reported. It does wait for a
// publish's device→staging copies to land before submitting it.
type naiveMgr struct {
	w      *zooWorld
	freeS  []int
	order  []string
	leases map[string]*naiveLease
}

type naiveLease struct {
	serial, rows int
	publish      bool
	deadline     time.Time
	dev          []gpu.DevicePtr
	slots        []int
	units        []contract.Unit
	staged       gpu.Event // a publish's device→staging copies
	submitted    bool
	freed        bool
	answered     bool
	outcome      string
	ready        int
}

func newNaiveMgr(w *zooWorld) *naiveMgr {
	n := &naiveMgr{w: w, leases: map[string]*naiveLease{}}
	for s := range w.slots {
		n.freeS = append(n.freeS, s)
	}
	return n
}

func (n *naiveMgr) lend(name string, serial int, publish bool, rows int, deadline time.Time, dev []gpu.DevicePtr) error {
	if rows > n.w.slots {
		return errors.New("too many rows")
	}
	n.leases[name] = &naiveLease{serial: serial, rows: rows, publish: publish, deadline: deadline, dev: dev, outcome: "none"}
	n.order = append(n.order, name)
	n.grant()
	return nil
}

func (n *naiveMgr) round() {
	n.w.runDevice()
	for _, name := range n.order {
		l := n.leases[name]
		if l.answered || !l.submitted {
			continue
		}
		if o := n.w.attempt(name); o != nil && (advAttempt{b: n.w.be, a: o}).Poll() != nil {
			// Any answer ends the transfer as far as it is concerned.
			n.load(l)
		} else if !l.freed && !n.w.clock.Now().Before(l.deadline) {
			l.outcome = "failed"
			n.recycle(l)
		}
	}
	n.grant()
	n.w.runDevice()
}

// load is what the naive manager does with any answer: the lookup already
// said how much there was, so everything arrived; it queues the copy of it
// all into the request's device rows, at once, and frees the slots.
func (n *naiveMgr) load(l *naiveLease) {
	l.answered, l.outcome, l.ready = true, "served", l.rows*tpb
	if !l.publish {
		for i, u := range l.units {
			row, _ := n.w.mem.Row(0, u.Local)
			require.NoError(n.w.t, n.w.stream.CopyHtoD(l.dev[i], row))
		}
		_, err := n.w.stream.Record()
		require.NoError(n.w.t, err)
	}
	n.recycle(l)
}

// grant hands free slots to waiting leases in arrival order, queues a
// publish's device→staging copies, and submits what is staged.
func (n *naiveMgr) grant() {
	for _, name := range n.order {
		l := n.leases[name]
		if l.slots != nil || l.freed {
			continue
		}
		if len(n.freeS) < l.rows {
			break
		}
		l.slots, n.freeS = append([]int(nil), n.freeS[:l.rows]...), n.freeS[l.rows:]
		l.units = make([]contract.Unit, l.rows)
		for b, s := range l.slots {
			l.units[b] = contract.Unit{Name: nameOf(l.serial, 0, b), LocalGroup: 0, Local: s}
			if l.publish {
				row, _ := n.w.mem.Row(0, s)
				require.NoError(n.w.t, n.w.stream.CopyDtoH(row, l.dev[b]))
			}
		}
		if l.publish {
			var err error
			l.staged, err = n.w.stream.Record()
			require.NoError(n.w.t, err)
		}
	}
	for _, name := range n.order {
		l := n.leases[name]
		if l.slots == nil || l.submitted || l.freed {
			continue
		}
		if l.publish {
			if st, err := n.w.stream.Query(l.staged); err != nil || st != gpu.Complete {
				continue
			}
		}
		ext, err := contract.NewCacheExtent([]byte("zoo"), l.units, false)
		require.NoError(n.w.t, err)
		if l.publish {
			_, err = n.w.be.Publish(ext)
		} else {
			_, err = n.w.be.Fetch(ext, nil)
		}
		l.submitted = true
		if err != nil {
			n.load(l) // a transfer that failed to start is counted as loaded too
		}
	}
}

func (n *naiveMgr) recycle(l *naiveLease) {
	if l.freed {
		return
	}
	l.freed = true
	n.freeS = append(n.freeS, l.slots...)
	slices.Sort(n.freeS) // lowest first: freed slots are reused at once
	l.slots = nil
}

func (n *naiveMgr) release(name string) error {
	n.recycle(n.leases[name])
	n.grant()
	return nil
}

// cancel reports the lease cancelled whatever it reported before, asks the
// backend to stop, and frees the slots; an answer that comes later is still
// taken as a load.
func (n *naiveMgr) cancel(name string) error {
	l := n.leases[name]
	l.outcome = "cancelled"
	if a := n.w.attempt(name); a != nil {
		if _, err := (advAttempt{b: n.w.be, a: a}).RequestCancel(); err != nil {
			return err
		}
	}
	n.recycle(l)
	n.grant()
	return nil
}

func (n *naiveMgr) owners() map[slotID]string {
	out := map[slotID]string{}
	for name, l := range n.leases {
		for _, s := range l.slots {
			out[slotID{0, s}] = name
		}
	}
	return out
}

func (n *naiveMgr) quarantined() map[slotID]bool { return nil }
func (n *naiveMgr) free() int                    { return len(n.freeS) }
func (n *naiveMgr) outcome(name string) string   { return n.leases[name].outcome }
func (n *naiveMgr) state(name string) string {
	if n.leases[name].freed {
		return "released"
	}
	return "held"
}
func (n *naiveMgr) ready(name string) string {
	if !n.leases[name].answered {
		return "not-ready"
	}
	return strconv.Itoa(n.leases[name].ready)
}

// ---- the script ----

type zooRun struct {
	w       *zooWorld
	m       manager
	cancels map[string]error // the manager's answer to the owner's last cancel of each lease
}

// TestBugZoo replays every script under testdata/bugzoo against the runner
// and the naive foil.
func TestBugZoo(t *testing.T) {
	files, err := filepath.Glob("testdata/bugzoo/*.txt")
	require.NoError(t, err)
	require.Len(t, files, 17, "one scenario per incident of SPEC §1 and §8, the reference's two hazards (§8) and its two cancellation races (§2)")
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScript(t, f) })
	}
}

func runScript(t *testing.T, path string) {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var runs map[string]*zooRun
	sc := bufio.NewScanner(f)
	expects := 0
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if i := strings.Index(text, "#"); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		at := fmt.Sprintf("%s:%d: %s", path, line, strings.TrimSpace(text))
		if fields[0] == "slots" {
			n, err := strconv.Atoi(arg(t, at, fields, 1))
			require.NoError(t, err, at)
			runs = map[string]*zooRun{}
			for _, who := range []string{"engine", "naive"} {
				w := newZooWorld(t, n)
				var m manager = newNaiveMgr(w)
				if who == "engine" {
					m = newEngineMgr(w)
				}
				runs[who] = &zooRun{w: w, m: m, cancels: map[string]error{}}
			}
			continue
		}
		require.NotNil(t, runs, "%s: the script must start with `slots N`", at)
		if fields[0] == "expect" {
			r, ok := runs[arg(t, at, fields, 1)]
			require.True(t, ok, "%s: expect engine|naive", at)
			for _, kv := range fields[2:] {
				k, v, ok := strings.Cut(kv, "=")
				require.True(t, ok, "%s: want key=value, got %q", at, kv)
				require.Equal(t, v, r.observe(t, at, k), "%s: %s", at, k)
				expects++
			}
			continue
		}
		for _, who := range []string{"engine", "naive"} {
			r := runs[who]
			r.exec(t, at, fields)
			r.w.observe(r.m)
		}
	}
	require.NoError(t, sc.Err())
	require.NotZero(t, expects, "%s states no expectation", path)
}

func arg(t *testing.T, at string, fields []string, i int) string {
	require.Greater(t, len(fields), i, "%s: missing argument %d", at, i)
	return fields[i]
}

func (r *zooRun) exec(t *testing.T, at string, f []string) {
	w := r.w
	switch f[0] {
	case "lend":
		name, kind := arg(t, at, f, 1), arg(t, at, f, 2)
		rows, deadline, rejected := 1, w.clock.Now().Add(time.Minute), false
		for _, kv := range f[3:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "rows":
				n, err := strconv.Atoi(v)
				require.NoError(t, err, at)
				rows = n
			case "deadline":
				d, err := time.ParseDuration(v)
				require.NoError(t, err, at)
				deadline = w.clock.Now().Add(d)
			case "submit":
				require.Equal(t, "rejected", v, "%s: submit=rejected", at)
				rejected = true
			default:
				t.Fatalf("%s: unknown lend option %q", at, k)
			}
		}
		w.serials[name] = len(w.serials) + 1
		serial := w.serials[name]
		w.be.mu.Lock()
		w.be.reject[serial] = rejected
		w.be.mu.Unlock()
		var dev []gpu.DevicePtr
		for b := range rows {
			p, err := w.dev.Alloc(slotBytes)
			require.NoError(t, err, at)
			tag := tagDevice
			if kind == "publish" {
				tag = tagContent
			}
			require.NoError(t, w.dev.Write(p, pattern(tag, serial, rowID(0, b))), at)
			dev = append(dev, p)
		}
		w.rows[name] = dev
		require.NoError(t, r.m.lend(name, serial, kind == "publish", rows, deadline, dev), at)
	case "round":
		n := 1
		if len(f) > 1 {
			var err error
			n, err = strconv.Atoi(f[1])
			require.NoError(t, err, at)
		}
		for range n {
			r.m.round()
			w.observe(r.m) // a slot lent in this round is stamped before the next one writes it
		}
	case "outcome":
		a := r.attemptOf(t, at, arg(t, at, f, 1))
		switch v := arg(t, at, f, 2); {
		case v == "all":
			w.be.deliver(a, asked(a, -1))
		case strings.HasPrefix(v, "some="):
			n, err := strconv.Atoi(strings.TrimPrefix(v, "some="))
			require.NoError(t, err, at)
			w.be.deliver(a, asked(a, n))
		case v == "none":
			w.be.set(a, contract.Delivered{})
		case v == "failed":
			w.be.set(a, contract.Failed{Reason: "transfer error"})
		case v == "cancelled":
			w.be.set(a, contract.Cancelled{})
		case v == "peer-cancelled":
			w.be.set(a, contract.Cancelled{ByPeer: true})
		default:
			t.Fatalf("%s: unknown outcome %q", at, v)
		}
	case "change":
		a := r.attemptOf(t, at, arg(t, at, f, 1))
		switch v := arg(t, at, f, 2); {
		case v == "failed":
			w.be.set(a, contract.Failed{Reason: "changed its answer"})
		case v == "all":
			w.be.set(a, contract.Delivered{Served: contract.NewNameSet(asked(a, -1)...)})
		case strings.HasPrefix(v, "some="):
			n, err := strconv.Atoi(strings.TrimPrefix(v, "some="))
			require.NoError(t, err, at)
			w.be.set(a, contract.Delivered{Served: contract.NewNameSet(asked(a, n)...)})
		default:
			t.Fatalf("%s: change NAME failed|all|some=K", at)
		}
	case "quiesce":
		a := r.attemptOf(t, at, arg(t, at, f, 1))
		mode := map[string]quiesceMode{"true": quiesceTrue, "false": quiesceFalse, "error": quiesceError}
		m, ok := mode[arg(t, at, f, 2)]
		require.True(t, ok, "%s: quiesce NAME true|false|error", at)
		w.be.mu.Lock()
		a.mode = m
		w.be.mu.Unlock()
	case "late-write", "late-read":
		a := r.attemptOf(t, at, arg(t, at, f, 1))
		w.be.mu.Lock()
		ended := a.ended
		w.be.mu.Unlock()
		require.False(t, ended, "%s: the script breaks the contract: Quiesce already answered true for it", at)
		w.be.lateWrite(a) // a publication still reading its sources stores what it reads
	case "reuse":
		// The manager gives the request's device pages to another request.
		for _, p := range w.rows[arg(t, at, f, 1)] {
			require.NoError(t, w.dev.Write(p, pattern(tagReused, 0, 0)), at)
		}
	case "timeout":
		d, err := time.ParseDuration(arg(t, at, f, 1))
		require.NoError(t, err, at)
		w.clock.Advance(d)
	case "release":
		require.NoError(t, r.m.release(arg(t, at, f, 1)), at)
	case "cancel":
		name := arg(t, at, f, 1)
		_, ok := w.serials[name]
		require.True(t, ok, "%s: %s was never lent", at, name)
		r.cancels[name] = r.m.cancel(name)
	case "copies":
		switch arg(t, at, f, 1) {
		case "hold":
			w.held = true
		case "land":
			w.held = false
			w.dev.CompleteAll()
		default:
			t.Fatalf("%s: copies hold|land", at)
		}
	default:
		t.Fatalf("%s: unknown command %q", at, f[0])
	}
}

// tagReused marks device pages the manager gave to another request.
const tagReused byte = 0x77

// asked returns the first n names the attempt was asked for (n < 0: all).
func asked(a *attempt, n int) []contract.Name {
	var out []contract.Name
	for _, u := range a.units {
		out = append(out, u.Name)
	}
	if n >= 0 && n < len(out) {
		out = out[:n]
	}
	return out
}

func (r *zooRun) attemptOf(t *testing.T, at, name string) *attempt {
	a := r.w.attempt(name)
	require.NotNil(t, a, "%s: %s was never submitted", at, name)
	return a
}

// observe answers one expectation key.
func (r *zooRun) observe(t *testing.T, at, key string) string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	k, name, _ := strings.Cut(key, ".")
	switch k {
	case "corrupted":
		if len(r.w.corrupt) > 0 {
			t.Logf("%s: %s", at, strings.Join(r.w.corrupt, "; "))
		}
		return yes(len(r.w.corrupt) > 0)
	case "free":
		return strconv.Itoa(r.m.free())
	case "quarantined":
		return strconv.Itoa(len(r.m.quarantined()))
	case "outcome":
		return r.m.outcome(name)
	case "state":
		return r.m.state(name)
	case "ready":
		return r.m.ready(name)
	case "device":
		return r.device(name)
	case "inflight":
		return yes(r.w.stream.inFlight(r.w.rows[name]))
	case "cancels":
		a := r.w.attempt(name)
		if a == nil {
			return "0"
		}
		r.w.be.mu.Lock()
		defer r.w.be.mu.Unlock()
		return strconv.Itoa(a.cancels)
	case "cancel":
		err, asked := r.cancels[name]
		switch {
		case !asked:
			return "none"
		case err != nil:
			t.Logf("%s: the cancel of %s was refused: %v", at, name, err)
			return "refused"
		}
		return "accepted"
	case "stored":
		serial := r.w.serials[name]
		ok := true
		r.w.be.mu.Lock()
		defer r.w.be.mu.Unlock()
		for b := 0; ; b++ {
			got, found := r.w.be.store[nameOf(serial, 0, b)]
			if !found {
				if b == 0 {
					return "absent"
				}
				break
			}
			if string(got) != string(pattern(tagContent, serial, rowID(0, b))) {
				t.Logf("%s: %s row %d stored %x", at, name, b, got)
				ok = false
			}
		}
		if ok {
			return "intact"
		}
		return "corrupt"
	}
	t.Fatalf("%s: unknown expectation %q", at, key)
	return ""
}

// device says what a lease's device rows hold: untouched (as lent), content
// (every row's served content), torn (bytes a transfer was still writing),
// reused (what the request the pages were given to put there), foreign (any
// other bytes), or mixed.
func (r *zooRun) device(name string) string {
	serial := r.w.serials[name]
	kinds := map[string]bool{}
	for b, p := range r.w.rows[name] {
		got := make([]byte, slotBytes)
		if err := r.w.dev.Read(got, p); err != nil {
			return "unreadable"
		}
		switch {
		case string(got) == string(pattern(tagDevice, serial, rowID(0, b))):
			kinds["untouched"] = true
		case string(got) == string(pattern(tagContent, serial, rowID(0, b))):
			kinds["content"] = true
		case string(got) == string(pattern(tagReused, 0, 0)):
			kinds["reused"] = true
		case got[0] == tagLate || filled(got, sim.Poison):
			kinds["torn"] = true
		default:
			kinds["foreign"] = true // bytes of no transfer of this lease: another slot's, another request's
		}
	}
	if len(kinds) != 1 {
		var all []string
		for k := range kinds {
			all = append(all, k)
		}
		slices.Sort(all)
		return "mixed(" + strings.Join(all, "+") + ")"
	}
	for k := range kinds {
		return k
	}
	return "none"
}
