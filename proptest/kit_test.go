package proptest

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/conformance"
)

// The deprecated names forward to package conformance: a check through them
// passes a correct backend and reports a broken one under the same rule.
func TestKitForwardsToConformance(t *testing.T) {
	fetcher := func(mode mem.Mode) NewFetcher {
		return func(m Memory) (FetchSubject, error) {
			b, err := mem.New(m, mem.WithMode(mode))
			if err != nil {
				return FetchSubject{}, err
			}
			return FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
		}
	}
	require.NoError(t, Run("forwarded", func(tb TB) { CheckFetcher(tb, fetcher(mem.Normal), Wait(time.Second)) }))
	err := Run("forwarded-broken", func(tb TB) {
		CheckFetcher(tb, fetcher(mem.WriteAfterQuiesce), FailFiles(t.TempDir()))
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), RuleNoLateWrite)
	assert.Equal(t, conformance.RuleNoLateWrite, RuleNoLateWrite)
	assert.Equal(t, conformance.DefaultFailDir(), DefaultFailDir())
	var v *Violation
	assert.False(t, errors.As(err, &v), "Run reports text, not the violation value")
	publisher := func(m Memory) (PublishSubject, error) {
		b, err := mem.New(m)
		if err != nil {
			return PublishSubject{}, err
		}
		return PublishSubject{Publisher: b, Get: b.Get, Close: b.Close}, nil
	}
	require.NoError(t, Run("forwarded-publish", func(tb TB) { CheckPublisher(tb, publisher, MayFail()) }))
}

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
