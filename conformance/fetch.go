package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
)

// rejectedWatch is how long the kit watches memory after a submission was
// rejected: a stray goroutine would have its chance to write.
const rejectedWatch = time.Millisecond

func fetchTrial(newSubject NewFetcher, tr trial, cfg config) error {
	mem := newKitMemory(tr)
	sub, err := newSubject(mem)
	if err != nil {
		return fmt.Errorf("conformance: building the backend: %w", err)
	}
	defer closeSubject(sub.Close)
	if sub.Fetcher == nil || sub.Put == nil {
		return errors.New("conformance: the FetchSubject needs a Fetcher and Put")
	}
	anyStored := false
	for _, u := range tr.Units {
		if u.Stored {
			sub.Put(kitExtent, u.Name, u.Content)
			anyStored = true
		}
	}
	ext, names, err := tr.extent()
	if err != nil {
		return fmt.Errorf("conformance: building the extent: %w", err)
	}
	before := mem.snapshot()
	if err := checkProbe(sub.Fetcher, tr, names, cfg); err != nil {
		return err
	}
	if d := mem.diff(before); d != "" {
		return violation(RuleOutsideUntouched, "Probe wrote staging memory: %s", d)
	}

	submitted := time.Now()
	a, err := sub.Fetcher.Fetch(ext, nil)
	switch {
	case a == nil && !errors.Is(err, contract.ErrSubmissionRejected):
		return violation(RuleAttemptOrError, "Fetch returned no attempt and %v", err)
	case a != nil && err != nil:
		return violation(RuleAttemptOrError, "Fetch returned an attempt and the error %v", err)
	case a == nil:
		if d, _ := mem.watch(before, rejectedWatch, nil); d != "" {
			return violation(RuleRejectedNoEffect, "a rejected fetch wrote staging memory: %s", d)
		}
		return nil
	}
	s := newSession(a, sub.Fetcher, sub.Fetcher.Settle, sub.Fetcher.Quiesce, mem, tr, cfg, submitted)
	if err := s.beforeOutcome(); err != nil {
		return err
	}
	if err := s.checkEarlyCompletion(); err != nil {
		return err
	}
	o, err := settle(a, sub.Fetcher.Settle, cfg)
	if err != nil {
		return err
	}
	if err := s.settled(o); err != nil {
		return err
	}
	served := contract.NameSet{}
	var knownMiss error // reported last: a changed outcome is a stability break first
	switch x := o.(type) {
	case contract.Delivered:
		served = x.Served
		asked := contract.NewNameSet(names...)
		for n := range served.All() {
			if !asked.Has(n) {
				return violation(RuleServedSubset, "served %s, which the extent did not ask for", short(n))
			}
		}
	case contract.Cancelled:
		// A cancel the kit asked for may end in Cancelled, whatever the store holds.
		if !anyStored && !cfg.mayFail && (s.first == nil || x.ByPeer) {
			knownMiss = violation(RuleKnownMiss, "fetching %d names the store never had answered %v", len(names), o)
		}
	case contract.Failed:
		if !anyStored && !cfg.mayFail {
			knownMiss = violation(RuleKnownMiss, "fetching %d names the store never had answered %v", len(names), o)
		}
	}
	proven, err := s.prove()
	if err != nil || !proven {
		// Access never proven over: the memory may not be read.
		if o2 := a.Poll(); !sameOutcome(o, o2) {
			return violation(RuleStable, "Poll answered %v, then %v", o, o2)
		}
		return cmp.Or(err, s.checkCompletion(o), knownMiss)
	}
	// From the proof on, nothing may change: keep what the memory holds, then
	// take it back and watch it (a late writer gets its chance).
	after := mem.snapshot()
	err = s.afterProof(func() {
		poke(a, sub.Fetcher.Settle, sub.Fetcher.Quiesce, cfg)
		_, _, _ = sub.Fetcher.Probe(context.Background(), []byte(kitExtent), names)
	})
	if err != nil {
		return err
	}
	if o2 := a.Poll(); !sameOutcome(o, o2) {
		return violation(RuleStable, "Poll answered %v, then %v after Quiesce", o, o2)
	}
	if err := s.checkCompletion(o); err != nil {
		return err
	}
	_, delivered := o.(contract.Delivered)
	for g := range tr.Groups {
		for sl := range tr.Slots {
			row := after[g][sl*tr.SlotBytes : (sl+1)*tr.SlotBytes]
			was := before[g][sl*tr.SlotBytes : (sl+1)*tr.SlotBytes]
			u, in := tr.inExtent(g, sl)
			switch {
			case !in:
				if string(row) != string(was) {
					return violation(RuleOutsideUntouched, "slot (%d,%d), in no unit, was written: %x", g, sl, row)
				}
			case delivered && served.Has(u.Name):
				if !u.Stored || string(row) != string(u.Content) {
					return violation(RuleServedContent, "unit (%d,%d) served, holding %x; stored %v %x%s", g, sl, row, u.Stored, u.Content, accessorsOf(a, u.Name))
				}
			case delivered:
				if string(row) != string(was) {
					return violation(RuleUnservedUntouched, "unit (%d,%d) was not served but was written: %x%s", g, sl, row, accessorsOf(a, u.Name))
				}
			}
		}
	}
	return knownMiss
}

// checkProbe: hits are a subset of the probed names; "cannot answer" carries
// no hits; a failure is an error, never an empty answer that hides hits.
func checkProbe(f contract.Fetcher, tr trial, names []contract.Name, cfg config) error {
	probed := contract.NewNameSet(names...)
	check := func(ctx context.Context, what string) error {
		hits, answered, err := f.Probe(ctx, []byte(kitExtent), names)
		if err != nil {
			return nil
		}
		if !answered && hits.Len() > 0 {
			return violation(RuleProbe, "%s: not answered, yet %d hits", what, hits.Len())
		}
		for n := range hits.All() {
			if !probed.Has(n) {
				return violation(RuleProbe, "%s: hit %s was never probed", what, short(n))
			}
		}
		if answered && !cfg.mayFail {
			for _, u := range tr.Units {
				if u.Stored && !hits.Has(u.Name) {
					return violation(RuleProbe, "%s: answered without the stored name %s: a failure reported as an empty answer", what, short(u.Name))
				}
			}
		}
		return nil
	}
	if err := check(context.Background(), "Probe"); err != nil {
		return err
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return check(done, "Probe with a cancelled context")
}
