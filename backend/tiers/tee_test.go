package tiers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// poison is what the late-writing lower tier writes over a served row and
// its buffer, pass after pass, until its Quiesce stops it.
var poison = bytes.Repeat([]byte{'#'}, rowSize)

// teeTier is an adversarial lower tier that tees (tiers.TeeFetcher): it asks
// for the buffer of every unit but the last, then for each again, and for
// the last only at its first Quiesce, after its submission returned (the
// stack must hand out none of those: the last unit, never served in these
// tests, goes without); answers
// Delivered before it is done writing, and goes on writing the served rows
// and their buffers — poison and the true content in turn — until its
// Quiesce stops it (its TryQuiesce never says it ended: the stack must wait
// for its proof); writes junk into the buffers of the units it did not
// serve; and, by its fault, fails the fetch or rejects it after asking for
// the buffers.
type teeTier struct {
	m     *memory
	holds map[contract.Name][]byte
	fault string // "", "fail", "reject", "unproven" (its Quiesce never stops the writer)

	extra  atomic.Int32 // buffers handed out by repeated or late asks
	proven atomic.Bool  // its Quiesce stopped every writer it was asked about
	wg     sync.WaitGroup
	mu     sync.Mutex
	all    []*teeAttempt
}

// end stops every writer, at the test's end.
func (l *teeTier) end() {
	l.mu.Lock()
	for _, a := range l.all {
		a.once.Do(func() { close(a.stop) })
	}
	l.mu.Unlock()
	l.wg.Wait()
}

type teeAttempt struct {
	out    atomic.Pointer[contract.Outcome]
	notify notify.List
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	late   func() []byte // asks for a buffer after the submission returned
	asked  sync.Once
}

func (a *teeAttempt) Poll() contract.Outcome {
	if o := a.out.Load(); o != nil {
		return *o
	}
	return nil
}

func (a *teeAttempt) Notify(f func()) { a.notify.Add(f) }

func (a *teeAttempt) settle(o contract.Outcome) {
	a.out.Store(&o)
	a.notify.Fire()
}

func (l *teeTier) Fetch(contract.CacheExtent, contract.Route) (contract.Attempt, error) {
	return nil, errors.New("teeTier: Fetch: the stack was to ask FetchTee")
}

func (l *teeTier) FetchTee(ext contract.CacheExtent, _ contract.Route, tee func(unit, n int) []byte) (contract.Attempt, error) {
	bufs := make([][]byte, ext.Len())
	last := ext.Len() - 1 // asked for only after the submission returned
	for i := range last {
		bufs[i] = tee(i, rowSize)
		if tee(i, rowSize) != nil {
			l.extra.Add(1)
		}
	}
	if l.fault == "reject" {
		return nil, fmt.Errorf("teeTier: %w (after asking for its buffers)", contract.ErrSubmissionRejected)
	}
	// The last unit's buffer is asked for late: at its first Quiesce, which
	// the stack calls only once the submission returned.
	a := &teeAttempt{stop: make(chan struct{}), done: make(chan struct{}), late: func() []byte { return tee(last, rowSize) }}
	l.mu.Lock()
	l.all = append(l.all, a)
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(a.done)
		var served []contract.Name
		var rows, stored [][]byte
		for i, u := range ext.All() {
			v, ok := l.holds[u.Name]
			if !ok || l.fault == "fail" {
				if bufs[i] != nil {
					copy(bufs[i], poison) // junk: the unit is not served
				}
				continue
			}
			r, _ := l.m.Row(u.LocalGroup, u.Local)
			copy(r, v)
			if bufs[i] != nil {
				copy(bufs[i], v)
			}
			served = append(served, u.Name)
			rows, stored = append(rows, r, bufs[i]), append(stored, v, v)
		}
		if l.fault == "fail" {
			a.settle(contract.Failed{Reason: "teeTier: injected failure"})
		} else {
			a.settle(contract.Delivered{Served: contract.NewNameSet(served...)})
		}
		for torn := true; ; torn = !torn { // write until Quiesce says stop
			for k, r := range rows {
				if r == nil {
					continue
				}
				if torn {
					copy(r, poison)
				} else {
					copy(r, stored[k])
				}
			}
			select {
			case <-a.stop:
				for k, r := range rows {
					if r != nil {
						copy(r, stored[k]) // ends with the true content
					}
				}
				return
			default:
			}
		}
	}()
	return a, nil
}

