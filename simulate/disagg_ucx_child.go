package simulate

import (
	hexa "encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
	"github.com/kvready/kvready/transfer/ucxpipe"
)

// DisaggPrefillEnv names the environment variable that makes a kvready
// process the prefill process of a disaggregated run over UCX. It is
// internal: RunDisagg sets it (to a spec only it writes) on the process it
// starts, whose main then calls RunDisaggPrefill; it is no user interface.
const DisaggPrefillEnv = "KVREADY_DISAGG_PREFILL"

const prefillEnv = DisaggPrefillEnv

// prefillSpec is what the decode process tells a prefill process it starts.
type prefillSpec struct {
	Inc     transfer.Incarnation
	TLS     string
	Naive   bool
	Slots   int
	Timeout time.Duration // its Sender's, fixed at each Publish
}

func (s prefillSpec) String() string {
	tls := s.TLS
	if tls == "" {
		tls = "tcp"
	}
	return fmt.Sprintf("%d %s %t %d %d", s.Inc, tls, s.Naive, s.Slots, int64(s.Timeout))
}

func parsePrefillSpec(v string) (prefillSpec, error) {
	var s prefillSpec
	var ns int64
	if n, err := fmt.Sscanf(v, "%d %s %t %d %d", &s.Inc, &s.TLS, &s.Naive, &s.Slots, &ns); err != nil || n != 5 {
		return s, fmt.Errorf("%s=%q: %v; \"INC TLS NAIVE SLOTS TIMEOUT_NS\" expected (set by kvready simulate --disagg --transport ucx, not by hand)", prefillEnv, v, err)
	}
	s.Timeout = time.Duration(ns)
	if s.Inc == 0 || s.Slots < 1 || s.Slots > maxDisaggPages || s.Timeout <= 0 {
		return s, fmt.Errorf("%s=%q: incarnation >= 1, 1..%d slots and a positive timeout expected", prefillEnv, v, maxDisaggPages)
	}
	return s, nil
}

// RunDisaggPrefill is the prefill process of a disaggregated run over UCX
// (kvready simulate --disagg --transport ucx starts it; see
// DisaggPrefillEnv): a backend/peer Sender over its own UCX transport,
// putting from source slots it lends each publication. It prints its
// address and capabilities, then takes the decode process's commands, one
// a line on in, and says on out what became of them (ucxFabric.heard):
//
//	peer ADDR CAPS                   learn the decode process and open its endpoint
//	send REQ ATT PAGES RANK ROLE S,… publish a writer's share, from slots filled with its pages
//	replay OFFER                     put with an offer's keys (a dead life's: vLLM #55470)
//
// A publication's slots come back on its outcome (naive) or once the
// Sender's Quiesce proves every put that reads them completed (kvready).
// It exits 0 when in closes, 2 on a bad spec, 1 when its transport or
// Sender cannot be made.
func RunDisaggPrefill(spec string, in io.Reader, out io.Writer) int {
	s, err := parsePrefillSpec(spec)
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 2
	}
	c, err := newPrefillChild(s, out)
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	defer c.close()
	ucxpipe.Serve(in, func(line string) {
		if err := c.do(strings.Fields(line)); err != nil {
			fmt.Fprintf(out, "err %q: %v\n", line, err)
		}
	}, c.step)
	return 0
}

// prefillChild is the prefill process's state.
type prefillChild struct {
	spec  prefillSpec
	tr    *ucx.Transport
	rec   *ucxPutRecord
	send  *peer.Sender
	out   io.Writer
	slots [][]byte
	used  []bool
	pubs  []*childPub
	reps  []*childReplay
}

// childPub is one publication and the slots it holds.
type childPub struct {
	att   contract.Attempt
	slots []int
}

// childReplay is one replay's puts, until each completed.
type childReplay struct{ puts []transfer.Request }

