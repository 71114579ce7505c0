package peer_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	gsim "github.com/kvready/kvready/gpu/sim"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// A decode process fetches a request's two pages from a prefill writer
// into its device, through the engine: the staging slots the engine lends
// are the pages the writer puts into, and the engine copies them into the
// device — layer by layer — only once the receiver proved every writer
// settled. Where the request may resume comes from the plan and the
// delivery's token_end.
func Example() {
	net, _ := sim.New(1, sim.Faults{})
	decode, _ := net.Join("decode")
	prefill, _ := net.Join("prefill-0")
	kv := transfer.AccessorID{Peer: "prefill-0", Role: transfer.RoleKV}

	mem, _ := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	dev, _ := gsim.New(0, 1<<16, gsim.WithLatency(gsim.WallClock{}, 0))
	stream, _ := dev.NewStream()
	_, dinc := decode.Self()
	recv, _ := peer.NewReceiver(peer.ReceiverConfig{
		Transport: decode, Capabilities: transfer.Capabilities{Peer: "decode", Incarnation: dinc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities},
		Slot:   func(u contract.Unit) []byte { row, _ := mem.Row(u.LocalGroup, u.Local); return row },
		Leased: true, Timeout: time.Minute, Grace: time.Minute,
		Limits: transfer.Limits{Sessions: 16, Tombstones: 4, Window: time.Hour},
		// The writer here is scripted: its offer spawns it, putting 0xAB
		// into every page. A real one reads the offer off the wire.
		Offer: func(o peer.Offer) error {
			spec := sim.WriterSpec{Node: prefill, To: "decode", Session: o.Session, Accessor: o.Writer, Tokens: o.Tokens, Behaviour: sim.Honest}
			for _, pg := range o.Pages {
				spec.Pieces = append(spec.Pieces, sim.Piece{Src: bytes.Repeat([]byte{0xAB}, pg.Len), Off: pg.Offset, Key: pg.Key})
			}
			_, err := net.Spawn(spec)
			return err
		},
	})
	_, pinc := prefill.Self()
	if _, err := recv.Connect(transfer.Capabilities{Peer: "prefill-0", Incarnation: pinc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}); err != nil {
		fmt.Println(err)
		return
	}
	eng, _ := readiness.New(readiness.Config{Memory: mem, TokensPerBlock: 16, Fetcher: recv, Stream: stream,
		Layers: [][]staging.LayerSpans{{{Layer: 0, Spans: []staging.Span{{Offset: 0, Size: 8}}}, {Layer: 1, Spans: []staging.Span{{Offset: 8, Size: 8}}}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	chunk, _ := transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: []int{40, 41}}}, transfer.TokenRange{End: 32}, true)
	plan := peer.Plan{Request: 7, Attempt: 1, Writers: []transfer.AccessorID{kv}, Chunk: chunk, BlockTokens: 16}
	pages, _ := recv.Expect(plan)
	req := readiness.Request{Kind: readiness.Fetch}
	for _, pg := range pages {
		p, _ := dev.Alloc(16) // the device page pg.ID stands for
		req.Rows = append(req.Rows, staging.Row{Name: pg.Name, Group: pg.Group, Block: pg.Block, Device: p})
	}
	h, _ := eng.Lend(req)
	_, _ = eng.Sync(ctx) // granted and submitted: the receiver offered the pages
	for net.Step() {
		recv.Progress()
	}
	recv.Progress()

	info, _ := eng.Wait(ctx, h, readiness.UntilSettled)
	fmt.Println("lease:", info.State, info.Outcome, info.Disposition)
	for layer := range eng.Layers() {
		iv, status, _ := eng.LayerReadiness(h, layer)
		fmt.Printf("layer %d: %v %v\n", layer, status, iv)
	}
	if d, ok := recv.Outcome(plan.Key()); ok {
		u, _ := plan.Usable(d.(transfer.Delivered).TokenEnd)
		fmt.Println("transfer:", d, "resume at", u)
	}
	got := make([]byte, 16)
	_ = dev.Read(got, req.Rows[1].Device)
	fmt.Printf("device page 41: % x…\n", got[:4])
	_ = eng.Release(h)
	_, _ = eng.Shutdown(ctx)
	_ = recv.Close()
	// Output:
	// lease: logically_complete served QUIESCED_SUCCESS
	// layer 0: ready [0, 32]
	// layer 1: ready [0, 32]
	// transfer: delivered(token_end 32) resume at [0,32]
	// device page 41: ab ab ab ab…
}
