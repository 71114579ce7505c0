"""The engine through the real library: lifecycles, every outcome kind,
refusals, the wake fd, context managers and buffers."""

from __future__ import annotations

import selectors
import time

import pytest

import kvready
from conftest import EXTENT, SLOT, Store, name


def settle(eng, lease, until=kvready.Until.SETTLED):
    return eng.wait(lease, until, timeout=30)


def test_publish_then_fetch_round_trip(rig):
    store = kvready.open_backend("mem", rig.mem)
    eng = rig.engine(store)
    rows = rig.rows(3, fill=ord("a"))
    with eng.lend(kvready.Request.publish(rows)) as pub:
        info = settle(eng, pub)
        assert (info.state, info.outcome) == (kvready.State.LOGICALLY_COMPLETE, kvready.OutcomeKind.SERVED)
        assert info.cancel_disposition is None  # no cancel was asked
    fresh = [r._replace(device=rig.dev.alloc(SLOT)) for r in rows]
    with eng.lend(kvready.Request.fetch(fresh)) as f:
        assert settle(eng, f).outcome == kvready.OutcomeKind.SERVED
        assert f.readiness() == kvready.Readiness(usable_until=96, restart_floor=0)
        assert f.arrived() == [(0, 0), (0, 1), (0, 2)]
    assert rig.dev.read(fresh[2].device, SLOT) == b"c" * SLOT
    settle(eng, f, kvready.Until.RELEASED)
    assert eng.stats().slots_free == 8


@pytest.mark.parametrize("mode,kind,by_peer", [
    ("normal", kvready.OutcomeKind.SERVED, False),
    ("partial", kvready.OutcomeKind.PARTIAL, False),
    ("miss", kvready.OutcomeKind.MISSED, False),
    ("fail", kvready.OutcomeKind.FAILED, False),
    ("cancel", kvready.OutcomeKind.CANCELLED, False),
    ("cancel-by-peer", kvready.OutcomeKind.CANCELLED, True),
    ("reject", kvready.OutcomeKind.REJECTED, False),
])
def test_every_outcome_kind_from_a_python_backend(rig, mode, kind, by_peer):
    store = Store(rig.mem, "normal" if mode == "miss" else mode)
    rows = rig.rows(4, fill=ord("k"))
    if mode != "miss":
        for r in rows:
            store.put(EXTENT, r.name, bytes([0x33]) * SLOT)
    eng = rig.engine(store)
    with eng.lend(kvready.Request.fetch(rows)) as lease:
        info = settle(eng, lease)
        assert info.outcome == kind, info
        assert info.by_peer == by_peer
        assert info.state == kvready.State.LOGICALLY_COMPLETE
        iv = lease.readiness()
        # A miss, a failure, a cancel and a rejection all resume from what
        # was known (nothing); only served rows move readiness.
        want = {"normal": 128, "partial": 64}.get(mode, 0)
        assert iv == kvready.Readiness(want, 0)
        served = {"normal": 4, "partial": 2}.get(mode, 0)
        for r in rows[:served]:
            assert rig.dev.read(r.device, SLOT) == bytes([0x33]) * SLOT
        for r in rows[served:]:  # unserved device rows are never written
            assert rig.dev.read(r.device, SLOT) == bytes([ord("k") + r.block]) * SLOT
    stats = eng.stats()
    assert stats.outcomes[kind] == 1
    if mode == "miss":
        assert stats.outcomes[kvready.OutcomeKind.FAILED] == 0, "a miss is never counted as a failure"
    assert store.callback_errors == []


@pytest.mark.parametrize("mode,kind,by_peer", [
    ("miss", kvready.OutcomeKind.MISSED, False),
    ("fail", kvready.OutcomeKind.FAILED, False),
    ("cancel-local", kvready.OutcomeKind.CANCELLED, False),
    ("cancel-by-peer", kvready.OutcomeKind.CANCELLED, True),
    ("reject", kvready.OutcomeKind.REJECTED, False),
    ("partial", kvready.OutcomeKind.PARTIAL, False),
])
def test_every_outcome_kind_from_backend_mem(rig, mode, kind, by_peer):
    store = kvready.open_backend(f"mem:?mode={mode}", rig.mem)
    rows = rig.rows(2)
    for r in rows:
        store.put(EXTENT, r.name, b"z" * SLOT)
    eng = rig.engine(store)
    with eng.lend(kvready.Request.fetch(rows)) as lease:
        info = settle(eng, lease)
        assert (info.outcome, info.by_peer) == (kind, by_peer), info
    stats = eng.stats()
    if kind != kvready.OutcomeKind.FAILED:
        assert stats.outcomes[kvready.OutcomeKind.FAILED] == 0


