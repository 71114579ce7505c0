package redis

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// sentinel fills a destination before a reply is streamed into it; value
// bytes never take it, so a byte that landed shows.
const sentinel = 0xEE

func filled(n int) []byte { return bytes.Repeat([]byte{sentinel}, n) }

// valueOf is a value of n bytes none of which is the sentinel.
func valueOf(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i % 200)
	}
	return v
}

func bulk(v []byte) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) }

// feedLikeGoRedis streams reply into s as go-redis's RawWriteToCmd does: the
// header line, its CRLF, then (a bulk string) io.CopyN of the rest, which
// hands the sink a reader bounded to it.
func feedLikeGoRedis(s *sink, reply string) error {
	i := strings.Index(reply, "\r\n")
	if i < 0 {
		_, err := s.Write([]byte(reply))
		return err
	}
	if _, err := s.Write([]byte(reply[:i])); err != nil {
		return err
	}
	if _, err := s.Write([]byte("\r\n")); err != nil {
		return err
	}
	if rest := reply[i+2:]; rest != "" {
		_, err := io.CopyN(s, strings.NewReader(rest), int64(len(rest)))
		return err
	}
	return nil
}

// feedInPieces streams reply into s through Write, cut at the given points.
// After an error reply it goes on, as go-redis does after a redirect.
func feedInPieces(s *sink, reply string, cuts []int) error {
	at := 0
	for _, c := range append(cuts, len(reply)) {
		c = min(max(c, at), len(reply))
		if _, err := s.Write([]byte(reply[at:c])); err != nil {
			if _, redirect := err.(storeError); redirect && c < len(reply) {
				at = c
				continue // go-redis sends the command again: the next reply follows
			}
			return err
		}
		at = c
	}
	return nil
}

// TestSinkReplies: every kind of reply a GET can meet, fed as go-redis
// streams it and byte by byte: only a value of exactly the destination's
// length lands, and nothing of any other reply does.
func TestSinkReplies(t *testing.T) {
	const n = 8
	long := "-ERR " + strings.Repeat("x", 2*maxLine)
	type want int
	const (
		lands   want = iota // the value is in the row, reported landed
		miss                // no such key: nothing lands, no error
		refused             // an error, and nothing lands
		failed              // an error, though the value's bytes are in the row
	)
	for _, tc := range []struct {
		name  string
		reply string
		want  want
		err   string // a substring of the error; "" for none
		bytes bool   // a stream go-redis never hands over in its own shape: fed byte by byte only
	}{
		{name: "the row's length", reply: bulk(valueOf(n)), want: lands},
		{name: "one byte short", reply: bulk(valueOf(n - 1)), want: refused, err: "the store holds 7 bytes, the staging row has 8"},
		{name: "one byte long", reply: bulk(valueOf(n + 1)), want: refused, err: "the store holds 9 bytes, the staging row has 8"},
		{name: "two bytes long", reply: bulk(valueOf(n + 2)), want: refused, err: "the store holds 10 bytes"},
		{name: "far too long", reply: bulk(valueOf(40 * n)), want: refused, err: "the store holds 320 bytes"},
		{name: "empty", reply: bulk(nil), want: refused, err: "the store holds 0 bytes"},
		{name: "RESP2 null", reply: "$-1\r\n", want: miss},
		{name: "RESP3 null", reply: "_\r\n", want: miss},
		{name: "an error reply", reply: "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", want: refused, err: "WRONGTYPE Operation"},
		{name: "a long error reply", reply: long + "\r\n", want: refused, err: "ERR xxxx"},
		{name: "a status reply", reply: "+OK\r\n", want: refused, err: "unreadable reply to GET"},
		{name: "an integer reply", reply: ":8\r\n", want: refused, err: "unreadable reply to GET"},
		{name: "an array reply", reply: "*1\r\n" + bulk(valueOf(n)), want: refused, err: "unreadable reply to GET"},
		{name: "a bad length", reply: "$eight\r\n", want: refused, err: "unreadable reply to GET"},
		{name: "a negative length", reply: "$-2\r\n", want: refused, err: "unreadable reply to GET"},
		{name: "a header too long", reply: "$" + strings.Repeat("0", 3*maxLine) + "8\r\n", want: refused, err: "unreadable reply to GET"},
		{name: "an empty header", reply: "\r\n", want: refused, err: "empty header"},
		{name: "a value without its CRLF", reply: fmt.Sprintf("$%d\r\n%sXY", n, valueOf(n)), want: failed, err: "not followed by CRLF"},
		{name: "a MOVED redirect, then the value", reply: "-MOVED 3999 127.0.0.1:6381\r\n" + bulk(valueOf(n)), want: lands, bytes: true},
		{name: "bytes past the value", reply: bulk(valueOf(n)) + "$8\r\n", want: failed, err: "past the end of the reply", bytes: true},
	} {
		feeds := []string{"go-redis", "bytes"}
		if tc.bytes {
			feeds = feeds[1:]
		}
		for _, feed := range feeds {
			t.Run(tc.name+"/"+feed, func(t *testing.T) {
				dst := filled(n)
				var s sink
				s.reset(dst)
				var ferr error
				if feed == "go-redis" {
					ferr = feedLikeGoRedis(&s, tc.reply)
				} else {
					cuts := make([]int, len(tc.reply))
					for i := range cuts {
						cuts[i] = i
					}
					ferr = feedInPieces(&s, tc.reply, cuts)
				}
				ok, err := s.result()
				assert.Equal(t, tc.want == lands, ok)
				if tc.err == "" {
					require.NoError(t, err)
				} else {
					require.Error(t, err)
					assert.Contains(t, err.Error(), tc.err)
				}
				if tc.want == lands || tc.want == failed {
					assert.Equal(t, valueOf(n), dst)
				} else {
					assert.Equal(t, filled(n), dst, "a refused reply landed")
				}
				if tc.want == miss {
					assert.NoError(t, ferr)
				}
				var se storeError
				if errors.As(err, &se) {
					assert.ErrorAs(t, ferr, &se, "an error reply goes back to go-redis as a server error")
				}
			})
		}
	}
}

