package ucxfigure

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
)

// The prefill process: the test binary re-executed with childEnv set to
// "TRANSPORTS PAGEBYTES". It prints "addr HEX" and "caps HEX", reads one
// line "peer ADDR CAPS" (the decode's address and advertisement), then
// serves every offer it hears: request REQ's one page, put from its source
// slot REQ mod srcSlots, flushed, reported. It exits when stdin closes.

const (
	childEnv = "KVREADY_UCXFIGURE_CHILD"
	srcSlots = 32 // the prefill's source slots: more than leases in flight
	tokens   = 16 // one block of tokens a page
)

var prefillKV = transfer.AccessorID{Peer: "prefill", Role: transfer.RoleKV}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// ucxConfig is both sides' transport: Checked, over tls; shared memory
// reports no dead peer, so its endpoints are made without peer errors.
func ucxConfig(name transfer.Peer, tls string) ucx.Config {
	return ucx.Config{Name: name, Incarnation: 1, Mode: ucx.Checked, Transports: tls, NoPeerErrors: tls != "tcp"}
}

func advertise(name transfer.Peer) transfer.Capabilities {
	return transfer.Capabilities{Peer: name, Incarnation: 1, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
}

// chunkOf is request req's one PAGED page, device block req.
func chunkOf(req transfer.RequestID) (transfer.Chunk, error) {
	return transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: []int{int(req)}}}, transfer.TokenRange{End: tokens}, true)
}

// srcPattern is the prefill's source slot i: bytes that tell slots and
// positions apart.
func srcPattern(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i)*37 ^ byte(j) ^ byte(j>>8) ^ byte(j>>16)
	}
	return b
}

func runChild(spec string, in io.Reader, out io.Writer) int {
	f := strings.Fields(spec)
	if len(f) != 2 {
		fmt.Fprintf(out, "err spec %q: \"TRANSPORTS PAGEBYTES\" expected\n", spec)
		return 2
	}
	size, err := strconv.Atoi(f[1])
	if err != nil || size <= 0 {
		fmt.Fprintf(out, "err spec %q: a positive page size expected\n", spec)
		return 2
	}
	tr, err := ucx.New(ucxConfig("prefill", f[0]))
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	defer tr.Close()
	c, err := newPrefill(tr, size, false)
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	defer c.send.Close()
	caps, _ := transfer.AppendCapabilities(nil, advertise("prefill"))
	fmt.Fprintf(out, "addr %x\ncaps %x\n", tr.Address(), caps)
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		return 0
	}
	if err := c.peer(sc.Text()); err != nil {
		fmt.Fprintf(out, "err peer: %v\n", err)
		return 1
	}
	fmt.Fprintln(out, "ok peer")
	closed := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(closed)
	}()
	for {
		select {
		case <-closed:
			return 0
		default:
		}
		if err := c.step(); err != nil {
			fmt.Fprintf(out, "err %v\n", err)
			return 1
		}
	}
}

// newPrefill is the prefill side over tr: a Sender whose source slots hold
// srcPattern. plain hides the endpoints' ReportCarrier from the Sender, so
// that it reports as it did before puts carried reports (a benchmark's
// comparison).
func newPrefill(tr *ucx.Transport, size int, plain bool) (*prefill, error) {
	c := &prefill{tr: tr, heard: &offers{Transport: tr, plain: plain}}
	for i := range srcSlots {
		c.rows = append(c.rows, srcPattern(i, size))
	}
	var err error
	c.send, err = peer.NewSender(peer.SenderConfig{
		Transport: c.heard, Capabilities: advertise("prefill"),
		Slot: func(u contract.Unit) []byte {
			if u.LocalGroup != 0 || u.Local < 0 || u.Local >= len(c.rows) {
				return nil
			}
			return c.rows[u.Local]
		},
		Timeout: time.Minute, Limits: transfer.Limits{Sessions: 4 * srcSlots, Tombstones: 16, Window: time.Hour},
	})
	return c, err
}

type prefill struct {
	tr    *ucx.Transport
	heard *offers
	send  *peer.Sender
	rows  [][]byte
	live  []contract.Attempt // publications not yet proven
}

// step progresses the Sender, publishes every request an offer came for,
// and retires the publications whose slots are read no more. It spins, as
// ucx_perftest does: the figure is a throughput.
func (c *prefill) step() error {
	c.send.Progress()
	for _, req := range c.heard.take() {
		if err := c.publish(req); err != nil {
			return err
		}
	}
	kept := c.live[:0]
	for _, a := range c.live {
		if a.Poll() == nil {
			kept = append(kept, a)
			continue
		}
		if acc, err := c.send.TryQuiesce([]contract.Attempt{a}); err != nil {
			return err
		} else if acc != contract.AccessEnded {
			kept = append(kept, a)
		}
	}
	clear(c.live[len(kept):])
	c.live = kept
	return nil
}

func (c *prefill) peer(line string) error {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "peer" {
		return fmt.Errorf("%q: \"peer ADDR CAPS\" expected", line)
	}
	addr, err := hex.DecodeString(f[1])
	if err != nil {
		return err
	}
	b, err := hex.DecodeString(f[2])
	if err != nil {
		return err
	}
	remote, err := transfer.DecodeCapabilities(b)
	if err != nil {
		return err
	}
	return c.connect(addr, remote)
}

// connect adds the decode's address and agrees with its advertisement.
func (c *prefill) connect(addr []byte, remote transfer.Capabilities) error {
	if _, _, err := c.tr.AddPeer(addr); err != nil {
		return err
	}
	// A worker hears a message only on an endpoint it opened (docs/ucx.md).
	if _, err := c.tr.Connect(remote.Peer); err != nil {
		return err
	}
	_, err := c.send.Connect(remote)
	return err
}

func (c *prefill) publish(req transfer.RequestID) error {
	ch, err := chunkOf(req)
	if err != nil {
		return err
	}
	pages, err := c.send.Expect(peer.SendPlan{Request: req, Attempt: 1, To: "decode", As: prefillKV, Chunk: ch, BlockTokens: tokens})
	if err != nil {
		return err
	}
	ext, err := contract.NewCacheExtent([]byte("kvready:ucxfigure"), []contract.Unit{{Name: pages[0].Name, Local: int(req) % srcSlots}}, true)
	if err != nil {
		return err
	}
	a, err := c.send.Publish(ext)
	if err != nil {
		return err
	}
	c.live = append(c.live, a)
	return nil
}

// offers is the prefill's transport as its Sender sees it, noting the
// request of every offer heard so that the prefill publishes it.
type offers struct {
	*ucx.Transport
	plain bool // hide the endpoints' ReportCarrier
	reqs  []transfer.RequestID
}

// Connect implements transfer.Transport: the endpoint, plain or not.
func (o *offers) Connect(p transfer.Peer) (transfer.Endpoint, error) {
	ep, err := o.Transport.Connect(p)
	if err != nil || !o.plain {
		return ep, err
	}
	return plainEndpoint{ep}, nil
}

// plainEndpoint is an endpoint whose puts carry nothing.
type plainEndpoint struct{ transfer.Endpoint }

func (o *offers) SetHandlers(h transfer.Handlers) {
	msg := h.Message
	h.Message = func(from transfer.Peer, inc transfer.Incarnation, b []byte) {
		if off, err := peer.DecodeOffer(b); err == nil {
			o.reqs = append(o.reqs, off.Session.Request)
		}
		msg(from, inc, b)
	}
	o.Transport.SetHandlers(h)
}

func (o *offers) take() []transfer.RequestID {
	r := o.reqs
	o.reqs = nil
	return r
}
