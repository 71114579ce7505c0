package simulate

import (
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
)

// ucxFabric is the medium of a disaggregated run over UCX (Transport
// TransportUCX): the decode process's transport — this process's, Checked
// mode — and the prefill process, a child this process starts by
// re-executing itself (os.Executable(), prefillEnv set; see
// RunDisaggPrefill) and kills, restarts and pauses as the run's scenarios
// ask. Addresses and capabilities travel on the child's pipes; offers,
// pages and reports over UCX. It is the run's prefill side too
// (prefillSide): the child runs the prefill side the configuration names,
// which publishes what the driver asks of it, and says its counts on its
// pipe.
type ucxFabric struct {
	d       *disaggDriver
	tr      *ucx.Transport
	rec     *ucxRecord
	exe     string
	start   time.Time
	child   *prefillProc
	offers  []sentOffer // the offers sent to the current life, last ucxReplayed kept
	replays []sentOffer // a dead life's, for the next life to replay once their attempts settled
	resume  int64       // the step at which the paused child is continued; -1 while it runs
	busy    bool        // the decode transport's last Progress handled something
	ended   error       // why the last life did not end well once told to, if it did not
	st      prefillStats
	us      DisaggUCXStats
}

// sentOffer is an offer sent to a life of the prefill process, and the
// attempt it was for.
type sentOffer struct {
	a   *dattempt
	msg []byte
}

// ucxReplayed is how many of a dead life's last offers its next life
// replays (docs/ucx.md: a restarted life that still holds an earlier life's
// keys, vLLM #55470).
const ucxReplayed = 8

// ucxBound bounds every wait on the prefill process: its first lines, its
// exit once told to end. It bounds a wait; it asserts nothing.
const ucxBound = time.Minute

// DisaggUCXStats is what a run over UCX did to its prefill process, and
// what the decode process's transport counted.
type DisaggUCXStats struct {
	Transports string `json:"tls"` // UCX_TLS of both processes
	// Lives of the prefill process started; Kills (SIGKILL mid-transfer,
	// each followed by a new life) and Pauses (SIGSTOP, then SIGCONT)
	// performed.
	Lives  int `json:"lives"`
	Kills  int `json:"kills"`
	Pauses int `json:"pauses"`
	// The decode transport's counts: puts applied into its registrations,
	// refused (any reason), and refused as naming a revoked registration.
	PutsApplied uint64 `json:"puts_applied"`
	PutsRefused uint64 `json:"puts_refused"`
	PutsLate    uint64 `json:"puts_late"`
	// EndpointErrors heard: a dead prefill reported (never over sm).
	EndpointErrors int `json:"endpoint_errors"`
	// A new life's replays of the dead life's offers, with their keys:
	// offers replayed, and the puts the decode process applied or refused
	// as revoked, or that failed otherwise.
	Replays       int `json:"replays"`
	ReplayLanded  int `json:"replay_puts_landed"`
	ReplayRefused int `json:"replay_puts_refused"`
	ReplayOther   int `json:"replay_puts_failed"`
}

// write prints the counts as the summary's rows.
func (u *DisaggUCXStats) write(row func(string, any)) {
	row("UCX", fmt.Sprintf("over %s, Checked mode; the prefill process: %d lives, %d killed mid-transfer, %d paused", u.Transports, u.Lives, u.Kills, u.Pauses))
	row("puts at the decode process", fmt.Sprintf("%d applied, %d refused (%d naming a revoked registration)", u.PutsApplied, u.PutsRefused, u.PutsLate))
	row("endpoint errors heard", u.EndpointErrors)
	row("dead lives' offers replayed", fmt.Sprintf("%d by the next life (vLLM #55470): %d puts landed, %d refused as revoked, %d failed otherwise",
		u.Replays, u.ReplayLanded, u.ReplayRefused, u.ReplayOther))
}

func newUCXFabric(d *disaggDriver) (*ucxFabric, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("simulate: finding this program to start the prefill process: %w", err)
	}
	tls := d.cfg.UCXTransports
	if tls == "" {
		tls = "tcp"
	}
	tr, err := ucx.New(ucxConfigOf(disaggDecode, 1, tls))
	if err != nil {
		return nil, fmt.Errorf("simulate: the decode process's UCX transport: %w", err)
	}
	f := &ucxFabric{d: d, tr: tr, rec: &ucxRecord{}, exe: exe, start: time.Now(), resume: -1,
		st: prefillStats{Outcomes: map[string]int{}}}
	f.us.Transports = tls
	return f, nil
}

