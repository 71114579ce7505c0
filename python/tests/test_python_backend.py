"""Backends written in Python: a late writer, a Quiesce that blocks in
Python, and the conformance kit naming the rule a backend breaks (its
cancellation rules included)."""

from __future__ import annotations

import threading
import time

import pytest

import kvready
from conftest import EXTENT, SLOT, Store


class LateWriter(kvready.Backend):
    """Answers Delivered at once, then writes the row later (a retried write,
    a lagging DMA): only its Quiesce says when it is done."""

    def __init__(self, memory):
        super().__init__(memory)
        self.go = threading.Event()
        self.written = threading.Event()

    def fetch(self, extent):
        a = kvready.Attempt()
        a.set_outcome(kvready.Delivered(frozenset(u.name for u in extent.units)))

        def late():
            self.go.wait(30)
            for u in extent.units:
                self.memory.write(u.group, u.local, b"L" * SLOT)
            self.written.set()
        threading.Thread(target=late, daemon=True).start()
        return a

    def quiesce(self, attempts, timeout):
        return self.written.is_set()


def test_a_python_backend_that_writes_late_is_copied_only_after_its_proof(rig):
    store = LateWriter(rig.mem)
    eng = rig.engine(store, quiesce_timeout=0.2, retry_backoff=0.001, max_retry_backoff=0.005)
    rows = rig.rows(1, fill=ord("0"))
    lease = eng.lend(kvready.Request.fetch(rows))
    for _ in range(200):
        eng.progress()
        if eng.info(lease).outcome != kvready.OutcomeKind.NONE:
            break
        eng.sync(5)
    eng.sync(5)
    info = eng.info(lease)
    # The outcome is visible at once; nothing is copied, nothing is ready.
    assert info.outcome == kvready.OutcomeKind.SERVED
    assert info.state == kvready.State.SERVED and not info.fenced
    with pytest.raises(kvready.NotReadyError):
        lease.readiness()
    assert rig.dev.read(rows[0].device, SLOT) == b"0" * SLOT
    assert eng.stats().unproven >= 1, "Quiesce was asked and could not prove it yet"
    store.go.set()
    info = lease.wait(timeout=30)
    assert info.state == kvready.State.LOGICALLY_COMPLETE
    assert rig.dev.read(rows[0].device, SLOT) == b"L" * SLOT, "the device holds the late bytes, never torn ones"
    assert lease.readiness() == kvready.Readiness(32, 0)
    lease.release()


class Blocking(Store):
    """Quiesce blocks in Python until the test lets it answer."""

    def __init__(self, memory):
        super().__init__(memory)
        self.entered = threading.Event()
        self.let = threading.Event()
        self.threads: set[int] = set()

    def quiesce(self, attempts, timeout):
        self.threads.add(threading.get_ident())
        self.entered.set()
        return self.let.wait(timeout)


def test_a_quiesce_that_blocks_in_python_never_blocks_the_owner(rig):
    store = Blocking(rig.mem)
    for r in rig.rows(1, tag=0x44):
        store.put(EXTENT, r.name, b"B" * SLOT)
    eng = rig.engine(store, quiesce_timeout=30)
    rows = [kvready.Row(rig.rows(1, tag=0x44)[0].name, 0, 0, rig.dev.alloc(SLOT))]
    lease = eng.lend(kvready.Request.fetch(rows))
    for _ in range(2000):
        eng.progress()
        if store.entered.wait(0.005):
            break
    assert store.entered.is_set(), "Quiesce was never called"
    # The owner keeps running rounds while Quiesce blocks in Python.
    for _ in range(20):
        eng.progress()
    assert eng.info(lease).state == kvready.State.SERVED
    assert threading.get_ident() not in store.threads, "Quiesce ran off the owner thread"
    store.let.set()
    assert lease.wait(timeout=30).state == kvready.State.LOGICALLY_COMPLETE
    assert rig.dev.read(rows[0].device, SLOT) == b"B" * SLOT
    lease.release()


class Probing(Store):
    """Knows at once that its deliveries ended (each completes inside the
    call): it answers the proof on the owner's thread, and its blocking
    quiesce is never needed. With ``unknown`` it cannot tell, and every proof
    goes to a worker."""

    def __init__(self, memory, unknown=False):
        super().__init__(memory)
        self.unknown = unknown
        self.tries: set[int] = set()
        self.quiesces = 0

    def try_quiesce(self, attempts):
        self.tries.add(threading.get_ident())
        return kvready.Access.UNKNOWN if self.unknown else kvready.Access.ENDED

    def quiesce(self, attempts, timeout):
        self.quiesces += 1
        return True


