package proptest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// driver is how the model reaches an engine: the runner users embed, or the
// I/O-free core stepped by a synchronous driver written here, independently
// of the runner.
type driver interface {
	lend(readiness.Request) (readiness.Handle, error)
	release(readiness.Handle) error
	cancel(readiness.Handle) (readiness.CancelResult, error)
	retry(readiness.Handle) error
	lease(readiness.Handle) (readiness.LeaseInfo, error)
	readiness(readiness.Handle) (staging.Interval, error)
	runs(readiness.Handle) ([]staging.Run, error)
	// layerReadiness is the engine's answer for one layer of a lease;
	// waitLayer waits for it a little (WaitLayer on the runner) and says how
	// the wait ended.
	layerReadiness(h readiness.Handle, layer int) (staging.Interval, readiness.LayerStatus, error)
	waitLayer(h readiness.Handle, layer int) (staging.Interval, readiness.LayerStatus, error)
	layers() int
	// computed reports a layer of a layerwise publish computed (the zero
	// event: the layer is synchronised already).
	computed(h readiness.Handle, layer int) error
	stats() readiness.Stats
	// err is why the engine halted (wrapping ErrHalted), nil while it runs.
	err() error
	// round runs the engine. synced: until it and its goroutines are idle,
	// so that every piece of evidence made observable before it is taken in;
	// otherwise one round that may race its goroutines.
	round(synced bool) error
	close()
	drained() bool
}

// The timing of the suite: the deadline and the grace are long enough that
// the clock decides them; the Quiesce timeout is short: on the model's clock,
// its steps time calls out; in real time, a blocked or timing-out backend
// gives up soon (the runner cancels the call's context, the core driver bounds
// its inline call), and its error is an answer like any other.
const (
	requestTimeout = 3 * time.Second
	drainGrace     = 5 * time.Second
	quiesceWait    = 3 * time.Millisecond
	retryBackoff   = time.Millisecond
	maxBackoff     = 8 * time.Millisecond
	keepReleased   = 2
)

// worldConfig is what both drivers are built from.
type worldConfig struct {
	mem       *staging.Memory
	be        *adversary
	stream    gpu.Stream
	health    gpu.Health
	clock     readiness.Clock
	contained func(readiness.Containment)
	halted    func(error) // the runner's OnHalt
	// policy and outstanding are the engine's containment policy and bound
	// on outstanding submissions, drawn per case.
	policy      readiness.Policy
	outstanding int
	// probes gives the runner the adversary's non-blocking probe beside its
	// Quiesce (the core driver asks Quiesce itself).
	probes bool
	// layers is the engine's Config.Layers (nil: whole-slot copies);
	// perLayer makes the core driver record an event after each layer's
	// copies (Ready.Layers) instead of one after the round's.
	layers   [][]staging.LayerSpans
	perLayer bool
	// fetcher and publisher, if set, are the runner's backend instead of be
	// (a stack of tiers over tier doubles: tiers_model_test.go).
	fetcher   contract.Fetcher
	publisher contract.Publisher
}

// recoverEvery is the slow cadence of the Recover policy in the suite:
// quicker than the grace, so that a contained lease is asked again.
const recoverEvery = 10 * time.Millisecond

// runnerDriver is the runner users embed: readiness.Engine, its goroutines and
// real timing.
type runnerDriver struct{ eng *readiness.Engine }

func newRunnerDriver(w worldConfig) (*runnerDriver, error) {
	var fetcher contract.Fetcher = w.be
	var publisher contract.Publisher = w.be
	if w.probes {
		fetcher, publisher = probing{w.be}, probing{w.be}
	}
	if w.fetcher != nil {
		fetcher, publisher = w.fetcher, w.publisher
	}
	eng, err := readiness.New(readiness.Config{
		Memory:          w.mem,
		TokensPerBlock:  tpb,
		RequestTimeout:  requestTimeout,
		DrainGrace:      drainGrace,
		QuiesceTimeout:  quiesceWait,
		RetryBackoff:    retryBackoff,
		MaxRetryBackoff: maxBackoff,
		KeepReleased:    keepReleased,
		Logger:          discardLogger(),
		Layers:          w.layers,
		Containment:     w.policy,
		MaxOutstanding:  w.outstanding,
		RecoverEvery:    recoverEvery,
		Fetcher:         fetcher,
		Publisher:       publisher,
		Stream:          w.stream,
		Health:          w.health,
		Clock:           w.clock,
		QuiesceWorkers:  2,
		OnContainment:   w.contained,
		OnHalt:          w.halted,
	})
	if err != nil {
		return nil, err
	}
	return &runnerDriver{eng: eng}, nil
}

