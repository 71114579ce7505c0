package peer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
)

// A fetch is refused, with nothing registered or offered, unless its extent
// names exactly one expected plan's pages and every writer's peer was
// agreed with — alive, and granting what the session needs.
func TestFetchRefusals(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(w *world) contract.CacheExtent
		want    string
	}{
		{"an extent with no units", func(w *world) contract.CacheExtent {
			e, err := contract.NewCacheExtent(nil, nil, true)
			require.NoError(t, err)
			return e
		}, "no units"},
		{"a unit of no plan", func(w *world) contract.CacheExtent {
			return extent(t, []peer.Page{{Name: peer.PageName(9, 1, 0, 0)}}, 0)
		}, "no page of a plan expected"},
		{"the pages of two plans", func(w *world) contract.CacheExtent {
			a, err := w.recv.Expect(plan(t, 1, 1, 1, kvA))
			require.NoError(t, err)
			b, err := w.recv.Expect(plan(t, 2, 1, 1, kvA))
			require.NoError(t, err)
			return extent(t, append(a, b...), 0)
		}, "mixes the pages"},
		{"some of a plan's pages", func(w *world) contract.CacheExtent {
			a, err := w.recv.Expect(plan(t, 1, 1, 3, kvA))
			require.NoError(t, err)
			return extent(t, a[:2], 0)
		}, "has 3 pages; the extent names 2"},
		{"a writer never connected", func(w *world) contract.CacheExtent {
			a, err := w.recv.Expect(plan(t, 1, 1, 1, transfer.AccessorID{Peer: "prefill-z", Role: transfer.RoleKV}))
			require.NoError(t, err)
			return extent(t, a, 0)
		}, `no agreement with peer "prefill-z"`},
		{"a writer whose peer was lost", func(w *world) contract.CacheExtent {
			_, err := w.net.Restart("prefill-a")
			require.NoError(t, err)
			w.drain()
			a, err := w.recv.Expect(plan(t, 1, 1, 1, kvA))
			require.NoError(t, err)
			return extent(t, a, 0)
		}, "was lost: Connect its new life"},
		{"two writers of a peer that lacks MULTI_WRITER", func(w *world) contract.CacheExtent {
			_, inc := w.nodes["prefill-b"].Self()
			_, err := w.recv.Connect(caps("prefill-b", inc, transfer.KnownCapabilities&^transfer.Caps(transfer.MultiWriter)))
			require.NoError(t, err)
			a, err := w.recv.Expect(plan(t, 1, 1, 1, kvA, kvB))
			require.NoError(t, err)
			return extent(t, a, 0)
		}, "lacks MULTI_WRITER"},
		{"a unit with no staging slot", func(w *world) contract.CacheExtent {
			a, err := w.recv.Expect(plan(t, 1, 1, 1, kvA))
			require.NoError(t, err)
			return extent(t, a, 99)
		}, "no staging slot"},
		{"a closed receiver", func(w *world) contract.CacheExtent {
			a, err := w.recv.Expect(plan(t, 1, 1, 1, kvA))
			require.NoError(t, err)
			require.NoError(t, w.recv.Close())
			return extent(t, a, 0)
		}, "closed"},
	}
	for _, leased := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				w := newWorld(t, worldOpt{leased: leased})
				w.connect()
				ext := tt.prepare(w)
				a, err := w.recv.Fetch(ext, nil)
				require.ErrorIs(t, err, contract.ErrSubmissionRejected)
				assert.ErrorContains(t, err, tt.want)
				assert.Nil(t, a)
				assert.Empty(t, w.offers, "nothing was offered")
				assert.Equal(t, uint64(1), w.recv.Stats().Rejected)
			})
		}
	}
}

// A plan is fetched once: a second fetch of its pages is refused, and a
// retry is a new attempt with pages of its own.
func TestAPlanIsFetchedOnce(t *testing.T) {
	w := newWorld(t, worldOpt{})
	w.connect()
	p := plan(t, 1, 1, 2, kvA)
	pages, err := w.recv.Expect(p)
	require.NoError(t, err)
	_, err = w.recv.Expect(p)
	assert.ErrorContains(t, err, "already expected")
	_, err = w.recv.Fetch(extent(t, pages, 0), nil)
	require.NoError(t, err)
	_, err = w.recv.Fetch(extent(t, pages, 2), nil)
	assert.ErrorIs(t, err, contract.ErrSubmissionRejected)
	_, err = w.recv.Expect(p)
	assert.ErrorContains(t, err, "already fetched")
	w.fetch(plan(t, 1, 2, 2, kvA), 2)
	assert.Len(t, w.offers, 2, "one offer per fetch's writer")

	q := plan(t, 2, 1, 1, kvA)
	_, err = w.recv.Expect(q)
	require.NoError(t, err)
	assert.True(t, w.recv.Forget(q.Key()))
	assert.False(t, w.recv.Forget(q.Key()))
}