def test_misses_are_never_failures_over_many_leases(rig):
    store = Store(rig.mem)
    eng = rig.engine(store)
    for r in rig.rows(2, tag=0x10):
        store.put(EXTENT, r.name, b"h" * SLOT)
    leases = []
    for k in range(6):
        rows = [kvready.Row(name(0, 0x10 if k % 2 else 0x77), 0, 0, rig.dev.alloc(SLOT))]
        leases.append(eng.lend(kvready.Request.fetch(rows)))
    kinds = [settle(eng, l).outcome for l in leases]
    assert kinds == [kvready.OutcomeKind.MISSED, kvready.OutcomeKind.SERVED] * 3
    eng.release_many(leases)
    s = eng.stats()
    assert s.outcomes[kvready.OutcomeKind.MISSED] == 3 and s.outcomes[kvready.OutcomeKind.FAILED] == 0


def test_refusals_name_what_was_wrong_and_change_nothing(rig):
    eng = rig.engine(Store(rig.mem))
    rows = rig.rows(1)
    before = eng.stats()
    with pytest.raises(kvready.InvalidArgumentError, match="group"):
        eng.lend(kvready.Request.fetch([rows[0]._replace(group=3)]))
    with pytest.raises(kvready.InvalidArgumentError, match="kind 9"):
        eng.lend(kvready.Request(9, rows))
    with pytest.raises(kvready.InvalidArgumentError, match="no rows"):
        eng.lend(kvready.Request.fetch([]))
    with pytest.raises(kvready.InvalidArgumentError, match="54 bytes"):
        kvready.Request.fetch([kvready.Row(b"short", 0, 0, 1)])
    with pytest.raises(kvready.InvalidArgumentError, match="below KnownBlocks|known|KnownBlocks"):
        eng.lend(kvready.Request.fetch(rows, known_blocks=4))
    after = eng.stats()
    assert (before.lent, before.leases) == (after.lent, after.leases)

    lease = eng.lend(kvready.Request.fetch(rows))
    with pytest.raises(kvready.NotReadyError):
        lease.readiness()
    settle(eng, lease)
    lease.release()
    settle(eng, lease, kvready.Until.RELEASED)
    stale = kvready.Lease(eng, lease.handle + (7 << 32))
    with pytest.raises(kvready.StaleLeaseError, match="stale"):
        stale.release()
    with pytest.raises(kvready.StaleLeaseError):
        eng.readiness(0)
    eng.shutdown(10)
    with pytest.raises(kvready.EngineClosedError):
        eng.lend(kvready.Request.fetch(rows))
    h = eng.handle
    eng.free()
    # A freed engine says so, whichever call comes next.
    for call in (eng.progress, eng.stats, eng.report, lambda: eng.lend(kvready.Request.fetch(rows))):
        with pytest.raises(kvready.EngineClosedError, match="shut down and freed"):
            call()
    eng._h = h  # a freed engine's handle, passed to the library: refused, never a crash
    with pytest.raises(kvready.BadHandleError, match="no live engine"):
        eng.progress()
    eng._h = 0


def test_calls_after_the_with_block_answer_engine_closed(rig):
    store = kvready.open_backend("mem", rig.mem)
    rows = rig.rows(1, fill=ord("w"))
    with rig.engine(store) as eng:
        with eng.lend(kvready.Request.publish(rows)) as lease:
            settle(eng, lease)
    for call in (eng.progress, eng.stats, lambda: lease.info(), lambda: lease.wait(timeout=1),
                 lambda: eng.lend(kvready.Request.fetch(rows))):
        with pytest.raises(kvready.EngineClosedError, match="shut down and freed"):
            call()


def test_no_exception_shares_a_name_with_an_outcome():
    # Every exception kvready exports ends in Error; nothing else does, and
    # no exception is named like an outcome type, an outcome kind or a state,
    # so that `except kvready.<outcome>` cannot be written by mistake for one.
    exported = {n: getattr(kvready, n) for n in kvready.__all__}
    exceptions = {n for n, v in exported.items() if isinstance(v, type) and issubclass(v, BaseException)}
    assert {"KvreadyError", "CallFailedError", "SubmissionRejectedError", "CopyRefusedError"} <= exceptions
    for n in exceptions:
        assert n.endswith("Error"), n
    for n, v in exported.items():
        if n not in exceptions:
            assert not n.endswith("Error"), n
    outcome_names = {"Delivered", "Failed", "Cancelled", "Outcome"}
    outcome_names |= {m.name.title().replace("_", "") for e in (kvready.OutcomeKind, kvready.State) for m in e}
    assert not exceptions & outcome_names
    assert not {n.removesuffix("Error") for n in exceptions} & {"Delivered", "Failed", "Cancelled"}
    for n in ("Failed", "Delivered", "Cancelled"):
        assert not issubclass(getattr(kvready, n), BaseException), n


