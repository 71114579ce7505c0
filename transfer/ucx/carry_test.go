package ucx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// TestPutCarriesReport: a report a Checked put carries reaches the owner's
// Handlers.Message only once the put was applied — the handler reads the
// pages when it is called, and finds the put's bytes there, eager or by
// rendezvous (received straight into the pages over tcp, or through a
// bounce buffer) — and never when the put is refused: the writer then
// learns of the refusal from its request, and the owner heard nothing.
func TestPutCarriesReport(t *testing.T) {
	var cases []carryCase
	for _, s := range setups(t, Checked) {
		for _, size := range []int{4096, 4 << 20} {
			for _, revoke := range []bool{false, true} {
				cases = append(cases, carryCase{describe(s, sizeLabel(size, revoke)), s, size, revoke})
			}
		}
	}
	tcp := setup{name: "tcp/checked/bounce", cfg: Config{Transports: "tcp", Mode: Checked, Bounce: true}}
	cases = append(cases, carryCase{describe(tcp, sizeLabel(4<<20, false)), tcp, 4 << 20, false})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			decode := newNode(t, tc.s.cfg, "decode", 1)
			prefill := newNode(t, tc.s.cfg, "prefill", 1)
			toDecode, _ := link(t, prefill, decode)
			pages := sentinel(tc.size)
			src := pattern(3, tc.size)
			var heard [][]byte
			var held []bool // whether the pages held the put when the report was heard
			decode.SetHandlers(transfer.Handlers{Message: func(_ transfer.Peer, _ transfer.Incarnation, msg []byte) {
				heard = append(heard, msg)
				held = append(held, bytes.Equal(pages, src))
			}})
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			key, err := toDecode.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			if tc.revoke {
				how, err := mem.Revoke()
				require.NoError(t, err)
				require.Equal(t, transfer.RevokedFenced, how)
			}
			rc, ok := toDecode.(transfer.ReportCarrier)
			require.True(t, ok, "a checked endpoint carries reports")
			require.Positive(t, rc.MaxCarried())
			report := []byte("DONE, every put of mine landed")
			put, err := rc.PutReport(src, key, 0, report)
			require.NoError(t, err)
			report[0] = 'X' // copied when posted: changing it now changes nothing
			putErr := wait(t, put, prefill, decode)
			for range 200 {
				decode.Progress()
			}
			st := decode.Stats()
			if tc.revoke {
				require.ErrorIs(t, putErr, ErrRevoked)
				require.Empty(t, heard, "a refused put's report is dropped")
				require.Equal(t, sentinel(tc.size), pages)
				require.Equal(t, uint64(1), st.ReportsDropped)
				return
			}
			require.NoError(t, putErr)
			require.Equal(t, [][]byte{[]byte("DONE, every put of mine landed")}, heard, "heard once, as posted")
			require.Equal(t, []bool{true}, held, "after the put was applied")
			require.Equal(t, uint64(1), st.ReportsCarried)
			direct := uint64(0)
			if tc.size > 64<<10 && tc.s.cfg.direct() {
				direct = 1
			}
			require.Equal(t, direct, st.PutsDirect)
		})
	}
}

type carryCase struct {
	name   string
	s      setup
	size   int
	revoke bool
}

func sizeLabel(size int, revoked bool) string {
	s := "eager"
	if size > 64<<10 {
		s = "rendezvous"
	}
	if revoked {
		s += "/revoked"
	}
	return s
}

// TestPutReportRefusals: what PutReport refuses changes nothing — no put,
// no report: a OneSided endpoint (a one-sided put and a message are not
// ordered: it carries nothing, MaxCarried 0), a report over MaxCarried,
// an empty report.
func TestPutReportRefusals(t *testing.T) {
	for _, s := range setups(t, Checked, OneSided) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := newNode(t, s.cfg, "prefill", 1)
			toDecode, _ := link(t, prefill, decode)
			pages := sentinel(4096)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			key, err := toDecode.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			rc := toDecode.(transfer.ReportCarrier)
			var bad [][]byte
			if s.cfg.Mode == OneSided {
				require.Zero(t, rc.MaxCarried())
				bad = append(bad, []byte("DONE"))
			} else {
				bad = append(bad, make([]byte, rc.MaxCarried()+1))
			}
			bad = append(bad, nil)
			for _, msg := range bad {
				_, err := rc.PutReport(pattern(1, 4096), key, 0, msg)
				require.Error(t, err, "a report of %d bytes", len(msg))
			}
			for range 200 {
				prefill.Progress()
				decode.Progress()
			}
			require.Equal(t, sentinel(4096), pages, "nothing was put")
			require.Empty(t, decode.heard(), "nothing was heard")
		})
	}
}
