"""SPEC §5's Python figure, measured side by side in one run: a whole one-row
fetch lifecycle driven from Python through kvready's binding, amortised over
rounds of 64 leases (one lend_many, rounds until complete, one
release_many), against one bare call of the same binding into the same
library (``kvready_abi_version`` through ctypes). With ``--c-results`` it
also takes the C benchmark's figures (cabi/testdata/bench.c) and writes
docs/performance-abi.md to stdout. Run by ``make bench-abi``, over the test
library (KVREADY_LIBRARY=testkit or its path: the ``instant:`` backend and
``kvready_bench_go_lifecycle`` are only there)."""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import select
import pathlib
import platform
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import kvready  # noqa: E402
from kvready import _abi  # noqa: E402

if not _abi.testkit:
    sys.exit(f"lifecycle.py: {_abi.path} is libkvready.so; the benchmark needs the test library: "
             "KVREADY_LIBRARY=testkit (or the path of libkvready_testkit.so, make lib-testkit)")

LEASES = 64
REPS = 5


def lifecycle(rounds: int) -> tuple[float, float]:
    """ns per lease over rounds of 64 one-row fetches: driven from Python,
    and the same lifecycle driven in Go on the same engine."""
    mem = kvready.Memory([kvready.Group(LEASES, 64)])
    store = kvready.open_backend("instant:", mem)
    dev = kvready.SimDevice(1 << 16, latency=1e-9)  # copies land by the time they are queried
    eng = kvready.Engine(mem, 32, backend=store, device=dev, request_timeout=3600, drain_grace=3600)
    ptr = dev.alloc(64)
    batch = kvready.RequestBatch([kvready.Request.fetch([kvready.Row(bytes([k]) + bytes(52) + b"\x5a", 0, 0, ptr)])
                                  for k in range(LEASES)])
    done_state = kvready.State.LOGICALLY_COMPLETE

    def one_round():
        leases = eng.lend_many(batch)
        while eng.count(done_state) < LEASES:
            dev.complete_all()
            if eng.progress().moves == 0:
                # Nothing to do until the engine's goroutines answer: wait on
                # the wake descriptor, as a manager's event loop does.
                select.select([eng], [], [], 1.0)
        eng.release_many(leases)

    for _ in range(50):
        one_round()
    t0 = time.perf_counter_ns()
    for _ in range(rounds):
        one_round()
    ns = (time.perf_counter_ns() - t0) / (rounds * LEASES)
    go = ctypes.c_int64()
    _abi.check(_abi.bench_go_lifecycle(eng.handle, dev.handle, batch._arr, LEASES, rounds * LEASES, ctypes.byref(go)), eng.handle)
    eng.shutdown(60)
    eng.free()
    store.close()
    dev.close()
    mem.close()
    return ns, go.value / (rounds * LEASES)


