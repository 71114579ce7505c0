package redistest

import (
	"os"
	"testing"
)

// A kill then Restart brings a server back on the same address, which is what
// the fault tests rely on to see clients reconnect; Stop leaves nothing on
// disk.
func TestKillRestartStop(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	addr := s.Addr
	s.Kill()
	if s.Alive() {
		t.Fatal("the server answers PING after Kill")
	}
	s.Kill() // idempotent
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr || !s.Alive() {
		t.Fatalf("after Restart: addr %s (was %s), alive %v", s.Addr, addr, s.Alive())
	}
	s.Stop()
	if s.Alive() {
		t.Fatal("the server answers PING after Stop")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s behind: %v", s.dir, err)
	}
}

// A server that cannot start is an error that says why, not a hang: here an
// argument redis-server rejects.
func TestNewReportsAFailedStart(t *testing.T) {
	_, err := New(t.TempDir(), "--no-such-option", "1")
	if err == nil {
		t.Fatal("redis-server started with an unknown option")
	}
	t.Log(err)
}
