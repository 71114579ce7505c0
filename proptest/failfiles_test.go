package proptest

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A committed rapid failure file goes stale when a generator changes, and
// rapid then reports it "no longer valid" on every run. Reproduce a failure
// with -rapid.failfile, fix it, and keep the case as a table test or a bug-zoo
// script, not as a failure file. Every package's testdata/rapid in the module
// is walked, since every package's rapid properties write there. A file
// written by a test of this very run is that test's report, not a stale
// file: it is left to that test's failure.
func TestNoRapidFailureFilesCommitted(t *testing.T) {
	const root = ".." // the module root: this package's parent
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir // .git and the like hold no package
			}
			return nil
		}
		if !strings.HasSuffix(path, ".fail") || !strings.Contains(filepath.ToSlash(path), "/testdata/rapid/") {
			return nil
		}
		info, err := d.Info()
		if err == nil && info.ModTime().Before(packageStart) {
			rel, _ := filepath.Rel(root, path)
			found = append(found, rel)
		}
		return err
	})
	require.NoError(t, err)
	assert.Empty(t, found, "rapid failure files under a package's testdata/rapid: replay with -rapid.failfile=PATH, fix, then delete them")
}

// packageStart is when this test binary started.
var packageStart = time.Now()
