package gpu_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/sim"
)

// orderedStream is a minimal in-order stream: events up to done are complete,
// those listed in failed read Failed. It counts queries, so tests can see what
// a Poll round cost.
type orderedStream struct {
	id      uint64
	issued  uint64
	done    uint64
	failed  map[uint64]bool
	queries int
}

func (s *orderedStream) ID() uint64                           { return s.id }
func (s *orderedStream) CopyHtoD(gpu.DevicePtr, []byte) error { return nil }
func (s *orderedStream) CopyDtoH([]byte, gpu.DevicePtr) error { return nil }
func (s *orderedStream) Addressable(gpu.DevicePtr, int) error { return nil }
func (s *orderedStream) Record() (gpu.Event, error) {
	s.issued++
	return gpu.MakeEvent(s.id, s.issued), nil
}
func (s *orderedStream) Query(ev gpu.Event) (gpu.Status, error) {
	s.queries++
	if err := gpu.CheckEvent(ev, s.id, s.issued); err != nil {
		return gpu.Pending, err
	}
	switch {
	case ev.Seq() > s.done:
		return gpu.Pending, nil
	case s.failed[ev.Seq()]:
		return gpu.Failed, nil
	}
	return gpu.Complete, nil
}

func TestEventZero(t *testing.T) {
	var ev gpu.Event
	assert.True(t, ev.IsZero())
	assert.Equal(t, "event(never recorded)", ev.String())
	assert.False(t, gpu.MakeEvent(1, 1).IsZero())
	assert.ErrorIs(t, gpu.CheckEvent(ev, 1, 5), gpu.ErrNotRecorded)
	assert.ErrorIs(t, gpu.CheckEvent(gpu.MakeEvent(2, 1), 1, 5), gpu.ErrForeignEvent)
	assert.ErrorIs(t, gpu.CheckEvent(gpu.MakeEvent(1, 6), 1, 5), gpu.ErrUnknownEvent)
	assert.NoError(t, gpu.CheckEvent(gpu.MakeEvent(1, 5), 1, 5))
}

func TestStatusString(t *testing.T) {
	for st, want := range map[gpu.Status]string{gpu.Pending: "pending", gpu.Complete: "complete", gpu.Failed: "failed", 9: "status(9)"} {
		assert.Equal(t, want, st.String())
	}
}

func TestCompletionsPushRefusals(t *testing.T) {
	s := &orderedStream{id: 7}
	var c gpu.Completions[int]
	e1, _ := s.Record()
	e2, _ := s.Record()
	require.NoError(t, c.Push(e2, 2))
	tests := []struct {
		name string
		ev   gpu.Event
		want error
	}{
		{"never recorded", gpu.Event{}, gpu.ErrNotRecorded},
		{"other stream", gpu.MakeEvent(8, 3), gpu.ErrForeignEvent},
		{"older than last", e1, nil},
		{"same as last", e2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Push(tt.ev, 99)
			require.Error(t, err)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
			}
			assert.Equal(t, 1, c.Len(), "a refused push changes nothing")
		})
	}
}

func TestCompletionsPoll(t *testing.T) {
	s := &orderedStream{id: 1, failed: map[uint64]bool{3: true}}
	var c gpu.Completions[string]
	for i := range 5 {
		ev, _ := s.Record()
		require.NoError(t, c.Push(ev, fmt.Sprint("tok", i+1)))
	}
	var got []string
	collect := func(tok string, st gpu.Status) { got = append(got, tok+"="+st.String()) }

	n, err := c.Poll(s, collect)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing completed")
	assert.Equal(t, 1, s.queries, "an idle round asks only the oldest event")

	s.done = 3
	s.queries = 0
	n, err = c.Poll(s, collect)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, []string{"tok1=complete", "tok2=complete", "tok3=failed"}, got)
	assert.Equal(t, 4, s.queries, "three handed out plus the one still pending")
	assert.Equal(t, 2, c.Len())
}

