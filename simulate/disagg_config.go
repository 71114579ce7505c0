package simulate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/kvready/kvready/transfer/sim"
)

// DisaggConfig describes one disaggregated run (kvready simulate --disagg):
// requests whose KV cache the prefill processes write, peer to peer, into
// the decode process's pages over the simulated transport (transfer/sim),
// with its faults. The zero value is not valid; start from DisaggDefaults.
//
// Time is virtual: the network performs one action a step, and a step is
// DisaggStep. Durations are rounded down to whole steps.
type DisaggConfig struct {
	// Requests is the number of requests whose cache is moved.
	Requests int
	// Pages is the number of pages in the decode side's pool: the pages the
	// prefill writers write (one page is SlotBytes bytes, one block of one
	// layer group).
	Pages int
	// PagesPerRequest is the size of every request's chunk, in pages.
	PagesPerRequest int
	// Arrival is the virtual time between two requests' arrivals.
	Arrival time.Duration
	// Deadline is each attempt's deadline for an outcome, from its
	// submission: no outcome by then is Failed("timeout").
	Deadline time.Duration
	// Grace is how long after the deadline a lent page may stay unproven
	// before it is contained (in doubt for ever, never reused).
	Grace time.Duration
	// MaxAttempts is how many attempts a request gets: a failed attempt is
	// retried with new writers while attempts are left; then the decode
	// side recomputes the prompt itself (the request counts as failed).
	MaxAttempts int
	// CancelRate is the chance that a request's user aborts it, at a time
	// drawn before its first attempt's deadline.
	CancelRate float64
	// The writers' behaviours (transfer/sim): the chance that a writer
	// never sends its DONE (vLLM #46283), fails after half its puts and
	// writes on (vLLM PR #56104), or posts once more after its DONE with
	// the key it still holds (vLLM #55470). Together at most 1; the rest
	// are honest.
	NeverReportsRate, FailsMidwayRate, SubmitsLateRate float64
	// ReportRate is the chance that a scripted writer sends a progress
	// report after each put (without a flush: a report may arrive before
	// its data).
	ReportRate float64
	// SenderRate is the chance that an honest writer is the prefill side's
	// backend/peer Sender, putting from the staging slots its prefill
	// manager lends it, rather than a scripted transfer/sim writer with a
	// source of its own. The other behaviours are always scripted: an
	// honest Sender never has them.
	SenderRate float64
	// Faults are the network's: reports that overtake data, DONEs lost,
	// masked, duplicated or replayed, puts that outlive a dead sender, a
	// revocation that cannot recall what was posted.
	Faults sim.Faults
	// Restarts is how many times a prefill process is killed and started
	// again as a new incarnation, spread over the arrivals.
	Restarts int
	// Seed makes the workload, the writers and the network's choices
	// reproducible.
	Seed uint64
	// Naive replaces the kvready managers — on the decode side the engine
	// lending its staging slots to backend/peer's Receiver, on the prefill
	// side an engine per host lending its slots to backend/peer's Sender —
	// by ones that free as soon as an outcome arrives: the decode pages on
	// a DONE for every writer, a failure, a lost peer, a timeout or a
	// cancel; the source slots on the Sender's outcome, or at once when the
	// prefill process restarts.
	Naive bool

	// Transport is what carries the pages: TransportSim (or ""), the
	// simulated network above, in this process; TransportUCX, UCX between
	// two processes — this one the decode side, a prefill process it starts
	// (RunDisagg) — in Checked mode. Over UCX every writer is the prefill
	// process's Sender: the scripted behaviours, the network's faults and
	// the report rate are the simulated network's, and must be 0; the
	// faults are the prefill process's own, Restarts (SIGKILL mid-transfer,
	// then a new incarnation) and Pauses.
	Transport string
	// UCXTransports is UCX_TLS for both processes with TransportUCX: "tcp"
	// (the default when empty) or "sm" (shared memory: no dead peer is
	// reported there, so a killed prefill's sessions end at their
	// deadline).
	UCXTransports string
	// Pauses is how many times, with TransportUCX, the prefill process is
	// stopped (SIGSTOP) while a transfer is in flight, for PauseFor, then
	// continued (SIGCONT).
	Pauses   int
	PauseFor time.Duration
}

// The transports a disaggregated run's pages travel over.
const (
	TransportSim = "sim"
	TransportUCX = "ucx"
)

// overUCX reports whether the run's pages travel over UCX between two
// processes.
func (c DisaggConfig) overUCX() bool { return c.Transport == TransportUCX }

