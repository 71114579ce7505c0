"""Fixtures of the kvready pytest suite. The suite runs through the real
shared library, the test one (`make lib-testkit`); importing kvready fails, naming the command,
when it is missing — no test is skipped for it."""

from __future__ import annotations

import contextlib

import hashlib
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
# The suite runs over the test library (libkvready_testkit.so: libkvready.so
# plus the conformance kit and the fault backends); the production library is
# checked in subprocesses (test_production_library.py). One library per
# process: it must be chosen before kvready is imported.
os.environ.setdefault("KVREADY_LIBRARY", str(ROOT / "bin" / "libkvready_testkit.so"))

import kvready  # noqa: E402  (after the path is set)

SLOT = 64


def name(i: int, tag: int = 0xA5) -> bytes:
    """A distinct 54-byte unit name."""
    return bytes([tag]) + i.to_bytes(4, "big") + bytes(49)


class Store(kvready.Backend):
    """A Python backend over a dict: every delivery completes inside the
    call (so Quiesce can answer true at once). ``mode`` picks its answer."""

    def __init__(self, memory, mode="normal"):
        super().__init__(memory)
        self.rows: dict[tuple[bytes, bytes], bytes] = {}
        self.mode = mode
        self.lock = threading.Lock()

    def fetch(self, extent):
        if self.mode == "reject":
            raise kvready.SubmissionRejectedError("injected rejection")
        a = kvready.Attempt()
        if self.mode == "fail":
            a.set_outcome(kvready.Failed("injected failure"))
        elif self.mode in ("cancel", "cancel-by-peer"):
            a.set_outcome(kvready.Cancelled(by_peer=self.mode == "cancel-by-peer"))
        else:
            served = set()
            units = extent.units
            if self.mode == "partial":
                units = units[: (len(units) + 1) // 2]
            for u in units:
                row = self.rows.get((extent.name, u.name))
                if row is not None:
                    self.memory.write(u.group, u.local, row)
                    served.add(u.name)
            a.set_outcome(kvready.Delivered(frozenset(served)))
        return a

    def publish(self, extent):
        a = kvready.Attempt()
        for u in extent.units:
            self.rows[(extent.name, u.name)] = self.memory.read(u.group, u.local)
        a.set_outcome(kvready.Delivered(frozenset(u.name for u in extent.units)))
        return a

    def quiesce(self, attempts, timeout):
        return True

    def put(self, extent_name, nm, row):
        self.rows[(extent_name, nm)] = bytes(row)

    def get(self, extent_name, nm):
        return self.rows.get((extent_name, nm))


EXTENT = b"trtllm:shared-kv:staging:1"


@pytest.fixture
def rig():
    """Staging memory (8 slots of 64 bytes), a simulated device whose copies
    complete by themselves, and a factory for engines over them; every engine
    is shut down and freed after the test."""
    made = []

    class Rig:
        mem = kvready.Memory([kvready.Group(8, SLOT)])
        dev = kvready.SimDevice(1 << 20, latency=20e-6)

        def engine(self, backend, **kw):
            kw.setdefault("request_timeout", 5.0)
            kw.setdefault("drain_grace", 5.0)
            e = kvready.Engine(self.mem, 32, backend=backend, device=kw.pop("device", self.dev), **kw)
            made.append(e)
            return e

        def rows(self, n, tag=0xA5, fill=None, first=0):
            out = []
            for b in range(n):
                p = self.dev.alloc(SLOT)
                if fill is not None:
                    self.dev.write(p, bytes([fill + b]) * SLOT)
                out.append(kvready.Row(name(b, tag), 0, first + b, p))
            return out

    r = Rig()
    yield r
    for e in made:
        if not e.closed:
            e.shutdown(30)
            e.free()


@contextlib.contextmanager
def redis_server():
    """A throwaway redis-server on a free loopback port (as internal/redistest
    does for Go): yields (url, process), kills it after; fails, naming the
    package, without one."""
    exe = shutil.which("redis-server")
    assert exe, "redis-server is not installed: sudo apt-get install -y redis-server (or make deps)"
    with tempfile.TemporaryDirectory() as d:
        for _ in range(5):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            p = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
                                  "--appendonly", "no", "--protected-mode", "no"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            up = False
            while time.monotonic() < deadline and p.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    up = True
                    break
                except OSError:
                    time.sleep(0.02)
            if up:
                try:
                    yield f"redis://127.0.0.1:{port}/0", p
                finally:
                    p.kill()
                    p.wait(30)
                return
            p.kill()
            p.wait(30)
    pytest.fail("redis-server did not start on a free loopback port in 5 tries")


@pytest.fixture(scope="session")
def redis_url():
    """The session's shared redis-server."""
    with redis_server() as (url, _):
        yield url


def golden_scope():
    return hashlib.sha256(b"golden-compute").digest()
