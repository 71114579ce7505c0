// Package readme keeps README.md and docs/ true: its tests extract the
// README's embedding program, build it in a fresh module that points at this
// repository, run it, and compare what it prints with the output the README
// shows; check that every markdown table is whole; and check that the Grafana
// dashboard names its units and never draws a rate and a fraction on one
// axis. It has no code of its own.
package readme
