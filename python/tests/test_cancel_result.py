"""SPEC §4 rule 19 from Python: a cancel answers the logical and the physical
result apart (``kvready.CancelResult``, the reference's), and a shutdown says
how many leases it leaves in doubt (``Report.in_doubt``)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

import kvready
from conftest import SLOT, Store


class LateWriter(Store):
    """A backend whose attempts never answer, that keeps the units it was
    handed and writes into their staging rows at every quiesce call until the
    test lets it prove its access over; till then quiesce answers False."""

    def __init__(self, memory):
        super().__init__(memory)
        self.proven = threading.Event()
        self.units: list = []
        self.writes = 0

    def fetch(self, extent):
        with self.lock:
            self.units.extend(extent.units)
        return kvready.Attempt()  # no outcome: it stays pending

    def quiesce(self, attempts, timeout):
        if self.proven.is_set():
            return True
        with self.lock:
            for u in self.units:
                self.memory.write(u.group, u.local, b"\xbb" * SLOT)
            self.writes += 1
        return False


def until(eng, cond, what):
    """Run rounds until cond() holds; bounded (5000 rounds of at most 1 ms)."""
    for _ in range(5000):
        eng.progress()
        if cond():
            return
        time.sleep(0.001)
    pytest.fail(f"never happened: {what}")


def test_a_cancel_answers_the_logical_and_the_physical_result_apart(rig):
    store = LateWriter(rig.mem)
    eng = rig.engine(store)
    lease = eng.lend(kvready.Request.fetch(rig.rows(1)))
    until(eng, lambda: lease.info().state == kvready.State.REQUESTED, "the lease was submitted")

    res = lease.cancel()
    assert type(res) is kvready.CancelResult
    assert res.logical is kvready.Logical.ACCEPTED and res.physical is kvready.Physical.QUIESCING
    assert not res.safe_to_reuse and not res.retryable and res.reason
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.logical = kvready.Logical.REJECTED  # type: ignore[misc]

    # The backend keeps writing while quiesce says False: not reusable.
    until(eng, lambda: store.writes >= 2, "quiesce was asked again")
    assert lease.info().physical is kvready.Physical.QUIESCING
    with pytest.raises(kvready.KvreadyError, match="outcome already latched") as ei:
        lease.cancel()
    assert ei.value.result == kvready.CancelResult(kvready.Logical.ALREADY_TERMINAL, kvready.Physical.QUIESCING,
                                                   False, ei.value.result.reason)
    assert not ei.value.result.safe_to_reuse

    # Proven over: only now is the memory reusable.
    store.proven.set()
    lease.release()
    info = lease.wait(kvready.Until.RELEASED, timeout=30)
    assert info.physical is kvready.Physical.QUIESCED_FAILURE and info.physical.reusable

    # Withdrawn before any round: never exposed, safe at once.
    withdrawn = eng.lend(kvready.Request.fetch(rig.rows(1, tag=0x44)))
    res = withdrawn.cancel()
    assert (res.logical, res.physical, res.safe_to_reuse) == (kvready.Logical.ACCEPTED, kvready.Physical.NOT_EXPOSED, True)
    with pytest.raises(kvready.StaleLeaseError) as ei:
        withdrawn.cancel()  # released already, still readable: terminal, and safe
    assert (ei.value.result.logical, ei.value.result.physical) == (kvready.Logical.ALREADY_TERMINAL, kvready.Physical.NOT_EXPOSED)
    assert ei.value.result.safe_to_reuse
    with pytest.raises(kvready.StaleLeaseError) as ei:
        eng.cancel(0)  # a handle the engine cannot name: nothing is claimed
    assert (ei.value.result.logical, ei.value.result.physical) == (kvready.Logical.NOT_FOUND, kvready.Physical.IN_DOUBT)
    assert not ei.value.result.safe_to_reuse


def test_a_shutdown_says_how_many_leases_it_leaves_in_doubt(rig):
    store = LateWriter(rig.mem)
    eng = rig.engine(store)
    leases = [eng.lend(kvready.Request.fetch(rig.rows(1, tag=0x50 + i))) for i in range(2)]
    until(eng, lambda: all(x.info().state == kvready.State.REQUESTED for x in leases), "both were submitted")

    with pytest.raises(kvready.TimedOutError, match="2 leases left in doubt") as ei:
        eng.shutdown(0.05)
    rep = ei.value.report
    assert (rep.in_doubt, rep.physical, rep.drained, rep.safe_to_release) == (2, kvready.Physical.IN_DOUBT, False, False)

    store.proven.set()
    rep = eng.shutdown(30)
    assert (rep.in_doubt, rep.physical, rep.drained, rep.safe_to_release) == (0, kvready.Physical.QUIESCED_SUCCESS, True, True)
    eng.free()


def test_an_engine_that_never_exposed_anything_is_safe_to_release(rig):
    eng = rig.engine(Store(rig.mem))
    lease = eng.lend(kvready.Request.fetch(rig.rows(1)))
    lease.cancel()
    rep = eng.close()
    assert (rep.in_doubt, rep.physical, rep.drained, rep.safe_to_release) == (0, kvready.Physical.NOT_EXPOSED, True, True)
    eng.free()
