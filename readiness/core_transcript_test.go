package readiness_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// The transcripts in testdata/transcripts are scenarios a reviewer reads as a
// story, one per rule of SPEC §4, in etcd raft's style: every command that
// reaches the core prints what it answered, every move it made, and the Ready
// it left — the work the core asks for — which the harness then takes
// (Advance). A change in behaviour shows as a diff of the transcript.
// Regenerate with: go test ./readiness -run TestTranscripts -rewrite
//
// Commands:
//
//	new [slots=N] [groups=G] [layers=L] [timeout=D] [grace=D] [quiesce=D] [backoff=D] [keep=N]
//	                                          (layers: L layers of 16/L bytes, in order, in every group's slot)
//	lend NAME kind=fetch|publish rows=N [known=K] [deadline=D] [layerwise]  (D: after now)
//	computed NAME layer=K [after=N]          (rule 16: a layerwise publish's layer computed, behind compute event N)
//	tick D                                    (the clock moves by D, then Tick)
//	release NAME | cancel NAME | retry NAME | close
//	submitted NAME | rejected NAME | escaped NAME
//	answer NAME served|partial|miss|failed|cancelled|cancelled-by-peer|unasked
//	panicked NAME                              (Poll panicked)
//	proven NAME | unproven NAME
//	landed NAME | refused NAME row=R | lost NAME [layer=K]
//	layer-done NAME layer=K | layers NAME     (rule 16: a layer's event; every layer's status)
//	cancel-replied NAME requested|unsupported|error
//	device-lost
//	info NAME | readiness NAME | stats
//	evidence NAME WHAT                        (raw evidence of any kind, by number)
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/transcripts", func(t *testing.T, path string) {
		h := &harness{t: t, names: map[string]readiness.Handle{}}
		datadriven.RunTest(t, path, h.run)
		if filepath.Ext(path) != ".txt" {
			t.Errorf("%s: transcripts are .txt files", path)
		}
	})
}

type harness struct {
	t     *testing.T
	c     *readiness.Core
	now   time.Time
	names map[string]readiness.Handle
	order []string
	trace []string
	mem   *staging.Memory
	// layered: the core was made with layers=N > 0, and Ready's copies print
	// layer by layer.
	layered bool
}

func (h *harness) name(l readiness.Handle) string {
	for n, x := range h.names {
		if x == l {
			return n
		}
	}
	return l.String()
}

func (h *harness) lease(d *datadriven.TestData) readiness.Handle {
	if len(d.CmdArgs) == 0 {
		d.Fatalf(h.t, "%s: which lease?", d.Cmd)
	}
	l, ok := h.names[d.CmdArgs[0].Key]
	if !ok {
		d.Fatalf(h.t, "%s: no lease named %q", d.Cmd, d.CmdArgs[0].Key)
	}
	return l
}