// tornReader yields n bytes of r, then fails as a dropped connection does.
type tornReader struct {
	r io.Reader
	n int
}

var errDropped = errors.New("connection reset by peer")

func (t *tornReader) Read(p []byte) (int, error) {
	if t.n == 0 {
		return 0, errDropped
	}
	m, err := t.r.Read(p[:min(len(p), t.n)])
	t.n -= m
	return m, err
}

// TestSinkProperty: whatever the value's length, the destination's, and
// however the stream is split or cut off, a sink lands the value only if it
// has the destination's length and arrived whole; otherwise the destination
// is untouched, except by a value of the right length cut off part way — a
// torn row, which is never reported landed. A tee, when set, ends equal
// to the destination: it takes exactly the bytes that land there.
func TestSinkProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 300).Draw(rt, "row")
		size := rapid.OneOf(rapid.Just(n), rapid.IntRange(0, 3*n)).Draw(rt, "value")
		reply := bulk(valueOf(size))
		cut := rapid.OneOf(rapid.Just(len(reply)), rapid.IntRange(0, len(reply))).Draw(rt, "cut")
		dst := filled(n)
		var s sink
		s.reset(dst)
		var tee []byte
		if rapid.Bool().Draw(rt, "tee") {
			tee = filled(n)
			s.tee = tee
		}
		var ferr error
		if rapid.Bool().Draw(rt, "as go-redis") {
			i := strings.Index(reply, "\r\n")
			if cut <= i+2 {
				ferr = feedInPieces(&s, reply[:cut], nil)
			} else {
				_ = feedInPieces(&s, reply[:i+2], []int{i})
				rest := reply[i+2:]
				_, ferr = io.CopyN(&s, &tornReader{strings.NewReader(rest), cut - i - 2}, int64(len(rest)))
			}
		} else {
			cuts := rapid.SliceOfN(rapid.IntRange(0, cut), 0, 8).Draw(rt, "cuts")
			slices.Sort(cuts)
			ferr = feedInPieces(&s, reply[:cut], cuts)
		}
		ok, err := s.result()
		if tee != nil { // a tee takes exactly the bytes that land in the row, however they came
			require.Equal(rt, dst, tee, "the tee differs from the row")
		}
		whole := cut == len(reply)
		if size == n && whole {
			require.NoError(rt, ferr)
			require.True(rt, ok, "a whole value of the row's length did not land: %v", err)
			require.Equal(rt, valueOf(n), dst)
			return
		}
		require.False(rt, ok, "landed: a value of %d bytes into a %d-byte row, %d of %d bytes of the reply", size, n, cut, len(reply))
		require.Error(rt, err)
		if size != n {
			require.Equal(rt, filled(n), dst, "a value of %d bytes landed in a row of %d", size, n)
		}
	})
}
