package readiness

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/staging"
)

// notifyingFetcher's attempts never answer on their own; each keeps the
// notification the engine registered, which the benchmark fires from its
// backend goroutine as a backend's completion would.
type notifyingFetcher struct{ notify chan func() }

type notifyingAttempt struct{ b *notifyingFetcher }

func (notifyingAttempt) Poll() contract.Outcome { return nil }
func (a notifyingAttempt) Notify(f func())      { a.b.notify <- f }

func (b *notifyingFetcher) Fetch(contract.CacheExtent, contract.Route) (contract.Attempt, error) {
	return notifyingAttempt{b}, nil
}
func (*notifyingFetcher) Quiesce(context.Context, []contract.Attempt) (bool, error) { return true, nil }
func (*notifyingFetcher) Settle(context.Context, []contract.Attempt) error          { return nil }
func (*notifyingFetcher) Probe(context.Context, []byte, []contract.Name) (contract.NameSet, bool, error) {
	return contract.NameSet{}, false, nil
}
func (*notifyingFetcher) OpenRoute(map[string]string) (contract.Route, error) {
	return nil, errors.ErrUnsupported
}

// BenchmarkWake measures, per answer, a backend's answer waking the engine's
// owner — the completion a contract.Notifier attempt calls puts a letter in
// the engine's mailbox and signals Wake; the owner, woken, takes the mailbox
// and hands the backend its next turn — beside a bare Go channel ping-pong
// between two goroutines: the same two hand-offs with nothing in between.
func BenchmarkWake(b *testing.B) {
	b.Run("channel", func(b *testing.B) {
		ping, pong := make(chan struct{}), make(chan struct{})
		go func() {
			for range ping {
				pong <- struct{}{}
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			ping <- struct{}{}
			<-pong
		}
		close(ping)
	})
	b.Run("engine", func(b *testing.B) {
		dev, err := sim.New(0, 1<<16)
		if err != nil {
			b.Fatal(err)
		}
		stream, _ := dev.NewStream()
		m, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 1, SlotBytes: 64})
		if err != nil {
			b.Fatal(err)
		}
		be := &notifyingFetcher{notify: make(chan func(), 1)}
		e, err := New(Config{Memory: m, TokensPerBlock: 32, RequestTimeout: time.Hour, DrainGrace: time.Hour,
			Fetcher: be, Stream: stream})
		if err != nil {
			b.Fatal(err)
		}
		ptr, _ := dev.Alloc(64)
		if _, err := e.Lend(Request{Kind: Fetch, Rows: []staging.Row{{Group: 0, Block: 0, Device: ptr}}}); err != nil {
			b.Fatal(err)
		}
		e.Progress() // granted, admitted, submitted: the engine registers its notification
		var answer func()
		select {
		case answer = <-be.notify:
		default:
			b.Fatal("the engine registered no notification with a notifying attempt")
		}
		turn := make(chan struct{})
		go func() {
			for range turn {
				answer() // the backend's completion, as its own goroutine makes it
			}
		}()
		var letters []letter
		select { // a wake-up left from the setup
		case <-e.Wake():
		default:
		}
		// The engine takes one completion per attempt; each turn stands for
		// the next attempt's, so the notice is armed again once its letter
		// is taken.
		var nt *notice
		for _, n := range e.attempts.notices {
			nt = n
		}
		if nt == nil {
			b.Fatal("the engine kept no notice for the notifying attempt")
		}
		b.ReportAllocs()
		for b.Loop() {
			turn <- struct{}{}
			<-e.Wake()
			letters = e.mail.take(letters[:0])
			if len(letters) != 1 || !letters[0].poll {
				b.Fatalf("woken with %d letters, want the one poll request", len(letters))
			}
			nt.state.Store(noticeArmed)
		}
		b.StopTimer()
		close(turn)
		// The pending lease gets Close's local cancel, and Quiesce answers
		// true: the engine drains and its goroutines stop.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := e.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	})
}
