//go:build cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// With cgo, the calls a copy, its event and polling make go through the
// trampolines: the cheaper path is the one that ships.
func TestHotCallsGoThroughCgo(t *testing.T) {
	r := newFakeRig(t, 0)
	assert.Equal(t, "cgo", r.dev.drv.calls)
}