// DisaggUCXDefaults returns the configuration of a run over UCX between two
// processes: fewer requests, in wall-clock time (a step is still
// DisaggStep, now of the machine's clock), a grace the machine's
// scheduling fits in, every writer the prefill process's Sender, and one
// kill and one pause of the prefill process mid-transfer.
func DisaggUCXDefaults() DisaggConfig {
	return DisaggConfig{
		Requests:        300,
		Pages:           64,
		PagesPerRequest: 4,
		Arrival:         2 * time.Millisecond,
		Deadline:        500 * time.Millisecond,
		// A manager whose loop is starved past the grace after a deadline
		// finds its sessions in doubt and contains their pages (never reuses
		// them): 500 ms was too short for two copies of the tests at once on
		// two shared cores. 5 s costs nothing while the proofs come.
		Grace:         5 * time.Second,
		MaxAttempts:   2,
		CancelRate:    0.03,
		SenderRate:    1,
		Restarts:      1,
		Seed:          1,
		Transport:     TransportUCX,
		UCXTransports: "tcp",
		Pauses:        1,
		PauseFor:      time.Second,
	}
}

// DisaggStep is the virtual time of one network step.
const DisaggStep = time.Microsecond

// disaggRoundSteps is how many network steps pass between two of the
// managers' rounds (messages handled, deadlines applied, pages returned).
const disaggRoundSteps = 10

// DisaggDefaults returns a configuration whose run meets every fault the
// simulated network and its writers have: failing writers, writers that
// never report or submit after their DONE, lost, masked, duplicated and
// replayed DONEs, reports before data, restarted peers whose posted puts
// still land, cancels and deadlines, over revocations that fence (RDMA).
func DisaggDefaults() DisaggConfig {
	return DisaggConfig{
		Requests:         2000,
		Pages:            256,
		PagesPerRequest:  8,
		Arrival:          40 * time.Microsecond,
		Deadline:         time.Millisecond,
		Grace:            time.Millisecond,
		MaxAttempts:      2,
		CancelRate:       0.03,
		NeverReportsRate: 0.02,
		FailsMidwayRate:  0.03,
		SubmitsLateRate:  0.03,
		ReportRate:       0.5,
		SenderRate:       1,
		Faults: sim.Faults{
			ReportsOvertakeData: true,
			LoseDone:            0.02,
			MaskDone:            0.05,
			DuplicateDone:       0.03,
			ReplayDone:          0.03,
			PutsOutliveSender:   true,
		},
		Restarts: 8,
		Seed:     1,
	}
}

func (c DisaggConfig) arrivalSteps() int64  { return max(1, int64(c.Arrival/DisaggStep)) }
func (c DisaggConfig) deadlineSteps() int64 { return max(1, int64(c.Deadline/DisaggStep)) }
func (c DisaggConfig) graceSteps() int64    { return max(0, int64(c.Grace/DisaggStep)) }

// Limits of a disaggregated run: a page header holds the request in 4
// bytes, the page's index in 2 and the attempt in 1.
const (
	maxDisaggPages    = 1 << 16
	maxDisaggAttempts = 255
	maxDisaggRestarts = 10_000
)

// Validate reports every invalid field at once, each as a *FieldError named
// after its flag.
func (c DisaggConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	intIn := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(field, "%d; want %d..%d", v, lo, hi)
		}
	}
	intIn("requests", c.Requests, 1, maxRequests)
	intIn("slots", c.Pages, 1, maxDisaggPages)
	intIn("blocks", c.PagesPerRequest, 1, maxDisaggPages)
	intIn("max-attempts", c.MaxAttempts, 1, maxDisaggAttempts)
	intIn("peer-restarts", c.Restarts, 0, maxDisaggRestarts)
	if c.Pages >= 1 && c.PagesPerRequest > c.Pages {
		bad("slots", "%d pages cannot hold one request's %d; want slots >= blocks", c.Pages, c.PagesPerRequest)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"arrival", c.Arrival}, {"deadline", c.Deadline}, {"drain-grace", c.Grace}} {
		switch {
		case d.v < DisaggStep:
			bad(d.field, "%v; want at least %v, one step of the network", d.v, DisaggStep)
		case d.v > maxLatency:
			bad(d.field, "%v; want at most %v", d.v, maxLatency)
		}
	}
	errs = append(errs, c.rateErrors()...)
	errs = append(errs, c.transportErrors()...)
	return errors.Join(errs...)
}

