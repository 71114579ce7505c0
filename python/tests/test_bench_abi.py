"""python/bench/lifecycle.py, the generator of docs/performance-abi.md's
Python figures, runs and writes SPEC §5 revision 5's goal row (a few turns:
what is checked is the document's shape, never a duration)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
C_RESULTS = {"go_lifecycle_ns_per_lease": 1000.0, "c_lifecycle_ns_per_lease": 1100.0,
             "c_batch_lifecycle_ns_per_lease": 1050.0, "c_bare_call_ns": 50.0, "c_over_go": 1.1,
             "c_batch_over_go": 1.05}


def test_the_generator_writes_the_python_goal_row(tmp_path):
    c = tmp_path / "abi_bench.out"
    c.write_text("".join(f"{k} {v}\n" for k, v in C_RESULTS.items()))
    out = subprocess.run([sys.executable, str(ROOT / "python/bench/lifecycle.py"), "--chunks", "3",
                          "--c-results", str(c)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = out.stdout
    goal = re.search(r"^\| lifecycle driven from Python ÷ the same lifecycle driven in Go inside the library, "
                     r"same run \| (\d+\.\d\d) × \| ≤ 1\.2× \| (yes|no) \|$", doc, flags=re.M)
    assert goal, doc
    assert goal.group(2) == ("yes" if float(goal.group(1)) <= 1.2 else "no")
    assert "÷ one bare call of the binding (SPEC revision 4's figure, ≤ 10× then)" in doc
    assert "| ≤ 10× |" not in doc, "the old figure is in view, no longer a goal"
    for row in ("straight through ctypes, none of the binding's work ÷ driven in Go", "calling thread's CPU time",
                "the binding's own work per lease"):
        assert row in doc, row


def test_the_c_figure_takes_the_median_of_runs_taken_in_turns(tmp_path):
    """make bench-abi runs the C program and the Go program's engine-256 in
    turns, five each: every C figure is the median of its runs, and so is the
    Go program's, never the last run of either."""
    c = tmp_path / "abi_bench.out"
    runs = [dict(C_RESULTS, c_lifecycle_ns_per_lease=v) for v in (3000.0, 1200.0, 1100.0)]
    c.write_text("".join(f"{k} {v}\n" for r in runs for k, v in r.items()))
    go = tmp_path / "abi_go.out"
    go.write_text("".join(f"BenchmarkLifecycle/engine-256-2   \t 1000000\t {ns} ns/op\t 0 B/op\t 0 allocs/op\n"
                          for ns in (900.0, 1000.0, 5000.0)))
    out = subprocess.run([sys.executable, str(ROOT / "python/bench/lifecycle.py"), "--chunks", "3",
                          "--c-results", str(c), "--go-bench", str(go)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # medians: C 1200 ns, the Go program 1000 ns (the last runs, 1100 and 5000, would say 0.22)
    assert ("| lifecycle driven from C (one call per lease) ÷ `BenchmarkLifecycle/engine-256` in a Go program "
            "(1000 ns) | 1.20 × | ≤ 1.5× | yes |") in out.stdout, out.stdout
    assert "| lifecycle per lease, driven from C, one call per lease | 1200 |" in out.stdout, out.stdout
