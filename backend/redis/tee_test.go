package redis_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/contract"
)

// teeCanary is what a second buffer holds until the fetch writes it.
func teeCanary(n int) []byte { return bytes.Repeat([]byte{0x7E}, n) }

// TestFetchTeeLandsEachServedRowInItsBuffer: FetchTee lands in each unit's
// second buffer exactly what it lands in the unit's row — a served unit's
// value whole, at a small row and at rows several socket reads and tee
// chunks long — and nothing for a miss or for a value of the wrong length,
// over a client that reads straight into staging and one that reads into
// scratch. A buffer of another length than the row's is not used, and tee
// is asked once per unit, in order, with the row's length.
func TestFetchTeeLandsEachServedRowInItsBuffer(t *testing.T) {
	for _, kind := range clientKinds {
		for _, row := range []int{64, 700 << 10} {
			t.Run(fmt.Sprintf("%s/row=%d", kind.name, row), func(t *testing.T) {
				c := newClient(t, shared.Addr, kind.edit)
				mem := newStaging(1, 5, row)
				b := newBackend(t, c, mem, kvredis.WithBatch(2), kvredis.WithConcurrency(2))
				ctx := waitCtx(t)
				hit0, miss, wrong, hit3, short := unit(1, 0, 0), unit(2, 0, 1), unit(3, 0, 2), unit(4, 0, 3), unit(5, 0, 4)
				for _, u := range []contract.Unit{hit0, hit3, short} {
					require.NoError(t, b.Put(ctx, ext, u.Name, content(u.Local, 0, row)))
				}
				require.NoError(t, c.Set(ctx, b.Key(ext, wrong.Name), content(9, 9, row+1), 0).Err())

				// Without the wrong-length value first: every hit served.
				bufs := make([][]byte, 5)
				var asked []string
				tee := func(i, n int) []byte {
					asked = append(asked, fmt.Sprintf("%d:%d", i, n))
					if i == 4 {
						return teeCanary(n - 1) // not the row's length: unused
					}
					bufs[i] = teeCanary(n)
					return bufs[i]
				}
				a, err := b.FetchTee(extentOf(t, hit0, miss, hit3, short), nil, tee)
				require.NoError(t, err)
				s, ok := served(settled(t, b, a))
				require.True(t, ok, "%v", a.Poll())
				quiesced(t, b, a)
				assert.True(t, s.Equal(names(hit0, hit3, short)), "served %v", s)
				assert.Equal(t, []string{fmt.Sprintf("0:%d", row), fmt.Sprintf("1:%d", row), fmt.Sprintf("2:%d", row), fmt.Sprintf("3:%d", row)}, asked)
				assert.Equal(t, content(hit0.Local, 0, row), bufs[0], "a served unit's buffer holds its value whole")
				assert.Equal(t, content(hit3.Local, 0, row), bufs[2])
				assert.Equal(t, teeCanary(row), bufs[1], "a miss lands nothing in its buffer")
				assert.Equal(t, content(short.Local, 0, row), mem.rows[0][short.Local], "a unit without a usable buffer is still fetched")

				// A value of the wrong length fails its unit and lands in
				// neither its row nor its buffer.
				bufs = make([][]byte, 5)
				a, err = b.FetchTee(extentOf(t, hit0, wrong), nil, func(i, n int) []byte { bufs[i] = teeCanary(n); return bufs[i] })
				require.NoError(t, err)
				_, failed := settled(t, b, a).(contract.Failed)
				require.True(t, failed, "%v", a.Poll())
				quiesced(t, b, a)
				assert.Equal(t, teeCanary(row), bufs[1], "a value of the wrong length landed in the buffer")
				assert.True(t, mem.untouched(0, wrong.Local))
			})
		}
	}
}

// TestFetchTeeRefusesWhatFetchRefuses: a route, a nil tee and a unit
// without a staging row are rejected before tee is asked for anything.
func TestFetchTeeRefusesWhatFetchRefuses(t *testing.T) {
	c := newClient(t, shared.Addr)
	mem := newStaging(1, 2, 64)
	b := newBackend(t, c, mem)
	asked := 0
	tee := func(int, int) []byte { asked++; return nil }
	for _, tt := range []struct {
		name  string
		call  func() (contract.Attempt, error)
		match string
	}{
		{"route", func() (contract.Attempt, error) {
			return b.FetchTee(extentOf(t, unit(1, 0, 0)), struct{ contract.Route }{}, tee)
		}, "a route was given"},
		{"nil tee", func() (contract.Attempt, error) { return b.FetchTee(extentOf(t, unit(1, 0, 0)), nil, nil) }, "tee is nil"},
		{"no staging row", func() (contract.Attempt, error) {
			return b.FetchTee(extentOf(t, unit(1, 0, 0), unit(2, 0, 7)), nil, tee)
		}, "no staging row"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := tt.call()
			assert.Nil(t, a)
			require.ErrorIs(t, err, contract.ErrSubmissionRejected)
			assert.Contains(t, err.Error(), tt.match)
			assert.Zero(t, asked, "tee was asked for a buffer by a rejected submission")
		})
	}
}
