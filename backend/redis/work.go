package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// batch is one pipelined network call: a run of consecutive units of one
// attempt. A worker fills sinks (fetch) and errs, then hands the batch back
// on done. Only the worker touches a batch until it is handed back, and only
// the attempt goroutine after.
type batch struct {
	ctx       context.Context // the attempt's: its deadline bounds the call
	cancelled <-chan struct{} // closed when the attempt was asked to cancel
	op        op
	ttl       time.Duration
	lo        int      // the first unit's index in the plan
	keys      []string // one per unit
	// bufs are, for a fetch, what each value is read into: the staging rows
	// themselves (direct) or scratch of the rows' lengths; for a
	// publication, the values to write: the staging rows (direct) or copies.
	bufs   [][]byte
	tee    [][]byte // FetchTee: each unit's second buffer (nil: none, or no tee at all)
	lens   []int    // fetch into scratch: each row's slot_bytes, the scratch's length
	pooled bool     // bufs are the backend's own (scratch, copies), not staging rows
	sinks  []sink   // fetch: each reply, as it was read into bufs
	errs   []error  // nil or the failure of each command
	done   chan *batch
}

// errCancelled is what a worker records for a batch it did not send because
// its attempt was asked to cancel.
var errCancelled = errors.New("not sent: the attempt was asked to cancel")

// errNotSent is what a worker records for a batch it did not send because
// the store is known down.
var errNotSent = fmt.Errorf("not sent: %w (the breaker opened while the attempt waited for a worker)", ErrUnavailable)

// unit returns the plan index of the batch's unit i.
func (j *batch) unit(i int) int { return j.lo + i }

// split cuts a plan into batches of at most the configured size, sharing one
// allocation per field. A fetch's batches read straight into the staging rows
// when direct, else into the backend's scratch.
func (b *Backend) split(ctx context.Context, cancelled <-chan struct{}, p *plan, direct bool) []*batch {
	n := len(p.keys)
	size := b.set.batch
	if p.op == opPublish && !b.set.batched && len(p.rows) > 0 {
		size = publishBatch(n, size, b.procs, len(p.rows[0]))
	}
	count := (n + size - 1) / size
	batches := make([]batch, count)
	out := make([]*batch, count)
	bufs := make([][]byte, n)
	var sinks []sink
	var lens []int
	switch {
	case p.op == opFetch && direct:
		sinks = make([]sink, n)
		copy(bufs, p.rows)
	case p.op == opFetch:
		sinks, lens = make([]sink, n), make([]int, n)
		for i, row := range p.rows {
			lens[i] = len(row)
		}
	}
	errs := make([]error, n)
	for k := range batches {
		lo, hi := k*size, min((k+1)*size, n)
		j := &batches[k]
		*j = batch{ctx: ctx, cancelled: cancelled, op: p.op, ttl: b.set.ttl, lo: lo, keys: p.keys[lo:hi], bufs: bufs[lo:hi], errs: errs[lo:hi]}
		if p.op == opFetch {
			j.sinks = sinks[lo:hi]
			if p.tee != nil {
				j.tee = p.tee[lo:hi]
			}
			if !direct {
				j.lens, j.pooled = lens[lo:hi], true // the worker takes scratch when it sends
			}
		}
		out[k] = j
	}
	return out
}

// publishBatch is how many keys one call of a publication of n units of
// rowBytes each carries when WithBatch was not given. A call of batch small
// rows is quick, and calls side by side pay for themselves; a call of
// bigCall bytes or more is a thread writing as fast as the kernel takes it,
// and on a small machine more of them than cores (the server's own thread
// among them) only take turns, and cost a hand-off each: then the lease is
// at most one call per two cores, never calls smaller than batch. Measured
// on 2 cores shared with the server (docs/backend-redis.md): 64 KiB rows
// publish at 0.92× bare MSET in calls of 8 and 0.73× in one call; 512 KiB
// rows at 0.78× in calls of 8 and 0.90–0.95× in one. With a call's writes
// gathered into one writev (gather.go), one call of 16 64 KiB rows still
// moved 0.85× of what calls of 8 moved, and calls of 4 0.85×.
func publishBatch(n, batch, procs, rowBytes int) int {
	if rowBytes*batch < bigCall {
		return batch
	}
	calls := max(1, procs/2)
	return max(batch, (n+calls-1)/calls)
}

