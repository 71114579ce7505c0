package peer_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	gsim "github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// TestSenderSlotsOutliveTheirPuts: the shipped engine publishes through a
// Sender over the simulated network to a Receiver. A put reads its source
// when it lands, so the moment a publish lease's slots return to the
// allocator the test overwrites them with a mark; a slot returned while one
// of its puts was still in flight would put the mark — or the next lease's
// content, copied in over it — into the receiver's page. Under timeouts,
// cancels, releases and receivers that die, no page ever holds anything but
// what it held before the transfer or its own request's content, and a
// publication the sender called delivered put its content in every page.
func TestSenderSlotsOutliveTheirPuts(t *testing.T) {
	var delivered, failed int
	rapid.Check(t, func(t *rapid.T) {
		w := newSendWorld(t)
		defer w.stop()
		w.run()
		st := w.eng.Stats()
		delivered += int(st.Outcomes[readiness.Served])
		failed += int(st.Outcomes[readiness.Failed] + st.Outcomes[readiness.TimedOut] + st.Outcomes[readiness.Cancelled])
	})
	if delivered == 0 || failed == 0 {
		t.Fatalf("the property never exercised both ends: %d delivered, %d failed", delivered, failed)
	}
}

const (
	released    = 0xBD // what a returned slot is overwritten with
	untouched   = 0xD0 // a receiver page before any put
	sendSlots   = 4
	maxRequests = 24
)

type sendLease struct {
	serial  int
	h       readiness.Handle
	slots   [][]byte
	dst     [][]byte // the receiver's pages for it
	fetch   contract.Attempt
	content byte
	gone    bool
}

type sendWorld struct {
	t       *rapid.T
	net     *sim.Network
	decode  *sim.Node
	prefill *sim.Node
	clock   *gsim.ManualClock
	dev     *gsim.Device
	mem     *staging.Memory
	send    *peer.Sender
	recv    *peer.Receiver
	eng     *readiness.Engine
	leases  []*sendLease
	byName  map[contract.Name]*sendLease
	byH     map[readiness.Handle]*sendLease
	dst     [][]byte // every receiver page ever handed out, in order
}

type spySender struct {
	*peer.Sender
	w *sendWorld
}

func (s spySender) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	if l := s.w.byName[ext.Unit(0).Name]; l != nil {
		for _, u := range ext.All() {
			row, _ := s.w.mem.Row(u.LocalGroup, u.Local)
			l.slots = append(l.slots, row)
		}
	}
	return s.Sender.Publish(ext)
}

