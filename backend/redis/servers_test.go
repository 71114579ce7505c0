package redis_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvready/kvready/internal/redistest"
)

// The tests run against real redis-server processes from internal/redistest:
// on free loopback ports, in temporary directories, with persistence off.
// They never skip: without redis-server they fail with the command that
// installs it. A test that would disturb the shared server (kill, pause,
// maxmemory) starts its own with redistest.Start.

// shared is the server most tests use, started by TestMain; tests keep apart
// by key prefix.
var shared *redistest.Server

var (
	clusterOnce sync.Once
	theCluster  *redistest.Cluster
	clusterErr  error
)

// sharedCluster is a three-master Redis Cluster, started at most once per
// test binary, by the first test that needs it (most runs filter it out, and
// it is the slowest thing to start), and stopped by TestMain.
func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterErr = redistest.NewCluster("") })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return theCluster
}

func TestMain(m *testing.M) {
	var err error
	shared, err = redistest.New("")
	if err != nil {
		fmt.Fprintf(os.Stderr, "backend/redis: the tests need a redis-server: %v\n", err)
		os.Exit(1)
	}
	os.Setenv("KVREADY_REDIS_URL", shared.URL()) // for the examples
	code := m.Run()
	shared.Stop()
	if theCluster != nil {
		theCluster.Stop()
	}
	// Every backend, client and server is closed by now: no goroutine of
	// theirs may outlive them.
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintf(os.Stderr, "backend/redis: goroutines left behind: %v\n", err)
		code = 1
	}
	os.Exit(code)
}
