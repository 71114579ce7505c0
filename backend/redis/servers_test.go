package redis_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests run against real redis-server processes they start themselves: on
// free loopback ports, in temporary directories, with persistence off. They
// never skip: without redis-server they fail with the command that installs it.

// installHint is the whole remedy when redis-server is missing.
const installHint = "redis-server is not installed (the Debian package redis-server provides redis-server and redis-cli).\n" +
	"Install it with:\n\n    sudo apt-get install -y redis-server\n\n" +
	"or run `make test`, which installs it on Debian when run as root."

// startWait bounds how long a server may take to answer its first PING, on a
// loaded machine.
const startWait = 60 * time.Second

func binaries() error {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return errors.New(installHint)
		}
	}
	return nil
}

// server is one redis-server process; restart starts a new one on the same
// port, directory and arguments.
type server struct {
	port int
	dir  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// freePort returns a loopback port nothing listens on at this moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startServer starts a redis-server on a free port in a fresh directory under
// parent, with extra arguments (e.g. "--maxmemory", "2mb"). A port taken
// between choosing and binding it is retried with another.
func startServer(parent string, extra ...string) (*server, error) {
	if err := binaries(); err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(parent, "redis-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, err
		}
		args := []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--logfile", filepath.Join(dir, "server.log"),
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--protected-mode", "no",
		}
		s := &server{port: port, dir: dir, args: append(args, extra...)}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }
func (s *server) url() string  { return "redis://" + s.addr() + "/0" }

// start runs the process and waits until it answers PING.
func (s *server) start() error {
	cmd := exec.Command("redis-server", s.args...)
	setPdeathsig(cmd) // the server dies with the test binary, even on a panic
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	deadline := time.Now().Add(startWait)
	for {
		if ping(s.addr()) == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server %s exited at start: %s%s", strings.Join(s.args, " "), out.String(), s.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer PING within %v%s", s.addr(), startWait, s.logTail())
		}
	}
}

func (s *server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nserver log:\n" + string(b)
}

// kill sends SIGKILL and waits for the process to be gone. Idempotent.
func (s *server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// stop kills the server and removes its directory.
func (s *server) stop() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}

// ping sends one inline PING on a fresh connection.
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

// newServer starts a server of the test's own (for faults that would disturb
// the shared one) and stops it when the test ends.
func newServer(t testing.TB, extra ...string) *server {
	t.Helper()
	s, err := startServer(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// shared is the server most tests use, started by TestMain; tests keep apart
// by key prefix.
var shared *server

// cluster is a three-master Redis Cluster on loopback ports, started at most
// once per test binary, by the first test that needs it.
type cluster struct {
	nodes []*server
}

var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterErr  error
)

func sharedCluster(t testing.TB) *cluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterErr = startCluster() })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return theCluster
}

func (c *cluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr())
	}
	return out
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		n.stop()
	}
}

func startCluster() (*cluster, error) {
	c := &cluster{}
	for range 3 {
		bus, err := freePort()
		if err != nil {
			c.stop()
			return nil, err
		}
		// The bus port is chosen apart: the default (port+10000) may be taken
		// or above 65535 for an ephemeral port.
		n, err := startServer("", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "15000")
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// Every node must know all three and serve all 16384 slots.
	for _, n := range c.nodes {
		for {
			out, err := exec.CommandContext(ctx, "redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(n.port), "cluster", "info").Output()
			if err == nil && bytes.Contains(out, []byte("cluster_state:ok")) &&
				bytes.Contains(out, []byte("cluster_slots_ok:16384")) && bytes.Contains(out, []byte("cluster_known_nodes:3")) {
				break
			}
			select {
			case <-ctx.Done():
				c.stop()
				return nil, fmt.Errorf("the cluster on %v did not reach cluster_state:ok within %v: %s", c.addrs(), startWait, out)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return c, nil
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvready-redis-test-")
	if err == nil {
		shared, err = startServer(dir)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		fmt.Fprintf(os.Stderr, "backend/redis: the tests need a redis-server: %v\n", err)
		os.Exit(1)
	}
	os.Setenv("KVREADY_REDIS_URL", shared.url()) // for the examples
	code := m.Run()
	shared.stop()
	if theCluster != nil {
		theCluster.stop()
	}
	// Every backend, client and server is closed by now: no goroutine of
	// theirs may outlive them.
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintf(os.Stderr, "backend/redis: goroutines left behind: %v\n", err)
		code = 1
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
