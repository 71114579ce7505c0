package simulate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu/cuda/fakecuda"
)

// The main job on the CUDA binding over the fake driver, its copies taking
// real time on the driver's worker threads: every request finishes and the
// checker finds nothing, with fault injection in the store on.
func TestRunOnFakeCUDA(t *testing.T) {
	lib, ctl, err := fakecuda.Load()
	require.NoError(t, err, "the CUDA run is tested on the fake driver, built with gcc")
	t.Cleanup(ctl.Reset)
	require.NoError(t, ctl.SetDelay(30*time.Microsecond))

	cfg := Defaults()
	cfg.Requests = 400
	cfg.Device, cfg.CUDALibrary = CUDADevice, lib
	sum, err := Run(context.Background(), cfg, nil)
	require.NoError(t, err)
	assert.True(t, sum.Safe(), "the checker found a violation: %+v", sum)
	assert.True(t, sum.Complete())
	assert.Positive(t, sum.RowsVerified)
	assert.Positive(t, ctl.Counter(fakecuda.CopiesRun), "copies ran on the driver")
	assert.Zero(t, ctl.Counter(fakecuda.StreamsLive), "the run closed its stream")
}

func TestDeviceConfig(t *testing.T) {
	for _, tc := range []struct {
		mod   func(*Config)
		field string
	}{
		{func(c *Config) { c.Device = "tpu" }, "device"},
		{func(c *Config) { c.CUDALibrary = "/x.so" }, "cuda-library"},
		{func(c *Config) { c.Device, c.DeviceLossAt = CUDADevice, time.Millisecond }, "device-loss-at"},
		{func(c *Config) { c.Device, c.Naive = CUDADevice, true }, "naive"},
	} {
		cfg := Defaults()
		tc.mod(&cfg)
		err := cfg.Validate()
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, tc.field, fe.Field)
	}
	cfg := Defaults()
	cfg.Device, cfg.CUDALibrary = CUDADevice, "/nonexistent/libcuda.so.1"
	require.NoError(t, cfg.Validate())
	_, err := Run(context.Background(), cfg, nil)
	assert.ErrorContains(t, err, "/nonexistent/libcuda.so.1")
	cfg.Device, cfg.CUDALibrary = "", ""
	assert.NoError(t, cfg.Validate(), "an empty device is the simulated one")
}
