// Package readme keeps README.md's embedding program true: its test extracts
// the program from the README, builds it in a fresh module that points at
// this repository, runs it, and compares what it prints with the output the
// README shows. It has no code of its own.
package readme
