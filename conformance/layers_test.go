package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/mem/memtest"
	"github.com/kvready/kvready/contract"
)

// layeredTrial is the seed-th trial of a generator that draws only layered
// trials.
func layeredTrial(seed int) trial { return trialGen(newConfig(nil), 1).Example(seed) }

// Every correct backend/mem mode passes the layered trials — TornUntilQuiesce
// writes torn bytes until Quiesce answers true, legally — and the trials are
// not vacuous: layers read ready one by one before the lease is done, and
// rows arrive.
func TestLayeredTrialsPassEveryCorrectMemMode(t *testing.T) {
	for _, mode := range mem.Modes() {
		t.Run(mode.String(), func(t *testing.T) {
			var seen layeredResult
			for seed := range 40 {
				tr := layeredTrial(seed)
				require.NotNil(t, tr.Layers)
				res, err := layeredFetch(memFetcher(mode), tr, newConfig(nil))
				require.NoError(t, err, "%#v", tr)
				seen.early += res.early
				seen.arrived += res.arrived
			}
			switch mode {
			case mem.Normal, mem.Partial, mem.SlowQuiesce, mem.QuiesceNotYet, mem.TornUntilQuiesce:
				assert.Positive(t, seen.arrived, "rows arrived through the layers")
				assert.Positive(t, seen.early, "layers read ready before the whole lease")
			default: // nothing served, or access never proven over: nothing copied
				assert.Zero(t, seen.arrived)
				assert.Zero(t, seen.early)
			}
		})
	}
}

// A backend that writes after Quiesce answered true (memtest: poison into
// every served row, at its next call) is caught by the layers that carry the
// late bytes to the device, under the rule it breaks.
func TestLayeredTrialCatchesAWriteAfterQuiesce(t *testing.T) {
	for seed := range 40 {
		err := layeredFetchTrial(brokenFetcher(memtest.WriteAfterQuiesce), layeredTrial(seed), newConfig(nil))
		var v *Violation
		if errors.As(err, &v) {
			require.Equal(t, RuleNoLateWrite, v.Rule, "%v", err)
			assert.Contains(t, v.Detail, "after Quiesce answered true")
			return
		}
		require.NoError(t, err)
	}
	t.Fatal("40 layered trials never caught a write after Quiesce answered true")
}

// otherBytes serves, for every stored name, bytes that are not the ones Put
// stored: the layers carry them to the device, and the kit says so.
func otherBytes(m Memory) (FetchSubject, error) {
	b, err := mem.New(m)
	if err != nil {
		return FetchSubject{}, err
	}
	put := func(extent string, n contract.Name, row []byte) {
		other := append([]byte(nil), row...)
		for i := range other {
			other[i] ^= 0x55
		}
		b.Put(extent, n, other)
	}
	return FetchSubject{Fetcher: b, Put: put, Close: b.Close}, nil
}

func TestLayeredTrialCatchesOtherContent(t *testing.T) {
	for seed := range 40 {
		err := layeredFetchTrial(otherBytes, layeredTrial(seed), newConfig(nil))
		var v *Violation
		if errors.As(err, &v) {
			require.Equal(t, RuleServedContent, v.Rule, "%v", err)
			assert.Contains(t, v.Detail, "layer")
			return
		}
		require.NoError(t, err)
	}
	t.Fatal("40 layered trials never caught a backend serving other bytes")
}

// CheckFetcher draws one trial in layeredOneIn through an engine with layers,
// and prints it so.
func TestCheckFetcherDrawsLayeredTrials(t *testing.T) {
	gen := trialGen(newConfig(nil), layeredOneIn)
	layered := 0
	for seed := range 400 {
		tr := gen.Example(seed)
		if tr.Layers == nil {
			continue
		}
		layered++
		assert.Contains(t, tr.GoString(), "through an engine with layers (group 0:")
		for _, u := range tr.Units {
			assert.Less(t, u.Slot, tr.Slots, "a layered trial's units are blocks 0..n-1")
		}
	}
	assert.InDelta(t, 400/layeredOneIn, layered, 400/layeredOneIn/2)
}
