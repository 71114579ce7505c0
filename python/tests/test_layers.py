"""Layer by layer (SPEC §4 rule 16) from Python: an engine given the layout
copies a fetch one layer at a time, one event per layer; the tests step the
simulated device's copy stream one event at a time, so that what each layer
reads is decided by the test, never by timing."""

from __future__ import annotations

import selectors
import time

import pytest

import kvready
from conftest import EXTENT, SLOT, name

# Two layers in a 64-byte slot: layer 0's key and value in its first half,
# layer 1's in its second.
LAYOUT = {"tokens_per_block": 32, "pool_groups": {"0": [SLOT]},
          "layer_groups": [{"kind": "attention", "pool_group": 0, "layers": [0, 1]}],
          "buffers": [{"layer": l, "role": r, "pool": [0, 0], "offset": 32 * l + 16 * i, "size": 16}
                      for l in (0, 1) for i, r in enumerate(("key", "value"))]}
CONTENT = b"A" * 32 + b"B" * 32  # layer 0's bytes, then layer 1's


@pytest.fixture
def stepped():
    """A layered engine over a stepped device (only the test completes its
    events) and the mem backend holding one row; shut down after the test."""
    mem = kvready.Memory([kvready.Group(4, SLOT)])
    dev = kvready.SimDevice(1 << 16)
    store = kvready.open_backend("mem", mem)
    store.put(EXTENT, name(1), CONTENT)
    eng = kvready.Engine(mem, 0, backend=store, device=dev, layout=LAYOUT, request_timeout=0.2, drain_grace=0.1)

    class Rig:
        pass

    r = Rig()
    r.mem, r.dev, r.store, r.eng = mem, dev, store, eng
    yield r
    dev.complete_all()
    eng.shutdown(30)
    eng.free()


def fenced(r, row_name=name(1)):
    """A fetch of one row, run until its copies are queued (one event per
    layer on the copy stream, none complete)."""
    row = kvready.Row(row_name, 0, 0, r.dev.alloc(SLOT))
    lease = r.eng.lend(kvready.Request.fetch([row]))
    for _ in range(1000):
        if lease.info().state == kvready.State.ACCESS_FENCED:
            return lease, row
        sel = selectors.DefaultSelector()
        sel.register(r.eng, selectors.EVENT_READ)
        sel.select(timeout=0.01)
        sel.close()
        r.eng.progress()
    pytest.fail(f"the fetch never reached ACCESS_FENCED: {lease.info()}")


def woken_until(r, lease, layer, want):
    """Sleep on the engine's fd and run rounds until layer reads want (10 s
    at most); whether the fd was readable on the way."""
    sel = selectors.DefaultSelector()
    sel.register(r.eng, selectors.EVENT_READ)
    woken = False
    try:
        for _ in range(100):
            woken |= bool(sel.select(timeout=0.1))
            r.eng.progress()
            if lease.layer_status(layer) == want:
                return woken
    finally:
        sel.close()
    pytest.fail(f"layer {layer} never read {want.name}")


def test_the_engine_takes_its_layers_from_the_layout(stepped):
    assert stepped.eng.layers == 2
    mem = kvready.Memory([kvready.Group(4, SLOT)])
    dev = kvready.SimDevice(1 << 16)
    with kvready.Engine(mem, 32, backend=kvready.open_backend("mem", mem), device=dev) as whole:
        assert whole.layers == 1  # no layout: the whole slots are one layer
    # Two layer groups sharing pool group 0 (as the reference's layouts may):
    # each is staged in a memory group of its own, with the pool group's slot.
    shared = {**LAYOUT, "layer_groups": [{**LAYOUT["layer_groups"][0], "layers": [0]},
                                         {**LAYOUT["layer_groups"][0], "layers": [1]}]}
    two = kvready.Memory([kvready.Group(4, SLOT), kvready.Group(4, SLOT)])
    with kvready.Engine(two, 0, backend=kvready.open_backend("mem", two), device=dev, layout=shared) as eng:
        assert eng.layers == 2


