package transfer_test

import (
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"pgregory.net/rapid"
)

// record is the test's own account of what a cohort accepted, kept apart
// from the cohort's state: what the properties are checked against.
type record struct {
	perOp    map[transfer.AccessorID]bool
	done     map[transfer.AccessorID]bool
	quiesced map[transfer.AccessorID]bool
	handed   map[transfer.AccessorID]bool // the pages were handed to it (an accepted Expose or ExposeTo)
	fenced   bool                         // a revocation that fenced was accepted
	exposed  bool
}

// TestCohortProperties drives one session with any interleaving of
// evidence — right and wrong attempts, incarnations and accessors,
// duplicates, out-of-range token ends — and of the owner's calls, with time
// moving (sometimes backwards), and checks after every input:
//   - a refused input changes nothing;
//   - the outcome's kind, once latched, never changes;
//   - the pages are reported reusable only if nothing was exposed, or a
//     fencing revocation was accepted, or every accessor they were handed
//     to gave accepted evidence that settles it (a Quiesced, or a DONE from
//     a peer that promised its flush came first) — by the test's own record;
//   - evidence from an accessor never handed the pages is refused;
//   - Delivered only when every accessor's DONE was accepted and nothing
//     ended the session first;
//   - InDoubt, once reached, stays.
func TestCohortProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		leased := rapid.Bool().Draw(rt, "leased")
		ids := []transfer.AccessorID{kv0, aux0, kv1}[:rapid.IntRange(1, 3).Draw(rt, "accessors")]
		cfg := transfer.CohortConfig{Session: transfer.SessionKey{Request: 7, Attempt: 2}, Tokens: transfer.TokenRange{Start: 0, End: 64},
			Leased: leased, Submitted: at(0), Deadline: at(100), Containment: at(200)}
		rec := record{perOp: map[transfer.AccessorID]bool{}, done: map[transfer.AccessorID]bool{}, quiesced: map[transfer.AccessorID]bool{}, handed: map[transfer.AccessorID]bool{}}
		for _, id := range ids {
			caps := transfer.KnownCapabilities
			if rapid.Bool().Draw(rt, "no per-operation quiescence") {
				caps &^= transfer.Caps(transfer.PerOperationQuiescence)
			}
			rec.perOp[id] = caps.Has(transfer.PerOperationQuiescence)
			cfg.Accessors = append(cfg.Accessors, transfer.AccessorSpec{ID: id, Agreement: agree(rt, id.Peer, incOf(id.Peer), caps)})
		}
		c, err := transfer.NewCohort(at(0), cfg)
		if err != nil {
			rt.Fatalf("config refused: %v", err)
		}
		now := 0
		var latched transfer.Outcome
		wasInDoubt := false
		for range rapid.IntRange(1, 60).Draw(rt, "inputs") {
			now += rapid.IntRange(-5, 15).Draw(rt, "time step")
			c.Tick(at(now)) // deadlines first, so a refusal is judged on an unchanged state
			before := c.Info()
			accepted, refusable := applyRandom(rt, c, at(now), cfg, ids, &rec)
			after := c.Info()
			if refusable && !accepted && !equalInfo(before, after) {
				rt.Fatalf("a refused input changed the session:\nbefore %+v\nafter  %+v", before, after)
			}
			o := c.Outcome()
			if latched != nil && (o == nil || kindOf(o) != kindOf(latched)) {
				rt.Fatalf("outcome %v changed to %v", latched, o)
			}
			if latched == nil {
				latched = o
			}
			if isDelivered(o) {
				for _, id := range ids {
					if !rec.done[id] {
						rt.Fatalf("delivered without an accepted DONE from %s", id)
					}
				}
			}
			checkReusable(rt, c, ids, &rec)
			if wasInDoubt && after.Physical != transfer.InDoubt {
				rt.Fatalf("IN_DOUBT became %v", after.Physical)
			}
			wasInDoubt = after.Physical == transfer.InDoubt
		}
	})
}