// bigCall is the size of a call from which a publication's calls are few.
const bigCall = 2 << 20

// work is one worker goroutine of the bounded pool; wire is its slot of
// onWire.
func (b *Backend) work(wire *atomic.Int64) {
	defer b.workers.Done()
	for {
		select {
		case j := <-b.jobs:
			b.call(j, wire)
			wire.Store(0) // after the call's verdict was observed
			j.done <- j   // buffered for every batch of the attempt: never blocks
		case <-b.ctx.Done():
			return
		}
	}
}

// call runs one batch as a pipeline, bounded by the attempt's deadline. A
// fetch streams each reply through a sink into its buffer (a staging row, for
// a direct fetch); a publication reads the values it was given (staging rows,
// for a direct one). Either way the buffers are touched until the pipeline
// returns, and not after.
func (b *Backend) call(j *batch, wire *atomic.Int64) {
	err := j.ctx.Err() // the attempt has ended: do not bother the server
	select {
	case <-j.cancelled:
		err = errCancelled
	default:
	}
	if err == nil && b.brk.open.Load() {
		err = errNotSent
	}
	if err != nil {
		for i := range j.errs {
			j.errs[i] = err
		}
		return
	}
	var pipe goredis.Pipeliner
	if j.op == opPublish && b.pub != nil {
		pipe = b.pub.Pipeline()
	} else {
		pipe = b.client.Pipeline()
	}
	start := time.Now()
	wire.Store(start.UnixNano())
	var execErr error
	switch j.op {
	case opFetch:
		cmds := make([]*goredis.RawWriteToCmd, len(j.keys))
		for i, k := range j.keys {
			// The reply is streamed to the sink, which lands a value only
			// once its header has said it has the row's length.
			if j.pooled {
				j.bufs[i] = b.bufs.get(j.lens[i])
			}
			j.sinks[i].reset(j.bufs[i])
			if j.tee != nil && !j.pooled {
				// Into scratch, the tee is written when the attempt copies
				// the value into its row (take), not here.
				j.sinks[i].tee = j.tee[i]
			}
			cmds[i] = goredis.NewRawWriteToCmd(j.ctx, &j.sinks[i], "get", k)
			_ = pipe.Process(j.ctx, cmds[i]) // queues it: a pipeline's Process never fails
		}
		_, execErr = pipe.Exec(j.ctx)
		for i, c := range cmds {
			j.errs[i] = c.Err()
		}
		j.unattributed(execErr)
	case opPublish:
		execErr = b.publish(pipe, j)
	}
	// The call went to the store: what it met says whether the store is up.
	// It was out no longer than its context allowed, however late this
	// goroutine ran again: a loaded machine must not make a call bounded
	// under hungFloor look like a hung store.
	took := time.Since(start)
	if dl, ok := j.ctx.Deadline(); ok {
		took = min(took, dl.Sub(start))
	}
	b.observe(judge(execErr, took, b.set.timeout), execErr, start)
}

// wholeKeys is the most names one MSETNX of a publication carries. A name
// stored already makes the command store none of them, and then its values go
// again, so a longer command would send more twice.
const wholeKeys = 16

