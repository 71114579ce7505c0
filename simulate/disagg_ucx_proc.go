package simulate

import (
	"bufio"
	hexa "encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/sim"
)

// prefillProc is the decode process's handle on one life of the prefill
// process: its pipes, what it said, and what it holds.
type prefillProc struct {
	cmd    *exec.Cmd
	inc    transfer.Incarnation
	addr   []byte
	caps   transfer.Capabilities
	in     chan string // lines to its stdin, written by a goroutine: a paused child must not block the run
	stderr *tailBuffer
	exited chan struct{}

	mu    sync.Mutex
	lines []string // said on its stdout, not yet taken
	eof   bool

	pending   int // publications asked for whose slots are not back
	slotsOut  int // source slots lent, not back
	replaying int // replays asked for, not yet answered
	closeIn   sync.Once
}

// startPrefill starts life inc of the prefill process and waits, bounded,
// for its address and its capabilities.
func startPrefill(exe string, cfg DisaggConfig, inc transfer.Incarnation) (*prefillProc, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), prefillEnv+"="+prefillSpec{Inc: inc, TLS: cfg.UCXTransports, Naive: cfg.Naive, Slots: cfg.Pages,
		Timeout: 4 * cfg.deadline()}.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &prefillProc{cmd: cmd, inc: inc, in: make(chan string, 1<<16), stderr: &tailBuffer{max: 16 << 10}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("simulate: starting the prefill process (%s): %w", exe, err)
	}
	go p.read(stdout)
	go p.write(stdin)
	go func() { _ = cmd.Wait(); close(p.exited) }()
	addr, err := p.await("addr ")
	if err == nil {
		p.addr, err = hexa.DecodeString(addr)
	}
	var caps string
	if err == nil {
		caps, err = p.await("caps ")
	}
	var b []byte
	if err == nil {
		b, err = hexa.DecodeString(caps)
	}
	if err == nil {
		p.caps, err = transfer.DecodeCapabilities(b)
	}
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("simulate: the prefill process #%d: %w; its stderr: %s", inc, err, p.stderr)
	}
	return p, nil
}

func (p *prefillProc) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.eof = true
	p.mu.Unlock()
}

func (p *prefillProc) write(in io.WriteCloser) {
	defer in.Close()
	for line := range p.in {
		if _, err := fmt.Fprintln(in, line); err != nil {
			for range p.in { // the child is gone: drain, so no sender blocks
			}
			return
		}
	}
}

// tell sends the child a command line.
func (p *prefillProc) tell(line string) { p.in <- line }

// take answers what the child said since the last take.
func (p *prefillProc) take() (lines []string, eof bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines, p.lines = p.lines, nil
	return lines, p.eof
}

// await waits, bounded, for the child's next line, which must start with
// prefix, and answers the rest of it.
func (p *prefillProc) await(prefix string) (string, error) {
	deadline := time.Now().Add(ucxBound)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		if len(p.lines) > 0 {
			line := p.lines[0]
			p.lines = p.lines[1:]
			p.mu.Unlock()
			if !strings.HasPrefix(line, prefix) {
				return "", fmt.Errorf("it said %q; %q… expected", line, prefix)
			}
			return strings.TrimPrefix(line, prefix), nil
		}
		eof := p.eof
		p.mu.Unlock()
		if eof {
			return "", fmt.Errorf("it exited before saying %q…", prefix)
		}
		time.Sleep(time.Millisecond)
	}
	return "", fmt.Errorf("it said no %q… within %v", prefix, ucxBound)
}

func (p *prefillProc) signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("simulate: signalling the prefill process #%d (%v): %w", p.inc, sig, err)
	}
	return nil
}

// kill kills the child (SIGKILL, which a stopped process takes too) and
// reaps it.
func (p *prefillProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.closeIn.Do(func() { close(p.in) })
}

