package simulate

import (
	"cmp"
	hexa "encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/kvready/kvready/backend/peer"
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
	Grace   time.Duration // how long after Timeout its engine waits for a proof before it contains
}

func (s prefillSpec) String() string {
	tls := s.TLS
	if tls == "" {
		tls = "tcp"
	}
	return fmt.Sprintf("%d %s %t %d %d %d", s.Inc, tls, s.Naive, s.Slots, int64(s.Timeout), int64(s.Grace))
}

func parsePrefillSpec(v string) (prefillSpec, error) {
	var s prefillSpec
	var ns, gs int64
	if n, err := fmt.Sscanf(v, "%d %s %t %d %d %d", &s.Inc, &s.TLS, &s.Naive, &s.Slots, &ns, &gs); err != nil || n != 6 {
		return s, fmt.Errorf("%s=%q: %v; \"INC TLS NAIVE SLOTS TIMEOUT_NS GRACE_NS\" expected (set by kvready simulate --disagg --transport ucx, not by hand)", prefillEnv, v, err)
	}
	s.Timeout, s.Grace = time.Duration(ns), time.Duration(gs)
	if s.Inc == 0 || s.Slots < 1 || s.Slots > maxDisaggPages || s.Timeout <= 0 || s.Grace < 0 {
		return s, fmt.Errorf("%s=%q: incarnation >= 1, 1..%d slots, a positive timeout and a grace >= 0 expected", prefillEnv, v, maxDisaggPages)
	}
	return s, nil
}

// RunDisaggPrefill is the prefill process of a disaggregated run over UCX
// (kvready simulate --disagg --transport ucx starts it; see
// DisaggPrefillEnv): the run's prefill side — kvready's, an engine lending
// its staging slots to a backend/peer Sender as publish leases, or the
// naive one — over its own UCX transport, with the page checker of its
// source slots. It prints its address and capabilities, then takes the
// decode process's commands, one a line on in, and says on out what became
// of them (ucxFabric.heard):
//
//	peer ADDR CAPS                   learn the decode process, open its endpoint, start the prefill side
//	send REQ ATT PAGES RANK ROLE S,… publish a writer's share
//	replay OFFER                     put with an offer's keys (a dead life's: vLLM #55470)
//
// Its Sender's deadline is the spec's, longer than the decode side's. It
// exits 0 when in closes, 2 on a bad spec, 1 when its transport cannot be
// made.
func RunDisaggPrefill(spec string, in io.Reader, out io.Writer) int {
	s, err := parsePrefillSpec(spec)
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 2
	}
	// Ctrl-C reaches the whole process group: the decode process handles
	// it, and ends this one by closing its stdin.
	signal.Ignore(os.Interrupt)
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

// childSide is what the prefill process's driver has in place of the
// simulated network: its own transport, and the decode process it serves.
type childSide struct {
	tr     transfer.Transport
	decode transfer.Capabilities
}

// prefillChild is the prefill process's state: a driver holding its
// configuration, clock and checker of the source slots, and the prefill
// side the driver of an in-process run would hold.
type prefillChild struct {
	spec  prefillSpec
	tr    *ucx.Transport
	rec   *ucxPutRecord
	d     *disaggDriver
	pre   prefillSide
	out   io.Writer
	start time.Time
	asked int    // send commands taken
	said  string // the last state line
	reps  []*childReplay
}

// childReplay is one replay's puts, until each completed.
type childReplay struct{ puts []transfer.Request }

