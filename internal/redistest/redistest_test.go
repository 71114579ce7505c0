package redistest

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// Without redis-server on PATH, New fails — it never skips — and the error
// names the command that installs it.
func TestMissingServerNamesTheInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // an empty directory: nothing to find
	_, err := New(t.TempDir())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "apt-get install redis-server")
}

// A replicated cluster has three masters with a replica each; killing a
// master makes its replica take over, and every other node serves every
// slot again.
func TestReplicatedClusterFailsOver(t *testing.T) {
	c, err := NewReplicatedCluster(t.TempDir(), time.Second)
	require.NoError(t, err)
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), StartWait)
	defer cancel()
	top, err := c.Topology(ctx)
	require.NoError(t, err)
	require.Len(t, top, 6)
	masters := map[string]bool{}
	for _, n := range top {
		if n.Master {
			masters[n.ID] = true
		}
	}
	require.Len(t, masters, 3)
	replicated := map[string]bool{}
	for _, n := range top {
		if !n.Master {
			require.True(t, masters[n.MasterID], "replica %s follows %q, which is no master", n.Server.Addr, n.MasterID)
			replicated[n.MasterID] = true
		}
	}
	require.Len(t, replicated, 3, "every master has a replica")

	live, err := c.Masters(ctx)
	require.NoError(t, err)
	dead := live[0]
	dead.Kill()
	promoted, err := c.WaitFailover(ctx, dead)
	require.NoError(t, err)
	require.NotSame(t, dead, promoted)
	now, err := c.Masters(ctx)
	require.NoError(t, err)
	assert.Contains(t, now, promoted)
	assert.NotContains(t, now, dead)
}

// A test binary's servers listen on its own loopback address only: another
// run's clients and cluster nodes, on 127.0.0.1 or an address of their own,
// cannot reach them whatever the port, nor they another run's.
func TestServersListenOnTheBinarysOwnAddress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Logf("on %s 127.0.0.0/8 is not all loopback: Host is %s", runtime.GOOS, Host)
		return
	}
	require.NotEqual(t, "127.0.0.1", Host, "on Linux each binary draws an address of 127.0.0.0/8 of its own")
	require.NotEqual(t, Host, pickHost(), "another binary draws another address")
	s := Start(t)
	host, port, err := net.SplitHostPort(s.Addr)
	require.NoError(t, err)
	assert.Equal(t, Host, host)
	assert.True(t, s.Alive())
	assert.Error(t, ping(net.JoinHostPort("127.0.0.1", port)), "the server answers on 127.0.0.1 too, where another run listens")
	// Another run may take the very same port on its own address: the two
	// never meet.
	other, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	require.NoError(t, err, "the port is taken on every loopback address, not only Host")
	defer other.Close()
	assert.True(t, s.Alive())
}

// The wait for a replicated cluster checks the shape it waits for: a
// cluster of masters alone (what a `--cluster create` whose CLUSTER
// REPLICATE did not take effect leaves) is not one.
func TestReplicationShapeIsChecked(t *testing.T) {
	c, err := NewCluster(t.TempDir())
	require.NoError(t, err)
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), StartWait)
	defer cancel()
	require.NoError(t, c.replicationShape(ctx, 0))
	err = c.replicationShape(ctx, 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has 0 replica(s), want 1")
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	assert.Error(t, c.waitReplicasLinked(short, 1), "the wait ends at its bound instead of taking masters for a replicated cluster")
}

// A frozen server answers nothing, not even PING, and answers again once
// thawed; a frozen server can still be killed.
func TestFreezeThaw(t *testing.T) {
	s := Start(t)
	require.NoError(t, s.Freeze())
	assert.False(t, s.Alive(), "a frozen server answered PING")
	require.NoError(t, s.Thaw())
	assert.True(t, s.Alive(), "a thawed server does not answer PING")
	require.NoError(t, s.Freeze())
	s.Kill()
	assert.Error(t, s.Thaw(), "a killed server cannot be thawed")
}
