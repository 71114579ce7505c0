//go:build !linux

package redistest

import "os/exec"

// setPdeathsig has no portable equivalent off Linux; Start's cleanup, or New's
// caller, stops the server.
func setPdeathsig(*exec.Cmd) {}
