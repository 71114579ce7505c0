package redis

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// sink receives one GET reply as go-redis streams it, raw, to an io.Writer
// (goredis.RawWriteToCmd): the reply's header line, its CRLF, then — for a
// bulk string — the value and its CRLF. It lands the value in dst only once
// the header has said the value is exactly len(dst) bytes long: a value of
// any other length is read past (so the connection stays aligned for the
// next reply) and not a byte of it lands. That check, made before the value
// arrives, is what lets a worker read straight into a staging row.
//
// The value's bytes come through ReadFrom (io.CopyN's fast path, which hands
// over a reader of exactly the value and its CRLF): a value of the row's
// length is read from the connection's buffer straight into dst, without a
// copy in between. Any other split of the stream goes through Write, which
// parses it the same way.
type sink struct {
	dst []byte
	// tee, when set (a FetchTee straight into staging), has dst's length and
	// takes a copy of every byte that lands in dst, chunk by chunk, right
	// after the chunk landed, while it is still in this core's cache.
	tee   []byte
	state sinkState
	hdr   [24]byte // the header line so far, CRLF included, while it fits
	hn    int      // bytes in hdr
	line  []byte   // the header line once longer than hdr (an error reply's), at most maxLine bytes
	long  bool     // the header line was longer than maxLine (only a server error's may be)
	size  int      // the value's length, from the header
	got   int      // bytes of the value landed (or read past)
	tail  int      // bytes of the value's CRLF read
	crlf  [2]byte
	err   error // a server error reply, or what was wrong with the stream
}

type sinkState uint8

const (
	sinkHeader sinkState = iota // reading the header line
	sinkValue                   // reading a bulk string's value and CRLF
	sinkDone                    // the reply is complete (or was refused)
)

// teeChunk is the most a sink with a tee reads into its row before copying
// what it read to the tee: small enough that the chunk is still in the
// core's cache (L2 is 1–2 MiB a core on the machines measured), large enough
// that reads stay few.
const teeChunk = 256 << 10

// teeStreamMin is the smallest tee copy teeCopy streams past the cache
// (copy_amd64.go): below it, the fence and the unaligned edges cost more
// than the stores save.
const teeStreamMin = 4 << 10

// maxLine bounds what a sink keeps of a header line: a bulk string's is
// "$" and at most 20 digits; a server error's message is cut there.
const maxLine = 512

// reset readies the sink for a reply landing in dst.
func (s *sink) reset(dst []byte) {
	*s = sink{dst: dst}
}

// storeError is an error reply of the server ("-ERR ...", "-MOVED ...") to a
// GET streamed into a sink. It is a goredis.Error, so go-redis reads the
// pipeline's next reply (the connection is aligned: an error reply is one
// line) and a Cluster client follows a MOVED or ASK redirect.
type storeError string

func (e storeError) Error() string { return string(e) }

// RedisError marks a storeError as the server's reply (goredis.Error).
func (storeError) RedisError() {}

// errTorn is what a sink reports for a value that stopped arriving part way
// (the connection dropped or the call's deadline passed): the row may hold
// part of it, and is never served.
var errTorn = errors.New("the reply stopped part way through the value")

// result reports what the reply was: the value landed in dst in full (ok),
// a miss (neither ok nor an error), or an error — a value of another length
// than dst, an error reply, a reply that is no bulk string, or one that
// stopped part way.
func (s *sink) result() (ok bool, err error) {
	switch {
	case s.err != nil:
		return false, s.err
	case s.state != sinkDone:
		if s.state == sinkValue {
			return false, fmt.Errorf("%w (%d of %d bytes)", errTorn, s.got, s.size)
		}
		return false, errors.New("no reply was read")
	case s.size < 0:
		return false, nil
	}
	return true, nil
}

// wrongSize is the error of a value whose length is not the row's.
type wrongSize struct{ held, want int }

func (e wrongSize) Error() string {
	return fmt.Sprintf("the store holds %d bytes, the staging row has %d (slot_bytes); not copied", e.held, e.want)
}

// Write takes the next bytes of the reply, in any split.
func (s *sink) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		var err error
		switch s.state {
		case sinkHeader:
			p, err = s.header(p)
		case sinkValue:
			p, err = s.value(p)
		case sinkDone:
			if _, redirected := s.err.(storeError); !redirected {
				err = s.protocol(fmt.Errorf("%d bytes past the end of the reply", len(p)))
				break
			}
			// A Cluster client sends the command again after MOVED or ASK:
			// this is the new node's reply.
			tee := s.tee
			s.reset(s.dst)
			s.tee = tee
		}
		if err != nil {
			return n - len(p), err
		}
	}
	return n, nil
}

