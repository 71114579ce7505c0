package peerucx

import (
	"encoding/hex"
	"errors"
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
	"github.com/kvready/kvready/transfer/ucxpipe"
)

// The prefill process: the test binary re-executed with childEnv set to its
// incarnation and its UCX transports ("2 sm"). Addresses and capabilities travel on its stdin and stdout;
// the offers, the pages and the reports travel over UCX.

const (
	childEnv = "KVREADY_PEERUCX_CHILD"
	pageLen  = 4096 // one staging slot, one page
	slots    = 8    // staging slots on each side
	perReq   = 2    // pages per request
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// ucxConfig is both sides' transport: Checked (every put applied, and
// refused once revoked, in the owner's progress) over tls — tcp, or sm,
// whose transports cannot report a dead peer, so its endpoints are made
// without peer error handling (docs/ucx.md).
func ucxConfig(name transfer.Peer, inc transfer.Incarnation, tls string) ucx.Config {
	return ucx.Config{Name: name, Incarnation: inc, Mode: ucx.Checked, Transports: tls, NoPeerErrors: tls == "sm"}
}

func advertise(name transfer.Peer, inc transfer.Incarnation) transfer.Capabilities {
	return transfer.Capabilities{Peer: name, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
}

var prefillKV = transfer.AccessorID{Peer: "prefill", Role: transfer.RoleKV}

// chunkOf is request req's pages: perReq PAGED pages, device ids req*10+i.
func chunkOf(req transfer.RequestID) (transfer.Chunk, error) {
	ids := make([]int, perReq)
	for i := range ids {
		ids[i] = int(req)*10 + i
	}
	return transfer.NewChunk([]transfer.Group{{Kind: transfer.Paged, Blocks: ids}}, transfer.TokenRange{End: perReq * 16}, true)
}

// pattern is page i of request req: bytes that tell request, page and
// position apart.
func pattern(req transfer.RequestID, i int) []byte {
	b := make([]byte, pageLen)
	for j := range b {
		b[j] = byte(req)*31 ^ byte(i)*7 ^ byte(j) ^ byte(j>>8)
	}
	return b
}

// runChild is the prefill. It prints "addr HEX" and "caps HEX", then takes
// commands, one a line, answering "ok CMD [...]" or "err CMD: why":
//
//	peer ADDR CAPS  AddPeer the decode and Connect the Sender to its life
//	send REQ FIRST  Expect and Publish request REQ from slots FIRST.. (filled with its pattern)
//	mute / unmute   swallow (or not) every message to the decode: puts land, no report leaves
//	replay OFFER    put 0xEE into every page of an offer (hex), with its keys, flush:
//	                answers "ok replay landed=N refused=M"
//	stats           the Sender's and the transport's counts, for a failing test's log
//
// Every offer it hears it prints as "offer HEX", for the parent to replay
// into a later life. It exits when stdin closes.
func runChild(spec string, in io.Reader, out io.Writer) int {
	var inc uint64
	var tls string
	if _, err := fmt.Sscanf(spec, "%d %s", &inc, &tls); err != nil {
		fmt.Fprintf(out, "err spec %q: %v; \"INC TLS\" expected\n", spec, err)
		return 2
	}
	tr, err := ucx.New(ucxConfig("prefill", transfer.Incarnation(inc), tls))
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	defer tr.Close()
	c := &prefill{tr: tr, out: out, tap: &tap{Transport: tr, out: out}}
	for range slots {
		c.rows = append(c.rows, make([]byte, pageLen))
	}
	c.send, err = peer.NewSender(peer.SenderConfig{
		Transport: c.tap, Capabilities: advertise("prefill", transfer.Incarnation(inc)),
		Slot: func(u contract.Unit) []byte {
			if u.LocalGroup != 0 || u.Local < 0 || u.Local >= len(c.rows) {
				return nil
			}
			return c.rows[u.Local]
		},
		Timeout: time.Minute, Limits: transfer.Limits{Sessions: 16, Tombstones: 16, Window: time.Hour},
	})
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	defer c.send.Close()
	if err := ucxpipe.Announce(out, tr, advertise("prefill", transfer.Incarnation(inc))); err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	ucxpipe.Serve(in, func(line string) {
		cmd := strings.Fields(line + " ?")[0]
		if extra, err := c.do(line); err != nil {
			fmt.Fprintf(out, "err %s: %v\n", cmd, err)
		} else {
			fmt.Fprintf(out, "ok %s%s\n", cmd, extra)
		}
	}, c.step)
	return 0
}

type prefill struct {
	tr   *ucx.Transport
	tap  *tap
	send *peer.Sender
	out  io.Writer
	rows [][]byte
	held []contract.Attempt // the publications, kept so nothing is collected early
}

func (c *prefill) step() {
	if c.send.Progress() == 0 {
		time.Sleep(20 * time.Microsecond) // two cores shared: let the parent run
	}
}

func (c *prefill) do(line string) (string, error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 3 && f[0] == "peer":
		return "", c.peer(f[1], f[2])
	case len(f) == 3 && f[0] == "send":
		req, err1 := strconv.ParseUint(f[1], 10, 64)
		first, err2 := strconv.Atoi(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		return "", c.publish(transfer.RequestID(req), first)
	case len(f) == 1 && (f[0] == "mute" || f[0] == "unmute"):
		c.tap.muted = f[0] == "mute"
		return "", nil
	case len(f) == 1 && f[0] == "stats":
		return fmt.Sprintf(" %+v %+v", c.send.Stats(), c.tr.Stats()), nil
	case len(f) == 2 && f[0] == "replay":
		return c.replay(f[1])
	}
	return "", fmt.Errorf("unknown command %q", line)
}

func (c *prefill) peer(addrHex, capsHex string) error {
	return ucxpipe.Join(c.tr, addrHex, capsHex, func(remote transfer.Capabilities) error {
		_, err := c.send.Connect(remote)
		return err
	})
}

func (c *prefill) publish(req transfer.RequestID, first int) error {
	ch, err := chunkOf(req)
	if err != nil {
		return err
	}
	pages, err := c.send.Expect(peer.SendPlan{Request: req, Attempt: 1, To: "decode", As: prefillKV, Chunk: ch, BlockTokens: 16})
	if err != nil {
		return err
	}
	if first < 0 || first+len(pages) > len(c.rows) {
		return fmt.Errorf("slots %d.. hold no %d pages; %d slots", first, len(pages), len(c.rows))
	}
	units := make([]contract.Unit, len(pages))
	for i, pg := range pages {
		copy(c.rows[first+i], pattern(req, pg.Index))
		units[i] = contract.Unit{Name: pg.Name, Local: first + i}
	}
	ext, err := contract.NewCacheExtent([]byte("kvready:peerucx"), units, true)
	if err != nil {
		return err
	}
	a, err := c.send.Publish(ext)
	if err != nil {
		return err
	}
	c.held = append(c.held, a)
	return nil
}

// replay is a writer that broke its fence: it puts into an offer's pages
// with the offer's keys, whatever became of them, and counts what the
// decode applied and what it refused.
func (c *prefill) replay(offerHex string) (string, error) {
	b, err := hex.DecodeString(offerHex)
	if err != nil {
		return "", err
	}
	o, err := peer.DecodeOffer(b)
	if err != nil {
		return "", err
	}
	ep, err := c.tr.Connect(o.Receiver)
	if err != nil {
		return "", err
	}
	var puts []transfer.Request
	for _, pg := range o.Pages {
		key, err := ep.UnpackKey(pg.Key)
		if err != nil {
			return "", err
		}
		r, err := ep.Put(bytesOf(0xEE, pg.Len), key, pg.Offset)
		if err != nil {
			return "", err
		}
		puts = append(puts, r)
	}
	fl, err := ep.Flush()
	if err != nil {
		return "", err
	}
	c.until(fl)
	landed, refused := 0, 0
	for _, r := range puts {
		switch err := c.until(r); {
		case err == nil:
			landed++
		case errors.Is(err, ucx.ErrRevoked):
			refused++
		default:
			return "", err
		}
	}
	return fmt.Sprintf(" landed=%d refused=%d", landed, refused), nil
}

// until progresses until r completes; the parent bounds the child's life.
func (c *prefill) until(r transfer.Request) error {
	for {
		if done, err := r.Test(); done {
			return err
		}
		c.step()
	}
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// tap is the prefill's transport as its Sender sees it: every offer heard
// is printed (so a later life can replay it), and while muted every message
// to the decode is swallowed — the puts still go, the reports never leave.
type tap struct {
	*ucx.Transport
	out   io.Writer
	muted bool // the child's one goroutine reads and writes it
}

func (t *tap) SetHandlers(h transfer.Handlers) {
	msg := h.Message
	h.Message = func(from transfer.Peer, inc transfer.Incarnation, b []byte) {
		if _, err := peer.DecodeOffer(b); err == nil {
			fmt.Fprintf(t.out, "offer %x\n", b)
		}
		msg(from, inc, b)
	}
	t.Transport.SetHandlers(h)
}

func (t *tap) Connect(p transfer.Peer) (transfer.Endpoint, error) {
	ep, err := t.Transport.Connect(p)
	if err != nil {
		return nil, err
	}
	return &mutable{Endpoint: ep, t: t}, nil
}

type mutable struct {
	transfer.Endpoint
	t *tap
}

// Send swallows the message while muted: its request never completes, as a
// report lost with its writer would not.
func (m *mutable) Send(b []byte) (transfer.Request, error) {
	if m.t.muted {
		return never{}, nil
	}
	return m.Endpoint.Send(b)
}

type never struct{}

func (never) Test() (bool, error) { return false, nil }
