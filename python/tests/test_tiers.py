"""A backend of tiers from Python in one call (kvready.open_tiers): a local
tier bounded in bytes in front of a real redis-server. A lease is fetched
through the tiers — served by Redis, promoted into the local tier — and the
next fetch of the same rows is a local hit that never asks Redis; per-tier
stats are frozen dataclasses. A tier that fails to open raises its own error
naming the tier and leaves nothing open; a tier that fails a fetch fails the
lease, never a miss."""

from __future__ import annotations

import dataclasses

import pytest

import kvready
from conftest import EXTENT, SLOT, redis_server


def settle_and_release(eng, lease):
    info = eng.wait(lease, kvready.Until.SETTLED, timeout=30)
    lease.release()
    eng.wait(lease, kvready.Until.RELEASED, timeout=30)
    return info


def test_a_lease_through_the_tiers_then_from_the_local_tier(rig, redis_url):
    shared = kvready.open_backend(redis_url, rig.mem)
    rows = rig.rows(2, tag=0x7E)
    for r in rows:
        shared.put(EXTENT, r.name, bytes([0x60 + r.block]) * SLOT)
    store = kvready.open_tiers([f"mem:?capacity_bytes={4 * SLOT}", redis_url], rig.mem)
    assert isinstance(store, kvready.StoreBackend)
    before = store.tier_stats()
    assert [s.name for s in before] == ["mem", "redis"]
    assert before[0].bytes == 0 and before[1].bytes is None  # a shared store does not say
    eng = rig.engine(store)

    # The first fetch: the local tier misses, Redis serves, the rows are promoted.
    info = settle_and_release(eng, eng.lend(kvready.Request.fetch(rows)))
    assert info.outcome == kvready.OutcomeKind.SERVED, info
    for r in rows:
        assert rig.dev.read(r.device, SLOT) == bytes([0x60 + r.block]) * SLOT
    local, remote = store.tier_stats()
    assert (local.handed, local.hits, local.misses, local.promoted) == (2, 0, 2, 2), local
    assert (remote.handed, remote.hits, remote.misses, remote.failed) == (2, 2, 0, 0), remote
    assert local.bytes == 2 * SLOT

    # The second fetch of the same rows, into fresh device blocks: a local
    # hit; Redis is not asked.
    again = [kvready.Row(r.name, r.group, r.block, rig.dev.alloc(SLOT)) for r in rows]
    info = settle_and_release(eng, eng.lend(kvready.Request.fetch(again)))
    assert info.outcome == kvready.OutcomeKind.SERVED, info
    for r in again:
        assert rig.dev.read(r.device, SLOT) == bytes([0x60 + r.block]) * SLOT
    local, remote = store.tier_stats()
    assert (local.handed, local.hits, local.misses) == (4, 2, 2), local
    assert remote.handed == 2, "the shared tier was asked again for rows the local tier held"
    assert local.hit_rate == 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        local.hits = 7  # type: ignore[misc]
    assert eng.stats().slots_free == 8


def test_a_tier_that_fails_fails_the_lease_never_a_miss(rig):
    with redis_server() as (url, proc):
        store = kvready.open_tiers(["mem", url], rig.mem)
        eng = rig.engine(store)
        proc.kill()
        proc.wait(30)
        rows = rig.rows(2, tag=0x7F, fill=ord("k"))
        info = settle_and_release(eng, eng.lend(kvready.Request.fetch(rows)))
        assert info.outcome == kvready.OutcomeKind.FAILED, info
        assert 'tier 1 "redis"' in info.reason, info.reason
        for r in rows:  # the engine copied nothing into the device rows
            assert rig.dev.read(r.device, SLOT) == bytes([ord("k") + r.block]) * SLOT
        local, remote = store.tier_stats()
        assert (local.misses, remote.failed, remote.misses, remote.hits) == (2, 2, 0, 0), (local, remote)
        assert eng.stats().slots_free == 8


def test_a_tier_that_does_not_open_is_named_and_nothing_stays_open():
    mem = kvready.Memory([kvready.Group(4, SLOT)])
    with redis_server() as (url, proc):
        proc.kill()
        proc.wait(30)
        with pytest.raises(kvready.StoreUnavailableError) as e:
            kvready.open_tiers(["mem:?capacity_bytes=1024", url], mem)
        assert f"tier 1 ({url})" in str(e.value) and "nothing was opened" in str(e.value)
        with pytest.raises(kvready.BackendConfigError) as e:
            kvready.open_tiers(["mem", url + "?breaker_failures=-1"], mem)
        assert "tier 1 (" in str(e.value)
    with pytest.raises(kvready.InvalidArgumentError, match=r"tier 0 \(gopher://x\)"):
        kvready.open_tiers(["gopher://x", "mem"], mem)
    with pytest.raises(kvready.InvalidArgumentError, match="capacity_bytes"):
        kvready.open_tiers(["mem:?capacity_bytes=-5", "mem"], mem)
    # Refused at the border: a string is not a list of URLs; every URL is a str.
    with pytest.raises(kvready.InvalidArgumentError, match="want a list of URLs"):
        kvready.open_tiers("mem", mem)
    with pytest.raises(kvready.InvalidArgumentError, match="tier 1"):
        kvready.open_tiers(["mem", b"mem"], mem)
    with pytest.raises(kvready.InvalidArgumentError, match="tier 0"):
        kvready.open_tiers(["mem\0redis://x"], mem)
    with pytest.raises(kvready.InvalidArgumentError, match="want 1 to 16 tiers"):
        kvready.open_tiers([], mem)
    store = kvready.open_tiers(["mem", "mem"], mem)
    assert [s.name for s in store.tier_stats()] == ["mem", "mem-1"]
    with pytest.raises(kvready.BusyError):
        mem.close()  # an open backend of tiers holds the memory ...
    store.close()
    mem.close()  # ... and no refusal left one holding it


def test_every_tier_counter_reaches_tier_stats():
    """Every field of kvready_tier_stats, filled with a distinct value,
    reaches the TierStats field of its name (bytes only when sized), and
    TierStats has no field the C struct lacks."""
    from kvready import _abi
    from kvready.backend import _tier_stats
    c = _abi.CTierStats()
    counters = [f for f, _ in c._fields_ if f not in ("name", "bytes", "sized", "_pad")]
    for i, f in enumerate(counters):
        setattr(c, f, 1000 + i)
    c.name, c.bytes = b"redis-1", 4096
    s = _tier_stats(c)
    assert {f.name for f in dataclasses.fields(s)} == {*counters, "name", "bytes"}
    for i, f in enumerate(counters):
        assert getattr(s, f) == 1000 + i, f
    assert (s.name, s.bytes) == ("redis-1", None), "bytes of a tier that does not say is None, never 0"
    c.sized = 1
    assert _tier_stats(c).bytes == 4096
