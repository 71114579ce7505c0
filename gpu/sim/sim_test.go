package sim_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
)

func newDev(t testing.TB, opts ...sim.Option) (*sim.Device, gpu.Stream, gpu.DevicePtr) {
	t.Helper()
	dev, err := sim.New(3, 1<<16, opts...)
	require.NoError(t, err)
	st, err := dev.NewStream()
	require.NoError(t, err)
	p, err := dev.Alloc(8)
	require.NoError(t, err)
	return dev, st, p
}

func query(t *testing.T, st gpu.Stream, ev gpu.Event) gpu.Status {
	t.Helper()
	s, err := st.Query(ev)
	require.NoError(t, err)
	return s
}

func TestCopiesHappenAtCompletion(t *testing.T) {
	dev, st, p := newDev(t)
	src := []byte("AAAAAAAA")
	require.NoError(t, st.CopyHtoD(p, src))
	ev, err := st.Record()
	require.NoError(t, err)
	copy(src, "BBBBBBBB") // recycled too early: the device must see it

	assert.Equal(t, gpu.Pending, query(t, st, ev))
	n, err := dev.CompleteNext(st, 1)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, gpu.Complete, query(t, st, ev))
	got := make([]byte, 8)
	require.NoError(t, dev.Read(got, p))
	assert.Equal(t, "BBBBBBBB", string(got))

	back := make([]byte, 8)
	require.NoError(t, st.CopyDtoH(back, p))
	ev2, _ := st.Record()
	assert.Equal(t, make([]byte, 8), back, "not written before completion")
	assert.Equal(t, 1, dev.CompleteAll())
	assert.Equal(t, gpu.Complete, query(t, st, ev2))
	assert.Equal(t, "BBBBBBBB", string(back))
}

func TestFailNextPoisons(t *testing.T) {
	dev, st, p := newDev(t)
	require.NoError(t, dev.Write(p, []byte("original")))
	require.NoError(t, st.CopyHtoD(p, []byte("newbytes")))
	ev1, _ := st.Record()
	host := []byte("hosthost")
	require.NoError(t, st.CopyDtoH(host, p))
	ev2, _ := st.Record()
	ev3, _ := st.Record()

	n, err := dev.FailNext(st, 2)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, gpu.Failed, query(t, st, ev1))
	assert.Equal(t, gpu.Failed, query(t, st, ev2))
	assert.Equal(t, gpu.Pending, query(t, st, ev3))
	dev.CompleteAll()
	assert.Equal(t, gpu.Complete, query(t, st, ev3), "a later event still completes")
	assert.Equal(t, gpu.Failed, query(t, st, ev1), "a failure is remembered")
	got := make([]byte, 8)
	require.NoError(t, dev.Read(got, p))
	assert.Equal(t, bytes.Repeat([]byte{sim.Poison}, 8), got)
	assert.Equal(t, bytes.Repeat([]byte{sim.Poison}, 8), host)
}

func TestEventsInOrder(t *testing.T) {
	dev, st, _ := newDev(t)
	var evs []gpu.Event
	for range 5 {
		ev, err := st.Record()
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	n, _ := dev.CompleteNext(st, 2)
	assert.Equal(t, 2, n)
	want := []gpu.Status{gpu.Complete, gpu.Complete, gpu.Pending, gpu.Pending, gpu.Pending}
	for i, ev := range evs {
		assert.Equal(t, want[i], query(t, st, ev), "event %d", i)
	}
	n, _ = dev.CompleteNext(st, 10)
	assert.Equal(t, 3, n, "only three were left")
}

func TestQueryRefusals(t *testing.T) {
	dev, st, _ := newDev(t)
	other, err := dev.NewStream()
	require.NoError(t, err)
	ev, _ := other.Record()
	dev.CompleteAll()
	tests := []struct {
		name string
		ev   gpu.Event
		want error
	}{
		{"never recorded", gpu.Event{}, gpu.ErrNotRecorded},
		{"other stream", ev, gpu.ErrForeignEvent},
		{"never issued", gpu.MakeEvent(st.ID(), 1), gpu.ErrUnknownEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := st.Query(tt.ev)
			assert.ErrorIs(t, err, tt.want)
			assert.NotEqual(t, gpu.Complete, s)
		})
	}
}

func TestLose(t *testing.T) {
	dev, st, p := newDev(t)
	done, _ := st.Record()
	dev.CompleteAll()
	require.NoError(t, st.CopyHtoD(p, []byte("xxxxxxxx")))
	pending, _ := st.Record()
	lost, why := dev.Lost(3)
	assert.False(t, lost)
	assert.Empty(t, why)

	dev.Lose("xid 79")
	lost, why = dev.Lost(3)
	assert.True(t, lost)
	assert.Equal(t, "xid 79", why)
	lost, _ = dev.Lost(4)
	assert.False(t, lost, "another device")

	assert.Equal(t, gpu.Complete, query(t, st, done), "completed before the loss")
	assert.Equal(t, gpu.Failed, query(t, st, pending))
	assert.ErrorIs(t, st.CopyHtoD(p, []byte("x")), gpu.ErrDeviceLost)
	assert.ErrorIs(t, st.CopyDtoH(make([]byte, 1), p), gpu.ErrDeviceLost)
	_, err := st.Record()
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	_, err = dev.NewStream()
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	_, err = dev.Alloc(1)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
}

