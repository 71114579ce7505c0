package sim

import (
	"fmt"
	"slices"

	"github.com/kvready/kvready/transfer"
)

// Behaviour is how a scripted writer behaves.
type Behaviour uint8

const (
	// Honest posts its puts (with a progress report after each when asked),
	// flushes its endpoint, and only then sends DONE.
	Honest Behaviour = iota + 1
	// NeverReports posts its puts and flushes, but never sends DONE: the
	// completion that never arrives (vLLM #46283).
	NeverReports
	// FailsMidway sends a Failure after half its puts, then keeps posting
	// the rest and goes quiet: a failing writer whose writes go on landing
	// (vLLM PR #56104).
	FailsMidway
	// SubmitsLate is honest, then posts one more put 1 to 32 steps after its
	// DONE, with the key it still holds: a deferred write submitted after
	// its lease ended (vLLM #55470). It breaks the submission fence it
	// advertised; only a revocation that fences stops it.
	SubmitsLate
)

// String names the behaviour.
func (b Behaviour) String() string {
	switch b {
	case Honest:
		return "honest"
	case NeverReports:
		return "never-reports"
	case FailsMidway:
		return "fails-midway"
	case SubmitsLate:
		return "submits-late"
	}
	return fmt.Sprintf("behaviour(%d)", uint8(b))
}

// Piece is one put a writer makes: Src into the receiver's memory at Off.
// Key, when set, is the packed key of the memory this piece goes to (a
// receiver that registers each page on its own hands a writer one key per
// page); nil means the writer's WriterSpec.Key.
type Piece struct {
	Src []byte
	Off int
	Key []byte
}

// WriterSpec scripts one writer: one accessor of one session, writing from
// Node into the memory whose packed key the receiver To published (Key, or
// each piece's own).
type WriterSpec struct {
	Node      *Node
	To        transfer.Peer
	Session   transfer.SessionKey
	Accessor  transfer.AccessorID // Accessor.Peer is Node's name
	Key       []byte
	Pieces    []Piece
	Tokens    transfer.TokenRange // reports reach through it; DONE names its end
	Reports   bool                // a progress report after each put, with no flush before it
	Behaviour Behaviour
}

type phase uint8

const (
	posting phase = iota
	flushing
	lingering
	finished
)

// Writer is a scripted sender. The network moves it, one action per Step
// it is chosen for; it stops when its node dies.
type Writer struct {
	net    *Network
	spec   WriterSpec
	ep     *endpoint
	keys   []remoteKey // per piece
	next   int
	phase  phase
	flush  *op
	lateAt uint64
	posted int
	err    error
}

