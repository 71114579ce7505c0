"""The batched calls' fast paths (SPEC §5: what the binding adds per lease)
keep every check the one-by-one path makes (SPEC §4 rule 18): a batch is
checked in bulk against the C type it crosses into, and a value that does not
fit — in a list, a tuple, a numpy array, or a Lease whose handle was tampered
with — is refused before the library is called, naming the value and the
bound, and nothing is released. Out-parameters are the calling thread's own,
so threads lending one RequestBatch at once each get their own leases."""

from __future__ import annotations

import ctypes
import enum
import threading

import numpy as np  # python3-numpy: make deps installs it
import pytest

import kvready
from kvready import _abi
from kvready._border import integer, integers
from conftest import SLOT, name

U64 = "0 .. 18446744073709551615 (a C uint64_t)"


class Small(enum.IntEnum):
    A = 3


def _one_by_one(values, ctype):
    try:
        return [integer(v, ctype, "lease") for v in values], None
    except Exception as exc:  # noqa: BLE001 - compared with the bulk path's
        return None, (type(exc), str(exc))


def _bulk(values, ctype):
    try:
        return list(integers(values, ctype, "lease")), None
    except Exception as exc:  # noqa: BLE001
        return None, (type(exc), str(exc))


@pytest.mark.parametrize("ctype", [ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32, ctypes.c_uint32])
@pytest.mark.parametrize("values", [
    [], [0], [0, 2 ** 64 - 1], [2 ** 63 - 1, -(2 ** 63)], [2 ** 31 - 1, -(2 ** 31)], [2 ** 32 - 1],
    [1, -1], [1, 2 ** 64], [2 ** 31], [-(2 ** 31) - 1], [1, True], [False], [1, 1.5], [1, float("nan")],
    [1, "2"], [1, None], [Small.A, 4], [np.int64(5), 6], [np.uint64(2 ** 64 - 1)], [np.bool_(True)],
    (7, 8), np.array([1, 2], dtype=np.int64), np.array([1, -2], dtype=np.int64),
    np.array([2 ** 64 - 1], dtype=np.uint64), np.array([1, 0], dtype=np.bool_), np.array([1.0]),
    np.array([5], dtype=np.int8), np.array([], dtype=np.int64),
], ids=repr)
def test_the_bulk_check_refuses_and_takes_exactly_what_the_single_check_does(values, ctype):
    want, refused = _one_by_one(values, ctype)
    got, bulk_refused = _bulk(values, ctype)
    assert (got, bulk_refused) == (want, refused), f"{values!r} as {ctype.__name__}"


def test_the_bulk_check_reads_an_iterator_once():
    assert list(integers(iter([1, 2, 3]), ctypes.c_uint64, "lease")) == [1, 2, 3]
    assert list(integers((x for x in [4, 5]), ctypes.c_uint64, "lease")) == [4, 5]


def test_a_numpy_bool_is_refused_like_a_python_bool():
    with pytest.raises(kvready.InvalidArgumentError, match=r"lease is True \(a bool_\); want an integer"):
        integer(np.bool_(True), ctypes.c_uint64, "lease")


@pytest.fixture
def settled(rig):
    """An engine with three settled fetch leases (misses)."""
    eng = rig.engine(kvready.open_backend("mem", rig.mem))
    leases = eng.lend_many([kvready.Request.fetch(rig.rows(1, tag=0x30 + k, first=k)) for k in range(3)])
    for lease in leases:
        eng.wait(lease, timeout=10)
    return eng, leases


def _held(eng, leases):
    return eng.stats().slots_held, [i.state for i in eng.infos(leases)]


@pytest.mark.parametrize("bad", [
    lambda ls: np.array([l.handle for l in ls] + [-1], dtype=np.int64),
    lambda ls: [l.handle for l in ls] + [2 ** 64],
    lambda ls: tuple(ls) + (True,),
    lambda ls: list(ls) + [1.0],
], ids=["numpy-negative", "list-2**64", "tuple-bool", "list-float"])
def test_a_batch_with_a_value_that_does_not_fit_releases_nothing(settled, monkeypatch, bad):
    eng, leases = settled
    before = _held(eng, leases)
    assert before == (3, [kvready.State.LOGICALLY_COMPLETE] * 3)
    called = []
    real = _abi.release_many
    monkeypatch.setattr(_abi, "release_many", lambda *a: called.append(a) or real(*a))
    with pytest.raises(kvready.InvalidArgumentError) as err:
        eng.release_many(bad(leases))
    assert U64.split(" (")[0] in str(err.value) and "lease" in str(err.value), str(err.value)
    assert called == [], "refused before the library was called"
    assert _held(eng, leases) == before, "a refused batch changed nothing"


