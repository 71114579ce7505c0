package transfer_test

import (
	"fmt"
	"time"

	"github.com/kvready/kvready/transfer"
)

// A decode worker receives one request's KV cache from a prefill worker's
// KV and auxiliary writers. It negotiates before publishing anything,
// creates the session with its deadlines fixed, publishes, and takes the
// writers' evidence through one door; the first failure would latch at
// once, but the pages return only when every writer is settled.
func Example() {
	self := transfer.Capabilities{Peer: "decode-0", Incarnation: 1, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	prefill := transfer.Capabilities{Peer: "prefill-0", Incarnation: 41, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}

	kv := transfer.AccessorID{Peer: "prefill-0", Rank: 0, Role: transfer.RoleKV}
	aux := transfer.AccessorID{Peer: "prefill-0", Rank: 0, Role: transfer.RoleAux}
	submitted := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	cfg := transfer.CohortConfig{
		Session:     transfer.SessionKey{Request: 1001, Attempt: 1},
		Tokens:      transfer.TokenRange{Start: 0, End: 48},
		Submitted:   submitted,
		Deadline:    submitted.Add(2 * time.Second),
		Containment: submitted.Add(5 * time.Second),
	}
	agreement, err := transfer.Negotiate(self, prefill, cfg.Requires()|transfer.Caps(transfer.MultiWriter))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Accessors = []transfer.AccessorSpec{{ID: kv, Agreement: agreement}, {ID: aux, Agreement: agreement}}

	chunk, err := transfer.NewChunk([]transfer.Group{
		{Kind: transfer.Paged, Blocks: []int{12, 13, 14}}, // attention: 16 tokens a block
		{Kind: transfer.State, Blocks: []int{3}},          // a recurrent layer's state slot
	}, cfg.Tokens, true)
	if err != nil {
		fmt.Println(err)
		return
	}

	sessions, _ := transfer.NewSessions(transfer.Limits{Sessions: 64, Tombstones: 64, Window: time.Minute})
	now := submitted.Add(time.Millisecond)
	if err := sessions.Create(now, cfg); err != nil {
		fmt.Println(err)
		return
	}
	_ = sessions.Expose(now, cfg.Session) // the address is published to the writers
	fmt.Println("published:", sessions.Poll(now, cfg.Session))

	from := func(kind transfer.EvidenceKind, id transfer.AccessorID, end int64) transfer.Evidence {
		return transfer.Evidence{Kind: kind, Session: cfg.Session, Accessor: id, Incarnation: 41, TokenEnd: end}
	}
	for _, ev := range []transfer.Evidence{
		from(transfer.Report, kv, 32), // progress: proves nothing
		from(transfer.Done, kv, 48),
		from(transfer.Done, kv, 48), // duplicated by the network: refused, changes nothing
	} {
		if err := sessions.Step(now, ev); err != nil {
			fmt.Println("refused:", ev.Kind)
		}
	}
	old := from(transfer.Done, aux, 48)
	old.Incarnation = 40 // a DONE from the peer's previous life
	if err := sessions.Step(now, old); err != nil {
		fmt.Println("refused: a dead incarnation's", old.Kind)
	}
	fmt.Println("after the KV writer:", sessions.Poll(now, cfg.Session))
	_ = sessions.Step(now, from(transfer.Done, aux, 48))
	outcome, _ := sessions.Outcome(cfg.Session)
	fmt.Println(outcome, sessions.Poll(now, cfg.Session))

	usable, _ := chunk.Usable(outcome.(transfer.Delivered).TokenEnd)
	fmt.Println("resume at 48:", usable.At(48), "at 32:", usable.At(32))
	fmt.Println("retire:", sessions.Retire(now, cfg.Session))
	// Output:
	// published: ACTIVE
	// refused: done
	// refused: a dead incarnation's done
	// after the KV writer: ACTIVE
	// delivered(token_end 48) QUIESCED_SUCCESS
	// resume at 48: true at 32: false
	// retire: <nil>
}
