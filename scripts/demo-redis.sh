#!/usr/bin/env bash
# make demo-redis: two KV cache managers, each with its own local tier, over
# one shared store. Starts a throwaway redis-server on a free loopback port (a
# temporary directory, no persistence), runs
# `kvready simulate --backend mem?capacity=256KiB,redis://...` twice — two
# processes, one after the other, the same workload, each with its own
# in-process tier in front of the server — prints both summaries and each
# tier's hits, checks that the second manager was served what the first
# published (by Redis at first, each row promoted into its local tier, then by
# its local tier once warm), and stops the server, on failure or Ctrl-C too.
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
# up with on a small machine (see docs/simulate.md, "Real time"). Every prompt
# starts with one of 64 shared prefixes (--share 1 --families 64) of up to 4
# blocks, so a manager fetches the same rows again and again: what a local
# tier is for. 256KiB holds 4096 rows of the run's 16000: the tier evicts.
backend="mem?capacity=256KiB,$url"
flags=(--backend "$backend" --arrival 250us --share 1 --families 64 --blocks 4)
# Each run is bounded (its own stall detection stops it sooner).
run_limit=300

echo "--- store: $url (redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), no persistence)"
echo "--- first manager: kvready simulate ${flags[*]}  (the store is empty)"
timeout "$run_limit" "$dir/kvready" simulate "${flags[@]}" | tee "$dir/first.txt"
echo
echo "--- second manager: a new process, its local tier empty, the same workload (--seed 1), the same store"
timeout "$run_limit" "$dir/kvready" simulate "${flags[@]}" | tee "$dir/second.txt"
echo

# hits TIER FILE: the rows tier TIER served ("  tier 0 mem  hits 9450 of ...").
hits() { awk -v t="$1" '$1 == "tier" && $2 == t { for (i = 3; i < NF; i++) if ($i == "hits") { print $(i + 1); exit } }' "$2"; }
# promoted FILE: the rows promoted into tier 0 ("    written  0 through (0 failed), 6550 promoted in ...").
promoted() { awk '$1 == "tier" && $2 == "0" { t0 = 1; next } t0 && $1 == "written" { for (i = 2; i < NF; i++) if ($i == "promoted") { print $(i - 1); exit } }' "$1"; }
# interval first|last FILE: "LOCAL SHARED", the rows each tier served in the
# first or the last tenth of the run ("  until 53.87ms  delivered 135, failed 0; tier hits mem 306, redis 794").
interval() {
  awk -v which="$1" '/^  until [0-9]/ && /tier hits/ {
      l = ""; s = ""
      for (i = 1; i < NF; i++) { if ($i == "mem") { l = $(i + 1); sub(",", "", l) } if ($i == "redis") s = $(i + 1) }
      if (which == "first") { print l, s; exit }
      last = l " " s
    }
    END { if (which == "last") print last }' "$2"
}
ratio() { awk '/hit ratio \(tokens\)/ { print $NF; exit }' "$1"; }

for f in first second; do
  printf '%-15s hit ratio %s; hits: local tier (mem) %s, redis %s; promoted into the local tier %s\n' \
    "$f manager:" "$(ratio "$dir/$f.txt")" "$(hits 0 "$dir/$f.txt")" "$(hits 1 "$dir/$f.txt")" "$(promoted "$dir/$f.txt")"
done
read -r first_local first_shared <<<"$(interval first "$dir/second.txt")"
read -r last_local last_shared <<<"$(interval last "$dir/second.txt")"
echo "second manager, first tenth of its run: local tier $first_local, redis $first_shared; last tenth: local tier $last_local, redis $last_shared"

fail() {
  echo "demo-redis: $*" >&2
  exit 1
}
for v in "$first_local" "$first_shared" "$last_local" "$last_shared" "$(hits 1 "$dir/second.txt")" "$(promoted "$dir/second.txt")"; do
  [[ "$v" =~ ^[0-9]+$ ]] || fail "could not read the tiers' hits from the second summary (got '$v')"
done
awk -v a="$(ratio "$dir/first.txt")" -v b="$(ratio "$dir/second.txt")" 'BEGIN { exit !(b > a) }' ||
  fail "the second process did not hit more than the first"
(($(hits 1 "$dir/second.txt") > 0)) || fail "Redis served the second manager nothing"
(($(promoted "$dir/second.txt") > 0)) || fail "nothing Redis served was promoted into the second manager's local tier"
((last_local > last_shared)) || fail "once warm, the second manager's local tier served $last_local rows and Redis $last_shared; want most from the local tier"
awk -v fl="$first_local" -v fs="$first_shared" -v ll="$last_local" -v ls="$last_shared" \
  'BEGIN { exit !(fl + fs > 0 && ll + ls > 0 && fl / (fl + fs) < ll / (ll + ls)) }' ||
  fail "the local tier's share of the second manager's hits did not grow as it warmed"
echo "the second manager was served by Redis at first, promoted those rows into its own local tier, and once warm most of its hits came from it"
