package transporttest_test

import (
	"fmt"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
	"github.com/kvready/kvready/transfer/transporttest"
)

// simNet is transfer/sim as the kit's Net: Join, Step, Close, and Kill
// (sim.Network's own).
type simNet struct{ *sim.Network }

func (n simNet) Join(name transfer.Peer) (transfer.Transport, error) {
	nd, err := n.Network.Join(name)
	if err != nil {
		return nil, err // a nil *sim.Node in a Transport would not read as nil
	}
	return nd, nil
}

func (simNet) Close() error { return nil }

// A transport's author runs the kit from a test of their own package, with
// a harness that makes a fresh network for each trial. In a test file that
// is
//
//	func TestConformance(t *testing.T) { transporttest.Check(t, harness) }
//
// Here transporttest.Run stands in for the test, so that the example runs.
// The simulated network lets messages overtake the puts posted before them:
// the contract allows it, and the kit does not object.
func Example() {
	harness := func(seed uint64) (transporttest.Net, error) {
		n, err := sim.New(seed, sim.Faults{ReportsOvertakeData: true})
		if err != nil {
			return nil, err
		}
		return simNet{n}, nil
	}
	if err := transporttest.Run("Example", func(t transporttest.TB) { transporttest.Check(t, harness) }); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("transfer/sim conforms")
	// Output: transfer/sim conforms
}
