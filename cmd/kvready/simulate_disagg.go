package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/kvready/kvready/simulate"
)

// disaggFlags registers the flags that describe a disaggregated run's
// writers and network (kvready simulate --disagg), into a configuration of
// their own, and returns it.
func disaggFlags(fs *flag.FlagSet) *simulate.DisaggConfig {
	d := simulate.DisaggDefaults()
	fs.Float64Var(&d.NeverReportsRate, "never-reports-rate", d.NeverReportsRate, "with --disagg: chance a prefill writer never sends its DONE (vLLM #46283)")
	fs.Float64Var(&d.FailsMidwayRate, "fails-midway-rate", d.FailsMidwayRate, "with --disagg: chance a prefill writer reports a failure after half its puts, then writes on (vLLM PR #56104)")
	fs.Float64Var(&d.SubmitsLateRate, "submits-late-rate", d.SubmitsLateRate, "with --disagg: chance a prefill writer posts once more after its DONE, with the key it still holds (vLLM #55470)")
	fs.Float64Var(&d.ReportRate, "report-rate", d.ReportRate, "with --disagg: chance a scripted prefill writer sends a progress report after each put, without a flush (a report may arrive before its data)")
	fs.Float64Var(&d.SenderRate, "sender-rate", d.SenderRate, "with --disagg: chance an honest prefill writer is the prefill side's Sender, putting from staging slots its manager (an engine per prefill host) lends it, rather than a scripted writer")
	fs.Float64Var(&d.Faults.LoseDone, "lose-done", d.Faults.LoseDone, "with --disagg: chance a DONE is lost")
	fs.Float64Var(&d.Faults.MaskDone, "mask-done", d.Faults.MaskDone, "with --disagg: chance a DONE is withheld 1 to 64 network steps")
	fs.Float64Var(&d.Faults.DuplicateDone, "duplicate-done", d.Faults.DuplicateDone, "with --disagg: chance a DONE is delivered twice")
	fs.Float64Var(&d.Faults.ReplayDone, "replay-done", d.Faults.ReplayDone, "with --disagg: chance a DONE is delivered again 64 to 512 steps later, after its session is over")
	fs.BoolVar(&d.Faults.ReportsOvertakeData, "reports-overtake-data", d.Faults.ReportsOvertakeData, "with --disagg: a message may arrive before the puts posted before it land")
	fs.BoolVar(&d.Faults.PutsOutliveSender, "puts-outlive-sender", d.Faults.PutsOutliveSender, "with --disagg: a dead prefill process's posted puts still land")
	fs.BoolVar(&d.Faults.RevocationLeaks, "revocation-leaks", d.Faults.RevocationLeaks, "with --disagg: revoking a registration refuses new puts but cannot stop posted ones (shared memory); pages whose writers never settle are then contained")
	fs.IntVar(&d.Restarts, "peer-restarts", d.Restarts, "with --disagg: how many times a prefill process is killed and started again as a new incarnation, spread over the run")
	fs.IntVar(&d.MaxAttempts, "max-attempts", d.MaxAttempts, "with --disagg: attempts per request (a failed attempt is retried with new writers; after the last the decode side recomputes)")
	u := simulate.DisaggUCXDefaults()
	fs.StringVar(&d.Transport, "transport", simulate.TransportSim, "with --disagg: what carries the pages: sim, the simulated network in this process; ucx, UCX (Checked mode) between this process, the decode side, and a prefill process it starts, kills (--peer-restarts: SIGKILL mid-transfer, then a new incarnation) and pauses (--peer-pauses). With ucx the run is on the machine's clock and its defaults differ (see below); every writer is the prefill process's Sender, so the simulated network's faults and scripted writers must be off")
	fs.StringVar(&d.UCXTransports, "ucx-tls", "", "with --disagg --transport ucx: UCX_TLS of both processes, tcp or sm (shared memory, where no dead peer is reported); default tcp")
	fs.IntVar(&d.Pauses, "peer-pauses", 0, fmt.Sprintf("with --disagg --transport ucx: how many times the prefill process is paused (SIGSTOP) mid-transfer for --pause-for, then continued (SIGCONT); default %d there", u.Pauses))
	fs.DurationVar(&d.PauseFor, "pause-for", u.PauseFor, "with --disagg --transport ucx: how long each pause lasts")
	return &d
}

