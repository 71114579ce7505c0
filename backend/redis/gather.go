package redis

import (
	"context"
	"net"
	"syscall"

	goredis "github.com/redis/go-redis/v9"
)

// The publication client. go-redis writes a pipeline through a bufio.Writer:
// at 64 KiB rows its default 128 KiB pipeline buffer copies every value and
// writes the pipeline 128 KiB at a time, and a larger buffer copies more. On
// loopback each write wakes the server, and those writes, more than the copy,
// were what kept a 64 KiB publication at 0.7× rueidis's MSET
// (docs/backend-redis.md, "Writing a publication straight from staging").
// Over a plain socket, Open gives publications a client of their own whose
// connections gather a call's writes: go-redis's buffer is made small
// (gatherBuffer), so that every value longer than it reaches the connection
// as the caller's slice, the staging row itself; the connection keeps a
// reference to it instead of a copy, and sends everything gathered with one
// writev when go-redis starts reading the replies (or when gatherLimit bytes
// are waiting). A 16-row lease of 64 KiB goes out in two system calls, one a
// pipeline, and no byte of a row is copied in user space.
//
// Why a reference kept past Write is safe here, and only here: the client is
// the backend's own, never handed out (Client returns the other one), and
// its only calls are the workers' publication pipelines, each of which holds
// its connection alone (go-redis's pool), writes every command, then reads
// every reply. A call that returns has either read (and so sent everything
// gathered: Read sends first), or failed on the connection, which go-redis
// then closes and never reads or writes again, so that what it held is never
// sent. Either way no byte of a row is read after the call returns, which is
// what Quiesce waits for (a write never outlives its attempt's bound: what is
// sent from Read is sent under the write deadline go-redis set from the
// call's context).

// gatherBuffer is the bufio.Writer size of the publication client's
// connections, both pools: smaller than any row worth gathering, large
// enough for a command's header.
const gatherBuffer = 1 << 10

// gatherCopy is the longest write a gatherConn copies: at least go-redis's
// buffer (gatherBuffer, which go-redis reuses once Write returns, so it must
// be copied), with room should go-redis ever round it up. A longer write is
// go-redis handing over the caller's value, kept by reference.
const gatherCopy = 32 << 10

// gatherLimit is how many bytes a gatherConn holds before it sends them
// without waiting for a Read: a few large values, so that the server starts
// reading a long pipeline while the rest is still being gathered.
const gatherLimit = 1 << 20

// gatherConn is one connection of the publication client; see above. Only
// the goroutine that holds the connection in go-redis's pool calls Write and
// Read; Close, which another may call, is the socket's own and touches
// nothing gathered.
type gatherConn struct {
	net.Conn
	own    []byte  // copies of the short writes
	pieces []piece // what was written and not yet sent, in order
	held   int     // bytes in pieces
	iov    net.Buffers
}

// piece is one write not yet sent: ref, the caller's slice, or own[lo:hi].
type piece struct {
	ref    []byte
	lo, hi int
}

func (c *gatherConn) Write(p []byte) (int, error) {
	if len(p) <= gatherCopy {
		lo := len(c.own)
		c.own = append(c.own, p...)
		if k := len(c.pieces) - 1; k >= 0 && c.pieces[k].ref == nil && c.pieces[k].hi == lo {
			c.pieces[k].hi = len(c.own) // follows the last copy: one piece
		} else {
			c.pieces = append(c.pieces, piece{lo: lo, hi: len(c.own)})
		}
	} else {
		c.pieces = append(c.pieces, piece{ref: p})
	}
	c.held += len(p)
	if c.held >= gatherLimit {
		if err := c.send(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Read sends what was gathered first: go-redis reads once it has written a
// call's commands, and the replies need them.
func (c *gatherConn) Read(p []byte) (int, error) {
	if c.held > 0 {
		if err := c.send(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

// send writes everything gathered with writev and forgets it, sent or not:
// after an error go-redis drops the connection.
func (c *gatherConn) send() error {
	iov := c.iov[:0]
	for _, p := range c.pieces {
		if p.ref != nil {
			iov = append(iov, p.ref)
		} else {
			iov = append(iov, c.own[p.lo:p.hi])
		}
	}
	c.iov = iov
	w := iov // WriteTo consumes its receiver
	_, err := w.WriteTo(c.Conn)
	clear(iov) // keep no reference to a row past the call
	clear(c.pieces)
	c.pieces, c.own, c.held = c.pieces[:0], c.own[:0], 0
	return err
}

// SyscallConn lets go-redis's pool check an idle connection's socket, as it
// does a plain one's (nothing is gathered while a connection is idle).
func (c *gatherConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// gathering wraps dial so that a plain TCP or Unix socket comes back as a
// gatherConn; anything else (a failed dial's failedConn) as it is.
func gathering(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		switch c.(type) {
		case *net.TCPConn, *net.UnixConn:
			return &gatherConn{Conn: c}, err
		}
		return c, err
	}
}

// publishOptions are the publication client's options: o's, with small write
// buffers and gathering connections; nil where o is TLS (a tls.Conn cannot
// writev, and copies every byte anyway). o must be final (bounded, its
// dialer set).
func publishOptions(o *goredis.Options) *goredis.Options {
	if o.TLSConfig != nil {
		return nil
	}
	p := *o
	p.WriteBufferSize, p.PipelineWriteBufferSize = gatherBuffer, gatherBuffer
	p.Dialer = gathering(o.Dialer)
	return &p
}
