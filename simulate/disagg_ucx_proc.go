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

	asked     int        // send commands told
	st        childState // what it said last
	replaying int        // replays asked for, not yet answered
	closeIn   sync.Once
}

// childState is the prefill process's counts, as its last state line said
// them (prefillChild.state).
type childState struct {
	asked, pending, publishes, refused      int
	lends, frees, early, doubles, free, all int
	outcomes                                map[string]int
}

// pending counts the publications asked for whose slots are not back: those
// the child holds, and those it has not taken yet.
func (p *prefillProc) pending() int { return p.asked - p.st.asked + p.st.pending }

// startPrefill starts life inc of the prefill process and waits, bounded,
// for its address and its capabilities.
func startPrefill(exe string, cfg DisaggConfig, inc transfer.Incarnation) (*prefillProc, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), prefillEnv+"="+prefillSpec{Inc: inc, TLS: cfg.UCXTransports, Naive: cfg.Naive, Slots: cfg.Pages,
		Timeout: 4 * cfg.deadline(), Grace: cfg.grace()}.String())
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
// first) and reaps it, killing it if it has not ended within ucxBound. It
// answers why the child did not end well: killed, or a status other than
// 0 (a data race the race detector found in it is one).
func (p *prefillProc) end() error {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.closeIn.Do(func() { close(p.in) })
	select {
	case <-p.exited:
	case <-time.After(ucxBound):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("simulate: the prefill process #%d did not end within %v of being told to; killed. Its stderr: %s", p.inc, ucxBound, p.stderr)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("simulate: the prefill process #%d ended with status %d; its stderr: %s", p.inc, code, p.stderr)
	}
	return nil
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

// The fabric as the run's prefill side: the child's prefill side publishes
// each share the driver asks for, from staging slots its manager lends the
// Sender and takes back as its rule says — kvready's engine once the
// Sender's Quiesce proves every put that reads them completed, the naive
// one on the outcome.

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
	f.child.asked++
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
	if f.child.gone() {
		return fmt.Errorf("simulate: the prefill process #%d exited unasked; its stderr: %s", f.child.inc, f.child.stderr)
	}
	return nil
}

// gone reports whether the child's stdout ended and all it said was taken.
func (p *prefillProc) gone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eof && len(p.lines) == 0
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
//	state …        its counts (prefillChild.state): what changed since the last is added to the run's
//	replayed L R O a replay's puts: L landed, R refused as revoked, O otherwise failed
//	err WHAT       a command failed
func (f *ucxFabric) heard(p *prefillProc, w []string) error {
	nums := make([]int, len(w))
	for i := 1; i < len(w); i++ {
		nums[i], _ = strconv.Atoi(w[i])
	}
	switch {
	case len(w) == 12 && w[0] == "state":
		st := childState{asked: nums[1], pending: nums[2], publishes: nums[3], refused: nums[4], lends: nums[5], frees: nums[6],
			early: nums[7], doubles: nums[8], free: nums[9], all: nums[10], outcomes: map[string]int{}}
		for _, kv := range strings.Split(w[11], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				st.outcomes[strings.ReplaceAll(k, "-", " ")], _ = strconv.Atoi(v)
			}
		}
		was := p.st
		f.st.Publishes += st.publishes - was.publishes
		f.st.Refused += st.refused - was.refused
		for k, n := range st.outcomes {
			f.st.Outcomes[k] += n - was.outcomes[k]
		}
		f.d.chk.addSources(st.lends-was.lends, st.frees-was.frees, st.early-was.early, st.doubles-was.doubles)
		p.st = st
	case len(w) == 4 && w[0] == "replayed":
		f.us.ReplayLanded += nums[1]
		f.us.ReplayRefused += nums[2]
		f.us.ReplayOther += nums[3]
		p.replaying--
	default:
		return errors.New("not a line the prefill process says")
	}
	return nil
}

// sources are the current life's source slots: free, and in all.
func (f *ucxFabric) sources() (free, all int) {
	if f.child.st.all == 0 {
		return f.d.cfg.Pages, f.d.cfg.Pages // it has said nothing yet: nothing lent
	}
	return f.child.st.free, f.child.st.all
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
func (f *ucxFabric) pending() int { return f.child.pending() }
