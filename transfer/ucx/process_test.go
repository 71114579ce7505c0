package ucx

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// The two-process tests: the test binary re-executes itself as a prefill
// process (the writer), selected by childEnv, and drives it over its stdin
// and stdout. Addresses and keys travel on those pipes; the data and the
// reports travel over UCX.

const childEnv = "KVREADY_UCX_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// childSpec is what the parent tells the child in childEnv:
// "name inc mode transports noPeerErrors".
func childSpec(name transfer.Peer, inc transfer.Incarnation, cfg Config) string {
	return fmt.Sprintf("%s %d %d %s %t", name, inc, cfg.Mode, cfg.Transports, cfg.NoPeerErrors)
}

// runChild is the prefill process. Commands, one a line on stdin:
//
//	addr HEX            AddPeer and Connect
//	key HEX             UnpackKey on that endpoint
//	write K N SIZE TAG  put N pieces of SIZE bytes (pattern TAG+i) at i*SIZE
//	                    with key K, flush, then report "done TAG"
//	stream K SIZE       put pieces with key K, one after another, for ever
//	exit                close and exit
//
// It answers "ok ..." or "err ..." a line each on stdout, and exits when
// stdin closes (its parent went).
func runChild(spec string, in io.Reader, out io.Writer) int {
	f := strings.Fields(spec)
	if len(f) != 5 {
		fmt.Fprintf(out, "err spec %q\n", spec)
		return 2
	}
	inc, _ := strconv.ParseUint(f[1], 10, 64)
	mode, _ := strconv.Atoi(f[2])
	cfg := Config{Name: transfer.Peer(f[0]), Incarnation: transfer.Incarnation(inc), Mode: Mode(mode), Transports: f[3], NoPeerErrors: f[4] == "true"}
	t, err := New(cfg)
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	defer t.Close()
	fmt.Fprintf(out, "addr %x\n", t.Address())
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	c := &childState{t: t, out: out}
	for {
		select {
		case line, ok := <-lines:
			if !ok || line == "exit" {
				return 0
			}
			if err := c.do(line); err != nil {
				fmt.Fprintf(out, "err %s: %v\n", line, err)
			} else {
				fmt.Fprintf(out, "ok %s\n", strings.Fields(line)[0])
			}
		default:
			c.step()
		}
	}
}

type childState struct {
	t      *Transport
	out    io.Writer
	ep     transfer.Endpoint
	keys   []transfer.RemoteKey
	stream *streamer
}

type streamer struct {
	key  transfer.RemoteKey
	size int
	off  int
	req  transfer.Request
	tag  byte
}

func (c *childState) do(line string) error {
	f := strings.Fields(line)
	switch f[0] {
	case "addr":
		b, err := hex.DecodeString(f[1])
		if err != nil {
			return err
		}
		peer, _, err := c.t.AddPeer(b)
		if err != nil {
			return err
		}
		c.ep, err = c.t.Connect(peer)
		return err
	case "key":
		b, err := hex.DecodeString(f[1])
		if err != nil {
			return err
		}
		k, err := c.ep.UnpackKey(b)
		if err != nil {
			return err
		}
		c.keys = append(c.keys, k)
		return nil
	case "write":
		k, _ := strconv.Atoi(f[1])
		n, _ := strconv.Atoi(f[2])
		size, _ := strconv.Atoi(f[3])
		tag, _ := strconv.Atoi(f[4])
		return c.write(c.keys[k], n, size, byte(tag))
	case "stream":
		k, _ := strconv.Atoi(f[1])
		size, _ := strconv.Atoi(f[2])
		c.stream = &streamer{key: c.keys[k], size: size}
		return nil
	}
	return fmt.Errorf("unknown command %q", f[0])
}

// write posts the pieces, waits for the flush (the owner applied every
// one), and only then reports: a DONE after the writer's own flush.
func (c *childState) write(k transfer.RemoteKey, n, size int, tag byte) error {
	var reqs []transfer.Request
	for i := range n {
		r, err := c.ep.Put(pattern(tag+byte(i), size), k, i*size)
		if err != nil {
			return err
		}
		reqs = append(reqs, r)
	}
	fl, err := c.ep.Flush()
	if err != nil {
		return err
	}
	if err := c.until(fl); err != nil {
		return err
	}
	for _, r := range reqs {
		if err := c.until(r); err != nil {
			return err
		}
	}
	r, err := c.ep.Send([]byte(fmt.Sprintf("done %d", tag)))
	if err != nil {
		return err
	}
	return c.until(r)
}

// until progresses until r completes; the parent bounds the child's life.
func (c *childState) until(r transfer.Request) error {
	for {
		if done, err := r.Test(); done {
			return err
		}
		c.step()
	}
}

