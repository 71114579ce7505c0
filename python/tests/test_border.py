"""Every value a public call hands the C ABI is checked against the C type
it becomes (SPEC §4 rule 18, §7): the test walks the binding's argument
types — every integer and double argument of every prototype in
kvready._abi, and every integer field of the structs the binding fills —
and requires each to be either fed by the binding itself (a handle, a size
of its own buffer) or reached by a public entry point listed in CASES. Each
case is fed its bound + 1, a value under its range, inf, nan, a bool, a
string and a float: every one is refused with a kvready error naming the
argument and the bound, before any call into the library, and nothing
changes (the engine's counters and the lease are as they were)."""

from __future__ import annotations

import ctypes
import math

import pytest

import kvready
from kvready import _abi
from kvready._border import bounds
from conftest import SLOT, name

# Integer (and double) argument types of the C ABI. c_size_t is c_uint64 on a
# 64-bit machine: the bound is the same either way.
NUMERIC = (ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_double)

H = "handle"    # a kvready object's handle: the binding passes its own .handle
I = "internal"  # computed by the binding (a size of its own buffer, a flag it sets, a token it issued)

# Every prototype's numeric arguments, in order: H, I, or the CASES label
# that feeds it from a public entry point.
ARGUMENTS = {
    "version": (I,), "last_error": (H, I), "profile_validate": (I,), "layout_id": (I,),
    "names": (I, I, I, "group", I),
    "memory_over": (I,), "memory_write": (H, "group", "local", "offset", I),
    "memory_read": (H, "group", "local", I, I), "memory_row": (H, I, I), "memory_groups": (H, I),
    "memory_close": (H,), "backend_open": (H,), "backend_new": (H,), "attempt_done": (H, I),
    "backend_put": (H, I, I), "backend_get": (H, I, I), "backend_close": (H,),
    "backend_open_tiers": (I, H), "backend_tier_stats": (H, I),
    "conformance_check": (I, "checks", I, I),
    "sim_device_new": ("mem_bytes", "latency"), "sim_alloc": (H, "nbytes"), "sim_write": (H, "ptr", I),
    "sim_read": (H, "ptr", "nbytes"), "sim_complete_all": (H,), "sim_lose": (H,),
    "sim_device_new_bandwidth": ("mem_bytes", "bandwidth"), "sim_stream_new": (H,),
    "sim_compute": (H, I, "seconds"), "sim_record": (H, I), "sim_query": (H, "event"), "sim_wait": (H, I, "event"),
    "sim_complete_next": (H, "stream", "n"), "sim_fail_next": (H, "stream", "n"),
    "device_close": (H,), "engine_wake_fd": (H,), "progress": (H, I), "changes": (H, I), "lend": (H,),
    "lend_many": (H, I), "release": (H, "lease"), "release_many": (H, I), "cancel": (H, "lease"), "cancel_with_result": (H, "lease"),
    "retry": (H, "lease"), "lease_infos": (H, I), "readiness": (H, "lease"), "layers": (H,),
    "layer_ready": (H, "lease", "layer"), "wait_layer": (H, "lease", "layer", "timeout"),
    "layer_computed": (H, "lease", "layer", I), "arrived": (H, "lease", I),
    "wait": (H, "lease", "until", "timeout"), "sync": (H, "timeout"), "count": (H, "state"),
    "engine_stats": (H,), "containments": (H, I), "recoveries": (H, I), "engine_close": (H,),
    "engine_shutdown": (H, "timeout"), "engine_report": (H,), "engine_free": (H, I),
    "bench_go_lifecycle": (H, H, I, I),  # the in-library benchmark (python/bench), no public entry point
    "ucx_address": (H, I), "ucx_add_peer": (H, I, I), "ucx_close": (H,), "peer_receiver_new": (H,),
    "peer_sender_new": (H,), "peer_capabilities": (H, I), "peer_connect": (H, I), "peer_expect": (H, I),
    "peer_forget": (H, "request", "attempt"), "peer_progress": (H,), "peer_outcome": (H, "request", "attempt"),
    "peer_backend_stats": (H,),
}