func duration(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	if !d.HasArg(key) {
		return def
	}
	var s string
	d.ScanArgs(t, key, &s)
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s=%q: %v", key, s, err)
	}
	return v
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.trace = h.trace[:0]
	var out strings.Builder
	report := func(err error) {
		if err != nil {
			fmt.Fprintf(&out, "error: %v\n", err)
		} else {
			out.WriteString("ok\n")
		}
	}
	switch d.Cmd {
	case "new":
		slots, groups := intArg(t, d, "slots", 4), intArg(t, d, "groups", 1)
		gs := make([]staging.Group, groups)
		for g := range gs {
			gs[g] = staging.Group{Slots: slots, SlotBytes: 16}
		}
		var err error
		h.mem, err = staging.NewMemory(staging.GoHeap, gs...)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		h.now = time.Unix(10, 0)
		// A new core issues handles afresh: the names of the last one's
		// leases would alias the new ones.
		h.names, h.order = map[string]readiness.Handle{}, nil
		var layers [][]staging.LayerSpans
		if n := intArg(t, d, "layers", 0); n > 0 {
			for range gs {
				var ls []staging.LayerSpans
				for k := range n {
					ls = append(ls, staging.LayerSpans{Layer: k, Spans: []staging.Span{{Offset: k * 16 / n, Size: 16 / n}}})
				}
				layers = append(layers, ls)
			}
		}
		h.layered = layers != nil
		h.c, err = readiness.NewCore(readiness.Config{
			Layers: layers,
			Memory: h.mem, TokensPerBlock: 32,
			RequestTimeout: duration(t, d, "timeout", 5*time.Second), DrainGrace: duration(t, d, "grace", 5*time.Second),
			QuiesceTimeout: duration(t, d, "quiesce", time.Second), RetryBackoff: duration(t, d, "backoff", 100*time.Millisecond),
			MaxRetryBackoff: time.Second, KeepReleased: intArg(t, d, "keep", 4),
			MaxOutstanding: intArg(t, d, "outstanding", 0), Containment: h.policy(d),
			RecoverEvery: duration(t, d, "recover-every", time.Second),
			Logger:       discard,
			OnTransition: func(tr readiness.Transition) { h.trace = append(h.trace, h.move(tr)) },
		})
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		h.c.Tick(h.now)
		return "ok\n"
	case "lend":
		name := d.CmdArgs[0].Key
		var kind string
		d.ScanArgs(t, "kind", &kind)
		req := readiness.Request{Kind: readiness.Fetch, KnownBlocks: intArg(t, d, "known", 0)}
		if kind == "publish" {
			req.Kind = readiness.Publish
		}
		groups := h.mem.NumGroups()
		for i := range intArg(t, d, "rows", 1) {
			var n contract.Name
			n[0], n[1] = name[0], byte(i)
			req.Rows = append(req.Rows, staging.Row{Name: n, Group: i % groups, Block: req.KnownBlocks + i/groups, Device: gpu.DevicePtr(0x1000 + 0x100*i)})
		}
		if d.HasArg("deadline") {
			req.Deadline = h.now.Add(duration(t, d, "deadline", 0))
		}
		req.Layerwise = d.HasArg("layerwise")
		l, err := h.c.Lend(req)
		if err == nil {
			h.names[name] = l
			h.order = append(h.order, name)
		}
		report(err)
	case "tick":
		var s string
		if len(d.CmdArgs) > 0 {
			s = d.CmdArgs[0].Key
		}
		dd, err := time.ParseDuration(s)
		if err != nil {
			d.Fatalf(t, "tick %q: %v", s, err)
		}
		h.now = h.now.Add(dd)
		h.c.Tick(h.now)
		fmt.Fprintf(&out, "now %v\n", h.now.Sub(time.Unix(10, 0)))
	case "release":
		report(h.c.Release(h.lease(d)))
	case "cancel":
		_, err := h.c.Cancel(h.lease(d))
		report(err)
	case "retry":
		report(h.c.Retry(h.lease(d)))
	case "close":
		h.c.Close()
		out.WriteString("ok\n")
	case "device-lost":
		report(h.c.Step(readiness.Evidence{What: readiness.DeviceGone, Reason: "the device fell off the bus"}))
	case "submitted", "rejected", "escaped", "panicked", "proven", "unproven", "landed", "lost":
		l := h.lease(d)
		what := map[string]readiness.Observed{"submitted": readiness.SubmitAccepted, "rejected": readiness.SubmitRejected, "escaped": readiness.SubmitEscaped,
			"panicked": readiness.PollPanicked, "proven": readiness.QuiesceTrue, "unproven": readiness.QuiesceUnproven, "landed": readiness.CopiesDone, "lost": readiness.CopyLost}[d.Cmd]
		report(h.c.Step(readiness.Evidence{What: what, Lease: l, Layer: intArg(t, d, "layer", 0), Reason: "(" + d.Cmd + " in the script)"}))
	case "computed":
		var after gpu.Event
		if n := intArg(t, d, "after", 0); n > 0 {
			after = gpu.MakeEvent(99, uint64(n)) // the compute stream's n-th event
		}
		report(h.c.Computed(h.lease(d), intArg(t, d, "layer", 0), after))
	case "layer-done":
		report(h.c.Step(readiness.Evidence{What: readiness.LayerDone, Lease: h.lease(d), Layer: intArg(t, d, "layer", 0)}))
	case "layers":
		l := h.lease(d)
		for k := range h.c.Layers() {
			iv, st, err := h.c.LayerReadiness(l, k)
			switch {
			case err != nil:
				fmt.Fprintf(&out, "layer %d: error: %v\n", k, err)
			case st == readiness.LayerReady:
				fmt.Fprintf(&out, "layer %d: %v %v\n", k, st, iv)
			default:
				fmt.Fprintf(&out, "layer %d: %v\n", k, st)
			}
		}
		return out.String()
	case "refused":
		report(h.c.Step(readiness.Evidence{What: readiness.CopyRefusedByDevice, Lease: h.lease(d), Row: intArg(t, d, "row", 0), Reason: "(refused in the script)"}))
	case "answer":
		l := h.lease(d)
		report(h.c.Step(readiness.Evidence{What: readiness.PollAnswered, Lease: l, Outcome: h.outcome(d, l)}))
	case "cancel-replied":
		ev := readiness.Evidence{What: readiness.CancelReplied, Lease: h.lease(d)}
		switch d.CmdArgs[1].Key {
		case "requested":
			ev.Disposition = contract.CancelRequested
		case "unsupported":
			ev.Disposition = contract.CancelUnsupported
		default:
			ev.Reason = "the backend failed to cancel"
		}
		report(h.c.Step(ev))
	case "evidence":
		w, _ := strconv.Atoi(d.CmdArgs[1].Key)
		report(h.c.Step(readiness.Evidence{What: readiness.Observed(w), Lease: h.lease(d)}))
	case "info":
		info, err := h.c.Lease(h.lease(d))
		if err != nil {
			report(err)
			break
		}
		fmt.Fprintf(&out, "%s %v outcome=%v exposed=%v fenced=%v release-requested=%v ungrantable=%v by-peer=%v",
			h.name(info.Handle), info.State, info.Outcome, info.Exposed, info.Fenced, info.ReleaseRequested, info.Ungrantable, info.ByPeer)
		if info.CancelDisposition != 0 {
			fmt.Fprintf(&out, " cancel=%v", info.CancelDisposition)
		}
		if info.CancelError != "" {
			fmt.Fprintf(&out, " cancel-error=%q", info.CancelError)
		}
		if info.Reason != "" {
			fmt.Fprintf(&out, "\n  reason: %s", info.Reason)
		}
		out.WriteString("\n")
		return out.String()
	case "readiness":
		iv, err := h.c.Readiness(h.lease(d))
		if err != nil {
			report(err)
		} else {
			fmt.Fprintf(&out, "%v\n", iv)
		}
		return out.String()
	case "stats":
		s := h.c.Stats()
		var states []string
		for st := range fsm.NumStates {
			if s.Leases[st] > 0 {
				states = append(states, fmt.Sprintf("%v=%d", st, s.Leases[st]))
			}
		}
		fmt.Fprintf(&out, "leases: %s\nslots: free=%d held=%d quarantined=%d\nlent=%d released=%d containments=%d recovered=%d violations=%d unproven=%d outstanding=%d/%d halted=%v\n",
			strings.Join(states, " "), s.SlotsFree, s.SlotsHeld, s.SlotsQuarantined, s.Lent, s.Released, s.Containments, s.Recovered,
			s.Violations, s.Unproven, s.Outstanding, s.MaxOutstanding, s.Halted)
		if err := h.c.Err(); err != nil {
			fmt.Fprintf(&out, "err: %v\n", err)
		}
		return out.String()
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	for _, line := range h.trace {
		out.WriteString(line + "\n")
	}
	out.WriteString(h.ready())
	h.c.Advance()
	return out.String()
}

