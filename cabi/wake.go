package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// wakeFD is the engine's pollable file descriptor: an eventfd where the
// system has one, a non-blocking pipe elsewhere. signal makes it readable;
// drain makes it unreadable again.
type wakeFD struct {
	r, w int
}

func openWake() (wakeFD, error) {
	if fd, err := eventfd(); err == nil {
		return wakeFD{r: fd, w: fd}, nil
	}
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		return wakeFD{}, fmt.Errorf("kvready: creating the wake file descriptor: %w", err)
	}
	for _, fd := range p {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return wakeFD{}, fmt.Errorf("kvready: creating the wake file descriptor: %w", err)
		}
	}
	return wakeFD{r: p[0], w: p[1]}, nil
}

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// signal makes the descriptor readable. A full pipe is readable already.
func (w wakeFD) signal() { _, _ = unix.Write(w.w, one) }

// drain reads everything pending, without blocking.
func (w wakeFD) drain() {
	var buf [64]byte
	for {
		n, err := unix.Read(w.r, buf[:])
		if err != nil || n < len(buf) || w.r == w.w {
			return
		}
	}
}

func (w wakeFD) close() {
	unix.Close(w.r)
	if w.w != w.r {
		unix.Close(w.w)
	}
}