func (d *runnerDriver) lend(r readiness.Request) (readiness.Handle, error) { return d.eng.Lend(r) }
func (d *runnerDriver) release(h readiness.Handle) error                   { return d.eng.Release(h) }
func (d *runnerDriver) cancel(h readiness.Handle) (readiness.CancelResult, error) {
	return d.eng.Cancel(h)
}
func (d *runnerDriver) retry(h readiness.Handle) error { return d.eng.Retry(h) }
func (d *runnerDriver) lease(h readiness.Handle) (readiness.LeaseInfo, error) {
	return d.eng.Lease(h)
}
func (d *runnerDriver) readiness(h readiness.Handle) (staging.Interval, error) {
	return d.eng.Readiness(h)
}
func (d *runnerDriver) runs(h readiness.Handle) ([]staging.Run, error) { return d.eng.Runs(h, nil) }
func (d *runnerDriver) stats() readiness.Stats                         { return d.eng.Stats() }
func (d *runnerDriver) layers() int                                    { return d.eng.Layers() }
func (d *runnerDriver) err() error                                     { return d.eng.Err() }
func (d *runnerDriver) close()                                         { d.eng.Close() }
func (d *runnerDriver) drained() bool                                  { return d.eng.Report().Drained }

func (d *runnerDriver) round(synced bool) error {
	if !synced {
		d.eng.Progress()
		return nil
	}
	// Bounded: only a goroutine that never returns could hold it up.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.eng.Sync(ctx)
	return err
}

// coreDriver steps the I/O-free core on the test's goroutine: it polls every
// submitted attempt, asks Quiesce inline with a short context, queues copies
// on the stream and records one event per round, asks cancels, and reports
// each answer back through the core's one door. It shares no code with the
// runner.
type coreDriver struct {
	c        *readiness.Core
	w        worldConfig
	attempts map[readiness.Handle]contract.Attempt
	watching []readiness.Handle
	events   gpu.Completions[int]
	batches  [][]layerDone
	lost     bool
	// out holds the Quiesce calls still out: the attempt's Quiesce would
	// block, so the call is asked again each round until it would answer, or
	// until the core names it overdue (its QuiesceTimeout passed on the
	// engine's clock) and the driver cancels it, as the runner does.
	out []readiness.Handle
}

