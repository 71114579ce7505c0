package ucx

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// maxSteps bounds every wait: progress rounds of every transport involved.
// A wait that runs out fails the test, naming what it waited for.
const maxSteps = 200_000

// setup names one UCX configuration the tests run under.
type setup struct {
	name string
	cfg  Config // Name and Incarnation are filled in per transport
}

// setups are the transports the tests run over: tcp always, shared memory
// where ucx_info lists it (it needs no peer error handling, which UCX 1.13's
// shared memory cannot give).
func setups(t *testing.T, modes ...Mode) []setup {
	t.Helper()
	var out []setup
	sm := hasSharedMemory(t)
	for _, m := range modes {
		out = append(out, setup{name: "tcp/" + m.String(), cfg: Config{Transports: "tcp", Mode: m}})
		if sm {
			out = append(out, setup{name: "sm/" + m.String(), cfg: Config{Transports: "sm", Mode: m, NoPeerErrors: true}})
		}
	}
	return out
}

var ucxInfo struct {
	once sync.Once
	out  string
	err  error
}

// hasSharedMemory reads ucx_info -d: posix or sysv shared memory present.
// A missing ucx_info fails the test with how to install it.
func hasSharedMemory(t *testing.T) bool {
	t.Helper()
	ucxInfo.once.Do(func() {
		out, err := exec.Command("ucx_info", "-d").CombinedOutput()
		ucxInfo.out, ucxInfo.err = string(out), err
	})
	require.NoError(t, ucxInfo.err, "ucx_info -d: install Debian's ucx-utils (scripts/deps.sh does): %s", ucxInfo.out)
	return strings.Contains(ucxInfo.out, "Transport: posix") || strings.Contains(ucxInfo.out, "Transport: sysv")
}

// node is a transport in a test, with what its handlers heard.
type node struct {
	*Transport
	mu     sync.Mutex
	msgs   []heardMsg
	errors []heardErr
}

type heardMsg struct {
	from transfer.Peer
	inc  transfer.Incarnation
	msg  string
}

type heardErr struct {
	peer transfer.Peer
	inc  transfer.Incarnation
	err  error
}

func newNode(t *testing.T, cfg Config, name transfer.Peer, inc transfer.Incarnation) *node {
	t.Helper()
	cfg.Name, cfg.Incarnation = name, inc
	tr, err := New(cfg)
	require.NoError(t, err)
	n := &node{Transport: tr}
	tr.SetHandlers(transfer.Handlers{
		Message: func(from transfer.Peer, inc transfer.Incarnation, msg []byte) {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.msgs = append(n.msgs, heardMsg{from, inc, string(msg)})
		},
		EndpointError: func(peer transfer.Peer, inc transfer.Incarnation, err error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.errors = append(n.errors, heardErr{peer, inc, err})
		},
	})
	t.Cleanup(func() { require.NoError(t, tr.Close()) })
	return n
}

func (n *node) heard() []heardMsg {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]heardMsg(nil), n.msgs...)
}

func (n *node) failures() []heardErr {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]heardErr(nil), n.errors...)
}

// link makes a and b know each other and connect both ways.
func link(t *testing.T, a, b *node) (ab, ba transfer.Endpoint) {
	t.Helper()
	_, _, err := a.AddPeer(b.Address())
	require.NoError(t, err)
	_, _, err = b.AddPeer(a.Address())
	require.NoError(t, err)
	bName, _ := b.Self()
	aName, _ := a.Self()
	ab, err = a.Connect(bName)
	require.NoError(t, err)
	ba, err = b.Connect(aName)
	require.NoError(t, err)
	return ab, ba
}

// tb is what the helpers need of a test: *testing.T and *rapid.T both.
type tb interface {
	Helper()
	require.TestingT
}

// pump progresses every node until cond holds, failing after maxSteps.
// Every 64th round sleeps a little: UCX's tcp transport settles connections
// on an async thread, which needs the CPU as well as our calls.
func pump(t tb, what string, cond func() bool, ns ...*node) {
	t.Helper()
	for i := 0; i < maxSteps; i++ {
		if cond() {
			return
		}
		for _, n := range ns {
			n.Progress()
		}
		if i%64 == 63 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	require.FailNow(t, "a bounded wait ran out", "%s: not reached in %d progress rounds", what, maxSteps)
}

// wait pumps until r completes and answers its error.
func wait(t tb, r transfer.Request, ns ...*node) error {
	t.Helper()
	var err error
	pump(t, "the request to complete", func() bool {
		var done bool
		done, err = r.Test()
		return done
	}, ns...)
	return err
}

// pattern is n bytes that tell their position and a tag apart.
func pattern(tag byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = tag ^ byte(i) ^ byte(i>>8) ^ byte(i>>16)
	}
	return b
}

func sentinel(n int) []byte { return bytes.Repeat([]byte{0xA5}, n) }

func describe(s setup, what string) string { return fmt.Sprintf("%s: %s", s.name, what) }

// progressAside progresses n on a goroutine of its own — a live writer
// process — until the function it answers is called, which returns once
// the goroutine stopped.
func progressAside(n *node) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				n.Progress()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