# The structs the binding fills from a caller's values: their numeric fields.
FIELDS = {
    _abi.Group: {"slots": "slots", "slot_bytes": "slot_bytes"},
    _abi.CRow: {"group": "row group", "block": "row block", "device": "row device"},
    _abi.CRequest: {"kind": "kind", "known_blocks": "known_blocks", "deadline_unix_ns": "deadline",
                    "is_last": I, "layerwise": I, "n_rows": I},
    _abi.EngineConfig: {"memory": H, "fetcher": H, "publisher": H, "device": H,
                        "tokens_per_block": "tokens_per_block", "quiesce_workers": "quiesce_workers",
                        "request_timeout_ns": "request_timeout", "drain_grace_ns": "drain_grace",
                        "quiesce_timeout_ns": "quiesce_timeout", "retry_backoff_ns": "retry_backoff",
                        "max_retry_backoff_ns": "max_retry_backoff", "keep_released": "keep_released",
                        "policy": I,  # kvready.Policy.of refuses what is not a policy
                        "recover_every_ns": "recover_every", "max_outstanding": "max_outstanding",
                        "_pad": I, "layout_len": I},
    _abi.CUcxConfig: {"incarnation": "incarnation", "mode": "mode", "no_peer_errors": I},
    _abi.CPeerConfig: {"transport": H, "timeout_ns": "peer timeout", "grace_ns": "grace", "window_ns": "window",
                       "poll_ns": "poll", "sessions": "sessions", "tombstones": "tombstones", "leased": I, "_pad": I},
    _abi.CAccessor: {"rank": "rank", "role": "role"},
    _abi.CChunkGroup: {"kind": "group kind", "_pad": I, "n_ids": I},
    _abi.CPageRef: {"group": "share group", "index": "share index"},
    _abi.CPeerPlan: {"request": "request", "attempt": "attempt", "block_tokens": "block_tokens",
                     "token_start": "token_start", "token_end": "token_end", "is_last": I, "_pad": I, "n_groups": I,
                     "n_writers": I, "n_share": I},
}


def prototypes():
    """(name, numeric argtypes) of every prototype the binding declares."""
    for attr, f in vars(_abi).items():
        if isinstance(f, ctypes._CFuncPtr) and getattr(f, "argtypes", None) is not None and f.__name__.startswith("kvready_"):
            yield attr, [t for t in f.argtypes if t in NUMERIC]


def test_every_numeric_argument_of_the_abi_is_accounted_for():
    seen = set()
    for attr, numeric in prototypes():
        seen.add(attr)
        if not numeric:
            continue
        assert attr in ARGUMENTS, f"_abi.{attr} takes {len(numeric)} numeric arguments: say in ARGUMENTS what feeds each"
        assert len(ARGUMENTS[attr]) == len(numeric), f"_abi.{attr}: {len(numeric)} numeric arguments, ARGUMENTS lists {ARGUMENTS[attr]}"
    assert set(ARGUMENTS) <= seen, f"ARGUMENTS names prototypes the binding no longer has: {set(ARGUMENTS) - seen}"
    for struct, fields in FIELDS.items():
        numeric = [f for f, t in struct._fields_ if t in NUMERIC]
        assert sorted(numeric) == sorted(fields), f"{struct.__name__}: numeric fields {numeric}, FIELDS lists {list(fields)}"
    labels = {l for ls in ARGUMENTS.values() for l in ls} | {l for fs in FIELDS.values() for l in fs.values()}
    fed = labels - {H, I}
    assert fed <= set(CASES), f"no case feeds {sorted(fed - set(CASES))}"
    extra = set(CASES) - fed - EXTRA
    assert not extra, f"CASES {sorted(extra)} feed nothing ARGUMENTS or FIELDS names"


class Rig:
    pass


