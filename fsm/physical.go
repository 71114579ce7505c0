package fsm

import "fmt"

// Physical is a lease's physical disposition (SPEC §4 rule 19), in the words
// of the reference's transceiver lifecycle (lifecycle.py,
// PhysicalDisposition): whether anything — the backend, or a local copy — may
// still touch the lease's memory. The logical outcome (Result) says what
// happened to the transfer; the disposition says whether the memory may be
// reused, and only NotExposed and the two Quiesced dispositions say yes. It
// is read from the table's groups, the lease's marks and its result
// (PhysicalOf), never kept apart from them.
type Physical uint8

// The physical dispositions.
const (
	NotExposed      Physical = iota // nothing was ever handed the memory, and nothing touches it
	Active                          // an accessor may be touching it and its outcome is pending
	Quiescing                       // the outcome is latched; the end of an accessor's access (the backend's proof, a local copy) is awaited
	QuiescedSuccess                 // every accessor's access is proven over, after a transfer that did not fail
	QuiescedFailure                 // every accessor's access is proven over, after a transfer that failed
	InDoubt                         // an accessor's end can never be proven (contained, quarantined, a copy lost)
	// NumPhysical is the number of dispositions; it is not one.
	NumPhysical
)

var physicalInfo = [NumPhysical]struct{ name, meaning string }{
	NotExposed:      {"NOT_EXPOSED", "Nothing was ever handed the memory, and nothing touches it: reusable."},
	Active:          {"ACTIVE", "An accessor may be touching the memory and its outcome is pending: not reusable."},
	Quiescing:       {"QUIESCING", "The outcome is latched; the end of an accessor's access (the backend's proof, a local copy) is awaited: not reusable."},
	QuiescedSuccess: {"QUIESCED_SUCCESS", "Every accessor's access is proven over, after a transfer that did not fail: reusable."},
	QuiescedFailure: {"QUIESCED_FAILURE", "Every accessor's access is proven over, after a transfer that failed: reusable."},
	InDoubt:         {"IN_DOUBT", "An accessor's end can never be proven (contained, quarantined, a local copy lost): never reusable."},
}

// String returns the disposition's name as the reference spells it
// (NOT_EXPOSED … IN_DOUBT).
func (p Physical) String() string {
	if p < NumPhysical {
		return physicalInfo[p].name
	}
	return fmt.Sprintf("physical(%d)", uint8(p))
}

// Meaning says what the disposition means for the lease's memory.
func (p Physical) Meaning() string {
	if p < NumPhysical {
		return physicalInfo[p].meaning
	}
	return ""
}

// Reusable reports whether the disposition proves that the memory may be
// reused: NotExposed, QuiescedSuccess and QuiescedFailure, as the
// reference's is_reusable says.
func (p Physical) Reusable() bool {
	return p == NotExposed || p == QuiescedSuccess || p == QuiescedFailure
}

// PhysicalOf reads the physical disposition of a lease in s with marks m and
// result r. A state where the containment deadline has passed (contained,
// quarantined) or a local copy was lost (copy_unproven) is in doubt; one
// where the backend is being handed the slots (its effects submit) is
// active; one where the backend's access proof is awaited is active while
// its outcome is pending, quiescing after; one where local copies are in flight is quiescing
// once the backend was handed the slots (a fetch's copies out after the
// fence), active before (a publish's copies in); past all of them, a lease
// the backend was handed is quiesced — with success or failure as its result
// says — and one it never was is not exposed.
func (t *Table) PhysicalOf(s State, m Marks, r Result) Physical {
	switch {
	case s == Contained || s == Quarantined || s == CopyUnproven:
		return InDoubt
	case t.Exposed(s) && t.Pending(s), t.OnEntry(s).Has(Submit) || t.AtRest(s).Has(Submit):
		return Active
	case t.Exposed(s):
		return Quiescing
	case t.Copying(s) && m.Has(Exposed):
		return Quiescing
	case t.Copying(s):
		return Active
	case !m.Has(Exposed):
		return NotExposed
	case r.Failure():
		return QuiescedFailure
	}
	return QuiescedSuccess
}

// PhysicalIn returns the dispositions a lease in s can have, in their
// declared order: what docs/states.md prints. A lease carries the exposed
// mark only past a move that sets it, so each state is read with the marks
// it can be reached with.
func (t *Table) PhysicalIn(s State) []Physical {
	var seen [NumPhysical]bool
	for exposed, reachable := range t.reachWithExposure() {
		if !reachable[s] {
			continue
		}
		var m Marks
		if exposed == 1 {
			m = 1 << Exposed
		}
		for _, r := range []Result{Delivered, Failure} {
			seen[t.PhysicalOf(s, m, r)] = true
		}
	}
	var out []Physical
	for p := range NumPhysical {
		if seen[p] {
			out = append(out, p)
		}
	}
	return out
}

// reachWithExposure returns the states a lease can reach from waiting
// without the exposed mark ([0]) and with it ([1]).
func (t *Table) reachWithExposure() [2][NumStates]bool {
	var seen [2][NumStates]bool
	type at struct {
		s       State
		exposed int
	}
	seen[0][Waiting] = true
	queue := []at{{Waiting, 0}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		next := func(n State, marks Marks) {
			x := cur.exposed
			if marks.Has(Exposed) || t.marks[n].Has(Exposed) {
				x = 1
			}
			if !seen[x][n] {
				seen[x][n] = true
				queue = append(queue, at{n, x})
			}
		}
		for e := range NumEvents {
			if en := t.entries[cur.s][e]; en.Action == Move {
				next(en.Next, en.Marks)
			}
		}
		for _, c := range t.completions[cur.s] {
			next(c.Next, c.Marks)
		}
	}
	return seen
}
