# Sourced by the demos that run their own redis-server (demo-redis.sh,
# demo-redis-faults.sh): start one on a free loopback port, in a directory of
# the caller's ($dir), with persistence off; restart it on the same port;
# stop it. Every wait is bounded.

redis_pid=

# redis_need: redis-server and redis-cli, installed the way `make test` does
# (scripts/deps.sh, on Debian as root), or stop at once naming the command.
redis_need() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    return 0
  fi
  if [ "${EUID:-1}" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    ./scripts/deps.sh
    return
  fi
  echo "$1: needs redis-server and redis-cli (a throwaway server on a loopback port). Install them with:" >&2
  echo "    sudo apt-get install -y redis-server" >&2
  exit 1
}

# redis_stop: kill the server (SIGKILL) and reap it.
redis_stop() {
  if [ -n "$redis_pid" ]; then
    kill -9 "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=
  fi
}

# redis_ping PORT: true once the server on PORT answers PING (within 2 s).
redis_ping() {
  timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG
}

# redis_start PORT: run redis-server on it and wait until it answers PING;
# fail if it exits first (the port was taken) or does not answer within 10 s.
redis_start() {
  redis-server --port "$1" --bind 127.0.0.1 --dir "$dir" --logfile "$dir/redis.log" \
    --save "" --appendonly no --daemonize no --protected-mode no &
  redis_pid=$!
  for _ in $(seq 200); do
    if redis_ping "$1"; then
      return 0
    fi
    if ! kill -0 "$redis_pid" 2>/dev/null; then
      wait "$redis_pid" 2>/dev/null || true
      redis_pid=
      return 1
    fi
    sleep 0.05
  done
  redis_stop
  return 1
}

# redis_start_free: start a server on a free loopback port, in $port.
redis_start_free() {
  port=
  local candidate
  for _ in 1 2 3 4 5; do
    candidate=$((20000 + RANDOM % 40000))
    if (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
      continue # something listens there
    fi
    if redis_start "$candidate"; then
      port=$candidate
      return 0
    fi
  done
  echo "could not start redis-server on a free loopback port" >&2
  [ -f "$dir/redis.log" ] && tail -20 "$dir/redis.log" >&2
  return 1
}
