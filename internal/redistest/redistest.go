// Package redistest starts throwaway redis-server processes for tests: each on
// a free port of a loopback address of the test binary's own (Host), in a
// temporary directory, with persistence off, killed
// when the test (or, for New, the caller) ends, and on Linux by the kernel if
// the test binary dies first. A server can be killed and restarted on the
// same port. It also starts a Redis Cluster of three masters, with or without
// a replica each, and waits for a replica to take over a killed master. It
// never skips: without redis-server or redis-cli the caller fails with the
// command that installs them.
//
// Test runs share machines (parallel worktrees, CI, a mutation run), and a
// port chosen free can be taken the moment after. Ports alone never keep
// runs apart: a cluster node keeps gossiping to a node's address after that
// node died, and a node that took over the address would be met. Each test
// binary therefore binds its servers, and their cluster buses, to an address
// of 127.0.0.0/8 drawn at random for it (Linux routes the whole block to
// loopback), so that its servers can only ever meet its own.
//
// It is the one place that knows how to run redis-server for a test, so that
// the backend's own tests and the tests of what uses the backend (simulate,
// cmd/kvready) exercise the same start, kill and restart.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InstallHint is the whole remedy when redis-server or redis-cli is missing.
const InstallHint = "redis-server is not installed (the Debian package redis-server provides redis-server and redis-cli).\n" +
	"Install it with:\n\n    sudo apt-get install redis-server\n\n" +
	"or run scripts/deps.sh (or `make test`), which installs it on Debian when run as root."

// StartWait bounds how long a server may take to answer its first PING, and a
// cluster to reach cluster_state:ok, on a loaded machine.
const StartWait = 60 * time.Second

// killWait bounds how long Kill waits for a SIGKILLed process to be reaped; a
// process stuck in the kernel past that is left behind rather than hanging
// the test binary.
const killWait = 60 * time.Second

// startTries is how many free ports New tries: a port chosen free can be
// taken by someone else before redis-server binds it.
const startTries = 5

// Host is the loopback address this test binary's servers listen on:
// 127.R.R.R drawn once per process (never 127.0.0.x, where other software
// listens), or 127.0.0.1 where the system does not route 127.0.0.0/8 to
// loopback (macOS, by default).
var Host = pickHost()

func pickHost() string {
	for range 8 {
		h := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
		if l, err := net.Listen("tcp", h+":0"); err == nil {
			_ = l.Close()
			return h
		}
	}
	return "127.0.0.1"
}

// Server is one redis-server process. Restart replaces the process with a new
// one on the same port, directory and arguments, so Addr stays valid across a
// kill.
type Server struct {
	// Addr is its loopback address, Host:PORT.
	Addr string
	port int
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL is the server's URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts a server for t with extra arguments (e.g. "--maxmemory",
// "2mb") in a directory under t.TempDir(), and stops it when t ends. It fails
// t, never skips, when the server cannot start.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s, err := New(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// New starts a server in a fresh directory under parent ("" for the system's
// temporary directory) with extra arguments, and returns an error where Start
// would fail a test: it is for TestMain and other code without a testing.TB.
// The caller must Stop it. The error carries InstallHint when redis-server or
// redis-cli is missing.
func New(parent string, extra ...string) (*Server, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, errors.New(strings.TrimSpace(InstallHint))
		}
	}
	var last error
	for range startTries {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(parent, "redis-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort(Host, strconv.Itoa(port)), port: port, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", Host,
			"--dir", dir, "--logfile", filepath.Join(dir, "server.log"),
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--protected-mode", "no",
		}, extra...)
		if last = s.start(); last == nil {
			return s, nil
		}
		_ = os.RemoveAll(dir)
	}
	return nil, last
}

// start runs the process and waits, at most StartWait, until it answers PING.
func (s *Server) start() error {
	cmd := exec.Command("redis-server", s.args...)
	setPdeathsig(cmd) // the server dies with the test binary, even on a panic
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A child the server forked could hold the output pipe open after the
	// server is gone; Wait must not wait for it.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	deadline := time.Now().Add(StartWait)
	for {
		if ping(s.Addr) == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server %s exited at start: %s%s", strings.Join(s.args, " "), out.String(), s.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer PING within %v%s", s.Addr, StartWait, s.logTail())
		}
	}
}

// Restart kills the server if it still runs and starts a new one on the same
// port, directory and arguments, so that clients holding Addr reconnect to
// it; with persistence off it starts empty. It must not run concurrently with
// Kill or another Restart.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}

// Kill sends SIGKILL and waits until the process is gone. Idempotent, and
// safe from any goroutine (tests kill mid-run from a progress callback).
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(killWait):
	}
}