func (l *teeTier) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	for _, x := range list {
		a := x.(*teeAttempt)
		a.asked.Do(func() {
			if a.late() != nil {
				l.extra.Add(1)
			}
		})
	}
	if l.fault == "unproven" {
		return false, nil // still writing: the buffers are not the stack's to give back
	}
	for _, x := range list {
		a := x.(*teeAttempt)
		a.once.Do(func() { close(a.stop) })
		select {
		case <-a.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	l.proven.Store(true)
	return true, nil
}

// TryQuiesce never says the access ended: the stack has to ask Quiesce.
func (l *teeTier) TryQuiesce([]contract.Attempt) (contract.Access, error) {
	return contract.AccessUnknown, nil
}

func (l *teeTier) Settle(ctx context.Context, list []contract.Attempt) error {
	return notify.Settle(ctx, "teeTier: Settle", len(list), func(i int) <-chan struct{} {
		ch := make(chan struct{})
		list[i].(*teeAttempt).Notify(func() { close(ch) })
		return ch
	})
}

func (l *teeTier) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}

func (l *teeTier) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, errors.ErrUnsupported
}

// adoptCheck is the upper tier: backend/mem, every Adopt checked as it
// comes — only once the lower tier proved its access over, and only a
// buffer that holds its row whole — and every buffer counted out and back.
type adoptCheck struct {
	*mem.Backend
	lower *teeTier

	miscount int // added to what the upper tier says it kept

	mu         sync.Mutex
	early      []string // adoptions before the lower tier's proof, or of torn bytes
	reserved   int
	adopted    int
	unreserved int
}

func (c *adoptCheck) Reserve(n int) []byte {
	c.mu.Lock()
	c.reserved++
	c.mu.Unlock()
	return c.Backend.Reserve(n)
}

func (c *adoptCheck) Adopt(ext contract.CacheExtent, bufs [][]byte) int {
	c.mu.Lock()
	for i, buf := range bufs {
		if buf == nil {
			continue
		}
		n := ext.Unit(i).Name
		c.adopted++
		if !c.lower.proven.Load() {
			c.early = append(c.early, fmt.Sprintf("%x adopted before the lower tier's proof", n[:2]))
		} else if v := c.lower.holds[n]; !bytes.Equal(buf, v) {
			c.early = append(c.early, fmt.Sprintf("%x adopted holding %q, not its row %q", n[:2], buf, v))
		}
	}
	c.mu.Unlock()
	return c.Backend.Adopt(ext, bufs) + c.miscount
}

func (c *adoptCheck) Unreserve(buf []byte) {
	c.mu.Lock()
	c.unreserved++
	c.mu.Unlock()
	c.Backend.Unreserve(buf)
}

