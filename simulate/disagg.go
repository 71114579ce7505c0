package simulate

import (
	"context"
	"fmt"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// disaggManager is the decode side's page manager under test: kvready, or
// the naive foil. It lends a request's pages to the attempt's writers,
// hears their evidence through the decode process's transport, and returns
// the pages to the pool when its policy says so; the driver's checker
// watches the pages.
type disaggManager interface {
	// name is the manager's name in summaries and reports.
	name() string
	// submit starts attempt a: it lends pages and hands their addresses to
	// the attempt's writers (disaggDriver.spawn). false: no pages for it
	// now, so it waits, first in line.
	submit(a *dattempt) (bool, error)
	// cancel aborts attempt a, in flight, as its user asked.
	cancel(a *dattempt)
	// round is the manager's turn after the network moved: evidence,
	// deadlines, revocations, outcomes (disaggDriver.outcome) and pages
	// returned (disaggDriver.settled).
	round() error
	// close stops the manager's goroutines, if it has any.
	close()
}

// disaggDriver runs one disaggregated run: arrivals, cancels, restarts, the
// network's steps with the checker after each, and the manager's rounds.
type disaggDriver struct {
	cfg      DisaggConfig
	work     disaggWorkload
	net      *sim.Network
	node     *sim.Node
	decode   transfer.Transport // the decode node, watched by the checker
	prefill  map[transfer.Peer]*sim.Node
	pool     []byte // the decode side's pages, one after another
	pages    [][]byte
	held     int       // attempts whose pages are lent: neither back nor contained
	inDoubt  int       // attempts contained: their pages out of circulation for ever
	settle   reservoir // submit-to-settled times of the attempts settled
	idle     bool
	chk      *pageChecker
	mgr      disaggManager
	pre      prefillSide
	offerEps map[transfer.Peer]transfer.Endpoint // the decode process's, to each prefill life, for offers to Senders
	senders  int                                 // writers that were the prefill side's Senders
	step     int64
	epoch    time.Time
	reqs     []*dreq
	queue    []*dattempt
	arrived  int
	ended    int
	restarts []drestart
	rs       int // restarts done
	writers  map[sim.Behaviour]int
	attempts map[string]int // attempts' outcomes by kind
	retries  int
	timeline []DisaggSample
	lastEnd  int64
	lost     map[lostPeer]bool // incarnations whose loss the manager was told of
	ucx      *ucxFabric        // over UCX (Transport "ucx"): the decode transport and the prefill process; nil over the simulated network
	child    *childSide        // in the prefill process of a run over UCX: its transport and the decode process it serves; nil elsewhere
}

// disaggEpoch is the virtual clock's origin.
var disaggEpoch = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// RunDisagg runs cfg — the kvready manager, or the naive one with
// cfg.Naive — and returns its summary. The error says why a run did not
// finish (the summary then covers what happened; a cancelled ctx stops the
// run early, with the summary so far); a run the checker finds unsafe is
// not an error — DisaggSummary.Safe says so.
//
// Over UCX (cfg.Transport TransportUCX) this process is the decode side and
// the prefill side is a second process: os.Executable() started with
// DisaggPrefillEnv set, whose main must then call RunDisaggPrefill (kvready's
// does); RunDisagg kills, restarts and pauses it as cfg asks, and ends and
// reaps it on every path.
func RunDisagg(ctx context.Context, cfg DisaggConfig, progress Progress) (*DisaggSummary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, err := newDisaggDriver(cfg)
	if err != nil {
		return nil, err
	}
	if d.ucx != nil {
		defer d.ucx.closeTransport()
	}
	mgr, pre, err := d.managers()
	if err != nil {
		return nil, err
	}
	s, err := d.run(ctx, mgr, pre, progress)
	if err == nil && d.ucx != nil {
		err = d.ucx.ended // the run is over, and its prefill process, ended, says how it went
	}
	return s, err
}

// managers makes the run's decode and prefill managers: kvready's, or the
// naive ones with cfg.Naive. Over UCX the prefill side is the prefill
// process, started here, whose own manager the configuration chooses.
func (d *disaggDriver) managers() (disaggManager, prefillSide, error) {
	var mgr disaggManager
	var err error
	if d.cfg.Naive {
		mgr = newNaiveDisagg(d)
	} else if mgr, err = newKvreadyDisagg(d); err != nil {
		return nil, nil, err
	}
	var pre prefillSide
	switch {
	case d.ucx != nil:
		err = d.ucx.begin()
		pre = d.ucx
	case d.cfg.Naive:
		pre, err = newNaivePrefill(d)
	default:
		pre, err = newKvreadyPrefill(d)
	}
	if err != nil {
		mgr.close()
		return nil, nil, err
	}
	return mgr, pre, nil
}

// newDisaggDriver makes the network (the decode process and the prefill
// processes), the pool and its checker.
func newDisaggDriver(cfg DisaggConfig) (*disaggDriver, error) {
	if cfg.overUCX() {
		return newUCXDriver(cfg)
	}
	net, err := sim.New(cfg.Seed, cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	node, err := net.Join(disaggDecode)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	d := &disaggDriver{cfg: cfg, work: disaggWorkload{cfg}, net: net, prefill: map[transfer.Peer]*sim.Node{}, offerEps: map[transfer.Peer]transfer.Endpoint{},
		epoch: disaggEpoch, writers: map[sim.Behaviour]int{}, attempts: map[string]int{}, lost: map[lostPeer]bool{},
		settle: newReservoir(cfg.Seed)}
	for _, p := range disaggPrefills {
		if d.prefill[p], err = net.Join(p); err != nil {
			return nil, fmt.Errorf("simulate: %w", err)
		}
	}
	d.node = node
	d.ownPool()
	return d, nil
}

// newUCXDriver makes a run over UCX: the decode process's transport (the
// prefill process starts with the managers), the pool and its checker.
func newUCXDriver(cfg DisaggConfig) (*disaggDriver, error) {
	d := &disaggDriver{cfg: cfg, work: disaggWorkload{cfg}, prefill: map[transfer.Peer]*sim.Node{}, offerEps: map[transfer.Peer]transfer.Endpoint{},
		epoch: disaggEpoch, writers: map[sim.Behaviour]int{}, attempts: map[string]int{}, lost: map[lostPeer]bool{},
		settle: newReservoir(cfg.Seed)}
	var err error
	if d.ucx, err = newUCXFabric(d); err != nil {
		return nil, err
	}
	d.ownPool()
	return d, nil
}

// ownPool makes the driver's own pool of decode pages, watched, and draws
// the restarts.
func (d *disaggDriver) ownPool() {
	d.pool = make([]byte, d.cfg.Pages*SlotBytes)
	pages := make([][]byte, d.cfg.Pages)
	for i := range pages {
		pages[i] = d.pool[i*SlotBytes : (i+1)*SlotBytes : (i+1)*SlotBytes]
	}
	d.watchPages(pages)
	d.restarts = d.work.restarts()
}

// watchPages makes the checker watch pages: the decode side's pool, which is
// the driver's own unless a manager brings its own (the engine's staging
// slots). The decode transport is watched by that checker from then on.
func (d *disaggDriver) watchPages(pages [][]byte) {
	d.pages = pages
	if d.ucx != nil {
		d.chk = newPageChecker(d.ucx.rec, pages)
		d.decode = d.chk.watch(d.ucx.transport())
		return
	}
	d.chk = newPageChecker(d.net, pages)
	d.decode = d.chk.watch(d.node)
}

// now is the virtual time of the current step.
func (d *disaggDriver) now() time.Time { return d.epoch.Add(time.Duration(d.step) * DisaggStep) }

// run drives the run to its end: every request ended, every page back in
// the pool or contained, and the network with nothing left to do — or until
// it stalls: nothing arrived, ended or came back for longer than any
// attempt can take, which only a manager holding pages for ever does.
func (d *disaggDriver) run(ctx context.Context, mgr disaggManager, pre prefillSide, progress Progress) (*DisaggSummary, error) {
	d.mgr, d.pre = mgr, pre
	defer mgr.close()
	defer pre.close()
	start := time.Now()
	stall := 4*int64(d.cfg.MaxAttempts)*(d.cfg.deadlineSteps()+d.cfg.graceSteps()) + 100_000
	var err error
	last, lastAt := d.progressMark(), int64(0)
	for {
		if d.ucx != nil || d.step%disaggRoundSteps == 0 {
			if err = d.round(progress); err != nil {
				break
			}
			if d.finished() {
				break
			}
			if mark := d.progressMark(); mark != last {
				last, lastAt = mark, d.step
			}
		}
		if d.step-lastAt > stall {
			err = fmt.Errorf("simulate: the run stalled: nothing arrived, ended or came back for %d steps: %s", stall, d.why())
			break
		}
		if ctx.Err() != nil {
			err = ctx.Err()
			break
		}
		if d.ucx != nil {
			d.ucx.step()
			continue
		}
		d.step++
		d.idle = !d.net.Step()
		d.chk.scan()
	}
	return d.summary(time.Since(start), ctx.Err() != nil), err
}

// progressMark is what moves while a run makes progress: arrivals, ended
// requests, attempts holding pages, publications holding source slots, and
// whether the network has work.
type progressMark struct {
	arrived, ended, held, publishing int
	idle                             bool
}

func (d *disaggDriver) progressMark() progressMark {
	return progressMark{d.arrived, d.ended, d.held, d.pre.pending(), d.idle}
}

// round is one of the driver's turns: restarts, arrivals and cancels due,
// the decode process's messages, the managers' rounds, then admission.
func (d *disaggDriver) round(progress Progress) error {
	if d.ucx != nil {
		if err := d.ucx.faults(); err != nil {
			return err
		}
	}
	for d.ucx == nil && d.rs < len(d.restarts) && d.restarts[d.rs].at <= d.step {
		p := d.restarts[d.rs].peer
		node, err := d.net.Restart(p)
		if err != nil {
			return fmt.Errorf("simulate: restarting %s: %w", p, err)
		}
		d.prefill[p] = node
		d.rs++
		if err := d.pre.restarted(p, node); err != nil {
			return err
		}
	}
	for d.arrived < d.cfg.Requests && int64(d.arrived)*d.cfg.arrivalSteps() <= d.step {
		r := d.work.request(d.arrived)
		d.reqs = append(d.reqs, r)
		d.enqueue(r)
		d.arrived++
	}
	d.cancels()
	if err := d.mgr.round(); err != nil {
		return err
	}
	if err := d.pre.round(); err != nil {
		return err
	}
	if err := d.admit(); err != nil {
		return err
	}
	d.sample(progress)
	return nil
}

// cancels aborts the requests whose user gave up: one waiting is
// withdrawn, one in flight is the manager's to cancel.
func (d *disaggDriver) cancels() {
	for _, r := range d.reqs {
		if r.cancelAt == 0 || r.cancelAt > d.step {
			continue
		}
		r.cancelAt = 0
		switch a := r.current(); {
		case r.state == dWaiting && a.submitted < 0:
			d.withdraw(a)
		case r.state == dInFlight:
			d.mgr.cancel(a)
		}
	}
}

// refuseWaiting ends every waiting request: the pool lost the room to lend
// their pages, and no page still lent can give it back.
func (d *disaggDriver) refuseWaiting() {
	for _, a := range d.queue {
		a.settled = true
		d.attempts[outRefused]++
		d.end(a.r, dRefused)
	}
	d.queue = nil
}

// enqueue draws r's next attempt and puts it in line for pages.
func (d *disaggDriver) enqueue(r *dreq) {
	a := d.work.attempt(r, transfer.AttemptID(len(r.attempts)+1))
	r.attempts = append(r.attempts, a)
	r.state = dWaiting
	d.queue = append(d.queue, a)
}

// withdraw ends a request whose next attempt was never submitted.
func (d *disaggDriver) withdraw(a *dattempt) {
	for i, q := range d.queue {
		if q == a {
			d.queue = append(d.queue[:i], d.queue[i+1:]...)
			break
		}
	}
	a.settled = true
	d.attempts["withdrawn"]++
	d.end(a.r, dCancelled)
}

// admit submits waiting attempts, in arrival order, while the manager has
// pages for them.
func (d *disaggDriver) admit() error {
	for len(d.queue) > 0 {
		a := d.queue[0]
		// Submitted before the manager is asked: what it reports during
		// the call (pages back at once) is then counted against it.
		a.submitted = d.step
		a.r.state = dInFlight
		d.held++
		ok, err := d.mgr.submit(a)
		if err != nil {
			return fmt.Errorf("simulate: submitting %s: %w", a.key(), err)
		}
		if !ok {
			a.submitted, a.r.state = -1, dWaiting
			d.held--
			if d.held == 0 {
				// Nothing lent can come back: containment took the room
				// for good. The waiting requests are refused, not waited
				// for for ever.
				d.refuseWaiting()
			}
			return nil
		}
		d.queue = d.queue[1:]
		for _, w := range a.writers {
			if d.sends(w) {
				if err := d.pre.publish(a, w); err != nil {
					return fmt.Errorf("simulate: publishing %s's share of %s: %w", w.id, a.key(), err)
				}
			}
		}
	}
	return nil
}
