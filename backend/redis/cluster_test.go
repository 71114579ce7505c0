package redis_test

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
)

// TestClusterPlacement: on a three-master Cluster, every layer group of a
// block hashes to one slot (SlotPerBlock), blocks spread over the masters,
// and Open, pointed at any one node, finds the whole Cluster.
func TestClusterPlacement(t *testing.T) {
	cl := sharedCluster(t)
	ctx := waitCtx(t)
	const blocks, groups = 48, 3
	mem := newStaging(groups, blocks, rowBytes)
	prefix := kvredis.WithPrefix(uniquePrefix(t))
	b, err := kvredis.Open(ctx, "redis://"+cl.Nodes[1].Addr, mem, prefix, kvredis.WithTimeout(wait))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	cc, isCluster := b.Client().(*goredis.ClusterClient)
	require.True(t, isCluster, "Open of a Cluster node opens the Cluster")

	masters := map[string]bool{}
	var us []contract.Unit
	for blk := range blocks {
		var slot int64 = -1
		for g := range groups {
			u := unit(blk, g, blk)
			us = append(us, u)
			copy(mem.rows[g][blk], content(blk, g, rowBytes))
			s, err := cc.ClusterKeySlot(ctx, b.Key(ext, u.Name)).Result()
			require.NoError(t, err)
			if slot >= 0 {
				assert.Equal(t, slot, s, "block %d: group %d is in another slot", blk, g)
			}
			slot = s
		}
		m, err := cc.MasterForKey(ctx, b.Key(ext, name(blk, 0)))
		require.NoError(t, err)
		masters[m.Options().Addr] = true
	}
	assert.Len(t, masters, 3, "48 blocks land on every master")

	a, err := b.Publish(extentOf(t, us...))
	require.NoError(t, err)
	s, ok := served(settled(t, b, a))
	require.True(t, ok)
	quiesced(t, b, a)
	require.True(t, s.Equal(names(us...)))
	for _, u := range us {
		copy(mem.rows[u.LocalGroup][u.Local], canary(u.LocalGroup, u.Local, rowBytes))
	}

	// A second manager, opened with every node listed, fetches them all.
	var extra []string
	for _, n := range cl.Nodes[1:] {
		extra = append(extra, "addr="+n.Addr)
	}
	other, err := kvredis.Open(ctx, "redis://"+cl.Nodes[0].Addr+"?"+strings.Join(extra, "&"), mem, prefix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	a, err = other.Fetch(extentOf(t, us...), nil)
	require.NoError(t, err)
	s, ok = served(settled(t, other, a))
	require.True(t, ok)
	quiesced(t, other, a)
	assert.True(t, s.Equal(names(us...)))
	for _, u := range us {
		assert.Equal(t, content(u.Local, u.LocalGroup, rowBytes), mem.rows[u.LocalGroup][u.Local])
	}

	_, err = kvredis.Open(ctx, "redis://"+cl.Nodes[0].Addr+"/3", mem)
	assert.Error(t, err, "a Cluster has database 0 only") // the server refuses SELECT
	_, err = kvredis.Open(ctx, "redis://"+cl.Nodes[0].Addr+"/3?cluster=true", mem)
	assert.ErrorContains(t, err, "database 0 only")
}
