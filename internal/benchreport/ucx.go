package main

import (
	"fmt"
	"io"
)

// The sub-benchmarks of internal/ucxfigure's BenchmarkUCXTransfer: per UCX
// transport and page size, one sub-benchmark that measures ucx_perftest's
// ucp_put_bw between two processes (perftest-MB/s) and then pages moved
// through the engine between two processes (MB/s), back to back on every
// call, with their ratio (engine/perftest); over sm, ucx_perftest with heap
// memory (engine/perftest-heap) and ucp_am_bw with heap memory
// (engine/perftest-am) beside it, in view; instant is the same engine
// lifecycle over transfer/sim in one process.
const ucxFigure = "BenchmarkUCXTransfer/"

var (
	ucxTransports = []string{"tcp", "sm"}
	ucxPages      = []string{"64KiB", "512KiB", "2MiB"}
)

func ucxName(tls, page string) string {
	return fmt.Sprintf("%stls=%s/page=%s", ucxFigure, tls, page)
}

func init() {
	for _, tls := range ucxTransports {
		for _, page := range ucxPages {
			figures = append(figures, figure{
				what:    fmt.Sprintf("peer transfers over UCX (%s), %s pages: through the engine between two processes ÷ ucx_perftest ucp_put_bw (MB/s)", tls, page),
				value:   value(ucxName(tls, page), "engine/perftest"),
				unit:    "×",
				goal:    "≥ 0.9×",
				met:     func(v float64) bool { return v >= 0.9 },
				measure: ucxName(tls, page),
			})
			if tls == "sm" {
				// In view, no goal: over shared memory the anchor SPEC §5
				// names is a memcpy into memory both processes map, which a
				// Checked put cannot be; an active message with heap memory
				// is what one is. Which anchor the figure takes is SPEC §5's.
				figures = append(figures, figure{
					what:    fmt.Sprintf("peer transfers over UCX (%s), %s pages: through the engine between two processes ÷ ucx_perftest ucp_am_bw, heap memory (MB/s), in view", tls, page),
					value:   value(ucxName(tls, page), "engine/perftest-am"),
					unit:    "×",
					goal:    "—",
					measure: ucxName(tls, page),
				})
			}
		}
	}
}

// renderUCX writes the UCX figure's section: per transport and page size,
// what each side moved, their ratio, and the engine's lifecycle with no
// network beside it.
func renderUCX(w io.Writer, r *report) {
	fmt.Fprintln(w, "## Peer transfers over UCX (SPEC §5, issue #42 item 5)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "`BenchmarkUCXTransfer` (internal/ucxfigure): per transport and page, each run measures UCX's own")
	fmt.Fprintln(w, "`ucx_perftest -t ucp_put_bw` between a server and a client process, then, right after it, the")
	fmt.Fprintln(w, "same number of pages through the engine between two processes: the decode process's")
	fmt.Fprintln(w, "`readiness.Engine` lending one-page leases, 16 in flight, through a `peer.Receiver` over")
	fmt.Fprintln(w, "`transfer/ucx` (Checked), served by a `peer.Sender` in a second process — each lease lent, offered,")
	fmt.Fprintln(w, "put, flushed, reported, fenced (its registration revoked), copied to the device and released.")
	fmt.Fprintln(w, "`engine ÷ perftest` is the median of the runs' own ratios (each pair measured back to back), the")
	fmt.Fprintln(w, "MB/s columns the medians of each side. `instant` is the same lifecycle in one process over")
	fmt.Fprintln(w, "`transfer/sim`: what a transfer costs the engine, the receiver and two page copies with no real")
	fmt.Fprintln(w, "network — an upper bound, as stepping the simulated network is about a quarter of its CPU. Over")
	fmt.Fprintln(w, "shared memory `ucx_perftest`'s buffers come from UCX's allocator (shared memory both processes")
	fmt.Fprintln(w, "map), so its put is a `memcpy`; the same test with ordinary memory (`UCX_ALLOC_PRIO=heap`, as the")
	fmt.Fprintln(w, "engine's pages are) is measured beside it, in view, and so is `ucx_perftest -t ucp_am_bw` with")
	fmt.Fprintln(w, "ordinary memory: an active message, its bytes delivered to the receiver's handler, which is what a")
	fmt.Fprintln(w, "Checked put is — the like-for-like anchor over `sm`, shown so that SPEC §5's choice of anchor has")
	fmt.Fprintln(w, "its number from every run. Both")
	fmt.Fprintln(w, "processes of each side share this machine's CPUs (and whatever else runs there): see docs/ucx.md")
	fmt.Fprintln(w, "for what the gap is made of, and how far the load moves each run.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| transport | page | ucx_perftest MB/s | engine MB/s | engine ÷ perftest | ucx_perftest, heap memory, MB/s | engine ÷ it, in view | ucp_am_bw, heap memory, MB/s | engine ÷ ucp_am_bw, in view | instant ns/transfer | instant ÷ engine (ns) |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	cell := func(v float64, ok bool) string {
		if !ok {
			return "not measured"
		}
		return num(v)
	}
	for _, tls := range ucxTransports {
		for _, page := range ucxPages {
			name := ucxName(tls, page)
			pt, ok1 := r.metric(name, "perftest-MB/s")
			en, ok2 := r.metric(name, "MB/s")
			rt, ok5 := r.metric(name, "engine/perftest")
			hp, ok6 := r.metric(name, "perftest-heap-MB/s")
			hr, ok7 := r.metric(name, "engine/perftest-heap")
			enNs, ok3 := r.metric(name, "ns/op")
			in, ok4 := r.metric(ucxFigure+"instant/page="+page, "ns/op")
			ap, ok8 := r.metric(name, "perftest-am-MB/s")
			ar, ok9 := r.metric(name, "engine/perftest-am")
			heap, heapRatio := cell(hp, ok6), cell(hr, ok7)
			am, amRatio := cell(ap, ok8), cell(ar, ok9)
			if tls == "tcp" {
				// UCX allocates no shared memory for tcp; the benchmark
				// measures the anchors in view over sm alone.
				heap, heapRatio, am, amRatio = "—", "—", "—", "—"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", tls, page, cell(pt, ok1), cell(en, ok2),
				cell(rt, ok5), heap, heapRatio, am, amRatio, cell(in, ok4), cell(safeDiv(in, enNs), ok3 && ok4 && enNs > 0))
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
