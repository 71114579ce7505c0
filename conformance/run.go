package conformance

import "github.com/kvready/kvready/internal/kittb"

// Run runs check with a TB of its own that records instead of failing a
// test, and returns nil when the check passed or an error holding everything
// it reported. It lets the kit run outside go test — a CI binary, a runnable
// example — where no *testing.T exists. name is the test name rapid sees.
// In a test, pass the test's own t to CheckFetcher and CheckPublisher instead.
func Run(name string, check func(t TB)) error { return kittb.Run(name, check) }
