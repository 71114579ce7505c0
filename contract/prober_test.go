package contract

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAccessNames(t *testing.T) {
	for a, want := range map[Access]string{
		AccessUnknown: "unknown", AccessEnded: "ended", AccessUnproven: "unproven", Access(9): "access(9)",
	} {
		assert.Equal(t, want, a.String())
	}
	var zero Access
	assert.Equal(t, AccessUnknown, zero, "the zero answer is the one that promises least")
}
