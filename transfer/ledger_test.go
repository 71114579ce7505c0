package transfer_test

// The reference's acceptance ledger (TensorRT-LLM's
// tests/unittest/disaggregated/lifecycle_acceptance.md), milestone A:
// ownership. Each test is named after the ledger row it plays and is written
// from the reference's scenario; docs/testing.md ("The reference's acceptance
// ledger") maps every row, these tests and the older ones that hold it.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Accessors the ledger tests add to helpers_test.go's: the auxiliary writer
// of prefill-b's rank 1, and the sender's own puts into decode-1's pages (on
// the sender, the readers of its source pages are the accessors).
var (
	aux1  = transfer.AccessorID{Peer: "prefill-b", Rank: 1, Role: transfer.RoleAux}
	put0  = transfer.AccessorID{Peer: "decode-1", Rank: 0, Role: transfer.RoleKV}
	put0x = transfer.AccessorID{Peer: "decode-1", Rank: 0, Role: transfer.RoleAux}
)

// noPerOp is every capability but the peer's promise to send DONE only after
// its own flush: its DONE is then logical only.
const noPerOp = transfer.KnownCapabilities &^ (1 << transfer.PerOperationQuiescence)

// exposedTable holds cfg's session, created and exposed at 1.
func exposedTable(t *testing.T, cfg transfer.CohortConfig) *transfer.Sessions {
	t.Helper()
	s := table(t)
	require.NoError(t, s.Create(at(1), cfg))
	require.NoError(t, s.Expose(at(1), cfg.Session))
	return s
}

// give feeds evidence about cfg's session to s at ms, failing on a refusal.
func give(t *testing.T, s *transfer.Sessions, ms int, evs ...transfer.Evidence) {
	t.Helper()
	for _, e := range evs {
		require.NoError(t, s.Step(at(ms), e), "%v", e)
	}
}

// A-PROFILE, read as capability negotiation. The reference activates its
// lifecycle only on one qualified profile and refuses requests outside it
// before admission (test_fp4_mla_bridge_uses_production_cache_layout,
// test_fp4_mla_bridge_rejects_requests_outside_qualified_protocol). Here a
// session states what it needs (CohortConfig.Requires): a peer lacking it is
// refused by the negotiation, naming what it lacks, and a session built on
// an agreement that does not grant it is never created — so no address is
// ever published to that peer.
func TestLedgerAProfileRefusesBeforePublication(t *testing.T) {
	all := transfer.KnownCapabilities
	without := func(c transfer.Capability) transfer.CapabilitySet { return all &^ transfer.Caps(c) }
	for _, tc := range []struct {
		name    string
		leased  bool
		ids     []transfer.AccessorID
		peer    transfer.CapabilitySet
		missing transfer.CapabilitySet // 0: the control, accepted
	}{
		{"a peer that grants what the session needs", false, []transfer.AccessorID{kv0, aux0}, all, 0},
		{"a KV and an aux writer, the peer lacks MULTI_WRITER", false, []transfer.AccessorID{kv0, aux0},
			without(transfer.MultiWriter), transfer.Caps(transfer.MultiWriter)},
		{"leased pages, the peer lacks generation leases", true, []transfer.AccessorID{kv0},
			without(transfer.AllocationGenerationLeases), transfer.Caps(transfer.AllocationGenerationLeases)},
		{"pages not leased, the peer lacks its own submission fence", false, []transfer.AccessorID{kv0},
			without(transfer.SubmissionFence), transfer.Caps(transfer.SubmissionFence)},
		{"the peer cannot tell its incarnations apart", false, []transfer.AccessorID{kv0},
			without(transfer.EndpointIncarnation), transfer.Caps(transfer.EndpointIncarnation)},
		{"the peer does not track writers exactly", false, []transfer.AccessorID{kv0},
			without(transfer.ExactWriterTracking), transfer.Caps(transfer.ExactWriterTracking)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := transceiver(t, (&fakeClock{now: at(0)}).Now)
			cfg := config(t, tc.leased, tc.ids...)
			remote := transfer.Capabilities{Peer: "prefill-a", Incarnation: 1, Version: transfer.ProtocolVersion, Supported: tc.peer}
			_, err := tr.Negotiate(remote, cfg.Requires())
			if tc.missing == 0 {
				require.NoError(t, err)
			} else {
				var ne *transfer.NegotiationError
				require.ErrorAs(t, err, &ne)
				assert.Equal(t, tc.missing, ne.MissingRemote)
				assert.Contains(t, err.Error(), tc.missing.String())
			}
			// An agreement made without asking for what the session needs.
			weak, err := tr.Negotiate(remote, 0)
			require.NoError(t, err)
			for i := range cfg.Accessors {
				cfg.Accessors[i].Agreement = weak
			}
			err = tr.Create(cfg)
			if tc.missing == 0 {
				require.NoError(t, err)
				require.NoError(t, tr.Expose(key1))
				return
			}
			var ie *transfer.InputError
			require.ErrorAs(t, err, &ie)
			assert.Contains(t, err.Error(), "lacking "+tc.missing.String())
			require.ErrorIs(t, tr.Expose(key1), transfer.ErrUnknownSession, "nothing can be published")
			_, held := tr.Info(key1)
			assert.False(t, held)
		})
	}
}