def test_a_publisher_only_engine_refuses_a_fetch(rig):
    class PublishOnly(Store):
        fetch = kvready.Backend.fetch
    eng = rig.engine(PublishOnly(rig.mem))
    with pytest.raises(kvready.InvalidArgumentError, match="no Fetcher"):
        eng.lend(kvready.Request.fetch(rig.rows(1)))


def test_bad_buffers_and_profiles_are_refused():
    with pytest.raises(kvready.InvalidArgumentError, match="read-only"):
        kvready.Memory([kvready.Group(2, 8)], [bytes(16)])
    with pytest.raises(kvready.InvalidArgumentError, match="has 8 bytes; the pool group needs 16"):
        kvready.Memory([kvready.Group(2, 8)], [bytearray(8)])
    with pytest.raises(kvready.InvalidArgumentError, match="not a buffer"):
        kvready.Memory([kvready.Group(2, 8)], ["text"])


def test_the_wake_fd_wakes_a_selector(rig):
    store = kvready.open_backend("mem", rig.mem)
    eng = rig.engine(store)
    rows = rig.rows(2, fill=1)
    sel = selectors.DefaultSelector()
    sel.register(eng, selectors.EVENT_READ)  # the engine is its own file object (fileno)
    lease = eng.lend(kvready.Request.publish(rows))
    woken = 0
    for _ in range(3000):
        if eng.info(lease).state == kvready.State.LOGICALLY_COMPLETE:
            break
        events = sel.select(timeout=0.01)
        woken += bool(events)
        eng.progress()
    else:
        pytest.fail("the publish never completed")
    assert woken > 0, "the wake fd never became readable"
    eng.progress()
    assert not sel.select(timeout=0), "progress drains the wake fd"
    lease.release()
    sel.close()


def test_progress_reports_each_moved_lease_once(rig):
    # One engine over the rig's memory (two would be refused: SPEC §4 rule 17).
    rig_dev = kvready.SimDevice(1 << 16)  # completes only when told
    eng2 = rig.engine(kvready.open_backend("instant:", rig.mem), device=rig_dev)
    rows = [kvready.Row(name(k), 0, 0, rig_dev.alloc(SLOT)) for k in range(3)]
    leases = eng2.lend_many([kvready.Request.fetch([r]) for r in rows])
    seen: dict[int, int] = {}
    for _ in range(2000):
        rig_dev.complete_all()
        rnd = eng2.progress()
        assert len({h for h, _ in rnd.changed}) == len(rnd.changed), "each lease once per round"
        seen.update(rnd.changed)
        if all(seen.get(l.handle) == kvready.State.LOGICALLY_COMPLETE for l in leases):
            break
        eng2.sync(5)
    assert all(seen[l.handle] == kvready.State.LOGICALLY_COMPLETE for l in leases)
    eng2.release_many(leases)
    assert {s for h, s in eng2.progress().changed} <= {kvready.State.RELEASED}


def test_lend_many_reports_each_refusal(rig):
    eng = rig.engine(Store(rig.mem))
    good = kvready.Request.fetch(rig.rows(1))
    bad = kvready.Request.fetch([kvready.Row(name(9), 5, 0, rig.dev.alloc(SLOT))])
    with pytest.raises(kvready.LendError) as ei:
        eng.lend_many([good, bad])
    assert ei.value.leases[0] is not None and ei.value.leases[1] is None
    assert isinstance(ei.value.errors[1], kvready.InvalidArgumentError)
    ei.value.leases[0].release()


def test_cancel_latches_a_local_cancel_and_asks_the_backend_once(rig):
    class Slow(Store):
        def fetch(self, extent):
            a = Cancellable()
            self.pending = a
            return a

        def quiesce(self, attempts, timeout):
            return all(a.outcome is not None for a in attempts)

    class Cancellable(kvready.Attempt):
        asked = 0

        def request_cancel(self):
            Cancellable.asked += 1
            self.set_outcome(kvready.Cancelled())
            return kvready.CancelDisposition.REQUESTED

    store = Slow(rig.mem)
    eng = rig.engine(store)
    lease = eng.lend(kvready.Request.fetch(rig.rows(1)))
    for _ in range(1000):
        eng.progress()
        if eng.info(lease).state == kvready.State.REQUESTED:
            break
        time.sleep(0.001)
    lease.cancel()
    info = settle(eng, lease)
    assert info.outcome == kvready.OutcomeKind.CANCELLED and not info.by_peer
    # The enum, not a bare int (an int compares equal to it too).
    assert type(info.cancel_disposition) is kvready.CancelDisposition
    assert info.cancel_disposition is kvready.CancelDisposition.REQUESTED
    assert Cancellable.asked == 1
    lease.release()


