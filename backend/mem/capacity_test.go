package mem_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

// bound is how long a test waits for something that should happen at once;
// it matters only if something hangs.
const bound = 10 * time.Second

func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// extentOf is an extent of the units idx, unit i named name(i) in slot i.
func extentOf(t testing.TB, idx ...int) contract.CacheExtent {
	units := make([]contract.Unit, len(idx))
	for j, i := range idx {
		units[j] = contract.Unit{Name: name(i), Local: i}
	}
	e, err := contract.NewCacheExtent([]byte(extName), units, false)
	require.NoError(t, err)
	return e
}

// deliver submits and waits until Quiesce proves the attempt over.
func deliver(t testing.TB, b *mem.Backend, a contract.Attempt, err error) contract.Outcome {
	t.Helper()
	require.NoError(t, err)
	ok, err := b.Quiesce(bounded(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok)
	return a.Poll()
}

// servedIdx lists the indexes whose names an outcome served, sorted.
func servedIdx(o contract.Outcome) []int {
	d, ok := o.(contract.Delivered)
	if !ok {
		return nil
	}
	var idx []int
	for n := range d.Served.All() {
		idx = append(idx, int(n[0]))
	}
	sort.Ints(idx)
	return idx
}

// storedIdx lists which of names 0..n-1 the store holds, read with Get
// (which is not a use).
func storedIdx(b *mem.Backend, n int) []int {
	var idx []int
	for i := range n {
		if _, ok := b.Get(extName, name(i)); ok {
			idx = append(idx, i)
		}
	}
	return idx
}

// A step acts on the backend; a row of steps checks what the store keeps.
type step func(t *testing.T, b *mem.Backend, st *staging)

func put(idx ...int) step {
	return func(t *testing.T, b *mem.Backend, st *staging) {
		for _, i := range idx {
			b.Put(extName, name(i), content(i))
		}
	}
}

func fetch(idx ...int) step {
	return func(t *testing.T, b *mem.Backend, st *staging) {
		a, err := b.Fetch(extentOf(t, idx...), nil)
		deliver(t, b, a, err)
	}
}

func publish(idx ...int) step {
	return func(t *testing.T, b *mem.Backend, st *staging) {
		for _, i := range idx {
			copy(st.rows[i], content(i))
		}
		a, err := b.Publish(extentOf(t, idx...))
		deliver(t, b, a, err)
	}
}

func get(i int) step {
	return func(t *testing.T, b *mem.Backend, st *staging) {
		_, ok := b.Get(extName, name(i))
		require.True(t, ok)
	}
}

func probe(idx ...int) step {
	return func(t *testing.T, b *mem.Backend, st *staging) {
		names := make([]contract.Name, len(idx))
		for j, i := range idx {
			names[j] = name(i)
		}
		hits, answered, err := b.Probe(bounded(t), []byte(extName), names)
		require.NoError(t, err)
		require.True(t, answered)
		require.Equal(t, len(idx), hits.Len())
	}
}

func TestCapacityEvictsLeastRecentlyUsed(t *testing.T) {
	tests := []struct {
		name      string
		capacity  int
		policy    func(mem.Call) mem.Mode
		steps     []step
		stored    []int
		evictions uint64
	}{
		{"puts alone evict in insertion order", 2, nil,
			[]step{put(0, 1, 2)}, []int{1, 2}, 1},
		{"capacity 1 keeps the last", 1, nil,
			[]step{put(0, 1, 2, 3)}, []int{3}, 3},
		{"a full store under capacity evicts nothing", 3, nil,
			[]step{put(0, 1, 2)}, []int{0, 1, 2}, 0},
		{"replacing a row is a use, not an eviction", 2, nil,
			[]step{put(0, 1, 0, 2)}, []int{0, 2}, 1},
		{"a served fetch hit is a use", 2, nil,
			[]step{put(0, 1), fetch(0), put(2)}, []int{0, 2}, 1},
		{"a fetch miss uses nothing", 2, nil,
			[]step{put(0, 1), fetch(5), put(2)}, []int{1, 2}, 1},
		{"Get is not a use", 2, nil,
			[]step{put(0, 1), get(0), put(2)}, []int{1, 2}, 1},
		{"Probe is not a use", 2, nil,
			[]step{put(0, 1), probe(0), put(2)}, []int{1, 2}, 1},
		{"a publication is a use", 2, nil,
			[]step{put(0, 1), publish(0), put(2)}, []int{0, 2}, 1},
		{"a publication beyond capacity keeps its last rows", 2, nil,
			[]step{publish(0, 1, 2, 3)}, []int{2, 3}, 2},
		{"a hit that Partial does not serve is not a use", 3, func(c mem.Call) mem.Mode {
			if c.Op == mem.OpFetch {
				return mem.Partial
			}
			return mem.Normal
		}, []step{put(0, 1, 2), fetch(0, 1), put(3)}, []int{0, 2, 3}, 1},
		{"the same fetch served whole uses both", 3, nil,
			[]step{put(0, 1, 2), fetch(0, 1), put(3)}, []int{0, 1, 3}, 1},
		{"a Miss-mode fetch uses nothing", 2, func(c mem.Call) mem.Mode {
			if c.Op == mem.OpFetch {
				return mem.Miss
			}
			return mem.Normal
		}, []step{put(0, 1), fetch(0), put(2)}, []int{1, 2}, 1},
		{"capacity 0 is unbounded", 0, nil,
			[]step{put(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []mem.Option{mem.WithCapacity(tt.capacity)}
			if tt.policy != nil {
				opts = append(opts, mem.WithPolicy(tt.policy))
			}
			st := newStaging(10)
			b := newBackend(t, st, opts...)
			for _, s := range tt.steps {
				s(t, b, st)
			}
			assert.Equal(t, tt.stored, storedIdx(b, 10))
			assert.Equal(t, len(tt.stored), b.Len())
			assert.Equal(t, tt.evictions, b.Evictions())
			for _, i := range tt.stored {
				row, _ := b.Get(extName, name(i))
				assert.Equal(t, string(content(i)), string(row), "row %d keeps its content", i)
			}
		})
	}
}

// An evicted name is a miss for a fetch and a probe, never a failure.
func TestEvictedNameIsAMiss(t *testing.T) {
	st := newStaging(3)
	b := newBackend(t, st, mem.WithCapacity(1))
	b.Put(extName, name(0), content(0))
	b.Put(extName, name(1), content(1)) // evicts 0
	require.Equal(t, uint64(1), b.Evictions())

	a, err := b.Fetch(extentOf(t, 0), nil)
	o := deliver(t, b, a, err)
	assert.Equal(t, contract.Delivered{}, o, "a miss, not Failed")
	assert.Equal(t, string(untouched()), string(st.rows[0]), "a miss touches nothing")

	a, err = b.Fetch(extentOf(t, 0, 1), nil)
	o = deliver(t, b, a, err)
	assert.Equal(t, []int{1}, servedIdx(o))
	assert.Equal(t, string(content(1)), string(st.rows[1]))

	hits, answered, err := b.Probe(bounded(t), []byte(extName), []contract.Name{name(0), name(1)})
	require.NoError(t, err)
	assert.True(t, answered)
	assert.Equal(t, 1, hits.Len())
	assert.True(t, hits.Has(name(1)))
}

// Units are resolved lazily: a name evicted after the submission but before
// the delivery's goroutine reads it is a miss.
func TestEvictedAfterSubmissionIsAMiss(t *testing.T) {
	st := newStaging(3)
	gate := make(chan struct{})
	b := newBackend(t, st, mem.WithCapacity(1), mem.WithGate(func(c mem.Call) <-chan struct{} {
		if c.Op == mem.OpFetch {
			return gate
		}
		return nil
	}))
	b.Put(extName, name(0), content(0))
	a, err := b.Fetch(extentOf(t, 0), nil)
	require.NoError(t, err)
	b.Put(extName, name(1), content(1)) // evicts 0 while the fetch is held
	close(gate)
	assert.Equal(t, contract.Delivered{}, deliver(t, b, a, nil))
	assert.Equal(t, string(untouched()), string(st.rows[0]))
}

// The backend keeps the extent it was handed and reads its units only on the
// delivery's goroutine, after the gate: an extent rebuilt in place before that
// (which a correct engine never does before Quiesce answered true) is what the
// backend serves.
func TestUnitsResolvedLazily(t *testing.T) {
	st := newStaging(2)
	gate := make(chan struct{})
	b := newBackend(t, st, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
	b.Put(extName, name(0), content(0))
	b.Put(extName, name(1), content(1))
	ext := extentOf(t, 0)
	a, err := b.Fetch(ext, nil)
	require.NoError(t, err)
	// Rebuilt in place: same length, so the backing array is reused.
	require.NoError(t, ext.Reset([]byte(extName), []contract.Unit{{Name: name(1), Local: 1}}, false))
	close(gate)
	o := deliver(t, b, a, nil)
	assert.Equal(t, []int{1}, servedIdx(o), "the rebuilt unit is the one served")
	assert.Equal(t, string(untouched()), string(st.rows[0]))
	assert.Equal(t, string(content(1)), string(st.rows[1]))
}

func TestNewRefusesBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []mem.Option
		want []string
	}{
		{"negative capacity", []mem.Option{mem.WithCapacity(-1)}, []string{"WithCapacity(-1)"}},
		{"negative not-yet count", []mem.Option{mem.WithQuiesceNotYet(-2)}, []string{"WithQuiesceNotYet(-2)"}},
		{"negative byte bound", []mem.Option{mem.WithCapacityBytes(-3)}, []string{"WithCapacityBytes(-3)"}},
		{"every mistake at once", []mem.Option{mem.WithCapacity(-1), mem.WithQuiesceNotYet(-2), mem.WithPolicy(nil)},
			[]string{"WithCapacity(-1)", "WithQuiesceNotYet(-2)", "WithPolicy(nil)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := mem.New(newStaging(1), tt.opts...)
			assert.Nil(t, b)
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

// TestCapacityBytes: the byte bound evicts the least recently used rows
// until a new one fits, keeps Bytes within it, refuses a row larger than the
// whole bound (a publication reports it unaccepted, never failed), and a
// replaced row counts only its new size.
func TestCapacityBytes(t *testing.T) {
	rows := newStaging(4)
	b, err := mem.New(rows, mem.WithCapacityBytes(2*rowSize+rowSize/2))
	require.NoError(t, err)
	defer b.Close()
	b.Put(extName, name(0), make([]byte, rowSize))
	b.Put(extName, name(1), make([]byte, rowSize))
	assert.Equal(t, int64(2*rowSize), b.Bytes())
	a, err := b.Fetch(extentOf(t, 0), nil)
	assert.Equal(t, []int{0}, servedIdx(deliver(t, b, a, err))) // 0 is now the most recent
	b.Put(extName, name(2), make([]byte, rowSize))              // evicts 1, the least recent
	assert.Equal(t, []int{0, 2}, storedIdx(b, 4))
	assert.Equal(t, uint64(1), b.Evictions())
	assert.LessOrEqual(t, b.Bytes(), int64(2*rowSize+rowSize/2))

	b.Put(extName, name(2), make([]byte, rowSize/2)) // a replacement counts its new size
	assert.Equal(t, int64(rowSize+rowSize/2), b.Bytes())
	assert.Equal(t, uint64(1), b.Evictions(), "a replacement is no eviction")

	small, err := mem.New(rows, mem.WithCapacityBytes(rowSize-1))
	require.NoError(t, err)
	defer small.Close()
	a, err = small.Publish(extentOf(t, 3))
	o := deliver(t, small, a, err)
	assert.Equal(t, contract.Delivered{}, o, "a row larger than the bound is unaccepted, not failed")
	assert.Zero(t, small.Len())
	assert.Zero(t, small.Bytes())
}

// ExampleWithCapacity: a store of two rows evicts the least recently used
// when a third arrives; fetching the evicted name is a miss, not a failure.
func ExampleWithCapacity() {
	rows := newStaging(3)
	b, _ := mem.New(rows, mem.WithCapacity(2))
	defer b.Close()
	b.Put(extName, name(0), []byte("kv-row-0"))
	b.Put(extName, name(1), []byte("kv-row-1"))
	b.Put(extName, name(2), []byte("kv-row-2")) // evicts row 0, the least recently used

	units := []contract.Unit{{Name: name(0), Local: 0}, {Name: name(1), Local: 1}}
	ext, _ := contract.NewCacheExtent([]byte(extName), units, false)
	a, _ := b.Fetch(ext, nil)
	quiet, _ := b.Quiesce(context.Background(), []contract.Attempt{a})
	fmt.Println(a.Poll(), quiet)
	fmt.Printf("%s %s\n", rows.rows[0], rows.rows[1])
	fmt.Println("rows stored:", b.Len(), "evicted:", b.Evictions())
	// Output:
	// delivered(1 served) true
	// ........ kv-row-1
	// rows stored: 2 evicted: 1
}

// BenchmarkPut stores rows under ever new names: unbounded, and at capacity,
// where every Put evicts (and reuses the evicted entry: the copy of the row is
// its only allocation).
func BenchmarkPut(b *testing.B) {
	for _, capacity := range []int{0, 1024} {
		b.Run(fmt.Sprintf("capacity=%d", capacity), func(b *testing.B) {
			be, err := mem.New(newStaging(1), mem.WithCapacity(capacity))
			require.NoError(b, err)
			defer be.Close()
			row := content(0)
			var n contract.Name
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				n[0], n[1], n[2] = byte(i), byte(i>>8), byte(i>>16)
				be.Put(extName, n, row)
			}
		})
	}
}