// Negotiation comes before anything is published: a peer lacking what every
// session needs is refused at Connect, naming what it lacks.
func TestNegotiationRefusal(t *testing.T) {
	base := transfer.Caps(transfer.AttemptIdentity, transfer.EndpointIncarnation, transfer.ExactWriterTracking)
	tests := []struct {
		name    string
		leased  bool
		remote  transfer.CapabilitySet
		lacking transfer.CapabilitySet
	}{
		{"no exact writer tracking", false, transfer.KnownCapabilities &^ transfer.Caps(transfer.ExactWriterTracking), transfer.Caps(transfer.ExactWriterTracking)},
		{"not leased: no submission fence", false, base, transfer.Caps(transfer.SubmissionFence)},
		{"leased: no generation lease", true, base | transfer.Caps(transfer.SubmissionFence), transfer.Caps(transfer.AllocationGenerationLeases)},
		{"leased: a fence is not needed", true, base | transfer.Caps(transfer.AllocationGenerationLeases), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, worldOpt{leased: tt.leased})
			_, err := w.recv.Connect(caps("prefill-a", 2, tt.remote))
			if tt.lacking == 0 {
				require.NoError(t, err)
				return
			}
			var ne *transfer.NegotiationError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, tt.lacking, ne.MissingRemote)
			w.fetchRefused(plan(t, 1, 1, 1, kvA))
		})
	}
}

func (w *world) fetchRefused(p peer.Plan) {
	w.t.Helper()
	before := len(w.offers)
	pages, err := w.recv.Expect(p)
	require.NoError(w.t, err)
	_, err = w.recv.Fetch(extent(w.t, pages, 0), nil)
	require.ErrorIs(w.t, err, contract.ErrSubmissionRejected)
	assert.Len(w.t, w.offers, before, "nothing more was offered")
}

// The engine's rules for the attempt, one story per row: what the writers
// say, what Poll answers (and answers for ever), what Quiesce answers along
// the way — false until the pages are reusable by the session's own account.
func TestOutcomes(t *testing.T) {
	type step struct {
		say  transfer.EvidenceKind // 0: none
		who  transfer.AccessorID
		end  int64
		inc  transfer.Incarnation // 0: the peer's current life
		att  transfer.AttemptID   // 0: the session's
		wait time.Duration
		// then
		outcome string // the outcome Poll answers ("" none)
		proven  bool   // Quiesce answers true
	}
	tests := []struct {
		name    string
		leased  bool
		writers []transfer.AccessorID
		cancel  bool // the engine cancels first
		steps   []step
		served  int // pages served by the final delivery
	}{
		{name: "every writer DONE: delivered, each settles by its DONE", writers: []transfer.AccessorID{kvA, kvB}, steps: []step{
			{say: transfer.Done, who: kvA, end: 48},
			{say: transfer.Done, who: kvB, end: 48, outcome: "delivered(3 served)", proven: true},
		}, served: 3},
		{name: "a DONE short of the span: a partial delivery, per page", writers: []transfer.AccessorID{kvA, kvB}, steps: []step{
			{say: transfer.Done, who: kvA, end: 48},
			{say: transfer.Done, who: kvB, end: 40, outcome: "delivered(2 served)", proven: true},
		}, served: 2},
		{name: "one writer fails: failed at once; nothing proven while its sibling writes", writers: []transfer.AccessorID{kvA, kvB}, steps: []step{
			{say: transfer.Failure, who: kvA, outcome: "failed(prefill-a/0/kv failed: writer failed)"},
			{say: transfer.Done, who: kvB, end: 48, outcome: "failed(prefill-a/0/kv failed: writer failed)"},
			{wait: time.Second, outcome: "failed(prefill-a/0/kv failed: writer failed)"}, // contained: the failed writer never settles
		}},
		{name: "leased: one writer fails, the revocation fences the rest", leased: true, writers: []transfer.AccessorID{kvA, kvB}, steps: []step{
			{say: transfer.Failure, who: kvA, outcome: "failed(prefill-a/0/kv failed: writer failed)", proven: true},
		}},
		{name: "a peer's cancel", writers: []transfer.AccessorID{kvA}, leased: true, steps: []step{
			{say: transfer.PeerCancel, who: kvA, outcome: "cancelled(by peer)", proven: true},
		}},
		{name: "the engine's cancel is local, and a later DONE changes nothing", writers: []transfer.AccessorID{kvA}, cancel: true, steps: []step{
			{outcome: "cancelled(local)"},
			{say: transfer.Done, who: kvA, end: 48, outcome: "cancelled(local)", proven: true},
		}},
		{name: "no outcome by the deadline: timeout", writers: []transfer.AccessorID{kvA}, leased: true, steps: []step{
			{wait: 100 * time.Millisecond, outcome: "failed(timeout: no outcome by the deadline fixed at submission)", proven: true},
		}},
		{name: "a DONE from an older attempt, another life or twice settles nothing", writers: []transfer.AccessorID{kvA, kvB}, steps: []step{
			{say: transfer.Done, who: kvA, end: 48, att: 1},
			{say: transfer.Done, who: kvA, end: 48, inc: 99},
			{say: transfer.Done, who: kvB, end: 48},
			{say: transfer.Done, who: kvB, end: 48},
			{say: transfer.Done, who: kvA, end: 48, outcome: "delivered(3 served)", proven: true},
		}, served: 3},
		{name: "unsettled at containment: IN_DOUBT, and late evidence never proves it", writers: []transfer.AccessorID{kvA}, steps: []step{
			{wait: 300 * time.Millisecond, outcome: "failed(timeout: no outcome by the deadline fixed at submission)"},
			{say: transfer.Done, who: kvA, end: 48, outcome: "failed(timeout: no outcome by the deadline fixed at submission)"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, worldOpt{leased: tt.leased})
			w.connect()
			p := plan(t, 1, 2, 3, tt.writers...)
			a := w.fetch(p, 0)
			assert.Len(t, w.offers, len(tt.writers), "every writer was offered the pages")
			if tt.cancel {
				d, err := contract.RequestCancel(a)
				require.NoError(t, err)
				assert.Equal(t, contract.CancelRequested, d)
				d2, err := contract.RequestCancel(a)
				require.NoError(t, err)
				assert.Equal(t, d, d2, "a second cancel answers the same")
			}
			for i, s := range tt.steps {
				if s.say != 0 {
					att := s.att
					if att == 0 {
						att = p.Attempt
					}
					w.say(s.say, transfer.SessionKey{Request: p.Request, Attempt: att}, s.who, s.end, s.inc)
				}
				if s.wait > 0 {
					w.clock.Advance(s.wait)
					w.recv.Progress()
				}
				o := a.Poll()
				if s.outcome == "" {
					assert.Nil(t, o, "step %d", i)
				} else if assert.NotNil(t, o, "step %d", i) {
					assert.Equal(t, s.outcome, o.String(), "step %d", i)
				}
				assert.Equal(t, s.proven, w.quiesce(a), "step %d: Quiesce", i)
			}
			if tt.served > 0 {
				d, ok := a.Poll().(contract.Delivered)
				require.True(t, ok)
				pages, _ := p.Pages()
				assert.True(t, d.Served.Equal(contract.NewNameSet(namesOf(pages[:tt.served])...)))
			}
		})
	}
}