func newPrefillChild(s prefillSpec, out io.Writer) (*prefillChild, error) {
	tr, err := ucx.New(ucxConfigOf(ucxPrefills[0], s.Inc, s.TLS))
	if err != nil {
		return nil, err
	}
	c := &prefillChild{spec: s, tr: tr, rec: &ucxPutRecord{}, out: out, start: time.Now()}
	// The prefill side's deadlines are its own: the spec's, longer than the
	// decode side's.
	cfg := DisaggConfig{Pages: s.Slots, Deadline: s.Timeout, Grace: s.Grace, Naive: s.Naive, Transport: TransportUCX, SenderRate: 1}
	c.d = &disaggDriver{cfg: cfg, work: disaggWorkload{cfg}, epoch: disaggEpoch,
		child: &childSide{tr: recordingTransport{Transport: tr, rec: c.rec}}}
	c.d.chk = newPageChecker(c.rec, nil)
	adv := transfer.Capabilities{Peer: ucxPrefills[0], Incarnation: s.Inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
	if err := ucxpipe.Announce(out, tr, adv); err != nil {
		_ = tr.Close()
		return nil, err
	}
	return c, nil
}

// close closes the transport as the process ends. The prefill side is not
// shut down: its engine would wait for leases whose puts can no longer be
// proven once the decode process stopped listening, and everything it holds
// ends with the process.
func (c *prefillChild) close() { _ = c.tr.Close() }

func (c *prefillChild) do(f []string) error {
	switch {
	case len(f) == 3 && f[0] == "peer" && c.pre == nil:
		return ucxpipe.Join(c.tr, f[1], f[2], c.begin)
	case len(f) == 7 && f[0] == "send" && c.pre != nil:
		c.asked++
		return c.publish(f[1:])
	case len(f) == 2 && f[0] == "replay":
		c.replay(f[1])
		return nil
	}
	return errors.New("unknown command, or not now")
}

// begin starts the prefill side, its Senders agreed with the decode
// process.
func (c *prefillChild) begin(decode transfer.Capabilities) error {
	c.d.child.decode = decode
	var err error
	if c.spec.Naive {
		c.pre, err = newNaivePrefill(c.d)
	} else {
		c.pre, err = newKvreadyPrefill(c.d)
	}
	return err
}

// publish is "send REQ ATT PAGES RANK ROLE S,…": the prefill side
// publishes that writer's share of the request's pages.
func (c *prefillChild) publish(f []string) error {
	var n [5]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[i], 10, 32)
		if err != nil {
			return err
		}
		n[i] = v
	}
	if n[2] < 1 || n[2] > maxDisaggPages || n[1] < 1 || n[1] > maxDisaggAttempts {
		return fmt.Errorf("%d pages of attempt %d; 1..%d pages, attempts 1..%d expected", n[2], n[1], maxDisaggPages, maxDisaggAttempts)
	}
	w := dwriter{id: transfer.AccessorID{Peer: ucxPrefills[0], Rank: uint16(n[3]), Role: transfer.Role(n[4])}, sender: true}
	for _, s := range strings.Split(f[5], ",") {
		p, err := strconv.Atoi(s)
		if err != nil || p < 0 || p >= int(n[2]) {
			return fmt.Errorf("share %q: page indices 0..%d expected", f[5], n[2]-1)
		}
		w.pages = append(w.pages, p)
	}
	a := &dattempt{r: &dreq{id: transfer.RequestID(n[0]), pages: int(n[2])}, n: transfer.AttemptID(n[1]), writers: []dwriter{w}}
	return c.pre.publish(a, w)
}

// step moves the clock to the machine's, runs the prefill side's round,
// answers the replays that completed, and says the state when it changed;
// then it yields the machine a moment (two processes share it).
func (c *prefillChild) step() {
	if c.pre != nil {
		c.d.step = int64(time.Since(c.start) / DisaggStep)
		if err := c.pre.round(); err != nil {
			fmt.Fprintf(c.out, "err round: %v\n", err)
		}
		if line := c.state(); line != c.said {
			fmt.Fprintln(c.out, line)
			c.said = line
		}
	}
	c.answerReplays()
	time.Sleep(50 * time.Microsecond)
}

// state is the line that says the prefill side's counts:
//
//	state ASKED PENDING PUBLISHES REFUSED LENDS FREES EARLY DOUBLE FREE ALL OUTCOME=N,…
//
// the send commands taken, the publications holding slots, the shares
// published and refused, the source slots lent and returned, returned while
// a put may read them, lent or returned twice, free now and in all, and
// the publications by outcome.
func (c *prefillChild) state() string {
	st, k := c.pre.stats(), c.d.chk.counts()
	free, all := c.d.chk.sourcesFree()
	var outs []string
	for _, o := range slices.Sorted(maps.Keys(st.Outcomes)) {
		outs = append(outs, fmt.Sprintf("%s=%d", strings.ReplaceAll(o, " ", "-"), st.Outcomes[o]))
	}
	return fmt.Sprintf("state %d %d %d %d %d %d %d %d %d %d %s", c.asked, c.pre.pending(), st.Publishes, st.Refused,
		k.SourceLends, k.SourceFrees, k.SourcesFreedWhileRead, k.SourceDoubleLends, free, all, cmp.Or(strings.Join(outs, ","), "-"))
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

// MayWrite: the prefill process watches no decode page.
func (r *ucxPutRecord) MayWrite(transfer.Memory) bool { return false }

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
