//go:build !kvready_mutants

package main

// mutantNames is empty in a normal build: the engine's guards cannot be broken
// there, so there is nothing to run.
func mutantNames() []string { return nil }