// ucxConfigOf is either process's transport: Checked mode (a revocation
// fences), over tls; over shared memory without peer error handling, which
// UCX 1.13's sm transports do not offer (docs/ucx.md).
func ucxConfigOf(name transfer.Peer, inc transfer.Incarnation, tls string) ucx.Config {
	return ucx.Config{Name: name, Incarnation: inc, Mode: ucx.Checked, Transports: tls, NoPeerErrors: tls == "sm"}
}

// transport is the decode transport as the run uses it: every registration
// recorded for the checker, and every Progress — where a put lands, in
// Checked mode — followed by the checker's scan of the pages.
func (f *ucxFabric) transport() transfer.Transport {
	return scannedTransport{Transport: f.tr, f: f}
}

// begin starts the first life of the prefill process.
func (f *ucxFabric) begin() error { return f.startLife(1) }

// startLife starts life inc of the prefill process and connects both ways:
// the decode transport learns its address and opens its endpoint to it
// (a worker hears only on an endpoint it opened), the child learns the
// decode's address and capabilities and opens its own.
func (f *ucxFabric) startLife(inc transfer.Incarnation) error {
	p, err := startPrefill(f.exe, f.d.cfg, inc)
	if err != nil {
		return err
	}
	f.child = p
	f.us.Lives++
	name, at, err := f.tr.AddPeer(p.addr)
	if err != nil || name != ucxPrefills[0] || at != inc {
		p.kill()
		return fmt.Errorf("simulate: the prefill process's address names %s#%d (%v); %s#%d expected", name, at, err, ucxPrefills[0], inc)
	}
	if _, err := f.tr.Connect(name); err != nil {
		p.kill()
		return fmt.Errorf("simulate: connecting to %s#%d: %w", name, inc, err)
	}
	caps, err := transfer.AppendCapabilities(nil, f.d.self())
	if err != nil {
		p.kill()
		return err
	}
	p.tell(fmt.Sprintf("peer %x %x", f.tr.Address(), caps))
	return nil
}

// advert is the current life's advertisement, as it sent it on its pipe.
func (f *ucxFabric) advert(p transfer.Peer) (transfer.Capabilities, error) {
	if f.child == nil || p != f.child.caps.Peer {
		return transfer.Capabilities{}, fmt.Errorf("simulate: no prefill process %q", p)
	}
	return f.child.caps, nil
}

// sent records an offer sent to the current life.
func (f *ucxFabric) sent(a *dattempt, msg []byte) {
	f.offers = append(f.offers, sentOffer{a: a, msg: msg})
	if len(f.offers) > ucxReplayed {
		f.offers = slices.Delete(f.offers, 0, len(f.offers)-ucxReplayed)
	}
}

// step moves the run's clock to the machine's: a step is DisaggStep of
// wall-clock time since the run began. A run with nothing to do yields the
// machine a moment (two processes share it).
func (f *ucxFabric) step() {
	if !f.busy {
		time.Sleep(50 * time.Microsecond)
	}
	f.d.step = max(f.d.step+1, int64(time.Since(f.start)/DisaggStep))
	f.d.chk.scan()
	f.d.idle = !f.busy && f.resume < 0 && len(f.replays) == 0 && f.child.replaying == 0
	f.busy = false
}

// snapshot is the run's UCX counts so far.
func (f *ucxFabric) snapshot() *DisaggUCXStats {
	us := f.us
	st := f.tr.Stats()
	us.PutsApplied, us.PutsRefused, us.PutsLate = st.PutsApplied, st.PutsRefused, st.PutsLate
	return &us
}

