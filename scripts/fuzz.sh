#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each. go test can fuzz only
# one target in one package at a time, so the targets are listed first.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
found=0
for pkg in $($GO list ./...); do
  for target in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    found=$((found + 1))
    echo "== $pkg $target ($FUZZTIME)"
    $GO test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg"
  done
done
echo "fuzzed $found target(s)"
[ "$found" -gt 0 ]
