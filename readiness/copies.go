package readiness

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/kvready/kvready/gpu"
)

// The runner's copies: staging↔device copies queued on the stream in batches
// that share one recorded event, and the events polled on the owner.

// copier is the copies' state. Copies queued in one round share one event: a
// stream completes in order, so the event after the round's last copy proves
// all of them — except that a lease's next layer waits for an event after
// its previous one (rule 16), so that no layer is read later than its own
// copies land.
type copier struct {
	events  gpu.Completions[int32] // the recorded events, each naming its batch
	batches [][]layerOf            // the layers each event proves
	free    []int32                // batches to reuse
	open    int32                  // batch collecting this round's copies, or -1
	onCopy  func(int32, gpu.Status)
	// rq is the stream as a gpu.RecordQuerier, or nil: the event after a
	// round's copies is then recorded and queried under one call.
	rq      gpu.RecordQuerier
	awaited gpu.Event // the copy event the watcher was last told of
	// landed counts the layers a copy event answered (done or lost). A layer
	// landing moves no lease when it is not the last, yet a wait for that
	// layer must look again: see Engine.progress.
	landed uint64

	// Scratch, reused every round: what the device refused or lost.
	refused []copyRefusal
	failed  []copyFailure
}

type copyRefusal struct {
	h   Handle
	row int
	err error
}

type copyFailure struct {
	h     Handle
	layer int // the first layer whose copies failed
	err   error
}

// layerOf is one layer of one lease's copies, proven by its batch's event.
type layerOf struct {
	h     Handle
	layer int
}

// queueCopies queues a round's copies, layer by layer as the core marked
// them (Ready.Layers), each layer behind the owner's event where it names
// one, and adds each layer to the batch its event will prove.
func (e *Engine) queueCopies(rd *Ready) {
	failedAt := len(e.cp.failed)
	next := 0
	for _, m := range rd.Layers {
		if m.After > next && e.cp.open >= 0 {
			if b := e.cp.batches[e.cp.open]; b[len(b)-1].h == m.Lease || !m.Behind.IsZero() {
				// A lease's next layer gets its own event; so do the
				// copies queued before a wait, which would otherwise be
				// proven only once the owner's compute is done.
				e.closeBatch(failedAt)
			}
		}
		if !m.Behind.IsZero() && !e.failedCopy(m.Lease, failedAt) {
			if err := e.waitFor(m.Behind); err != nil {
				// Nothing of the layer is queued: its copies are
				// refused before they started.
				for ; next < m.After; next++ {
					e.cp.refused = append(e.cp.refused, copyRefusal{h: m.Lease, row: rd.Copies[next].Row, err: err})
				}
			}
		}
		for ; next < m.After; next++ {
			e.queueCopy(&rd.Copies[next], failedAt)
		}
		if !e.failedCopy(m.Lease, failedAt) {
			e.record(m.Lease, m.Layer)
		}
	}
}

// queueCopy queues one copy. A refusal before it started is reported as such;
// any other error leaves the copy unproven, and the lease's other copies are
// skipped.
func (e *Engine) queueCopy(c *Copy, failedAt int) {
	if e.failedCopy(c.Lease, failedAt) {
		return
	}
	var err error
	if c.ToDevice {
		err = e.stream.CopyHtoD(c.Device, c.Staging)
	} else {
		err = e.stream.CopyDtoH(c.Staging, c.Device)
	}
	switch {
	case err == nil:
	case errors.Is(err, gpu.ErrCopyRefused):
		e.cp.refused = append(e.cp.refused, copyRefusal{h: c.Lease, row: c.Row, err: err})
	default:
		e.cp.failed = append(e.cp.failed, copyFailure{h: c.Lease, layer: c.Layer, err: err})
	}
}

// waitFor puts the stream behind the owner's event (Engine.Computed checked
// that the stream can wait).
func (e *Engine) waitFor(ev gpu.Event) error {
	w, ok := e.stream.(gpu.Waiter)
	if !ok {
		return fmt.Errorf("%w: the engine's stream (%T) cannot wait for %v", gpu.ErrCopyRefused, e.stream, ev)
	}
	if err := w.Wait(ev); err != nil {
		return fmt.Errorf("%w: waiting for %v: %w", gpu.ErrCopyRefused, ev, err)
	}
	return nil
}

// failedCopy reports whether a copy of the lease failed in this round.
func (e *Engine) failedCopy(h Handle, from int) bool {
	for _, f := range e.cp.failed[from:] {
		if f.h == h {
			return true
		}
	}
	return false
}

