// Package redistest starts throwaway redis-server processes for tests: each on
// a free loopback port, in the test's temporary directory, with persistence
// off, killed when the test ends (and, on Linux, by the kernel if the test
// binary dies first). It never skips: without redis-server the test fails
// with the command that installs it.
package redistest

import (
	"bufio"
	"bytes"
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
)

// InstallHint is the whole remedy when redis-server is missing.
const InstallHint = "redis-server is not installed (the Debian package redis-server provides it).\n" +
	"Install it with:\n\n    sudo apt-get install -y redis-server\n\n" +
	"or run `make test`, which installs it on Debian when run as root."

// StartWait bounds how long a server may take to answer its first PING, on a
// loaded machine.
const StartWait = 60 * time.Second

// Server is one redis-server process.
type Server struct {
	// Addr is its loopback address, HOST:PORT.
	Addr string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    bytes.Buffer
}

// URL is the server's URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts a server for t with extra arguments (e.g. "--maxmemory",
// "2mb") and stops it when t ends. A port taken between choosing and binding
// it is retried with another.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal(InstallHint)
	}
	var last error
	for range 5 {
		s, err := start(t.TempDir(), extra)
		if err == nil {
			t.Cleanup(s.Kill)
			return s
		}
		last = err
	}
	t.Fatal(last)
	return nil
}

func start(dir string, extra []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--logfile", filepath.Join(dir, "server.log"),
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "no",
	}, extra...)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, exited: make(chan struct{})}
	s.cmd = exec.Command("redis-server", args...)
	setPdeathsig(s.cmd)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(StartWait)
	for {
		if ping(s.Addr) == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("redis-server %s exited at start: %s%s", strings.Join(args, " "), s.out.String(), s.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within %v%s", s.Addr, StartWait, s.logTail())
		}
	}
}

// Kill sends SIGKILL and waits until the process is gone. Idempotent.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Alive reports whether the server still answers PING.
func (s *Server) Alive() bool { return ping(s.Addr) == nil }

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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
		return errors.New("PING answered " + strconv.Quote(line))
	}
	return nil
}
