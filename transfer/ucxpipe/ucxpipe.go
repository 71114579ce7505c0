// Package ucxpipe is how two processes that hold each other's pipes meet
// over UCX (transfer/ucx): the one started prints its worker address and its
// capabilities on its stdout, the starter hands it its own on its stdin, and
// each opens its endpoint to the other before any offer can come. No
// listener and no port: a second pair beside the first shares nothing with
// it (docs/ucx.md, "How peers find each other"). kvready simulate --disagg
// --transport ucx and internal/peerucx's tests use it.
package ucxpipe

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
)

// Announce prints tr's address and caps as the lines "addr HEX" and
// "caps HEX".
func Announce(out io.Writer, tr *ucx.Transport, caps transfer.Capabilities) error {
	b, err := transfer.AppendCapabilities(nil, caps)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "addr %x\ncaps %x\n", tr.Address(), b)
	return err
}

// Join learns the other process from its address and capabilities, as
// hex, opens tr's endpoint to it — a worker hears a message only on an
// endpoint it opened (docs/ucx.md), so it is opened before any can come —
// and then hands its capabilities to agree (a Sender's or a Receiver's
// Connect). Input that does not decode changes nothing.
func Join(tr *ucx.Transport, addrHex, capsHex string, agree func(transfer.Capabilities) error) error {
	addr, err1 := hex.DecodeString(addrHex)
	b, err2 := hex.DecodeString(capsHex)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("ucxpipe: %w; an address and capabilities in hex expected", err)
	}
	remote, err := transfer.DecodeCapabilities(b)
	if err != nil {
		return err
	}
	if _, _, err := tr.AddPeer(addr); err != nil {
		return err
	}
	if _, err := tr.Connect(remote.Peer); err != nil {
		return err
	}
	return agree(remote)
}

// Serve is the started process's loop: each line of in (a command) goes to
// do, and while none is waiting step runs (the process's progress; it
// should yield the machine when it had nothing to do). It returns when in
// ends.
func Serve(in io.Reader, do func(line string), step func()) {
	lines := Lines(in)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return
			}
			do(line)
		default:
			step()
		}
	}
}

// Lines reads in line by line (up to 1 MiB a line) on a goroutine of its
// own, and closes the channel when in ends.
func Lines(in io.Reader) <-chan string {
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}
