"""A Redis store that is down, through open_backend("redis://..."): after a
failed call the backend holds it for down (breaker_failures=1 in the URL's
query), and the next fetch is refused at once, a rejection that says "store
unavailable" — a failure, never a miss — with every slot back. Bad breaker
parameters are refused, naming the parameter."""

from __future__ import annotations

import pytest

import kvready
from conftest import redis_server


@pytest.fixture
def own_redis():
    """A redis-server of the test's own, which it may kill: (url, process)."""
    with redis_server() as server:
        yield server


def test_a_dead_store_fails_fast(rig, own_redis):
    url, proc = own_redis
    store = kvready.open_backend(url + "?breaker_failures=1&breaker_probe=1h", rig.mem)
    eng = rig.engine(store)
    rows = rig.rows(2, fill=ord("p"))
    with eng.lend(kvready.Request.publish(rows)) as pub:
        assert eng.wait(pub, kvready.Until.SETTLED, timeout=30).outcome == kvready.OutcomeKind.SERVED
    proc.kill()
    proc.wait(30)
    with eng.lend(kvready.Request.fetch(rig.rows(2, first=2))) as first:
        info = eng.wait(first, kvready.Until.SETTLED, timeout=30)
        assert info.outcome == kvready.OutcomeKind.FAILED, info  # it went to the store, and met it dead
    fresh = rig.rows(2, fill=ord("f"), first=4)
    with eng.lend(kvready.Request.fetch(fresh)) as lease:
        info = eng.wait(lease, kvready.Until.SETTLED, timeout=30)
        assert info.outcome == kvready.OutcomeKind.REJECTED, info
        assert "store unavailable" in info.reason, info.reason
        assert info.outcome != kvready.OutcomeKind.MISSED
    for r in fresh:  # nothing was fetched into the device rows
        assert rig.dev.read(r.device, 64) == bytes([ord("f") + r.block - 4]) * 64
    eng.wait(lease, kvready.Until.RELEASED, timeout=30)
    assert eng.stats().slots_free == 8, "every slot is back"


@pytest.mark.parametrize("query,what", [
    ("breaker_failures=many", "breaker_failures"),
    ("breaker_failures=-1", "breaker_failures"),
    ("breaker_failures=1&breaker_failures=2", "breaker_failures given 2 times"),
    ("breaker_probe=soon", "breaker_probe"),
    ("breaker_probe=2s&breaker_probe_max=1s", "breaker_probe_max"),
    ("breaker_probe_max=50ms", "breaker_probe 100ms (not in the URL"),
    ("pool_size=many", "pool_size"),
])
def test_bad_breaker_parameters_are_refused(rig, redis_url, query, what):
    """A wrong URL is a configuration error: fix it, retrying changes
    nothing. It is a BackendError (and a ValueError), never the error of an
    unavailable store."""
    with pytest.raises(kvready.BackendConfigError) as e:
        kvready.open_backend(redis_url + "?" + query, rig.mem)
    assert what in str(e.value)
    assert isinstance(e.value, kvready.BackendError)
    assert isinstance(e.value, ValueError)
    assert not isinstance(e.value, kvready.StoreUnavailableError)
    assert e.value.status == kvready.errors.CONFIG


def test_a_dead_store_at_open_is_unavailable(rig, own_redis):
    """A store that does not answer is unavailable: retry later. The URL is
    fine, so it is never a configuration error."""
    url, proc = own_redis
    proc.kill()
    proc.wait(30)
    with pytest.raises(kvready.StoreUnavailableError) as e:
        kvready.open_backend(url + "?breaker_failures=1", rig.mem)
    assert "does not answer PING" in str(e.value)
    assert isinstance(e.value, kvready.BackendError)
    assert isinstance(e.value, ConnectionError)
    assert not isinstance(e.value, kvready.BackendConfigError)
    assert e.value.status == kvready.errors.UNAVAILABLE