func newPrefillChild(s prefillSpec, out io.Writer) (*prefillChild, error) {
	tr, err := ucx.New(ucxConfigOf(ucxPrefills[0], s.Inc, s.TLS))
	if err != nil {
		return nil, err
	}
	c := &prefillChild{spec: s, tr: tr, rec: &ucxPutRecord{}, out: out, used: make([]bool, s.Slots)}
	pool := make([]byte, s.Slots*SlotBytes)
	for i := range s.Slots {
		c.slots = append(c.slots, pool[i*SlotBytes:(i+1)*SlotBytes:(i+1)*SlotBytes])
		pageTag{kind: pageSourceFree}.fill(c.slots[i])
	}
	adv := transfer.Capabilities{Peer: ucxPrefills[0], Incarnation: s.Inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	c.send, err = peer.NewSender(peer.SenderConfig{
		Transport: recordingTransport{Transport: tr, rec: c.rec}, Capabilities: adv, Slot: c.slot, Timeout: s.Timeout,
		Limits: transfer.Limits{Sessions: 1 << 16, Tombstones: 1 << 10, Window: 4 * s.Timeout},
	})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	if err := ucxpipe.Announce(out, tr, adv); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *prefillChild) close() {
	_ = c.send.Close()
	_ = c.tr.Close()
}

func (c *prefillChild) slot(u contract.Unit) []byte {
	if u.LocalGroup != 0 || u.Local < 0 || u.Local >= len(c.slots) {
		return nil
	}
	return c.slots[u.Local]
}

func (c *prefillChild) do(f []string) error {
	switch {
	case len(f) == 3 && f[0] == "peer":
		return c.peer(f[1], f[2])
	case len(f) == 7 && f[0] == "send":
		return c.publish(f[1:])
	case len(f) == 2 && f[0] == "replay":
		c.replay(f[1])
		return nil
	}
	return errors.New("unknown command")
}

func (c *prefillChild) peer(addrHex, capsHex string) error {
	return ucxpipe.Join(c.tr, addrHex, capsHex, func(remote transfer.Capabilities) error {
		_, err := c.send.Connect(remote)
		return err
	})
}

// publish is "send REQ ATT PAGES RANK ROLE S,…": it expects the share's
// plan, lends it the lowest free slots, fills them with its pages and
// publishes them.
func (c *prefillChild) publish(f []string) error {
	var n [5]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[i], 10, 32)
		if err != nil {
			return err
		}
		n[i] = v
	}
	var share []int
	for _, s := range strings.Split(f[5], ",") {
		p, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		share = append(share, p)
	}
	req, att := transfer.RequestID(n[0]), transfer.AttemptID(n[1])
	as := transfer.AccessorID{Peer: ucxPrefills[0], Rank: uint16(n[3]), Role: transfer.Role(n[4])}
	sp, err := sendPlanOf(req, att, int(n[2]), as, share)
	if err != nil {
		return err
	}
	pages, err := c.send.Expect(sp)
	if err != nil {
		return err
	}
	var free []int
	for s, u := range c.used {
		if !u && len(free) < len(pages) {
			free = append(free, s)
		}
	}
	if len(free) < len(pages) {
		c.send.Forget(sp.Key(), sp.As)
		fmt.Fprintln(c.out, "refused")
		return nil
	}
	units := make([]contract.Unit, len(pages))
	for k, pg := range pages {
		c.used[free[k]] = true
		pageTag{kind: pageData, request: req, index: pg.Index, attempt: att}.fill(c.slots[free[k]])
		units[k] = contract.Unit{Name: pg.Name, Local: free[k]}
	}
	fmt.Fprintf(c.out, "lent %d\n", len(free))
	ext, err := contract.NewCacheExtent([]byte("kvready:simulate:prefill"), units, true)
	var a contract.Attempt
	if err == nil {
		a, err = c.send.Publish(ext)
	}
	if err != nil {
		c.give(&childPub{slots: free}, "rejected")
		return nil
	}
	c.pubs = append(c.pubs, &childPub{att: a, slots: free})
	return nil
}

// give takes a publication's slots back, saying whether a put that reads
// one had not completed, and writes the freed source's sentinel into each:
// a put that reads it later carries it into the decode process's page.
func (c *prefillChild) give(p *childPub, outcome string) {
	early := 0
	for _, s := range p.slots {
		if c.rec.MayRead(c.slots[s]) {
			early = 1
		}
		pageTag{kind: pageSourceFree}.fill(c.slots[s])
		c.used[s] = false
	}
	fmt.Fprintf(c.out, "pub %s %d %d\n", strings.ReplaceAll(outcome, " ", "-"), early, len(p.slots))
}