// disaggGiven copies a flag of a disaggregated run's own from the values the
// command line parsed into the configuration a run over UCX starts from.
var disaggGiven = map[string]func(dst, src *simulate.DisaggConfig){
	"never-reports-rate":    func(d, s *simulate.DisaggConfig) { d.NeverReportsRate = s.NeverReportsRate },
	"fails-midway-rate":     func(d, s *simulate.DisaggConfig) { d.FailsMidwayRate = s.FailsMidwayRate },
	"submits-late-rate":     func(d, s *simulate.DisaggConfig) { d.SubmitsLateRate = s.SubmitsLateRate },
	"report-rate":           func(d, s *simulate.DisaggConfig) { d.ReportRate = s.ReportRate },
	"sender-rate":           func(d, s *simulate.DisaggConfig) { d.SenderRate = s.SenderRate },
	"lose-done":             func(d, s *simulate.DisaggConfig) { d.Faults.LoseDone = s.Faults.LoseDone },
	"mask-done":             func(d, s *simulate.DisaggConfig) { d.Faults.MaskDone = s.Faults.MaskDone },
	"duplicate-done":        func(d, s *simulate.DisaggConfig) { d.Faults.DuplicateDone = s.Faults.DuplicateDone },
	"replay-done":           func(d, s *simulate.DisaggConfig) { d.Faults.ReplayDone = s.Faults.ReplayDone },
	"reports-overtake-data": func(d, s *simulate.DisaggConfig) { d.Faults.ReportsOvertakeData = s.Faults.ReportsOvertakeData },
	"puts-outlive-sender":   func(d, s *simulate.DisaggConfig) { d.Faults.PutsOutliveSender = s.Faults.PutsOutliveSender },
	"revocation-leaks":      func(d, s *simulate.DisaggConfig) { d.Faults.RevocationLeaks = s.Faults.RevocationLeaks },
	"peer-restarts":         func(d, s *simulate.DisaggConfig) { d.Restarts = s.Restarts },
	"max-attempts":          func(d, s *simulate.DisaggConfig) { d.MaxAttempts = s.MaxAttempts },
	"ucx-tls":               func(d, s *simulate.DisaggConfig) { d.UCXTransports = s.UCXTransports },
	"peer-pauses":           func(d, s *simulate.DisaggConfig) { d.Pauses = s.Pauses },
	"pause-for":             func(d, s *simulate.DisaggConfig) { d.PauseFor = s.PauseFor },
}

// disaggOnly are the flags that describe a disaggregated run alone.
var disaggOnly = []string{"never-reports-rate", "fails-midway-rate", "submits-late-rate", "report-rate", "sender-rate", "lose-done", "mask-done",
	"duplicate-done", "replay-done", "reports-overtake-data", "puts-outlive-sender", "revocation-leaks", "peer-restarts", "max-attempts",
	"transport", "ucx-tls", "peer-pauses", "pause-for"}

// disaggShared are the flags a disaggregated run shares with the store's,
// read in its own terms: --slots the decode side's pages, --blocks a
// request's pages, --drain-grace the containment grace after the deadline.
var disaggShared = []string{"requests", "blocks", "slots", "arrival", "deadline", "drain-grace", "cancel-rate", "seed", "naive",
	"json", "compare-naive", "report", "disagg"}

// disaggUsable refuses the flags that do not go with the run asked for: the
// store's and the engine's with --disagg, the disaggregated run's without
// it. It reports whether every flag given fits.
func disaggUsable(e *env, fs *flag.FlagSet, on bool) bool {
	ok := true
	fs.Visit(func(f *flag.Flag) {
		switch {
		case !on && slices.Contains(disaggOnly, f.Name):
			e.errorf("--%s: describes a disaggregated run's writers and network; want --disagg too", f.Name)
			ok = false
		case on && !slices.Contains(disaggOnly, f.Name) && !slices.Contains(disaggShared, f.Name):
			e.errorf("--%s: describes the store, the engine or the device of the main run; --disagg moves pages peer to peer over the simulated network and takes --%s and the flags marked \"with --disagg\"; drop it",
				f.Name, strings.Join(disaggShared, ", --"))
			ok = false
		}
	})
	return ok
}

// disaggConfig is the disaggregated run's configuration: its defaults, the
// flags of its own, and the shared flags the command line gave.
func disaggConfig(fs *flag.FlagSet, cfg simulate.Config, d *simulate.DisaggConfig) simulate.DisaggConfig {
	out := *d
	if d.Transport == simulate.TransportUCX {
		// Over UCX the run starts from its own defaults; only the flags
		// given change them.
		out = simulate.DisaggUCXDefaults()
	}
	fs.Visit(func(f *flag.Flag) {
		if set := disaggGiven[f.Name]; set != nil && d.Transport == simulate.TransportUCX {
			set(&out, d)
		}
		switch f.Name {
		case "requests":
			out.Requests = cfg.Requests
		case "blocks":
			out.PagesPerRequest = cfg.Blocks
		case "slots":
			out.Pages = cfg.Slots
		case "arrival":
			out.Arrival = cfg.Arrival
		case "deadline":
			out.Deadline = cfg.Deadline
		case "drain-grace":
			out.Grace = cfg.DrainGrace
		case "cancel-rate":
			out.CancelRate = cfg.CancelRate
		case "seed":
			out.Seed = cfg.Seed
		}
	})
	out.Naive = cfg.Naive
	return out
}

// simulateDisagg checks a disaggregated run's configuration and runs it.
func simulateDisagg(e *env, fs *flag.FlagSet, cfg simulate.DisaggConfig, asJSON, compare bool, report string) int {
	usable := true
	if err := cfg.Validate(); err != nil {
		reportDisaggConfig(e, fs, err)
		usable = false
	}
	if compare && cfg.Naive {
		e.errorf("--compare-naive: runs the kvready manager, then the naive one, on one workload; drop --naive")
		usable = false
	}
	if report != "" {
		if err := checkWritable(report); err != nil {
			e.errorf("--report: %v; want a directory this process can write (it is created if missing)", err)
			usable = false
		}
	}
	if !usable {
		return exitUsage
	}
	ctx, stop := interruptible()
	defer stop()
	return runDisagg(ctx, e, cfg, asJSON, compare, report)
}

