// Command cabi is kvready's C ABI: `make lib` builds it with
// `go build -buildmode=c-shared` into bin/libkvready.so, and kvready.h beside
// it (this directory's kvready.h, which every exported function's prototype is
// compiled against) says what each function does.
//
// Everything crosses the boundary as integers, C memory or plain structs:
// objects (engines, staging memories, backends, devices) are named by handles
// from one table, leases by core.Handle.Uint64, and no Go pointer is ever
// handed to C to keep — C is passed pointers into Go memory only as call
// arguments (cgo's rules; the tests run with GODEBUG=cgocheck=1). Every
// exported function returns a status; a panic is recovered into
// KVREADY_ERR_INTERNAL, and a bad handle of any kind is a status, never a
// crash. The last error's message is kept per object handle, and per calling
// thread for calls without one.
//
// Threading follows the engine's: one owner thread calls every function that
// takes an engine handle. The engine wakes its owner through an eventfd that a
// goroutine writes whenever readiness.Engine.Wake fires. Backends and devices
// the embedder writes are called through C function pointers, on the threads
// kvready.h names for each callback (Quiesce on worker threads, where it may
// block; polls and event queries on any thread; submissions and copies on the
// owner's).
package main

import "C"

func main() {}