@pytest.mark.parametrize("unknown", [False, True])
def test_a_python_backend_that_answers_its_proof_at_once_stays_on_the_owner_thread(rig, unknown):
    store = Probing(rig.mem, unknown=unknown)
    rows = rig.rows(4, tag=0x55)
    for r in rows:
        store.put(EXTENT, r.name, b"P" * SLOT)
    eng = rig.engine(store)
    for r in rows:
        lease = eng.lend(kvready.Request.fetch([kvready.Row(r.name, 0, 0, rig.dev.alloc(SLOT))]))
        assert lease.wait(timeout=30).outcome == kvready.OutcomeKind.SERVED
        lease.release()
    st = eng.stats()
    assert store.tries == {threading.get_ident()}, "try_quiesce runs on the owner's thread"
    assert st.quiesce_probes >= len(rows)
    if unknown:
        assert store.quiesces >= len(rows) and st.quiesce_calls >= len(rows), "unknown hands the proof to quiesce"
    else:
        assert store.quiesces == 0 and st.quiesce_calls == 0, "a proof answered at once needs no worker"
    assert st.fetcher_faults == kvready.BackendFaults()


# ---- the conformance kit ----

def test_a_correct_python_backend_passes_the_conformance_kit():
    kvready.conformance.check(Store, kind="both", checks=30)


class WritesAfterQuiesce(Store):
    """Broken: once its Quiesce answered true, the next poll writes a served
    row again (a late DMA; at a call into the backend, so deterministic)."""

    def fetch(self, extent):
        inner = super().fetch(extent)
        a = LateAttempt(self, extent)
        a.set_outcome(inner.outcome)
        return a

    def quiesce(self, attempts, timeout):
        for a in attempts:
            a.armed = True
        return True


class LateAttempt(kvready.Attempt):
    def __init__(self, backend, extent):
        super().__init__()
        self.backend, self.extent, self.armed = backend, extent, False

    def poll(self):
        if self.armed:
            for u in self.extent.units:
                if u.name in self.outcome.served:
                    self.backend.memory.write(u.group, u.local, b"\xee")
        return super().poll()


class ServesUnasked(Store):
    """Broken: serves a name the extent did not ask for."""

    def fetch(self, extent):
        a = kvready.Attempt()
        a.set_outcome(kvready.Delivered(frozenset({b"\x99" * 54})))
        return a


class MissAsFailure(Store):
    """Broken: reports a miss as a failure."""

    def fetch(self, extent):
        a = super().fetch(extent)
        if isinstance(a.outcome, kvready.Delivered) and a.outcome.miss:
            b = kvready.Attempt()
            b.set_outcome(kvready.Failed("not found"))
            return b
        return a


class CancelStore(Store):
    """A store whose attempts take cancellation requests through `attempt`
    (an Attempt subclass), answering what the store answered."""

    attempt = kvready.Attempt

    def fetch(self, extent):
        inner = super().fetch(extent)
        a = self.attempt()
        a.set_outcome(inner.outcome)
        return a


class Requests(kvready.Attempt):
    """A correct cancellable attempt: a request is made, and changes nothing
    (the delivery had ended)."""

    asked = 0

    def request_cancel(self):
        Requests.asked += 1
        return kvready.CancelDisposition.REQUESTED


class BlocksInCancel(kvready.Attempt):
    """Broken: request_cancel waits (on the network, say) — bounded here, so
    the test's threads end."""

    def request_cancel(self):
        threading.Event().wait(1.0)
        return kvready.CancelDisposition.REQUESTED


class AnswersNeither(kvready.Attempt):
    """Broken: request_cancel answers a disposition that is neither."""

    def request_cancel(self):
        return 7


