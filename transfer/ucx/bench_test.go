package ucx

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
)

// BenchmarkPut: puts of the SPEC §5 page sizes from one transport to
// another in this process over tcp, 8 in flight then an endpoint flush, in
// both modes side by side: what Checked (an active message the owner
// applies, one copy on receipt) costs against OneSided (UCX's software RMA)
// — read as a ratio of MB/s from one run.
func BenchmarkPut(b *testing.B) {
	for _, mode := range []Mode{Checked, OneSided} {
		for _, size := range []int{64 << 10, 512 << 10, 2 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				benchPut(b, Config{Transports: "tcp", Mode: mode}, size)
			})
		}
	}
}

func benchPut(b *testing.B, cfg Config, size int) {
	const inFlight = 8
	dst := newBenchNode(b, cfg, "decode")
	src := newBenchNode(b, cfg, "prefill")
	_, _, err := src.AddPeer(dst.Address())
	require.NoError(b, err)
	_, _, err = dst.AddPeer(src.Address())
	require.NoError(b, err)
	ep, err := src.Connect("decode")
	require.NoError(b, err)
	_, err = dst.Connect("prefill")
	require.NoError(b, err)
	mem, err := dst.Register(make([]byte, inFlight*size))
	require.NoError(b, err)
	key, err := ep.UnpackKey(mem.PackedKey())
	require.NoError(b, err)
	data := pattern(1, size)
	nodes := []*node{{Transport: src}, {Transport: dst}}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, err := ep.Put(data, key, (i%inFlight)*size)
		if err != nil {
			b.Fatal(err)
		}
		if i%inFlight == inFlight-1 || i == b.N-1 {
			fl, err := ep.Flush()
			if err != nil {
				b.Fatal(err)
			}
			if err := wait(b, fl, nodes...); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func newBenchNode(b *testing.B, cfg Config, name transfer.Peer) *Transport {
	cfg.Name, cfg.Incarnation = name, 1
	t, err := New(cfg)
	require.NoError(b, err)
	b.Cleanup(func() { _ = t.Close() })
	return t
}