// step progresses the Sender, returns the slots its manager's rule allows,
// and answers the replays that completed; a step with nothing to do yields
// the machine a moment (two processes share it).
func (c *prefillChild) step() {
	n := c.send.Progress()
	kept := c.pubs[:0]
	for _, p := range c.pubs {
		o := p.att.Poll()
		done := o != nil
		if done && !c.spec.Naive {
			acc, err := c.send.TryQuiesce([]contract.Attempt{p.att})
			done = err == nil && acc == contract.AccessEnded
		}
		if !done {
			kept = append(kept, p)
			continue
		}
		c.give(p, outcomeName(o))
		n++
	}
	clear(c.pubs[len(kept):])
	c.pubs = kept
	n += c.answerReplays()
	if n == 0 {
		time.Sleep(20 * time.Microsecond)
	}
}

// replay puts each page's content with an offer's key — what the offer's
// writer would have written — and flushes; the answer comes once every put
// completed (answerReplays).
func (c *prefillChild) replay(offerHex string) {
	r := &childReplay{}
	c.reps = append(c.reps, r)
	b, err := hexa.DecodeString(offerHex)
	if err != nil {
		return
	}
	o, err := peer.DecodeOffer(b)
	if err != nil {
		return
	}
	ep, err := c.tr.Connect(o.Receiver)
	if err != nil {
		return
	}
	for _, pg := range o.Pages {
		key, err := ep.UnpackKey(pg.Key)
		if err != nil {
			r.puts = append(r.puts, failedRequest{err})
			continue
		}
		src := pageTag{kind: pageData, request: o.Session.Request, index: pg.Index, attempt: o.Session.Attempt}.content()
		req, err := ep.Put(src[:min(len(src), pg.Len)], key, pg.Offset)
		if err != nil {
			req = failedRequest{err}
		}
		r.puts = append(r.puts, req)
	}
	_, _ = ep.Flush()
}

// answerReplays says, of each replay whose puts all completed, how many
// landed, how many were refused as revoked, and how many failed otherwise.
func (c *prefillChild) answerReplays() int {
	n := 0
	kept := c.reps[:0]
	for _, r := range c.reps {
		landed, refused, other, open := 0, 0, 0, false
		for _, p := range r.puts {
			switch done, err := p.Test(); {
			case !done:
				open = true
			case err == nil:
				landed++
			case errors.Is(err, ucx.ErrRevoked):
				refused++
			default:
				other++
			}
		}
		if open {
			kept = append(kept, r)
			continue
		}
		if len(r.puts) == 0 {
			other = 1 // the offer could not be replayed at all
		}
		fmt.Fprintf(c.out, "replayed %d %d %d\n", landed, refused, other)
		n++
	}
	clear(c.reps[len(kept):])
	c.reps = kept
	return n
}

// failedRequest is a put that could not be posted.
type failedRequest struct{ err error }

func (r failedRequest) Test() (bool, error) { return true, r.err }

// ucxPutRecord is the prefill process's record of its puts: a source may be
// read until the put that posted it completes (transfer.Endpoint.Put).
type ucxPutRecord struct{ puts []recordedPut }

type recordedPut struct {
	src []byte
	req transfer.Request
}

// MayRead reports whether a put posted from a source overlapping src has
// not completed; it forgets the puts that completed.
func (r *ucxPutRecord) MayRead(src []byte) bool {
	kept := r.puts[:0]
	hit := false
	for _, p := range r.puts {
		if done, _ := p.req.Test(); done {
			continue
		}
		kept = append(kept, p)
		hit = hit || overlaps(p.src, src)
	}
	clear(r.puts[len(kept):])
	r.puts = kept
	return hit
}

func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	lo, hi := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return lo < hi+uintptr(len(b)) && hi < lo+uintptr(len(a))
}

// recordingTransport is the prefill transport as its Sender sees it: every
// put recorded with its source.
type recordingTransport struct {
	*ucx.Transport
	rec *ucxPutRecord
}

func (t recordingTransport) Connect(p transfer.Peer) (transfer.Endpoint, error) {
	ep, err := t.Transport.Connect(p)
	if err != nil {
		return nil, err
	}
	return recordingEndpoint{Endpoint: ep, rec: t.rec}, nil
}

type recordingEndpoint struct {
	transfer.Endpoint
	rec *ucxPutRecord
}

func (e recordingEndpoint) Put(src []byte, key transfer.RemoteKey, off int) (transfer.Request, error) {
	r, err := e.Endpoint.Put(src, key, off)
	if err == nil {
		e.rec.puts = append(e.rec.puts, recordedPut{src: src, req: r})
	}
	return r, err
}