// Spawn connects a writer to its receiver, unpacks the keys it was given
// (the spec's, and each piece's own) and hands it to the network, which
// moves it from the next Step on.
func (n *Network) Spawn(spec WriterSpec) (*Writer, error) {
	if spec.Node == nil {
		return nil, fmt.Errorf("sim: a writer needs a node")
	}
	if name, _ := spec.Node.Self(); spec.Accessor.Peer != name {
		return nil, fmt.Errorf("sim: writer accessor %s is not of node %q", spec.Accessor, name)
	}
	if spec.Behaviour < Honest || spec.Behaviour > SubmitsLate {
		return nil, fmt.Errorf("sim: unknown writer behaviour %s", spec.Behaviour)
	}
	if t := spec.Tokens; t.Start < 0 || t.End < t.Start {
		return nil, fmt.Errorf("sim: writer token range %s; 0 <= start <= end expected", t)
	}
	_, inc := spec.Node.Self()
	probe := transfer.Evidence{Kind: transfer.Done, Session: spec.Session, Accessor: spec.Accessor, Incarnation: inc, TokenEnd: spec.Tokens.End}
	if err := probe.Validate(); err != nil {
		return nil, fmt.Errorf("sim: the writer could not report: %w", err)
	}
	ep, err := spec.Node.Connect(spec.To)
	if err != nil {
		return nil, err
	}
	if spec.Key != nil {
		if _, err := ep.UnpackKey(spec.Key); err != nil {
			return nil, err
		}
	}
	w := &Writer{net: n, spec: spec, ep: ep.(*endpoint)}
	for i, p := range spec.Pieces {
		packed := p.Key
		if packed == nil {
			packed = spec.Key
		}
		key, err := ep.UnpackKey(packed)
		if err != nil {
			return nil, fmt.Errorf("sim: piece %d: %w", i, err)
		}
		w.keys = append(w.keys, key.(remoteKey))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.writers = append(n.writers, w)
	return w, nil
}

// Posted is how many puts the writer has posted.
func (w *Writer) Posted() int {
	w.net.mu.Lock()
	defer w.net.mu.Unlock()
	return w.posted
}

// Finished reports whether the writer will do nothing more.
func (w *Writer) Finished() bool {
	w.net.mu.Lock()
	defer w.net.mu.Unlock()
	return w.phase == finished || w.spec.Node.dead
}

// canMove says whether the writer has an action it may take now.
func (w *Writer) canMove() bool {
	switch {
	case w.spec.Node.dead || w.phase == finished:
		return false
	case w.phase == flushing:
		return w.flush.done
	case w.phase == lingering:
		return w.net.step >= w.lateAt
	}
	return true
}

// willPostTo says whether the writer will post another put into r.
func (w *Writer) willPostTo(r *region) bool {
	if w.spec.Node.dead || w.phase == finished {
		return false
	}
	if w.phase == posting && slices.ContainsFunc(w.keys[w.next:], func(k remoteKey) bool { return k.r == r }) {
		return true
	}
	return w.spec.Behaviour == SubmitsLate && len(w.keys) > 0 && w.keys[0].r == r
}

// move takes the writer's next action; the network's lock is held.
func (w *Writer) move() {
	switch w.phase {
	case posting:
		w.post()
	case flushing:
		w.flushed()
	case lingering:
		p := w.spec.Pieces[0]
		if _, err := w.ep.rmaLocked(opPut, p.Src, w.keys[0], p.Off); err == nil {
			w.posted++
			w.net.stats.LateSubmits++
		}
		w.phase = finished
	}
}

func (w *Writer) post() {
	s := w.spec
	if w.next == len(s.Pieces) {
		o, err := w.ep.flushLocked(false)
		if err != nil {
			w.stop(err)
			return
		}
		w.flush, w.phase = o, flushing
		return
	}
	p := s.Pieces[w.next]
	if _, err := w.ep.rmaLocked(opPut, p.Src, w.keys[w.next], p.Off); err != nil {
		w.stop(err)
		return
	}
	w.posted++
	w.next++
	span := s.Tokens.End - s.Tokens.Start
	if s.Reports {
		w.say(transfer.Report, s.Tokens.Start+span*int64(w.next)/int64(len(s.Pieces)), "")
	}
	if s.Behaviour == FailsMidway && w.next == (len(s.Pieces)+1)/2 {
		w.say(transfer.Failure, 0, "simulated writer failure")
	}
}

func (w *Writer) flushed() {
	if w.flush.err != nil {
		w.stop(w.flush.err)
		return
	}
	switch w.spec.Behaviour {
	case NeverReports, FailsMidway:
		w.phase = finished
		return
	}
	w.say(transfer.Done, w.spec.Tokens.End, "")
	if w.spec.Behaviour == SubmitsLate && len(w.spec.Pieces) > 0 {
		w.phase, w.lateAt = lingering, w.net.step+1+w.net.rng.Uint64N(32)
		return
	}
	w.phase = finished
}

// stop ends the writer after a refused operation: it reports the failure
// if its endpoint still carries messages.
func (w *Writer) stop(err error) {
	w.err = err
	if w.spec.Behaviour != FailsMidway {
		w.say(transfer.Failure, 0, err.Error())
	}
	w.phase = finished
}

// say sends one piece of evidence about the writer's session.
func (w *Writer) say(kind transfer.EvidenceKind, tokenEnd int64, reason string) {
	if len(reason) > transfer.MaxReasonLen {
		reason = reason[:transfer.MaxReasonLen]
	}
	msg, err := transfer.AppendEvidence(nil, transfer.Evidence{
		Kind: kind, Session: w.spec.Session, Accessor: w.spec.Accessor,
		Incarnation: w.spec.Node.inc, TokenEnd: tokenEnd, Reason: reason,
	})
	if err != nil {
		w.err = err // Spawn checked the identity; only a reason could be wrong, and it was cut to fit
		return
	}
	_ = w.ep.sendLocked(msg) // a dead endpoint carries nothing: the receiver hears of it as an endpoint error
}