@pytest.mark.parametrize("layout,tokens,needle", [
    (LAYOUT, 16, "tokens_per_block 16, but config.layout has 32"),
    ("{not json", 0, "config.layout"),
    # Two layer groups sharing pool group 0: two memory groups wanted, the memory has one.
    ({**LAYOUT, "layer_groups": [{**LAYOUT["layer_groups"][0], "layers": [0]},
                                 {**LAYOUT["layer_groups"][0], "layers": [1]}]}, 0, "one per memory group"),
])
def test_a_layout_the_engine_cannot_use_is_refused_naming_why(layout, tokens, needle):
    mem = kvready.Memory([kvready.Group(4, SLOT)])
    dev = kvready.SimDevice(1 << 16)
    with pytest.raises(kvready.InvalidArgumentError, match=needle):
        kvready.Engine(mem, tokens, backend=kvready.open_backend("mem", mem), device=dev, layout=layout)


def test_each_layer_is_ready_once_its_own_copies_landed(stepped):
    r = stepped
    lease, row = fenced(r)
    assert [lease.layer_status(l) for l in range(2)] == [kvready.LayerStatus.PENDING] * 2
    assert not lease.layer_ready(0)
    with pytest.raises(kvready.TimedOutError):
        lease.wait_layer(0, timeout=0.02)  # nothing landed: the wait is bounded

    r.eng.progress()  # drain the fd: what wakes it next is the layer
    assert r.dev.complete_next() == 1  # layer 0's event
    assert woken_until(r, lease, 0, kvready.LayerStatus.READY), "a layer landing makes the wake fd readable"
    assert lease.layer_ready(0) and not lease.layer_ready(1)
    assert r.eng.layer_status(lease, 0) == (kvready.LayerStatus.READY, kvready.Readiness(32, 0))
    assert r.eng.layer_status(lease, 1) == (kvready.LayerStatus.PENDING, None)
    with pytest.raises(kvready.NotReadyError):
        lease.readiness()  # the lease is ready only once every layer is
    assert r.dev.read(row.device, SLOT) == CONTENT[:32] + bytes(32)

    assert r.dev.complete_next() == 1  # layer 1's
    assert lease.wait_layer(1, timeout=10) == kvready.Readiness(usable_until=32, restart_floor=0)
    assert r.dev.read(row.device, SLOT) == CONTENT
    assert lease.wait(timeout=10).state == kvready.State.LOGICALLY_COMPLETE
    assert lease.readiness() == kvready.Readiness(32, 0)
    lease.release()


def test_a_failed_layer_ends_its_wait_at_once_and_the_one_before_stays_ready(stepped):
    r = stepped
    lease, row = fenced(r)
    assert r.dev.complete_next() == 1
    assert r.dev.fail_next() == 1  # layer 1's copy fails
    with pytest.raises(kvready.LayerFailedError, match="layer 1") as e:
        lease.wait_layer(1, timeout=10)
    assert e.value.status == kvready.errors.LAYER_FAILED
    assert lease.layer_status(1) == kvready.LayerStatus.FAILED
    assert lease.wait_layer(0, timeout=10) == kvready.Readiness(32, 0)
    assert r.dev.read(row.device, 32) == CONTENT[:32]
    with pytest.raises(kvready.NotReadyError):
        lease.readiness()
    lease.release()


def test_refusals_name_what_was_wrong(stepped):
    r = stepped
    lease, _ = fenced(r)
    with pytest.raises(kvready.InvalidArgumentError, match="layer 2"):
        lease.layer_status(2)
    with pytest.raises(kvready.InvalidArgumentError):
        lease.wait_layer(-1, timeout=1)
    pub = r.eng.lend(kvready.Request.publish([kvready.Row(name(9), 0, 0, r.dev.alloc(SLOT))]))
    with pytest.raises(kvready.NotReadyError, match="publish"):
        pub.layer_ready(0)
    pub.cancel()
    r.dev.complete_all()
    lease.release()