func namesOf(pages []peer.Page) []contract.Name {
	var ns []contract.Name
	for _, pg := range pages {
		ns = append(ns, pg.Name)
	}
	return ns
}

// Evidence that claims another peer or life than the endpoint it came on is
// dropped before the sessions see it; what the sessions refuse is counted.
func TestIdentityAtTheDoor(t *testing.T) {
	w := newWorld(t, worldOpt{})
	w.connect()
	p := plan(t, 1, 1, 1, kvA)
	a := w.fetch(p, 0)
	_, incA := w.nodes["prefill-a"].Self()
	// prefill-b speaks for prefill-a
	ev := transfer.Evidence{Kind: transfer.Done, Session: p.Key(), Accessor: kvA, Incarnation: incA, TokenEnd: 16}
	msg, err := transfer.AppendEvidence(nil, ev)
	require.NoError(t, err)
	w.send("prefill-b", msg)
	w.send("prefill-b", []byte("not evidence"))
	assert.Nil(t, a.Poll(), "an impersonated DONE settles nothing")
	w.say(transfer.Done, transfer.SessionKey{Request: 1, Attempt: 7}, kvA, 16, 0)
	st := w.recv.Stats()
	assert.Equal(t, uint64(1), st.Impersonated)
	assert.Equal(t, uint64(1), st.Malformed)
	assert.Equal(t, uint64(1), st.Refused, "a DONE for an attempt never created")
	w.say(transfer.Done, p.Key(), kvA, 16, 0)
	assert.Equal(t, "delivered(1 served)", a.Poll().String())
	assert.True(t, w.quiesce(a))
	assert.Equal(t, uint64(1), w.recv.Stats().Evidence)
}