// A-ADMISSION, "retain partial publication"
// (test_aborted_publication_cannot_complete_during_failure_unwind): the
// address reached writer 0, then publishing to writer 1 failed, and the
// owner cancels. Writer 0 may still write, and its success arriving during
// the unwind must not complete the transfer. kvready exposes a session as a
// whole and tracks its cohort exactly, so writer 1 — never handed anything —
// still counts as unsettled: the pages come back early only through a
// revocation that fences; otherwise they are contained at the deadline fixed
// at submission. Safe, not live (docs/testing.md says so).
func TestLedgerAAdmissionPartialPublication(t *testing.T) {
	for _, tc := range []struct {
		name           string
		leased, fences bool
		doneAt         int               // writer 0's DONE, sent after its own flush (0: never)
		before, at     transfer.Physical // just before containment, and at it
	}{
		{"a lease whose revocation fences", true, true, 3, transfer.QuiescedFailure, transfer.QuiescedFailure},
		{"a lease whose revocation only refuses new operations", true, false, 3, transfer.QuiescedFailure, transfer.QuiescedFailure},
		{"no lease", false, false, 3, transfer.QuiescedFailure, transfer.QuiescedFailure},
		{"writer 0 never settles, a lease whose revocation fences", true, true, 0, transfer.QuiescedFailure, transfer.QuiescedFailure},
		{"writer 0 never settles, a revocation that only refuses new operations", true, false, 0, transfer.Quiescing, transfer.InDoubt},
		{"writer 0 never settles, no lease", false, false, 0, transfer.Quiescing, transfer.InDoubt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cohort(t, config(t, tc.leased, kv0, kv1))
			require.NoError(t, c.ExposeTo(at(1), kv0), "the address reached prefill-a")
			r := c.Cancel(at(2), "publishing to prefill-b failed")
			assert.Equal(t, transfer.Accepted, r.Logical)
			assert.False(t, r.SafeToReuse(), "writer 0 holds the address")
			if tc.doneAt > 0 {
				step(t, c, tc.doneAt, ev(transfer.Done, kv0, 64)) // writer 0's success, during the unwind
				assert.Equal(t, transfer.Cancelled{ByPeer: false, ReportsPending: true}, c.Outcome(),
					"a success during the unwind completes nothing")
			}
			assert.ErrorIs(t, c.Step(at(4), ev(transfer.Done, kv1, 64)), transfer.ErrNotExposed,
				"prefill-b was never handed the address: its word is a stray")
			require.ErrorIs(t, c.ExposeTo(at(4), kv1), transfer.ErrFenced, "nothing more is published")
			if tc.leased {
				require.NoError(t, c.Revoked(at(5), tc.fences))
			}
			c.Tick(at(200).Add(-time.Nanosecond))
			assert.Equal(t, tc.before, c.Physical(), "only the writer handed the pages is waited for")
			c.Tick(at(200))
			assert.Equal(t, tc.at, c.Physical())
			assert.IsType(t, transfer.Cancelled{}, c.Outcome())
		})
	}
}

