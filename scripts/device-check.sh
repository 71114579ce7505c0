#!/usr/bin/env bash
# make device-check: the whole CUDA path on a machine with a GPU and its
# driver. Never run on a GPU yet: no GPU has been lent to this project (see
# docs/gpu.md, "Proving it on a GPU"). Steps, each bounded in time:
#   1. gpu/cuda's device tests (-tags cudadevice) against the driver library;
#   2. the engine end to end on gpu/cuda (readiness TestEngineOnCUDA);
#   3. kvready simulate --device cuda --requests 20000, checker on;
#   4. an NVML health read of GPU 0, found by its PCI bus id.
# Prints a summary; exits 1 if any step failed. The whole check is bounded
# by 5 minutes (DEVICE_CHECK_BUDGET seconds). CUDA_LIBRARY chooses the
# driver library (default libcuda.so.1); the first three steps also run on
# the fake driver: CUDA_LIBRARY=bin/libfakecuda.so (make fakecuda).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
lib=${CUDA_LIBRARY:-libcuda.so.1}
export KVREADY_CUDA_LIBRARY=$lib
log=$(mktemp -d "${TMPDIR:-/tmp}/kvready-device-check.XXXXXX")
results=()
failed=0

# step NAME LIMIT CMD...: runs CMD with a time limit, its output to a log
# (shown on failure), and records the result.
# The whole check stays within budget seconds: a step gets at most what is left.
budget=${DEVICE_CHECK_BUDGET:-300}
step() {
  local name=$1 limit=${2%s}
  shift 2
  local left=$((budget - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -le 0 ]; then
    results+=("FAIL  $name (not run: the ${budget}s budget is spent)")
    failed=1
    return
  fi
  limit=${limit}s
  local out="$log/$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_').log" start=$SECONDS status
  echo "device-check: $name ..."
  timeout "$limit" "$@" >"$out" 2>&1
  status=$?
  local took=$((SECONDS - start))
  if [ $status -eq 0 ]; then
    results+=("PASS  $name (${took}s)")
  else
    [ $status -eq 124 ] && echo "device-check: $name: timed out after $limit" >>"$out"
    results+=("FAIL  $name (${took}s, exit $status; log: $out)")
    failed=1
    tail -n 40 "$out" | sed 's/^/    /'
  fi
}

echo "device-check: driver library $lib; logs in $log"
step "build" 90s "$GO" build -o "$log/kvready" ./cmd/kvready
step "gpu/cuda device tests" 60s "$GO" test -count=1 -tags cudadevice -run 'TestDevice' -v ./gpu/cuda/
step "engine end to end on gpu/cuda" 60s "$GO" test -count=1 -run 'TestEngineOnCUDA$' -v ./readiness/
step "simulate --device cuda --requests 20000" 120s "$log/kvready" simulate --device cuda --cuda-library "$lib" --requests 20000
step "NVML health of GPU 0 (by PCI bus id)" 30s "$GO" test -count=1 -tags cudadevice -run 'TestDeviceHealth' -v ./gpu/nvml/

echo
echo "device-check summary ($lib):"
printf '  %s\n' "${results[@]}"
grep -h -E 'recycled before fence|corrupt rows|slots quarantined|NVML (healthy|unknown|lost)' "$log"/*.log 2>/dev/null | sed 's/^/  /'
if [ $failed -ne 0 ]; then
  echo "device-check: FAILED (see docs/gpu.md, \"If the device check fails\")"
  exit 1
fi
echo "device-check: all passed"