def test_a_compute_stream_runs_behind_another_streams_event():
    dev = kvready.SimDevice(1 << 16, bandwidth=1e9)
    a, b = dev.stream(), dev.stream()
    assert (a.number, b.number) == (1, 2)
    a.compute(0.001)
    done_a = a.record()
    b.wait(done_a)
    done_b = b.record()
    for _ in range(1000):
        if done_b.query() != kvready.EventStatus.PENDING:
            break
        time.sleep(0.01)
    assert done_b.query() == kvready.EventStatus.COMPLETE
    assert done_a.query() == kvready.EventStatus.COMPLETE  # b waited behind a
    with pytest.raises(kvready.InvalidArgumentError, match="another stream"):
        a.wait(done_a)
    with pytest.raises(kvready.InvalidArgumentError, match="copy stream"):
        kvready.SimStream(dev, 0).compute(0.001)
    other = kvready.SimDevice(1 << 16, bandwidth=1e9)
    foreign = other.stream().record()  # another device's event is never taken for one of dev's
    with pytest.raises(kvready.InvalidArgumentError, match="no token"):
        dev.query(foreign)
    with pytest.raises(kvready.InvalidArgumentError, match="no token"):
        b.wait(foreign)
    other.shut()
    with pytest.raises(kvready.InvalidArgumentError, match="one timing model"):
        kvready.SimDevice(1 << 16, latency=1e-3, bandwidth=1e9)
    with pytest.raises(kvready.InvalidArgumentError, match="positive"):
        kvready.SimDevice(1 << 16, bandwidth=0)
    dev.shut()


def until_state(r, lease, state):
    """Complete what the stepped device queued and run rounds until lease
    reaches state (1000 rounds at most)."""
    for _ in range(1000):
        r.dev.complete_all()
        r.eng.progress()
        if lease.info().state == state:
            return
        time.sleep(0.001)
    pytest.fail(f"{lease} never reached {state.name}: {lease.info()}")


def test_a_layerwise_publish_copies_each_layer_behind_its_compute(stepped):
    r = stepped
    compute = r.dev.stream()
    row = kvready.Row(name(2), 0, 0, r.dev.alloc(SLOT))
    lease = r.eng.lend(kvready.Request.publish([row], layerwise=True))
    until_state(r, lease, kvready.State.GRANTED)
    with pytest.raises(kvready.InvalidArgumentError, match="next layer is 0"):
        lease.layer_computed(1)
    other = kvready.SimDevice(1 << 16)
    with pytest.raises(kvready.InvalidArgumentError, match="another device"):
        lease.layer_computed(0, other.stream().record())
    other.shut()

    r.dev.write(row.device, CONTENT[:32])  # layer 0's kernel
    compute.compute(0.001)
    lease.layer_computed(0, compute.record())
    with pytest.raises(kvready.InvalidArgumentError, match="already reported"):
        lease.layer_computed(0)
    for _ in range(3):
        r.eng.progress()
    assert r.dev.complete_next(0) == 0, "the copy stream waits behind the compute stream's event"
    assert r.dev.complete_next(compute) == 1
    assert r.dev.complete_next(0) == 1  # layer 0's copies landed
    assert lease.info().state == kvready.State.GRANTED  # not submitted: a layer is missing
    assert r.store.get(EXTENT, name(2)) is None
    r.dev.write(row.device + 32, CONTENT[32:])
    lease.layer_computed(1)  # computed and synchronised already
    until_state(r, lease, kvready.State.LOGICALLY_COMPLETE)
    assert lease.info().outcome == kvready.OutcomeKind.SERVED
    lease.release()
    assert r.store.get(EXTENT, name(2)) == CONTENT


