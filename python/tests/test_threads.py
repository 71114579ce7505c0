"""SPEC §4 rule 18 through the binding: eight Python threads calling one
engine at once. ctypes releases the GIL during every call, so the calls
overlap inside the library; before the engine serialised its callers this
left slots held after every lease was released, leases stuck waiting, or the
engine halted on a broken invariant."""

from __future__ import annotations

import threading

import kvready
from conftest import SLOT, name

THREADS = 8
LEASES = 100


def lifecycles(eng, dev, store, tid, errors):
    """One thread's share: publish a row, fetch it back (half the time
    asking for a layer first), check its bytes, and release; poll the engine
    in between, as a connector's worker threads do."""
    try:
        for k in range(LEASES):
            tag = (tid * LEASES + k) % 251
            nm = name(tid * 1000 + k, tag=0x50 + tid)
            src = dev.alloc(SLOT)
            dev.write(src, bytes([tag]) * SLOT)
            with eng.lend(kvready.Request.publish([kvready.Row(nm, 0, 0, src)])) as pub:
                info = eng.wait(pub, kvready.Until.SETTLED, timeout=30)
                assert info.outcome == kvready.OutcomeKind.SERVED, info
            dst = dev.alloc(SLOT)
            with eng.lend(kvready.Request.fetch([kvready.Row(nm, 0, 0, dst)])) as f:
                if k % 2:
                    f.wait_layer(0, timeout=30)
                eng.progress()
                eng.stats()
                info = eng.wait(f, kvready.Until.SETTLED, timeout=30)
                assert info.outcome == kvready.OutcomeKind.SERVED, info
                assert f.readiness().usable_until == 32
            assert dev.read(dst, SLOT) == bytes([tag]) * SLOT, "a fetch reads the bytes its own publish saved"
    except Exception as exc:  # reported to the main thread, which fails the test
        errors.append((tid, exc))


def test_eight_threads_on_one_engine_leave_every_slot_free(rig):
    store = kvready.open_backend("mem", rig.mem)
    eng = rig.engine(store)
    errors: list = []
    threads = [threading.Thread(target=lifecycles, args=(eng, rig.dev, store, t, errors)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "every thread ended within its bound"
    assert not errors, errors
    eng.sync(timeout=30)
    st = eng.stats()
    assert st.slots_free == 8, st
    assert st.slots_held == 0 and st.slots_quarantined == 0, st
    assert st.invariant_breaches == 0 and not st.halted, st
    assert st.lent == 2 * THREADS * LEASES
    assert st.released == 2 * THREADS * LEASES


def test_each_thread_reads_its_own_lease_info(rig):
    """The binding's out-parameters are per thread: a thread asking about its
    lease never reads another thread's answer."""
    store = kvready.open_backend("mem", rig.mem)
    eng = rig.engine(store)
    leases = []
    for t in range(4):
        leases.append(eng.lend(kvready.Request.fetch([kvready.Row(name(t, tag=0x70), 0, 0, rig.dev.alloc(SLOT))])))
    for lease in leases:
        eng.wait(lease, kvready.Until.SETTLED, timeout=30)
    wrong: list = []

    def ask(lease):
        for _ in range(2000):
            if eng.info(lease).lease != int(lease):
                wrong.append(lease)
                return

    threads = [threading.Thread(target=ask, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not wrong
    for lease in leases:
        lease.release()
