package nvml_test

import (
	"fmt"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu/cuda"
	"github.com/kvready/kvready/gpu/cuda/fakecuda"
	"github.com/kvready/kvready/gpu/nvml"
)

// pciAddr parses a PCI bus id in any of the forms NVML accepts for
// DeviceGetHandleByPciBusId ("domain:bus:device.function", hexadecimal).
func pciAddr(s string) (addr [4]uint64, ok bool) {
	n, err := fmt.Sscanf(s, "%x:%x:%x.%x", &addr[0], &addr[1], &addr[2], &addr[3])
	return addr, err == nil && n == 4
}

// NVML and CUDA number GPUs differently (CUDA_VISIBLE_DEVICES, fastest-first
// ordering, MIG): the watcher finds a CUDA ordinal's device by its PCI bus id,
// read from the fake CUDA driver through the real binding.
func TestBusIDMapsCUDAOrdinalToNVMLDevice(t *testing.T) {
	lib, ctl, err := fakecuda.Load()
	require.NoError(t, err, "the test reads bus ids from the fake CUDA driver, built with gcc")
	t.Cleanup(ctl.Reset)
	require.NoError(t, ctl.SetDevices(2))
	require.NoError(t, ctl.SetBus(0, 0xC1)) // CUDA ordinal 0 is NVML index 1
	require.NoError(t, ctl.SetBus(1, 0x41)) // CUDA ordinal 1 is NVML index 0
	busIDs := map[int]string{}
	for ord := range 2 {
		d, err := cuda.Open(ord, cuda.WithLibrary(lib))
		require.NoError(t, err)
		busIDs[ord], err = d.PCIBusID()
		require.NoError(t, err)
		require.NoError(t, d.Close())
	}
	assert.Equal(t, "00000000:C1:00.0", busIDs[0])

	f := newFake()
	nvmlBus := []string{"00000000:41:00.0", "00000000:C1:00.0"} // by NVML index
	f.DeviceGetHandleByPciBusIdFunc = func(s string) (gonvml.Device, gonvml.Return) {
		want, ok := pciAddr(s)
		if !ok {
			return nil, gonvml.ERROR_INVALID_ARGUMENT
		}
		for i, b := range nvmlBus {
			if got, _ := pciAddr(b); got == want {
				return f.devs[i], gonvml.SUCCESS
			}
		}
		return nil, gonvml.ERROR_NOT_FOUND
	}
	w := nvml.StartWith(f, nvml.Config{WaitTimeout: quick.WaitTimeout, BusIDs: busIDs}, 0, 1)
	defer w.Stop()
	assert.Empty(t, f.DeviceGetHandleByIndexCalls(), "no CUDA ordinal was taken as an NVML index")

	// An Xid on NVML index 0 is CUDA ordinal 1's.
	f.events <- waitResult{data: gonvml.EventData{Device: f.devs[0], EventType: gonvml.EventTypeXidCriticalError, EventData: 79}, ret: gonvml.SUCCESS}
	eventually(t, w, 1, nvml.Lost)
	s, _ := w.State(0)
	assert.Equal(t, nvml.Healthy, s, "CUDA ordinal 0 is another GPU")
}

func TestBusIDNotFoundIsUnknown(t *testing.T) {
	f := newFake()
	f.DeviceGetHandleByPciBusIdFunc = func(string) (gonvml.Device, gonvml.Return) { return nil, gonvml.ERROR_NOT_FOUND }
	w := nvml.StartWith(f, nvml.Config{WaitTimeout: quick.WaitTimeout, BusIDs: map[int]string{0: "0000:99:00.0"}}, 0)
	defer w.Stop()
	s, reason := w.State(0)
	assert.Equal(t, nvml.Unknown, s)
	assert.Contains(t, reason, "ERROR_NOT_FOUND")
}
