package proptest_test

import (
	"fmt"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/proptest"
)

// A backend author runs the kit from a test of their own package: build the
// backend over the kit's staging memory, give the kit a way to seed the store
// (a fetch needs something to find) and to end the backend. In a test file
// that is
//
//	func TestConformance(t *testing.T) { conformance(t) }
//
// Here proptest.Run stands in for the test, so that the example runs.
func ExampleCheckFetcher() {
	conformance := func(t proptest.TB) {
		proptest.CheckFetcher(t, func(m proptest.Memory) (proptest.FetchSubject, error) {
			b, err := mem.New(m)
			if err != nil {
				return proptest.FetchSubject{}, err
			}
			return proptest.FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
		})
		proptest.CheckPublisher(t, func(m proptest.Memory) (proptest.PublishSubject, error) {
			b, err := mem.New(m)
			if err != nil {
				return proptest.PublishSubject{}, err
			}
			return proptest.PublishSubject{Publisher: b, Get: b.Get, Close: b.Close}, nil
		})
	}
	if err := proptest.Run("ExampleCheckFetcher", conformance); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("backend/mem conforms")
	// Output: backend/mem conforms
}
