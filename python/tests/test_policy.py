"""The containment policies and the admission bound through Python: the fatal
policy halts the engine and every later change is refused; the recover policy
releases a contained lease once its backend proves access over; a lease
beyond max_outstanding waits before its submission. Every wait is bounded,
and no test measures a duration."""

from __future__ import annotations

import select
import selectors
import threading
import time

import pytest

import kvready
from conftest import EXTENT, SLOT, Store

# Short deadlines: a lease whose access stays unproven is contained some 40 ms
# after its submission (request deadline + drain grace).
SHORT = dict(request_timeout=0.02, drain_grace=0.02, quiesce_timeout=0.005, retry_backoff=0.001,
             max_retry_backoff=0.002, recover_every=0.002)


class Held(Store):
    """Serves at once, but its Quiesce cannot tell whether access ended until
    the test says so (``proves``)."""

    def __init__(self, memory):
        super().__init__(memory)
        self.proves = threading.Event()

    def quiesce(self, attempts, timeout):
        return self.proves.is_set()


def rounds_until(eng, done, waits=2000):
    """Run rounds, woken by the engine's fd, until done(round) (at most
    `waits` waits of 10 ms); return the rounds' containments and recoveries."""
    contained, recovered = [], []
    with selectors.DefaultSelector() as sel:
        sel.register(eng, selectors.EVENT_READ)
        for _ in range(waits):
            r = eng.progress()
            contained += r.containments
            recovered += r.recoveries
            if done(r):
                return contained, recovered
            sel.select(timeout=0.01)
    pytest.fail("the engine never got there")


def stored_fetch(rig, store, tag):
    """A fetch of one row the store holds."""
    rows = rig.rows(1, tag=tag)
    store.put(EXTENT, rows[0].name, b"p" * SLOT)
    return rows, kvready.Request.fetch(rows)


def test_the_fatal_policy_halts_the_engine_and_refuses_every_change(rig):
    store = Held(rig.mem)
    halts = []
    eng = rig.engine(store, policy="fatal", on_halt=halts.append, **SHORT)
    assert eng.policy == kvready.Policy.FATAL
    rows, req = stored_fetch(rig, store, 0xF1)
    lease = eng.lend(req)
    contained, _ = rounds_until(eng, lambda r: r.halted)
    assert [c.lease for c in contained] == [lease.handle]
    assert len(halts) == 1 and "fatal policy" in halts[0]
    info = lease.info()
    assert info.contained and info.state == kvready.State.QUARANTINED

    with pytest.raises(kvready.EngineHaltedError, match="fatal policy"):
        eng.lend(req)
    with pytest.raises(kvready.EngineHaltedError):
        lease.release()
    with pytest.raises(kvready.EngineHaltedError):
        lease.cancel()
    with pytest.raises(kvready.EngineHaltedError):
        lease.retry()

    # Late evidence changes nothing: the slot stays out, and no halt is told twice.
    store.proves.set()
    for _ in range(5):
        assert eng.progress().halted
    assert len(halts) == 1
    stats = eng.stats()
    assert stats.halted and stats.containments == 1 and stats.recovered == 0 and stats.slots_free == 7
    rep = eng.report()
    assert rep.halted and not rep.drained and "fatal policy" in rep.halt_reason
    with pytest.raises(kvready.EngineHaltedError):
        eng.shutdown(1)
    # The context manager's exit abandons a halted engine and says so.
    with pytest.raises(kvready.EngineHaltedError):
        eng.__exit__(None, None, None)
    assert eng.closed


def test_the_recover_policy_releases_a_contained_lease_once_proven(rig):
    store = Held(rig.mem)
    seen = []
    eng = rig.engine(store, policy=kvready.Policy.RECOVER, on_recovery=seen.append, **SHORT)
    rows, req = stored_fetch(rig, store, 0xF2)
    lease = eng.lend(req)
    contained, recovered = rounds_until(eng, lambda r: r.containments)
    assert [c.lease for c in contained] == [lease.handle] and recovered == []
    info = lease.info()
    assert info.state == kvready.State.CONTAINED and info.contained
    assert eng.stats().slots_free == 7

    # The backend can tell now: Quiesce answers true the next time it is
    # asked, after the containment deadline.
    store.proves.set()
    _, recovered = rounds_until(eng, lambda r: r.recoveries)
    assert recovered == [lease.handle] and seen == [lease.handle]
    info = lease.wait(timeout=30)
    assert info.state == kvready.State.LOGICALLY_COMPLETE
    assert info.outcome == kvready.OutcomeKind.SERVED and info.contained
    assert rig.dev.read(rows[0].device, SLOT) == b"p" * SLOT
    lease.release()
    rep = eng.shutdown(30)
    assert rep.drained and not rep.halted and rep.slots_quarantined == 0 and rep.halt_reason == ""
    stats = eng.stats()
    assert (stats.containments, stats.recovered, stats.slots_free, stats.halted) == (1, 1, 8, False)


def test_the_default_policy_quarantines_one_lease_and_goes_on(rig):
    store = Held(rig.mem)
    eng = rig.engine(store, **SHORT)
    assert eng.policy == kvready.Policy.QUARANTINE
    _, req = stored_fetch(rig, store, 0xF3)
    lease = eng.lend(req)
    rounds_until(eng, lambda r: r.containments)
    assert lease.info().state == kvready.State.QUARANTINED
    store.proves.set()
    with eng.lend(kvready.Request.fetch(rig.rows(1, tag=0xF4))) as other:  # the engine goes on
        assert other.wait(timeout=30).outcome == kvready.OutcomeKind.MISSED
    assert not eng.stats().halted


