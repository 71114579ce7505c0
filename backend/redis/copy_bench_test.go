package redis

import (
	"bytes"
	"testing"
)

// BenchmarkTeeCopy measures the tee's copy as a lease makes it: teeCopy of
// a hot source (the chunk the sink has just read into its staging row) into
// a local tier's buffers last written long before — cold, the destination
// rotating over 64 MiB, more than the caches hold — by chunks of teeChunk,
// a row of the Redis figures' sizes an op. Where the copy cannot run beside
// the socket reads (two cores, redis-server on one of them), it is in series
// with the fetch, and its MB/s bounds BenchmarkTiers/redis's promoted
// figure: 1 ÷ (1 + alone MB/s ÷ this), which internal/benchreport prints
// beside the figure (docs/tiers.md).
func BenchmarkTeeCopy(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"64KiB", 64 << 10}, {"512KiB", 512 << 10}, {"2MiB", 2 << 20}} {
		b.Run("row="+size.name, func(b *testing.B) {
			const span = 64 << 20
			dst := make([]byte, span)
			src := make([]byte, teeChunk)
			for i := range src {
				src[i] = byte(i*131 + 7)
			}
			rows := span / size.bytes
			copyRow := func(i int) []byte {
				row := dst[(i%rows)*size.bytes : (i%rows+1)*size.bytes]
				for lo := 0; lo < size.bytes; lo += teeChunk {
					hi := min(size.bytes, lo+teeChunk)
					teeCopy(row[lo:hi], src[:hi-lo])
				}
				return row
			}
			for i := range rows { // every destination byte mapped before the clock starts
				copyRow(i)
			}
			b.SetBytes(int64(size.bytes))
			b.ResetTimer()
			var last []byte
			for i := range b.N {
				last = copyRow(i)
			}
			b.StopTimer()
			for lo := 0; lo < size.bytes; lo += teeChunk {
				hi := min(size.bytes, lo+teeChunk)
				if !bytes.Equal(last[lo:hi], src[:hi-lo]) {
					b.Fatalf("bytes %d..%d of the last row differ from the source", lo, hi)
				}
			}
		})
	}
}