// end tells the child to end (its stdin closed; a paused one continued
// first) and reaps it, killing it if it has not ended within ucxBound.
func (p *prefillProc) end() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.closeIn.Do(func() { close(p.in) })
	select {
	case <-p.exited:
	case <-time.After(ucxBound):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tailBuffer keeps the last max bytes written to it: a child's stderr.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.b) == 0 {
		return "(empty)"
	}
	return strconv.Quote(string(t.b))
}

// The fabric as the run's prefill side: the child's Sender publishes each
// share the driver asks for, from source slots the child lends it and takes
// back as its manager says — kvready's once the Sender's Quiesce proves
// every put that reads them completed, the naive one's on the outcome.

func (f *ucxFabric) name() string {
	if f.d.cfg.Naive {
		return "naive"
	}
	return "kvready"
}

// publish asks the current life to publish w's share of a.
func (f *ucxFabric) publish(a *dattempt, w dwriter) error {
	share := make([]string, len(w.pages))
	for i, p := range w.pages {
		share[i] = strconv.Itoa(p)
	}
	f.child.tell(fmt.Sprintf("send %d %d %d %d %d %s", a.r.id, a.n, a.r.pages, w.id.Rank, w.id.Role, strings.Join(share, ",")))
	f.child.pending++
	return nil
}

// restarted is the simulated network's restart; over UCX the fabric
// restarts the process itself (faults).
func (f *ucxFabric) restarted(transfer.Peer, *sim.Node) error {
	return errors.New("simulate: a simulated restart in a run over UCX")
}

// round takes what the child said: publications lent, refused and ended,
// replays answered, and failures.
func (f *ucxFabric) round() error {
	if err := f.pull(f.child); err != nil {
		return err
	}
	if _, eof := f.child.take0(); eof {
		return fmt.Errorf("simulate: the prefill process #%d exited unasked; its stderr: %s", f.child.inc, f.child.stderr)
	}
	return nil
}

// take0 reports whether the child's stdout ended, taking nothing.
func (p *prefillProc) take0() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines), p.eof && len(p.lines) == 0
}

// pull handles every line p said since the last pull.
func (f *ucxFabric) pull(p *prefillProc) error {
	lines, _ := p.take()
	for _, line := range lines {
		if err := f.heard(p, strings.Fields(line)); err != nil {
			return fmt.Errorf("simulate: the prefill process #%d said %q: %w", p.inc, line, err)
		}
	}
	return nil
}

// heard handles one line of the child's:
//
//	lent N                 a publication's N slots lent to its Sender
//	refused                a share never lent: no slots for it
//	pub OUTCOME EARLY N    a publication's N slots back; EARLY 1 when a put
//	                       that reads one of them had not completed
//	replayed L R O         a replay's puts: L landed, R refused as revoked, O otherwise failed
//	err WHAT               a command failed
func (f *ucxFabric) heard(p *prefillProc, w []string) error {
	num := func(i int) int {
		if i >= len(w) {
			return 0
		}
		n, _ := strconv.Atoi(w[i])
		return n
	}
	switch {
	case len(w) == 2 && w[0] == "lent":
		f.st.Publishes++
		p.slotsOut += num(1)
		f.d.chk.addSources(num(1), 0, 0)
	case len(w) == 1 && w[0] == "refused":
		f.st.Refused++
		p.pending--
	case len(w) == 4 && w[0] == "pub":
		f.st.Outcomes[w[1]]++
		f.d.chk.addSources(0, num(3), num(2))
		p.slotsOut -= num(3)
		p.pending--
	case len(w) == 4 && w[0] == "replayed":
		f.us.ReplayLanded += num(1)
		f.us.ReplayRefused += num(2)
		f.us.ReplayOther += num(3)
		p.replaying--
	case len(w) > 0 && w[0] == "ok":
	default:
		return errors.New("not a line the prefill process says")
	}
	return nil
}

func (f *ucxFabric) stats() prefillStats {
	st := f.st
	st.Outcomes = make(map[string]int, len(f.st.Outcomes))
	for k, n := range f.st.Outcomes {
		st.Outcomes[k] = n
	}
	return st
}

// pending counts the current life's publications not yet back: a dead
// life's source slots died with it.
func (f *ucxFabric) pending() int { return f.child.pending }
