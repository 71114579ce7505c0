package sim_test

import (
	"bytes"
	"fmt"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// A decode process registers its pages; a prefill writer puts into them,
// flushes and reports DONE — which this network duplicates. The receiver
// sees the data before the DONE, and the DONE twice: a session must refuse
// the second.
func Example() {
	net, _ := sim.New(42, sim.Faults{DuplicateDone: 1})
	decode, _ := net.Join("decode")
	prefill, _ := net.Join("prefill-0")
	pages := make([]byte, 32)
	mem, _ := decode.Register(pages)
	decode.SetHandlers(transfer.Handlers{Message: func(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
		ev, err := transfer.DecodeEvidence(msg)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s from %s#%d; pages %x…\n", ev.Kind, from, inc, pages[:4])
	}})
	_, err := net.Spawn(sim.WriterSpec{
		Node: prefill, To: "decode", Key: mem.PackedKey(),
		Session:   transfer.SessionKey{Request: 1, Attempt: 1},
		Accessor:  transfer.AccessorID{Peer: "prefill-0", Role: transfer.RoleKV},
		Tokens:    transfer.TokenRange{End: 32},
		Pieces:    []sim.Piece{{Src: bytes.Repeat([]byte{0xab}, 16)}, {Src: bytes.Repeat([]byte{0xcd}, 16), Off: 16}},
		Behaviour: sim.Honest,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for net.Step() {
		decode.Progress()
	}
	decode.Progress()
	fmt.Println("may still write:", net.MayWrite(mem), "duplicated:", net.Stats().DuplicatedDone)
	// Output:
	// done from prefill-0#2; pages abababab…
	// done from prefill-0#2; pages abababab…
	// may still write: false duplicated: 1
}
