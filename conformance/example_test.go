package conformance_test

import (
	"fmt"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/conformance"
)

// A backend author runs the kit from a test of their own package: build the
// backend over the kit's staging memory, give the kit a way to seed the store
// (a fetch needs something to find) and to end the backend. In a test file
// that is
//
//	func TestConformance(t *testing.T) { check(t) }
//
// Here conformance.Run stands in for the test, so that the example runs.
func ExampleCheckFetcher() {
	check := func(t conformance.TB) {
		conformance.CheckFetcher(t, func(m conformance.Memory) (conformance.FetchSubject, error) {
			b, err := mem.New(m)
			if err != nil {
				return conformance.FetchSubject{}, err
			}
			return conformance.FetchSubject{Fetcher: b, Put: b.Put, Close: b.Close}, nil
		})
		conformance.CheckPublisher(t, func(m conformance.Memory) (conformance.PublishSubject, error) {
			b, err := mem.New(m)
			if err != nil {
				return conformance.PublishSubject{}, err
			}
			return conformance.PublishSubject{Publisher: b, Get: b.Get, Close: b.Close}, nil
		})
	}
	if err := conformance.Run("ExampleCheckFetcher", check); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("backend/mem conforms")
	// Output: backend/mem conforms
}
