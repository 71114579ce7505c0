package simulate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvready/kvready/internal/words"
	"github.com/kvready/kvready/transfer/sim"
)

// DisaggSample is the checker's counts at one moment of a disaggregated run,
// for the report's safety plot.
type DisaggSample struct {
	At                 time.Duration // virtual time since the start
	Ended              int           // requests ended so far
	FreedWhileWritable int
	WritesIntoFree     int
	LateWrites         int
	CorruptReads       int
	// The prefill side's source slots: returned while a put may still read
	// them, and puts that carried a returned slot's sentinel.
	SourcesFreedWhileRead int
	FreedSourceReads      int
	// InFlight is the attempts whose pages are lent now, neither back nor
	// contained; InDoubt the attempts contained so far (their pages out of
	// circulation for ever), by the driver's own record.
	InFlight, InDoubt int
}

// Violations is the sample's sum of everything counted against safety.
func (s DisaggSample) Violations() int {
	return s.FreedWhileWritable + s.WritesIntoFree + s.LateWrites + s.CorruptReads + s.SourcesFreedWhileRead + s.FreedSourceReads
}

// DisaggSummary is what a disaggregated run did, by the driver's own count
// and the page checker's; nothing in it is read from a manager's state.
type DisaggSummary struct {
	// Manager is the decode side's manager, PrefillManager the prefill
	// side's (the same kind in a run of the command).
	Manager        string
	PrefillManager string
	Seed           uint64
	Config         DisaggConfig
	Virtual        time.Duration
	Wall           time.Duration
	Finished       bool // every request ended and every page back or contained
	// Interrupted: the run was stopped before it finished.
	Interrupted bool
	// Unfinished requests, and why (when the run did not finish).
	Unfinished       int
	UnfinishedReason string

	// Requests by how they ended, and the retries that led there.
	Delivered, Failed, Cancelled, Retries int
	// Refused requests were never lent: pages contained for good left no
	// room for theirs.
	Refused int
	// Attempts by outcome, as the manager saw it.
	Attempts map[string]int
	// Writers by behaviour (transfer/sim), as drawn; the honest ones are
	// the prefill side's Senders ("sender").
	Writers map[string]int
	// Restarts of prefill processes performed.
	Restarts int

	// The pool at the end: pages free, pages held by contained attempts
	// (in doubt for ever) and pages still lent (neither).
	PagesFree, PagesContained, PagesLent, AttemptsContained int
	LossExpected                                            string

	// The checker's counts: what it watched, and what it found.
	Registrations, Lends, Frees, Reads, Landings int
	// Copies are the device rows read (the kvready manager's: the engine
	// copies a delivered lease's pages into them); a corrupt one counts in
	// CorruptReads too.
	Copies                                int
	FreedWhileWritable, WritesIntoFree    int
	LateWrites, CorruptReads, DoubleLends int

	// The prefill side, by its manager's count: the Senders' shares lent
	// (Publishes), those never lent for want of slots (PublishesRefused),
	// and the publications by outcome.
	Publishes, PublishesRefused int
	Publications                map[string]int
	// The prefill side's source slots at the end (every host's), and those
	// back with their allocator.
	SourceSlots, SourceSlotsFree int
	// The checker's counts of the source slots: what it watched, and what
	// it found — slots returned while a put may still read them, puts that
	// carried a returned slot's sentinel into a page, slots lent twice or
	// returned twice.
	SourceLends, SourceFrees                                   int
	SourcesFreedWhileRead, FreedSourceReads, SourceDoubleLends int

	// Network is the simulated network's own count of what it did.
	Network sim.Stats
	// UCX is what a run over UCX did to its prefill process and what the
	// decode transport counted (nil over the simulated network).
	UCX *DisaggUCXStats `json:",omitempty"`

	Timeline []DisaggSample

	// SettleLatencies is a uniform sample (every one, up to 32768) of the
	// attempts' submit-to-settled times in virtual time: from the attempt's
	// submission to its pages back in the pool, as the manager returned them.
	// Attempts contained never settle and are not in it. Sorted.
	SettleLatencies []time.Duration
	// Settled is how many attempts settled after their submission: the
	// population SettleLatencies samples.
	Settled int
}

