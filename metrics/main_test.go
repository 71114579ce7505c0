package metrics_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its engines and waits for them to drain: no goroutine may
// outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
