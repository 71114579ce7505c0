#!/usr/bin/env bash
# What a store that is down costs a run (docs/backend-redis.md, "When the store
# is down"), measured side by side in one invocation, each run against a fresh
# throwaway redis-server:
#   healthy  kvready simulate --requests $REQUESTS, the store up throughout;
#   dead     the same, the store killed (SIGKILL) 1 s in and never restarted;
#   hung     --requests $HUNG_REQUESTS --arrival 5ms, the store stopped (SIGSTOP)
#            1.5 s in and continued (SIGCONT) $STOP_S s later.
# For each it prints the run's own wall time (from its start to its exit, the
# script's sleeps not included), its exit status, and from its --json summary the
# leases failed fast and their median time to learn it, those failed after
# waiting, the time the store was unavailable and the slots quarantined; then
# the dead run's wall time over the healthy one's (the goal: at most 2x).
#   KVREADY=path/to/kvready scripts/store-down-figures.sh   (default: built here)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
REQUESTS=${REQUESTS:-50000}
HUNG_REQUESTS=${HUNG_REQUESTS:-1000}
STOP_S=${STOP_S:-10}

. ./scripts/redis-lib.sh
redis_need store-down-figures

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvready-store-down.XXXXXX")
trap 'redis_stop; rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
bin=${KVREADY:-}
if [ -z "$bin" ]; then
  "$GO" build -o "$dir/kvready" ./cmd/kvready
  bin=$dir/kvready
fi

now_ns() { date +%s%N; }

# one NAME FAULT FLAGS...: a run against a fresh server, FAULT applied to it.
one() {
  local name=$1 fault=$2
  shift 2
  redis_start_free || { echo "store-down-figures: could not start redis-server" >&2; exit 1; }
  local t0 sim
  t0=$(now_ns)
  ( "$bin" simulate --backend "redis://127.0.0.1:$port/0" --json "$@" >"$dir/$name.json" 2>"$dir/$name.err"
    echo $? >"$dir/$name.rc"; now_ns >"$dir/$name.end" ) &
  sim=$!
  case $fault in
  kill) sleep 1; redis_stop ;;
  stop) sleep 1.5; kill -STOP "$redis_pid"; sleep "$STOP_S"; kill -CONT "$redis_pid" ;;
  esac
  wait "$sim"
  redis_stop
  local wall_ms=$((($(cat "$dir/$name.end") - t0) / 1000000))
  echo "$wall_ms" >"$dir/$name.wall"
  python3 - "$name" "$wall_ms" "$(cat "$dir/$name.rc")" "$dir/$name.json" <<'EOF'
import json, sys
name, wall, rc, path = sys.argv[1:]
s = json.load(open(path))
for k in ("failed_fast", "failed_fast_p50_us", "failed_waiting", "store_unavailable_us"):
    s.setdefault(k, 0)  # a kvready from before the breaker (KVREADY=...) has none of these
print(f"{name:8} wall {int(wall)/1000:7.2f} s  exit {rc}  leases {s['leases']:6}  failed {s['failed']:6}"
      f"  failed fast {s['failed_fast']:6} (median {s['failed_fast_p50_us']/1000:.3f} ms)"
      f"  failed after waiting {s['failed_waiting']:4}  unavailable {s['store_unavailable_us']/1e6:.2f} s"
      f"  slots quarantined {s['slots_quarantined']}")
EOF
  grep '^simulate: store' "$dir/$name.err" | sed 's/^/         /' || true
}

one healthy none --requests "$REQUESTS"
one dead kill --requests "$REQUESTS"
one hung stop --requests "$HUNG_REQUESTS" --arrival 5ms
python3 -c "import sys; h, d = int(sys.argv[1]), int(sys.argv[2]); print(f'dead / healthy wall time: {d / h:.2f}x (goal: at most 2x)')" \
  "$(cat "$dir/healthy.wall")" "$(cat "$dir/dead.wall")"
