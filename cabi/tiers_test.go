package main

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
	"github.com/kvready/kvready/staging"
)

// Every counter of tiers.TierStats, filled with a distinct value, reaches the
// kvready_tier_stats field of its name in snake case through tierStatsToC
// (what kvready_backend_tier_stats answers), the name as a NUL-terminated
// string; a kvready_tier_stats field that no counter fills is named too.
func TestEveryTierCounterReachesC(t *testing.T) {
	var s tiers.TierStats
	var ls []leaf
	leaves(reflect.ValueOf(&s).Elem(), nil, nil, map[string]string{"Name": "a string: checked apart"}, &ls)
	require.Greater(t, len(ls), 10, "the walk no longer finds TierStats' counters")
	for i, l := range ls {
		switch l.v.Kind() {
		case reflect.Bool:
			l.v.SetBool(true)
		case reflect.Int, reflect.Int64:
			l.v.SetInt(int64(1000 + i))
		default:
			l.v.SetUint(uint64(1000 + i))
		}
	}
	s.Name = "redis-1"
	c := tierStatsToC(s)
	cv := reflect.ValueOf(&c).Elem()
	reached := map[string]bool{"name": true}
	for i, l := range ls {
		name := strings.Join(l.cPath, ".")
		reached[name] = true
		f, ok := at(cv, l.cPath)
		if !ok {
			t.Errorf("tiers.TierStats.%s: kvready_tier_stats has no %s (kvready.h, _abi.py's CTierStats, python's TierStats, tierStatsToC)",
				strings.Join(l.goPath, "."), name)
			continue
		}
		want := int64(1000 + i)
		if l.v.Kind() == reflect.Bool {
			want = 1
		}
		if got := intOf(f); got != want {
			t.Errorf("tiers.TierStats.%s = %d reached kvready_tier_stats.%s as %d", strings.Join(l.goPath, "."), want, name, got)
		}
	}
	var cls []leaf
	leaves(cv, nil, nil, map[string]string{"Name": ""}, &cls)
	for _, l := range cls {
		name := strings.Join(l.goPath, ".")
		if !reached[name] && !strings.HasPrefix(name, "_") && !strings.HasPrefix(name, "name") {
			t.Errorf("kvready_tier_stats.%s is filled by no field of tiers.TierStats", name)
		}
	}
	var got []byte
	for _, ch := range cv.FieldByName("name").Seq2() {
		if ch.Int() == 0 {
			break
		}
		got = append(got, byte(ch.Int()))
	}
	assert.Equal(t, "redis-1", string(got))
}

func testMemory(t *testing.T) *memory {
	t.Helper()
	m, err := staging.NewMemory(staging.GoHeap, staging.Group{Slots: 4, SlotBytes: 16})
	require.NoError(t, err)
	return &memory{staged: m, rows: m}
}

// clients counts the connections a redis-server holds open.
func clients(t *testing.T, c *goredis.Client) int {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	require.NoError(t, err)
	return strings.Count(list, "\n")
}

// A stack opens from its URLs, first first, each tier named by its scheme
// (unique within the stack); a tier that fails to open fails the whole call
// with its own status and a message naming its index and URL (no password),
// and every tier opened before it is closed: its connections end.
func TestOpenTiers(t *testing.T) {
	h := headerStatuses(t)
	srv := redistest.Start(t)
	dead := redistest.Start(t)
	deadURL := dead.URL()
	dead.Kill()
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	for _, tc := range []struct {
		urls   []string
		names  []string // opened: the tiers' names
		status string   // refused: its status
		msg    []string // and what its message says
		hidden string   // and does not
	}{
		{urls: []string{"mem:?capacity_bytes=64", srv.URL()}, names: []string{"mem", "redis"}},
		{urls: []string{"mem", "mem:?capacity=2", srv.URL()}, names: []string{"mem", "mem-1", "redis"}},
		{urls: []string{srv.URL(), deadURL}, status: "KVREADY_ERR_UNAVAILABLE",
			msg: []string{"tier 1 (" + deadURL + ")", "does not answer PING", "nothing was opened"}},
		{urls: []string{srv.URL(), "redis://:hunter2@" + strings.TrimPrefix(deadURL, "redis://")}, status: "KVREADY_ERR_UNAVAILABLE",
			msg: []string{"tier 1 (redis://:xxxxx@"}, hidden: "hunter2"},
		{urls: []string{"mem", srv.URL() + "?breaker_failures=-1"}, status: "KVREADY_ERR_CONFIG", msg: []string{"tier 1 (", "WithBreaker(-1)"}},
		{urls: []string{"gopher://x", srv.URL()}, status: "KVREADY_ERR_INVALID", msg: []string{"tier 0 (gopher://x)", "unknown backend"}},
		{urls: []string{srv.URL(), "mem:?capacity_bytes=-1"}, status: "KVREADY_ERR_INVALID", msg: []string{"tier 1 (mem:?capacity_bytes=-1)", "want a number of bytes >= 0"}},
		{urls: []string{"mem:?capacity_bytes=1&capacity_bytes=2"}, status: "KVREADY_ERR_INVALID", msg: []string{"capacity_bytes given 2 times"}},
	} {
		t.Run(strings.Join(tc.urls, ","), func(t *testing.T) {
			before := clients(t, admin)
			b, err := openTiers(tc.urls, testMemory(t))
			if tc.status == "" {
				require.NoError(t, err)
				require.NotNil(t, b.tiers)
				var names []string
				for _, s := range b.tiers.Stats() {
					names = append(names, s.Name)
				}
				assert.Equal(t, tc.names, names)
				require.NoError(t, b.close())
			} else {
				require.Error(t, err)
				assert.Nil(t, b)
				assert.Equal(t, h[tc.status], int(statusOf(err)), "%v", err)
				for _, m := range tc.msg {
					assert.Contains(t, err.Error(), m)
				}
				if tc.hidden != "" {
					assert.NotContains(t, err.Error(), tc.hidden)
				}
			}
			// Whatever was opened is closed again: the server sees the
			// tiers' connections end (it learns of a close a moment later).
			deadline := time.Now().Add(10 * time.Second)
			for clients(t, admin) > before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			assert.Equal(t, before, clients(t, admin), "connections left open")
		})
	}
}

// A put writes through every tier; a get reads the first tier holding the
// row; a tier's bytes and evictions reach its stats.
func TestTiersPutGet(t *testing.T) {
	b, err := openTiers([]string{"mem:?capacity_bytes=32", "mem"}, testMemory(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.close() })
	row := func(c byte) []byte { return []byte(strings.Repeat(string(c), 16)) }
	var n [3]contract.Name
	for i := range n {
		n[i][0] = byte(i + 1)
		require.NoError(t, b.put("e", n[i], row('a'+byte(i))))
	}
	st := b.tiers.Stats()
	require.Len(t, st, 2)
	assert.Equal(t, tiers.TierStats{Name: "mem", Bytes: 32, Sized: true, Evictions: 1}, st[0], "the local tier holds two rows of 16 bytes")
	assert.Equal(t, tiers.TierStats{Name: "mem-1", Bytes: 48, Sized: true}, st[1])
	for i, want := range []byte{'a', 'b', 'c'} {
		v, ok, err := b.get("e", n[i])
		require.NoError(t, err)
		require.True(t, ok, "row %d, evicted from the local tier, is read from the next", i)
		assert.Equal(t, row(want), v)
	}
	_, ok, err := b.get("e", contract.Name{9})
	require.NoError(t, err)
	assert.False(t, ok)
}
