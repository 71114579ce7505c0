package fsm

// State groups are derived from the compiled table, never listed by hand: the
// engine asks the table which states hold slots or are exposed, so a change to
// the declaration changes every one of its consequences at once.
type groups struct {
	holding     [NumStates]bool
	exposed     [NumStates]bool
	answerable  [NumStates]bool
	containable [NumStates]bool
	outcome     [NumStates]bool
	pending     [NumStates]bool
	copying     [NumStates]bool
}

func deriveGroups(t *Table) groups {
	var g groups
	// Slots are held from the grant until the lease is released or
	// quarantined: every state reachable from granted, less those two.
	g.holding = t.reach(Granted)
	g.holding[Released], g.holding[Quarantined] = false, false
	// Readiness is answerable once every copy landed, and stays so.
	g.answerable = t.reach(LogicallyComplete)
	for s := range NumStates {
		// The backend may touch the slots wherever its access proof is still
		// awaited: access_proven moves or is latched there.
		g.exposed[s] = t.entries[s][AccessProven].Action != Refuse
		// The containment deadline matters wherever it can move the lease.
		g.containable[s] = t.entries[s][Containment].Action == Move
		// The outcome is pending wherever the request deadline can still
		// fail the lease.
		g.pending[s] = t.entries[s][Deadline].Action == Move
		// Local copies are in flight wherever their landing moves the lease.
		g.copying[s] = t.entries[s][CopiesLanded].Action == Move
		for e := range NumEvents {
			if en := t.entries[s][e]; en.Action == Move && en.Result != NoResult && en.Next != Released {
				g.outcome[en.Next] = true
			}
		}
		for _, c := range t.completions[s] {
			if c.Result != NoResult {
				g.outcome[c.Next] = true
			}
		}
	}
	// An outcome state waits for its access proof: a lease withdrawn before
	// its submission enters the fence with its result, and is not one.
	for s := range NumStates {
		g.outcome[s] = g.outcome[s] && t.entries[s][AccessProven].Action == Move
	}
	return g
}

// reach returns the states reachable from s through moves and completions, s
// included.
func (t *Table) reach(from State) [NumStates]bool {
	var seen [NumStates]bool
	seen[from] = true
	queue := []State{from}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		next := func(n State) {
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
		for e := range NumEvents {
			if en := t.entries[s][e]; en.Action == Move {
				next(en.Next)
			}
		}
		for _, c := range t.completions[s] {
			next(c.Next)
		}
	}
	return seen
}

// Holding reports whether a lease in s holds staging slots that will return to
// the allocator: granted and after, until released or quarantined.
func (t *Table) Holding(s State) bool { return s < NumStates && t.groups.holding[s] }

// Exposed reports whether the backend may still touch a lease's slots in s:
// the states where its access proof is awaited.
func (t *Table) Exposed(s State) bool { return s < NumStates && t.groups.exposed[s] }

// Answerable reports whether readiness can be answered in s: once every local
// copy has landed, and after the release.
func (t *Table) Answerable(s State) bool { return s < NumStates && t.groups.answerable[s] }

// Containable reports whether the containment deadline can still quarantine a
// lease in s: somewhere access or a local copy may be unproven.
func (t *Table) Containable(s State) bool { return s < NumStates && t.groups.containable[s] }

// Outcome reports whether s is entered with a latched outcome: served,
// partial, missed and failed.
func (t *Table) Outcome(s State) bool { return s < NumStates && t.groups.outcome[s] }

// Pending reports whether a lease in s waits for its outcome: where the
// request deadline can still fail it.
func (t *Table) Pending(s State) bool { return s < NumStates && t.groups.pending[s] }

// Copying reports whether a lease in s may have local copies in flight:
// where their landing moves it. A lost device makes them unproven.
func (t *Table) Copying(s State) bool { return s < NumStates && t.groups.copying[s] }