func (c *childState) step() {
	if c.t.Progress() == 0 {
		time.Sleep(20 * time.Microsecond) // two cores shared: let the parent run
	}
	s := c.stream
	if s == nil {
		return
	}
	if s.req != nil {
		done, err := s.req.Test()
		if !done {
			return
		}
		if err != nil {
			fmt.Fprintf(c.out, "err stream: %v\n", err)
			c.stream = nil
			return
		}
	}
	s.tag++
	r, err := c.ep.Put(pattern(s.tag, s.size), s.key, s.off)
	if err != nil {
		fmt.Fprintf(c.out, "err stream: %v\n", err)
		c.stream = nil
		return
	}
	s.req = r
	s.off = (s.off + s.size) % (s.key.Len() - s.size + 1)
}

// child is the parent's handle on a prefill process.
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	addr  []byte
}

// childBound is the wall-clock bound on one exchange with the child: it
// bounds a wait on another process, asserts nothing about durations.
const childBound = 2 * time.Minute

func startChild(t *testing.T, name transfer.Peer, inc transfer.Incarnation, cfg Config, parent *node) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+childSpec(name, inc, cfg))
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	c := &child{t: t, cmd: cmd, in: in, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("child %s#%d stderr:\n%s", name, inc, stderr.String())
		}
	})
	line := c.expect(parent, "addr ")
	c.addr, err = hex.DecodeString(strings.TrimPrefix(line, "addr "))
	require.NoError(t, err)
	return c
}

// send writes a command and waits for its answer, progressing the parent's
// transport meanwhile (a checked put lands only in the owner's progress).
func (c *child) send(parent *node, cmd string) {
	c.t.Helper()
	_, err := fmt.Fprintln(c.in, cmd)
	require.NoError(c.t, err)
	if cmd != "exit" {
		c.expect(parent, "ok "+strings.Fields(cmd)[0])
	}
}

func (c *child) expect(parent *node, prefix string) string {
	c.t.Helper()
	deadline := time.Now().Add(childBound)
	for time.Now().Before(deadline) {
		select {
		case line, ok := <-c.lines:
			require.True(c.t, ok, "the child exited while %q was awaited", prefix)
			require.True(c.t, strings.HasPrefix(line, prefix), "the child answered %q; %q expected", line, prefix)
			return line
		default:
			progressOrYield(parent)
		}
	}
	require.FailNow(c.t, "a bounded wait ran out", "no %q from the child within %v", prefix, childBound)
	return ""
}

// drainRounds is how many progress rounds the decode side runs to let
// whatever a dead writer left in flight arrive.
const drainRounds = 5000

func progressOrYield(n *node) {
	if n.Progress() == 0 {
		time.Sleep(20 * time.Microsecond)
	}
}

// until progresses the parent until cond holds, within childBound.
func until(t *testing.T, n *node, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(childBound)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "a bounded wait ran out: %s within %v", what, childBound)
		progressOrYield(n)
	}
}

func twoProcessSetups(t *testing.T) []setup {
	return setups(t, Checked, OneSided)
}

// TestTwoProcesses: a prefill process puts into the decode process's
// registered pages and reports after its own flush; the report arrives with
// the prefill's name and incarnation, and the pages hold exactly what was
// put.
func TestTwoProcesses(t *testing.T) {
	for _, s := range twoProcessSetups(t) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := startChild(t, "prefill", 1, s.cfg, decode)
			_, _, err := decode.AddPeer(prefill.addr)
			require.NoError(t, err)
			_, err = decode.Connect("prefill")
			require.NoError(t, err)
			const n, size = 8, 64 << 10
			pages := sentinel(n*size + 512)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			prefill.send(decode, fmt.Sprintf("addr %x", decode.Address()))
			prefill.send(decode, fmt.Sprintf("key %x", mem.PackedKey()))
			prefill.send(decode, fmt.Sprintf("write 0 %d %d 40", n, size))
			until(t, decode, "the prefill's report", func() bool { return len(decode.heard()) == 1 })
			assert.Equal(t, []heardMsg{{"prefill", 1, "done 40"}}, decode.heard())
			for i := range n {
				assert.Equal(t, pattern(40+byte(i), size), pages[i*size:(i+1)*size], "piece %d", i)
			}
			assert.Equal(t, sentinel(512), pages[n*size:], "nothing beyond the pieces")
			prefill.send(decode, "exit")
			require.NoError(t, prefill.cmd.Wait(), "the child exits cleanly")
		})
	}
}

