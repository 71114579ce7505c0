package conformance

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/kvready/kvready/contract"
)

func publishTrial(newSubject NewPublisher, tr trial, cfg config) error {
	mem := newKitMemory(tr)
	sub, err := newSubject(mem)
	if err != nil {
		return fmt.Errorf("conformance: building the backend: %w", err)
	}
	defer closeSubject(sub.Close)
	if sub.Publisher == nil {
		return errors.New("conformance: the PublishSubject needs a Publisher")
	}
	for _, u := range tr.Units {
		row, _ := mem.Row(u.Group, u.Slot)
		copy(row, u.Content)
	}
	ext, names, err := tr.extent()
	if err != nil {
		return fmt.Errorf("conformance: building the extent: %w", err)
	}
	before := mem.snapshot()
	submitted := time.Now()
	a, err := sub.Publisher.Publish(ext)
	switch {
	case a == nil && !errors.Is(err, contract.ErrSubmissionRejected):
		return violation(RuleAttemptOrError, "Publish returned no attempt and %v", err)
	case a != nil && err != nil:
		return violation(RuleAttemptOrError, "Publish returned an attempt and the error %v", err)
	case a == nil:
		if d, _ := mem.watch(before, rejectedWatch, nil); d != "" {
			return violation(RuleRejectedNoEffect, "a rejected publication wrote staging memory: %s", d)
		}
		return nil
	}
	s := newSession(a, sub.Publisher, sub.Publisher.Settle, sub.Publisher.Quiesce, mem, tr, cfg, submitted)
	if err := s.beforeOutcome(); err != nil {
		return err
	}
	if err := s.checkEarlyCompletion(); err != nil {
		return err
	}
	o, err := settle(a, sub.Publisher.Settle, cfg)
	if err != nil {
		return err
	}
	if err := s.settled(o); err != nil {
		return err
	}
	d, delivered := o.(contract.Delivered)
	if delivered {
		asked := contract.NewNameSet(names...)
		for n := range d.Served.All() {
			if !asked.Has(n) {
				return violation(RuleServedSubset, "published %s, which the extent did not hold", short(n))
			}
		}
	}
	proven, err := s.prove()
	if err != nil || !proven {
		return cmp.Or(err, s.checkCompletion(o))
	}
	if diff := mem.diff(before); diff != "" {
		return violation(RulePublishReadOnly, "%s", diff)
	}
	if err := s.afterProof(func() { poke(a, sub.Publisher.Settle, sub.Publisher.Quiesce, cfg) }); err != nil {
		return err
	}
	if o2 := a.Poll(); !sameOutcome(o, o2) {
		return violation(RuleStable, "Poll answered %v, then %v", o, o2)
	}
	if err := s.checkCompletion(o); err != nil {
		return err
	}
	if delivered && sub.Get != nil {
		for _, u := range tr.Units {
			if !d.Served.Has(u.Name) {
				continue
			}
			got, ok := sub.Get(kitExtent, u.Name)
			if !ok || string(got) != string(u.Content) {
				return violation(RulePublishedContent, "unit (%d,%d): published, but reads back %v %x; staged %x", u.Group, u.Slot, ok, got, u.Content)
			}
		}
	}
	return nil
}