func newSendWorld(t *rapid.T) *sendWorld {
	net, err := sim.New(rapid.Uint64().Draw(t, "seed"), sim.Faults{
		ReportsOvertakeData: rapid.Bool().Draw(t, "reports overtake data"),
		PutsOutliveSender:   rapid.Bool().Draw(t, "puts outlive sender"),
	})
	must(t, err)
	w := &sendWorld{t: t, net: net, clock: gsim.NewManualClock(epoch), byName: map[contract.Name]*sendLease{}, byH: map[readiness.Handle]*sendLease{}}
	w.decode, err = net.Join("decode")
	must(t, err)
	w.prefill, err = net.Join("prefill")
	must(t, err)
	w.mem, err = staging.NewMemory(staging.GoHeap, staging.Group{Slots: sendSlots, SlotBytes: pageLen})
	must(t, err)
	w.dev, err = gsim.New(0, 1<<20, gsim.WithLatency(w.clock, 0))
	must(t, err)
	stream, err := w.dev.NewStream()
	must(t, err)
	limits := transfer.Limits{Sessions: 64, Tombstones: 8, Window: time.Hour}
	_, pinc := w.prefill.Self()
	w.send, err = peer.NewSender(peer.SenderConfig{Transport: w.prefill, Capabilities: all("prefill", pinc),
		Slot:    func(u contract.Unit) []byte { row, _ := w.mem.Row(u.LocalGroup, u.Local); return row },
		Timeout: time.Duration(rapid.SampledFrom([]int{20, 60, 400}).Draw(t, "sender timeout")) * time.Millisecond,
		Clock:   w.clock.Now, Limits: limits})
	must(t, err)
	w.connect()
	w.eng, err = readiness.New(readiness.Config{Memory: w.mem, TokensPerBlock: blockTokens, Publisher: spySender{w.send, w},
		Stream: stream, Clock: w.clock, RequestTimeout: time.Second, DrainGrace: 2 * time.Second,
		RetryBackoff: time.Millisecond, MaxRetryBackoff: 10 * time.Millisecond,
		OnTransition: w.moved, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, err)
	return w
}

// connect starts the decode side's current life's Receiver (its offers go
// over the wire) and agrees both sides.
func (w *sendWorld) connect() {
	if w.recv != nil {
		_ = w.recv.Close()
	}
	_, dinc := w.decode.Self()
	_, pinc := w.prefill.Self()
	var err error
	w.recv, err = peer.NewReceiver(peer.ReceiverConfig{Transport: w.decode, Capabilities: all("decode", dinc),
		Slot: func(u contract.Unit) []byte {
			if u.Local < 0 || u.Local >= len(w.dst) {
				return nil
			}
			return w.dst[u.Local]
		},
		Timeout: time.Hour, Grace: time.Hour, Clock: w.clock.Now, Limits: transfer.Limits{Sessions: 64, Tombstones: 8, Window: time.Hour}})
	must(w.t, err)
	_, err = w.recv.Connect(all("prefill", pinc))
	must(w.t, err)
	_, err = w.send.Connect(all("decode", dinc))
	must(w.t, err)
}

func (w *sendWorld) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = w.eng.Shutdown(ctx)
	_ = w.send.Close()
	_ = w.recv.Close()
}

// lend publishes one request of 1–3 pages: the receiver expects and fetches
// it into pages of its own, the sender expects it, the engine lends it.
func (w *sendWorld) lend() {
	if len(w.leases) >= maxRequests {
		return
	}
	t := w.t
	l := &sendLease{serial: len(w.leases) + 1}
	l.content = byte(l.serial)
	n := rapid.IntRange(1, 3).Draw(t, "pages")
	c := chunk(&testing.T{}, n, false)
	req := transfer.RequestID(l.serial)
	rp, err := w.recv.Expect(peer.Plan{Request: req, Attempt: 1, Writers: []transfer.AccessorID{kvP}, Chunk: c, BlockTokens: blockTokens})
	must(t, err)
	units := make([]contract.Unit, n)
	for i, pg := range rp {
		units[i] = contract.Unit{Name: pg.Name, Local: len(w.dst)}
		page := make([]byte, pageLen)
		fillBytes(page, untouched)
		w.dst = append(w.dst, page)
		l.dst = append(l.dst, page)
	}
	ext, err := contract.NewCacheExtent(nil, units, true)
	must(t, err)
	if l.fetch, err = w.recv.Fetch(ext, nil); err != nil {
		t.Fatalf("the receiver refused request %d: %v", l.serial, err)
	}
	sp, err := w.send.Expect(peer.SendPlan{Request: req, Attempt: 1, To: "decode", As: kvP, Chunk: c, BlockTokens: blockTokens})
	must(t, err)
	r := readiness.Request{Kind: readiness.Publish}
	for _, pg := range sp {
		dev, err := w.dev.Alloc(pageLen)
		must(t, err)
		content := make([]byte, pageLen)
		fillBytes(content, l.content)
		must(t, w.dev.Write(dev, content))
		r.Rows = append(r.Rows, staging.Row{Name: pg.Name, Group: 0, Block: pg.Block, Device: dev})
		w.byName[pg.Name] = l
	}
	l.h, err = w.eng.Lend(r)
	must(t, err)
	w.leases = append(w.leases, l)
	w.byH[l.h] = l
}