// publish writes a publication's batch on pipe and returns the pipeline's
// error. Every unit is then stored, by this call or before it, or failed.
//
// Names are content addresses, so a stored name is never written again (SET
// NX: it keeps its value and its expiry). Without a TTL, over Open's own
// client to one Redis server (b.whole), a run of up to wholeKeys names goes
// as one MSETNX (until the server refuses it: refused), which
// stores all of them or, when one is stored already, none: one command for
// the run, as bare MSET sends, where one SET NX a name cost a 64 KiB
// publication about a sixth of its rate on the server's side
// (docs/backend-redis.md, "One command a run of names"). The runs that stored
// none go again, a SET NX a name, in a second pipeline of the same call; a
// TTL, which MSETNX cannot set, has every name go that way.
func (b *Backend) publish(pipe goredis.Pipeliner, j *batch) error {
	n := len(j.keys)
	again := []int{0, n} // [lo, hi) ranges of names to write one by one
	if b.whole && !b.wholeRefused.Load() && j.ttl == 0 && n > 1 {
		args := make([]any, 2*n)
		for i, k := range j.keys {
			args[2*i], args[2*i+1] = k, j.bufs[i]
		}
		runs := make([]*goredis.BoolCmd, 0, (n+wholeKeys-1)/wholeKeys)
		for lo := 0; lo < n; lo += wholeKeys {
			runs = append(runs, pipe.MSetNX(j.ctx, args[2*lo:2*min(lo+wholeKeys, n)]...))
		}
		_, err := pipe.Exec(j.ctx)
		if err != nil && refused(err) {
			// Exec's error is the first failed command's: the call failed
			// only if another failed otherwise.
			err = nil
			for _, c := range runs {
				if e := c.Err(); e != nil && !refused(e) {
					err = e
					break
				}
			}
		}
		again = again[:0]
		for r, c := range runs {
			lo, hi := r*wholeKeys, min((r+1)*wholeKeys, n)
			var fail error
			switch e := c.Err(); {
			case e != nil && refused(e):
				b.wholeRefused.Store(true)
				if fail = err; err == nil {
					again = append(again, lo, hi)
				}
			case e != nil:
				fail = e
			case c.Val(): // stored
			case err != nil: // stored none, and the call failed: not sent again
				fail = err
			default:
				again = append(again, lo, hi)
			}
			for i := lo; i < hi; i++ {
				j.errs[i] = fail
			}
		}
		if err != nil || len(again) == 0 {
			j.unattributed(err)
			return err
		}
	}
	cmds := make([]*goredis.BoolCmd, n)
	for r := 0; r < len(again); r += 2 {
		for i := again[r]; i < again[r+1]; i++ {
			cmds[i] = pipe.SetNX(j.ctx, j.keys[i], j.bufs[i], j.ttl)
		}
	}
	_, err := pipe.Exec(j.ctx)
	for i, c := range cmds {
		if c != nil {
			j.errs[i] = c.Err() // set or already there: either way the unit is stored
		}
	}
	j.unattributed(err)
	return err
}

// refused reports whether err is the server's answer (or a proxy's in front
// of it) that it will not run MSETNX here, where it may well run SET NX:
// names across shards of one endpoint (CROSSSLOT), an ACL that allows SET but
// not MSETNX (NOPERM), a command it does not know or support. The run's names
// then go as SET NX, and the backend sends no MSETNX again.
func refused(err error) bool {
	for _, p := range []string{"CROSSSLOT", "NOPERM", "unknown command", "unsupported command"} {
		if goredis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// unattributed fails every command of the batch that reports no error of its
// own when the pipeline as a whole failed with an error no command carries
// (a client hook, say, refused it before anything was read): a command that
// never ran must not read as an empty value.
func (j *batch) unattributed(err error) {
	if err == nil {
		return
	}
	for _, e := range j.errs {
		if e == err {
			return
		}
	}
	for i := range j.errs {
		if j.errs[i] == nil {
			j.errs[i] = err
		}
	}
}

// bufPool recycles the backend's own value buffers by length (a handful of
// slot widths). A buffer goes back only once no worker can still write or
// read it. It keeps what it is given back, up to keep buffers per length and
// keepBytes in all, rather than leaving them to a sync.Pool that every
// garbage collection empties: fetching large rows would otherwise allocate
// and clear its scratch again after each collection.
type bufPool struct {
	mu    sync.Mutex
	free  map[int][][]byte
	bytes int
	keep  int // buffers per length
}

// keepBytes bounds what a bufPool holds on to.
const keepBytes = 64 << 20

func (p *bufPool) get(n int) []byte {
	p.mu.Lock()
	if l := p.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[n] = l[:len(l)-1]
		p.bytes -= n
		p.mu.Unlock()
		return b
	}
	p.mu.Unlock()
	return make([]byte, n)
}

func (p *bufPool) put(b []byte) {
	n := len(b)
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free[n]) >= p.keep || p.bytes+n > keepBytes {
		return // the garbage collector takes it
	}
	if p.free == nil {
		p.free = map[int][][]byte{}
	}
	p.free[n] = append(p.free[n], b)
	p.bytes += n
}
