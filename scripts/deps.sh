#!/usr/bin/env bash
# The system packages the tests need beyond Go and gcc: redis-server (with
# redis-cli), for backend/redis, whose tests start real servers. On Debian as
# root, install what is missing; otherwise stop at once, naming the command.
set -euo pipefail

missing=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  missing+=(redis-server) # Debian's redis-server depends on redis-tools (redis-cli)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing ${missing[*]} (the backend/redis tests run a real server)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  exit 0
fi
echo "deps: missing ${missing[*]}: the backend/redis tests start real redis-server processes." >&2
echo "Install it with:" >&2
echo "    sudo apt-get install -y ${missing[*]}" >&2
exit 1
