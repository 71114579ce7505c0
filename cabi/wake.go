package main

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// wakeFD is the engine's pollable file descriptor: an eventfd where the
// system has one, a non-blocking pipe elsewhere. signal makes it readable;
// drain makes it unreadable again. armed says whether it is readable, so
// that neither costs a system call when there is nothing to do: an owner
// running rounds back to back would otherwise pay a write and a read for
// every wake-up the engine raises.
type wakeFD struct {
	r, w   int
	mu     sync.Mutex
	armed  bool // a signal was written and not yet drained
	closed bool // the descriptors are closed: their numbers may be reused
}

func openWake() (*wakeFD, error) {
	if fd, err := eventfd(); err == nil {
		return &wakeFD{r: fd, w: fd}, nil
	}
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		return nil, fmt.Errorf("kvready: creating the wake file descriptor: %w", err)
	}
	for _, fd := range p {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return nil, fmt.Errorf("kvready: creating the wake file descriptor: %w", err)
		}
	}
	return &wakeFD{r: p[0], w: p[1]}, nil
}

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// signal makes the descriptor readable. A full pipe is readable already. It
// is the engine's OnWake, so any goroutine may call it, also after close.
func (w *wakeFD) signal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed && !w.closed {
		_, _ = unix.Write(w.w, one)
		w.armed = true
	}
}

// drain reads everything pending, without blocking.
func (w *wakeFD) drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.closed {
		return
	}
	w.armed = false
	var buf [64]byte
	for {
		n, err := unix.Read(w.r, buf[:])
		if err != nil || n < len(buf) || w.r == w.w {
			return
		}
	}
}

func (w *wakeFD) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	unix.Close(w.r)
	if w.w != w.r {
		unix.Close(w.w)
	}
}
