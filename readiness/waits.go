package readiness

import (
	"context"
	"fmt"

	"github.com/kvready/kvready/staging"
)

// Waiting without blocking other callers (SPEC §4 rule 18): every public
// call holds the engine's lock, and a wait — Wait, WaitLayer, Sync,
// Shutdown — holds it only while it looks and runs a round, never while it
// sleeps. Any number of goroutines may wait on one engine at once: the one
// the wake-up reaches runs the round, and a round that moved something wakes
// the others to look again.

// waiting is what the waits share, under the engine's lock.
type waiting struct {
	// sleepers counts the waits asleep now; moved is closed, and dropped, by
	// the first round that moves something while one sleeps. A lone owner's
	// wait runs its own rounds and is never asleep when one moves, so it
	// costs no channel.
	sleepers int
	moved    chan struct{}
}

// broadcast wakes every sleeping wait to look again.
func (w *waiting) broadcast() {
	if w.sleepers > 0 && w.moved != nil {
		close(w.moved)
		w.moved = nil
	}
}

// sleep releases the engine's lock until the owner is woken (Wake), a round
// run by another caller moved something, or ctx ends, and takes it again
// before it returns ctx's error, if any. It is called with the lock held.
func (e *Engine) sleep(ctx context.Context) error {
	if e.wait.moved == nil {
		e.wait.moved = make(chan struct{})
	}
	moved := e.wait.moved
	e.wait.sleepers++
	e.mu.Unlock()
	var err error
	select {
	case <-e.wake:
	case <-moved:
	case <-ctx.Done():
		err = ctx.Err()
	}
	e.mu.Lock()
	e.wait.sleepers--
	return err
}

// WaitLayer runs rounds until layer of the fetch h is ready, and returns the
// interval it answers (vLLM's wait_for_layer_load). It returns at once, with
// an error wrapping ErrLayerFailed and naming why, when a copy of the layer
// or of an earlier one failed; with ErrNotReady when the layer will never be
// answered (the lease was quarantined, or released before its copies
// were issued); ctx's error (wrapped) if ctx ends first; ErrHalted if the engine
// halts. Other calls go on while it sleeps.
func (e *Engine) WaitLayer(ctx context.Context, h Handle, layer int) (staging.Interval, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		iv, st, err := e.core.LayerReadiness(h, layer)
		switch {
		case err != nil:
			return iv, err
		case st == LayerReady:
			return iv, nil
		case st == LayerFailed:
			info, _ := e.core.Lease(h)
			return iv, fmt.Errorf("%w: layer %d of %v: %s", ErrLayerFailed, layer, h, info.Reason)
		case st == LayerNever:
			return iv, fmt.Errorf("%w: layer %d of %v is never answered: the lease was quarantined or released before its copies were issued", ErrNotReady, layer, h)
		}
		if err := e.core.Err(); err != nil {
			return iv, err
		}
		landed := e.cp.landed
		if e.progress() > 0 || e.core.HasReady() || e.cp.landed != landed {
			continue
		}
		if err := e.sleep(ctx); err != nil {
			return iv, fmt.Errorf("readiness: waiting for layer %d of %v: %w", layer, h, err)
		}
	}
}

// Until names what Wait waits for.
type Until uint8

const (
	// UntilSettled waits until the lease can go no further without its owner:
	// readiness is answerable (logically_complete), or it was quarantined, or
	// it can never be granted. Release it then.
	UntilSettled Until = iota + 1
	// UntilReleased waits until the lease's slots are back (released) or out
	// for good (quarantined).
	UntilReleased
	// UntilGranted waits until the lease holds its staging slots (it left
	// waiting), or can never be granted: a layerwise publish takes its
	// layers (Computed) from then on.
	UntilGranted
)

// Wait runs rounds until the lease h reaches what until names, and returns
// its description; between rounds it sleeps, without holding up other
// calls, until woken (Wake) or ctx ends. It returns ctx's error (wrapped) if
// ctx ends first, ErrHalted if the engine halts, and ErrStaleHandle once h's
// record is no longer readable. Wait is how an owner blocks on a lease
// without a sleep loop; a manager with many leases runs Progress on Wake
// instead.
func (e *Engine) Wait(ctx context.Context, h Handle, until Until) (LeaseInfo, error) {
	if until != UntilSettled && until != UntilReleased && until != UntilGranted {
		return LeaseInfo{}, fmt.Errorf("readiness: Wait until %d; want UntilSettled, UntilReleased or UntilGranted", until)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		info, err := e.core.Lease(h)
		if err != nil {
			return info, err
		}
		if reached(info, until) {
			return info, nil
		}
		if err := e.core.Err(); err != nil {
			return info, err
		}
		if e.progress() > 0 || e.core.HasReady() {
			continue
		}
		if err := e.sleep(ctx); err != nil {
			return info, fmt.Errorf("readiness: waiting for %v (%v): %w", h, info.State, err)
		}
	}
}

func reached(info LeaseInfo, until Until) bool {
	switch {
	case info.State.Terminal():
		return true
	case until == UntilSettled:
		return info.State.Answerable() || info.Ungrantable
	case until == UntilGranted:
		return info.State != StateWaiting || info.Ungrantable
	}
	return false
}

// Sync runs rounds until the engine is idle: everything handed to the
// background before the call has been observed — every Quiesce call
// answered, every watched attempt polled again — and a round changes nothing.
// It waits on those goroutines, never on a backend's own timing: retries and
// deadlines later on the clock are not waited for. With a manual clock it
// makes each step of a test or simulation deterministic. It returns the number
// of moves made, or ctx's error if the background did not catch up in time (a
// Quiesce that blocks, ignoring its context, holds it up). Other calls go on
// while it waits.
func (e *Engine) Sync(ctx context.Context) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("readiness: Sync: the engine did not become idle: %w", err)
		}
		e.resweep = false
		if err := e.catchUp(ctx); err != nil {
			return total, err
		}
		n := e.progress()
		total += n
		// Calls before letters: a worker puts its letters before it counts
		// its answer, so once none is outstanding every letter is in the
		// mailbox. Read the other way round, a worker that answers between
		// the two reads leaves its letters untaken.
		if n == 0 && e.outstandingCalls() == 0 && !e.core.HasReady() && e.mail.n.Load() == 0 && !e.resweep {
			return total, nil
		}
	}
}

// catchUp waits, with the engine's lock released, until every Quiesce batch
// handed out has been answered and the watcher has swept everything handed
// to it. It is called with the lock held and returns with it held.
func (e *Engine) catchUp(ctx context.Context) error {
	synced := (<-chan struct{})(nil)
	if !e.stopped && e.watch.started {
		synced = e.watch.sync()
	}
	e.mu.Unlock()
	defer e.mu.Lock()
	// The worker that answers the last call outstanding wakes the owner
	// after counting it, so waiting on the wake-up alone never misses it.
	woke := false
	for e.outstandingCalls() > 0 {
		select {
		case <-e.wake:
			woke = true
		case <-ctx.Done():
			return fmt.Errorf("readiness: Sync: %d Quiesce calls still unanswered: %w", e.outstandingCalls(), ctx.Err())
		}
	}
	if woke {
		e.mail.ring() // keep it for the round that follows
	}
	if synced == nil {
		return nil
	}
	select {
	case <-synced:
	case <-ctx.Done():
		return fmt.Errorf("readiness: Sync: the watcher did not catch up: %w", ctx.Err())
	}
	return nil
}
