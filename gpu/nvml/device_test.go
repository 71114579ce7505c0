//go:build cudadevice

package nvml_test

import (
	"os"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu/cuda"
	"github.com/kvready/kvready/gpu/nvml"
)

// TestDeviceHealth reads GPU 0's health through the real NVML
// (libnvidia-ml.so.1), finding it by the PCI bus id the CUDA driver reports:
// go test -tags cudadevice -run TestDeviceHealth ./gpu/nvml/ (make device-check).
func TestDeviceHealth(t *testing.T) {
	d, err := cuda.Open(0, cuda.WithLibrary(os.Getenv(cuda.LibraryEnv)))
	require.NoError(t, err, "the NVML check needs a CUDA driver and GPU 0")
	bus, err := d.PCIBusID()
	require.NoError(t, err)
	require.NoError(t, d.Close())

	lib := gonvml.New()
	w := nvml.StartWith(lib, nvml.Config{BusIDs: map[int]string{0: bus}}, 0)
	defer w.Stop()
	s, reason := w.State(0)
	t.Logf("CUDA ordinal 0, PCI bus id %s: NVML %v %s", bus, s, reason)
	assert.Equal(t, nvml.Healthy, s, "NVML watches GPU 0 (found by bus id %s): %s", bus, reason)
}