class ChangesItsAnswer(kvready.Attempt):
    """Broken: a second request answers differently from the first."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def request_cancel(self):
        self.calls += 1
        return kvready.CancelDisposition.REQUESTED if self.calls == 1 else kvready.CancelDisposition.UNSUPPORTED


def cancel_store(attempt):
    return type(f"Store{attempt.__name__}", (CancelStore,), {"attempt": attempt})


def test_the_conformance_kit_asks_a_python_backend_to_cancel():
    Requests.asked = 0
    kvready.conformance.check(cancel_store(Requests), kind="fetch", checks=30)
    assert Requests.asked > 0, "the kit never asked an attempt to cancel"


@pytest.mark.parametrize("broken,rule", [
    (ServesUnasked, "served_subset"),
    (MissAsFailure, "known_miss"),
    (WritesAfterQuiesce, "no_late_write"),
    (cancel_store(AnswersNeither), "cancel_answer"),
    (cancel_store(ChangesItsAnswer), "cancel_idempotent"),
    (cancel_store(BlocksInCancel), "cancel_never_blocks"),
])
def test_the_conformance_kit_names_the_rule_a_python_backend_breaks(broken, rule):
    with pytest.raises(kvready.ConformanceError) as ei:
        kvready.conformance.check(broken, checks=100)
    assert ei.value.rule == rule, ei.value.report
    assert rule in kvready.conformance.RULES
    assert rule in str(ei.value)


def test_make_backend_must_build_a_backend():
    with pytest.raises(kvready.ConformanceError):
        kvready.conformance.check(lambda memory: object(), checks=2)


# ---- a fetch that raises: what escaped decides where the slots go ----------


def test_a_fetch_that_raises_submission_rejected_returns_every_slot_at_once(rig, caplog):
    # Deadlines far away: slots back before them can only come from the
    # rejection, never from a containment.
    store = Store(rig.mem, "reject")
    eng = rig.engine(store, request_timeout=600, drain_grace=600)
    with caplog.at_level("ERROR", logger="kvready"):
        lease = eng.lend(kvready.Request.fetch(rig.rows(4)))
        info = lease.wait(timeout=30)
        assert (info.state, info.outcome) == (kvready.State.LOGICALLY_COMPLETE, kvready.OutcomeKind.REJECTED)
        assert not info.contained
        lease.release()
        assert lease.wait(kvready.Until.RELEASED, timeout=30).state == kvready.State.RELEASED
    st = eng.stats()
    assert (st.slots_free, st.slots_quarantined, st.containments) == (8, 0, 0)
    assert store.callback_errors == []
    assert not [r for r in caplog.records if r.name == "kvready"], "a rejection is an answer, not an error"


class Raises(Store):
    """A fetch that fails with an ordinary exception: it may have queued a
    transfer before failing, for all kvready can tell."""

    def fetch(self, extent):
        raise ValueError("the transfer engine said no, after queuing who knows what")


def test_an_escaped_submission_is_contained_one_drain_grace_after_the_raise(rig, caplog):
    """The raise starts the lease's drain: the containment deadline is the
    drain grace after the raise, not the request deadline plus the grace
    (docs/python.md and the log line say so). With a request deadline of an
    hour, a lease held until that deadline plus the grace would outlast the
    bounded wait below; its deadline is read from the engine's own
    containment event, never measured."""
    store = Raises(rig.mem)
    contained = []
    eng = rig.engine(store, request_timeout=3600.0, drain_grace=0.2, on_containment=contained.append)
    with caplog.at_level("ERROR", logger="kvready"):
        before = time.time()
        lease = eng.lend(kvready.Request.fetch(rig.rows(2)))
        eng.progress()
        assert [type(e) for e in store.callback_errors] == [ValueError], "the fetch was called in this round"
        after = time.time()
        info = lease.wait(timeout=30)
    assert info.state == kvready.State.QUARANTINED and info.contained, info
    assert len(contained) == 1, contained
    c = contained[0]
    assert c.lease == lease.handle and repr(c.lease).startswith("lease#"), c
    # The deadline the engine fixed: the drain grace after the round that
    # saw the raise (the engine's clock read between before and after).
    assert before + 0.2 <= c.deadline <= after + 0.2, (c.deadline - before, c.deadline - after)
    msg = next(r.getMessage() for r in caplog.records if "Raises.fetch raised" in r.getMessage())
    assert "one drain grace from now" in msg and "request deadline" not in msg, msg


def test_a_containment_names_its_lease_as_a_handle(rig):
    """Containment.lease prints as Go's readiness.Handle does
    (lease#INDEX.GENERATION), not as the packed integer, and still equals
    Lease.handle."""
    h = kvready.LeaseHandle((7 << 32) | 3)
    assert (h.index, h.generation) == (3, 7)
    assert repr(h) == str(h) == "lease#3.7"
    assert h == (7 << 32) | 3 and isinstance(h, int)
    c = kvready.Containment(h, 2, 0.0, "why")
    assert "lease=lease#3.7" in repr(c), repr(c)


def test_a_fetch_that_raises_anything_else_may_have_escaped(rig, caplog):
    store = Raises(rig.mem)
    eng = rig.engine(store, request_timeout=0.2, drain_grace=0.2)
    with caplog.at_level("ERROR", logger="kvready"):
        lease = eng.lend(kvready.Request.fetch(rig.rows(4)))  # nothing reaches the caller
        eng.progress()
        early = lease.info()
        info = lease.wait()  # the default timeout outlasts the containment
    # Held until contained, then out of use: the reference keeps an escaped
    # submission's slots.
    assert early.state not in (kvready.State.RELEASED, kvready.State.LOGICALLY_COMPLETE), early
    assert info.state == kvready.State.QUARANTINED and info.contained, info
    st = eng.stats()
    assert (st.slots_quarantined, st.slots_free, st.containments) == (4, 4, 1)
    assert [type(e) for e in store.callback_errors] == [ValueError]
    # Logged once, its type in the message.
    records = [r for r in caplog.records if r.name == "kvready" and "Raises.fetch raised" in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    msg = records[0].getMessage()
    assert "raised ValueError: the transfer engine said no" in msg
    assert "may have escaped" in msg and "SubmissionRejectedError" in msg
