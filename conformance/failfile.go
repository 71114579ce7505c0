package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// wrap returns t as rapid sees it: a failure file rapid writes under the
// package's testdata/rapid/ is moved into the kit's fail directory, and the
// message that names it says where it went.
func (c config) wrap(t TB) TB {
	if c.failDir == "" {
		return t
	}
	return &failFileTB{TB: t, dir: c.failDir}
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
		return msg + fmt.Sprintf("\n[kvready conformance] could not move the failure file to %s: %v", f.dir, err)
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
