package readiness_test

import (
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu/nvml"
	"github.com/kvready/kvready/readiness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mockNVML is one healthy device whose event wait delivers what the test sends.
func mockNVML(events chan gonvml.EventData) (*mock.Interface, *mock.Device) {
	dev := &mock.Device{}
	set := &mock.EventSet{}
	return &mock.Interface{
		InitFunc:                   func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:               func() gonvml.Return { return gonvml.SUCCESS },
		EventSetCreateFunc:         func() (gonvml.EventSet, gonvml.Return) { return set, gonvml.SUCCESS },
		EventSetFreeFunc:           func(gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (gonvml.Device, gonvml.Return) { return dev, gonvml.SUCCESS },
		DeviceRegisterEventsFunc:   func(gonvml.Device, uint64, gonvml.EventSet) gonvml.Return { return gonvml.SUCCESS },
		EventSetWaitFunc: func(_ gonvml.EventSet, ms uint32) (gonvml.EventData, gonvml.Return) {
			select {
			case d := <-events:
				return d, gonvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			}
		},
	}, dev
}

// An Xid critical error reported by NVML makes the device's in-flight copies
// unproven (quarantined) and refuses new leases; a finished lease is untouched.
func TestNVMLXidQuarantinesInFlightCopies(t *testing.T) {
	events := make(chan gonvml.EventData, 1)
	lib, dev := mockNVML(events)
	watcher := nvml.StartWith(lib, nvml.Config{WaitTimeout: 5 * time.Millisecond}, 0)
	defer watcher.Stop()

	r := newRig(t, 1, 4, nil, func(c *readiness.Config) { c.Health = watcher })
	r.store(0, 0, 1)
	done, err := r.eng.Lend(r.fetchRequest(1, 0))
	require.NoError(t, err)
	r.until(done, fsm.AccessFenced)

	r.autoCopy = false
	inFlight, err := r.eng.Lend(r.fetchRequest(1, 1))
	require.NoError(t, err)
	r.until(inFlight, fsm.Served) // its device copy is queued, not landed
	later := r.fetchRequest(1, 2)

	events <- gonvml.EventData{Device: dev, EventType: gonvml.EventTypeXidCriticalError, EventData: 79}
	r.until(inFlight, fsm.Quarantined)
	info, err := r.eng.Lease(inFlight)
	require.NoError(t, err)
	assert.Contains(t, info.Reason, "Xid 79")
	assert.Equal(t, fsm.AccessFenced, r.state(done), "a lease with no copy in flight is untouched")
	_, err = r.eng.Lend(later)
	assert.ErrorIs(t, err, readiness.ErrDeviceLost)
}
