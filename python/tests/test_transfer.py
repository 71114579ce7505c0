"""Peer transfers over UCX from Python (kvready.transfer): a decode engine
in this process fetches pages a prefill process (peer_child.py, a
kvready.Sender) puts over UCX tcp, the addresses and capabilities crossing
on the child's pipes (no port). What is checked comes from the bytes (the
decode's device pages) and the engine's leases; every wait is bounded, and
the child is killed and reaped at the end."""

from __future__ import annotations

import os
import pathlib
import queue
import subprocess
import sys
import threading

import pytest

import kvready
from peer_child import PAGE, PAGES, SLOTS, TPB, page_bytes, plan_of

HERE = pathlib.Path(__file__).resolve().parent
BOUND = 60.0  # seconds: bounds every wait on the other process, asserts nothing about durations


class Child:
    """The prefill process: its lines read on a thread, each wait bounded."""

    def __init__(self, incarnation: int):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE)]))
        self.p = subprocess.Popen([sys.executable, str(HERE / "peer_child.py"), str(incarnation)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, prefix: str) -> str:
        try:
            line = self.lines.get(timeout=BOUND)
        except queue.Empty:
            raise AssertionError(f"no {prefix!r} from the prefill within {BOUND} s") from None
        assert line is not None, f"the prefill exited while {prefix!r} was awaited: {self.p.stderr.read()}"
        assert line.startswith(prefix), f"the prefill answered {line!r}; {prefix!r} expected"
        return line

    def send(self, line: str) -> None:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=BOUND)


class Decode:
    """The decode side, in this process: a Receiver (its driver thread
    progressing UCX) as the engine's fetcher over the simulated device."""

    def __init__(self, timeout: float = 30.0):
        self.tr = kvready.UcxTransport("decode", 1, "tcp")
        self.mem = kvready.Memory([kvready.Group(SLOTS, PAGE)])
        self.recv = kvready.Receiver(self.tr, self.mem, poll=0.0005, timeout=timeout, grace=30.0)
        self.dev = kvready.SimDevice(1 << 20, latency=10e-6)
        self.eng = kvready.Engine(self.mem, TPB, device=self.dev, fetcher=self.recv, request_timeout=120, drain_grace=120)

    def connect(self, child: Child) -> None:
        _, addr, caps = child.expect("hello ").split()
        assert self.tr.add_peer(bytes.fromhex(addr))[0] == "prefill"
        self.recv.connect(bytes.fromhex(caps))
        child.send(f"hello {self.tr.address.hex()} {self.recv.capabilities.hex()}")

    def lend(self, req: int) -> tuple[kvready.Lease, list[kvready.Row]]:
        rows = [pg.row(self.dev.alloc(PAGE)) for pg in self.recv.expect(plan_of(req, decode=True))]
        return self.eng.lend(kvready.Request.fetch(rows, is_last=True)), rows

    def close(self) -> None:
        self.eng.shutdown(timeout=BOUND)
        self.eng.free()
        self.recv.close()
        self.tr.close()
        self.mem.close()


@pytest.fixture
def children():
    started: list[Child] = []
    yield lambda inc: started.append(Child(inc)) or started[-1]
    for c in started:
        c.kill()


def test_pages_move_between_two_processes(children):
    d = Decode()
    child = children(1)
    d.connect(child)
    for req in (1, 2):
        lease, rows = d.lend(req)
        child.send(f"send {req}")
        info = lease.wait(timeout=BOUND)
        assert (info.state, info.outcome, info.fenced) == (kvready.State.LOGICALLY_COMPLETE, kvready.OutcomeKind.SERVED, True), info
        for i, r in enumerate(rows):
            assert d.dev.read(r.device, PAGE) == page_bytes(req, i), f"request {req} page {i} on the device"
        assert d.recv.outcome(req) == kvready.TransferOutcome(kvready.TransferKind.DELIVERED, PAGES * TPB)
        lease.release()
        assert child.expect(f"sent {req} ") == f"sent {req} SERVED"
    d.eng.sync(timeout=BOUND)
    assert d.eng.stats().slots_free == SLOTS
    s = d.recv.stats()
    assert (s.delivered, s.settled, s.fenced, s.in_flight, s.in_doubt) == (2, 2, 2, 0, 0), s
    child.send("quit")
    assert child.expect("bye ") == f"bye {SLOTS}"  # the prefill's slots returned too
    d.close()


