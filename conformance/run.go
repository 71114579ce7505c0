package conformance

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Run runs check with a TB of its own that records instead of failing a
// test, and returns nil when the check passed or an error holding everything
// it reported. It lets the kit run outside go test — a CI binary, a runnable
// example — where no *testing.T exists. name is the test name rapid sees.
// In a test, pass the test's own t to CheckFetcher and CheckPublisher instead.
func Run(name string, check func(t TB)) (err error) {
	r := &recorder{name: name}
	defer func() {
		if p := recover(); p != nil && p != errStopped {
			panic(p)
		}
		if r.Failed() {
			err = fmt.Errorf("%s failed:\n%s", name, r.output())
		}
	}()
	check(r)
	return nil
}

var errStopped = errors.New("conformance: check stopped by FailNow")

// recorder is Run's TB: it keeps what is reported, and FailNow unwinds to
// Run by panicking with errStopped.
type recorder struct {
	name   string
	mu     sync.Mutex
	failed bool
	out    strings.Builder
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.out, format+"\n", args...)
}

func (r *recorder) Log(args ...any)                   { r.Logf("%s", fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) { r.Fail(); r.Logf(format, args...) }
func (r *recorder) Error(args ...any)                 { r.Fail(); r.Log(args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }

// A skipped check is a failed one here: nothing was proven.
func (r *recorder) Skipf(format string, args ...any) { r.Fatalf("skipped: "+format, args...) }
func (r *recorder) Skip(args ...any)                 { r.Fatal(append([]any{"skipped: "}, args...)...) }
func (r *recorder) SkipNow()                         { r.Fatal("skipped") }
func (r *recorder) FailNow()                         { r.Fail(); panic(errStopped) }

func (r *recorder) Fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}
