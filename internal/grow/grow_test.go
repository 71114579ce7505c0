package grow

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestLen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       []int
		n       int
		want    []int
		wantCap int // 0: unchecked
	}{
		{name: "from nil", s: nil, n: 3, want: []int{0, 0, 0}, wantCap: min},
		{name: "shrinks without reallocating", s: []int{1, 2, 3}, n: 1, want: []int{1}},
		{name: "within capacity zeroes what it exposes", s: append(make([]int, 0, 8), 1, 2, 3, 4)[:1], n: 3, want: []int{1, 0, 0}},
		{name: "past capacity keeps the elements and adds a sixteenth", s: make([]int, 800), n: 801, want: make([]int, 801), wantCap: 851},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Len(tc.s, tc.n)
			assert.Equal(t, tc.want, got)
			if tc.wantCap != 0 {
				assert.Equal(t, tc.wantCap, cap(got))
			}
		})
	}
}

// Growing one element at a time never leaves more than a sixteenth (or the
// minimum) unused, and keeps every element.
func TestLenKeepsElementsAndBoundsSlack(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s []uint32
		for i := range rapid.IntRange(1, 5000).Draw(t, "n") {
			s = Len(s, i+1)
			s[i] = uint32(i) + 1
			require.LessOrEqual(t, cap(s), max(len(s)+len(s)/16, min), "capacity %d for length %d", cap(s), len(s))
		}
		for i, v := range s {
			require.Equal(t, uint32(i)+1, v)
		}
	})
}