def test_a_layerwise_publish_released_before_its_last_layer_is_withdrawn(stepped):
    r = stepped
    row = kvready.Row(name(3), 0, 0, r.dev.alloc(SLOT))
    lease = r.eng.lend(kvready.Request.publish([row], layerwise=True))
    until_state(r, lease, kvready.State.GRANTED)
    lease.layer_computed(0)
    lease.release()
    with pytest.raises(kvready.InvalidArgumentError, match="withdrawn"):
        lease.layer_computed(1)
    until_state(r, lease, kvready.State.RELEASED)
    assert r.store.get(EXTENT, name(3)) is None
    assert r.eng.stats().slots_free == 4


class QueueDevice(kvready.Device):
    """A device in Python whose copies happen at once; wait records the
    event it was handed and how many copies were queued then."""

    def __init__(self):
        super().__init__()
        self.mem = bytearray(4096)
        self.copies = 0
        self.waits = []

    def copy(self, to_device, device, host, nbytes):
        staging = kvready.host_memory(host, nbytes)
        at = device - 0x1000
        if to_device:
            self.mem[at:at + nbytes] = staging
        else:
            staging[:] = self.mem[at:at + nbytes]
        self.copies += 1

    def record(self):
        return self.copies

    def query(self, event):
        return True

    def wait(self, event):
        self.waits.append((event, self.copies))


class NoWaitDevice(QueueDevice):
    wait = kvready.Device.wait  # not overridden: no wait callback


@pytest.mark.parametrize("cls", [QueueDevice, NoWaitDevice])
def test_a_python_device_is_handed_the_event_it_waits_for(cls):
    mem = kvready.Memory([kvready.Group(4, SLOT)])
    dev = cls()
    dev.mem[:SLOT] = CONTENT
    store = kvready.open_backend("mem", mem)
    with kvready.Engine(mem, 0, publisher=store, device=dev, layout=LAYOUT) as eng:
        lease = eng.lend(kvready.Request.publish([kvready.Row(name(4), 0, 0, 0x1000)], layerwise=True))
        assert lease.wait(kvready.Until.GRANTED, timeout=10).state == kvready.State.GRANTED
        compute_event = object()  # what a manager's torch.cuda.Event would be
        if cls is NoWaitDevice:
            with pytest.raises(kvready.InvalidArgumentError, match="no wait"):
                lease.layer_computed(0, compute_event)
            assert dev._waits == {}, "a refused report keeps no event"
            lease.cancel()
            return
        lease.layer_computed(0, compute_event)
        lease.layer_computed(1)
        info = lease.wait(timeout=10)
        assert info.outcome == kvready.OutcomeKind.SERVED
        assert dev.waits == [(compute_event, 0)], "waited for once, before layer 0's copies"
        assert dev._waits == {}  # the token was taken
        lease.release()
    assert store.get(EXTENT, name(4)) == CONTENT


class RaisingWaitDevice(QueueDevice):
    def wait(self, event):
        raise RuntimeError("this stream cannot wait for that event")


def test_a_wait_that_raises_refuses_the_layer_and_nothing_is_submitted():
    mem = kvready.Memory([kvready.Group(4, SLOT)])
    dev = RaisingWaitDevice()
    store = kvready.open_backend("mem", mem)
    with kvready.Engine(mem, 0, publisher=store, device=dev, layout=LAYOUT) as eng:
        lease = eng.lend(kvready.Request.publish([kvready.Row(name(5), 0, 0, 0x1000)], layerwise=True))
        lease.wait(kvready.Until.GRANTED, timeout=10)
        lease.layer_computed(0, object())
        lease.layer_computed(1)
        info = lease.wait(timeout=10)
        assert (info.outcome, info.exposed) == (kvready.OutcomeKind.FAILED, False), info
        assert "refused" in info.reason
        assert [type(e) for e in dev.callback_errors] == [RuntimeError]
        lease.release()
    assert store.get(EXTENT, name(5)) is None
