package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvready/kvready/contract"
)

// probeWait bounds the Quiesce the kit asks just before a first cancel
// request: only to learn whether access was already proven over, never to
// wait for it.
const probeWait = time.Millisecond

// session is one submitted attempt under watch: when it was submitted, when
// its outcome and its proof came, the memory at an early proof, and what
// RequestCancel answered. Fetch and publish trials share it.
type session struct {
	a       contract.Attempt
	settle  func(context.Context, []contract.Attempt) error
	quiesce func(context.Context, []contract.Attempt) (bool, error)
	mem     *kitMemory
	tr      trial
	cfg     config

	submitted, outcomeAt, provenAt time.Time
	proven                         bool
	early                          [][]byte // memory when Quiesce first answered true
	earlyBeforeOutcome             bool     // and that was before the outcome was read

	// prober is the backend's non-blocking probe (nil: it has none);
	// completion records the calls of the attempt's completion callback (nil:
	// the attempt is no contract.Notifier).
	prober     contract.QuiesceProber
	completion *completion

	cancellable bool
	first       *cancelAnswer // the first RequestCancel's answer; nil before it
	// notTrueBeforeCancel: a Quiesce asked after the submission and before
	// the first RequestCancel did not answer true; cancelBeforeProof: the
	// first RequestCancel came before the proof. Both together make a write
	// after the proof a cancel request taken as the end of access.
	notTrueBeforeCancel, cancelBeforeProof bool
}

type cancelAnswer struct {
	d   contract.CancelDisposition
	err error
}

func (c cancelAnswer) String() string {
	if c.err != nil {
		return fmt.Sprintf("%v (error %v)", c.d, c.err)
	}
	return c.d.String()
}

func (c cancelAnswer) same(o cancelAnswer) bool {
	return c.d == o.d && (c.err == nil) == (o.err == nil)
}

func newSession(a contract.Attempt, backend any, settle func(context.Context, []contract.Attempt) error,
	quiesce func(context.Context, []contract.Attempt) (bool, error), mem *kitMemory, tr trial, cfg config, submitted time.Time) *session {
	_, cancellable := a.(contract.Cancellable)
	s := &session{a: a, settle: settle, quiesce: quiesce, mem: mem, tr: tr, cfg: cfg, submitted: submitted, cancellable: cancellable}
	s.prober, _ = backend.(contract.QuiesceProber)
	if n, ok := a.(contract.Notifier); ok {
		s.completion = watchCompletion(n)
	}
	return s
}

// completion records the calls of an attempt's completion callback.
type completion struct {
	mu       sync.Mutex
	calls    int
	panicked any
	first    chan struct{} // closed at the first call
}

func watchCompletion(n contract.Notifier) *completion {
	c := &completion{first: make(chan struct{})}
	func() {
		defer func() { c.panicked = recover() }()
		n.Notify(c.fire)
	}()
	return c
}

func (c *completion) fire() {
	c.mu.Lock()
	c.calls++
	first := c.calls == 1
	c.mu.Unlock()
	if first {
		close(c.first)
	}
}

func (c *completion) fired() bool {
	select {
	case <-c.first:
		return true
	default:
		return false
	}
}

// checkEarlyCompletion runs before the trial waits for the outcome: a
// completion that came already says Poll has an answer, on the kit's own
// goroutine (every call into the backend is made from it).
func (s *session) checkEarlyCompletion() error {
	if s.completion == nil || !s.completion.fired() {
		return nil
	}
	if s.a.Poll() == nil {
		return violation(RuleCompletionOnce, "the completion was called while Poll still answered no outcome")
	}
	return nil
}

