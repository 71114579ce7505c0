"""One live engine per staging memory (SPEC §4 rule 17), through Python: a
second engine over memory a live one holds is refused, naming the holder,
and the first goes on; after a quarantine and a shutdown, a new engine over
the same memory inherits the quarantined slot, never lends it, and a late
writer that kept the row it was handed never reaches a new lease's bytes.
Every wait is bounded, and no test measures a duration."""

from __future__ import annotations

import pytest

import kvready
from conftest import EXTENT, SLOT, Store
from test_policy import SHORT, Held, stored_fetch


class LateWriter(Held):
    """Held, and it keeps the staging rows it was handed, to write into them
    whenever the test says — long after its engine is gone."""

    def __init__(self, memory):
        super().__init__(memory)
        self.kept = []

    def fetch(self, extent):
        self.kept += [(u.group, u.local, self.memory.row(u.group, u.local)) for u in extent.units]
        return super().fetch(extent)

    def write_late(self):
        for _, _, row in self.kept:
            row[:] = b"L" * SLOT


def test_a_second_engine_over_held_memory_is_refused_naming_the_holder(rig):
    store = Store(rig.mem)
    first = rig.engine(store)
    with pytest.raises(kvready.BusyError, match=r"engine#\d+ \(created .*\) holds it"):
        kvready.Engine(rig.mem, 32, backend=store, device=rig.dev)
    # The first engine goes on as if nothing happened.
    rows = rig.rows(1, tag=0xC1)
    store.put(EXTENT, rows[0].name, b"c" * SLOT)
    with first.lend(kvready.Request.fetch(rows)) as lease:
        assert lease.wait(timeout=30).outcome == kvready.OutcomeKind.SERVED
    assert rig.dev.read(rows[0].device, SLOT) == b"c" * SLOT
    rep = first.shutdown(30)
    assert rep.drained
    first.free()
    # Handed over: the memory is claimed at once, every slot free.
    second = rig.engine(store)
    st = second.stats()
    assert (st.slots_inherited, st.slots_free) == (0, 8)


def test_a_restart_never_relends_what_was_quarantined(rig):
    writer = LateWriter(rig.mem)
    eng = rig.engine(writer, **SHORT)
    _, req = stored_fetch(rig, writer, 0xC2)
    lease = eng.lend(req)
    assert lease.wait(kvready.Until.SETTLED, timeout=30).state == kvready.State.QUARANTINED
    assert len(writer.kept) == 1
    (group, local, _), = writer.kept
    lease.release()
    rep = eng.shutdown(30)
    assert rep.drained and rep.slots_quarantined == 1
    eng.free()

    store = Store(rig.mem)
    eng = rig.engine(store)
    st = eng.stats()
    assert (st.slots_inherited, st.slots_quarantined, st.slots_free) == (1, 1, 7)
    with pytest.raises(kvready.UngrantableError):
        eng.lend(kvready.Request.fetch(rig.rows(8, tag=0xC3)))
    leases = []
    for i in range(7):  # every slot that is free, each lease holding its own
        rows = rig.rows(1, tag=0xD0 + i)
        store.put(EXTENT, rows[0].name, bytes([0x40 + i]) * SLOT)
        lease = eng.lend(kvready.Request.fetch(rows))
        writer.write_late()
        assert lease.wait(timeout=30).outcome == kvready.OutcomeKind.SERVED
        writer.write_late()
        leases.append((lease, rows[0]))
    for i, (lease, row) in enumerate(leases):
        assert rig.dev.read(row.device, SLOT) == bytes([0x40 + i]) * SLOT, "a new lease reads its own bytes"
        lease.release()
    assert rig.mem.read(group, local) == b"L" * SLOT, "the late bytes stayed in the slot the writer kept"
    assert eng.shutdown(30).drained
    assert eng.stats().slots_inherited == 1
