package proptest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/staging"
)

// oracleCase is one lease (serial 1, two rows) handed to a stack of tier
// doubles, with no engine: what TestTierOracleChangedIsWhatAPollCanSee
// steps by hand.
type oracleCase struct {
	t     *testing.T
	w     *tierWorld
	stack *tiers.Backend
	at    contract.Attempt
	names []contract.Name
}

const oracleSerial = 1

func newOracleCase(t *testing.T, n int, publish bool) *oracleCase {
	mem, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 2, SlotBytes: slotBytes})
	require.NoError(t, err)
	w := newTierWorld(mem, n, false)
	w.fetches[oracleSerial] = !publish
	var ts []tiers.Tier
	for i, d := range w.tiers {
		d.fetcher, d.pub = true, true
		ts = append(ts, tiers.Tier{Name: "t" + string(rune('0'+i)), Fetcher: d, Publisher: d})
	}
	stack, err := tiers.New(ts, tiers.WithWait(tierWait), tiers.WithoutPromotion())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stack.Close() })
	c := &oracleCase{t: t, w: w, stack: stack}
	var units []contract.Unit
	for b := range 2 {
		name := nameOf(oracleSerial, 0, b)
		c.names = append(c.names, name)
		units = append(units, contract.Unit{Name: name, LocalGroup: 0, Local: b})
		row, _ := mem.Row(0, b)
		copy(row, pattern(tagContent, oracleSerial, rowID(0, b))) // what a publish staged
	}
	ext, err := contract.NewCacheExtent([]byte("lease-1"), units, true)
	require.NoError(t, err)
	if publish {
		c.at, err = stack.Publish(ext)
	} else {
		c.at, err = stack.Fetch(ext, nil)
	}
	require.NoError(t, err)
	return c
}

// rec is tier i's submission of the lease.
func (c *oracleCase) rec(i int) *tierRec {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	role := tierFetch
	if !c.w.fetches[oracleSerial] {
		role = tierPublish
	}
	r := c.w.rec(i, oracleSerial, role)
	require.NotNil(c.t, r, "tier %d was never handed the lease", i)
	return r
}

// deliver makes tier i answer Delivered with the lease's rows picked by
// served (indexes): the stack reads it on the tier's completion callback.
func (c *oracleCase) deliver(i int, served ...int) {
	var names []contract.Name
	for _, k := range served {
		names = append(names, c.names[k])
	}
	c.w.deliver(c.rec(i), names)
}

// change is the model's change action on tier i's answer.
func (c *oracleCase) change(i int, across bool) {
	r := c.rec(i)
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.w.changeLocked(r, across)
}

// prove asks the stack's Quiesce (every tier proves at once), then re-polls
// the stack as the engine does at the proof, and returns that answer.
func (c *oracleCase) prove() contract.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := c.stack.Quiesce(ctx, []contract.Attempt{c.at})
	require.NoError(c.t, err)
	require.True(c.t, ok, "every tier double proves at once here")
	return c.at.Poll()
}

// TestTierOracleChangedIsWhatAPollCanSee pins the tiered model's rule-3
// oracle (tierWorld.changed) to what a reader of Poll can see of a tier's
// answer, through backend/tiers and the tier doubles alone (no engine): a
// change a Poll read, or one still standing at the tier's proof, is a
// changed answer, and the stack answers Failed naming the tier; a change
// undone before any Poll read it is none, and the stack keeps the answer it
// read. TestModelRunnerTiers once failed on the last two rows' shape (a
// publication's tier answered a miss, then Failed, then a miss again, all
// before its proof), its oracle then counting every change the model made
// (tierRec.changed) as one the stack must have caught.
func TestTierOracleChangedIsWhatAPollCanSee(t *testing.T) {
	tests := []struct {
		name    string
		tiers   int
		publish bool
		steps   func(c *oracleCase)
		changed bool // what the oracle must say, and whether the stack caught a change
		served  int  // the stack's Delivered when it caught none
	}{
		{name: "never changed", tiers: 1, steps: func(c *oracleCase) { c.deliver(0, 0, 1) }, served: 2},
		{name: "changed within its kind after the stack answered, standing at its proof", tiers: 1, changed: true,
			steps: func(c *oracleCase) { c.deliver(0, 0, 1); c.change(0, false) }},
		{name: "changed across kinds after the stack answered, standing at its proof", tiers: 1, changed: true,
			steps: func(c *oracleCase) { c.deliver(0, 0, 1); c.change(0, true) }},
		{name: "changed before the stack answered, read at its recheck, changed back before its proof", tiers: 2, changed: true,
			steps: func(c *oracleCase) {
				c.deliver(0) // a miss: tier 1 is asked for both rows
				c.change(0, false)
				c.deliver(1, 0, 1) // the stack latches: its recheck polls tier 0, now Failed
				c.change(0, false) // back to Delivered{}, its first answer
			}},
		{name: "a fetch's miss changed to Failed and back before any poll", tiers: 1, served: 0,
			steps: func(c *oracleCase) { c.deliver(0); c.change(0, false); c.change(0, false) }},
		{name: "a publication's miss changed to Failed and back before any poll", tiers: 2, publish: true, served: 2,
			steps: func(c *oracleCase) { c.deliver(0, 0, 1); c.deliver(1); c.change(1, false); c.change(1, false) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newOracleCase(t, tt.tiers, tt.publish)
			tt.steps(c)
			got := c.prove()
			c.w.mu.Lock()
			changed, faults := c.w.changed(oracleSerial), c.w.faults
			c.w.mu.Unlock()
			require.Empty(t, faults, "the tier doubles saw the stack break a rule")
			assert.Equal(t, tt.changed, changed, "the oracle: did a tier give the stack a changed answer")
			if tt.changed {
				f, ok := got.(contract.Failed)
				require.True(t, ok, "the stack trusted a changed answer a Poll could see: %v", got)
				assert.True(t, strings.Contains(f.Reason, "broke the contract"), "reason %q names no breach", f.Reason)
				return
			}
			d, ok := got.(contract.Delivered)
			require.True(t, ok, "the stack answered %v; no Poll saw a change", got)
			assert.Equal(t, tt.served, d.Served.Len())
		})
	}
}