func TestLatency(t *testing.T) {
	var clock sim.ManualClock
	dev, st, p := newDev(t, sim.WithLatency(&clock, 10*time.Millisecond))
	require.NoError(t, st.CopyHtoD(p, []byte("12345678")))
	ev, _ := st.Record()
	clock.Advance(9 * time.Millisecond)
	assert.Equal(t, gpu.Pending, query(t, st, ev))
	clock.Advance(-time.Hour) // ignored
	clock.Advance(time.Millisecond)
	assert.Equal(t, gpu.Complete, query(t, st, ev))
	got := make([]byte, 8)
	require.NoError(t, dev.Read(got, p))
	assert.Equal(t, "12345678", string(got))
}

// countingClock is a manual clock that counts its reads.
type countingClock struct {
	sim.ManualClock
	reads int
}

func (c *countingClock) Now() time.Time {
	c.reads++
	return c.ManualClock.Now()
}

// TestZeroLatency: a zero-latency device lands copies and events by the time
// they are queried without reading its clock for them, and still keeps them
// behind timed work queued ahead of them (a Compute).
func TestZeroLatency(t *testing.T) {
	for _, tc := range []struct {
		name      string
		compute   time.Duration // queued ahead of the copy; 0: none
		wantReads bool
	}{
		{name: "copies only"},
		{name: "behind a compute", compute: 10 * time.Millisecond, wantReads: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &countingClock{}
			clock.Advance(time.Hour) // not the zero time: that reads as "no ready time"
			dev, st, p := newDev(t, sim.WithLatency(clock, 0))
			s := st.(*sim.Stream)
			if tc.compute > 0 {
				require.NoError(t, s.Compute(tc.compute))
			}
			require.NoError(t, st.CopyHtoD(p, []byte("12345678")))
			ev, err := st.Record()
			require.NoError(t, err)
			if tc.compute > 0 {
				assert.Equal(t, gpu.Pending, query(t, st, ev), "a copy behind a compute landed before the compute was done")
				clock.Advance(tc.compute)
			}
			assert.Equal(t, gpu.Complete, query(t, st, ev))
			got := make([]byte, 8)
			require.NoError(t, dev.Read(got, p))
			assert.Equal(t, "12345678", string(got))
			assert.Equal(t, tc.wantReads, clock.reads > 0, "clock reads: %d", clock.reads)
		})
	}
}

func TestBadInput(t *testing.T) {
	_, err := sim.New(0, 0)
	assert.ErrorContains(t, err, "want > 0")
	_, err = sim.New(0, 10, sim.WithLatency(nil, time.Second))
	assert.ErrorContains(t, err, "clock")

	dev, st, p := newDev(t)
	tests := []struct {
		name string
		do   func() error
		msg  string
	}{
		{"alloc zero", func() error { _, err := dev.Alloc(0); return err }, "positive size"},
		{"alloc too big", func() error { _, err := dev.Alloc(1 << 20); return err }, "out of device memory"},
		{"free unknown", func() error { return dev.Free(p + 1) }, "not the start"},
		{"copy past allocation", func() error { return st.CopyHtoD(p, make([]byte, 9)) }, "not inside one live allocation"},
		{"copy below base", func() error { return st.CopyDtoH(make([]byte, 1), 5) }, "not inside one live allocation"},
		{"write past allocation", func() error { return dev.Write(p+4, make([]byte, 5)) }, "not inside"},
		{"read past allocation", func() error { return dev.Read(make([]byte, 9), p) }, "not inside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorContains(t, tt.do(), tt.msg)
			assert.Zero(t, st.(*sim.Stream).Queued(), "nothing queued")
		})
	}
	require.NoError(t, dev.Free(p))
	assert.Error(t, dev.Free(p), "double free")

	other, _ := sim.New(1, 64)
	os, _ := other.NewStream()
	_, err = dev.CompleteNext(os, 1)
	assert.ErrorContains(t, err, "does not belong")
}

func TestFreedWhileQueuedFailsEvent(t *testing.T) {
	dev, st, p := newDev(t)
	require.NoError(t, st.CopyHtoD(p, []byte("12345678")))
	require.NoError(t, dev.Free(p))
	ev, _ := st.Record()
	dev.CompleteAll()
	assert.Equal(t, gpu.Failed, query(t, st, ev))
}

func TestAllocFirstFit(t *testing.T) {
	dev, err := sim.New(0, 1024)
	require.NoError(t, err)
	a, _ := dev.Alloc(256)
	b, _ := dev.Alloc(256)
	require.NoError(t, dev.Free(a))
	c, err := dev.Alloc(200)
	require.NoError(t, err)
	assert.Equal(t, a, c, "the freed hole is reused")
	assert.NotEqual(t, b, c)
}

