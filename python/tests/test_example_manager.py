"""examples/python/manager.py runs against a throwaway redis-server and
resumes request B where the shared store's blocks end."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_example_manager_shares_blocks_over_redis(redis_url):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), GODEBUG="cgocheck=1")
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "manager.py"), "--redis", redis_url],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "manager 1: request A published 5 blocks",
        "manager 2: request B resumes at token 96 of 160 (3 blocks fetched, 2 computed)",
        "manager 2: request C resumes at token 0 (0 fetched, 2 computed: a miss, not an error)",
        "manager 1: drained, slots quarantined 0",
        "manager 2: drained, slots quarantined 0",
    ]
