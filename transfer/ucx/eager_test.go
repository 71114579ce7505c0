package ucx

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEagerMaxChoosesTheProtocol: a Checked put of at most the writer's
// EagerMax bytes comes eager, a larger one by rendezvous, whatever the
// owner's own EagerMax (the owner receives either, into the same pages);
// EagerMax 0 is DefaultEagerMax, a negative one leaves the choice to UCX,
// which sends a 64 KiB put by rendezvous over tcp.
func TestEagerMaxChoosesTheProtocol(t *testing.T) {
	type eagerCase struct {
		tls        string
		eagerMax   int // the writer's
		size       int
		rendezvous bool
	}
	cases := []eagerCase{
		{"tcp", 0, DefaultEagerMax, false},
		{"tcp", 0, 512 << 10, true},
		{"tcp", -1, 64 << 10, true},
		{"tcp", 128 << 10, 128 << 10, false},
		{"tcp", 128 << 10, 128<<10 + 1, true},
		{"tcp", 1 << 20, 512 << 10, false},
	}
	if hasSharedMemory(t) {
		cases = append(cases, eagerCase{"sm", 0, DefaultEagerMax, false}, eagerCase{"sm", 0, 512 << 10, true})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/eager-max=%d/%d", tc.tls, tc.eagerMax, tc.size), func(t *testing.T) {
			cfg := Config{Transports: tc.tls, Mode: Checked, NoPeerErrors: tc.tls != "tcp"}
			owner := cfg
			owner.EagerMax = -tc.eagerMax - 1 // never the writer's: the choice is the writer's alone
			decode := newNode(t, owner, "decode", 1)
			cfg.EagerMax = tc.eagerMax
			prefill := newNode(t, cfg, "prefill", 1)
			toDecode, _ := link(t, prefill, decode)
			pages := sentinel(tc.size + 64)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			key, err := toDecode.UnpackKey(mem.PackedKey())
			require.NoError(t, err)
			src := pattern(9, tc.size)
			put, err := toDecode.Put(src, key, 64)
			require.NoError(t, err)
			require.NoError(t, wait(t, put, prefill, decode))
			require.Equal(t, sentinel(64), pages[:64], "nothing before the put")
			require.Equal(t, src, pages[64:], "the put, whole")
			st := decode.Stats()
			require.Equal(t, uint64(1), st.PutsApplied)
			rndv := uint64(0)
			if tc.rendezvous {
				rndv = 1
			}
			require.Equal(t, rndv, st.PutsRendezvous, "puts that came by rendezvous")
		})
	}
}