// A restarted peer's sessions fail (its endpoint failed), its new life's
// DONE settles nothing of the old, and sessions are agreed with the new
// life only once it is connected.
func TestRestartedWriter(t *testing.T) {
	w := newWorld(t, worldOpt{})
	w.connect()
	p := plan(t, 1, 1, 1, kvA)
	a := w.fetch(p, 0)
	_, old := w.nodes["prefill-a"].Self()
	node, err := w.net.Restart("prefill-a")
	require.NoError(t, err)
	w.nodes["prefill-a"] = node
	w.drain()
	require.NotNil(t, a.Poll())
	assert.Contains(t, a.Poll().String(), "lost")
	w.say(transfer.Done, p.Key(), kvA, 16, 0) // the new life answers for the old
	assert.False(t, w.quiesce(a), "the new life's DONE settles nothing its old life posted")
	w.fetchRefused(plan(t, 2, 1, 1, kvA))
	_, now := node.Self()
	require.NotEqual(t, old, now)
	_, err = w.recv.Connect(all("prefill-a", now))
	require.NoError(t, err)
	w.fetch(plan(t, 3, 1, 1, kvA), 1)
	require.Len(t, w.offers, 2)
	assert.Equal(t, now, w.offers[1].Incarnation, "offered to the new life")
}

// An offer that fails after the pages were exposed fails the attempt (not a
// rejection: an earlier writer may have its offer), and the session is
// fenced: nothing more is offered.
func TestOfferFailure(t *testing.T) {
	w := newWorld(t, worldOpt{leased: true})
	w.connect()
	w.offerErr[kvB] = errors.New("no route to prefill-b")
	a := w.fetch(plan(t, 1, 1, 2, kvA, kvB, auxA), 0)
	assert.Len(t, w.offers, 1, "kvA was offered; kvB failed; auxA was never offered")
	require.NotNil(t, a.Poll())
	assert.Equal(t, "failed(offer to prefill-b/1/kv failed: no route to prefill-b)", a.Poll().String())
	w.recv.Progress()
	assert.True(t, w.quiesce(a), "leased: the revocation fenced kvA")
}

// TestIdleProgressObservesNothing: with sessions live and nothing arriving,
// a Progress does no work per session (no allocation: no sort, no poll that
// wakes), yet a deadline that comes with no input is still seen: the
// session fails at its deadline, and a leased one is revoked.
func TestIdleProgressObservesNothing(t *testing.T) {
	w := newWorld(t, worldOpt{leased: true})
	w.connect()
	var atts []contract.Attempt
	for i := range 4 {
		atts = append(atts, w.fetch(plan(t, transfer.RequestID(i+1), 1, 1, kvA), i))
	}
	w.drain()
	allocs := testing.AllocsPerRun(50, func() { w.recv.Progress() })
	assert.Zero(t, allocs, "an idle Progress walks no session")
	for _, a := range atts {
		assert.Nil(t, a.Poll(), "no outcome before the deadline")
	}
	w.clock.Advance(100 * time.Millisecond) // the receiver's Timeout: every deadline comes
	w.recv.Progress()
	// Read before any attempt is asked: Progress alone saw the deadlines.
	assert.Equal(t, uint64(len(atts)), w.recv.Stats().Revocations, "each leased session revoked once its deadline latched an outcome")
	for i, a := range atts {
		o := a.Poll()
		require.NotNil(t, o, "attempt %d: its deadline came", i)
		assert.IsType(t, contract.Failed{}, o)
	}
}

// stubbornMemory is a registration whose first revocations fail: the
// receiver must try again on later rounds, input or not.
type stubbornMemory struct {
	transfer.Memory
	fails *int
}

func (m stubbornMemory) Revoke() (transfer.Revocation, error) {
	if *m.fails > 0 {
		*m.fails--
		return 0, errors.New("revocation refused, for now")
	}
	return m.Memory.Revoke()
}

type stubbornTransport struct {
	transfer.Transport
	fails *int
}

func (s stubbornTransport) Register(b []byte) (transfer.Memory, error) {
	m, err := s.Transport.Register(b)
	if err != nil {
		return nil, err
	}
	return stubbornMemory{Memory: m, fails: s.fails}, nil
}

// TestAFailedRevocationIsTriedAgainWhenIdle: a leased session whose
// revocation failed is revoked by a later Progress although nothing arrived
// since — an idle round still tries it again.
func TestAFailedRevocationIsTriedAgainWhenIdle(t *testing.T) {
	fails := 0
	w := newWorld(t, worldOpt{leased: true, wrap: func(tr transfer.Transport) transfer.Transport {
		return stubbornTransport{Transport: tr, fails: &fails}
	}})
	w.connect()
	a := w.fetch(plan(t, 1, 1, 1, kvA), 0)
	w.drain()
	fails = 2
	w.say(transfer.Done, transfer.SessionKey{Request: 1, Attempt: 1}, kvA, 16, 0) // delivers, and drains
	require.Zero(t, w.recv.Stats().Revocations, "refused so far")
	for range 4 {
		w.recv.Progress()
	}
	assert.Zero(t, fails, "tried again on idle rounds")
	assert.Equal(t, uint64(1), w.recv.Stats().Revocations)
	assert.True(t, w.quiesce(a), "revoked: the pages are the engine's again")
}