// A-SOURCE: on the sender, its source pages are read by its own puts, and
// they return only on positive proof that every put is over
// (test_sender_retires_only_after_backend_done,
// test_sender_physical_operation_rejects_unproven_retirement,
// test_ambiguous_sender_result_retains_source_and_reports_in_doubt). An
// ambiguous answer from the backend — a wait that said "not done", a
// submission or a wait that raised after the request escaped — retains the
// source, refuses retirement, and ends in doubt, reported as such.
func TestLedgerASourceRetainedUntilProven(t *testing.T) {
	for _, tc := range []struct {
		name     string
		caps     transfer.CapabilitySet
		evidence []transfer.Evidence // the adapter's reading of the backend, at 10
		cancel   bool                // the owner gives up on the request at 20
		proven   bool
	}{
		{"the backend's DONE, sent after its own flush", transfer.KnownCapabilities,
			[]transfer.Evidence{ev(transfer.Done, put0, 64), ev(transfer.Done, put0x, 64)}, false, true},
		{"DONE without the flush promise, then the transport's completion of every put", noPerOp,
			[]transfer.Evidence{ev(transfer.Done, put0, 64), ev(transfer.Done, put0x, 64),
				ev(transfer.Quiesced, put0, 0), ev(transfer.Quiesced, put0x, 0)}, false, true},
		{"the wait said not done", transfer.KnownCapabilities, nil, true, false},
		{"the submission raised after the request escaped", transfer.KnownCapabilities,
			[]transfer.Evidence{ev(transfer.Failure, put0, 0)}, false, false},
		{"the KV wait raised; the aux put finished", transfer.KnownCapabilities,
			[]transfer.Evidence{ev(transfer.Failure, put0, 0), ev(transfer.Done, put0x, 64)}, false, false},
		{"DONE without the flush promise, and nothing more", noPerOp,
			[]transfer.Evidence{ev(transfer.Done, put0, 64), ev(transfer.Done, put0x, 64)}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := exposedTable(t, configCaps(t, false, tc.caps, put0, put0x))
			require.ErrorIs(t, s.Retire(at(5), key1), transfer.ErrNotReusable, "an unproven retirement is refused")
			give(t, s, 10, tc.evidence...)
			if tc.cancel {
				assert.False(t, s.Cancel(at(20), key1, "request aborted").SafeToReuse())
			}
			if tc.proven {
				assert.True(t, s.Poll(at(30), key1).Reusable())
				require.NoError(t, s.Retire(at(30), key1))
				require.ErrorIs(t, s.Retire(at(31), key1), transfer.ErrRetired, "retired once")
				return
			}
			for ms := 30; ms < 200; ms += 40 {
				err := s.Retire(at(ms), key1)
				require.ErrorIs(t, err, transfer.ErrNotReusable)
				assert.Contains(t, err.Error(), put0.String(), "names the read still unproven")
			}
			assert.Equal(t, transfer.InDoubt, s.Poll(at(200), key1))
			r := s.Report(at(200))
			assert.Equal(t, transfer.ShutdownResult{Physical: transfer.InDoubt, InDoubt: 1, Fatal: true, Reason: r.Reason}, r)
			assert.False(t, r.SafeToReleaseManagers())
		})
	}
}

// A-COHORT: every writer and every independent hold must settle
// (test_gen_first_no_retry_adp_count_seal_waits_for_one_writer_group,
// test_failed_receive_consensus_waits_for_every_rank_to_drain). Two ranks,
// each with a KV and an auxiliary writer; one rank's KV writer fails, as in
// the reference. In every order in which the four settle, the pages stay
// lent until the last one has, and a refused retirement names exactly those
// still unsettled; the KV writers all settled never return the pages while
// an auxiliary writer is out.
func TestLedgerACohortEveryWriterSettles(t *testing.T) {
	ids := []transfer.AccessorID{kv0, aux0, kv1, aux1}
	for _, order := range permutations(len(ids)) {
		var names []string
		for _, i := range order {
			names = append(names, ids[i].String())
		}
		t.Run(fmt.Sprint(names), func(t *testing.T) {
			s := exposedTable(t, config(t, false, ids...))
			give(t, s, 2, ev(transfer.Failure, kv1, 0))
			settled := map[transfer.AccessorID]bool{}
			for n, i := range order {
				id := ids[i]
				kind := transfer.Done
				if id == kv1 {
					kind = transfer.Quiesced // a failed writer settles only on the transport's proof
				}
				give(t, s, 10+n, ev(kind, id, 64))
				settled[id] = true
				err := s.Retire(at(10+n), key1)
				if n == len(order)-1 {
					require.NoError(t, err)
					break
				}
				require.ErrorIs(t, err, transfer.ErrNotReusable)
				var want []string
				for _, other := range ids {
					if !settled[other] {
						want = append(want, other.String())
					}
				}
				_, named, found := strings.Cut(err.Error(), "unsettled: ")
				require.True(t, found, "%v", err)
				assert.ElementsMatch(t, want, strings.Split(named, ", "), "exactly the writers still out are named")
			}
			o, _ := s.Outcome(key1)
			f, ok := o.(transfer.Failed)
			require.True(t, ok, "%v", o)
			assert.Contains(t, f.Reason, kv1.String()+" failed")
		})
	}
}

// permutations lists every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{nil}
	}
	var all [][]int
	for _, p := range permutations(n - 1) {
		for at := 0; at <= len(p); at++ {
			q := append(append(append([]int(nil), p[:at]...), n-1), p[at:]...)
			all = append(all, q)
		}
	}
	return all
}
