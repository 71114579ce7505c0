package tiers

import "sync/atomic"

// tierCounters is what one tier did, counted as it happens.
type tierCounters struct {
	// allHit counts the units of fetches whose every unit the tier served:
	// each is handed and a hit (Stats adds it to both).
	allHit                          atomic.Uint64
	handed, hits, misses, failed    atomic.Uint64
	published, publishFailed        atomic.Uint64
	promoted, promoteFailed         atomic.Uint64
	promoteSkipped                  atomic.Uint64
	rejected, noOutcome, violations atomic.Uint64
	cancelErrors                    atomic.Uint64
}

// TierStats is what one tier did since the backend was built, in units
// (rows) unless it says otherwise.
type TierStats struct {
	// Name is the tier's.
	Name string
	// Handed counts the units fetches handed the tier; each is then a hit,
	// a miss or a failure.
	Handed uint64
	// Hits counts the units the tier served.
	Hits uint64
	// Misses counts the units the tier answered, Delivered, without serving.
	Misses uint64
	// Failed counts the units of the tier's fetches that failed, were
	// cancelled, gave no outcome or broke the contract: never misses.
	Failed uint64
	// Published counts the units publications wrote through into the tier
	// (accepted); PublishFailed those of publications it failed or cancelled.
	Published, PublishFailed uint64
	// Promoted counts the units promoted into the tier from a lower one
	// (accepted); PromoteFailed those of promotions it failed; PromoteSkipped
	// those not promoted because the lower tier's access was not proven
	// within the backend's wait, or a cancel came first.
	Promoted, PromoteFailed, PromoteSkipped uint64
	// Rejected counts the tier's submissions (fetch, publish, promotion) it
	// refused before anything escaped.
	Rejected uint64
	// NoOutcome counts the tier's attempts with no outcome within the wait.
	NoOutcome uint64
	// Violations counts the tier's breaches of the contract (a changed
	// answer, a unit it was never handed, a submission with neither an
	// attempt nor a rejection, a panic): each cost only its own attempt.
	Violations uint64
	// CancelErrors counts the tier's RequestCancel calls that erred or
	// panicked.
	CancelErrors uint64
	// Bytes and Evictions are the tier's own, when it reports them (a
	// Bytes() int64 and an Evictions() uint64 method, as backend/mem has);
	// Sized says whether it reports Bytes.
	Bytes     int64
	Sized     bool
	Evictions uint64
}

// HitRate is Hits over the units handed, 0 when none was.
func (s TierStats) HitRate() float64 {
	if s.Handed == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Handed)
}

// Stats returns each tier's counters, in tier order.
func (b *Backend) Stats() []TierStats {
	out := make([]TierStats, len(b.tiers))
	for i, t := range b.tiers {
		c := &b.stats[i]
		all := c.allHit.Load()
		s := TierStats{
			Name: t.Name, Handed: c.handed.Load() + all, Hits: c.hits.Load() + all, Misses: c.misses.Load(), Failed: c.failed.Load(),
			Published: c.published.Load(), PublishFailed: c.publishFailed.Load(),
			Promoted: c.promoted.Load(), PromoteFailed: c.promoteFailed.Load(), PromoteSkipped: c.promoteSkipped.Load(),
			Rejected: c.rejected.Load(), NoOutcome: c.noOutcome.Load(), Violations: c.violations.Load(),
			CancelErrors: c.cancelErrors.Load(),
		}
		for _, x := range []any{t.Publisher, t.Fetcher} {
			if sz, ok := x.(interface{ Bytes() int64 }); ok && !s.Sized {
				_ = guard(func() error { s.Bytes, s.Sized = sz.Bytes(), true; return nil })
			}
			if ev, ok := x.(interface{ Evictions() uint64 }); ok && s.Evictions == 0 {
				_ = guard(func() error { s.Evictions = ev.Evictions(); return nil })
			}
		}
		out[i] = s
	}
	return out
}
