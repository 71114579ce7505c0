// Package kittb is what kvready's test kits (conformance, for backends, and
// transfer/transporttest, for transports) share about the test they run in:
// a TB that records instead of failing a test, so a kit can run outside go
// test (a CI binary, a child process, a runnable example), and a TB that
// keeps rapid's failure files out of the testdata/ of the package under
// test. It imports nothing of the module.
package kittb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"pgregory.net/rapid"
)

// TB is what a kit needs of a test: *testing.T has it.
type TB = rapid.TB

// Run runs check with a TB of its own that records instead of failing a
// test, and returns nil when the check passed or an error holding everything
// it reported. name is the test name rapid sees. A skip is a failure here:
// nothing was proven. A panic other than the one FailNow uses to stop the
// check propagates.
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

var errStopped = errors.New("kittb: check stopped by FailNow")

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

// FailFilesIn returns t as rapid should see it: a failure file rapid writes
// under the package's testdata/rapid/ is moved into dir, and the message
// that names it says where it went. An empty dir leaves t as it is.
func FailFilesIn(t TB, dir string) TB {
	if dir == "" {
		return t
	}
	return &failFileTB{TB: t, dir: dir}
}

type failFileTB struct {
	TB
	dir string
	mu  sync.Mutex
}

// Context is the test's context, where the test has one (rapid derives its
// own from it).
func (f *failFileTB) Context() context.Context {
	if c, ok := f.TB.(interface{ Context() context.Context }); ok {
		return c.Context()
	}
	return context.Background()
}

// failFileFlag matches the failure file rapid names in its report.
var failFileFlag = regexp.MustCompile(`-rapid\.failfile=("(?:[^"\\]|\\.)*")`)

func (f *failFileTB) Errorf(format string, args ...any) {
	f.Helper()
	f.TB.Errorf("%s", f.relocate(fmt.Sprintf(format, args...)))
}

func (f *failFileTB) Fatalf(format string, args ...any) {
	f.Helper()
	f.TB.Fatalf("%s", f.relocate(fmt.Sprintf(format, args...)))
}

// relocate moves the failure file msg names, if this process wrote it under
// testdata/rapid/, and rewrites msg to name the new place.
func (f *failFileTB) relocate(msg string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := failFileFlag.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	path, err := strconv.Unquote(msg[m[2]:m[3]])
	if err != nil || !strings.HasPrefix(filepath.ToSlash(path), "testdata/rapid/") ||
		!strings.HasSuffix(path, fmt.Sprintf("-%d.fail", os.Getpid())) {
		return msg // the user's own -rapid.failfile, or not rapid's default place
	}
	dest := filepath.Join(f.dir, filepath.Base(path))
	if err := moveFile(path, dest); err != nil {
		return msg + fmt.Sprintf("\n[kvready kit] could not move the failure file to %s: %v", f.dir, err)
	}
	// Leave the package's testdata as it was: remove what is now empty.
	for dir := filepath.Dir(path); dir != "." && dir != string(filepath.Separator); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return msg[:m[2]] + strconv.Quote(dest) + msg[m[3]:]
}

func moveFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if os.Rename(from, to) == nil {
		return nil
	}
	data, err := os.ReadFile(from) // another file system: copy, then remove
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		return err
	}
	return os.Remove(from)
}
