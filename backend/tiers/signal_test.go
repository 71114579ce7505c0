package tiers

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A signal fired while waiters make its channel, on other goroutines, wakes
// every one of them: the lock-free firing never misses a channel made at
// the same moment.
func TestSignalWakesEveryWaiterRacingItsFiring(t *testing.T) {
	for round := range 500 {
		var s signal
		var mu sync.Mutex
		var wg sync.WaitGroup
		chans := make([]<-chan struct{}, 4)
		start := make(chan struct{})
		for i := range chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				chans[i] = s.wait(&mu)
			}()
		}
		close(start)
		s.fire(&mu)
		wg.Wait()
		require.True(t, s.isSet())
		for i, ch := range chans {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: waiter %d's channel was never closed", round, i)
			}
		}
	}
}

func TestSignalFiresOnce(t *testing.T) {
	var s signal
	var mu sync.Mutex
	ch := s.wait(&mu)
	select {
	case <-ch:
		t.Fatal("closed before the signal fired")
	default:
	}
	assert.False(t, s.isSet())
	s.fire(&mu)
	s.fire(&mu) // a second firing closes nothing twice (it would panic)
	_, open := <-ch
	assert.False(t, open)
	_, open = <-s.wait(&mu)
	assert.False(t, open, "a wait after the firing answers a closed channel")
}
