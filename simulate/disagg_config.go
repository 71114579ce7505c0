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
	// ReportRate is the chance that a writer sends a progress report after
	// each put (without a flush: a report may arrive before its data).
	ReportRate float64
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
	// Naive replaces the kvready manager — the engine lending its staging
	// slots to backend/peer's Receiver — by one that frees a request's
	// pages as soon as its transfer's outcome arrives: a DONE for every
	// writer, a failure, a lost peer, a timeout or a cancel.
	Naive bool
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
	}{{"cancel-rate", c.CancelRate}, {"report-rate", c.ReportRate}, {"lose-done", c.Faults.LoseDone},
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
