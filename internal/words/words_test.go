package words

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n      int
		noun   string
		plural []string
		want   string
	}{
		{0, "lease", nil, "0 leases"},
		{1, "lease", nil, "1 lease"},
		{2, "lease", nil, "2 leases"},
		{-1, "slot", nil, "-1 slots"},
		{1, "fetch", []string{"fetches"}, "1 fetch"},
		{3, "fetch", []string{"fetches"}, "3 fetches"},
	} {
		assert.Equal(t, tc.want, Count(tc.n, tc.noun, tc.plural...))
	}
}