// policy reads the containment policy a script names (policy=…).
func (h *harness) policy(d *datadriven.TestData) readiness.Policy {
	if !d.HasArg("policy") {
		return readiness.Quarantine
	}
	var name string
	d.ScanArgs(h.t, "policy", &name)
	p, err := readiness.ParsePolicy(name)
	if err != nil {
		d.Fatalf(h.t, "%v", err)
	}
	return p
}

// move prints one transition: lease, from → to, cause, the outcome latched,
// the entered state's effects and what the move stored from its evidence.
func (h *harness) move(tr readiness.Transition) string {
	step := readiness.StepOf(tr)
	s := fmt.Sprintf("%s: %v -> %v on %s", h.name(tr.Lease), tr.From, tr.To, step.Cause())
	if step.Result != fsm.NoResult {
		s += " (" + step.Result.String() + ")"
	}
	if step.Effects != 0 {
		s += " {" + step.Effects.String() + "}"
	}
	if step.Stores != 0 {
		s += " stores " + step.Stores.String()
	}
	return s
}

// outcome builds the answer a script names for the lease's rows.
func (h *harness) outcome(d *datadriven.TestData, l readiness.Handle) contract.Outcome {
	info, err := h.c.Lease(l)
	if err != nil {
		d.Fatalf(h.t, "%v", err)
	}
	var all []contract.Name
	name := h.name(l)
	for i := range info.Rows {
		var n contract.Name
		n[0], n[1] = name[0], byte(i)
		all = append(all, n)
	}
	switch d.CmdArgs[1].Key {
	case "served":
		return contract.Delivered{Served: contract.NewNameSet(all...)}
	case "partial":
		return contract.Delivered{Served: contract.NewNameSet(all[0])}
	case "miss":
		return contract.Delivered{}
	case "failed":
		return contract.Failed{Reason: "the store said no"}
	case "cancelled":
		return contract.Cancelled{}
	case "cancelled-by-peer":
		return contract.Cancelled{ByPeer: true}
	case "unasked":
		var n contract.Name
		n[0] = 0xFF
		return contract.Delivered{Served: contract.NewNameSet(n)}
	case "nil":
		return nil
	}
	d.Fatalf(h.t, "unknown answer %q", d.CmdArgs[1].Key)
	return nil
}