// Safe reports whether the checker found nothing wrong.
func (s *DisaggSummary) Safe() bool { return s.ViolationCount() == 0 }

// ViolationCount is the sum of everything the checker counted against
// safety.
func (s *DisaggSummary) ViolationCount() int {
	return s.FreedWhileWritable + s.WritesIntoFree + s.LateWrites + s.CorruptReads + s.DoubleLends +
		s.SourcesFreedWhileRead + s.FreedSourceReads + s.SourceDoubleLends
}

// Complete reports whether every request ended.
func (s *DisaggSummary) Complete() bool { return s.Unfinished == 0 }

// CapacityLost reports whether pages are missing from the decode pool, or
// source slots from the prefill side's, at the end.
func (s *DisaggSummary) CapacityLost() bool {
	return s.PagesFree < s.Config.Pages || s.SourceSlotsFree < s.SourceSlots
}

// summary builds the run's summary from the driver's and the checker's
// counts.
func (d *disaggDriver) summary(wall time.Duration, interrupted bool) *DisaggSummary {
	c := d.chk.counts()
	pre := d.pre.stats()
	s := &DisaggSummary{
		Manager: d.mgr.name(), PrefillManager: d.pre.name(), Seed: d.cfg.Seed, Config: d.cfg, Virtual: time.Duration(d.step) * DisaggStep, Wall: wall,
		Finished: d.finished(), Interrupted: interrupted, Unfinished: d.cfg.Requests - d.ended,
		Retries: d.retries, Attempts: map[string]int{}, Writers: map[string]int{}, Restarts: d.rs,
		PagesFree: d.chk.pagesFree(), LossExpected: d.cfg.LossExpected(),
		Registrations: c.Registrations, Lends: c.Lends, Frees: c.Frees, Reads: c.Reads, Copies: c.Copies, Landings: c.Landings,
		FreedWhileWritable: c.FreedWhileWritable, WritesIntoFree: c.WritesIntoFree,
		LateWrites: c.LateWrites, CorruptReads: c.CorruptReads, DoubleLends: c.DoubleLends,
		Publishes: pre.Publishes, PublishesRefused: pre.Refused, Publications: pre.Outcomes,
		SourceLends: c.SourceLends, SourceFrees: c.SourceFrees,
		SourcesFreedWhileRead: c.SourcesFreedWhileRead, FreedSourceReads: c.FreedSourceReads, SourceDoubleLends: c.SourceDoubleLends,
		Timeline:        d.timeline,
		SettleLatencies: d.settle.sorted(), Settled: d.settle.n,
	}
	s.SourceSlotsFree, s.SourceSlots = d.chk.sourcesFree()
	if d.ucx != nil {
		s.UCX = d.ucx.snapshot()
		s.SourceSlotsFree, s.SourceSlots = d.ucx.sources()
	} else {
		s.Network = d.net.Stats()
	}
	if !s.Finished {
		s.UnfinishedReason = d.why()
	}
	for k, n := range d.attempts {
		s.Attempts[k] = n
	}
	for b, n := range d.writers {
		s.Writers[b.String()] = n
	}
	if d.senders > 0 {
		s.Writers[writerSender] = d.senders
	}
	for _, r := range d.reqs {
		switch r.state {
		case dDelivered:
			s.Delivered++
		case dFailed:
			s.Failed++
		case dCancelled:
			s.Cancelled++
		case dRefused:
			s.Refused++
		}
		for _, a := range r.attempts {
			switch {
			case a.contained:
				s.AttemptsContained++
				s.PagesContained += len(a.pages)
			case a.submitted >= 0 && !a.settled:
				s.PagesLent += len(a.pages)
			}
		}
	}
	return s
}

