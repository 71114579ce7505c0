"""examples/python/disagg_connector.py, a connector of vLLM's shape moving
pages from a prefill process to a decode process over UCX tcp through
kvready's transfer leases, runs over the production library: every layer
the decode reads is what the prefill computed (after the prefill reused its
device pages), and both sides' staging slots settle."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_disagg_example_moves_the_pages_and_settles_the_slots():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), GODEBUG="cgocheck=1",
               KVREADY_LIBRARY=str(ROOT / "bin" / "libkvready.so"))
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "disagg_connector.py")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    saved = "4 layers, device pages reused after wait_for_save, 3 staging slots held until the sender's puts completed"
    assert out.stdout.splitlines() == [
        "decode: connected to the prefill process over UCX tcp; 4 layers, 3 pages per request",
        *[line for r in (1, 2, 3) for line in (
            f"request {r}: 4 layers loaded, 6144 bytes equal to what prefill computed (DELIVERED, token_end 48)",
            f"saved {r}: {saved}")],
        "prefill: 3 sent, 9 puts, 0 in flight; slots free 6/6, quarantined 0",
        "decode: 3 received, 3 fenced by revocation, 0 in doubt; slots free 6/6, quarantined 0",
    ]
