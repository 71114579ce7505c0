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
// script, not as a failure file. A file written by a test of this very run
// is that test's report, not a stale file: it is left to that test's failure.
func TestNoRapidFailureFilesCommitted(t *testing.T) {
	var found []string
	err := filepath.WalkDir("testdata", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(path, ".fail") {
			return err
		}
		info, err := d.Info()
		if err == nil && info.ModTime().Before(packageStart) {
			found = append(found, path)
		}
		return err
	})
	require.NoError(t, err)
	assert.Empty(t, found, "rapid failure files under proptest/testdata: replay with -rapid.failfile=PATH, fix, then delete them")
}

// packageStart is when this test binary started.
var packageStart = time.Now()
