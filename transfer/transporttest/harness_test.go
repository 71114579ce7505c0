package transporttest

import (
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
	"pgregory.net/rapid"
)

// simNet is transfer/sim as a Net and a Killer.
type simNet struct{ *sim.Network }

func (n simNet) Join(name transfer.Peer) (transfer.Transport, error) {
	nd, err := n.Network.Join(name)
	if err != nil {
		return nil, err // a nil *sim.Node in a Transport would not read as nil
	}
	return nd, nil
}

func (simNet) Close() error { return nil }

func simHarness(f sim.Faults) Harness {
	return func(seed uint64) (Net, error) {
		n, err := sim.New(seed, f)
		if err != nil {
			return nil, err
		}
		return simNet{n}, nil
	}
}

// trials runs the kit's trial on seeds 0 to n-1, without rapid's search and
// shrinking, and answers the first violation and its seed, or nil.
func trials(h Harness, cfg config, n int) (*Violation, int) {
	gen := rapid.Custom(func(rt *rapid.T) error { return runTrial(rt, h, cfg) })
	for seed := range n {
		if err := gen.Example(seed); err != nil {
			v, ok := err.(*Violation)
			if !ok {
				panic(err)
			}
			return v, seed
		}
	}
	return nil, -1
}
