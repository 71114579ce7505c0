//go:build kvready_mutants

package main

import "github.com/kvready/kvready/readiness"

func mutantNames() []string { return readiness.Mutants() }
