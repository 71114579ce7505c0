package readiness

import (
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// breachCase is one case of TestAssertionsHaltAsBreaches.
type breachCase struct {
	name string
	edit func(*Config)
	// breach drives a lease there, breaks the bookkeeping and takes the
	// step that must halt.
	breach func(r *coreRig)
	want   string
}

// effect performs one effect on the lease as a step of the given event would,
// as a broken table or classifier would ask for it.
func (r *coreRig) effect(id uint32, e fsm.Effect, step fsm.Step) {
	r.c.perform(id, &step, fsm.Effects(0).With(e), &verdict{})
}

// fencedOne drives a one-row fetch to access_fenced, its copies to the device out.
func (r *coreRig) fencedOne() (Handle, uint32) {
	h, id := r.served()
	r.step(h, QuiesceTrue, nil)
	require.Equal(r.t, StateAccessFenced, State(r.c.leases[id].m.State))
	return h, id
}

// contained marks a served fetch contained, its admission slot given back,
// as contain does.
func (r *coreRig) contained() (Handle, uint32) {
	h, id := r.served()
	r.c.leases[id].m.Marks |= 1 << fsm.WasContained
	r.c.unadmit(id)
	return h, id
}

// layerwise lends a layerwise publish and takes the round that grants it.
func (r *coreRig) layerwise() (Handle, uint32) {
	h, err := r.c.Lend(Request{Kind: Publish, Layerwise: true, Rows: []staging.Row{{Name: coreName(3), Device: 0x3000}}})
	require.NoError(r.t, err)
	r.tick(0)
	require.Equal(r.t, StateGranted, State(r.c.leases[h.id].m.State))
	return h, h.id
}

// pairedBreaches reach the assertions that pair (docs/engine.md): each
// invariant asserted where it is decided and again where it takes effect.
// Each case breaks only what its assertion guards, so that with the guard
// removed the step acts (or another assertion, naming something else, halts)
// and the case fails.
var pairedBreaches = []breachCase{
	// The fence: decided entering access_fenced, taking effect at free and
	// retire.
	{"access ended without the fence mark", nil, func(r *coreRig) {
		_, id := r.served()
		r.effect(id, fsm.EndAccess, fsm.Step{Event: fsm.AccessProven})
	}, "access ended in served without the fence mark"},
	{"an exposed lease fenced without a proof", nil, func(r *coreRig) {
		_, id := r.served()
		r.c.leases[id].m.Marks |= 1 << fsm.Fenced
		r.effect(id, fsm.EndAccess, fsm.Step{Event: fsm.Deadline})
	}, "a lease its backend was handed was fenced by deadline, not by an access proof"},
	{"an attempt forgotten before the fence", nil, func(r *coreRig) {
		_, id := r.served()
		r.effect(id, fsm.Forget, fsm.Step{})
	}, "an attempt was about to be forgotten before its access was proven over"},
	{"slots freed twice", nil, func(r *coreRig) {
		h, id := r.complete()
		require.NoError(r.t, r.c.Release(h))
		r.released = 1
		r.effect(id, fsm.Free, fsm.Step{})
	}, "slots about to be freed from a record that carries no lease"},
	{"slots freed before the release", nil, func(r *coreRig) {
		_, id := r.complete()
		r.effect(id, fsm.Free, fsm.Step{})
	}, "slots about to be freed in logically_complete"},
	{"a live record retired", nil, func(r *coreRig) {
		_, id := r.complete()
		r.effect(id, fsm.Retire, fsm.Step{})
	}, "a record in logically_complete (carrying a lease: true) was about to be retired"},
	{"a record retired holding its admission slot", nil, func(r *coreRig) {
		_, id := r.complete()
		r.c.leases[id].m.State = fsm.Released
		r.c.body(id).outstanding = true
		r.effect(id, fsm.Retire, fsm.Step{})
	}, "a lease was about to be retired holding its admission slot"},
	// Generations: moved on at retire, checked at reuse (Lend) and at every
	// lookup.
	{"a live record at the generation it retired", nil, func(r *coreRig) {
		h, id := r.served()
		r.c.leases[id].retired = uint8(h.gen)
		_ = r.c.Step(Evidence{What: QuiesceTrue, Lease: h})
	}, "a live record carries the generation it retired"},
	// Served rows: classified in classifyAnswer, copied in copyOut.
	{"a delivered outcome without its first answer", nil, func(r *coreRig) {
		h, id := r.served()
		r.c.body(id).first = nil
		_ = r.c.Step(Evidence{What: PollAnswered, Lease: h, Outcome: contract.Delivered{Served: contract.NewNameSet(coreName(1))}})
	}, "a lease latched served without the backend's first answer"},
	{"copies to the device for an outcome that served nothing", nil, func(r *coreRig) {
		_, id := r.fencedOne()
		r.c.leases[id].result = fsm.Miss
		r.effect(id, fsm.CopyOut, fsm.Step{})
	}, "staging→device copies asked for a fetch whose outcome is missed"},
	{"copies to the device of rows never served", nil, func(r *coreRig) {
		_, id := r.fencedOne()
		r.c.body(id).first = contract.Delivered{}
		r.effect(id, fsm.CopyOut, fsm.Step{})
	}, "staging→device copies asked for 1 rows of a lease its backend served 0"},
	// Containment: decided at the deadline (contain), taking effect where the
	// slots leave circulation (quarantine) and the record stays (park).
	{"a lease contained before its deadline", nil, func(r *coreRig) {
		_, id := r.served()
		r.effect(id, fsm.Contain, fsm.Step{})
	}, "before its containment deadline"},
	{"slots quarantined without containment", nil, func(r *coreRig) {
		_, id := r.served()
		r.effect(id, fsm.Quarantine, fsm.Step{})
	}, "a lease's slots were about to be quarantined without its containment"},
	{"slots quarantined holding an admission slot", nil, func(r *coreRig) {
		_, id := r.served()
		r.c.leases[id].m.Marks |= 1 << fsm.WasContained
		r.effect(id, fsm.Quarantine, fsm.Step{})
	}, "a lease was about to be quarantined holding its admission slot"},
	{"a lease parked outside quarantine", nil, func(r *coreRig) {
		_, id := r.complete()
		r.effect(id, fsm.Park, fsm.Step{})
	}, "a lease in logically_complete was about to be parked"},
	{"a lease recovered under the quarantine policy", nil, func(r *coreRig) {
		_, id := r.contained()
		r.effect(id, fsm.Recover, fsm.Step{})
	}, "a contained lease was about to be recovered under the quarantine policy"},
	// Deadlines: fixed at submission, only ever moved earlier by a drain.
	{"a submission's deadlines fixed twice", nil, func(r *coreRig) {
		_, id := r.served()
		r.effect(id, fsm.ArmDeadline, fsm.Step{})
	}, "a submission's deadlines were about to be fixed a second time"},
	{"a drain with no containment deadline", nil, func(r *coreRig) {
		_, id := r.served()
		r.c.body(id).containAt = 0
		r.effect(id, fsm.StartDrain, fsm.Step{Event: fsm.AccessUnproven})
	}, "a drain started on a submission whose containment deadline was never fixed"},
	// Admission: decided by the pump (admit), taken (takeAdmission), used
	// (submit), given back (unadmit) before the record retires or quarantines.
	{"too many submissions outstanding", func(cfg *Config) { cfg.MaxOutstanding = 1 }, func(r *coreRig) {
		r.lend()
		r.c.outstanding = 2
		r.tick(0)
	}, "2 submissions outstanding past the backend's bound of 1"},
	{"an admission slot taken outside admitted", nil, func(r *coreRig) {
		_, id := r.served()
		r.effect(id, fsm.TakeAdmission, fsm.Step{})
	}, "an admission slot taken by a lease in served"},
	{"a withdrawn lease admitted", nil, func(r *coreRig) {
		_, id := r.lend()
		r.c.unadmit(id)
		r.c.leases[id].m.Latched |= 1 << fsm.ReleaseRequested
		r.effect(id, fsm.TakeAdmission, fsm.Step{})
	}, "a lease its owner withdrew (released, cancelled or closed) was about to be admitted"},
	{"a withdrawn lease submitted", nil, func(r *coreRig) {
		_, id := r.lend()
		r.c.leases[id].m.Latched |= 1 << fsm.CancelRequested
		r.effect(id, fsm.Submit, fsm.Step{})
	}, "a lease its owner withdrew (released, cancelled or closed) was about to be submitted"},
	// Access proofs: asked by askProof, one call at a time, its timeout armed
	// only while it is out.
	{"Quiesce asked with no attempt", nil, func(r *coreRig) {
		_, id := r.served()
		r.c.leases[id].m.Marks &^= 1 << fsm.Attempted
		r.c.ask(id)
	}, "Quiesce asked about a lease whose backend returned no attempt"},
	{"a second Quiesce call", nil, func(r *coreRig) {
		_, id := r.served() // its proof is asked already
		r.c.ask(id)
	}, "a second Quiesce call asked for while one is outstanding"},
	{"a Quiesce timeout with no call out", nil, func(r *coreRig) {
		_, id := r.served()
		r.c.body(id).proofOut = false
		r.c.rearm(id)
	}, "a Quiesce timeout is armed with no Quiesce call outstanding"},
	// Layers: landed ≤ queued ≤ layers, every layer landed where readiness
	// is answered, no layer taken once withdrawn.
	{"a layer landed past the lease's layers", nil, func(r *coreRig) {
		_, id := r.fencedOne()
		r.c.store(id, fsm.StoreLayerLanded, &verdict{layer: 1})
	}, "2 layers landed of a lease that queued 0 of 1"},
	{"a layerwise publish landed whole with layers unqueued", nil, func(r *coreRig) {
		_, id := r.layerwise()
		r.c.store(id, fsm.StoreCopiesDone, &verdict{})
	}, "a layerwise publish landed whole with 0 of its 1 layers queued"},
	{"a withdrawn publish's layer queued", nil, func(r *coreRig) {
		_, id := r.layerwise()
		r.c.leases[id].m.Latched |= 1 << fsm.ReleaseRequested
		r.c.perform(id, &fsm.Step{}, fsm.Effects(0).With(fsm.CopyLayer), &verdict{layer: 0, behind: gpu.Event{}})
	}, "layer 0's copies asked for of a publish its owner withdrew"},
	// Readiness: decided answerable in answer, read in Readiness.
	{"readiness answered with copies out", nil, func(r *coreRig) {
		_, id := r.fencedOne()
		r.effect(id, fsm.Answer, fsm.Step{})
	}, "readiness about to be answered with 1 local copies not landed"},
	{"readiness answered with layers not landed", nil, func(r *coreRig) {
		_, id := r.fencedOne()
		r.c.body(id).copiesOut = 0
		r.effect(id, fsm.Answer, fsm.Step{})
	}, "readiness about to be answered with 0 of 1 layers landed"},
	{"readiness read with copies out", nil, func(r *coreRig) {
		h, id := r.complete()
		r.c.body(id).copiesOut = 1
		_, _ = r.c.Readiness(h)
	}, "readiness read with 1 local copies of the lease not landed"},
	// Grants: the allocator's runs place every row; only a waiting request is
	// withdrawn from its line.
	{"a grant that places too few rows", nil, func(r *coreRig) {
		h, err := r.c.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Name: coreName(2), Device: 0x2000}}})
		require.NoError(r.t, err)
		b := r.c.body(h.id)
		b.rows = append(b.rows, b.rows[0])
		r.effect(h.id, fsm.Place, fsm.Step{})
	}, "the allocator's runs for a granted lease place 1 of its 2 rows"},
	{"a granted lease withdrawn from the line", nil, func(r *coreRig) {
		_, id := r.complete()
		r.effect(id, fsm.Withdraw, fsm.Step{})
	}, "a lease in logically_complete was about to be taken out of the allocator's line"},
}
