//go:build !cgo

package cuda

// hotPathCgo is unavailable without cgo: every call goes through purego.
func hotPathCgo(*driver, func(string) uintptr) bool { return false }
