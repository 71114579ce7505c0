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