@pytest.fixture
def rig():
    """An engine with a settled fetch lease (a miss: nothing is copied);
    the probes never reach the library, so nothing here moves."""
    r = Rig()
    r.mem = kvready.Memory([kvready.Group(4, SLOT)])
    r.dev = kvready.SimDevice(1 << 16)
    r.store = kvready.open_backend("mem", r.mem)
    r.eng = kvready.Engine(r.mem, 32, backend=r.store, device=r.dev)
    r.row = kvready.Row(name(1), 0, 0, r.dev.alloc(SLOT))
    r.lease = r.eng.lend(kvready.Request.fetch([r.row]))
    r.eng.wait(r.lease, timeout=10)
    r.stream = r.dev.stream()
    r.kit = kvready.KitMemory(r.mem.handle)
    r.ident = _identity()
    r.trs = [kvready.UcxTransport("decode", 1, "tcp"), kvready.UcxTransport("prefill", 1, "tcp")]
    r.recv, r.send = kvready.Receiver(r.trs[0], r.mem), kvready.Sender(r.trs[1], r.mem)
    yield r
    r.recv.close(), r.send.close(), [t.close() for t in r.trs]
    r.eng.release(r.lease)
    r.eng.shutdown(10)
    r.eng.free()


def _row(r, **kw):
    return kvready.Row(**{**r.row._asdict(), **kw})


def _engine(r, **kw):
    return kvready.Engine(r.mem, 32, backend=r.store, device=r.dev, **kw)


PLAN = kvready.Plan(1, [kvready.ChunkGroup([4, 5])], 32, 16, writers=[kvready.Accessor("prefill")])
SEND_PLAN = PLAN._replace(writers=(), to="decode", as_=kvready.Accessor("prefill"))


def _plan(r, **kw):
    """A receiver's plan with kw changed, expected."""
    return r.recv.expect(PLAN._replace(**kw))


def _send_plan(r, **kw):
    return r.send.expect(SEND_PLAN._replace(**kw))


def _identity(layer=0, count=1, index=0):
    return kvready.Identity(bytes(32), bytes(32), [[layer]], [(count, index)])


