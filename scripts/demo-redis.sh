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

./scripts/deps.sh # redis-server: installed on Debian as root, or the command is named

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvready-demo-redis.XXXXXX")
pid=
stop() {
  if [ -n "$pid" ]; then
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
  fi
}
trap 'stop; rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

# start PORT: run redis-server on it and wait until it answers PING; fail if
# it exits first (the port was taken) or does not answer within 10 s.
start() {
  redis-server --port "$1" --bind 127.0.0.1 --dir "$dir" --logfile "$dir/redis.log" \
    --save "" --appendonly no --daemonize no --protected-mode no &
  pid=$!
  for _ in $(seq 200); do
    if redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
      pid=
      return 1
    fi
    sleep 0.05
  done
  stop
  return 1
}

port=
for _ in 1 2 3 4 5; do
  candidate=$((20000 + RANDOM % 40000))
  if (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
    continue # something listens there
  fi
  if start "$candidate"; then
    port=$candidate
    break
  fi
done
if [ -z "$port" ]; then
  echo "demo-redis: could not start redis-server on a free loopback port" >&2
  [ -f "$dir/redis.log" ] && tail -20 "$dir/redis.log" >&2
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