// Freeze stops the server's process (SIGSTOP): the kernel still accepts
// connections for it, and it answers nothing, not even PING, until Thaw. A
// hung store, as a machine that swaps or a process stuck in a system call
// shows itself. Kill still ends a frozen server.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw continues a server Freeze stopped (SIGCONT): it answers again, what
// it held intact, and works through what its clients sent meanwhile.
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("redistest: the server on %s was never started", s.Addr)
	}
	select {
	case <-s.exited:
		return fmt.Errorf("redistest: the server on %s has exited; cannot send it %v", s.Addr, sig)
	default:
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redistest: sending %v to the server on %s: %w", sig, s.Addr, err)
	}
	return nil
}

// Stop kills the server and removes its directory: what Start registers for
// the end of the test, and what New's caller owes.
func (s *Server) Stop() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// Alive reports whether the server still answers PING.
func (s *Server) Alive() bool { return ping(s.Addr) == nil }

// logTail is the end of the server's log, for an error that says why it did
// not start.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nserver log:\n" + string(b)
}

// Cluster is a Redis Cluster of three masters on loopback ports, without
// replicas (NewCluster: the fewest masters `redis-cli --cluster create`
// accepts) or with one replica each (NewReplicatedCluster).
type Cluster struct {
	// Nodes are its servers: the masters, which share the 16384 slots, then
	// the replicas, if any. Which is which changes with a failover (Topology).
	Nodes []*Server
	// NodeTimeout is the cluster-node-timeout: how long a master may be
	// unreachable before the others count it failed and its replica takes over.
	NodeTimeout time.Duration

	replicaOf map[string]string // node id → its master's id, as built; read-only after
}

// NewCluster starts three cluster-enabled servers in fresh directories under
// parent ("" for the system's temporary directory), joins them with
// `redis-cli --cluster create` and waits, at most StartWait, until every node
// knows all three and serves every slot. The caller must Stop it.
func NewCluster(parent string) (*Cluster, error) {
	return newCluster(parent, 0, 15*time.Second)
}

// NewReplicatedCluster starts six cluster-enabled servers — three masters,
// each with one replica — and waits, at most StartWait, until every node
// serves every slot and every replica's link to its master is up. nodeTimeout
// is the cluster-node-timeout: a master unreachable for that long is failed
// over to its replica (see WaitFailover). The caller must Stop it.
func NewReplicatedCluster(parent string, nodeTimeout time.Duration) (*Cluster, error) {
	if nodeTimeout < 100*time.Millisecond {
		return nil, fmt.Errorf("redistest: node timeout %v; want at least 100ms", nodeTimeout)
	}
	return newCluster(parent, 1, nodeTimeout)
}

func newCluster(parent string, replicas int, nodeTimeout time.Duration) (*Cluster, error) {
	c := &Cluster{NodeTimeout: nodeTimeout}
	for range 3 * (1 + replicas) {
		bus, err := freePort()
		if err != nil {
			c.Stop()
			return nil, err
		}
		// The bus port is chosen apart: the default (port+10000) may be taken
		// or above 65535 for an ephemeral port.
		// The node announces Host, the address it is bound to, so that its
		// peers reach it there and nowhere else.
		n, err := New(parent, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-announce-ip", Host,
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10))
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartWait)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// `--cluster create` returns before the nodes agree: a client that came
	// now could be redirected to a node that does not know its slots yet.
	if err := c.waitOK(ctx, c.Nodes); err != nil {
		c.Stop()
		return nil, err
	}
	if replicas > 0 {
		if err := c.waitReplicasLinked(ctx, replicas); err != nil {
			c.Stop()
			return nil, err
		}
		top, err := c.Topology(ctx)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.replicaOf = map[string]string{}
		for _, n := range top {
			if !n.Master {
				c.replicaOf[n.ID] = n.MasterID
			}
		}
	}
	return c, nil
}