def test_a_cancel_right_after_lend_withdraws_the_lease(rig):
    class Counting(Store):
        fetched = 0

        def fetch(self, extent):
            Counting.fetched += 1
            return super().fetch(extent)

    eng = rig.engine(Counting(rig.mem))
    free = eng.stats().slots_free
    lease = eng.lend(kvready.Request.fetch(rig.rows(2)))
    lease.cancel()  # before any round: not submitted, so withdrawn
    info = lease.wait(kvready.Until.RELEASED, timeout=30)
    assert info.state == kvready.State.RELEASED
    assert info.outcome == kvready.OutcomeKind.CANCELLED and not info.by_peer and not info.exposed
    stats = eng.stats()
    assert stats.slots_free == free and stats.cancel_requests == 0
    eng.sync(10)
    assert Counting.fetched == 0, "a withdrawn lease is never submitted"
    with pytest.raises(kvready.StaleLeaseError, match="already released"):
        lease.release()
    with pytest.raises(kvready.StaleLeaseError):
        lease.cancel()  # refused, and changes nothing
    assert eng.stats().slots_free == free


def test_a_poll_that_raises_is_a_contract_violation(rig):
    class Broken(Store):
        def fetch(self, extent):
            return Exploding()

    class Exploding(kvready.Attempt):
        def poll(self):
            raise RuntimeError("boom")

    store = Broken(rig.mem)
    eng = rig.engine(store)
    with eng.lend(kvready.Request.fetch(rig.rows(1))) as lease:
        info = settle(eng, lease)
        assert info.outcome == kvready.OutcomeKind.VIOLATION, info
    assert any(isinstance(e, RuntimeError) for e in store.callback_errors)


def test_buffers_bytearray_memoryview_and_numpy():
    import numpy as np  # python3-numpy: make deps installs it

    for buf in (bytearray(4 * 32), memoryview(bytearray(4 * 32)), np.zeros(4 * 32, dtype=np.uint8)):
        m = kvready.Memory([kvready.Group(4, 32)], [buf])
        m.write(0, 2, b"\x07" * 32)
        assert bytes(memoryview(buf).cast("B")[64:96]) == b"\x07" * 32
        store = kvready.open_backend("mem", m)
        store.put(EXTENT, name(1), b"q" * 32)
        assert store.get(EXTENT, name(1)) == b"q" * 32
        assert store.get(EXTENT, name(2)) is None
        with pytest.raises(kvready.BusyError, match="still use this staging memory"):
            m.close()
        store.close()
        m.close()
    ba = bytearray(64)
    m = kvready.Memory([kvready.Group(2, 32)], [ba])
    with pytest.raises(BufferError):
        ba.extend(b"x")  # kvready holds it exported: it cannot move
    m.close()


def test_engine_context_manager_drains_and_frees(rig):
    store = kvready.open_backend("mem", rig.mem)
    with kvready.Engine(rig.mem, 32, backend=store, device=rig.dev) as eng:
        lease = eng.lend(kvready.Request.publish(rig.rows(1, fill=3)))
        lease.wait()
        with pytest.raises(kvready.BusyError, match="engines still use this backend"):
            store.close()
    assert eng.closed
    store.close()


# ---- Lease.wait's default agrees with the default containment --------------


class Silent(Store):
    """Submits and never answers; nothing is ever proven."""

    def fetch(self, extent):
        return kvready.Attempt()

    def quiesce(self, attempts, timeout):
        return False


def _waited_ns(monkeypatch):
    seen = []
    real = kvready._abi.wait

    def spy(h, lease, until, timeout_ns, info):
        seen.append(timeout_ns)
        return real(h, lease, until, timeout_ns, info)
    monkeypatch.setattr(kvready._abi, "wait", spy)
    return seen