// moved: a lease's slots returning are overwritten at once.
func (w *sendWorld) moved(tr readiness.Transition) {
	l := w.byH[tr.Lease]
	if l == nil || (tr.To != readiness.StateReleased && tr.To != readiness.StateQuarantined) {
		return
	}
	l.gone = true
	if tr.To == readiness.StateReleased {
		for _, s := range l.slots {
			fillBytes(s, released)
		}
	}
}

// step lets the network perform up to n actions, both sides progressing
// after each; it stops once two steps in a row found nothing to do.
func (w *sendWorld) step(n int) {
	idle := 0
	for range n {
		stepped := w.net.Step()
		w.recv.Progress()
		w.send.Progress()
		if idle = idle + 1; stepped {
			idle = 0
		}
		if idle == 2 {
			return
		}
	}
}

func (w *sendWorld) sync() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.eng.Sync(ctx); err != nil {
		w.t.Fatalf("the engine did not become idle: %v", err)
	}
}

func (w *sendWorld) pick(label string) *sendLease {
	var live []*sendLease
	for _, l := range w.leases {
		if !l.gone {
			live = append(live, l)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return rapid.SampledFrom(live).Draw(w.t, label)
}

// check: a receiver page holds what it held before, or its request's
// content, never a mark or another request's bytes.
func (w *sendWorld) check() {
	for _, l := range w.leases {
		for i, page := range l.dst {
			for j, v := range page {
				if v != untouched && v != l.content {
					w.t.Fatalf("request %d's page %d holds %#x at byte %d: a put read its slot after the slot returned (%#x is the mark, other values another request's content)", l.serial, i, v, j, released)
				}
			}
		}
	}
}

func (w *sendWorld) run() {
	for range rapid.IntRange(1, 60).Draw(w.t, "actions") {
		switch rapid.IntRange(0, 8).Draw(w.t, "action") {
		case 0, 1:
			w.lend()
		case 2, 3, 4:
			w.step(rapid.IntRange(1, 8).Draw(w.t, "steps"))
		case 5:
			w.clock.Advance(time.Duration(rapid.IntRange(1, 50).Draw(w.t, "ms")) * time.Millisecond)
		case 6:
			if l := w.pick("cancel"); l != nil {
				_, _ = w.eng.Cancel(l.h)
			}
		case 7:
			if l := w.pick("release"); l != nil {
				_ = w.eng.Release(l.h)
			}
		case 8:
			if rapid.IntRange(0, 5).Draw(w.t, "really restart") == 0 {
				// the decode process dies: its puts in flight fail, and its
				// next life gets a Receiver of its own
				node, err := w.net.Restart("decode")
				must(w.t, err)
				w.decode = node
				w.connect()
			}
		}
		w.sync()
		w.check()
	}
	w.settle()
}

func (w *sendWorld) settle() {
	for range 30 {
		w.step(2000)
		w.clock.Advance(50 * time.Millisecond)
		w.send.Progress()
		w.sync()
		for _, l := range w.leases {
			if !l.gone {
				_ = w.eng.Release(l.h)
			}
		}
		w.sync()
		w.check()
		if !slices.ContainsFunc(w.leases, func(l *sendLease) bool { return !l.gone }) {
			break
		}
	}
	for _, l := range w.leases {
		if !l.gone {
			info, _ := w.eng.Lease(l.h)
			w.t.Fatalf("request %d is still %v (%v: %q) after every deadline and the network went quiet", l.serial, info.State, info.Outcome, info.Reason)
		}
		if o, ok := l.fetch.Poll().(contract.Delivered); ok && o.Served.Len() == len(l.dst) {
			for i, page := range l.dst {
				for _, v := range page {
					if v != l.content {
						w.t.Fatalf("request %d delivered, but its page %d holds %#x", l.serial, i, v)
					}
				}
			}
		}
	}
}
