"""A device written in Python, whose copies complete out of order."""

from __future__ import annotations

import threading

import kvready
from conftest import EXTENT, SLOT, Store, name


class OutOfOrder(kvready.Device):
    """Copies complete when the test says, in any order. Deliberately, an
    event covers only the copies queued since the previous record, so it may
    read complete before an earlier one: kvready must still wait for every
    earlier event."""

    def __init__(self):
        super().__init__()
        self.mem: dict[int, bytearray] = {}
        self.copies: list[dict] = []
        self.marks = [0]
        self.lock = threading.Lock()

    def alloc(self, addr):
        self.mem[addr] = bytearray(SLOT)
        return addr

    def copy(self, to_device, device, host, nbytes):
        if device not in self.mem:
            raise kvready.CopyRefusedError(f"no device block at {device:#x}")
        with self.lock:
            self.copies.append(dict(to_device=to_device, device=device, host=host, n=nbytes, done=False))

    def record(self):
        with self.lock:
            self.marks.append(len(self.copies))
            return (self.marks[-2], self.marks[-1])

    def query(self, event):
        lo, hi = event
        with self.lock:
            return all(c["done"] for c in self.copies[lo:hi])

    def complete(self, i):
        c = self.copies[i]
        view = kvready.host_memory(c["host"], c["n"])
        if c["to_device"]:
            self.mem[c["device"]][:] = view
        else:
            view[:] = self.mem[c["device"]]
        with self.lock:
            c["done"] = True


def test_a_python_device_whose_copies_complete_out_of_order(rig):
    dev = OutOfOrder()
    store = Store(rig.mem)
    for k in range(3):
        store.put(EXTENT, name(k, 0x61), bytes([ord("a") + k]) * SLOT)
    eng = rig.engine(store, device=dev)
    leases = []
    for k in range(3):  # one lease per round: three events
        row = kvready.Row(name(k, 0x61), 0, 0, dev.alloc(0x1000 * (k + 1)))
        lease = eng.lend(kvready.Request.fetch([row]))
        for _ in range(2000):
            eng.progress()
            if eng.info(lease).state == kvready.State.ACCESS_FENCED:
                break
            eng.sync(5)
        assert eng.info(lease).state == kvready.State.ACCESS_FENCED
        leases.append(lease)
    assert len(dev.copies) == 3 and len(dev.marks) == 4

    def states():
        eng.sync(5)
        return [eng.info(l).state for l in leases]

    dev.complete(2)  # the newest lands first: nothing is complete yet
    assert states() == [kvready.State.ACCESS_FENCED] * 3
    dev.complete(0)  # the oldest: only it
    assert states() == [kvready.State.LOGICALLY_COMPLETE, kvready.State.ACCESS_FENCED, kvready.State.ACCESS_FENCED]
    dev.complete(1)  # the middle one: both it and the newest
    assert states() == [kvready.State.LOGICALLY_COMPLETE] * 3
    for k, l in enumerate(leases):
        assert dev.mem[0x1000 * (k + 1)] == bytes([ord("a") + k]) * SLOT
        assert l.readiness() == kvready.Readiness(32, 0)
    eng.release_many(leases)
    assert dev.callback_errors == [] and store.callback_errors == []


def test_a_copy_the_python_device_refuses_quarantines_nothing(rig):
    dev = OutOfOrder()
    store = Store(rig.mem)
    store.put(EXTENT, name(0, 0x62), b"r" * SLOT)
    eng = rig.engine(store, device=dev)
    with eng.lend(kvready.Request.fetch([kvready.Row(name(0, 0x62), 0, 0, 0xDEAD000)])) as lease:
        info = lease.wait(timeout=30)
        assert info.state == kvready.State.LOGICALLY_COMPLETE
        assert lease.readiness() == kvready.Readiness(0, 0)
    lease.wait(kvready.Until.RELEASED, timeout=30)
    assert eng.stats().slots_quarantined == 0


def test_a_lost_python_device_refuses_new_leases(rig):
    class Lost(OutOfOrder):
        def lost(self):
            return "Xid 79: fell off the bus"

    dev = Lost()
    eng = rig.engine(Store(rig.mem), device=dev)
    eng.progress()
    try:
        eng.lend(kvready.Request.fetch([kvready.Row(name(0), 0, 0, dev.alloc(0x1000))]))
    except kvready.DeviceLostError as e:
        assert "device" in str(e)
    else:
        raise AssertionError("a lend on a lost device was accepted")