// checkCompletion checks, once the trial read an outcome and watched the
// memory, that the completion came exactly once, after Poll answered.
func (s *session) checkCompletion(o contract.Outcome) error {
	c := s.completion
	if c == nil {
		return nil
	}
	if c.panicked != nil {
		return violation(RuleCompletionOnce, "Notify panicked: %v", c.panicked)
	}
	if o == nil {
		return nil
	}
	t := time.NewTimer(s.cfg.wait)
	defer t.Stop()
	select {
	case <-c.first:
	case <-t.C:
		return violation(RuleCompletionOnce, "Poll answered %v, but the completion was not called within %v", o, s.cfg.wait)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls > 1 {
		return violation(RuleCompletionOnce, "the completion was called %d times", c.calls)
	}
	return nil
}

// try asks the backend's non-blocking probe, bounded like RequestCancel: a
// call still running then, or a panic, breaks the rule that it never blocks.
func (s *session) try() (contract.Access, error) {
	type answer struct {
		a   contract.Access
		err error
	}
	r, panicked, returned := bounded(s.cfg.callBound, func() answer {
		a, err := s.prober.TryQuiesce(s.list())
		return answer{a, err}
	})
	switch {
	case !returned:
		return 0, violation(RuleProbeNeverBlocks, "TryQuiesce had not returned after %v; want it to return at once, answering unknown where only waiting would tell", s.cfg.callBound)
	case panicked != nil:
		return 0, violation(RuleProbeNeverBlocks, "TryQuiesce panicked: %v; want an answer, at once", panicked)
	case r.err != nil:
		return contract.AccessUnknown, nil // proves nothing, as Quiesce's error
	case r.a != contract.AccessUnknown && r.a != contract.AccessEnded && r.a != contract.AccessUnproven:
		return 0, violation(RuleProbeAgrees, "TryQuiesce answered %v, which is none of unknown, ended and unproven", r.a)
	}
	return r.a, nil
}

// tryFirst asks the probe before the blocking Quiesce: an answer that access
// ended is a proof like Quiesce true — the memory is watched from then on —
// and Quiesce asked right after must agree.
func (s *session) tryFirst() error {
	if s.prober == nil || s.proven {
		return nil
	}
	ans, err := s.try()
	if err != nil || ans != contract.AccessEnded {
		return err
	}
	s.markProven()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.wait)
	defer cancel()
	if ok, err := s.quiesce(ctx, s.list()); !ok || err != nil {
		return violation(RuleProbeAgrees, "TryQuiesce answered that access ended, then Quiesce answered %v, %v", ok, err)
	}
	return nil
}

// tryAfter asks the probe once access is proven over: it may not know, but it
// must never answer that access cannot be established.
func (s *session) tryAfter() error {
	if s.prober == nil {
		return nil
	}
	ans, err := s.try()
	if err == nil && ans == contract.AccessUnproven {
		return violation(RuleProbeAgrees, "access was proven over, then TryQuiesce answered unproven")
	}
	return err
}

func (s *session) list() []contract.Attempt { return []contract.Attempt{s.a} }

// markProven records the first proof, and the memory at that moment when it
// came before the outcome was read.
func (s *session) markProven() {
	if s.proven {
		return
	}
	s.proven, s.provenAt = true, time.Now()
	s.early, s.earlyBeforeOutcome = s.mem.snapshot(), s.outcomeAt.IsZero()
}

// beforeOutcome runs what a trial does between the submission and Settle: a
// cancel request (afterSubmit trials) and an early Quiesce (QuiesceFirst
// trials, and cancel trials, which ask whether the request ended access).
func (s *session) beforeOutcome() error {
	cancelled := s.tr.Cancel == cancelAfterSubmit && s.cancellable
	if cancelled {
		if err := s.firstCancel(); err != nil {
			return err
		}
	}
	if !s.tr.QuiesceFirst && !cancelled {
		return nil
	}
	if err := s.tryFirst(); err != nil {
		return err
	}
	if s.proven {
		return nil
	}
	proven, err := quiesce(s.a, s.quiesce, s.cfg)
	if err != nil {
		return err
	}
	if proven {
		s.markProven()
	}
	return nil
}

// settled records the outcome's arrival, checks the memory since an early
// proof, and runs an afterOutcome trial's cancel request; the outcome must
// survive it.
func (s *session) settled(o contract.Outcome) error {
	s.outcomeAt = time.Now()
	if err := s.checkEarly(); err != nil {
		return err
	}
	if s.tr.Cancel != cancelAfterOutcome || !s.cancellable {
		return nil
	}
	if err := s.firstCancel(); err != nil {
		return err
	}
	if o2 := s.a.Poll(); !sameOutcome(o, o2) {
		return violation(RuleStable, "Poll answered %v, then %v after RequestCancel (a request never changes an outcome already returned)", o, o2)
	}
	return nil
}

