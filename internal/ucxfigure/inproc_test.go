package ucxfigure

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
)

// BenchmarkUCXInProcess is the figure's lifecycle with both sides in this
// process, over tcp (and tls=sm: shared memory), one goroutine progressing the decode and the prefill
// in turn: no process spins waiting for the other, so the CPU time the
// process spent per page (cpu-ns/page, from getrusage: UCX's own threads
// included) is the cost of a transfer — the engine, the Receiver and the
// Sender, both UCX workers, the copies — and a loaded machine, which
// stretches wall time, changes it much less. cgo-calls/page counts the
// calls into C (UCX's work and each crossing's own cost) on both sides. Each variant turns one of
// this package's levers off, so that a run compares them side by side:
// carry (a page's DONE rides on its put) and direct (a tcp rendezvous is
// received straight into the staging slot, not a bounce buffer); before
// is both off — the protocol of the figure's first measurement.
func BenchmarkUCXInProcess(b *testing.B) {
	variants := []struct {
		name          string
		plain, bounce bool
	}{{"v3", false, false}, {"no-carry", true, false}, {"bounce", false, true}, {"before", true, true}}
	for _, size := range pageSizes {
		for _, v := range variants {
			b.Run(fmt.Sprintf("page=%s/%s", sizeName(size), v.name), func(b *testing.B) { benchInProcess(b, "tcp", size, v.plain, v.bounce) })
		}
	}
	// Over shared memory, the shipped protocol and the bounce buffer beside
	// it: a rendezvous page is the owner's get (cma), straight into the
	// staging slot or into a buffer then copied (docs/ucx.md, "Over shared
	// memory, the copies a page").
	for _, size := range pageSizes {
		for _, v := range []struct {
			name   string
			bounce bool
		}{{"v3", false}, {"bounce", true}} {
			b.Run(fmt.Sprintf("tls=sm/page=%s/%s", sizeName(size), v.name), func(b *testing.B) { benchInProcess(b, "sm", size, false, v.bounce) })
		}
	}
}

func benchInProcess(b *testing.B, tls string, size int, plain, bounce bool) {
	cfg := func(name transfer.Peer) ucx.Config {
		c := ucxConfig(name, tls)
		c.Bounce = bounce
		return c
	}
	dtr, err := ucx.New(cfg("decode"))
	must(b, err)
	b.Cleanup(func() { _ = dtr.Close() })
	ptr, err := ucx.New(cfg("prefill"))
	must(b, err)
	b.Cleanup(func() { _ = ptr.Close() })
	r := newRig(b, size, dtr, nil)
	c, err := newPrefill(ptr, size, plain)
	must(b, err)
	b.Cleanup(func() { _ = c.send.Close() })
	_, _, err = dtr.AddPeer(ptr.Address())
	must(b, err)
	_, err = r.recv.Connect(advertise("prefill"))
	must(b, err)
	must(b, c.connect(dtr.Address(), advertise("decode")))
	r.pump = func() {
		must(b, c.step())
		r.recv.Progress()
	}
	r.run(inFlight) // warm up: connections, buffers
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0, cgo0 := cpuTime(), runtime.NumCgoCall()
	b.ResetTimer()
	r.run(b.N)
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/page")
	b.ReportMetric(float64(runtime.NumCgoCall()-cgo0)/float64(b.N), "cgo-calls/page")
}

// cpuTime is the CPU time this process spent so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
