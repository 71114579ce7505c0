package readiness

import "time"

// The runner's wake-ups: the watcher told of the oldest copy event pending,
// and a timer armed for the core's next deadline.

// wakeTimer wakes the owner at the core's next deadline.
type wakeTimer struct {
	timer Timer // nil without a TimerClock
	at    int64 // when the armed timer fires, in the core's nanoseconds (0: never armed)
}

// handOff ends a round: it tells the watcher the oldest copy event the round
// left pending — the only way an owner asleep on Wake learns that it landed
// — and arms the wake-up for the core's next deadline.
func (e *Engine) handOff() {
	if oldest, _ := e.cp.events.Oldest(); oldest != e.cp.awaited {
		e.cp.awaited = oldest
		e.watch.await(oldest)
	}
	e.armTimer()
}

// armTimer arranges a wake-up at the core's next deadline, when the clock can.
// It only ever moves the timer earlier: deadlines come and go with every
// lease, and resetting a runtime timer for each would cost more than the
// round it saves. A timer that fires with nothing due costs one idle round,
// which arms it again.
func (e *Engine) armTimer() {
	if e.tm.timer == nil {
		return
	}
	at, ok := e.core.NextDue()
	if !ok {
		return // an armed timer may fire early: one idle round
	}
	next, now := at.UnixNano(), e.core.Now().UnixNano()
	if e.tm.at > now && next >= e.tm.at {
		return // armed, not yet fired, and no later than what is due
	}
	e.tm.at = next
	e.tm.timer.Reset(time.Duration(max(next-now, 0)))
}
