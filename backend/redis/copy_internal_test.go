package redis

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestTeeCopyIsCopy: teeCopy lands exactly what copy lands — every length
// (below and above where it streams, whole 64-byte runs or not) at every
// alignment of either side — and touches no byte around the destination.
func TestTeeCopyIsCopy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.OneOf(rapid.IntRange(0, 2*teeStreamMin), rapid.IntRange(teeStreamMin-64, 300<<10)).Draw(t, "n")
		extra := rapid.IntRange(0, 100).Draw(t, "dst longer by")
		dstOff := rapid.IntRange(0, 63).Draw(t, "dst offset")
		srcOff := rapid.IntRange(0, 63).Draw(t, "src offset")
		srcBuf := make([]byte, srcOff+n)
		for i := range srcBuf {
			srcBuf[i] = byte(i*131 + 7)
		}
		src := srcBuf[srcOff:]
		const guard = 64
		dstBuf := bytes.Repeat([]byte{0xEE}, guard+dstOff+n+extra+guard)
		dst := dstBuf[guard+dstOff : guard+dstOff+n+extra]
		teeCopy(dst, src)
		require.Equal(t, src, dst[:n], "copied bytes")
		require.Equal(t, bytes.Repeat([]byte{0xEE}, guard+dstOff), dstBuf[:guard+dstOff], "bytes before the destination")
		require.Equal(t, bytes.Repeat([]byte{0xEE}, extra+guard), dstBuf[guard+dstOff+n:], "bytes past what was copied")
	})
}

// TestTeeCopyShorterDestination: like copy, teeCopy copies what fits.
func TestTeeCopyShorterDestination(t *testing.T) {
	src := bytes.Repeat([]byte{1, 2, 3}, 10000)
	dst := make([]byte, 20000)
	teeCopy(dst, src)
	require.Equal(t, src[:len(dst)], dst)
}