func TestCompletionsPollErrorKeepsEvent(t *testing.T) {
	s := &orderedStream{id: 1, done: 10}
	other := &orderedStream{id: 2}
	var c gpu.Completions[int]
	ev, _ := s.Record()
	require.NoError(t, c.Push(ev, 1))
	n, err := c.Poll(other, func(int, gpu.Status) { t.Fatal("handed out on a query error") })
	assert.Zero(t, n)
	assert.ErrorIs(t, err, gpu.ErrForeignEvent)
	assert.Equal(t, 1, c.Len(), "the event stays queued")
	n, err = c.Poll(s, func(tok int, st gpu.Status) { assert.Equal(t, gpu.Complete, st) })
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// TestCompletionsModel checks Completions against a plain slice under random
// interleavings of pushes, completions, failures and polls (ring growth and
// wrap-around included).
func TestCompletionsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := &orderedStream{id: 3, failed: map[uint64]bool{}}
		var c gpu.Completions[uint64]
		var model []uint64 // tokens (= seqs) not yet handed out
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				ev, _ := s.Record()
				if err := c.Push(ev, ev.Seq()); err != nil {
					t.Fatal(err)
				}
				model = append(model, ev.Seq())
			case 1:
				s.done = min(s.issued, s.done+uint64(rapid.IntRange(0, 5).Draw(t, "complete")))
			case 2:
				if s.done < s.issued {
					s.failed[s.done+1] = true
					s.done++
				}
			case 3:
				var got []uint64
				n, err := c.Poll(s, func(tok uint64, st gpu.Status) {
					if (st == gpu.Failed) != s.failed[tok] || st == gpu.Pending {
						t.Fatalf("token %d handed out as %v", tok, st)
					}
					got = append(got, tok)
				})
				if err != nil || n != len(got) {
					t.Fatalf("Poll = %d, %v; handed %d", n, err, len(got))
				}
				var want []uint64
				for len(model) > 0 && model[0] <= s.done {
					want, model = append(want, model[0]), model[1:]
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("handed out %v, want %v", got, want)
				}
			}
			if c.Len() != len(model) {
				t.Fatalf("Len %d, model %d", c.Len(), len(model))
			}
		}
	})
}

func TestCompletionsZeroAllocSteadyState(t *testing.T) {
	s := &orderedStream{id: 1}
	var c gpu.Completions[int]
	sink := 0
	fn := func(tok int, _ gpu.Status) { sink += tok }
	for range 64 { // warm the ring
		ev, _ := s.Record()
		_ = c.Push(ev, 1)
	}
	s.done = s.issued
	_, _ = c.Poll(s, fn)
	allocs := testing.AllocsPerRun(100, func() {
		for range 32 {
			ev, _ := s.Record()
			_ = c.Push(ev, 1)
		}
		s.done = s.issued
		_, _ = c.Poll(s, fn)
	})
	assert.Zero(t, allocs)
	assert.Positive(t, sink)
}

// BenchmarkCompletionsIdle measures a progress round that finds nothing
// complete: it must cost the same with 1e6 events in flight as with 1e3.
func BenchmarkCompletionsIdle(b *testing.B) {
	for _, inflight := range []int{1000, 1000000} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			s := &orderedStream{id: 1}
			var c gpu.Completions[int]
			for i := range inflight {
				ev, _ := s.Record()
				if err := c.Push(ev, i); err != nil {
					b.Fatal(err)
				}
			}
			fn := func(int, gpu.Status) { b.Fatal("nothing should complete") }
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Poll(s, fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompletionsCycle measures one event's whole life on the simulated
// device: copy, record, push, complete, poll.
func BenchmarkCompletionsCycle(b *testing.B) {
	dev, _ := sim.New(0, 1<<20)
	st, _ := dev.NewStream()
	p, _ := dev.Alloc(4096)
	host := make([]byte, 4096)
	var c gpu.Completions[int]
	fn := func(int, gpu.Status) {}
	b.ReportAllocs()
	for b.Loop() {
		_ = st.CopyHtoD(p, host)
		ev, _ := st.Record()
		_ = c.Push(ev, 1)
		_, _ = dev.CompleteNext(st, 1)
		if n, err := c.Poll(st, fn); n != 1 || err != nil {
			b.Fatal(n, err)
		}
	}
}

func ExampleCompletions() {
	dev, _ := sim.New(0, 1<<20)
	stream, _ := dev.NewStream()
	slot, _ := dev.Alloc(4)

	var inflight gpu.Completions[string]
	for _, lease := range []string{"lease-a", "lease-b"} {
		_ = stream.CopyHtoD(slot, []byte(lease[:4]))
		ev, _ := stream.Record()
		_ = inflight.Push(ev, lease)
	}
	_, _ = dev.CompleteNext(stream, 1) // only the first copy has landed

	_, _ = inflight.Poll(stream, func(lease string, st gpu.Status) {
		fmt.Println(lease, st)
	})
	fmt.Println("still in flight:", inflight.Len())

	var never gpu.Event
	_, err := stream.Query(never)
	fmt.Println(errors.Is(err, gpu.ErrNotRecorded))
	// Output:
	// lease-a complete
	// still in flight: 1
	// true
}