# label -> (ctype or "duration" or "double", low bound or None, probes: value -> the call)
CASES = {
    "lease": (ctypes.c_uint64, None, [
        lambda r, v: r.eng.release(v), lambda r, v: r.eng.cancel(v), lambda r, v: r.eng.retry(v),
        lambda r, v: r.eng.info(v), lambda r, v: r.eng.infos([r.lease, v]), lambda r, v: r.eng.readiness(v),
        lambda r, v: r.eng.layer_status(v, 0), lambda r, v: r.eng.layer_ready(v, 0),
        lambda r, v: r.eng.layer_computed(v, 0), lambda r, v: r.eng.wait_layer(v, 0, 1),
        lambda r, v: r.eng.arrived(v), lambda r, v: r.eng.wait(v, timeout=1),
        lambda r, v: r.eng.release_many([r.lease, v])]),
    "layer": (ctypes.c_int32, None, [
        lambda r, v: r.lease.layer_status(v), lambda r, v: r.lease.layer_ready(v),
        lambda r, v: r.lease.layer_computed(v), lambda r, v: r.lease.wait_layer(v, 1)]),
    "until": (ctypes.c_int32, None, [lambda r, v: r.eng.wait(r.lease, v, timeout=1)]),
    "state": (ctypes.c_int32, None, [lambda r, v: r.eng.count(v)]),
    "timeout": ("duration", None, [
        lambda r, v: r.eng.wait(r.lease, timeout=v), lambda r, v: r.lease.wait_layer(0, v),
        lambda r, v: r.eng.sync(v), lambda r, v: r.eng.shutdown(v)]),
    "kind": (ctypes.c_int32, None, [lambda r, v: r.eng.lend(kvready.Request(v, [r.row]))]),
    "known_blocks": (ctypes.c_int32, None, [lambda r, v: r.eng.lend(kvready.Request.fetch([r.row], known_blocks=v))]),
    "deadline": ("duration", None, [lambda r, v: r.eng.lend(kvready.Request.fetch([r.row], deadline=v))]),
    "row group": (ctypes.c_int32, None, [lambda r, v: r.eng.lend(kvready.Request.fetch([_row(r, group=v)]))]),
    "row block": (ctypes.c_int32, None, [lambda r, v: r.eng.lend(kvready.Request.fetch([_row(r, block=v)]))]),
    "row device": (ctypes.c_uint64, None, [lambda r, v: r.eng.lend(kvready.Request.fetch([_row(r, device=v)]))]),
    "tokens_per_block": (ctypes.c_int32, None, [lambda r, v: kvready.Engine(r.mem, v, backend=r.store, device=r.dev)]),
    "quiesce_workers": (ctypes.c_int32, None, [lambda r, v: _engine(r, quiesce_workers=v)]),
    "keep_released": (ctypes.c_int32, None, [lambda r, v: _engine(r, keep_released=v)]),
    "max_outstanding": (ctypes.c_int32, None, [lambda r, v: _engine(r, max_outstanding=v)]),
    "request_timeout": ("duration", None, [lambda r, v: _engine(r, request_timeout=v)]),
    "drain_grace": ("duration", None, [lambda r, v: _engine(r, drain_grace=v)]),
    "quiesce_timeout": ("duration", None, [lambda r, v: _engine(r, quiesce_timeout=v)]),
    "retry_backoff": ("duration", None, [lambda r, v: _engine(r, retry_backoff=v)]),
    "max_retry_backoff": ("duration", None, [lambda r, v: _engine(r, max_retry_backoff=v)]),
    "recover_every": ("duration", None, [lambda r, v: _engine(r, recover_every=v)]),
    "shutdown_timeout": ("duration", None, [lambda r, v: _engine(r, shutdown_timeout=v)]),
    "slots": (ctypes.c_int64, 1, [lambda r, v: kvready.Memory([kvready.Group(v, SLOT)])]),
    "slot_bytes": (ctypes.c_int64, 1, [lambda r, v: kvready.Memory([kvready.Group(4, v)])]),
    "group": (ctypes.c_int32, None, [lambda r, v: r.kit.write(v, 0, b"x"), lambda r, v: r.ident.names(v, [bytes(32)])]),
    "local": (ctypes.c_int64, None, [lambda r, v: r.kit.write(0, v, b"x"), lambda r, v: r.kit.read(0, v)]),
    "offset": (ctypes.c_int64, None, [lambda r, v: r.kit.write(0, 0, b"x", v)]),
    "checks": (ctypes.c_int32, 1, [lambda r, v: kvready.conformance.check(lambda m: None, checks=v)]),
    "mem_bytes": (ctypes.c_int64, None, [lambda r, v: kvready.SimDevice(v), lambda r, v: kvready.SimDevice(v, bandwidth=1e9)]),
    "latency": ("duration", None, [lambda r, v: kvready.SimDevice(1 << 16, latency=v)]),
    "bandwidth": ("double", None, [lambda r, v: kvready.SimDevice(1 << 16, bandwidth=v)]),
    "nbytes": (ctypes.c_int64, None, [lambda r, v: r.dev.alloc(v)]),
    "ptr": (ctypes.c_uint64, None, [lambda r, v: r.dev.write(v, b"x"), lambda r, v: r.dev.read(v, 1)]),
    "seconds": ("duration", None, [lambda r, v: r.stream.compute(v)]),
    "event": (ctypes.c_uint64, None, [lambda r, v: r.dev.query(v), lambda r, v: r.stream.wait(v)]),
    "stream": (ctypes.c_uint32, None, [lambda r, v: r.dev.complete_next(v), lambda r, v: r.dev.fail_next(v)]),
    "n": (ctypes.c_int64, None, [lambda r, v: r.dev.complete_next(0, v), lambda r, v: r.dev.fail_next(0, v)]),
    "incarnation": (ctypes.c_uint64, None, [lambda r, v: kvready.UcxTransport("x", v)]),
    "mode": (ctypes.c_int32, None, [lambda r, v: kvready.UcxTransport("x", 1, mode=v)]),
    "peer timeout": ("duration", None, [lambda r, v: kvready.Receiver(r.trs[0], r.mem, timeout=v),
                                        lambda r, v: kvready.Sender(r.trs[1], r.mem, timeout=v)]),
    "grace": ("duration", None, [lambda r, v: kvready.Receiver(r.trs[0], r.mem, grace=v)]),
    "window": ("duration", None, [lambda r, v: kvready.Receiver(r.trs[0], r.mem, window=v)]),
    "poll": ("duration", None, [lambda r, v: kvready.Sender(r.trs[1], r.mem, poll=v)]),
    "sessions": (ctypes.c_int32, None, [lambda r, v: kvready.Receiver(r.trs[0], r.mem, sessions=v)]),
    "tombstones": (ctypes.c_int32, None, [lambda r, v: kvready.Sender(r.trs[1], r.mem, tombstones=v)]),
    "request": (ctypes.c_uint64, None, [lambda r, v: r.recv.forget(v), lambda r, v: r.recv.outcome(v),
                                        lambda r, v: _plan(r, request=v), lambda r, v: r.send.forget(v, SEND_PLAN.as_)]),
    "attempt": (ctypes.c_uint32, None, [lambda r, v: r.recv.forget(1, v), lambda r, v: r.recv.outcome(1, v),
                                        lambda r, v: _send_plan(r, attempt=v)]),
    "block_tokens": (ctypes.c_int32, None, [lambda r, v: _plan(r, block_tokens=v)]),
    "token_start": (ctypes.c_int64, None, [lambda r, v: _plan(r, token_start=v)]),
    "token_end": (ctypes.c_int64, None, [lambda r, v: _send_plan(r, token_end=v)]),
    "rank": (ctypes.c_int32, None, [lambda r, v: _plan(r, writers=[kvready.Accessor("p", v)]),
                                    lambda r, v: r.send.forget(1, kvready.Accessor("p", v))]),
    "role": (ctypes.c_int32, None, [lambda r, v: _send_plan(r, as_=kvready.Accessor("p", 0, v))]),
    "group kind": (ctypes.c_int32, None, [lambda r, v: _plan(r, groups=[kvready.ChunkGroup([4, 5], v)])]),
    "share group": (ctypes.c_int32, None, [lambda r, v: _send_plan(r, share=[(v, 0)])]),
    "share index": (ctypes.c_int32, None, [lambda r, v: _send_plan(r, share=[(0, v)])]),
    # Python-side only (no prototype argument of their own): checked all the same.
    "chunk id": (ctypes.c_int64, None, [lambda r, v: _plan(r, groups=[kvready.ChunkGroup([v])])]),
    "read size": (ctypes.c_size_t, None, [lambda r, v: r.dev.read(r.row.device, v)]),
    "layer id": (ctypes.c_int32, None, [lambda r, v: _identity(layer=v)]),
    "shard": (ctypes.c_int32, None, [lambda r, v: _identity(count=v), lambda r, v: _identity(index=v)]),
    "host_memory": (ctypes.c_uint64, 1, [lambda r, v: kvready.host_memory(v, 8), lambda r, v: kvready.host_memory(1, v)]),
    "staging address": (ctypes.c_uint64, 1, [lambda r, v: kvready.Memory([kvready.Group(1, 8)], buffers=[v])]),
}
EXTRA = {"read size", "layer id", "shard", "host_memory", "staging address", "shutdown_timeout", "chunk id"}