// firstCancel asks a Quiesce bounded by probeWait (unless access is proven
// already), then the first RequestCancel.
func (s *session) firstCancel() error {
	if !s.proven {
		ctx, cancel := context.WithTimeout(context.Background(), probeWait)
		ok, err := s.quiesce(ctx, s.list())
		cancel()
		if ok && err == nil {
			s.markProven()
		} else {
			s.notTrueBeforeCancel = true
		}
	}
	ans, err := requestCancel(s.a, s.cfg.callBound)
	if err != nil {
		return err
	}
	s.first, s.cancelBeforeProof = &ans, !s.proven
	return nil
}

// lateRule is the rule a write after the proof breaks: the cancel rule when
// Quiesce did not answer true before a cancel request and did after it.
func (s *session) lateRule() string {
	if s.cancelBeforeProof && s.notTrueBeforeCancel {
		return RuleCancelNotEnd
	}
	return RuleNoLateWrite
}

func (s *session) lateNote() string {
	if s.lateRule() == RuleCancelNotEnd {
		return fmt.Sprintf("; Quiesce had not answered true before RequestCancel (%v), and did after it", *s.first)
	}
	return ""
}

// checkEarly compares the memory with what it held when Quiesce first
// answered true.
func (s *session) checkEarly() error {
	if s.early == nil {
		return nil
	}
	if d := s.mem.diff(s.early); d != "" {
		when := "Quiesce answered true"
		if s.earlyBeforeOutcome {
			when = "Quiesce, asked before the outcome, answered true"
		}
		return violation(s.lateRule(), "%s; then the delivery wrote %s%s%s", when, d, s.lateNote(), s.accessorsAt(s.mem.at))
	}
	return nil
}

// prove asks Quiesce for the proof unless it came already, and checks the
// memory since an early one.
func (s *session) prove() (bool, error) {
	if err := s.tryFirst(); err != nil {
		return false, err
	}
	if !s.proven {
		proven, err := quiesce(s.a, s.quiesce, s.cfg)
		if err != nil || !proven {
			return false, err
		}
		s.markProven()
	}
	if err := s.tryAfter(); err != nil {
		return true, err
	}
	return true, s.checkEarly()
}

// observed is the backend's latency in this trial: from the submission to
// the outcome or to the proof, whichever came later.
func (s *session) observed() time.Duration {
	last := s.outcomeAt
	if s.provenAt.After(last) {
		last = s.provenAt
	}
	return max(0, last.Sub(s.submitted))
}

// afterProof takes the memory back: fresh canaries in every row, one more
// call into each of the backend's methods, then a watch of the window (see
// config.window). Then, for a Cancellable attempt, the cancel requests after
// the proof: the first one if none came before, and a second one, each
// checked around the call (no write; the same answer; Quiesce still true),
// and a last brief watch. It must be called once the caller has read what it
// needs from the memory.
func (s *session) afterProof(poke func()) error {
	want := s.mem.reuse()
	proofAge := time.Since(s.provenAt)
	poke()
	window := s.cfg.window(s.tr.Watched, s.observed())
	if d, at := s.mem.watch(want, window, func() { s.a.Poll() }); d != "" {
		return violation(s.lateRule(), "%s, about %v after Quiesce answered true (the kit had taken the memory back and watched it for %v)%s%s",
			d, (proofAge + at).Round(100*time.Microsecond), window, s.lateNote(), s.accessorsAt(s.mem.at))
	}
	if s.tr.Cancel == cancelNone || !s.cancellable {
		return nil
	}
	if s.first == nil {
		ans, err := requestCancel(s.a, s.cfg.callBound)
		if err != nil {
			return err
		}
		s.first = &ans
		if d := s.mem.diff(want); d != "" {
			return violation(RuleCancelNoNewAccess, "RequestCancel (%v), asked after Quiesce answered true, wrote %s", ans, d)
		}
		if err := s.stillProven("the first RequestCancel"); err != nil {
			return err
		}
	}
	second, err := requestCancel(s.a, s.cfg.callBound)
	if err != nil {
		return err
	}
	if !s.first.same(second) {
		return violation(RuleCancelIdempotent, "RequestCancel answered %v, then %v", *s.first, second)
	}
	if d := s.mem.diff(want); d != "" {
		return violation(RuleCancelIdempotent, "the second RequestCancel, asked after Quiesce answered true, wrote %s", d)
	}
	if err := s.stillProven("a second RequestCancel"); err != nil {
		return err
	}
	if d, at := s.mem.watch(want, s.cfg.window(false, s.observed()), func() { s.a.Poll() }); d != "" {
		return violation(RuleNoLateWrite, "%s, %v after the cancel requests that followed Quiesce answering true", d, at.Round(100*time.Microsecond))
	}
	return nil
}