def bare_call(calls: int) -> float:
    """ns per bare call of the binding into the library."""
    f = _abi.abi_version
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        f()
    return (time.perf_counter_ns() - t0) / calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--c-results", help="the C benchmark's output (bin/abi_bench.out)")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--go-bench", help="make bench's output (bench.out): BenchmarkLifecycle/engine-256 in a Go program")
    args = ap.parse_args()
    life, golife, bare = [], [], []
    for _ in range(REPS):  # alternated, so that all see the same machine
        py, go = lifecycle(args.rounds)
        life.append(py)
        golife.append(go)
        bare.append(bare_call(200_000))
    py_life, py_go, py_bare = statistics.median(life), statistics.median(golife), statistics.median(bare)
    ratio = py_life / py_bare
    own = max(py_life - py_go, 0) / py_bare
    if not args.c_results:
        print(f"python_lifecycle_ns_per_lease {py_life:.1f}\ngo_lifecycle_ns_per_lease {py_go:.1f}\n"
              f"python_bare_call_ns {py_bare:.1f}\npython_over_bare {ratio:.2f}\npython_own_over_bare {own:.2f}")
        return 0
    ok = lambda met: "yes" if met else "no"  # noqa: E731
    c = {}
    for line in pathlib.Path(args.c_results).read_text().splitlines():
        k, _, v = line.partition(" ")
        c[k] = float(v)
    # SPEC §5 compares the C-driven lifecycle with the same lifecycle in a Go
    # program: BenchmarkLifecycle/engine-256, the median of make bench's runs.
    go_prog = None
    if args.go_bench and pathlib.Path(args.go_bench).exists():
        runs = []
        for line in pathlib.Path(args.go_bench).read_text().splitlines():
            f = line.split()
            if f and f[0].startswith("BenchmarkLifecycle/engine-256-") and "ns/op" in f:
                runs.append(float(f[f.index("ns/op") - 1]))
        go_prog = statistics.median(runs) if runs else None
    prog_rows = ""
    if go_prog:
        cp, cbp = c["c_lifecycle_ns_per_lease"] / go_prog, c["c_batch_lifecycle_ns_per_lease"] / go_prog
        prog_rows = (f"| lifecycle driven from C (one call per lease) ÷ `BenchmarkLifecycle/engine-256` in a Go program "
                     f"({go_prog:.0f} ns) | {cp:.2f} × | ≤ 1.5× | {ok(cp <= 1.5)} |\n"
                     f"| lifecycle driven from C (batched) ÷ `BenchmarkLifecycle/engine-256` in a Go program | {cbp:.2f} × | ≤ 1.5× | {ok(cbp <= 1.5)} |\n")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"""# Performance through the C ABI

Generated by `make bench-abi` (do not edit by hand): `cabi/testdata/bench.c` and
`python/bench/lifecycle.py`, each measuring its figures side by side in one run, alternating
them {REPS} times and taking the medians. The lifecycle is `BenchmarkLifecycle`'s: a whole
one-row fetch (lend, grant, submit, outcome, access proof, copy, release) with a backend that
answers at once and answers its access proof on the owner thread (`instant:`) and a simulated
device whose copies land by the time they are queried, in rounds of 64 leases. Ratios mean more than absolute times; on a shared machine the absolute times swing
with its load.

- date: {now}
- machine: {platform.system().lower()}/{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}
- Python: {platform.python_version()} (ctypes)

## SPEC §5 figures

| figure | measured | goal | met |
| --- | --- | --- | --- |
{prog_rows}| in view: lifecycle driven from C (one call per lease) ÷ the same lifecycle driven in Go inside the library | {c['c_over_go']:.2f} × | — | — |
| in view: lifecycle driven from C (`kvready_lend_many`/`_release_many`) ÷ driven in Go inside the library | {c['c_batch_over_go']:.2f} × | — | — |
| lifecycle driven from Python, per lease over rounds of 64 ÷ one bare call of the binding | {ratio:.1f} × | ≤ 10× | {ok(ratio <= 10)} |
| in view: what Python adds per lease (Python lifecycle − the same in Go, same run) ÷ one bare call | {own:.1f} × | — | — |
| in view: the lifecycle driven in Go, in the Python run, ÷ one bare call of the binding | {py_go / py_bare:.1f} × | — | — |

## Measured

| what | ns |
| --- | --- |
| lifecycle per lease, driven in Go inside the library (`kvready_bench_go_lifecycle`) | {c['go_lifecycle_ns_per_lease']:.0f} |
| lifecycle per lease, driven from C, one call per lease | {c['c_lifecycle_ns_per_lease']:.0f} |
| lifecycle per lease, driven from C, batched | {c['c_batch_lifecycle_ns_per_lease']:.0f} |
| one bare call from C (`kvready_abi_version`) | {c['c_bare_call_ns']:.0f} |
| lifecycle per lease, driven from Python (`lend_many`, `progress`, `count`, `release_many`) | {py_life:.0f} |
| lifecycle per lease, driven in Go on the Python run's engine | {py_go:.0f} |
| one bare call from Python through ctypes (`kvready_abi_version`) | {py_bare:.0f} |

Notes: the Go side runs inside the library (the test library, `libkvready_testkit.so`: the
engine code of `libkvready.so` plus this benchmark's export) on the same engine, backend and
device as the C side, so that ratio is what crossing the ABI costs; the SPEC's figure compares the C side with
`BenchmarkLifecycle/engine-256` of the same `make bench` (a Go program, rounds of 256). Between
rounds the Go and C owners yield (`runtime.Gosched`, `sched_yield`); the Python owner waits on
the wake descriptor with `select` when a round moved nothing, as a manager's event loop does
(SPEC rule 13). Since SPEC §4 revision 4 no lifecycle here crosses a goroutine: the backend
answers its proof on the owner thread (`try_quiesce`; `instant:` knows at once), copy events
are queried by the owner, and the engine makes the wake descriptor readable itself
(`readiness.Config.OnWake`), where a forwarding goroutine used to be woken for every wake-up
and a Quiesce worker for every round (3–4.5 µs per lease inside the library then, 40% of it in
the kernel's futex sleeps and wakes). What remains between the library and a Go program is
rounds of 64 against 256 (a round's fixed costs over fewer leases), the change tracking and
event queues the C engine keeps for its owner, and a cgo call per C call. The "in view" rows
separate what the Python binding adds from what the engine costs in the same run.""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