// ready prints the work the core asks for, lease names sorted within each
// kind of work.
func (h *harness) ready() string {
	rd := h.c.Ready()
	if rd.Empty() {
		return "ready: none\n"
	}
	var b strings.Builder
	b.WriteString("ready:\n")
	names := func(hs []readiness.Handle) string {
		var ns []string
		for _, l := range hs {
			ns = append(ns, h.name(l))
		}
		sort.Strings(ns)
		return strings.Join(ns, " ")
	}
	var subs, proofs []readiness.Handle
	for _, s := range rd.Submissions {
		subs = append(subs, s.Lease)
	}
	for _, p := range rd.Proofs {
		proofs = append(proofs, p.Lease)
	}
	if len(subs) > 0 {
		fmt.Fprintf(&b, "  submit: %s\n", names(subs))
	}
	if h.layered && len(rd.Layers) > 0 {
		next := 0
		for _, m := range rd.Layers {
			var cs []string
			for ; next < m.After; next++ {
				c := rd.Copies[next]
				dir := ""
				if !c.ToDevice {
					dir = " to staging"
				}
				cs = append(cs, fmt.Sprintf("row %d [%d+%d]%s", c.Row, c.Device&0xff, len(c.Staging), dir))
			}
			behind := ""
			if !m.Behind.IsZero() {
				behind = fmt.Sprintf("behind compute event %d: ", m.Behind.Seq())
			}
			if len(cs) == 0 {
				cs = append(cs, "none")
			}
			fmt.Fprintf(&b, "  copies of %s layer %d: %s%s; then its event\n", h.name(m.Lease), m.Layer, behind, strings.Join(cs, ", "))
		}
	} else if len(rd.Copies) > 0 {
		var cs []string
		for _, c := range rd.Copies {
			dir := "device->staging"
			if c.ToDevice {
				dir = "staging->device"
			}
			cs = append(cs, fmt.Sprintf("%s row %d %s", h.name(c.Lease), c.Row, dir))
		}
		slices.Sort(cs)
		fmt.Fprintf(&b, "  copies: %s; then one event for %s\n", strings.Join(cs, ", "), names(rd.CopyLeases))
	}
	if len(proofs) > 0 {
		fmt.Fprintf(&b, "  quiesce: %s\n", names(proofs))
	}
	if len(rd.Overdue) > 0 {
		fmt.Fprintf(&b, "  overdue (cancel the call): %s\n", names(rd.Overdue))
	}
	if len(rd.Cancels) > 0 {
		fmt.Fprintf(&b, "  request cancel: %s\n", names(rd.Cancels))
	}
	if len(rd.Forget) > 0 {
		fmt.Fprintf(&b, "  forget: %s\n", names(rd.Forget))
	}
	if len(rd.Recovered) > 0 {
		fmt.Fprintf(&b, "  recovered: %s\n", names(rd.Recovered))
	}
	for _, c := range rd.Containments {
		fmt.Fprintf(&b, "  contained: %s (%d slots, deadline %v): %s\n", h.name(c.Lease), c.Slots, c.Deadline.Sub(time.Unix(10, 0)), c.Reason)
	}
	return b.String()
}