// ReadFrom reads the rest of the reply from r, which go-redis bounds to it:
// the value straight into dst, when its length was the row's.
func (s *sink) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for s.state == sinkValue {
		var m int
		var err error
		switch {
		case s.got < s.size && s.size == len(s.dst) && s.tee != nil:
			// Read by chunks, each copied to the tee at once: the copy reads
			// bytes the kernel has just written, from this core's cache,
			// while the server goes on sending the rest.
			m, err = r.Read(s.dst[s.got:min(s.size, s.got+teeChunk)])
			teeCopy(s.tee[s.got:s.got+m], s.dst[s.got:s.got+m])
			s.got += m
		case s.got < s.size && s.size == len(s.dst):
			m, err = io.ReadFull(r, s.dst[s.got:])
			s.got += m
		case s.got < s.size:
			var k int64
			k, err = io.CopyN(io.Discard, r, int64(s.size-s.got))
			m = int(k)
			s.got += m
		default:
			m, err = io.ReadFull(r, s.crlf[s.tail:])
			s.tail += m
			if s.tail == len(s.crlf) {
				err = s.end()
			}
		}
		total += int64(m)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the reader ended inside the value
			}
			return total, err
		}
	}
	if s.state == sinkDone {
		return total, nil // go-redis's reader ends with the value's CRLF
	}
	// Anything else (a header split oddly, a redirected command's new
	// reply) goes through Write.
	buf := make([]byte, 64)
	for {
		m, err := r.Read(buf)
		if m > 0 {
			if _, werr := s.Write(buf[:m]); werr != nil {
				return total, werr
			}
			total += int64(m)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// header consumes the header line from p and parses it once complete.
func (s *sink) header(p []byte) ([]byte, error) {
	i := bytes.IndexByte(p, '\n')
	part := p
	if i >= 0 {
		part = p[:i+1]
	}
	switch {
	case s.line == nil && s.hn+len(part) <= len(s.hdr):
		s.hn += copy(s.hdr[s.hn:], part) // a bulk string's header: no allocation
	case s.line == nil:
		s.line = append(make([]byte, 0, maxLine), s.hdr[:s.hn]...)
		fallthrough
	default:
		room := maxLine - len(s.line)
		s.long = s.long || len(part) > room
		s.line = append(s.line, part[:min(room, len(part))]...)
	}
	if i < 0 {
		return nil, nil
	}
	return p[i+1:], s.parse()
}

// parse reads the complete header line.
func (s *sink) parse() error {
	line := s.line
	if line == nil {
		line = s.hdr[:s.hn]
	}
	if !s.long {
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return s.protocol(fmt.Errorf("a header line %q that does not end in CRLF", line))
		}
		line = line[:len(line)-2]
	}
	s.state = sinkDone
	if len(line) == 0 {
		return s.protocol(errors.New("an empty header line"))
	}
	switch {
	case line[0] == '-':
		s.err = storeError(line[1:])
		return s.err
	case s.long:
		return s.protocol(fmt.Errorf("a header line longer than %d bytes (%.40q...)", maxLine, line))
	case line[0] == '_' && len(line) == 1: // RESP3 null: no such key
		s.size = -1
		return nil
	case line[0] != '$':
		return s.protocol(fmt.Errorf("a %q reply to GET; want a bulk string", line))
	}
	size, err := strconv.Atoi(string(line[1:]))
	switch {
	case err != nil || size < -1:
		return s.protocol(fmt.Errorf("a bulk string header %q", line))
	case size == -1: // RESP2 null: no such key
		s.size = -1
		return nil
	}
	s.size, s.state = size, sinkValue
	return nil
}

// value consumes the value and its CRLF from p: into dst if the value has
// the row's length, else past it.
func (s *sink) value(p []byte) ([]byte, error) {
	if s.got < s.size {
		k := min(len(p), s.size-s.got)
		if s.size == len(s.dst) {
			copy(s.dst[s.got:], p[:k])
			if s.tee != nil {
				teeCopy(s.tee[s.got:], p[:k])
			}
		}
		s.got += k
		return p[k:], nil
	}
	k := copy(s.crlf[s.tail:], p)
	s.tail += k
	if s.tail < len(s.crlf) {
		return p[k:], nil
	}
	return p[k:], s.end()
}

// end closes a bulk string once its CRLF is read.
func (s *sink) end() error {
	s.state = sinkDone
	if s.crlf != [2]byte{'\r', '\n'} {
		return s.protocol(fmt.Errorf("a value not followed by CRLF (%q)", s.crlf[:]))
	}
	if s.size != len(s.dst) {
		s.err = wrongSize{held: s.size, want: len(s.dst)}
	}
	return nil
}

// protocol records a stream that is not a GET reply. The error is no
// goredis.Error, so go-redis fails the rest of the pipeline and drops the
// connection rather than read on from a place it cannot trust.
func (s *sink) protocol(err error) error {
	s.state = sinkDone
	s.err = fmt.Errorf("redis: unreadable reply to GET: %w", err)
	return s.err
}
