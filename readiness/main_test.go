package readiness

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its engine and waits for it to drain: no goroutine may
// outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