def test_a_lease_whose_handle_was_tampered_with_is_refused_not_truncated(settled):
    eng, leases = settled
    forged = kvready.Lease(eng, leases[1].handle + 2 ** 64)  # its low 64 bits name a live lease
    with pytest.raises(kvready.InvalidArgumentError, match="is out of range; want an integer in " + U64.replace("(", r"\(").replace(")", r"\)")):
        eng.release_many([leases[0], forged])
    assert _held(eng, leases) == (3, [kvready.State.LOGICALLY_COMPLETE] * 3)


def test_a_numpy_array_of_handles_releases_those_leases(settled):
    eng, leases = settled
    infos = eng.infos(np.array([l.handle for l in leases], dtype=np.uint64))
    assert [i.lease for i in infos] == [l.handle for l in leases]
    eng.release_many(np.array([l.handle for l in leases], dtype=np.uint64))
    eng.sync(10)
    assert [i.state for i in eng.infos(leases)] == [kvready.State.RELEASED] * 3
    assert eng.stats().slots_held == 0


def test_threads_lending_one_batch_at_once_each_get_their_own_leases():
    """lend_many answers into the calling thread's buffers: with the batch's
    own, a thread could read the handles another thread's call wrote there,
    and release that thread's leases."""
    threads, rounds, per = 4, 300, 4
    mem = kvready.Memory([kvready.Group(threads * per, SLOT)])
    dev = kvready.SimDevice(1 << 20, latency=1e-6)
    store = kvready.open_backend("mem", mem)
    eng = kvready.Engine(mem, 32, backend=store, device=dev, request_timeout=30, drain_grace=30)
    batch = kvready.RequestBatch([kvready.Request.fetch([kvready.Row(name(k), 0, 0, dev.alloc(SLOT))])
                                  for k in range(per)])
    got: list[list[int]] = [[] for _ in range(threads)]
    failures: list = []
    start = threading.Barrier(threads)

    def run(t):
        try:
            start.wait(30)
            for _ in range(rounds):
                leases = eng.lend_many(batch)
                got[t].extend(l.handle for l in leases)
                eng.release_many(leases)
                eng.progress()
        except Exception as exc:  # reported to the main thread, which fails the test
            failures.append((t, exc))

    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "every thread ended within its bound"
    assert not failures, failures
    every = [h for hs in got for h in hs]
    assert len(every) == threads * rounds * per
    assert len(set(every)) == len(every), "no lease was handed to two threads"
    assert eng.stats().lent == len(every)
    eng.shutdown(30)
    eng.free()
    store.close()
    dev.close()
    mem.close()


def test_a_batch_lends_what_it_packed_whatever_is_done_to_its_list(rig):
    eng = rig.engine(kvready.open_backend("mem", rig.mem))
    batch = kvready.RequestBatch([kvready.Request.fetch(rig.rows(1, tag=0x40 + k, first=k)) for k in range(2)])
    batch.requests.append(kvready.Request.fetch(rig.rows(1, first=5)))
    batch.requests.clear()
    assert len(batch) == 2
    leases = eng.lend_many(batch)
    assert len(leases) == 2 and eng.stats().lent == 2
    eng.release_many(leases)


def test_a_batch_larger_than_the_threads_buffers():
    n = 1500  # over the per-thread scratch's 1024
    mem = kvready.Memory([kvready.Group(n, SLOT)])
    dev = kvready.SimDevice(1 << 20, latency=1e-6)
    store = kvready.open_backend("instant:", mem)
    eng = kvready.Engine(mem, 32, backend=store, device=dev, request_timeout=30, drain_grace=30)
    ptr = dev.alloc(SLOT)
    batch = kvready.RequestBatch([kvready.Request.fetch([kvready.Row(name(k), 0, 0, ptr)]) for k in range(n)])
    leases = eng.lend_many(batch)
    assert len({l.handle for l in leases}) == n
    assert [i.lease for i in eng.infos(leases)] == [l.handle for l in leases]
    # A round that moves more leases than the thread's buffers hold hands
    # back the rest through kvready_changes: every lease once.
    seen: dict[int, int] = {}
    biggest = 0
    for _ in range(1000):
        dev.complete_all()
        rnd = eng.progress()
        assert len(set(rnd.changed.handles)) == len(rnd.changed), "each lease once per round"
        biggest = max(biggest, len(rnd.changed))
        seen.update(rnd.changed)
        if eng.count(kvready.State.LOGICALLY_COMPLETE) == n:
            break
    assert biggest > 1024, f"no round moved more than the buffers hold ({biggest})"
    assert set(seen) == set(leases.handles)
    eng.release_many(leases)
    eng.shutdown(60)
    assert eng.stats().released == n
    eng.free()
    store.close()
    dev.close()
    mem.close()