// faults does the scenarios due: continue a paused child when its pause is
// over; kill the child and start its next life, or pause it, when one is
// due and a transfer is in flight (mid-transfer); and have the current life
// replay the dead life's offers once their attempts settled.
func (f *ucxFabric) faults() error {
	d := f.d
	if f.resume >= 0 && d.step >= f.resume {
		if err := f.child.signal(syscall.SIGCONT); err != nil {
			return err
		}
		f.resume = -1
	}
	// Due by the share of requests ended, not by the clock: a pause holds
	// the run up, and the scenarios stay apart whatever the machine's pace.
	due := func(i, n int) bool { return d.ended*(n+1) >= (i+1)*d.cfg.Requests }
	dueHalf := func(i, n int) bool { return d.ended*(2*n+2) >= (2*i+1)*d.cfg.Requests }
	if f.resume < 0 && d.held > 0 {
		switch {
		case d.rs < d.cfg.Restarts && due(d.rs, d.cfg.Restarts):
			d.rs++
			if err := f.restart(); err != nil {
				return err
			}
		case f.us.Pauses < d.cfg.Pauses && dueHalf(f.us.Pauses, d.cfg.Pauses):
			if err := f.child.signal(syscall.SIGSTOP); err != nil {
				return err
			}
			f.us.Pauses++
			f.resume = d.step + max(1, int64(d.cfg.PauseFor/DisaggStep))
		}
	}
	kept := f.replays[:0]
	for _, o := range f.replays {
		if o.a.outcome == "" || !(o.a.settled || o.a.contained) {
			kept = append(kept, o)
			continue
		}
		f.child.tell(fmt.Sprintf("replay %x", o.msg))
		f.child.replaying++
		f.us.Replays++
	}
	clear(f.replays[len(kept):])
	f.replays = kept
	return nil
}

// restart kills the prefill process (SIGKILL, reaped) and starts its next
// life, which is handed the dead life's last offers to replay once their
// attempts settled.
func (f *ucxFabric) restart() error {
	old := f.child
	old.kill()
	f.us.Kills++
	f.pull(old) // what it said before it died
	f.replays = append(f.replays, f.offers...)
	f.offers = nil
	f.st.Outcomes["died with its process"] += old.pending()
	return f.startLife(old.inc + 1)
}

// close ends the prefill process: told to end (its stdin closed), then
// killed if it has not within ucxBound; ended says how it went.
func (f *ucxFabric) close() {
	if f.child != nil {
		f.ended = f.child.end()
	}
}

// closeTransport closes the decode transport, once the managers are done.
func (f *ucxFabric) closeTransport() { _ = f.tr.Close() }

// ucxRecord is the checker's record over UCX, from the decode process: a
// Checked registration may be written — by any process holding its key —
// until a revocation answered that it fenced. The decode process cannot see
// whether the writer that holds the key will use it, so a page returned
// unrevoked counts, whatever that writer does; what landed is seen in the
// bytes. The sources are the prefill process's, watched there by a checker
// of its own over its own record (ucxPutRecord), whose counts it says on its
// pipe.
type ucxRecord struct{}

// MayWrite: m was not revoked with a fence.
func (ucxRecord) MayWrite(m transfer.Memory) bool {
	fm, ok := m.(*fencedMemory)
	return !ok || !fm.fenced.Load()
}

// MayRead: no source is watched in the decode process.
func (ucxRecord) MayRead([]byte) bool { return false }

// scannedTransport is the decode transport with its registrations' fences
// recorded and the checker's scan after every Progress.
type scannedTransport struct {
	transfer.Transport
	f *ucxFabric
}

// Register registers mem, wrapped so that its revocation is recorded.
func (t scannedTransport) Register(mem []byte) (transfer.Memory, error) {
	m, err := t.Transport.Register(mem)
	if err != nil {
		return nil, err
	}
	return &fencedMemory{Memory: m}, nil
}

// SetHandlers counts the endpoint errors the manager hears.
func (t scannedTransport) SetHandlers(h transfer.Handlers) {
	lost := h.EndpointError
	h.EndpointError = func(p transfer.Peer, inc transfer.Incarnation, err error) {
		t.f.us.EndpointErrors++
		if lost != nil {
			lost(p, inc, err)
		}
	}
	t.Transport.SetHandlers(h)
}

// Progress progresses the transport — puts land here — then has the
// checker scan the pages.
func (t scannedTransport) Progress() int {
	n := t.Transport.Progress()
	t.f.busy = t.f.busy || n > 0
	t.f.d.chk.scan()
	return n
}

// fencedMemory is a registration whose revocation's answer is recorded.
type fencedMemory struct {
	transfer.Memory
	fenced atomic.Bool
}

// Revoke revokes, and records a fence once one is answered.
func (m *fencedMemory) Revoke() (transfer.Revocation, error) {
	r, err := m.Memory.Revoke()
	if err == nil && r.Fences() {
		m.fenced.Store(true)
	}
	return r, err
}
