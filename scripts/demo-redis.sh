#!/usr/bin/env bash
# make demo-redis: two KV cache managers, one store. Starts a throwaway
# redis-server on a free loopback port (a temporary directory, no
# persistence), runs `kvready simulate --backend redis://...` twice — two
# processes, one after the other, the same workload — prints both summaries,
# checks that the second was served what the first published, and stops the
# server, on failure or Ctrl-C too.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

. ./scripts/redis-lib.sh
redis_need demo-redis # redis-server: installed on Debian as root, or the command is named

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvready-demo-redis.XXXXXX")
trap 'redis_stop; rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

if ! redis_start_free; then
  echo "demo-redis: could not start redis-server" >&2
  exit 1
fi

"$GO" build -o "$dir/kvready" ./cmd/kvready
url="redis://127.0.0.1:$port/0"
# Arrivals paced at 250 µs of real time: a rate one process and the server keep
# up with on a small machine (see docs/simulate.md, "Real time").
flags=(--backend "$url" --arrival 250us)

echo "--- store: $url (redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), no persistence)"
echo "--- first manager: kvready simulate ${flags[*]}  (the store is empty)"
"$dir/kvready" simulate "${flags[@]}" | tee "$dir/first.txt"
echo
echo "--- second manager: a new process, the same workload (--seed 1), the same store"
"$dir/kvready" simulate "${flags[@]}" | tee "$dir/second.txt"
echo

field() { awk -v k="$1" '$0 ~ "^  "k"  " { print $NF; exit }' "$2"; }
hit1=$(awk '/hit ratio \(tokens\)/ { print $NF; exit }' "$dir/first.txt")
hit2=$(awk '/hit ratio \(tokens\)/ { print $NF; exit }' "$dir/second.txt")
echo "first manager:  hit ratio $hit1, served $(field served "$dir/first.txt"), partial $(field partial "$dir/first.txt"), missed $(field missed "$dir/first.txt")"
echo "second manager: hit ratio $hit2, served $(field served "$dir/second.txt"), partial $(field partial "$dir/second.txt"), missed $(field missed "$dir/second.txt")"
if awk -v a="$hit1" -v b="$hit2" 'BEGIN { exit !(b > a) }'; then
  echo "the second process was served what the first one published"
else
  echo "demo-redis: the second process did not hit more than the first" >&2
  exit 1
fi