// runDisagg runs kvready simulate --disagg: the kvready manager (or, with
// --naive, the naive one; with --compare-naive both, on one workload), each
// summary printed, the JSON and the report written, and the status the
// checker's verdict.
func runDisagg(ctx context.Context, e *env, cfg simulate.DisaggConfig, asJSON, compare bool, report string) int {
	var runs []*simulate.DisaggSummary
	status := exitOK
	one := func(c simulate.DisaggConfig) *simulate.DisaggSummary {
		name := "kvready"
		if c.Naive {
			name = "naive"
		}
		s, err := simulate.RunDisagg(ctx, c, progressReporter(&lineWriter{w: e.stderr}, c.Requests, name+" --disagg"))
		if err != nil && !errors.Is(err, context.Canceled) {
			e.errorf("%v", err)
			status = exitFail
		}
		if s == nil {
			return nil
		}
		if !asJSON {
			if werr := s.WriteTable(e.stdout); werr != nil {
				e.errorf("writing the summary: %v", werr)
				status = exitFail
			}
		}
		runs = append(runs, s)
		return s
	}
	if one(cfg) == nil {
		return exitFail
	}
	if compare && ctx.Err() == nil {
		if !asJSON {
			fmt.Fprintln(e.stdout, "\n--- the same workload with naive managers (free the pages, and the source slots, when the transfer's outcome arrives):")
		}
		naive := cfg
		naive.Naive = true
		if one(naive) == nil {
			return exitFail
		}
	}
	if asJSON {
		if s := printDisaggJSON(e, runs); s != exitOK {
			return s
		}
	}
	return disaggStatus(ctx, e, runs, report, asJSON, status)
}

// disaggStatus writes the report, says what the checker found, and answers
// the exit status.
func disaggStatus(ctx context.Context, e *env, runs []*simulate.DisaggSummary, report string, asJSON bool, status int) int {
	reportFailed := false
	if report != "" {
		if err := simulate.WriteDisaggReport(report, runs...); err != nil {
			e.errorf("--report: %v", err)
			reportFailed = true
		} else if !asJSON {
			fmt.Fprintf(e.stdout, "report: %s/%s\n", report, simulate.ReportIndex)
		}
	}
	for _, s := range runs {
		switch {
		case s.Manager == "naive" && !s.Safe():
			if !asJSON {
				fmt.Fprintf(e.stdout, "naive manager: the checker caught it freeing pages a writer could still write, or source slots a put could still read (%d violations), as expected\n", s.ViolationCount())
			}
		case !s.Safe():
			e.errorf("the page checker found %d safety violations in the kvready manager's run", s.ViolationCount())
			status = exitFail
		case !s.Complete() && !s.Interrupted:
			status = exitFail
		case s.Manager == "kvready" && s.UnaskedLoss() != "" && status == exitOK:
			e.errorf("capacity lost: %s, and nothing in the run asked for it (exit status %d)", s.UnaskedLoss(), exitCapacity)
			status = exitCapacity
		}
	}
	if ctx.Err() != nil {
		e.errorf("interrupted: the summary and the report cover the run so far")
		status = exitInterrupted
	}
	if reportFailed && status == exitOK {
		status = exitUsage
	}
	return status
}

// printDisaggJSON prints one run's summary as one JSON object, or two runs
// as one object holding both under their managers' names.
func printDisaggJSON(e *env, runs []*simulate.DisaggSummary) int {
	var v any = runs[0]
	if len(runs) > 1 {
		m := map[string]*simulate.DisaggSummary{}
		for _, s := range runs {
			m[s.Manager] = s
		}
		v = m
	}
	out, err := json.Marshal(v)
	if err != nil {
		e.errorf("encoding the summary: %v", err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "%s\n", out)
	return exitOK
}

// reportDisaggConfig prints each field error of a refused disaggregated
// configuration against its flag; writer rates that add up to more than 1
// are blamed on the rate flags the user gave.
func reportDisaggConfig(e *env, fs *flag.FlagSet, err error) {
	var fe *simulate.FieldError
	for _, one := range unjoin(err) {
		if !errors.As(one, &fe) {
			e.errorf("%v", one)
			continue
		}
		field := "--" + fe.Field
		if fe.Field == "writer-rates" {
			var given []string
			fs.Visit(func(f *flag.Flag) {
				if slices.Contains([]string{"never-reports-rate", "fails-midway-rate", "submits-late-rate"}, f.Name) {
					given = append(given, "--"+f.Name)
				}
			})
			field = "the writer rates"
			if len(given) > 0 {
				field = strings.Join(given, ", ")
			}
		}
		e.errorf("%s: %s", field, fe.Msg)
	}
}