func TestZeroAllocSteadyState(t *testing.T) {
	dev, st, p := newDev(t)
	host := make([]byte, 8)
	cycle := func() {
		_ = st.CopyHtoD(p, host)
		_ = st.CopyDtoH(host, p)
		ev, _ := st.Record()
		_, _ = st.Query(ev)
		_, _ = dev.CompleteNext(st, 1)
		_, _ = st.Query(ev)
	}
	for range 20 {
		cycle()
	}
	assert.Zero(t, testing.AllocsPerRun(200, cycle))
}

func TestConcurrentCompletion(t *testing.T) {
	dev, st, p := newDev(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				dev.CompleteAll()
			}
		}
	})
	require.NoError(t, dev.Write(p, []byte("devbytes")))
	hosts := make([][]byte, 2000) // one buffer per copy: none is touched before its event
	var inflight gpu.Completions[int]
	handed := 0
	for i := range hosts {
		hosts[i] = make([]byte, 8)
		require.NoError(t, st.CopyDtoH(hosts[i], p))
		ev, err := st.Record()
		require.NoError(t, err)
		require.NoError(t, inflight.Push(ev, i))
		_, err = inflight.Poll(st, func(tok int, s gpu.Status) {
			assert.Equal(t, handed, tok)
			handed++
			assert.Equal(t, "devbytes", string(hosts[tok])) // safe: its copy has completed
		})
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	dev.CompleteAll()
	_, err := inflight.Poll(st, func(int, gpu.Status) { handed++ })
	require.NoError(t, err)
	assert.Equal(t, 2000, handed)
}

func Example() {
	var clock sim.ManualClock
	dev, _ := sim.New(0, 1<<20, sim.WithLatency(&clock, time.Millisecond))
	stream, _ := dev.NewStream()
	block, _ := dev.Alloc(5)

	_ = stream.CopyHtoD(block, []byte("hello"))
	ev, _ := stream.Record()
	st, _ := stream.Query(ev)
	fmt.Println(st)

	clock.Advance(time.Millisecond)
	st, _ = stream.Query(ev)
	got := make([]byte, 5)
	_ = dev.Read(got, block)
	fmt.Println(st, string(got))
	// Output:
	// pending
	// complete hello
}

// TestRecordQueryIsRecordThenQuery: RecordQuery answers what Record then
// Query would — the same event sequence, the same status on every timing
// model, a lost device refused with nothing issued — and the event stays
// queryable afterwards.
func TestRecordQueryIsRecordThenQuery(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(*sim.ManualClock) []sim.Option
		fail bool // FailNext the event before (it fails, not the one after it)
		lose bool // lose the device before recording
		want gpu.Status
	}{
		{"no timing: pending until driven", func(*sim.ManualClock) []sim.Option { return nil }, false, false, gpu.Pending},
		{"zero latency: complete at once", func(c *sim.ManualClock) []sim.Option { return []sim.Option{sim.WithLatency(c, 0)} }, false, false, gpu.Complete},
		{"latency: pending until due", func(c *sim.ManualClock) []sim.Option {
			return []sim.Option{sim.WithLatency(c, time.Millisecond)}
		}, false, false, gpu.Pending},
		{"zero latency, a failed event ahead", func(c *sim.ManualClock) []sim.Option { return []sim.Option{sim.WithLatency(c, 0)} }, true, false, gpu.Complete},
		{"lost device", func(*sim.ManualClock) []sim.Option { return nil }, false, true, gpu.Pending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, together := range []bool{false, true} {
				clock := sim.NewManualClock(time.Unix(100, 0))
				dev, st, p := newDev(t, tc.opts(clock)...)
				require.NoError(t, st.CopyHtoD(p, []byte("12345678")))
				first, err := st.Record()
				require.NoError(t, err)
				if tc.fail {
					_, err := dev.FailNext(st, 1)
					require.NoError(t, err)
				}
				if tc.lose {
					dev.Lose("test")
				}
				var ev gpu.Event
				var got gpu.Status
				if together {
					ev, got, err = st.(gpu.RecordQuerier).RecordQuery()
				} else if ev, err = st.Record(); err == nil {
					got, err = st.Query(ev)
				}
				if tc.lose {
					require.ErrorIs(t, err, gpu.ErrDeviceLost, "together=%v", together)
					assert.True(t, ev.IsZero(), "together=%v: an event issued on a lost device", together)
					continue
				}
				require.NoError(t, err)
				assert.Equal(t, first.Seq()+1, ev.Seq(), "together=%v", together)
				assert.Equal(t, tc.want, got, "together=%v", together)
				again, err := st.Query(ev)
				require.NoError(t, err)
				assert.Equal(t, got, again, "together=%v: the event reads the same afterwards", together)
			}
		})
	}
}
