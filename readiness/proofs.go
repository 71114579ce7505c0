package readiness

import "github.com/kvready/kvready/contract"

// The runner's proofs: each round's Quiesce batch per backend, asked on the owner
// when the backend can answer without blocking (contract.QuiesceProber) and
// handed to its workers only when it cannot (SPEC §4 rule 14).

// proofs is the owner's bookkeeping of the access proofs it asks.
type proofs struct {
	seq    uint64 // the last Quiesce batch's sequence number
	calls  uint64 // Quiesce calls handed to workers
	probes uint64 // TryQuiesce calls asked on the owner
}

// outstandingCalls returns the Quiesce batches handed to workers and not yet
// answered.
func (e *Engine) outstandingCalls() int64 {
	var n int64
	for _, sd := range e.sides {
		if sd != nil {
			n += sd.workers.outstanding()
		}
	}
	return n
}

// ask adds a lease to this round's Quiesce batch of its backend.
func (e *Engine) ask(p Proof) {
	s, ok := e.attempts.get(uint32(p.Lease.Index()))
	if !ok {
		return // no attempt kept: the core asks only where one was returned
	}
	sd := e.sides[s.kind-1]
	if sd.round == nil {
		sd.round = sd.workers.newBatch(sd.quiesce)
	}
	sd.round.leases = append(sd.round.leases, p.Lease)
	sd.round.attempts = append(sd.round.attempts, s.a)
}

// prove asks the round's proofs of one backend on the owner when the
// backend can answer without blocking (contract.QuiesceProber), one call for
// the round's batch and, unless that proved every lease over, one per lease;
// what it cannot answer now goes to the backend's workers, to its blocking
// Quiesce. What the owner's probe answered is reported through the core's
// door at once, lease by lease: the attempt polled once more, then the
// proof (or what proved nothing).
// It reports whether anything was answered here.
func (e *Engine) prove(sd *side) (answered bool) {
	b := sd.round
	if b == nil {
		return false
	}
	sd.round = nil
	if sd.prober != nil {
		e.pf.probes++
		switch ans, reason := sd.try(b.attempts); {
		case ans == contract.AccessEnded:
			for i := range b.attempts {
				e.provenHere(b.leases[i], b.attempts[i], &sd.faults)
			}
			answered = len(b.attempts) > 0
			b.leases, b.attempts = b.leases[:0], b.attempts[:0]
		case ans == contract.AccessUnproven && len(b.attempts) == 1:
			e.step(&Evidence{What: QuiesceUnproven, Lease: b.leases[0], Reason: reason})
			answered = true
			b.leases, b.attempts = b.leases[:0], b.attempts[:0]
		case len(b.attempts) > 1:
			// Asked one by one, so that one delivery still running, or one
			// that cannot be proven, holds up none of its neighbours.
			k := 0
			for i, a := range b.attempts {
				e.pf.probes++
				switch ans, reason := sd.try(b.attempts[i : i+1]); ans {
				case contract.AccessEnded:
					e.provenHere(b.leases[i], a, &sd.faults)
					answered = true
				case contract.AccessUnproven:
					e.step(&Evidence{What: QuiesceUnproven, Lease: b.leases[i], Reason: reason})
					answered = true
				default:
					b.leases[k], b.attempts[k] = b.leases[i], a
					k++
				}
			}
			clear(b.attempts[k:])
			b.leases, b.attempts = b.leases[:k], b.attempts[:k]
		}
	}
	if len(b.leases) == 0 {
		b.pool.recycle(b)
		return true
	}
	e.pf.calls++
	e.pf.seq++
	sd.workers.hand(e.pf.seq, b)
	return answered
}

// provenHere reports a proof the owner's probe gave: the attempt polled once
// more (an answer changed after the first is caught before anything is
// copied), then the proof.
func (e *Engine) provenHere(h Handle, a contract.Attempt, faults *faultCounts) {
	var answer Evidence
	provenAnswer(&answer, h, a, faults)
	e.step(&answer)
	e.step(&Evidence{What: QuiesceTrue, Lease: h})
}
