package redis

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/kvready/kvready/internal/redistest"
)

// loopback returns a gatherConn over one end of a TCP connection and the
// other end, both closed when the test ends.
func loopback(t testing.TB) (*gatherConn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := gathering((&net.Dialer{Timeout: time.Minute}).DialContext)(context.Background(), "tcp", l.Addr().String())
	require.NoError(t, err)
	g, ok := c.(*gatherConn)
	require.True(t, ok, "a TCP connection comes back as %T, want a *gatherConn", c)
	peer := <-accepted
	require.NotNil(t, peer)
	t.Cleanup(func() { _ = g.Close(); _ = peer.Close() })
	return g, peer
}

// TestGatherConnSendsWhatWasWritten: whatever go-redis writes — short writes
// in a buffer it reuses as soon as Write returns, long ones straight from the
// caller's value, enough to pass gatherLimit or not — reaches the server
// byte for byte, in order, by the time the connection is read (go-redis
// reads only once it has written a call's commands).
func TestGatherConnSendsWhatWasWritten(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		g, peer := loopback(t)
		require.NoError(rt, peer.SetDeadline(time.Now().Add(time.Minute)))
		// The peer echoes one byte per call, as a server answers each: the
		// test reads it through g, which must send what was gathered first.
		var want []byte
		reuse := make([]byte, gatherCopy) // written short, then overwritten, as bufio's buffer is
		calls := rapid.IntRange(1, 4).Draw(rt, "calls")
		for call := range calls {
			sent := len(want)
			writes := rapid.SliceOfN(rapid.SampledFrom([]int{1, 17, gatherBuffer, gatherCopy, gatherCopy + 1, 64 << 10, 600 << 10, gatherLimit + 3}), 1, 8).Draw(rt, "writes")
			total := 0
			for _, n := range writes {
				total += n
			}
			// The peer reads as the server does, while the call is still
			// being written (a send past gatherLimit happens inside Write).
			got := make([]byte, total)
			read := make(chan error, 1)
			go func() {
				_, err := io.ReadFull(peer, got)
				if err == nil {
					_, err = peer.Write([]byte{byte(call)})
				}
				read <- err
			}()
			for _, n := range writes {
				var p []byte
				if n <= gatherCopy {
					p = reuse[:n]
				} else {
					p = make([]byte, n) // a caller's value: kept as it is until the call ends
				}
				for i := range p {
					p[i] = byte(len(want) + i)
				}
				want = append(want, p...)
				k, err := g.Write(p)
				require.NoError(rt, err)
				require.Equal(rt, n, k)
				if n <= gatherCopy {
					for i := range p {
						p[i] = 0xee // go-redis reuses its buffer: what was copied must not change
					}
				}
			}
			require.NoError(rt, g.SetDeadline(time.Now().Add(time.Minute)))
			var reply [1]byte
			_, err := io.ReadFull(g, reply[:])
			require.NoError(rt, err)
			require.NoError(rt, <-read)
			require.Equal(rt, byte(call), reply[0])
			require.True(rt, bytes.Equal(want[sent:], got), "call %d: the server received other bytes than were written", call)
			require.Zero(rt, g.held, "something stays gathered after a Read")
			for _, p := range g.iov[:cap(g.iov)] {
				require.Nil(rt, p, "a sent value is still referenced")
			}
		}
	})
}

// TestGatherConnReadFailsWhenTheSendFails: a send that fails (the socket
// closed under it) fails the Read that made it, which is what makes go-redis
// drop the connection, and keeps nothing gathered to send later.
func TestGatherConnReadFailsWhenTheSendFails(t *testing.T) {
	g, _ := loopback(t)
	_, err := g.Write(make([]byte, 64<<10))
	require.NoError(t, err)
	require.NoError(t, g.Conn.Close())
	_, err = g.Read(make([]byte, 1))
	require.Error(t, err)
	assert.True(t, errors.Is(err, net.ErrClosed), "want the send's error, got %v", err)
	assert.Zero(t, g.held)
	assert.Empty(t, g.pieces)
}

// TestGatheringWrapsPlainSocketsOnly: TCP and Unix sockets gather; a failed
// dial's failedConn stays what it is (every call on it fails at once).
func TestGatheringWrapsPlainSocketsOnly(t *testing.T) {
	failed := softDialer(func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("refused") }, new(time.Duration), nil)
	c, err := gathering(failed)(context.Background(), "tcp", "nowhere:1")
	require.NoError(t, err)
	assert.IsType(t, failedConn{}, c)

	dir, err := os.MkdirTemp("", "kvready-gather") // a socket's path must be short
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "redis.sock")
	srv := redistest.Start(t, "--unixsocket", sock)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, addr := range []string{srv.URL(), "unix://" + sock} {
		b, err := Open(ctx, addr, oneRow{})
		require.NoError(t, err, addr)
		require.NotNil(t, b.pub, "%s: Open gave publications no client of their own", addr)
		conn, err := b.pub.Options().Dialer(ctx, b.pub.Options().Network, b.pub.Options().Addr)
		require.NoError(t, err, addr)
		assert.IsType(t, &gatherConn{}, conn, addr)
		_ = conn.Close()
		require.NoError(t, b.Close())
	}
}

// TestPublishOptions: the publication client's go-redis buffers are no
// longer than what a gatherConn copies (a longer one would hand it a buffer
// it keeps by reference while go-redis reuses it), and a TLS client gets no
// publication client (a tls.Conn copies every byte and cannot writev).
func TestPublishOptions(t *testing.T) {
	u, err := url.Parse("redis://127.0.0.1:6379/0?pipeline_write_buffer_size=1048576")
	require.NoError(t, err)
	o, err := singleOptions(u, defaults())
	require.NoError(t, err)
	p := publishOptions(o)
	require.NotNil(t, p)
	assert.LessOrEqual(t, p.WriteBufferSize, gatherCopy)
	assert.LessOrEqual(t, p.PipelineWriteBufferSize, gatherCopy)
	assert.Equal(t, 1<<20, o.PipelineWriteBufferSize, "the main client keeps the URL's buffer")
	assert.Equal(t, o.ContextTimeoutEnabled, p.ContextTimeoutEnabled)
	assert.Equal(t, o.MaxRetries, p.MaxRetries)

	o.TLSConfig = &tls.Config{}
	assert.Nil(t, publishOptions(o))
}
