"""libkvready.so, the library kvready loads by default, has nothing of the
tests: no conformance kit, no in-library benchmark, no fault backends; asking
for them says which library has them and how to load it. The rest of the suite
runs over the test library (conftest), so these run in a subprocess: one Go
library per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import kvready
from kvready import _abi
from conftest import ROOT


def run_over_production(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), KVREADY_LIBRARY=str(ROOT / "bin" / "libkvready.so"))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_production_library_has_no_test_code():
    out = run_over_production("""
        import kvready
        from kvready import _abi
        assert _abi.path.endswith("/libkvready.so"), _abi.path
        assert not _abi.testkit and _abi.conformance_check is None and _abi.bench_go_lifecycle is None
        mem = kvready.Memory([kvready.Group(4, 64)])
        kvready.open_backend("mem:?capacity=2", mem).close()
        for url in ("instant:", "mem:?mode=miss", "mem:?mode=write-after-quiesce"):
            try:
                kvready.open_backend(url, mem)
            except kvready.UnsupportedError as e:
                assert "libkvready_testkit.so" in str(e) and "KVREADY_LIBRARY=testkit" in str(e), e
            else:
                raise AssertionError(url + " opened in libkvready.so")
        try:
            kvready.conformance.check(lambda memory: None, checks=1)
        except kvready.UnsupportedError as e:
            print(e)
        else:
            raise AssertionError("the kit ran in libkvready.so")
    """)
    assert out.returncode == 0, out.stderr
    message = out.stdout
    assert "libkvready.so, which has no conformance kit" in message
    assert "KVREADY_LIBRARY=testkit" in message and "make lib-testkit" in message


def test_this_suite_runs_over_the_test_library():
    assert _abi.testkit, f"the suite loaded {_abi.path}; conftest chooses the test library"
    assert _abi.path.endswith("libkvready_testkit.so")


@pytest.mark.parametrize("url,want", [
    ("mem:?mode=nonsense", 'mode "nonsense"; want one of'),
    ("mem:?mode=miss&bogus=1", 'unknown parameter "bogus"; want mode, capacity or capacity_bytes'),
    ("mem:?mode=miss&capacity=-1", 'capacity "-1"'),
    ("mem:?mode=flip-outcome&capacity=x", 'capacity "x"'),
])
def test_the_test_library_refuses_bad_fault_urls(url, want):
    mem = kvready.Memory([kvready.Group(4, 64)])
    with pytest.raises(kvready.InvalidArgumentError, match=want):
        kvready.open_backend(url, mem)


def test_the_test_library_opens_every_fault_backend():
    mem = kvready.Memory([kvready.Group(4, 64)])
    for mode in ("miss", "torn-until-quiesce", "write-after-quiesce", "write-unserved", "flip-outcome",
                 "serve-unasked"):
        kvready.open_backend(f"mem:?mode={mode}&capacity=2", mem).close()
    kvready.open_backend("instant:", mem).close()