MAX_NS_SECONDS = "9223372036.854775807"


def bad_values(kind, low):
    """What each case is fed, and the text its refusal must carry."""
    if kind == "duration":
        want = MAX_NS_SECONDS
        return [(math.inf, want), (-math.inf, want), (math.nan, want), (-1, want), (-1e-9, want), (1e30, want),
                (2 ** 63, want), ("5", want), (True, want), (b"1", want)]
    if kind == "double":
        return [(math.inf, "finite"), (math.nan, "finite"), ("5", "finite"), (True, "finite")]
    lo, hi, cname = bounds(kind)
    lo = lo if low is None else max(lo, low)
    want = f"{lo} .. {hi}"
    return [(hi + 1, want), (lo - 1, want), (2 ** 64 + 3, want), (-(2 ** 63) - 1, want),
            (True, want), ("5", want), (1.5, want), (math.inf, want), (math.nan, want)]


@pytest.fixture
def calls(monkeypatch):
    """The library functions called while it is set: every prototype of _abi
    is wrapped to record its name."""
    log: list[str] = []
    for attr, _ in list(prototypes()):
        f = getattr(_abi, attr)

        def rec(*a, _f=f, _attr=attr):
            log.append(_attr)
            return _f(*a)
        monkeypatch.setattr(_abi, attr, rec)
    return log


