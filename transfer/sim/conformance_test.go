package sim_test

import (
	"testing"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
	"github.com/kvready/kvready/transfer/transporttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// simNet is the simulated network as the transport kit's Net (and Killer:
// Network.Kill).
type simNet struct{ *sim.Network }

func (n simNet) Join(name transfer.Peer) (transfer.Transport, error) {
	nd, err := n.Network.Join(name)
	if err != nil {
		return nil, err // a nil *sim.Node in a Transport would not read as nil
	}
	return nd, nil
}

func (simNet) Close() error { return nil }

func harness(f sim.Faults) transporttest.Harness {
	return func(seed uint64) (transporttest.Net, error) {
		n, err := sim.New(seed, f)
		if err != nil {
			return nil, err
		}
		return simNet{n}, nil
	}
}

// The simulated transport conforms to the transport contract, with each of
// its faults that a real transport may have: a message that overtakes the
// data posted before it (UCX without a flush between), a dead sender's puts
// that still land (an RDMA NIC finishing what was posted), a revocation that
// only refuses what comes after it and says so (shared memory), a DONE
// withheld for a while.
func TestTransportConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    sim.Faults
	}{
		{"no faults", sim.Faults{}},
		{"reports overtake data", sim.Faults{ReportsOvertakeData: true}},
		{"puts outlive sender", sim.Faults{PutsOutliveSender: true}},
		{"revocation leaks", sim.Faults{RevocationLeaks: true}},
		{"DONE masked", sim.Faults{MaskDone: 0.5}},
		{"all of them", sim.Faults{ReportsOvertakeData: true, PutsOutliveSender: true, RevocationLeaks: true, MaskDone: 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) { transporttest.Check(t, harness(tc.f)) })
	}
}

// The DONE faults that lose, duplicate or replay a message are the session
// core's adversary, not a transport a session could run on: a UCX endpoint
// delivers an active message once or fails. The kit names each.
func TestTransportConformanceNamesTheLossyFaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    sim.Faults
		rule string
	}{
		{"DONE lost", sim.Faults{LoseDone: 1}, transporttest.RuleMessageArrives},
		{"DONE duplicated", sim.Faults{DuplicateDone: 1}, transporttest.RuleMessageOnce},
		{"DONE replayed", sim.Faults{ReplayDone: 1}, transporttest.RuleMessageOnce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := transporttest.Run(t.Name(), func(kt transporttest.TB) {
				transporttest.Check(kt, harness(tc.f), transporttest.FailFiles(t.TempDir()))
			})
			require.Error(t, err, "the kit passed a network with %s", tc.name)
			assert.Contains(t, err.Error(), "transporttest: "+tc.rule+":")
		})
	}
}