// TestTeePromotesOnlyWholeServedRowsAfterTheProof: a lower tier that tees
// is promoted from its buffers, not from the staging rows — and only the
// units it served, only once its own access is proven over, so that what
// the upper tier adopts is each row whole, however late the lower tier
// writes and whatever it leaves in the buffers of the units it did not
// serve. A lower tier that fails or rejects promotes nothing; the buffers
// of a rejection come back at once, those of a proven fetch after its
// proof.
func TestTeePromotesOnlyWholeServedRowsAfterTheProof(t *testing.T) {
	for _, tt := range []struct {
		name     string
		fault    string
		holds    []int
		fetch    []int
		served   []int // by the stack (nil: not delivered)
		giveBack bool  // every reserved buffer came back or was adopted
		miscount int   // the upper tier says it kept this many more (or fewer) rows than it did
	}{
		{name: "a late writer serves some rows", holds: []int{1, 2}, fetch: []int{0, 1, 2, 3}, served: []int{1, 2}, giveBack: true},
		{name: "a late writer serves no row", holds: nil, fetch: []int{0, 1}, served: []int{}, giveBack: true},
		{name: "a failed fetch promotes nothing", fault: "fail", holds: []int{0, 1}, fetch: []int{0, 1}},
		{name: "a rejection after asking for buffers gives them back", fault: "reject", holds: []int{0}, fetch: []int{0, 1}, giveBack: true},
		{name: "an unproven fetch's rows are skipped, its buffers never given back", fault: "unproven", holds: []int{0, 1}, fetch: []int{0, 1, 2}, served: []int{0, 1}},
		{name: "an upper tier that says it kept more than it was handed is counted for what it was handed", holds: []int{1, 2}, fetch: []int{0, 1, 2, 3}, served: []int{1, 2}, giveBack: true, miscount: 5},
		{name: "an upper tier that says it kept a negative number is counted for none", holds: []int{1, 2}, fetch: []int{0, 1, 2, 3}, served: []int{1, 2}, giveBack: true, miscount: -9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemory(4)
			local, err := mem.New(m)
			require.NoError(t, err)
			t.Cleanup(func() { _ = local.Close() })
			lower := &teeTier{m: m, holds: map[contract.Name][]byte{}, fault: tt.fault}
			for _, i := range tt.holds {
				lower.holds[name(i)] = row(i)
			}
			up := &adoptCheck{Backend: local, lower: lower, miscount: tt.miscount}
			stack, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: up}, {Name: "lower", Fetcher: lower}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = stack.Close(); lower.end() })

			a, err := stack.Fetch(extentOf(t, tt.fetch...), nil)
			require.NoError(t, err)
			list := []contract.Attempt{a}
			require.NoError(t, stack.Settle(bounded(t), list))
			ok, err := stack.Quiesce(bounded(t), list)
			require.NoError(t, err)
			assert.Equal(t, tt.fault != "unproven", ok, "the stack's proof")
			if tt.served != nil {
				d, delivered := a.Poll().(contract.Delivered)
				require.True(t, delivered, "%v", a.Poll())
				assert.ElementsMatch(t, tt.served, served(d))
			} else {
				assert.False(t, isDeliveredOutcome(a.Poll()), "%v", a.Poll())
			}

			up.mu.Lock()
			defer up.mu.Unlock()
			assert.Empty(t, up.early)
			assert.Zero(t, lower.extra.Load(), "a repeated or late ask got a buffer")
			for _, i := range tt.fetch {
				got, held := local.Get(extName, name(i))
				want := tt.served != nil && contains(tt.served, i) && tt.fault != "unproven"
				assert.Equal(t, want, held, "unit %d held by the local tier", i)
				if held {
					assert.Equal(t, row(i), got, "unit %d", i)
				}
			}
			st := stack.Stats()
			switch {
			case tt.miscount < 0:
				assert.Zero(t, st[0].Promoted)
			default:
				assert.Equal(t, uint64(up.adopted), st[0].Promoted)
			}
			if tt.fault == "unproven" {
				assert.Zero(t, up.adopted)
				assert.Equal(t, uint64(len(tt.served)), st[0].PromoteSkipped)
			} else {
				assert.Equal(t, len(tt.served), up.adopted)
			}
			if tt.giveBack {
				assert.Equal(t, up.reserved, up.adopted+up.unreserved, "reserved %d, adopted %d, given back %d", up.reserved, up.adopted, up.unreserved)
			} else {
				assert.Zero(t, up.unreserved, "buffers of an unproven fetch were given back: the tier may still write them")
			}
		})
	}
}

func isDeliveredOutcome(o contract.Outcome) bool {
	_, ok := o.(contract.Delivered)
	return ok
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