def _snapshot(r):
    s = r.eng.stats()
    return s, r.eng.info(r.lease), r.eng.count(kvready.State.GRANTED), r.mem.read(0, 0)


@pytest.mark.parametrize("label", sorted(CASES))
def test_each_value_that_does_not_fit_its_c_type_is_refused_naming_the_bound(rig, calls, label):
    kind, low, probes = CASES[label]
    before = _snapshot(rig)
    for i, probe in enumerate(probes):
        for value, want in bad_values(kind, low):
            calls.clear()
            with pytest.raises(kvready.InvalidArgumentError) as err:
                probe(rig, value)
            msg = str(err.value)
            where = f"{label} probe {i} fed {value!r}"
            assert isinstance(err.value, kvready.KvreadyError) and err.value.status == kvready.errors.INVALID, where
            assert want in msg, f"{where}: {msg!r} does not name the bound {want!r}"
            assert calls == [], f"{where}: the library was called ({calls}) before the refusal"
    assert _snapshot(rig) == before, f"{label}: a refused call changed the engine"


def test_the_cases_from_the_issue(rig):
    """Each value the issue found truncated is refused, naming the bound."""
    int32 = "-2147483648 .. 2147483647"
    for call, needle in [
        (lambda: rig.lease.layer_computed(2 ** 32), f"layer 4294967296 is out of range; want an integer in {int32}"),
        (lambda: rig.lease.wait_layer(2 ** 32 + 1), f"layer 4294967297 is out of range; want an integer in {int32}"),
        (lambda: kvready.Request.fetch([_row(rig, block=2 ** 32 + 3)]), f"row 0: block 4294967299 is out of range; want an integer in {int32}"),
        (lambda: kvready.Request.fetch([rig.row], known_blocks=2 ** 32), f"known_blocks 4294967296 is out of range"),
        (lambda: rig.eng.sync(math.inf), "timeout is inf s; want a number of seconds from 0 to 9223372036.854775807"),
        (lambda: rig.eng.sync(math.nan), "timeout is nan"),
        (lambda: rig.eng.sync("5"), "timeout is '5' (a str)"),
        (lambda: rig.eng.sync(1e30), "timeout 1e+30 s is too long"),
        (lambda: kvready.Memory([kvready.Group(slots=-1, slot_bytes=SLOT)]), "pool group 0: slots -1 is out of range; want an integer in 1 .."),
        (lambda: rig.dev.alloc(2 ** 63), "nbytes 9223372036854775808 is out of range"),
        (lambda: kvready.Request.fetch([_row(rig, block=True)]), "row 0: block is True (a bool)"),
    ]:
        with pytest.raises(kvready.InvalidArgumentError, match=None) as err:
            call()
        assert needle in str(err.value)


def test_values_in_range_still_cross(rig):
    """The checks take what fits: a zero timeout (a poll), a tiny one (never
    0 ns, which means the default), an IntEnum, a Lease, the bounds
    themselves."""
    assert rig.eng.wait(rig.lease, timeout=0).state == kvready.State.LOGICALLY_COMPLETE
    assert rig.eng.wait(rig.lease, timeout=1e-12).state == kvready.State.LOGICALLY_COMPLETE
    assert kvready._border.nanoseconds(1e-12, "t") == 1 and kvready._border.nanoseconds(2, "t") == 2_000_000_000
    assert rig.eng.count(kvready.State.LOGICALLY_COMPLETE) == 1
    assert rig.eng.info(rig.lease).state == kvready.State.LOGICALLY_COMPLETE
    with pytest.raises(kvready.InvalidArgumentError, match="engine's layers are 0..0"):
        rig.lease.layer_status(2 ** 31 - 1)  # fits int32: the engine's own refusal
    with pytest.raises(kvready.StaleLeaseError):
        rig.eng.info(2 ** 64 - 1)  # fits uint64: no such lease
    mem = kvready.Memory([kvready.Group(1, SLOT)])
    with kvready.open_backend("mem", mem) as store:
        e = kvready.Engine(mem, 32, backend=store, device=rig.dev, request_timeout=2305843009, drain_grace=10)
        assert e.wait_timeout == 2305843009 + 10 + kvready.engine.WAIT_MARGIN
        e.shutdown(10)
        e.free()
