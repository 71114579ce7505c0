//go:build !linux

package redistest

import "os/exec"

// setPdeathsig has no portable equivalent off Linux; the test's cleanup stops
// the server.
func setPdeathsig(*exec.Cmd) {}
