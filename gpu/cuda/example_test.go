package cuda_test

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/gpu/cuda"
	"github.com/kvready/kvready/gpu/sim"
)

// Open the real device when there is one, and fall back to the simulated
// device when there is no driver: both are a gpu.Device.
func ExampleOpen() {
	var dev gpu.Device
	d, err := cuda.Open(0)
	switch {
	case err == nil:
		defer d.Close()
		dev = d
	case errors.Is(err, gpu.ErrNoDriver):
		dev, _ = sim.New(0, 1<<20)
	default:
		fmt.Println(err)
		return
	}
	p, err := dev.Alloc(5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Free(p)
	_ = dev.Write(p, []byte("hello"))
	got := make([]byte, 5)
	_ = dev.Read(got, p)
	fmt.Println(string(got))
	// Output: hello
}
