//go:build !linux

package redis_test

import "os/exec"

// setPdeathsig has no portable equivalent off Linux; TestMain and t.Cleanup
// stop the servers.
func setPdeathsig(*exec.Cmd) {}
