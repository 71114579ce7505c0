//go:build race

package redis

import (
	"runtime"
	"unsafe"
)

// raceCopied tells the race detector of a copy it does not see (the tee's
// streamed stores, copy_amd64.s): -race still catches a goroutine touching
// a tee buffer or a staging row beside it.
func raceCopied(dst, src []byte) {
	if len(dst) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
	}
	if len(src) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(src)), len(src))
	}
}
