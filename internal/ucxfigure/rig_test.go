package ucxfigure

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer/ucx"
)

// TestFigureProtocol runs the benchmark's two processes for a few rounds of
// leases and checks what each page cost on the wire, from the decode
// transport's counters: every lease's DONE rode on its one put (no message
// of its own), heard once the put was applied; a rendezvous page was
// received straight into its staging slot, over tcp and over shared memory
// (the owner's get); and every lease was fenced.
func TestFigureProtocol(t *testing.T) {
	const pages = 3 * inFlight
	for _, tls := range figureTransports {
		for _, size := range []int{64 << 10, 2 << 20} {
			t.Run(fmt.Sprintf("%s/%s", tls, sizeName(size)), func(t *testing.T) {
				tr, err := ucx.New(ucxConfig("decode", tls))
				require.NoError(t, err)
				t.Cleanup(func() { _ = tr.Close() })
				r := newRig(t, size, tr, nil)
				r.pump = func() { r.recv.Progress() }
				startPrefill(t, r, tr, tls, size)
				r.run(pages)
				st := tr.Stats()
				t.Logf("decode transport: %+v", st)
				require.Equal(t, uint64(pages), st.PutsApplied)
				require.Equal(t, uint64(pages), st.ReportsCarried, "every DONE rode on its put")
				require.Zero(t, st.ReportsDropped)
				require.Equal(t, st.PutsRendezvous, st.PutsDirect, "every rendezvous straight into its slot, over tcp and shared memory")
				if size > 1<<20 {
					require.Positive(t, st.PutsRendezvous, "a 2 MiB put comes by rendezvous")
				}
				if size <= ucx.DefaultEagerMax {
					require.Zero(t, st.PutsRendezvous, "a page of at most ucx.DefaultEagerMax comes eager")
				}
				rs := r.recv.Stats()
				require.Equal(t, uint64(pages), rs.Delivered)
				require.Equal(t, uint64(pages), rs.Evidence, "one report a lease")
				require.Equal(t, uint64(pages), rs.Fenced)
			})
		}
	}
}
