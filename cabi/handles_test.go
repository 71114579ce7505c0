package main

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// lookup reads the table through recent, its lock-free view, and the map
// behind it: whatever handles were issued and freed, and however many share a
// slot of the view, a live handle finds its own object, and a freed one, one
// never issued or one of another kind is refused with BAD_HANDLE.
func TestLookupAgreesWithTheTable(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		type issued struct {
			h    uint64
			k    kind
			obj  any
			live bool
		}
		var all []*issued
		defer func() {
			for _, is := range all {
				if is.live {
					unregister(is.h)
				}
			}
		}()
		for range rapid.IntRange(1, 600).Draw(t, "ops") {
			if len(all) == 0 || rapid.IntRange(0, 2).Draw(t, "op") > 0 {
				k := rapid.SampledFrom([]kind{kindMemory, kindDevice}).Draw(t, "kind")
				var obj any = &memory{}
				if k == kindDevice {
					obj = &device{}
				}
				all = append(all, &issued{h: register(k, obj), k: k, obj: obj, live: true})
			} else if is := rapid.SampledFrom(all).Draw(t, "free"); is.live {
				unregister(is.h)
				is.live = false
			}
		}
		for _, is := range all {
			var got any
			var err error
			if is.k == kindMemory {
				got, err = lookup[*memory](is.h, kindMemory)
				_, wrong := lookup[*device](is.h&^(0xff<<56)|uint64(kindDevice)<<56, kindDevice)
				assert.Error(t, wrong, "handle %#x with the device kind names no device", is.h)
			} else {
				got, err = lookup[*device](is.h, kindDevice)
			}
			if !is.live {
				requireBadHandle(t, err, "freed handle %#x", is.h)
				continue
			}
			require.NoError(t, err, "live handle %#x", is.h)
			assert.Same(t, is.obj, got, "handle %#x finds its own object", is.h)
		}
		_, err := lookup[*memory](uint64(kindMemory)<<56|objects.serial+1, kindMemory)
		requireBadHandle(t, err, "a handle never issued")
	})
}

func requireBadHandle(t require.TestingT, err error, what string, args ...any) {
	var se *statusError
	require.True(t, errors.As(err, &se), append([]any{what + ": want a status error, got %v"}, append(args, err)...)...)
	require.EqualValues(t, 2, se.status, "KVREADY_ERR_BAD_HANDLE")
}

// Threads look handles up while others register and free them (SPEC §4 rule
// 18): under -race, the view and the map are never read unguarded, and a
// handle held live throughout is found every time.
func TestLookupWhileTheTableChanges(t *testing.T) {
	keep := &memory{}
	h := register(kindMemory, keep)
	t.Cleanup(func() { unregister(h) })
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				o := register(kindMemory, &memory{})
				unregister(o)
			}
		}()
	}
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if got, err := lookup[*memory](h, kindMemory); err != nil || got != keep {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	for err := range errs {
		t.Fatalf("a live handle was not found while others came and went: %v", err)
	}
}