def test_releasing_a_quarantined_lease_gives_up_the_claim(rig):
    store = Held(rig.mem)
    eng = rig.engine(store, **SHORT)
    _, req = stored_fetch(rig, store, 0xF5)
    lease = eng.lend(req)
    assert lease.wait(kvready.Until.SETTLED, timeout=30).state == kvready.State.QUARANTINED
    lease.release()  # accepted: the owner gives up its claim
    for until in (kvready.Until.RELEASED, kvready.Until.SETTLED):
        info = lease.wait(until, timeout=30)
        assert info.state == kvready.State.QUARANTINED and info.release_requested and info.contained
    with pytest.raises(kvready.StaleLeaseError, match="quarantined"):
        lease.release()  # a second release is refused
    assert eng.stats().slots_quarantined == 1


def test_calls_that_run_rounds_deliver_the_callbacks_without_progress(rig):
    store = Held(rig.mem)
    seen, recovered = [], []
    eng = rig.engine(store, on_containment=seen.append, on_recovery=recovered.append, **SHORT)
    _, req = stored_fetch(rig, store, 0xF6)
    first = eng.lend(req)
    assert first.wait(kvready.Until.SETTLED, timeout=30).state == kvready.State.QUARANTINED
    assert [c.lease for c in seen] == [first.handle]  # wait() delivered it
    second = eng.lend(kvready.Request.fetch(rig.rows(1, tag=0xF7)))
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:  # sync() runs rounds too
        eng.sync(30)
        select.select([eng], [], [], 0.05)  # until the containment deadline wakes the engine
    assert [c.lease for c in seen] == [first.handle, second.handle]
    third = eng.lend(kvready.Request.fetch(rig.rows(1, tag=0xF8)))
    while eng.info(third).state == kvready.State.WAITING:
        eng.sync(30)  # submitted: Close leaves it to its containment deadline
    assert len(seen) == 2
    rep = eng.shutdown(30)  # and so does shutdown()
    assert rep.drained
    assert [c.lease for c in seen] == [first.handle, second.handle, third.handle]
    assert recovered == []
    assert all(c.reason for c in seen)


def test_wait_tells_on_halt_without_progress(rig):
    store = Held(rig.mem)
    halts, seen = [], []
    eng = rig.engine(store, policy="fatal", on_halt=halts.append, on_containment=seen.append, **SHORT)
    _, req = stored_fetch(rig, store, 0xF9)
    lease = eng.lend(req)
    assert lease.wait(kvready.Until.SETTLED, timeout=30).state == kvready.State.QUARANTINED
    assert len(halts) == 1 and "fatal policy" in halts[0]
    assert [c.lease for c in seen] == [lease.handle]
    with pytest.raises(kvready.EngineHaltedError):
        eng.shutdown(1)
    assert len(halts) == 1, "told once"
    eng.free(force=True)


def test_policies_and_bounds_are_checked_at_the_door(rig):
    store = Store(rig.mem)
    with pytest.raises(kvready.InvalidArgumentError, match="policy 'sometimes'"):
        rig.engine(store, policy="sometimes")
    with pytest.raises(kvready.InvalidArgumentError, match="policy 7"):
        rig.engine(store, policy=7)
    with pytest.raises(kvready.InvalidArgumentError, match="MaxOutstanding"):
        rig.engine(store, max_outstanding=-1)
    with pytest.raises(kvready.InvalidArgumentError, match="recover_every is negative"):
        rig.engine(store, recover_every=-1)


class Pending(Store):
    """Answers only when the test says: each fetch's attempt stays pending
    until `answer` is called."""

    def __init__(self, memory):
        super().__init__(memory)
        self.pending: list[kvready.Attempt] = []

    def fetch(self, extent):
        a = kvready.Attempt()
        self.pending.append(a)
        return a

    def answer(self):
        for a in self.pending:
            if a.outcome is None:
                a.set_outcome(kvready.Delivered())


def test_a_lease_beyond_max_outstanding_waits_before_its_submission(rig):
    store = Pending(rig.mem)
    eng = rig.engine(store, max_outstanding=1)
    first = eng.lend(kvready.Request.fetch(rig.rows(1, tag=0xB1)))
    second = eng.lend(kvready.Request.fetch(rig.rows(1, tag=0xB2)))
    eng.sync(10)
    assert first.info().state == kvready.State.REQUESTED
    assert second.info().state == kvready.State.STAGED and not second.info().exposed
    stats = eng.stats()
    assert (stats.outstanding, stats.max_outstanding) == (1, 1)
    assert len(store.pending) == 1, "the second was never handed to the backend"
    store.answer()
    assert first.wait(timeout=30).outcome == kvready.OutcomeKind.MISSED
    for _ in range(3000):  # the second is submitted once the first is fenced
        if len(store.pending) == 2:
            break
        eng.sync(10)
    assert len(store.pending) == 2
    store.answer()
    assert second.wait(timeout=30).outcome == kvready.OutcomeKind.MISSED
    eng.release_many([first, second])
