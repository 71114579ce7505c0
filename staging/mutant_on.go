//go:build kvready_mutants

package staging

import "os"

// mutant reports whether the one safety guard this test binary breaks,
// named by KVREADY_MUTANT, is name. Only builds with the kvready_mutants tag
// (make mutants) contain this file.
func mutant(name string) bool { return name == os.Getenv("KVREADY_MUTANT") }
