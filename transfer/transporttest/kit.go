package transporttest

import (
	"os"
	"path/filepath"
	"time"

	"github.com/kvready/kvready/internal/kittb"
	"github.com/kvready/kvready/transfer"
	"pgregory.net/rapid"
)

// Harness makes the network of one trial. The kit calls it once per trial
// with a seed it drew, so a deterministic network (transfer/sim) replays a
// failing trial exactly and rapid can shrink it; a real transport ignores
// the seed.
type Harness func(seed uint64) (Net, error)

// Net is one trial's network: processes that the kit starts by name, each
// with a transfer.Transport, and that can reach one another by name.
//
// Every transport lives in the kit's process: the kit registers its own
// byte slices and reads them to see what landed. A transport that runs
// between processes in production is tested as several instances in one
// process, wired through its real network (UCX: a ucp_context and worker per
// node over UCX_TLS=tcp or sm, so the bytes cross the transport, not the Go
// heap).
type Net interface {
	// Join starts a process named name as a new incarnation and returns its
	// transport; the name's previous life, if any, was killed. Every live
	// transport of the net can Connect to it by name.
	Join(name transfer.Peer) (transfer.Transport, error)
	// Step lets the network move (a simulation performs one pending action;
	// a real transport may wait briefly for the wire). It answers false only
	// when nothing more can happen until a transport is called again: the
	// kit then stops waiting early. A real transport answers true.
	Step() bool
	// Close ends the network after the trial; the kit calls nothing after it.
	Close() error
}

// Killer is a Net that can kill a process: its current incarnation ends at
// once, with no goodbye, and its peers learn of it from the transport (an
// endpoint error). The kit calls nothing of a killed transport again, and
// may Join the name again later. A Net without Kill is tested without
// deaths, and the rules about dead peers and old lives are not checked.
type Killer interface {
	// Kill ends the live process named name.
	Kill(name transfer.Peer) error
}

// TB is what the kit needs of a test: *testing.T has it.
type TB = kittb.TB

// Option adjusts a check.
type Option func(*config)

type config struct {
	rounds    int
	callBound time.Duration
	actions   int
	failDir   string
	counts    *counts // the kit's own tests count what trials checked
}

// counts are what the kit's checks saw, so its tests can tell that trials
// exercise every rule and do not pass by checking nothing.
type counts struct {
	checked map[string]int
}

func (c *counts) add(what string) {
	if c != nil {
		c.checked[what]++
	}
}

// Defaults of the options.
const (
	// DefaultRounds bounds every wait of the kit: a round is one Net.Step,
	// then one Progress of every live transport.
	DefaultRounds = 4096
	// DefaultCallBound is how long one call to a transport may take before
	// the kit reports that it blocked. A call that must not block returns in
	// microseconds: the bound only tells a hang from a slow machine.
	DefaultCallBound = 2 * time.Second
	// DefaultActions is the most actions one trial draws.
	DefaultActions = 48
)

// Rounds bounds every wait (DefaultRounds rounds). Raise it for a transport
// whose completions take many progress rounds (a real wire, where Step
// polls briefly).
func Rounds(n int) Option { return func(c *config) { c.rounds = n } }

// CallBound sets how long one call to a transport may take before the kit
// reports it blocked (DefaultCallBound). A call that blocks is left running:
// the trial ends with the rule it broke.
func CallBound(d time.Duration) Option { return func(c *config) { c.callBound = d } }

// Actions sets the most actions one trial draws (DefaultActions).
func Actions(n int) Option { return func(c *config) { c.actions = n } }

// FailFiles names the directory where the kit keeps rapid's failure file of
// a failed check (replay it with -rapid.failfile=PATH). By default it goes
// to DefaultFailDir, never into the testdata/ of the package under test;
// FailFiles("") leaves it where rapid puts it.
func FailFiles(dir string) Option { return func(c *config) { c.failDir = dir } }

// DefaultFailDir is where the kit keeps failure files unless FailFiles says
// otherwise: kvready-transporttest under the system's temporary directory.
func DefaultFailDir() string { return filepath.Join(os.TempDir(), "kvready-transporttest") }

func newConfig(opts []Option) config {
	c := config{rounds: DefaultRounds, callBound: DefaultCallBound, actions: DefaultActions, failDir: DefaultFailDir()}
	for _, o := range opts {
		o(&c)
	}
	c.rounds = max(c.rounds, 1)
	c.actions = max(c.actions, 1)
	if c.callBound <= 0 {
		c.callBound = DefaultCallBound
	}
	return c
}

// Check runs the conformance kit against the transport h makes: random
// transfers with canary bytes between two to four processes (rapid:
// RAPID_CHECKS trials, each on a fresh network), failing t with a
// [Violation] that names the rule of the transport contract the transport
// broke (the Rule… constants; docs/transfers.md, "A conformance kit for
// transports"), the trial's seed and rapid's replay.
//
// Each trial registers memory filled with random canaries on every
// process and draws puts, gets, messages, endpoint and worker flushes,
// closes, revocations, keys that must not work (another peer's, garbage,
// out of bounds, a dead life's) and — where the Net is a [Killer] — deaths
// and restarts, interleaved with progress. It checks what each completion
// claims against the bytes themselves, that no byte outside an operation's
// range ever changes, and that every request completes within the kit's
// bound of rounds; every call to the transport runs under [CallBound], so
// a call that blocks fails the check instead of hanging it. The kit never
// demands what the contract does not promise: a message is not ordered
// with puts, and an operation cut short by a death or a revocation may
// have landed or not.
func Check(t TB, h Harness, opts ...Option) {
	t.Helper()
	cfg := newConfig(opts)
	rapid.Check(kittb.FailFilesIn(t, cfg.failDir), func(rt *rapid.T) {
		if err := runTrial(rt, h, cfg); err != nil {
			rt.Fatal(err)
		}
	})
}

// Run runs check with a TB of its own that records instead of failing a
// test, and returns nil when the check passed or an error holding
// everything it reported. It lets the kit run outside go test — a CI
// binary, a child process, a runnable example. name is the test name rapid
// sees. In a test, pass the test's own t to Check instead.
func Run(name string, check func(t TB)) error { return kittb.Run(name, check) }
