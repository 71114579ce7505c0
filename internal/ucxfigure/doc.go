// Package ucxfigure measures SPEC §5's UCX figure (issue #42 item 5): the
// bytes/s a transfer through the engine moves between two processes over
// UCX, beside the bytes/s UCX's own ucx_perftest puts between two processes
// over the same transport, at the same page sizes, in one run.
//
// The anchor is ucx_perftest (Debian ucx-utils): RunPerftest starts its
// server and its client (ucp_put_bw) and ParsePerftest reads the client's
// bandwidth. The engine's side is BenchmarkUCXTransfer in this package's
// tests: the test process is the decode manager (readiness.Engine lending
// its staging slots through a peer.Receiver over transfer/ucx), the test
// binary re-executed is the prefill (a peer.Sender putting over UCX).
// BenchmarkUCXInProcess runs the same lifecycle with both sides in one
// process and reports its CPU time per page, each of the transport's levers
// (a DONE carried on its put, a rendezvous received straight into the
// pages) turned off in turn beside it: a comparison a loaded machine
// disturbs less than the figure's wall time. TestFigureProtocol checks what
// a page costs on the wire. docs/ucx.md says what is measured and what the
// gap is made of.
package ucxfigure
