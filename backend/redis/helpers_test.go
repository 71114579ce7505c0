package redis_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
)

// ext is the extent name the tests publish and fetch under.
const ext = "trtllm:shared-kv:staging:1"

// wait bounds every wait of a test: generous, so that a loaded machine never
// turns it into a failure. No test asserts how long anything took.
const wait = 60 * time.Second

// tb is what the helpers need of a test: testing.TB and rapid's *T both are.
type tb interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
}

func waitCtx(t tb) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

var prefixSeq atomic.Uint64

// uniquePrefix keeps each test's (and each conformance trial's) keys apart on
// a shared server.
func uniquePrefix(t testing.TB) string {
	n := strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
	return fmt.Sprintf("test:%s:%d:", n, prefixSeq.Add(1))
}

// newClient is a go-redis client of the test's own, closed when it ends.
func newClient(t testing.TB, addr string, edit ...func(*goredis.Options)) *goredis.Client {
	t.Helper()
	o := &goredis.Options{Addr: addr, ContextTimeoutEnabled: true}
	for _, e := range edit {
		e(o)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newBackend builds a backend over client with a unique prefix (unless opts
// set one) and closes it when the test ends.
func newBackend(t testing.TB, client goredis.UniversalClient, mem kvredis.Memory, opts ...kvredis.Option) *kvredis.Backend {
	t.Helper()
	opts = append([]kvredis.Option{kvredis.WithPrefix(uniquePrefix(t))}, opts...)
	b, err := kvredis.New(client, mem, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// staging is test staging memory: groups × slots rows of slotBytes, each row
// filled with a canary that names its own position.
type staging struct {
	rows [][][]byte // fixed after construction: Row needs no lock
}

func newStaging(groups, slots, slotBytes int) *staging {
	s := &staging{rows: make([][][]byte, groups)}
	for g := range groups {
		slab := make([]byte, slots*slotBytes)
		for l := range slots {
			row := slab[l*slotBytes : (l+1)*slotBytes : (l+1)*slotBytes]
			copy(row, canary(g, l, slotBytes))
			s.rows[g] = append(s.rows[g], row)
		}
	}
	return s
}

func canary(g, l, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(0xC0 ^ g*31 ^ l*7 ^ i)
	}
	return b
}

func (s *staging) Row(g, l int) ([]byte, bool) {
	if g < 0 || g >= len(s.rows) || l < 0 || l >= len(s.rows[g]) {
		return nil, false
	}
	return s.rows[g][l], true
}

// untouched reports whether row (g, l) still holds its canary.
func (s *staging) untouched(g, l int) bool {
	return bytes.Equal(s.rows[g][l], canary(g, l, len(s.rows[g][l])))
}

// name is a unit name in the staging layout: a fixed namespace, the block key
// of block, then (group, shard count 1, shard index 0).
func name(block, group int) contract.Name {
	var n contract.Name
	ns := sha256.Sum256([]byte("kvready backend/redis tests"))
	key := sha256.Sum256([]byte(fmt.Sprintf("block %d", block)))
	copy(n[:16], ns[:16])
	copy(n[16:48], key[:])
	binary.BigEndian.PutUint16(n[48:], uint16(group))
	binary.BigEndian.PutUint16(n[50:], 1)
	binary.BigEndian.PutUint16(n[52:], 0)
	return n
}

// content is the stored row of (block, group).
func content(block, group, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(block*13 + group*101 + i*3 + 1)
	}
	return b
}

// unit places (block, group) in slot `local` of layer group `group`.
func unit(block, group, local int) contract.Unit {
	return contract.Unit{Name: name(block, group), LocalGroup: group, Local: local}
}

func extentOf(t tb, units ...contract.Unit) contract.CacheExtent {
	t.Helper()
	e, err := contract.NewCacheExtent([]byte(ext), units, false)
	require.NoError(t, err)
	return e
}

// settled waits for the attempt's outcome.
func settled(t tb, s interface {
	Settle(context.Context, []contract.Attempt) error
}, a contract.Attempt) contract.Outcome {
	t.Helper()
	require.NoError(t, s.Settle(waitCtx(t), []contract.Attempt{a}))
	o := a.Poll()
	require.NotNil(t, o, "Settle returned but Poll has no outcome")
	return o
}

// quiesced waits until Quiesce answers true for the attempt.
func quiesced(t tb, q interface {
	Quiesce(context.Context, []contract.Attempt) (bool, error)
}, a contract.Attempt) {
	t.Helper()
	ok, err := q.Quiesce(waitCtx(t), []contract.Attempt{a})
	require.NoError(t, err)
	require.True(t, ok, "Quiesce answered false")
}

func served(o contract.Outcome) (contract.NameSet, bool) {
	d, ok := o.(contract.Delivered)
	return d.Served, ok
}

func names(us ...contract.Unit) contract.NameSet { return contract.NewNameSet(nameList(us)...) }

func nameList(us []contract.Unit) []contract.Name {
	ns := make([]contract.Name, len(us))
	for i, u := range us {
		ns[i] = u.Name
	}
	return ns
}

// isGet reports whether cmd is a GET, whatever command type go-redis reads
// its reply with: the backend's fetch pipelines carry nothing else.
func isGet(cmd goredis.Cmder) bool { return cmd.Name() == "get" }
