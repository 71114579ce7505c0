package main

import (
	"fmt"
	"io"
)

// The sub-benchmarks of internal/ucxfigure's BenchmarkUCXTransfer: per UCX
// transport and page size, ucx_perftest's ucp_put_bw between two processes
// (perftest) beside pages moved through the engine between two processes
// (engine); instant is the same engine lifecycle over transfer/sim in one
// process.
const ucxFigure = "BenchmarkUCXTransfer/"

var (
	ucxTransports = []string{"tcp", "sm"}
	ucxPages      = []string{"64KiB", "512KiB", "2MiB"}
)

func ucxName(tls, page, side string) string {
	return fmt.Sprintf("%stls=%s/page=%s/%s", ucxFigure, tls, page, side)
}

func init() {
	for _, tls := range ucxTransports {
		for _, page := range ucxPages {
			figures = append(figures, figure{
				what:    fmt.Sprintf("peer transfers over UCX (%s), %s pages: through the engine between two processes ÷ ucx_perftest ucp_put_bw (MB/s)", tls, page),
				value:   ratio(ucxName(tls, page, "engine"), "MB/s", ucxName(tls, page, "perftest"), "MB/s"),
				unit:    "×",
				goal:    "≥ 0.9×",
				met:     func(v float64) bool { return v >= 0.9 },
				measure: ucxName(tls, page, "engine"),
			})
		}
	}
}

// renderUCX writes the UCX figure's section: per transport and page size,
// what each side moved, their ratio, and the engine's lifecycle with no
// network beside it.
func renderUCX(w io.Writer, r *report) {
	fmt.Fprintln(w, "## Peer transfers over UCX (SPEC §5, issue #42 item 5)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "`BenchmarkUCXTransfer` (internal/ucxfigure), side by side in this run: `perftest` is UCX's")
	fmt.Fprintln(w, "own `ucx_perftest -t ucp_put_bw` between a server and a client process; `engine` is the decode")
	fmt.Fprintln(w, "process's `readiness.Engine` lending one-page leases, 16 in flight, through a `peer.Receiver`")
	fmt.Fprintln(w, "over `transfer/ucx` (Checked), served by a `peer.Sender` in a second process — each lease lent,")
	fmt.Fprintln(w, "offered, put, flushed, reported, fenced (its registration revoked), copied to the device and")
	fmt.Fprintln(w, "released. `instant` is the same lifecycle in one process over `transfer/sim`: what a transfer")
	fmt.Fprintln(w, "costs the engine, the receiver and two page copies with no network. Both processes share this")
	fmt.Fprintln(w, "machine's CPUs with each other (and with whatever else runs): see docs/ucx.md for what the gap")
	fmt.Fprintln(w, "is made of.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| transport | page | ucx_perftest MB/s | engine MB/s | engine ÷ perftest | instant ns/transfer | instant ÷ engine (ns) |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, tls := range ucxTransports {
		for _, page := range ucxPages {
			pt, ok1 := r.metric(ucxName(tls, page, "perftest"), "MB/s")
			en, ok2 := r.metric(ucxName(tls, page, "engine"), "MB/s")
			enNs, ok3 := r.metric(ucxName(tls, page, "engine"), "ns/op")
			in, ok4 := r.metric(ucxFigure+"instant/page="+page, "ns/op")
			cell := func(v float64, ok bool) string {
				if !ok {
					return "not measured"
				}
				return num(v)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", tls, page, cell(pt, ok1), cell(en, ok2),
				cell(safeDiv(en, pt), ok1 && ok2 && pt > 0), cell(in, ok4), cell(safeDiv(in, enNs), ok3 && ok4 && enNs > 0))
		}
	}
	fmt.Fprintln(w)
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