// stillProven asks Quiesce again after a cancel request that followed the
// proof: it must still answer true.
func (s *session) stillProven(after string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.wait)
	defer cancel()
	ok, err := s.quiesce(ctx, s.list())
	if !ok || err != nil {
		return violation(RuleCancelKeepsProof, "Quiesce answered true, then after %s answered %v, %v", after, ok, err)
	}
	return nil
}

// requestCancel asks a to cancel, bounded by bound: a call still running
// then is reported as blocking (and left to return when it will), a panic
// as a violation too, and an answer other than the two dispositions
// (without an error) as one.
func requestCancel(a contract.Attempt, bound time.Duration) (cancelAnswer, error) {
	ans, panicked, returned := bounded(bound, func() cancelAnswer {
		d, err := contract.RequestCancel(a)
		return cancelAnswer{d: d, err: err}
	})
	switch {
	case !returned:
		return cancelAnswer{}, violation(RuleCancelNeverBlocks, "RequestCancel had not returned after %v; want it to return at once, with any blocking work run elsewhere", bound)
	case panicked != nil:
		return cancelAnswer{}, violation(RuleCancelNeverBlocks, "RequestCancel panicked: %v; want an answer, at once", panicked)
	case ans.err == nil && !ans.d.Valid():
		return cancelAnswer{}, violation(RuleCancelAnswer, "RequestCancel answered %v", ans.d)
	}
	return ans, nil
}

// bounded runs a call that must never block on a goroutine of its own and
// waits for it at most bound: returned is false if it was still running then
// (it is left to return when it will), panicked what it panicked with.
func bounded[T any](bound time.Duration, call func() T) (v T, panicked any, returned bool) {
	type result struct {
		v        T
		panicked any
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- result{panicked: p}
			}
		}()
		ch <- result{v: call()}
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, r.panicked, true
	case <-t.C:
		return v, nil, false
	}
}

// settle waits for the outcome and checks it is stable across polls.
func settle(a contract.Attempt, settleFn func(context.Context, []contract.Attempt) error, cfg config) (contract.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.wait)
	defer cancel()
	if err := settleFn(ctx, []contract.Attempt{a}); err != nil {
		return nil, violation(RuleSettle, "Settle: %v", err)
	}
	first := a.Poll()
	if first == nil {
		return nil, violation(RuleSettle, "Settle returned but Poll has no outcome")
	}
	for range 3 {
		if o := a.Poll(); !sameOutcome(first, o) {
			return nil, violation(RuleStable, "Poll answered %v, then %v", first, o)
		}
	}
	return first, nil
}

// quiesce asks, with a cancelled context first (never true), then for real,
// a few times. It reports whether access was proven over.
func quiesce(a contract.Attempt, fn func(context.Context, []contract.Attempt) (bool, error), cfg config) (bool, error) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := fn(done, []contract.Attempt{a}); ok && err == nil {
		return false, violation(RuleQuiesceCancelled, "Quiesce answered true with a cancelled context")
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.wait)
		ok, err := fn(ctx, []contract.Attempt{a})
		cancel()
		if ok && err == nil {
			return true, nil
		}
	}
	return false, nil
}

// poke calls into the backend once more through each of the attempt's
// methods: a late writer that waits for the next call gets its chance.
func poke(a contract.Attempt, settleFn func(context.Context, []contract.Attempt) error, q func(context.Context, []contract.Attempt) (bool, error), cfg config) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.wait)
	defer cancel()
	a.Poll()
	_ = settleFn(ctx, []contract.Attempt{a})
	_, _ = q(ctx, []contract.Attempt{a})
}

// sameOutcome reports whether two outcomes are the same answer.
func sameOutcome(x, y contract.Outcome) bool {
	if a, ok := x.(contract.Delivered); ok {
		b, ok := y.(contract.Delivered)
		return ok && a.Served.Equal(b.Served)
	}
	return x == y
}

func closeSubject(c func() error) {
	if c != nil {
		_ = c()
	}
}
