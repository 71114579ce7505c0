package fakecuda_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/gpu/cuda/fakecuda"
)

func TestBuildWithoutCompilerSaysHowToInstall(t *testing.T) {
	t.Setenv("CC", "/nonexistent/gcc")
	err := fakecuda.Build(filepath.Join(t.TempDir(), "lib.so"))
	require.ErrorIs(t, err, fakecuda.ErrNoCompiler)
	assert.ErrorContains(t, err, "apt-get install -y gcc")
}

func TestLibraryAndControl(t *testing.T) {
	src, err := fakecuda.Source()
	require.NoError(t, err)
	assert.FileExists(t, src)
	lib, err := fakecuda.Library()
	require.NoError(t, err, "gcc builds the fake driver")
	again, err := fakecuda.Library()
	require.NoError(t, err)
	assert.Equal(t, lib, again, "built once per process")

	ctl, err := fakecuda.Open(lib)
	require.NoError(t, err)
	ctl.Reset()
	t.Cleanup(ctl.Reset)
	assert.Error(t, ctl.SetDevices(0), "1..16 devices")
	assert.Error(t, ctl.SetDevices(17))
	assert.Error(t, ctl.SetBus(0, 0x100))
	assert.Error(t, ctl.FailCopy(0, 0))
	assert.Error(t, ctl.Sticky(-1, 719))
	assert.Error(t, ctl.Lose(0, 0), "a loss needs an error code")
	_, err = ctl.Step(0, 1, 0, 0)
	assert.Error(t, err, "not a stream")
	assert.Equal(t, -1, ctl.Pending(0))
	assert.False(t, ctl.WaitIdle(0, time.Millisecond))
	assert.Zero(t, ctl.Counter(fakecuda.Queries), "reset")

	_, err = fakecuda.Open("libc.so.6")
	assert.ErrorContains(t, err, "no symbol fakecuda_ctl")
}