// sample records the checker's counts each time another hundredth of the
// requests ended, and calls progress.
func (d *disaggDriver) sample(progress Progress) {
	every := max(1, d.cfg.Requests/100)
	if d.ended == int(d.lastEnd) || (d.ended/every == int(d.lastEnd)/every && d.ended != d.cfg.Requests) {
		return
	}
	d.lastEnd = int64(d.ended)
	c := d.chk.counts()
	d.timeline = append(d.timeline, DisaggSample{
		At: time.Duration(d.step) * DisaggStep, Ended: d.ended,
		FreedWhileWritable: c.FreedWhileWritable, WritesIntoFree: c.WritesIntoFree, LateWrites: c.LateWrites, CorruptReads: c.CorruptReads,
		SourcesFreedWhileRead: c.SourcesFreedWhileRead, FreedSourceReads: c.FreedSourceReads,
		InFlight: d.held, InDoubt: d.inDoubt,
	})
	if progress != nil {
		progress(d.ended, d.cfg.Requests)
	}
}

// WriteTable prints the summary as a human-readable table.
func (s *DisaggSummary) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	c := s.Config
	fmt.Fprintf(tw, "kvready simulate --disagg — manager: %s, %s, %s virtual, %s wall\n", s.managers(), words.Count(c.Requests, "request"), formatDuration(s.Virtual), formatDuration(s.Wall))
	fmt.Fprintf(tw, "%d decode pages, %d a request; deadline %s, grace %s, up to %s a request\n",
		c.Pages, c.PagesPerRequest, formatDuration(c.Deadline), formatDuration(c.Grace), words.Count(c.MaxAttempts, "attempt"))
	writers, network := s.faults()
	fmt.Fprintf(tw, "writers: %s\n", writers)
	fmt.Fprintf(tw, "network: %s\n", network)
	if c.CancelRate > 0 {
		fmt.Fprintf(tw, "users abort a request with chance %g\n", c.CancelRate)
	}
	if s.Interrupted {
		fmt.Fprintf(tw, "interrupted: the run was stopped before it finished (%d of %s ended); what follows covers the run so far\n",
			c.Requests-s.Unfinished, words.Count(c.Requests, "request"))
	}
	fmt.Fprintln(tw, "requests")
	row("delivered", s.Delivered)
	row("failed", fmt.Sprintf("%d (every attempt failed: the decode side recomputes the prompt)", s.Failed))
	row("cancelled", s.Cancelled)
	if s.Refused > 0 {
		row("refused", fmt.Sprintf("%d (never lent: pages contained for good left no room for theirs)", s.Refused))
	}
	row("retries", s.Retries)
	if s.Unfinished > 0 && !s.Interrupted {
		row("UNFINISHED", fmt.Sprintf("%d of %d: %s", s.Unfinished, c.Requests, s.UnfinishedReason))
	}
	fmt.Fprintln(tw, "attempts by outcome")
	byCount(s.Attempts, func(kind string, n int) { row(kind, n) })
	fmt.Fprintln(tw, "writers by behaviour")
	byCount(s.Writers, func(b string, n int) { row(b, n) })
	if s.UCX != nil {
		fmt.Fprintln(tw, "two processes over UCX")
		s.UCX.write(row)
	} else {
		fmt.Fprintln(tw, "network")
		n := s.Network
		row("puts landed", fmt.Sprintf("%d (%d after their registration was revoked); %d dropped, %d refused", n.Landed, n.LateLandings, n.Dropped, n.Refused))
		row("DONEs", fmt.Sprintf("%d lost, %d masked, %d duplicated, %d replayed", n.LostDone, n.MaskedDone, n.DuplicatedDone, n.ReplayedDone))
		row("late submissions", fmt.Sprintf("%d puts posted after their writer's DONE", n.LateSubmits))
		row("peer restarts", s.Restarts)
	}
	fmt.Fprintln(tw, "prefill side")
	row("shares published", fmt.Sprintf("%d by the Senders (%d never lent: no slots)", s.Publishes, s.PublishesRefused))
	row("publications", outcomeList(s.Publications))
	fmt.Fprintln(tw, "pool")
	row("pages", s.PoolVerdict())
	row("source slots", s.SourceVerdict())
	s.writeChecker(tw, row)
	return tw.Flush()
}

