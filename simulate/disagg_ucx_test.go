package simulate

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMain makes this test binary the prefill process when a run over UCX
// starts it (RunDisagg re-executes os.Executable()), as kvready's main does.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(DisaggPrefillEnv); ok {
		os.Exit(RunDisaggPrefill(spec, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

func TestDisaggUCXSmoke(t *testing.T) {
	cfg := DisaggUCXDefaults()
	cfg.UCXTransports = os.Getenv("TLS")
	cfg.Requests = 100
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, naive := range []bool{false, true} {
		cfg.Naive = naive
		s, err := RunDisagg(ctx, cfg, nil)
		require.NoError(t, err)
		require.NoError(t, s.WriteTable(os.Stdout))
	}
}