def test_the_default_wait_outlasts_the_default_containment(rig, monkeypatch):
    import re
    from conftest import ROOT
    # The engine's defaults are kvready.h's; the Python constants say the same.
    header = (ROOT / "cabi" / "kvready.h").read_text()
    assert re.search(r"request_timeout_ns;\s*/\* default 30 s \*/", header)
    assert re.search(r"drain_grace_ns;\s*/\* default 10 s \*/", header)
    seen = _waited_ns(monkeypatch)
    # The defaults of Lease.wait and Engine.wait are the engine's horizon
    # and a margin, not a constant that ends before a pending lease is
    # contained (30 s against 40 s).
    for kw, horizon in (({"request_timeout": None, "drain_grace": None}, 40.0),
                        ({"request_timeout": 0.5, "drain_grace": 0.25}, 0.75)):
        seen.clear()
        eng = rig.engine(Store(rig.mem), **kw)
        assert eng.containment_horizon == horizon
        assert eng.wait_timeout == horizon + kvready.engine.WAIT_MARGIN
        lease = eng.lend(kvready.Request.fetch(rig.rows(1)))
        lease.wait()
        eng.wait(lease)
        eng.wait(lease, timeout=7)  # an explicit timeout still wins
        assert seen == [int((horizon + kvready.engine.WAIT_MARGIN) * 1e9)] * 2 + [7_000_000_000]
        assert seen[0] > horizon * 1e9
        lease.release()
        eng.shutdown(30)
        eng.free()


def test_a_default_wait_on_a_silent_backend_ends_contained_not_timed_out(rig):
    eng = rig.engine(Silent(rig.mem), request_timeout=0.2, drain_grace=0.2)
    lease = eng.lend(kvready.Request.fetch(rig.rows(2)))
    info = lease.wait()
    assert info.state == kvready.State.QUARANTINED and info.contained, info


# ---- the C ABI under misuse, from Python ----------------------------------


def test_lengths_past_the_memory_are_refused_naming_the_bound(rig):
    import ctypes
    import re
    size_max = 2**64 - 1
    buf = ctypes.create_string_buffer(SLOT)
    for call, handle, bound in (
            (lambda: kvready._abi.memory_read(rig.mem.handle, 0, 0, 0, buf, size_max), rig.mem.handle,
             f"want offset + n <= {SLOT}"),
            (lambda: kvready._abi.memory_write(rig.mem.handle, 0, 0, 0, buf, size_max), rig.mem.handle,
             f"want offset + n <= {SLOT}"),
            (lambda: kvready._abi.sim_read(rig.dev.handle, rig.dev.alloc(SLOT), buf, size_max), rig.dev.handle,
             "want n <= 1048576"),
            (lambda: kvready._abi.sim_write(rig.dev.handle, rig.dev.alloc(SLOT), b"x", size_max), rig.dev.handle,
             "want n <= 1048576")):
        with pytest.raises(kvready.InvalidArgumentError, match=re.escape(bound)) as ei:
            kvready._abi.check(call(), handle)
        assert "internal" not in str(ei.value)


def test_a_handle_of_the_wrong_kind_keeps_its_error_under_itself(rig):
    import ctypes
    r = kvready._abi.CRound()
    st = kvready._abi.progress(rig.dev.handle, ctypes.byref(r), None, None, 0)
    with pytest.raises(kvready.BadHandleError, match="is a device handle; want an engine handle"):
        kvready._abi.check(st, rig.dev.handle)


def test_the_physical_disposition_is_apart_from_the_outcome(rig):
    """SPEC §4 rule 19: a served publish's memory is QUIESCED_SUCCESS once its
    access is proven over, and so is a miss's (a miss is no failure); only
    the reusable dispositions say so."""
    store = kvready.open_backend("mem", rig.mem)
    eng = rig.engine(store)
    rows = rig.rows(1, fill=ord("p"))
    with eng.lend(kvready.Request.publish(rows)) as pub:
        info = settle(eng, pub)
        assert info.physical == kvready.Physical.QUIESCED_SUCCESS and info.physical.reusable
    waiting = eng.lend(kvready.Request.fetch(rig.rows(1, tag=0x33)))
    assert waiting.info().physical in (kvready.Physical.NOT_EXPOSED, kvready.Physical.ACTIVE, kvready.Physical.QUIESCING)
    info = settle(eng, waiting)
    assert info.outcome == kvready.OutcomeKind.MISSED
    assert info.physical == kvready.Physical.QUIESCED_SUCCESS, "a miss is no failure: its memory quiesced after success"
    waiting.release()
    assert not kvready.Physical.QUIESCING.reusable and not kvready.Physical.IN_DOUBT.reusable
    assert kvready.Physical.NOT_EXPOSED.reusable and kvready.Physical.QUIESCED_FAILURE.reusable