// record adds a layer of the lease to this round's copy batch; the event
// recorded after the batch's last copy is the evidence that every one of
// them landed.
func (e *Engine) record(h Handle, layer int) {
	if e.cp.open < 0 {
		if n := len(e.cp.free); n > 0 {
			e.cp.open = e.cp.free[n-1]
			e.cp.free = e.cp.free[:n-1]
		} else {
			e.cp.batches = append(e.cp.batches, nil)
			e.cp.open = int32(len(e.cp.batches) - 1)
		}
	}
	e.cp.batches[e.cp.open] = append(e.cp.batches[e.cp.open], layerOf{h, layer})
}

// closeBatch records the event after the open batch's copies, in the middle
// of a round: a lease's next layer is about to be queued. If it cannot be
// recorded, the batch's copies are unproven: each lease's failure is
// reported with the round's others, and its later copies are skipped.
func (e *Engine) closeBatch(failedAt int) {
	idx := e.cp.open
	e.cp.open = -1
	ev, err := e.stream.Record()
	if err == nil {
		err = e.cp.events.Push(ev, idx)
	}
	if err == nil {
		return
	}
	for _, x := range e.cp.batches[idx] {
		if !e.failedCopy(x.h, failedAt) {
			e.cp.failed = append(e.cp.failed, copyFailure{h: x.h, layer: x.layer, err: fmt.Errorf("recording the event after the copies failed: %w", err)})
		}
	}
	e.recycleBatch(idx)
}

// flush records the event after this round's copies and asks the round's
// proofs (prove). It reports whether the round should go on: an event was
// recorded (the owner queries it at once: a copy may land as fast as it is
// asked) or a proof was answered on the owner.
func (e *Engine) flush() (more bool) {
	if idx := e.cp.open; idx >= 0 {
		more = true
		e.cp.open = -1
		if err := e.recordBatch(idx); err != nil {
			for i, x := range e.cp.batches[idx] {
				if firstOfLease(e.cp.batches[idx], i) {
					e.step(&Evidence{What: CopyLost, Lease: x.h, Layer: x.layer, Reason: "recording the event after the copies failed: " + err.Error()})
				}
			}
			e.recycleBatch(idx)
			e.perform()
		}
	}
	for _, sd := range e.sides {
		if sd != nil && e.prove(sd) {
			more = true
		}
	}
	return more
}

// recordBatch records the event after batch idx's copies and tracks it. A
// stream that records and queries in one call (gpu.RecordQuerier) answers it
// at once when no older event is tracked — the device is touched once a round,
// not twice — and one that resolved is handed out then, never tracked; with
// an older event pending it is tracked behind it, as events complete in order.
func (e *Engine) recordBatch(idx int32) error {
	if e.cp.rq != nil && e.cp.events.Len() == 0 {
		ev, st, err := e.cp.rq.RecordQuery()
		switch {
		case err != nil:
			return err
		case st != gpu.Pending:
			e.batchDone(idx, st)
			return nil
		}
		return e.cp.events.Push(ev, idx)
	}
	ev, err := e.stream.Record()
	if err == nil {
		err = e.cp.events.Push(ev, idx)
	}
	return err
}

func (e *Engine) recycleBatch(idx int32) {
	clear(e.cp.batches[idx])
	e.cp.batches[idx] = e.cp.batches[idx][:0]
	e.cp.free = append(e.cp.free, idx)
}

// batchDone hands a completed (or failed) event to every lease it covers.
func (e *Engine) batchDone(idx int32, st gpu.Status) {
	for i, x := range e.cp.batches[idx] {
		e.cp.landed++
		if st == gpu.Complete {
			e.step(&Evidence{What: LayerDone, Lease: x.h, Layer: x.layer})
		} else if firstOfLease(e.cp.batches[idx], i) {
			// A lease's later layers in the batch fail with its first.
			e.step(&Evidence{What: CopyLost, Lease: x.h, Layer: x.layer, Reason: "the device reported the copies' event failed"})
		}
	}
	e.recycleBatch(idx)
}

// firstOfLease reports whether batch[i] is its lease's first layer in the
// batch: a failure is reported once per lease, at its first layer.
func firstOfLease(batch []layerOf, i int) bool {
	return !slices.ContainsFunc(batch[:i], func(y layerOf) bool { return y.h == batch[i].h })
}

func (e *Engine) pollCopies() {
	if e.cp.events.Len() == 0 {
		return
	}
	if _, err := e.cp.events.Poll(e.stream, e.cp.onCopy); err != nil {
		e.cfg.Logger.Error("kvready: querying a copy event failed; the copies behind it stay unproven", slog.Any("error", err))
	}
}