def test_a_lease_batch_is_the_sequence_of_its_leases(rig):
    eng = rig.engine(kvready.open_backend("mem", rig.mem))
    batch = eng.lend_many([kvready.Request.fetch(rig.rows(1, tag=0x50 + k, first=k)) for k in range(3)])
    assert isinstance(batch, kvready.LeaseBatch) and len(batch) == 3
    leases = list(batch)
    assert all(type(l) is kvready.Lease and l.engine is eng for l in leases)
    assert [l.handle for l in leases] == batch.handles == [i.lease for i in eng.infos(batch)]
    assert len(set(batch.handles)) == 3
    assert batch[0] == leases[0] and batch[-1] == leases[2] and batch[1:] == leases[1:]
    assert batch == leases and batch == tuple(leases) and leases[1] in batch
    assert batch != leases[:2] and batch != [None, None, None]
    assert repr(batch) == f"LeaseBatch({leases!r})"
    with pytest.raises(IndexError):
        batch[3]
    with pytest.raises(TypeError):
        hash(batch)
    for lease in leases:  # a miss from the store's own goroutine: Sync never waits on a backend's timing
        eng.wait(lease, timeout=10)
    eng.release_many(batch)
    eng.sync(10)
    assert [i.state for i in eng.infos(leases)] == [kvready.State.RELEASED] * 3


def test_a_lease_batch_keeps_its_own_handles(rig):
    """lend_many answers into the thread's scratch buffers: a batch copies
    them, so a later call on the same thread leaves an earlier batch as lent."""
    eng = rig.engine(kvready.open_backend("mem", rig.mem))
    first = eng.lend_many([kvready.Request.fetch(rig.rows(1, tag=0x60 + k, first=k)) for k in range(2)])
    kept = first.handles
    second = eng.lend_many([kvready.Request.fetch(rig.rows(1, tag=0x70 + k, first=k)) for k in range(2)])
    eng.progress()
    assert first.handles == kept and not set(kept) & set(second.handles)
    for lease in [*first, *second]:  # a miss from the store's own goroutine: Sync never waits on a backend's timing
        eng.wait(lease, timeout=10)
    eng.release_many(second)
    eng.release_many(first)
    eng.sync(10)
    assert eng.stats().released == 4


def test_a_lease_batch_of_another_engine_is_refused_and_changes_nothing(rig):
    eng = rig.engine(kvready.open_backend("mem", rig.mem))
    batch = eng.lend_many([kvready.Request.fetch(rig.rows(1, tag=0x80, first=0))])
    mem = kvready.Memory([kvready.Group(2, SLOT)])
    store = kvready.open_backend("mem", mem)
    other = kvready.Engine(mem, 32, backend=store, device=rig.dev)
    mine = other.lend_many([kvready.Request.fetch(rig.rows(1, tag=0x81, first=0))])
    assert mine.handles == batch.handles, "the same handle names a lease of each engine"
    for call in (other.release_many, other.infos):
        with pytest.raises(kvready.InvalidArgumentError, match="a LeaseBatch of another engine"):
            call(batch)
    assert other.info(mine[0]).state != kvready.State.RELEASED and other.stats().released == 0
    other.release_many(mine)
    other.shutdown(10)
    other.free()
    store.close()
    mem.close()
    eng.release_many(batch)


def test_an_empty_batch_lends_nothing_and_releases_nothing(rig):
    eng = rig.engine(kvready.open_backend("mem", rig.mem))
    empty = eng.lend_many([])
    assert len(empty) == 0 and list(empty) == [] and empty == []
    eng.release_many(empty)
    eng.release_many([])
    assert eng.infos(empty) == [] and eng.stats().lent == 0


def test_a_rounds_changes_are_the_sequence_of_its_pairs(rig):
    dev = kvready.SimDevice(1 << 16)  # completes only when told
    eng = rig.engine(kvready.open_backend("instant:", rig.mem), device=dev)
    ptr = dev.alloc(SLOT)
    leases = eng.lend_many([kvready.Request.fetch([kvready.Row(name(k, tag=0x90), 0, 0, ptr)]) for k in range(3)])
    rnd = eng.progress()
    ch = rnd.changed
    assert isinstance(ch, kvready.Changes) and len(ch) == 3
    pairs = list(ch)
    assert all(type(h) is int and type(s) is int for h, s in pairs)
    assert sorted(h for h, _ in pairs) == sorted(leases.handles)
    assert [eng.info(h).state for h, _ in pairs] == [s for _, s in pairs]
    assert ch == pairs and ch == tuple(pairs) and ch[0] == pairs[0] and ch[-1] == pairs[-1] and ch[1:] == pairs[1:]
    assert list(ch.handles) == [h for h, _ in pairs] and list(ch.states) == [s for _, s in pairs]
    assert dict(ch) == dict(pairs) and pairs[1] in ch and ch != pairs[:2]
    assert repr(ch) == f"Changes({pairs!r})"
    with pytest.raises(TypeError):
        hash(ch)
    later = eng.progress()
    assert ch == pairs, "a later round leaves an earlier round's changes as they were"
    assert not set(later.changed.handles) - set(leases.handles)
    eng.release_many(leases)
