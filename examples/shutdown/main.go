// Command shutdown is the Ctrl-C pattern for a Go program that embeds the
// kvready engine: it serves requests until SIGINT or SIGTERM, then releases
// the lease in hand and drains the engine before it exits.
//
// Two things catch an embedder out. signal.NotifyContext cancels ctx, so the
// Wait in progress returns an error wrapping context.Canceled: that is the
// signal, not a failure. And Shutdown needs a context of its own — ctx is
// already cancelled, and Shutdown(ctx) would return at once without
// draining — bounded by the containment horizon (request deadline + drain
// grace), by which every lease has settled or been contained.
//
//	go run ./examples/shutdown    # Ctrl-C to stop
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

const (
	blockBytes     = 256
	requestTimeout = 2 * time.Second
	drainGrace     = time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, stop, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx ends, then shuts the engine down. stop is called once
// ctx has ended, so that a second Ctrl-C ends the process at once.
func run(ctx context.Context, stop func(), out io.Writer) error {
	dev, err := sim.New(0, 1<<20, sim.WithLatency(sim.WallClock{}, 20*time.Microsecond))
	if err != nil {
		return err
	}
	staged, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 16, SlotBytes: blockBytes})
	if err != nil {
		return err
	}
	// Each delivery takes a few milliseconds, so a Ctrl-C usually lands in a Wait.
	store, err := mem.New(staged, mem.WithDelay(func(mem.Call) time.Duration { return 5 * time.Millisecond }))
	if err != nil {
		return err
	}
	defer store.Close()
	stream, err := dev.NewStream()
	if err != nil {
		return err
	}
	eng, err := readiness.New(readiness.Config{
		Memory: staged, TokensPerBlock: 32, Fetcher: store, Publisher: store, Stream: stream, Health: dev,
		RequestTimeout: requestTimeout, DrainGrace: drainGrace,
	})
	if err != nil {
		return err
	}

	// Blocks are named as in README.md's program: a layout id and a scope.
	layoutID := sha256.Sum256([]byte("example layout"))
	scope := sha256.Sum256([]byte("my-model:weights-rev-7"))
	id, err := staging.NewIdentity(scope[:], layoutID[:], [][]int{{0}}, []staging.Shard{staging.Whole})
	if err != nil {
		return err
	}
	served := 0
	for ; ; served++ {
		err := publishOne(ctx, eng, dev, id, served)
		if errors.Is(err, context.Canceled) {
			break // Ctrl-C: the Wait in progress returned ctx's error
		}
		if err != nil {
			return err
		}
		if served == 0 {
			fmt.Fprintln(out, "serving; Ctrl-C to stop")
		}
	}
	stop() // a second Ctrl-C ends the process at once

	// A fresh context: ctx is cancelled. Bounded by the containment horizon.
	sctx, cancel := context.WithTimeout(context.Background(), requestTimeout+drainGrace+time.Second)
	defer cancel()
	rep, err := eng.Shutdown(sctx)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintf(out, "interrupted after %d requests; drained: %v, slots quarantined: %d, leases in doubt: %d, safe to release: %v\n",
		served, rep.Drained, rep.SlotsQuarantined, rep.InDoubt, rep.SafeToRelease())
	return nil
}

// publishOne publishes block i from the device and waits until its slots are
// back. When ctx ends during a Wait it releases the lease it holds (the
// engine returns the slots once the fence is proven; Shutdown drains it) and
// returns ctx's error.
func publishOne(ctx context.Context, eng *readiness.Engine, dev *sim.Device, id *staging.Identity, i int) error {
	ptr, err := dev.Alloc(blockBytes)
	if err != nil {
		return err
	}
	if err := dev.Write(ptr, bytes.Repeat([]byte{byte(i)}, blockBytes)); err != nil {
		return err
	}
	name, err := id.Name(0, staging.Key(sha256.Sum256(fmt.Appendf(nil, "block %d", i))))
	if err != nil {
		return err
	}
	h, err := eng.Lend(readiness.Request{Kind: readiness.Publish, Rows: []staging.Row{{Name: name, Block: 0, Device: ptr}}})
	if err != nil {
		return err
	}
	if _, err := eng.Wait(ctx, h, readiness.UntilSettled); err != nil {
		return errors.Join(err, eng.Release(h))
	}
	if err := eng.Release(h); err != nil {
		return err
	}
	_, err = eng.Wait(ctx, h, readiness.UntilReleased)
	return err
}