// TestTwoProcessesKilledMidTransfer: the prefill process streams puts into
// the decode's pages and is killed (SIGKILL) mid-transfer. Over tcp the
// decode side hears the endpoint error with the dead life's name and
// incarnation; over shared memory (no peer error handling in UCX 1.13) it
// hears nothing, which is why such a session can end only in containment.
// Either way nothing crashes, a Checked revocation still fences (no byte
// changes after it), and a restarted prefill (#2) handed the dead life's
// key is refused while its own new key works.
func TestTwoProcessesKilledMidTransfer(t *testing.T) {
	for _, s := range setups(t, Checked) {
		t.Run(s.name, func(t *testing.T) {
			decode := newNode(t, s.cfg, "decode", 1)
			prefill := startChild(t, "prefill", 1, s.cfg, decode)
			_, _, err := decode.AddPeer(prefill.addr)
			require.NoError(t, err)
			_, err = decode.Connect("prefill")
			require.NoError(t, err)
			pages := sentinel(1 << 20)
			mem, err := decode.Register(pages)
			require.NoError(t, err)
			prefill.send(decode, fmt.Sprintf("addr %x", decode.Address()))
			prefill.send(decode, fmt.Sprintf("key %x", mem.PackedKey()))
			prefill.send(decode, "stream 0 65536")
			until(t, decode, "some puts to land", func() bool { return decode.Stats().PutsApplied >= 5 })

			require.NoError(t, prefill.cmd.Process.Signal(syscall.SIGKILL))
			_ = prefill.cmd.Wait()
			if s.cfg.NoPeerErrors {
				for range drainRounds {
					decode.Progress()
				}
				assert.Empty(t, decode.failures(), "shared memory reports no dead peer")
			} else {
				until(t, decode, "the endpoint error", func() bool { return len(decode.failures()) == 1 })
				f := decode.failures()[0]
				assert.Equal(t, transfer.Peer("prefill"), f.peer)
				assert.Equal(t, transfer.Incarnation(1), f.inc)
				assert.ErrorIs(t, f.err, ErrPeerFailed)
			}
			how, err := mem.Revoke()
			require.NoError(t, err)
			require.Equal(t, transfer.RevokedFenced, how)
			atRevoke := bytes.Clone(pages)
			for range drainRounds {
				decode.Progress()
			}
			assert.Equal(t, atRevoke, pages, "no byte changed after the revocation")

			// The restarted prefill: the dead life's key is refused, a new
			// registration's key works.
			reborn := startChild(t, "prefill", 2, s.cfg, decode)
			_, _, err = decode.AddPeer(reborn.addr)
			require.NoError(t, err)
			_, err = decode.Connect("prefill")
			require.NoError(t, err)
			fresh := sentinel(4096)
			mem2, err := decode.Register(fresh)
			require.NoError(t, err)
			reborn.send(decode, fmt.Sprintf("addr %x", decode.Address()))
			reborn.send(decode, fmt.Sprintf("key %x", mem.PackedKey()))
			reborn.send(decode, fmt.Sprintf("key %x", mem2.PackedKey()))
			_, err = fmt.Fprintln(reborn.in, "write 0 1 4096 1")
			require.NoError(t, err)
			line := reborn.expect(decode, "err write")
			assert.Contains(t, line, ErrRevoked.Error(), "the dead life's key is refused")
			assert.Equal(t, atRevoke, pages)
			reborn.send(decode, "write 1 1 4096 9")
			until(t, decode, "#2's report", func() bool { return len(decode.heard()) == 1 })
			assert.Equal(t, []heardMsg{{"prefill", 2, "done 9"}}, decode.heard())
			assert.Equal(t, pattern(9, 4096), fresh)
			reborn.send(decode, "exit")
			require.NoError(t, reborn.cmd.Wait())
		})
	}
}

// TestTwoProcessesPaused: a prefill process paused (SIGSTOP) mid-stream is
// not a dead one: over tcp no endpoint error comes (the kernel still holds
// the connection). The decode side revokes meanwhile (fenced); resumed
// (SIGCONT), the prefill's next put is refused and nothing lands after the
// revocation.
func TestTwoProcessesPaused(t *testing.T) {
	cfg := Config{Transports: "tcp"}
	decode := newNode(t, cfg, "decode", 1)
	prefill := startChild(t, "prefill", 1, cfg, decode)
	_, _, err := decode.AddPeer(prefill.addr)
	require.NoError(t, err)
	_, err = decode.Connect("prefill")
	require.NoError(t, err)
	pages := sentinel(1 << 20)
	mem, err := decode.Register(pages)
	require.NoError(t, err)
	prefill.send(decode, fmt.Sprintf("addr %x", decode.Address()))
	prefill.send(decode, fmt.Sprintf("key %x", mem.PackedKey()))
	// Eager puts (4 KiB): a writer stopped in the middle of a rendezvous
	// put into the registration makes the revocation new-only, by design
	// (TestRevokeWaitsForDirectReceives); with 64 KiB puts the stop landed
	// there now and then (2 runs in 10 on main, on a loaded machine).
	prefill.send(decode, "stream 0 4096")
	until(t, decode, "some puts to land", func() bool { return decode.Stats().PutsApplied >= 5 })

	require.NoError(t, prefill.cmd.Process.Signal(syscall.SIGSTOP))
	for range drainRounds {
		decode.Progress()
	}
	assert.Empty(t, decode.failures(), "a paused peer is not reported failed")
	how, err := mem.Revoke()
	require.NoError(t, err)
	require.Equal(t, transfer.RevokedFenced, how)
	atRevoke := bytes.Clone(pages)
	require.NoError(t, prefill.cmd.Process.Signal(syscall.SIGCONT))
	line := prefill.expect(decode, "err stream")
	assert.Contains(t, line, ErrRevoked.Error())
	for range drainRounds {
		decode.Progress()
	}
	assert.Equal(t, atRevoke, pages, "no byte changed after the revocation")
	assert.Empty(t, decode.failures())
	prefill.send(decode, "exit")
	require.NoError(t, prefill.cmd.Wait())
}
