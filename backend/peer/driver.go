package peer

import "time"

// driver is the goroutine that calls a Receiver's or Sender's Progress
// every interval until stopped: the runner beside the owner-driven
// Progress, as the engine's runner stands beside its core. Its poll is
// bounded by the interval; it never waits on anything else.
type driver struct {
	quit chan struct{}
	done chan struct{}
}

func startDriver(every time.Duration, progress func()) *driver {
	d := &driver{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-d.quit:
				return
			case <-t.C:
				progress()
			}
		}
	}()
	return d
}

// stop ends the goroutine and waits for it; a nil driver stops at once.
func (d *driver) stop() {
	if d == nil {
		return
	}
	close(d.quit)
	<-d.done
}