def test_a_killed_prefill_fails_the_fetch_proven_and_its_next_life_serves(children):
    d = Decode()
    first = children(1)
    d.connect(first)
    lease, rows = d.lend(5)
    for r in rows:
        d.dev.write(r.device, b"\x5a" * PAGE)
    d.eng.sync(timeout=BOUND)  # submitted: the offer left
    first.kill()  # before it put anything: over tcp the endpoint error fails the session
    info = lease.wait(timeout=BOUND)
    assert info.outcome in (kvready.OutcomeKind.FAILED, kvready.OutcomeKind.TIMEOUT), info
    assert info.fenced and not info.contained, f"the slots returned unproven: {info}"
    for r in rows:
        assert d.dev.read(r.device, PAGE) == b"\x5a" * PAGE, "a failed fetch copied nothing into the device"
    lease.release()
    d.eng.sync(timeout=BOUND)
    assert d.eng.stats().slots_free == SLOTS
    assert d.recv.stats().in_doubt == 0

    second = children(2)  # the restarted prefill: a new incarnation, a new address
    d.connect(second)
    lease, rows = d.lend(6)
    second.send("send 6")
    info = lease.wait(timeout=BOUND)
    assert info.outcome == kvready.OutcomeKind.SERVED, info
    assert [d.dev.read(r.device, PAGE) for r in rows] == [page_bytes(6, i) for i in range(PAGES)]
    lease.release()
    assert second.expect("sent 6 ") == "sent 6 SERVED"
    second.send("quit")
    assert second.expect("bye ") == f"bye {SLOTS}"
    d.close()


def test_refusals_change_nothing():
    with pytest.raises(kvready.InvalidArgumentError, match="incarnation 0.*mode 7"):
        kvready.UcxTransport("decode", 0, "tcp", mode=7)
    with pytest.raises(kvready.TransportUnavailableError, match="no_such_tl"):
        kvready.UcxTransport("decode", 1, "no_such_tl")
    tr = kvready.UcxTransport("decode", 1, "tcp")
    mem = kvready.Memory([kvready.Group(SLOTS, PAGE)])
    recv = kvready.Receiver(tr, mem)
    with pytest.raises(kvready.BusyError, match="one transport per backend"):
        kvready.Sender(tr, mem)
    with pytest.raises(kvready.InvalidArgumentError):
        kvready.Sender(tr, mem, grace=1.0)
    with pytest.raises(kvready.InvalidArgumentError, match="address"):
        tr.add_peer(b"not an address")
    with pytest.raises(kvready.InvalidArgumentError, match="kvready_peer_capabilities"):
        recv.connect(b"\x00garbage")

    good = plan_of(3, decode=True)
    bad = good._replace(writers=[kvready.Accessor("prefill", 0, 9)], block_tokens=0)
    with pytest.raises(kvready.InvalidArgumentError, match=r"writers\[0\]\.role 9"):
        recv.expect(bad)
    with pytest.raises(kvready.InvalidArgumentError, match="a sender's"):
        recv.expect(good._replace(to="decode"))
    with pytest.raises(kvready.InvalidArgumentError, match="block_tokens"):
        recv.expect(good._replace(block_tokens=0))
    pages = recv.expect(good)  # nothing was recorded by the refusals
    assert [(p.index, p.id, p.block, p.end) for p in pages] == [(0, 30, 0, TPB), (1, 31, 1, 2 * TPB)]
    with pytest.raises(kvready.RejectedError, match="already expected"):
        recv.expect(good)
    assert recv.outcome(3) is None
    assert recv.forget(3) is True and recv.forget(3) is False
    assert recv.expect(good) == pages  # forgotten, it can be expected again: the names are the plan's
    assert recv.progress() >= 0
    with pytest.raises(kvready.BusyError, match="kvready_backend_close"):
        tr.close()
    recv.close()
    with pytest.raises(kvready.BadHandleError):
        recv.progress()
    tr.close()
    mem.close()