// waitOK waits until every one of nodes reports cluster_state:ok, every slot
// served, and knows every node of the cluster.
func (c *Cluster) waitOK(ctx context.Context, nodes []*Server) error {
	known := "cluster_known_nodes:" + strconv.Itoa(len(c.Nodes))
	for _, n := range nodes {
		for {
			out, err := cli(ctx, n, "cluster", "info")
			if err == nil && strings.Contains(out, "cluster_state:ok") &&
				strings.Contains(out, "cluster_slots_ok:16384") && strings.Contains(out, known) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the cluster on %v did not reach cluster_state:ok on %s: %v: %s", c.Addrs(), n.Addr, ctx.Err(), out)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// waitReplicasLinked waits until the cluster has the shape it was built
// with — three masters, each followed by replicas replicas — and every
// replica's link to its master is up, so that what the master stores reaches
// it. It checks each of these, never assumes one from another: `redis-cli
// --cluster create` can return before a CLUSTER REPLICATE it sent took
// effect.
func (c *Cluster) waitReplicasLinked(ctx context.Context, replicas int) error {
	for {
		err := c.replicationShape(ctx, replicas)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster on %v did not reach 3 masters with %d replica(s) each, linked: %v (last: %v)", c.Addrs(), replicas, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// replicationShape says what keeps the cluster from three masters with
// replicas linked replicas each, or nil.
func (c *Cluster) replicationShape(ctx context.Context, replicas int) error {
	top, err := c.Topology(ctx)
	if err != nil {
		return err
	}
	followers := map[string]int{}
	masters := 0
	for _, n := range top {
		if n.Master {
			masters++
		}
	}
	if masters != 3 {
		return fmt.Errorf("%d masters, want 3", masters)
	}
	for _, n := range top {
		if n.Master {
			continue
		}
		out, err := cli(ctx, n.Server, "info", "replication")
		if err != nil || !strings.Contains(out, "master_link_status:up") {
			return fmt.Errorf("replica %s: link to its master not up (%v)", n.Server.Addr, err)
		}
		followers[n.MasterID]++
	}
	for _, n := range top {
		if n.Master && followers[n.ID] != replicas {
			return fmt.Errorf("master %s has %d replica(s), want %d", n.Server.Addr, followers[n.ID], replicas)
		}
	}
	return nil
}

// Node is one server's place in the cluster, as CLUSTER NODES tells it.
type Node struct {
	Server   *Server
	ID       string // the node id
	Master   bool
	MasterID string // a replica's master; "" for a master
	Failed   bool   // flagged fail or fail? (unreachable)
}

// Topology asks the first node that answers for CLUSTER NODES and returns
// every node it lists, in the order of Nodes.
func (c *Cluster) Topology(ctx context.Context) ([]Node, error) {
	var last error
	for _, n := range c.Nodes {
		out, err := cli(ctx, n, "cluster", "nodes")
		if err != nil {
			last = err
			continue
		}
		byAddr := map[string]Node{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				return nil, fmt.Errorf("CLUSTER NODES on %s: line %q: want at least 8 fields", n.Addr, line)
			}
			addr, _, _ := strings.Cut(f[1], "@")
			flags := "," + f[2] + ","
			node := Node{ID: f[0], Master: strings.Contains(flags, ",master,"),
				Failed: strings.Contains(flags, ",fail,") || strings.Contains(flags, ",fail?,")}
			if f[3] != "-" {
				node.MasterID = f[3]
			}
			byAddr[addr] = node
		}
		var top []Node
		for _, s := range c.Nodes {
			node, ok := byAddr[s.Addr]
			if !ok {
				return nil, fmt.Errorf("CLUSTER NODES on %s does not list %s", n.Addr, s.Addr)
			}
			node.Server = s
			top = append(top, node)
		}
		return top, nil
	}
	return nil, fmt.Errorf("no node of the cluster on %v answers CLUSTER NODES: %w", c.Addrs(), last)
}

// Masters returns the servers that are masters now.
func (c *Cluster) Masters(ctx context.Context) ([]*Server, error) {
	top, err := c.Topology(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, n := range top {
		if n.Master && !n.Failed {
			out = append(out, n.Server)
		}
	}
	return out, nil
}

// WaitFailover waits, bounded by ctx, until a replica of dead — a master the
// caller killed — has been promoted and every other node reports
// cluster_state:ok with every slot served again. It returns the new master.
func (c *Cluster) WaitFailover(ctx context.Context, dead *Server) (*Server, error) {
	var deadID string
	for {
		top, err := c.Topology(ctx)
		if err == nil {
			for _, n := range top {
				if n.Server == dead {
					deadID = n.ID
				}
			}
			for _, n := range top {
				// The promoted replica no longer names dead as its master.
				if n.Server != dead && n.Master && !n.Failed && deadID != "" && c.replicaOf[n.ID] == deadID {
					var live []*Server
					for _, s := range c.Nodes {
						if s != dead {
							live = append(live, s)
						}
					}
					if err := c.waitSlotsOK(ctx, live); err != nil {
						return nil, err
					}
					return n.Server, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no replica of %s took over within the wait: %v (last topology error: %v)", dead.Addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitSlotsOK waits until every one of nodes reports cluster_state:ok and
// every slot served (a failed node still counts among the known ones).
func (c *Cluster) waitSlotsOK(ctx context.Context, nodes []*Server) error {
	for _, n := range nodes {
		for {
			out, err := cli(ctx, n, "cluster", "info")
			if err == nil && strings.Contains(out, "cluster_state:ok") && strings.Contains(out, "cluster_slots_ok:16384") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s did not report cluster_state:ok after the failover: %v: %s", n.Addr, ctx.Err(), out)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Addrs are the nodes' addresses, HOST:PORT, for a cluster client's seed list.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// Stop stops every node and removes its directory.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// cli runs redis-cli against one server, bounded by ctx, and returns what it
// printed.
func cli(ctx context.Context, s *Server, args ...string) (string, error) {
	args = append([]string{"-h", Host, "-p", strconv.Itoa(s.port)}, args...)
	out, err := exec.CommandContext(ctx, "redis-cli", args...).Output()
	return string(out), err
}

// freePort returns a port of Host nothing listens on at this moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(Host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends one inline PING on a fresh connection, so that it needs no
// client library and tells a server that answers from a port merely bound.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