// writerSender names, among the writers by behaviour, the honest ones: the
// prefill side's Senders.
const writerSender = "sender"

// managers names the run's managers: one name when both sides have the
// same kind, else each side's.
func (s *DisaggSummary) managers() string {
	if s.PrefillManager == "" || s.PrefillManager == s.Manager {
		return s.Manager
	}
	return fmt.Sprintf("%s (decode), %s (prefill)", s.Manager, s.PrefillManager)
}

// outcomeList lists counts by kind, most first.
func outcomeList(m map[string]int) string {
	var parts []string
	byCount(m, func(k string, n int) { parts = append(parts, fmt.Sprintf("%d %s", n, k)) })
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// UnaskedLoss says what capacity is missing at the end that nothing in the
// run asked for — decode pages without a cause the configuration names
// (LossExpected), or the prefill side's source slots — or "" when none is.
func (s *DisaggSummary) UnaskedLoss() string {
	var what []string
	if s.PagesFree < s.Config.Pages && s.LossExpected == "" {
		what = append(what, strings.TrimPrefix(s.PoolVerdict(), "CAPACITY LOST: "))
	}
	if s.SourceSlotsFree < s.SourceSlots {
		what = append(what, "source slots: "+strings.TrimPrefix(s.SourceVerdict(), "CAPACITY LOST: "))
	}
	return strings.Join(what, "; ")
}

// SourceVerdict says whether the prefill side's source slots are all back
// with their allocator at the end.
func (s *DisaggSummary) SourceVerdict() string {
	if s.SourceSlotsFree == s.SourceSlots {
		return fmt.Sprintf("whole: all %d free at the end", s.SourceSlots)
	}
	return fmt.Sprintf("CAPACITY LOST: %d of %d free at the end", s.SourceSlotsFree, s.SourceSlots)
}

func (s *DisaggSummary) writeChecker(tw io.Writer, row func(string, any)) {
	fmt.Fprintln(tw, "independent page checker")
	copies := ""
	if s.Copies > 0 {
		copies = fmt.Sprintf(", and %d device rows they were copied into", s.Copies)
	}
	row("watched", fmt.Sprintf("%d registrations, %d lends, %d frees, %d writes landed, %d pages read as delivered%s",
		s.Registrations, s.Lends, s.Frees, s.Landings, s.Reads, copies))
	row("freed while a writer may write", fmt.Sprintf("%d%s", s.FreedWhileWritable, verdict(s.FreedWhileWritable)))
	row("writes into free pages", fmt.Sprintf("%d%s", s.WritesIntoFree, verdict(s.WritesIntoFree)))
	row("late writes into re-lent pages", fmt.Sprintf("%d%s", s.LateWrites, verdict(s.LateWrites)))
	row("corrupt pages read as delivered", fmt.Sprintf("%d of %d read%s", s.CorruptReads, s.Reads+s.Copies, verdict(s.CorruptReads)))
	row("pages lent twice or freed twice", fmt.Sprintf("%d%s", s.DoubleLends, verdict(s.DoubleLends)))
	row("watched at the source", fmt.Sprintf("%d source slots lent to the Senders, %d returned", s.SourceLends, s.SourceFrees))
	row("sources freed while a put may read", fmt.Sprintf("%d%s", s.SourcesFreedWhileRead, verdict(s.SourcesFreedWhileRead)))
	row("puts that read a freed source", fmt.Sprintf("%d%s", s.FreedSourceReads, verdict(s.FreedSourceReads)))
	row("sources lent twice or freed twice", fmt.Sprintf("%d%s", s.SourceDoubleLends, verdict(s.SourceDoubleLends)))
}

// PoolVerdict says whether the decode pool is whole at the end
// (SourceVerdict says it of the prefill side's slots).
func (s *DisaggSummary) PoolVerdict() string {
	if s.PagesFree == s.Config.Pages {
		return fmt.Sprintf("whole: all %d pages free at the end", s.Config.Pages)
	}
	what := fmt.Sprintf("%d of %d pages free; %d held by %s in doubt (contained, never reused); %d still lent",
		s.PagesFree, s.Config.Pages, s.PagesContained, words.Count(s.AttemptsContained, "attempt"), s.PagesLent)
	if s.LossExpected != "" {
		return "capacity lost, as the run asked (" + s.LossExpected + "): " + what
	}
	return "CAPACITY LOST: " + what
}

// faults lists the run's faults in flag words: the writers' and the
// network's (with the restarts and the users' cancels).
func (s *DisaggSummary) faults() (writers, network string) {
	c, f := s.Config, s.Config.Faults
	var out []string
	add := func(on bool, format string, args ...any) {
		if on {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	list := func() string {
		defer func() { out = nil }()
		if len(out) == 0 {
			return "none"
		}
		return strings.Join(out, ", ")
	}
	add(c.NeverReportsRate > 0, "never-reports %g", c.NeverReportsRate)
	add(c.FailsMidwayRate > 0, "fails-midway %g", c.FailsMidwayRate)
	add(c.SubmitsLateRate > 0, "submits-late %g", c.SubmitsLateRate)
	add(c.ReportRate > 0, "progress reports %g", c.ReportRate)
	add(true, "honest ones the prefill side's Senders %g", c.SenderRate)
	writers = list()
	add(f.LoseDone > 0, "lose-done %g", f.LoseDone)
	add(f.MaskDone > 0, "mask-done %g", f.MaskDone)
	add(f.DuplicateDone > 0, "duplicate-done %g", f.DuplicateDone)
	add(f.ReplayDone > 0, "replay-done %g", f.ReplayDone)
	add(f.ReportsOvertakeData, "reports overtake data")
	add(f.PutsOutliveSender, "puts outlive their sender")
	add(f.RevocationLeaks, "revocation leaks")
	if c.overUCX() {
		add(true, "UCX over %s between two processes, Checked mode", cmp.Or(c.UCXTransports, "tcp"))
		add(c.Restarts > 0, "the prefill process killed mid-transfer (SIGKILL) and restarted %s", words.Count(c.Restarts, "time"))
		add(c.Pauses > 0, "paused (SIGSTOP) %s for %s", words.Count(c.Pauses, "time"), formatDuration(c.PauseFor))
		return writers, list()
	}
	add(c.Restarts > 0, "%s", words.Count(c.Restarts, "peer restart"))
	return writers, list()
}

type disaggJSON struct {
	Manager            string          `json:"manager"`
	PrefillManager     string          `json:"prefill_manager"`
	Seed               uint64          `json:"seed"`
	Requests           int             `json:"requests"`
	Pages              int             `json:"pages"`
	PagesPerRequest    int             `json:"pages_per_request"`
	DeadlineUs         float64         `json:"deadline_us"`
	GraceUs            float64         `json:"grace_us"`
	VirtualUs          float64         `json:"virtual_us"`
	WallUs             float64         `json:"wall_us"`
	Interrupted        bool            `json:"interrupted"`
	Unfinished         int             `json:"unfinished"`
	Delivered          int             `json:"delivered"`
	Failed             int             `json:"failed"`
	Cancelled          int             `json:"cancelled"`
	Refused            int             `json:"refused"`
	Retries            int             `json:"retries"`
	Attempts           map[string]int  `json:"attempts"`
	Writers            map[string]int  `json:"writers"`
	Restarts           int             `json:"restarts"`
	Network            map[string]int  `json:"network"`
	Transport          string          `json:"transport"`
	UCX                *DisaggUCXStats `json:"ucx,omitempty"`
	PagesFree          int             `json:"pages_free"`
	PagesContained     int             `json:"pages_contained"`
	PagesLent          int             `json:"pages_lent"`
	AttemptsContained  int             `json:"attempts_contained"`
	LossExpected       string          `json:"loss_expected"`
	Registrations      int             `json:"registrations"`
	Lends              int             `json:"lends"`
	Frees              int             `json:"frees"`
	Reads              int             `json:"reads"`
	Copies             int             `json:"device_rows_read"`
	Landings           int             `json:"landings"`
	FreedWhileWritable int             `json:"freed_while_writable"`
	WritesIntoFree     int             `json:"writes_into_free_pages"`
	LateWrites         int             `json:"late_writes_into_relent_pages"`
	CorruptReads       int             `json:"corrupt_reads"`
	DoubleLends        int             `json:"double_lends"`
	Publishes          int             `json:"publishes"`
	PublishesRefused   int             `json:"publishes_refused"`
	Publications       map[string]int  `json:"publications"`
	SourceSlots        int             `json:"source_slots"`
	SourceSlotsFree    int             `json:"source_slots_free"`
	SourceLends        int             `json:"source_lends"`
	SourceFrees        int             `json:"source_frees"`
	SourcesFreed       int             `json:"sources_freed_while_read"`
	FreedSourceReads   int             `json:"freed_source_reads"`
	SourceDoubleLends  int             `json:"source_double_lends"`
	Violations         int             `json:"violations"`
	Safe               bool            `json:"safe"`
}

// MarshalJSON writes the summary as one flat object, durations in
// microseconds.
func (s *DisaggSummary) MarshalJSON() ([]byte, error) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	n := s.Network
	return json.Marshal(disaggJSON{
		Manager: s.Manager, PrefillManager: s.PrefillManager, Seed: s.Seed, Requests: s.Config.Requests, Pages: s.Config.Pages, PagesPerRequest: s.Config.PagesPerRequest,
		DeadlineUs: us(s.Config.Deadline), GraceUs: us(s.Config.Grace), VirtualUs: us(s.Virtual), WallUs: us(s.Wall),
		Interrupted: s.Interrupted, Unfinished: s.Unfinished,
		Delivered: s.Delivered, Failed: s.Failed, Cancelled: s.Cancelled, Refused: s.Refused, Retries: s.Retries,
		Attempts: s.Attempts, Writers: s.Writers, Restarts: s.Restarts,
		Transport: cmp.Or(s.Config.Transport, TransportSim), UCX: s.UCX,
		Network: map[string]int{
			"landed": n.Landed, "late_landings": n.LateLandings, "dropped": n.Dropped, "refused": n.Refused,
			"lost_done": n.LostDone, "masked_done": n.MaskedDone, "duplicated_done": n.DuplicatedDone,
			"replayed_done": n.ReplayedDone, "late_submits": n.LateSubmits,
		},
		PagesFree: s.PagesFree, PagesContained: s.PagesContained, PagesLent: s.PagesLent, AttemptsContained: s.AttemptsContained,
		LossExpected:  s.LossExpected,
		Registrations: s.Registrations, Lends: s.Lends, Frees: s.Frees, Reads: s.Reads, Copies: s.Copies, Landings: s.Landings,
		FreedWhileWritable: s.FreedWhileWritable, WritesIntoFree: s.WritesIntoFree, LateWrites: s.LateWrites,
		CorruptReads: s.CorruptReads, DoubleLends: s.DoubleLends,
		Publishes: s.Publishes, PublishesRefused: s.PublishesRefused, Publications: s.Publications,
		SourceSlots: s.SourceSlots, SourceSlotsFree: s.SourceSlotsFree, SourceLends: s.SourceLends, SourceFrees: s.SourceFrees,
		SourcesFreed: s.SourcesFreedWhileRead, FreedSourceReads: s.FreedSourceReads, SourceDoubleLends: s.SourceDoubleLends,
		Violations: s.ViolationCount(), Safe: s.Safe(),
	})
}
