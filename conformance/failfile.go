package conformance

import "github.com/kvready/kvready/internal/kittb"

// wrap returns t as rapid sees it: a failure file rapid writes under the
// package's testdata/rapid/ is moved into the kit's fail directory, and the
// message that names it says where it went.
func (c config) wrap(t TB) TB { return kittb.FailFilesIn(t, c.failDir) }
