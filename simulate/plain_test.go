package simulate

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/internal/redistest"
)

// oneThenMany matches a count of one with a plural noun: "1 leases".
var oneThenMany = regexp.MustCompile(`(^|[^0-9.])1 (lease|request|slot|outage|submission|write|grant|slot grant|contained lease|violation)s\b`)

// Counts of one are said in the singular wherever the summary counts things
// (internal/words does every plural).
func TestSummaryCountsOfOneAreSingular(t *testing.T) {
	s := &Summary{Manager: "kvready", Requests: 1, Policy: "recover", Containments: 1, Recovered: 1, RecoveredSlots: 1,
		RefusedForCapacity: 1, StagingSlots: 4, MaxOutstanding: 1, RecycledBeforeFence: 1, LateWrites: 1,
		RealTime: true, Store: "redis://127.0.0.1:1/0", StoreOutages: 1, StoreChecksFailed: 1}
	var b strings.Builder
	require.NoError(t, s.WriteTable(&b))
	tbl := b.String()
	for _, want := range []string{"1 request,", "1 lease contained, every one recovered", "1 lease refused for lack of slots",
		"at most 1 submission outstanding", "in 1 outage", "1 of 1 contained lease, returning 1 slot in all", "1 slot grant ", "1 request (store"} {
		assert.Contains(t, tbl, want)
	}
	assert.Empty(t, oneThenMany.FindAllString(tbl, -1), "a count of one with a plural noun:\n%s", tbl)
}

// A Redis URL that turns the breaker off (breaker_failures=0) is said in the
// summary and its JSON: the store is never held for down, so "never held for
// down" would mislead. The default URL leaves the breaker on.
func TestBreakerOffIsSaid(t *testing.T) {
	srv := redistest.Start(t)
	for _, off := range []bool{false, true} {
		c := overRedis(srv.URL())
		c.Requests = 100
		if off {
			c.Backend += "?breaker_failures=0"
		}
		s := run(t, c)
		tbl := table(t, s)
		assert.Equal(t, off, s.BreakerOff)
		js, err := s.MarshalJSON()
		require.NoError(t, err)
		if off {
			assert.Contains(t, tbl, "breaker               off (breaker_failures=0): the store is never held for down")
			assert.NotContains(t, tbl, "never held for down\n")
			assert.Contains(t, string(js), `"breaker_off":true`)
		} else {
			assert.NotContains(t, tbl, "breaker_failures=0")
			assert.Contains(t, tbl, "never held for down")
			assert.NotContains(t, string(js), `"breaker_off"`)
		}
	}
}