func (c DisaggConfig) rateErrors() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	prob := func(field string, v float64) bool {
		if math.IsNaN(v) || v < 0 || v > 1 {
			bad(field, "%v; want a probability in 0..1", v)
			return false
		}
		return true
	}
	for _, p := range []struct {
		field string
		v     float64
	}{{"cancel-rate", c.CancelRate}, {"report-rate", c.ReportRate}, {"sender-rate", c.SenderRate}, {"lose-done", c.Faults.LoseDone},
		{"mask-done", c.Faults.MaskDone}, {"duplicate-done", c.Faults.DuplicateDone}, {"replay-done", c.Faults.ReplayDone}} {
		prob(p.field, p.v)
	}
	sum, ok := 0.0, true
	var named []string
	for _, p := range []struct {
		field string
		v     float64
	}{{"never-reports-rate", c.NeverReportsRate}, {"fails-midway-rate", c.FailsMidwayRate}, {"submits-late-rate", c.SubmitsLateRate}} {
		ok = prob(p.field, p.v) && ok
		if p.v > 0 {
			named = append(named, fmt.Sprintf("%s %g", p.field, p.v))
		}
		sum += p.v
	}
	if ok && sum > 1+1e-9 {
		bad("writer-rates", "%s add up to %.3f; want at most 1", strings.Join(named, " + "), sum)
	}
	if c.Faults.RevocationLeaks && c.SubmitsLateRate > 0 {
		// docs/transfers.md, "The boundary, stated": over a revocation that
		// cannot recall what was posted, nothing the receiver does stops a
		// peer that breaks the submission fence it advertised.
		bad("submits-late-rate", "%v with --revocation-leaks: a writer that posts after its DONE is stopped only by a revocation that fences, and a leaking one cannot; want 0 (docs/transfers.md, \"The boundary, stated\")", c.SubmitsLateRate)
	}
	return errs
}

// LossExpected names what in c asks for pages to be lost to containment —
// a revocation that cannot fence (then a writer that never settles keeps
// its pages in doubt for ever) — or "" when nothing does.
func (c DisaggConfig) LossExpected() string {
	if c.Faults.RevocationLeaks {
		return "--revocation-leaks"
	}
	return ""
}

// transportErrors refuses what the transport asked for cannot carry: over
// UCX, the simulated network's faults and scripted writers; over the
// simulated network, the prefill process's pauses.
func (c DisaggConfig) transportErrors() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch c.Transport {
	case "", TransportSim:
		if c.Pauses != 0 {
			bad("peer-pauses", "%d; pausing the prefill process needs one: want --transport %s, or 0", c.Pauses, TransportUCX)
		}
		if c.UCXTransports != "" {
			bad("ucx-tls", "%q; want --transport %s, or none", c.UCXTransports, TransportUCX)
		}
		return errs
	case TransportUCX:
	default:
		bad("transport", "%q; want %s or %s", c.Transport, TransportSim, TransportUCX)
		return errs
	}
	if c.UCXTransports != "" && c.UCXTransports != "tcp" && c.UCXTransports != "sm" {
		bad("ucx-tls", "%q; want tcp or sm", c.UCXTransports)
	}
	if c.Pauses < 0 || c.Pauses > maxDisaggRestarts {
		bad("peer-pauses", "%d; want 0..%d", c.Pauses, maxDisaggRestarts)
	}
	if c.Pauses > 0 && (c.PauseFor < DisaggStep || c.PauseFor > maxLatency) {
		bad("pause-for", "%v; want %v..%v", c.PauseFor, DisaggStep, maxLatency)
	}
	// Over UCX the writers are real: only the prefill process's Senders,
	// and no fault but those done to its process.
	for _, p := range []struct {
		field string
		v     float64
	}{{"never-reports-rate", c.NeverReportsRate}, {"fails-midway-rate", c.FailsMidwayRate}, {"submits-late-rate", c.SubmitsLateRate},
		{"report-rate", c.ReportRate}, {"lose-done", c.Faults.LoseDone}, {"mask-done", c.Faults.MaskDone},
		{"duplicate-done", c.Faults.DuplicateDone}, {"replay-done", c.Faults.ReplayDone}} {
		if p.v != 0 {
			bad(p.field, "%v with --transport ucx: a fault of the simulated network's scripted writers; over UCX every writer is the prefill process's Sender; want 0", p.v)
		}
	}
	if c.SenderRate != 1 {
		bad("sender-rate", "%v with --transport ucx: every writer is the prefill process's Sender; want 1", c.SenderRate)
	}
	for _, f := range []struct {
		field string
		on    bool
	}{{"reports-overtake-data", c.Faults.ReportsOvertakeData}, {"puts-outlive-sender", c.Faults.PutsOutliveSender}, {"revocation-leaks", c.Faults.RevocationLeaks}} {
		if f.on {
			bad(f.field, "set with --transport ucx: a fault of the simulated network; UCX has its own behaviour (docs/ucx.md); want it off")
		}
	}
	return errs
}