func newCoreDriver(w worldConfig) (*coreDriver, error) {
	c, err := readiness.NewCore(readiness.Config{
		Memory: w.mem, TokensPerBlock: tpb, RequestTimeout: requestTimeout, DrainGrace: drainGrace,
		QuiesceTimeout: quiesceWait, RetryBackoff: retryBackoff, MaxRetryBackoff: maxBackoff,
		KeepReleased: keepReleased, Logger: discardLogger(), Layers: w.layers,
		Containment: readiness.Policy(w.policy), MaxOutstanding: w.outstanding, RecoverEvery: recoverEvery,
		OnTransition: func(tr readiness.Transition) {
			if os.Getenv("MODEL_DEBUG") != "" {
				fmt.Printf("  %v %v -> %v (%s) at %v\n", tr.Lease, tr.From, tr.To, readiness.CauseName(tr.Cause), w.clock.Now().UnixMilli()%100000)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	c.Tick(w.clock.Now())
	return &coreDriver{c: c, w: w, attempts: map[readiness.Handle]contract.Attempt{}}, nil
}

func (d *coreDriver) lend(r readiness.Request) (readiness.Handle, error) {
	if err := d.c.Err(); err != nil {
		return readiness.Handle{}, err
	}
	if d.c.Closed() {
		return readiness.Handle{}, readiness.ErrClosed
	}
	for i, row := range r.Rows {
		if row.Group < 0 || row.Group >= d.w.mem.NumGroups() || row.Device == 0 {
			continue
		}
		if err := d.w.stream.Addressable(row.Device, d.w.mem.Group(row.Group).SlotBytes); err != nil {
			return readiness.Handle{}, fmt.Errorf("%w: row %d: %w", readiness.ErrInvalidRequest, i, err)
		}
	}
	h, err := d.c.Lend(as[readiness.Request](r))
	return readiness.HandleOf(h.Uint64()), err
}
func (d *coreDriver) release(h readiness.Handle) error { return d.c.Release(coreHandle(h)) }
func (d *coreDriver) cancel(h readiness.Handle) (readiness.CancelResult, error) {
	return d.c.Cancel(coreHandle(h))
}
func (d *coreDriver) retry(h readiness.Handle) error { return d.c.Retry(coreHandle(h)) }
func (d *coreDriver) lease(h readiness.Handle) (readiness.LeaseInfo, error) {
	info, err := d.c.Lease(coreHandle(h))
	return as[readiness.LeaseInfo](info), err
}
func (d *coreDriver) readiness(h readiness.Handle) (staging.Interval, error) {
	return d.c.Readiness(coreHandle(h))
}
func (d *coreDriver) runs(h readiness.Handle) ([]staging.Run, error) {
	return d.c.Runs(coreHandle(h), nil)
}
func (d *coreDriver) stats() readiness.Stats { s := d.c.Stats(); return as[readiness.Stats](s) }
func (d *coreDriver) layers() int            { return d.c.Layers() }

// layerDone is what an event of the core driver proves when it completes:
// one layer of a lease (per-layer events), or all its copies.
type layerDone struct {
	h     readiness.Handle
	layer int
	all   bool
}

func (d *coreDriver) err() error {
	// The model reads the halt in the runner's terms (errors.As a
	// *readiness.FatalError), as an embedder does.
	err := d.c.Err()
	var fe *readiness.FatalError
	if errors.As(err, &fe) {
		return fmt.Errorf("%w: %w", readiness.ErrHalted, &readiness.FatalError{Containment: as[readiness.Containment](fe.Containment)})
	}
	return err
}
func (d *coreDriver) drained() bool { return d.c.Drained() }
func (d *coreDriver) close() {
	d.c.Close()
	d.perform()
}

func (d *coreDriver) round(bool) error {
	d.c.Tick(d.w.clock.Now())
	d.perform()
	d.unblocked()
	d.perform()
	if lost, why := d.w.health.Lost(0); lost && !d.lost {
		d.lost = true
		_ = d.c.Step(readiness.Evidence{What: readiness.DeviceGone, Reason: why})
	}
	kept := d.watching[:0]
	for _, h := range d.watching {
		a, ok := d.attempts[h]
		if !ok {
			continue
		}
		if o := a.Poll(); o != nil {
			_ = d.c.Step(readiness.Evidence{What: readiness.PollAnswered, Lease: h, Outcome: o})
			continue
		}
		kept = append(kept, h)
	}
	d.watching = kept
	if d.events.Len() > 0 {
		_, _ = d.events.Poll(d.w.stream, func(i int, st gpu.Status) {
			for _, x := range d.batches[i] {
				if os.Getenv("MODEL_DEBUG") != "" {
					fmt.Printf("  event %d: %v %+v\n", i, st, x)
				}
				switch {
				case st != gpu.Complete:
					_ = d.c.Step(readiness.Evidence{What: readiness.CopyLost, Lease: x.h, Layer: x.layer, Reason: "the event failed"})
				case x.all:
					_ = d.c.Step(readiness.Evidence{What: readiness.CopiesDone, Lease: x.h})
				default:
					_ = d.c.Step(readiness.Evidence{What: readiness.LayerDone, Lease: x.h, Layer: x.layer})
				}
			}
			d.batches[i] = nil
		})
	}
	d.perform()
	return nil
}

// blocks reports whether the adversary's Quiesce would block on a now.
func (d *coreDriver) blocks(a contract.Attempt) bool {
	x, ok := a.(advAttempt)
	if !ok {
		return false
	}
	d.w.be.mu.Lock()
	defer d.w.be.mu.Unlock()
	return x.a.mode == quiesceTimeout || (x.a.mode == quiesceBlock && x.a.gate != nil)
}

// prove asks the backend (one adversary serves both kinds) inline, bounded by
// quiesceWait of real time, and reports the answer. A call that would block
// stays out (see out) instead of holding the test's goroutine.
func (d *coreDriver) prove(h readiness.Handle) {
	a, ok := d.attempts[h]
	if !ok {
		_ = d.c.Step(readiness.Evidence{What: readiness.QuiesceUnproven, Lease: h, Reason: "no attempt kept"})
		return
	}
	if d.blocks(a) {
		d.out = append(d.out, h)
		return
	}
	d.answer(h, a, quiesceWait)
}

// overdue cancels the call out for h, as the runner does when the core names
// it overdue: the backend sees its context end, and the answer proves nothing.
func (d *coreDriver) overdue(h readiness.Handle) {
	i := slices.Index(d.out, h)
	if i < 0 {
		return
	}
	d.out = slices.Delete(d.out, i, i+1)
	a, ok := d.attempts[h]
	if !ok {
		return
	}
	d.answer(h, a, 0)
}

// unblocked asks again every call out whose Quiesce would now answer.
func (d *coreDriver) unblocked() {
	kept := d.out[:0]
	var ready []readiness.Handle
	for _, h := range d.out {
		if a, ok := d.attempts[h]; ok && d.blocks(a) {
			kept = append(kept, h)
		} else {
			ready = append(ready, h)
		}
	}
	d.out = kept
	for _, h := range ready {
		if a, ok := d.attempts[h]; ok {
			d.answer(h, a, quiesceWait)
		}
	}
}

// answer calls Quiesce with a context of wait (0: already ended) and reports.
func (d *coreDriver) answer(h readiness.Handle, a contract.Attempt, wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	proven, err := d.w.be.Quiesce(ctx, []contract.Attempt{a})
	cancel()
	if proven && err == nil {
		_ = d.c.Step(readiness.Evidence{What: readiness.PollAnswered, Lease: h, Outcome: a.Poll()})
		_ = d.c.Step(readiness.Evidence{What: readiness.QuiesceTrue, Lease: h})
		return
	}
	reason := "false"
	if err != nil {
		reason = err.Error()
	}
	_ = d.c.Step(readiness.Evidence{What: readiness.QuiesceUnproven, Lease: h, Reason: reason})
}

// requestCancel asks the lease's attempt to stop, once, containing a panic.
func (d *coreDriver) requestCancel(h readiness.Handle) (ev readiness.Evidence) {
	ev = readiness.Evidence{What: readiness.CancelReplied, Lease: h}
	a, ok := d.attempts[h]
	if !ok {
		ev.Reason = "no attempt kept"
		return ev
	}
	defer func() {
		if p := recover(); p != nil {
			ev.Disposition, ev.Reason = 0, fmt.Sprint("RequestCancel panicked: ", p)
		}
	}()
	if disp, err := contract.RequestCancel(a); err != nil {
		ev.Reason = err.Error()
	} else {
		ev.Disposition = disp
	}
	return ev
}

// perform does what the core's Ready asks, reporting every answer, until it
// asks for nothing more; then records the round's copy event. With perLayer
// it records an event after each layer's copies instead, as Ready.Layers
// marks them.
func (d *coreDriver) perform() {
	var batch []layerDone
	for d.c.HasReady() {
		rd := d.c.Ready()
		type sub struct {
			h   readiness.Handle
			a   contract.Attempt
			err error
		}
		var subs []sub
		for _, s := range rd.Submissions {
			var a contract.Attempt
			var err error
			if s.Kind == readiness.Publish {
				a, err = d.w.be.Publish(*s.Extent)
			} else {
				a, err = d.w.be.Fetch(*s.Extent, nil)
			}
			subs = append(subs, sub{s.Lease, a, err})
		}
		type refusal struct {
			h   readiness.Handle
			row int
			err error
		}
		var refused []refusal
		type failure struct {
			layer int
			err   error
		}
		failed := map[readiness.Handle]failure{}
		next := 0
		for _, mk := range rd.Layers {
			toDevice := false // a fetch's mark: CopiesDone may report its last layer
			for ; next < mk.After; next++ {
				c := rd.Copies[next]
				toDevice = c.ToDevice
				if failed[c.Lease].err != nil {
					continue
				}
				var err error
				if c.ToDevice {
					err = d.w.stream.CopyHtoD(c.Device, c.Staging)
				} else {
					err = d.w.stream.CopyDtoH(c.Staging, c.Device)
				}
				switch {
				case err == nil:
				case errors.Is(err, gpu.ErrCopyRefused):
					refused = append(refused, refusal{c.Lease, c.Row, err})
				default:
					failed[c.Lease] = failure{c.Layer, err}
				}
			}
			switch {
			case failed[mk.Lease].err != nil:
			case !d.w.perLayer:
				// The round's one event proves the lease's layers up to
				// the last one queued in it: for a fetch, CopiesDone once
				// that is the last layer; LayerDone otherwise (a layerwise
				// publish's landings are reported per layer: the core
				// refuses CopiesDone for it).
				x := layerDone{h: mk.Lease, layer: mk.Layer, all: toDevice && mk.Layer == d.c.Layers()-1}
				if i := slices.IndexFunc(batch, func(y layerDone) bool { return y.h == mk.Lease }); i >= 0 {
					batch[i] = x
				} else {
					batch = append(batch, x)
				}
			default:
				if err := d.record([]layerDone{{h: mk.Lease, layer: mk.Layer}}); err != nil {
					failed[mk.Lease] = failure{mk.Layer, err}
				}
			}
		}
		proofs := make([]readiness.Handle, 0, len(rd.Proofs))
		for _, p := range rd.Proofs {
			proofs = append(proofs, p.Lease)
		}
		overdue := append([]readiness.Handle(nil), rd.Overdue...)
		var replies []readiness.Evidence
		for _, h := range rd.Cancels {
			replies = append(replies, d.requestCancel(h))
		}
		for _, h := range rd.Forget {
			delete(d.attempts, h)
		}
		contained := append([]readiness.Containment(nil), rd.Containments...)
		d.c.Advance()
		for _, s := range subs {
			switch {
			case s.a != nil:
				d.attempts[s.h] = s.a
				d.watching = append(d.watching, s.h)
				_ = d.c.Step(readiness.Evidence{What: readiness.SubmitAccepted, Lease: s.h})
			case errors.Is(s.err, contract.ErrSubmissionRejected):
				_ = d.c.Step(readiness.Evidence{What: readiness.SubmitRejected, Lease: s.h, Reason: s.err.Error()})
			default:
				_ = d.c.Step(readiness.Evidence{What: readiness.SubmitEscaped, Lease: s.h, Reason: fmt.Sprint(s.err)})
			}
		}
		for _, r := range refused {
			_ = d.c.Step(readiness.Evidence{What: readiness.CopyRefusedByDevice, Lease: r.h, Row: r.row, Reason: r.err.Error()})
		}
		for h, f := range failed {
			_ = d.c.Step(readiness.Evidence{What: readiness.CopyLost, Lease: h, Layer: f.layer, Reason: f.err.Error()})
		}
		for _, ev := range replies {
			_ = d.c.Step(ev)
		}
		for _, h := range overdue {
			d.overdue(h)
		}
		for _, h := range proofs {
			d.prove(h)
		}
		for _, c := range contained {
			d.w.contained(as[readiness.Containment](c))
		}
	}
	if len(batch) == 0 {
		return
	}
	if err := d.record(batch); err != nil {
		for _, x := range batch {
			_ = d.c.Step(readiness.Evidence{What: readiness.CopyLost, Lease: x.h, Reason: "recording the event failed: " + err.Error()})
		}
		d.perform()
	}
}

// record records an event after the copies queued so far, proving batch.
func (d *coreDriver) record(batch []layerDone) error {
	ev, err := d.w.stream.Record()
	if err == nil {
		d.batches = append(d.batches, batch)
		err = d.events.Push(ev, len(d.batches)-1)
	}
	return err
}

// as converts the core's vocabulary into the runner's, field by field by
// name (the core driver answers in the terms the model reads). A field the
// two do not share panics: the suite fails loudly rather than compare zeros.
func as[T any](src any) T {
	var t T
	convert(reflect.ValueOf(&t).Elem(), reflect.ValueOf(src))
	return t
}

// coreHandle is the core's name for a lease the runner's vocabulary names.
func coreHandle(h readiness.Handle) readiness.Handle { return readiness.HandleOf(h.Uint64()) }

func convert(dst, src reflect.Value) {
	if !src.IsValid() {
		panic(fmt.Sprintf("proptest: no field to convert into %v", dst.Type()))
	}
	if h, ok := src.Interface().(readiness.Handle); ok && dst.Type() == reflect.TypeFor[readiness.Handle]() {
		dst.Set(reflect.ValueOf(readiness.HandleOf(h.Uint64())))
		return
	}
	if src.Type().ConvertibleTo(dst.Type()) {
		dst.Set(src.Convert(dst.Type()))
		return
	}
	if src.Kind() != reflect.Struct || dst.Kind() != reflect.Struct {
		panic(fmt.Sprintf("proptest: cannot convert %v into %v", src.Type(), dst.Type()))
	}
	for i := range dst.NumField() {
		convert(dst.Field(i), src.FieldByName(dst.Type().Field(i).Name))
	}
}
