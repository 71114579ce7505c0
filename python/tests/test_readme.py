"""README.md's programs are true: the ``## From Python`` program runs as
written and prints what the README shows, and so does the ``## From C``
program, compiled with cc against bin/kvready.h (as internal/readme does for
the Go one)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fenced(text: str, heading: str, lang: str) -> tuple[str, str]:
    i = text.index(heading)
    start = text.index(f"```{lang}\n", i) + len(lang) + 4
    end = text.index("\n```\n", start)
    return text[start:end + 1], text[end:]


def block(heading: str, lang: str) -> tuple[str, str]:
    readme = (ROOT / "README.md").read_text()
    prog, rest = fenced(readme, heading, lang)
    want, _ = fenced(rest, "It prints:", "text")
    return prog, want


def test_the_python_program_runs_as_written(tmp_path):
    prog, want = block("## From Python", "python")
    (tmp_path / "prog.py").write_text(prog)
    # The production library: the README's program needs nothing of the test library's.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), KVREADY_LIBRARY=str(ROOT / "bin" / "libkvready.so"))
    out = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == want
    assert out.stderr == ""


def test_the_c_program_builds_and_runs_as_written(tmp_path):
    prog, want = block("## From C", "c")
    cc = os.environ.get("CC", "cc")
    assert shutil.which(cc), f"no C compiler ({cc}): sudo apt-get install -y gcc"
    (tmp_path / "embed.c").write_text(prog)
    bin_dir = ROOT / "bin"
    build = subprocess.run([cc, "-Wall", "-Wextra", "-Werror", "-o", "embed", "embed.c", f"-I{bin_dir}", f"-L{bin_dir}",
                            "-lkvready", f"-Wl,-rpath,{bin_dir}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    out = subprocess.run(["./embed"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, GODEBUG="cgocheck=1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout == want


def test_the_wheel_carries_the_library(tmp_path):
    """A wheel from `make python` is self-sufficient: unpacked anywhere, it
    imports without the checkout's bin/, loading libkvready.so; it carries the
    test library too, loaded only when asked (KVREADY_LIBRARY=testkit), for
    kvready.conformance."""
    wheels = sorted((ROOT / "bin").glob("kvready-*.whl"))
    assert wheels, "no wheel in bin/: `make abi-test` builds one with `make python`"
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extractall(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVREADY_LIBRARY")}
    env["PYTHONPATH"] = str(tmp_path)
    code = "import kvready, pathlib; print(kvready.version()); print(pathlib.Path(kvready._abi.lib._name).parent)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "contract revision" in out.stdout
    assert out.stdout.splitlines()[1] == str(tmp_path / "kvready")
    code = "import kvready; print(kvready._abi.path, kvready._abi.testkit)"
    for choice, file, testkit in ((None, "libkvready.so", "False"), ("testkit", "libkvready_testkit.so", "True")):
        run_env = dict(env) if choice is None else dict(env, KVREADY_LIBRARY=choice)
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=run_env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [str(tmp_path / "kvready" / file), testkit]
