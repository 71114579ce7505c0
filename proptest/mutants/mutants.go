package main

// mutant is one deliberately broken safety guard: edits to production
// packages, each replacing a pattern that must occur exactly once inside the
// declaration it names (anchor.go), so that a mutant that no longer applies
// fails loudly instead of testing nothing. The files are never changed: make
// mutants compiles each mutant from an overlay (go build -overlay) of patched
// copies in a scratch directory.
type mutant struct {
	name, what string
	edits      []edit
}

func one(pkg, decl, old, new string) []edit { return []edit{{pkg, decl, old, new}} }

// mutants are the guards make mutants breaks, one at a time. A mutant the
// property suite does not kill is a promise it does not check.
var mutants = []mutant{
	{"trust-quiesce-false", "takes Quiesce false or an error as proof", one("readiness", "Core.classify",
		"case QuiesceUnproven: v.event, v.reason = fsm.AccessUnproven, ev.Reason",
		"case QuiesceUnproven: v.event = fsm.AccessProven")},
	{"quiesce-timeout-as-proof", "takes a Quiesce that outlived its timeout as proof", one("readiness", "Core.classifyOwn",
		"case quiesceOverdue: v.event, v.reason = fsm.AccessUnproven,",
		"case quiesceOverdue: v.event, v.reason = fsm.AccessProven,")},
	{"miss-as-failure", "reports an empty Delivered as a failure", one("readiness", "Core.classifyAnswer",
		"case n == 0:\n\t\t\tv.event = fsm.OutcomeMissed",
		"case n == 0:\n\t\t\tv.event = fsm.OutcomeFailed")},
	{"skip-copy-wait", "answers readiness before the copies land", one("readiness", "Core.copyOut",
		"c.ready.CopyLeases = append(c.ready.CopyLeases, h)\n\tb.copiesOut = n",
		"c.follow = append(c.follow, followUp{id: id, ev: Evidence{What: CopiesDone, Lease: h}})")},
	{"copy-before-fence", "copies served rows to the device before access is proven over", []edit{
		{"fsm", "delivered", "\t\tstate: s,\n\t\trest:  effects(AskProof),", "\t\tstate: s,\n\t\trest:  effects(AskProof, CopyOut),"},
		{"readiness", "Core.copyOut", "if !l.m.Marks.Has(fsm.Fenced) {", "if false {"},
	}},
	{"copy-after-release", "copies into the device rows of a lease the owner released", []edit{
		{"readiness", "Core.facts",
			"if l.kind == Publish || !served(l.result) || l.m.Latched.Has(fsm.ReleaseRequested) || !c.anyServed(b) {",
			"if l.kind == Publish || !served(l.result) || !c.anyServed(b) {"},
		// The assertion behind the guard goes too: the mutant asks whether
		// the suites see the copy, not whether the core halts on it.
		{"readiness", "Core.copyOut", "if l.m.Latched.Has(fsm.ReleaseRequested) {", "if false {"},
	}},
	{"accept-unasked", "trusts served names that were never asked for", one("readiness", "Core.classifyAnswer",
		"if err != nil {\n\t\t\treturn violation(err.Error())\n\t\t}",
		"if err != nil {\n\t\t\tc.masks, _ = staging.ServedMasksInto(c.masks, &b.view, contract.NameSet{})\n\t\t\tfor _, m := range c.masks {\n\t\t\t\tfor k := range m {\n\t\t\t\t\tm[k] = true\n\t\t\t\t}\n\t\t\t}\n\t\t\tv.event, v.first = fsm.OutcomeServed, o\n\t\t\treturn true, nil\n\t\t}")},
	{"ignore-generation", "accepts a handle (and evidence) whatever its generation", one("readiness", "Core.lookup",
		"if !l.inUse || gen != h.gen {", "if !l.inUse {")},
	{"no-stability-check", "never catches an answer changed after the first", one("readiness", "Core.classifyAnswer",
		"if o != nil && sameOutcome(b.first, o) {", "if true {")},
	{"stability-kind-only", "compares only the kind of a re-polled answer", one("readiness", "sameOutcome",
		"return ok && x.Served.Equal(y.Served)", "_ = y\n\t\treturn ok")},
	{"late-outcome-wins", "lets a late outcome overwrite a timeout, a failure or the owner's cancel", []edit{
		{"fsm", "declaration", "refuse(whyFailedStays, with(outcomeEvents, ContractViolation)...),",
			"refuse(whyFailedStays, with(outcomeEvents[1:], ContractViolation)...),"},
		{"fsm", "declaration", "on(Containment, Contained).storing(StoreReason), }, latches: []latch{ keep(\"the drain goes on:",
			"on(Containment, Contained).storing(StoreReason),\n\t\t\ton(OutcomeServed, Served).latching(Delivered).storing(StoreFirst),\n\t\t},\n\t\tlatches: []latch{\n\t\t\tkeep(\"the drain goes on:"},
	}},
	{"free-quarantined", "returns quarantined slots to the allocator", one("readiness", "Core.quarantine",
		"if err := c.alloc.Quarantine(c.ticket(id)); err != nil {", "if err := c.alloc.Free(c.ticket(id)); err != nil {")},
	{"recover-without-proof", "lets the recover policy release a contained lease without a proof", []edit{
		{"fsm", "declaration", "keep(\"still unproven: asked again at the slow cadence\", AccessUnproven).storing(StoreProofAnswer, StoreUnproven).doing(AskProof),", ""},
		{"fsm", "declaration", "on(AccessProven, AccessFenced).storing(StoreProofAnswer).doing(Recover),",
			"on(AccessProven, AccessFenced).storing(StoreProofAnswer).doing(Recover),\n\t\t\ton(AccessUnproven, AccessFenced).storing(StoreProofAnswer).doing(Recover),"},
	}},
	{"admission-unbounded", "submits staged leases past the backend's bound", []edit{
		{"readiness", "Core.admit", "(c.cfg.MaxOutstanding == 0 || c.outstanding < c.cfg.MaxOutstanding) {", "true {"},
		{"readiness", "Core.takeAdmission", "case c.cfg.MaxOutstanding > 0 && c.outstanding >= c.cfg.MaxOutstanding:", "case false:"},
	}},
	{"ignore-device-loss", "never asks whether the device was lost", one("readiness", "Engine.checkHealth",
		"if e.core.Lost() || e.cfg.Health == nil {", "if true {")},
	{"never-ask-proof", "never asks Quiesce at all", one("readiness", "Core.askProof",
		"if b.proofOut { return // asked already",
		"if true { return // asked already")},
	{"never-retry", "asks Quiesce once and never again after an answer that proved nothing", one("readiness", "Core.askProof",
		"|| b.unproved == 0 && !l.m.Marks.Has(fsm.WasContained) { c.ask(id) return }",
		"|| b.unproved == 0 && !l.m.Marks.Has(fsm.WasContained) {\n\t\tc.ask(id)\n\t}\n\treturn")},
	{"containment-from-notice", "measures the containment deadline from when the engine notices", one("readiness", "Core.startDrain",
		"if due := at + int64(c.cfg.DrainGrace); b.containAt == 0 || due < b.containAt {",
		"if due := c.now + int64(c.cfg.DrainGrace) + 0*at; true {")},
	{"extent-rebuilt-in-place", "reuses a quarantined lease's extent for the next lease", one("readiness", "Core.park",
		"\tc.keep(id)\n\tc.gens[id] = nextGen(c.gens[id])\n}",
		"\tc.keep(id)\n\tc.gens[id] = nextGen(c.gens[id])\n\tl.inUse = false\n\tc.spare = append(c.spare, id)\n}")},
	{"close-no-cancel", "leaves a pending lease without its local cancel at Close", one("fsm", "declaration",
		"on(Close, Failed).latching(Cancel).keeping().storing(StoreReason),", "on(Close, Failed).keeping().storing(StoreReason),")},
	{"stall-by-fragmentation", "never takes an ungrantable lease out of the line", one("readiness", "Core.findHopeless",
		"\tc.hopeless = c.alloc.HopelessTickets(c.hopeless[:0])", "\treturn\n\tc.hopeless = c.alloc.HopelessTickets(c.hopeless[:0])")},
	{"masks-not-cleared", "reuses served masks of more than 32 rows without clearing them", one("staging", "servedByIndex",
		"\tfor i := range dst {\n\t\tclear(dst[i])\n\t}\n\tfor n := range served.All() {",
		"\tfor n := range served.All() {")},
	{"refusal-takes-the-reason", "stores a refused call's reason and by_peer before the table answers", one("readiness", "Core.apply",
		"l := &c.leases[id] var step fsm.Step",
		"l := &c.leases[id]\n\tif v.reason != \"\" {\n\t\tc.body(id).reason, c.body(id).byPeer = v.reason, v.byPeer\n\t}\n\tvar step fsm.Step")},
	{"fatal-goes-on", "keeps running after a containment under the fatal policy", one("readiness", "Core.quarantine",
		"\tif c.cfg.Containment == Fatal {\n\t\tc.haltWith(", "\tif false {\n\t\tc.haltWith(")},
	{"halted-takes-releases", "lets the owner release leases on a halted engine", one("readiness", "Core.owner",
		"if c.halted != nil { return c.Err()", "if c.halted != nil && ev.What != ownerReleased { return c.Err()")},
	// The recover policy's exclusions (rule 5), one mutant each: with one
	// removed, what nothing can prove is recovered (or rests in contained).
	{"recover-escaped-submission", "lets the recover policy wait on a submission that escaped without an attempt", one("readiness", "Core.facts",
		"if c.cfg.Containment != Recover || !l.m.Marks.Has(fsm.Attempted) || ", "if c.cfg.Containment != Recover || ")},
	{"recover-failed-copy", "lets the recover policy wait on a local copy that failed without a completion record", one("readiness", "Core.facts",
		"|| l.m.Marks.Has(fsm.Fenced) || c.lost ", "|| c.lost ")},
	{"recover-lost-device", "lets the recover policy recover a lease on a lost device", one("readiness", "Core.facts",
		"|| c.lost || c.closed {", "|| c.closed {")},
	{"no-cancel-request", "never asks the backend to cancel a failed or cancelled attempt", one("readiness", "Core.requestCancel",
		"\tc.stats.CancelRequests++\n\tc.ready.Cancels = append(c.ready.Cancels, c.handle(id))", "\tc.stats.CancelRequests++")},
	// Layer by layer (SPEC §4 rule 16).
	{"layer-ready-after-failure", "reads a layer ready after a copy of it, or of an earlier layer, failed", one("readiness", "Core.LayerReadiness",
		"case b.failed != 0 && int32(layer) >= b.failed-1:", "case false && b.failed != 0:")},
	{"layer-ready-early", "reads a layer ready before its own event completed", one("readiness", "Core.store",
		"b.landed = max(b.landed, int32(v.layer)+1)", "b.landed = max(b.landed, int32(v.layer)+2)")},
	{"publish-layer-missing", "submits a layerwise publish once its last queued layer landed, with layers still to come", one("readiness", "Core.classifyCopy",
		"case ev.Layer == int(b.layers)-1:\n\t\t\tv.event = fsm.CopiesLanded",
		"case ev.Layer == int(b.layers)-1 || b.byLayer && ev.Layer == int(b.queued)-1:\n\t\t\tv.event = fsm.CopiesLanded")},
	{"publish-without-waiting", "queues a computed layer's copies without waiting for the owner's compute event", one("readiness", "Engine.queueCopies",
		"if !m.Behind.IsZero() && !e.failedCopy(m.Lease, failedAt) {", "if false {")},
	{"layer-event-before-copies", "records a fetch layer's event before its copies are queued as well as after", one("readiness", "Engine.queueCopies",
		"for ; next < m.After; next++ {\n\t\t\te.queueCopy(&rd.Copies[next], failedAt)",
		"if m.After > next && rd.Copies[next].ToDevice && !e.failedCopy(m.Lease, failedAt) {\n\t\t\te.record(m.Lease, m.Layer)\n\t\t\te.closeBatch(failedAt)\n\t\t}\n\t\tfor ; next < m.After; next++ {\n\t\t\te.queueCopy(&rd.Copies[next], failedAt)")},
	{"layer-copy-misplaced", "copies a layer's span to the start of its device row", one("readiness", "Core.copyOut",
		"Device: r.Device + gpu.DevicePtr(sp.Offset),", "Device: r.Device + gpu.DevicePtr(0*sp.Offset),")},
	{"layers-out-of-order", "queues a fetch's layers last first", one("readiness", "Core.copyOut",
		"for k := range layers {", "for kk := range layers {\n\t\tk := layers - 1 - kk")},
	{"wait-layer-failed-as-ready", "ends WaitLayer without an error when the layer failed", one("readiness", "Engine.WaitLayer",
		"case st == LayerReady:", "case st == LayerReady || st == LayerFailed:")},
	// The runner (SPEC §4 rules 14 and 15).
	{"completion-storm-let-through", "puts a letter in the mailbox for every completion, repeats included", one("readiness", "notice.fire",
		"\t\tdefault:\n\t\t\tn.faults.repeated.Add(1)\n\t\t\treturn",
		"\t\tdefault:\n\t\t\tn.faults.repeated.Add(1)\n\t\t\tn.mail.put(letter{ev: Evidence{Lease: n.h}, poll: true})\n\t\t\treturn")},
	{"probe-unknown-taken-as-ended", "takes a probe that cannot say without blocking as proof that access ended", one("readiness", "Engine.prove",
		"\t\tcase ans == contract.AccessEnded:", "\t\tcase ans == contract.AccessEnded || ans == contract.AccessUnknown:")},
	// A stack of tiers (SPEC §4 rule 19): the access proof is every tier's.
	{"tiers-first-proof-only", "answers the tiered Quiesce true once the first tier proved, the lower tiers never asked", one("backend/tiers", "Backend.groups",
		"if p.proven.Load() {", "if p.proven.Load() || p.tier > 0 {")},
	{"tiers-promote-before-proof", "promotes a lower tier's units without waiting for that tier's own proof", one("backend/tiers", "attempt.submitPromotions",
		"skip := a.cancelRequested() || a.b.isClosed() || (wait && !a.proveOne(pr.from)) || (!wait && !pr.from.proven.Load())",
		"skip := a.cancelRequested() || a.b.isClosed()")},
	{"tiers-adopt-unserved", "promotes through a tee the buffers of units the lower tier did not serve", one("backend/tiers", "tee.adopt",
		"if !served.Has(ext.Unit(i).Name) {", "if false {")},
	{"tiers-adopt-unproven", "gives a teed fetch's buffers back to the upper tier while the lower tier may still write them", one("backend/tiers", "attempt.adoptTee",
		"if pr.from.proven.Load() {", "if true {")},
	{"tiers-adopt-miscount", "counts as promoted whatever the upper tier says it adopted, more than it was handed or below zero", one("backend/tiers", "tee.adopt",
		"return uint64(min(max(kept, 0), handed))", "return uint64(kept)")},
	{"tiers-reuse-ignore-generation", "lets a handle reach its attempt whatever lease the attempt serves now: a late call for an old lease acts on the new one", one("backend/tiers", "attempt.acquire",
		"if s>>refBits != gen || s&refMask == 0 {", "if s&refMask == 0 {")},
	{"tiers-reuse-any-lease", "reuses the attempt of a lease more than one tier answered: an old handle then names only the first tier", one("backend/tiers", "attempt.reusable",
		"if box != &h.box || a.op != opFetch || len(a.parts) != 1 {", "if box != &h.box || a.op != opFetch {")},
	{"tiers-reuse-promoted", "reuses the attempt of a lease whose tier has a publisher above it, while its promotion may still touch the attempt", one("backend/tiers", "attempt.reusable",
		"d.Served.Len() == p.ext.Len() && len(a.b.uppers[p.tier]) == 0", "d.Served.Len() == p.ext.Len()")},
	{"tiers-trust-changed-answer", "never polls the tiers again at the stack's proof: a tier's answer changed after the stack answered is trusted", one("backend/tiers", "handle.Poll",
		"if h.proven.Load() { h.confirm() }", "// the tiers are not polled again")},
	// A peer transfer behind the fence (backend/peer, issue #41 item 2): the
	// proof is the whole cohort's, after the revocation.
	{"peer-quiesce-on-outcome", "answers a peer transfer's Quiesce true once its outcome is latched, its writers unsettled", []edit{
		{"backend/peer", "Receiver.prove", "if !r.tx.Poll(s.key).Reusable() {", "if s.outcome == nil {"},
		{"backend/peer", "Receiver.prove", "if err := r.tx.Retire(s.key); err != nil {", "if err := error(nil); err != nil {"},
	}},
	{"peer-unrevoked-fence", "tells a leased session its registrations were revoked, and fenced, without revoking them", one("backend/peer", "Receiver.observe",
		"if ok, fences := r.revoke(s); ok &&", "if ok, fences := true, true; ok &&")},
	{"peer-serve-every-page", "names every page served by a delivery, whatever its token_end", one("backend/peer", "Receiver.translate",
		"return contract.Delivered{Served: Served(s.pages, o.TokenEnd)}", "return contract.Delivered{Served: Served(s.pages, 1<<62)}")},
	{"mem-adopt-past-extent", "adopts buffers past the extent's units, under names it does not have", one("backend/mem", "Backend.Adopt",
		"bufs = bufs[:min(len(bufs), ext.Len())]", "bufs = bufs[:len(bufs)]")},
	{"mem-recycle-read-row", "recycles the bytes of an evicted row while a fetch still copies out of them", one("backend/mem", "store.release",
		"if r.readers > 0 {", "if false {")},
	// A publication gathered straight from staging (backend/redis, issue #40
	// item 1): go-redis's own buffer is reused once Write returns, so only the
	// caller's values may be kept by reference.
	{"redis-gather-keeps-buffer", "keeps every write of a publication by reference, go-redis's reused buffer included", one("backend/redis", "gatherConn.Write",
		"if len(p) <= gatherCopy {", "if false {")},
	// A publication's run of names as one MSETNX (backend/redis): a run that
	// stored nothing because one of its names was stored must go again.
	{"redis-msetnx-none-as-stored", "takes an MSETNX that stored none of its names for one that stored them", one("backend/redis", "Backend.publish",
		"default:\n\t\t\t\tagain = append(again, lo, hi)", "default:\n\t\t\t\t_ = hi")},
	{"redis-msetnx-refused-as-stored", "takes an MSETNX the server refused (unknown, forbidden) for one that stored its names", one("backend/redis", "Backend.publish",
		"if fail = err; err == nil {", "if fail = err; false {")},
	{"peer-sender-early-proof", "answers a publication's Quiesce true once its outcome is latched, its puts still in flight", one("backend/peer", "Sender.prove",
		"for _, r := range p.puts {", "for _, r := range p.puts[:0] {")},
}
