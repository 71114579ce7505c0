package conformance

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// childEnv, when set, makes this test binary run one check named by its
// value instead of the tests, and print the check's report: the late-writer
// tests run it so, in a process of their own, because under -race the late
// write is also a data race, which fails the whole test binary that sees it.
const childEnv = "KVREADY_CONFORMANCE_CHILD"

// childFailDir is where the child keeps rapid's failure file.
const childFailDir = "KVREADY_CONFORMANCE_FAILDIR"

func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(childEnv); ok {
		flag.Parse()
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// runChild runs the check spec names — "late-writer:DURATION" or
// "well-behaved" (the same backend without the late write) — and prints
// "PASSED" or its report.
func runChild(spec string) int {
	kind, arg, _ := strings.Cut(spec, ":")
	var lateBy time.Duration
	switch kind {
	case "late-writer":
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			fmt.Printf("child: %q: want late-writer:DURATION, a positive duration\n", spec)
			return 2
		}
		lateBy = d
	case "well-behaved":
	default:
		fmt.Printf("child: %q: want late-writer:DURATION or well-behaved\n", spec)
		return 2
	}
	err := Run("TestLateWriter", func(tb TB) {
		CheckFetcher(tb, thirdPartyFetcher(lateBy, nil), FailFiles(os.Getenv(childFailDir)))
	})
	if err != nil {
		fmt.Println(err)
		return 0
	}
	fmt.Println("PASSED")
	return 0
}