// applyRandom performs one drawn input; it reports whether the cohort
// accepted it, and whether it is an input that, refused, must change
// nothing (evidence and the owner's calls that answer an error).
func applyRandom(rt *rapid.T, c *transfer.Cohort, when time.Time, cfg transfer.CohortConfig, ids []transfer.AccessorID, rec *record) (bool, bool) {
	switch rapid.IntRange(0, 10).Draw(rt, "input") {
	case 0:
		err := c.Expose(when)
		if err == nil {
			rec.exposed = true
			for _, id := range ids {
				rec.handed[id] = true
			}
		}
		return err == nil, true
	case 10:
		id := rapid.SampledFrom(ids).Draw(rt, "exposed to")
		err := c.ExposeTo(when, id)
		if err == nil {
			rec.exposed, rec.handed[id] = true, true
		}
		return err == nil, true
	case 1:
		c.Cancel(when, "test")
		return true, false
	case 2:
		c.Fence(when)
		return true, false
	case 3:
		fences := rapid.Bool().Draw(rt, "fences")
		err := c.Revoked(when, fences)
		if err == nil && fences {
			rec.fenced = true
		}
		return err == nil, true
	case 4:
		id := rapid.SampledFrom(ids).Draw(rt, "lost accessor")
		inc := incOf(id.Peer) + transfer.Incarnation(rapid.IntRange(0, 1).Draw(rt, "other life"))
		_, err := c.PeerLost(when, id.Peer, inc, "reset")
		return err == nil, true
	}
	e := drawEvidence(rt, cfg, ids)
	err := c.Step(when, e)
	// Only evidence of this attempt, from the incarnation agreed, may settle
	// anything: the record counts nothing else, whatever the cohort says.
	current := e.Session == cfg.Session && e.Incarnation == incOf(e.Accessor.Peer)
	if err == nil && !rec.handed[e.Accessor] {
		rt.Fatalf("%v accepted from an accessor never handed the pages", e)
	}
	if err == nil && current {
		switch e.Kind {
		case transfer.Done:
			if e.TokenEnd <= cfg.Tokens.End {
				rec.done[e.Accessor] = true
			}
		case transfer.Quiesced:
			rec.quiesced[e.Accessor] = true
		}
	}
	return err == nil, true
}

func drawEvidence(rt *rapid.T, cfg transfer.CohortConfig, ids []transfer.AccessorID) transfer.Evidence {
	stranger := transfer.AccessorID{Peer: "prefill-a", Rank: 9, Role: transfer.RoleKV}
	id := rapid.SampledFrom(append([]transfer.AccessorID{stranger}, ids...)).Draw(rt, "accessor")
	e := transfer.Evidence{
		Kind:        transfer.EvidenceKind(rapid.IntRange(1, 5).Draw(rt, "kind")),
		Session:     cfg.Session,
		Accessor:    id,
		Incarnation: incOf(id.Peer),
	}
	e.Session.Attempt += transfer.AttemptID(rapid.IntRange(-1, 1).Draw(rt, "attempt offset"))
	e.Incarnation += transfer.Incarnation(rapid.IntRange(0, 1).Draw(rt, "incarnation offset"))
	if e.Kind == transfer.Report || e.Kind == transfer.Done {
		e.TokenEnd = int64(rapid.IntRange(0, 70).Draw(rt, "token_end"))
	}
	if e.Kind == transfer.Failure {
		e.Reason = "drawn"
	}
	return e
}

func checkReusable(rt *rapid.T, c *transfer.Cohort, ids []transfer.AccessorID, rec *record) {
	if !c.Physical().Reusable() || !rec.exposed || rec.fenced {
		return
	}
	for _, id := range ids {
		if rec.handed[id] && !rec.quiesced[id] && !(rec.done[id] && rec.perOp[id]) {
			rt.Fatalf("reported %v while %s gave no evidence that settles it", c.Physical(), id)
		}
	}
}

func isDelivered(o transfer.Outcome) bool {
	_, ok := o.(transfer.Delivered)
	return ok
}

func kindOf(o transfer.Outcome) string {
	switch o.(type) {
	case transfer.Delivered:
		return "delivered"
	case transfer.Failed:
		return "failed"
	case transfer.Cancelled:
		return "cancelled"
	}
	return "none"
}

func equalInfo(a, b transfer.CohortInfo) bool {
	if len(a.Accessors) != len(b.Accessors) {
		return false
	}
	for i := range a.Accessors {
		if a.Accessors[i] != b.Accessors[i] {
			return false
		}
	}
	a.Accessors, b.Accessors = nil, nil
	return a.Session == b.Session && a.Outcome == b.Outcome && a.Physical == b.Physical &&
		a.Exposed == b.Exposed && a.Fenced == b.Fenced && a.Revoked == b.Revoked &&
		a.Contained == b.Contained && a.RevokeFences == b.RevokeFences && a.Retired == b.Retired
}
