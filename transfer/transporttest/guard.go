package transporttest

import (
	"fmt"
	"runtime/debug"
	"time"
)

// guard runs every call to the transport on a goroutine of its own and
// waits for it at most bound, so a call that blocks fails the trial with
// the rule it broke instead of hanging the test, and a panic is a
// violation instead of a crash. One goroutine serves a whole trial: calls
// stay in order, and each call's effects happen before the kit reads them.
type guard struct {
	bound time.Duration
	calls chan func()
	done  chan any // what the call panicked with, or nil
	timer *time.Timer
	stuck string // the call that blocked: nothing more can be asked
}

func newGuard(bound time.Duration) *guard {
	g := &guard{bound: bound, calls: make(chan func()), done: make(chan any, 1), timer: time.NewTimer(time.Hour)}
	g.timer.Stop()
	go g.serve()
	return g
}

func (g *guard) serve() {
	for f := range g.calls {
		g.done <- run(f)
	}
}

func run(f func()) (p any) {
	defer func() {
		if r := recover(); r != nil {
			p = fmt.Sprintf("%v\n%s", r, debug.Stack())
		}
	}()
	f()
	return nil
}

// do runs f, naming it what, and answers a violation of rule if it did not
// return within the bound, or of RuleNoPanic if it panicked.
func (g *guard) do(what, rule string, f func()) *Violation {
	if g.stuck != "" {
		return violation(rule, "%s was not called: %s never returned", what, g.stuck)
	}
	g.calls <- f
	g.timer.Reset(g.bound)
	select {
	case p := <-g.done:
		g.timer.Stop()
		if p != nil {
			return violation(RuleNoPanic, "%s panicked: %v", what, p)
		}
		return nil
	case <-g.timer.C:
		g.stuck = what
		return violation(rule, "%s did not return within %v (the kit's hang bound, CallBound)", what, g.bound)
	}
}

// close ends the serving goroutine; one stuck in a call ends when the call
// returns, if ever.
func (g *guard) close() { close(g.calls) }
