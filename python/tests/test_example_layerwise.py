"""examples/python/layerwise.py, a connector loading layer by layer as
vLLM's does, runs over the production library: each layer it reads is
what request A saved, and every lease drains."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_layerwise_example_reads_each_layer_as_saved():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), GODEBUG="cgocheck=1",
               KVREADY_LIBRARY=str(ROOT / "bin" / "libkvready.so"))
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "layerwise.py"), "--timing"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # The timing line is the system clock's: its shape is checked, never its numbers.
    timing = [l for l in lines if l.startswith("time to last layer computed:")]
    assert len(timing) == 1 and re.fullmatch(
        r"time to last layer computed: layer by layer [\d.]+ ms \(T \+ \(L-1\)·max\(T, C\) \+ C = 14\.0 ms\), "
        r"whole lease [\d.]+ ms \(L·T \+ L·C = 20\.0 ms\), on the system clock", timing[0]), timing
    assert [l for l in lines if l not in timing] == [
        "engine: 4 layers of 4 blocks, 512 bytes per layer per block",
        "request A: computed and saved 4 layers, layer by layer: 4 blocks published (SERVED)",
        *[f"request B: layer {l} loaded, 2048 bytes equal to what A saved; computing it" for l in range(4)],
        "request B: resumes at token 64 of 64",
        "request C: resumes at token 64 of 64",
        "engine: drained, slots quarantined 0",
    ]
