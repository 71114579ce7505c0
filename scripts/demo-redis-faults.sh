#!/usr/bin/env bash
# make demo-redis-faults: a store that dies and pauses costs requests, never
# staging slots. Starts a throwaway redis-server on a free loopback port, runs
# `kvready simulate --backend redis://...` with its defaults for a real store,
# and while it runs:
#   1. a fifth of the way through, kills the server (SIGKILL) and, half a
#      second later, starts a new, empty one on the same port;
#   2. half way through, pauses it (CLIENT PAUSE ... ALL) for three times the
#      request deadline;
# then prints the summary and checks that the run exited 0 (the checker clean,
# every request ended, the pool whole: no lease contained, no slot
# quarantined, nothing refused) and that requests were served again after the
# faults. Every wait is bounded; the server and the run are stopped on
# failure or Ctrl-C too.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

REQUESTS=${REQUESTS:-1000}
ARRIVAL=${ARRIVAL:-5ms}  # 1000 requests over 5 s: the faults land mid-run
PAUSE_MS=${PAUSE_MS:-1500} # three times the 500ms request deadline
RUN_LIMIT=${RUN_LIMIT:-45} # seconds the run may take before the demo gives up

. ./scripts/redis-lib.sh
redis_need demo-redis-faults

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvready-demo-faults.XXXXXX")
sim=
cleanup() {
  if [ -n "$sim" ]; then
    # SIGTERM: the run prints its summary so far and exits; SIGKILL after 10 s.
    kill "$sim" 2>/dev/null || true
    for _ in $(seq 200); do
      kill -0 "$sim" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$sim" 2>/dev/null || true
    wait "$sim" 2>/dev/null || true
  fi
  redis_stop
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "demo-redis-faults: $*" >&2
  exit 1
}

redis_start_free || fail "could not start redis-server"
"$GO" build -o "$dir/kvready" ./cmd/kvready
url="redis://127.0.0.1:$port/0"
flags=(--backend "$url" --redis-prefix "kvready-faults:" --requests "$REQUESTS" --arrival "$ARRIVAL")

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_for LINE: until the run's progress reaches it (bounded by RUN_LIMIT).
wait_for() {
  local until=$(($(now_ms) + RUN_LIMIT * 1000))
  while ! grep -qF "$1" "$dir/progress.txt"; do
    kill -0 "$sim" 2>/dev/null || fail "the run ended before it reached '$1'"
    [ "$(now_ms)" -lt "$until" ] || fail "the run did not reach '$1' within ${RUN_LIMIT}s"
    sleep 0.02
  done
}

echo "--- store: $url (redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), no persistence)"
echo "--- kvready simulate ${flags[*]}"
echo "    (the defaults for a real store: request deadline 500ms, drain grace 2s)"
t0=$(now_ms)
"$dir/kvready" simulate "${flags[@]}" >"$dir/summary.txt" 2>"$dir/progress.txt" &
sim=$!

wait_for "simulate kvready: $((REQUESTS / 5))/$REQUESTS requests"
redis_stop
echo "--- $(($(now_ms) - t0)) ms: redis-server killed (SIGKILL) with requests in flight"
sleep 0.5
redis_start "$port" || fail "could not restart redis-server on port $port"
echo "--- $(($(now_ms) - t0)) ms: a new, empty redis-server on the same port"

wait_for "simulate kvready: $((REQUESTS / 2))/$REQUESTS requests"
timeout 5 redis-cli -h 127.0.0.1 -p "$port" CLIENT PAUSE "$PAUSE_MS" ALL >/dev/null ||
  fail "CLIENT PAUSE did not answer"
echo "--- $(($(now_ms) - t0)) ms: redis-server paused for ${PAUSE_MS} ms (CLIENT PAUSE ... ALL): longer than the deadline"

# The run ends by itself; give up (and say so) after RUN_LIMIT seconds.
until=$(($(now_ms) + RUN_LIMIT * 1000))
while kill -0 "$sim" 2>/dev/null && [ "$(now_ms)" -lt "$until" ]; do
  sleep 0.05
done
if kill -0 "$sim" 2>/dev/null; then
  fail "the run did not end within ${RUN_LIMIT}s"
fi
status=0
wait "$sim" || status=$?
sim=
echo "--- $(($(now_ms) - t0)) ms: the run ended, exit status $status"
echo
cat "$dir/summary.txt"
grep -v '^simulate kvready: ' "$dir/progress.txt" >&2 || true
echo

[ "$status" = 0 ] || fail "kvready simulate exited $status (1: unsafe or unfinished, 3: capacity lost)"
grep -Eq '^  slots quarantined +0 of ' "$dir/summary.txt" || fail "slots were quarantined"
grep -Eq '^  pool +whole' "$dir/summary.txt" || fail "the pool is not whole at the end"
# Served again: the last tenth of the run delivered outcomes (the store
# answered), after the failures the faults caused.
failed=$(awk '/^outcomes over time/ { on = 1; next } on && /^  until / { gsub(",", ""); f += $NF } on && !/^  until / { on = 0 } END { print f + 0 }' "$dir/summary.txt")
last=$(awk '/^outcomes over time/ { on = 1; next } on && /^  until [0-9]/ { gsub(",", ""); d = $(NF - 2) } on && !/^  until / { on = 0 } END { print d + 0 }' "$dir/summary.txt")
[ "$failed" -gt 0 ] || fail "no request failed: the faults did not land mid-run"
[ "$last" -gt 0 ] || fail "no request was served in the last tenth of the run"
echo "the faults failed $failed leases and lost no slot; the last tenth of the run delivered $last outcomes;"
echo "no lease contained, no slot quarantined, the pool whole at the end"
