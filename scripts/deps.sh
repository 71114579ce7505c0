#!/usr/bin/env bash
# The system packages the tests need beyond Go and gcc:
#   redis-server (with redis-cli): backend/redis's tests, and the Python example,
#       start real servers;
#   python3, python3-pytest, python3-numpy: the pytest suite of the Python package
#       (python/tests), run through Debian's interpreter (/usr/bin/python3);
#   python3-build, python3-setuptools, python3-wheel: `make python` builds the wheel
#       offline (no isolation: the build backend comes from Debian too);
#   prometheus: for its promtool, which `make alert-rules` runs on docs/alert-rules.yml
#       (only the tool is used; no server is started);
#   libucx-dev: UCX's headers and libraries, which package transfer/ucx is built against
#       with cgo (go build ./... and go vet ./... need them; libkvready.so links libucp,
#       so a process loading it needs libucx0, which libucx-dev pulls in);
#   ucx-utils: ucx_info, which transfer/ucx's tests read to find the shared-memory
#       transports (and ucx_perftest, UCX's own benchmark).
# On Debian as root, install what is missing; otherwise stop at once, naming the
# command. A test never skips because a part is missing.
set -euo pipefail

missing=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  missing+=(redis-server) # Debian's redis-server depends on redis-tools (redis-cli)
fi
command -v promtool >/dev/null 2>&1 || missing+=(prometheus) # Debian ships promtool in it
[ -e /usr/include/ucp/api/ucp.h ] || missing+=(libucx-dev) # cgo: transfer/ucx
command -v ucx_info >/dev/null 2>&1 || missing+=(ucx-utils)
py=/usr/bin/python3
if [ ! -x "$py" ]; then
  missing+=(python3 python3-pytest python3-numpy python3-build python3-setuptools python3-wheel)
else
  "$py" -c 'import pytest' >/dev/null 2>&1 || missing+=(python3-pytest)
  "$py" -c 'import numpy' >/dev/null 2>&1 || missing+=(python3-numpy)
  "$py" -c 'import build' >/dev/null 2>&1 || missing+=(python3-build)
  "$py" -c 'import setuptools' >/dev/null 2>&1 || missing+=(python3-setuptools)
  "$py" -c 'import wheel' >/dev/null 2>&1 || missing+=(python3-wheel)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing ${missing[*]} (real servers for the redis tests; pytest for the Python package; promtool for the alert rules; UCX for transfer/ucx)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  exit 0
fi
echo "deps: missing ${missing[*]}: the backend/redis tests start real redis-server processes, and the" >&2
echo "Python package's tests run under Debian's python3 with pytest and numpy, and make alert-rules" >&2
echo "runs promtool (Debian's prometheus package), and transfer/ucx builds against UCX (libucx-dev) and its" >&2
echo "tests run ucx_info (ucx-utils)." >&2
echo "Install them with:" >&2
echo "    sudo apt-get install -y ${missing[*]}" >&2
exit 1
