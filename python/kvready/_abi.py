"""The C ABI through ctypes: the structs and prototypes of kvready.h, the
library's location, and statuses turned into exceptions.

Internal: the public names are in :mod:`kvready`.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import struct
from ctypes import (
    CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t, c_uint8,
    c_uint32, c_uint64, c_void_p,
)

from . import errors

NAME_SIZE = 54
KEY_SIZE = 32
LAYOUT_ID_SIZE = 32
REASON_SIZE = 256
MAX_STATES = 16
TIER_NAME_SIZE = 32
ABI_VERSION = 6
PEER_NAME_SIZE = 256


PRODUCTION = "libkvready.so"
TESTKIT = "libkvready_testkit.so"


def _find_library() -> str:
    """The one shared library this process loads (two would be two Go
    runtimes in one process, which Go does not support): $KVREADY_LIBRARY — a
    path, or ``testkit`` for the test library — else libkvready.so. A file
    name is looked for in the checkout's ``bin/`` (``make lib``: the freshest
    build while working on kvready), then beside the package (a wheel, or
    ``make python``)."""
    env = os.environ.get("KVREADY_LIBRARY", "")
    if env and env != "testkit":
        if not os.path.exists(env):
            raise ImportError(f"kvready: KVREADY_LIBRARY={env} does not exist; build the library with `make lib` "
                              f"(libkvready.so) or `make lib-testkit` (libkvready_testkit.so)")
        return env
    file = TESTKIT if env == "testkit" else PRODUCTION
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here.parent.parent / "bin" / file, here / file):
        if candidate.exists():
            return str(candidate)
    target = "lib-testkit" if file == TESTKIT else "lib"
    raise ImportError(
        f"kvready: {file} was not found beside the package nor in the repository's bin/: "
        f"build it with `make {target}` (or `make python`, which copies it into python/kvready/), "
        "or set KVREADY_LIBRARY to its path")


path = _find_library()
lib = ctypes.CDLL(path)


class Group(Structure):
    _fields_ = [("slots", c_int64), ("slot_bytes", c_int64)]


class CRow(Structure):
    _fields_ = [("name", c_uint8 * NAME_SIZE), ("_pad", c_uint8 * 2), ("group", c_int32), ("block", c_int32),
                ("device", c_uint64)]


class CRequest(Structure):
    _fields_ = [("kind", c_int32), ("known_blocks", c_int32), ("deadline_unix_ns", c_int64), ("is_last", c_int32),
                ("layerwise", c_int32), ("rows", POINTER(CRow)), ("n_rows", c_uint64)]


class EngineConfig(Structure):
    _fields_ = [("memory", c_uint64), ("fetcher", c_uint64), ("publisher", c_uint64), ("device", c_uint64),
                ("tokens_per_block", c_int32), ("quiesce_workers", c_int32),
                ("request_timeout_ns", c_int64), ("drain_grace_ns", c_int64), ("quiesce_timeout_ns", c_int64),
                ("retry_backoff_ns", c_int64), ("max_retry_backoff_ns", c_int64),
                ("keep_released", c_int32), ("policy", c_int32), ("recover_every_ns", c_int64),
                ("max_outstanding", c_int32), ("_pad", c_int32), ("layout", c_char_p), ("layout_len", c_uint64)]


class CLeaseInfo(Structure):
    _fields_ = [("lease", c_uint64), ("kind", c_int32), ("state", c_int32), ("outcome", c_int32),
                ("by_peer", c_int32), ("release_requested", c_int32), ("ungrantable", c_int32),
                ("exposed", c_int32), ("fenced", c_int32), ("cancel_disposition", c_int32), ("rows", c_int32),
                ("contained", c_int32), ("physical", c_int32), ("reason_len", c_uint64), ("reason", c_char * REASON_SIZE), ("cancel_error", c_char * REASON_SIZE)]


class CInterval(Structure):
    _fields_ = [("restart_floor", c_int64), ("usable_until", c_int64)]


class CRound(Structure):
    _fields_ = [("moves", c_int64), ("changed", c_int64), ("more", c_int64), ("containments", c_int64),
                ("recoveries", c_int64), ("halted", c_int32), ("drained", c_int32)]


#: CRound's fields in order, as struct reads them: kvready_progress's answer
#: unpacked in one call (Engine.progress), where each field read through
#: ctypes costs a look-up of its own. Checked against CRound below.
ROUND = struct.Struct("=5q2i")
if ROUND.size != ctypes.sizeof(CRound) or [ROUND.unpack_from(CRound(*range(1, 8)))] != [tuple(range(1, 8))]:
    raise ImportError("kvready: _abi.ROUND does not read CRound's layout")


class CContainment(Structure):
    _fields_ = [("lease", c_uint64), ("slots", c_int64), ("deadline_unix_ns", c_int64),
                ("reason", c_char * REASON_SIZE)]


class CBackendFaults(Structure):
    _fields_ = [("violations", c_uint64), ("panics", c_uint64), ("repeated_completions", c_uint64),
                ("early_completions", c_uint64)]


class CStats(Structure):
    _fields_ = [("leases", c_int64 * MAX_STATES), ("outcomes", c_uint64 * MAX_STATES),
                ("lent", c_uint64), ("released", c_uint64), ("quarantined_leases", c_uint64),
                ("slots_free", c_int64), ("slots_held", c_int64), ("slots_quarantined", c_int64),
                ("refused", c_uint64), ("stale_evidence", c_uint64), ("violations", c_uint64), ("unproven", c_uint64),
                ("quiesce_calls", c_uint64), ("quiesce_retries", c_uint64), ("quiesce_timeouts", c_uint64),
                ("cancel_requests", c_uint64), ("cancel_errors", c_uint64), ("ungrantable", c_uint64),
                ("containments", c_uint64), ("invariant_breaches", c_uint64), ("recovered", c_uint64),
                ("outstanding", c_int64), ("max_outstanding", c_int64), ("halted", c_int32), ("_pad", c_int32),
                ("fetcher_faults", CBackendFaults), ("publisher_faults", CBackendFaults),
                ("handoffs", c_uint64), ("quiesce_probes", c_uint64), ("slots_inherited", c_int64)]


class CReport(Structure):
    _fields_ = [("held", c_int64 * MAX_STATES), ("slots_held", c_int64), ("slots_quarantined", c_int64),
                ("drained", c_int32), ("halted", c_int32), ("halt_reason", c_char * REASON_SIZE),
                ("in_doubt", c_int64), ("physical", c_int32), ("safe_to_release", c_int32)]


class CCancelResult(Structure):
    _fields_ = [("logical", c_int32), ("physical", c_int32), ("retryable", c_int32), ("safe_to_reuse", c_int32),
                ("reason", c_char * REASON_SIZE)]


class CUnit(Structure):
    _fields_ = [("name", c_uint8 * NAME_SIZE), ("_pad", c_uint8 * 2), ("group", c_int32), ("local", c_int32)]


class CAnswer(Structure):
    _fields_ = [("kind", c_int32), ("by_peer", c_int32), ("served", c_uint64), ("reason", c_char * REASON_SIZE)]


class CTierStats(Structure):
    _fields_ = [("name", c_char * TIER_NAME_SIZE), ("handed", c_uint64), ("hits", c_uint64), ("misses", c_uint64),
                ("failed", c_uint64), ("published", c_uint64), ("publish_failed", c_uint64), ("promoted", c_uint64),
                ("promote_failed", c_uint64), ("promote_skipped", c_uint64), ("rejected", c_uint64),
                ("no_outcome", c_uint64), ("violations", c_uint64), ("cancel_errors", c_uint64),
                ("evictions", c_uint64), ("bytes", c_int64), ("sized", c_int32), ("_pad", c_int32)]



# ---- peer transfers over UCX (kvready.h: "peer transfers") ----

class CUcxConfig(Structure):
    _fields_ = [("name", c_char_p), ("incarnation", c_uint64), ("transports", c_char_p), ("mode", c_int32),
                ("no_peer_errors", c_int32)]


class CPeerConfig(Structure):
    _fields_ = [("transport", c_uint64), ("timeout_ns", c_int64), ("grace_ns", c_int64), ("window_ns", c_int64),
                ("poll_ns", c_int64), ("sessions", c_int32), ("tombstones", c_int32), ("leased", c_int32),
                ("_pad", c_int32)]


class CAccessor(Structure):
    _fields_ = [("peer", c_char_p), ("rank", c_int32), ("role", c_int32)]


class CChunkGroup(Structure):
    _fields_ = [("kind", c_int32), ("_pad", c_int32), ("ids", POINTER(c_int64)), ("n_ids", c_uint64)]


class CPageRef(Structure):
    _fields_ = [("group", c_int32), ("index", c_int32)]


class CPeerPlan(Structure):
    _fields_ = [("request", c_uint64), ("attempt", c_uint32), ("block_tokens", c_int32), ("token_start", c_int64),
                ("token_end", c_int64), ("is_last", c_int32), ("_pad", c_int32), ("groups", POINTER(CChunkGroup)),
                ("n_groups", c_uint64), ("writers", POINTER(CAccessor)), ("n_writers", c_uint64), ("to", c_char_p),
                ("as", CAccessor), ("share", POINTER(CPageRef)), ("n_share", c_uint64)]


class CPeerPage(Structure):
    _fields_ = [("name", c_uint8 * NAME_SIZE), ("_pad", c_uint8 * 2), ("group", c_int32), ("index", c_int32),
                ("id", c_int64), ("kind", c_int32), ("block", c_int32), ("end", c_int64)]


class CTransferOutcome(Structure):
    _fields_ = [("kind", c_int32), ("by_peer", c_int32), ("token_end", c_int64), ("reason", c_char * REASON_SIZE)]


class CPeerStats(Structure):
    _fields_ = [(f, c_uint64) for f in ("in_flight", "in_doubt", "delivered", "failed", "cancelled", "settled",
                                        "rejected", "peers_lost", "evidence", "refused", "revocations", "fenced",
                                        "offers", "puts")]

u8p = POINTER(c_uint8)
# Callback arguments are plain addresses (int, or None for NULL): the
# callbacks read and write them with from_address / string_at / memmove.
_p = c_void_p
FetchFn = CFUNCTYPE(c_int, _p, _p, c_size_t, _p, c_size_t, c_int32, _p, _p, c_size_t)
PollFn = CFUNCTYPE(c_int, _p, c_uint64, _p, _p, c_size_t)
QuiesceFn = CFUNCTYPE(c_int, _p, _p, c_size_t, c_int64, _p, _p, c_size_t)
TryQuiesceFn = CFUNCTYPE(c_int, _p, _p, c_size_t, _p, _p, c_size_t)
CancelFn = CFUNCTYPE(c_int, _p, c_uint64, _p, _p, c_size_t)
ForgetFn = CFUNCTYPE(None, _p, c_uint64)
PutFn = CFUNCTYPE(c_int, _p, _p, c_size_t, _p, _p, c_size_t)
GetFn = CFUNCTYPE(c_int, _p, _p, c_size_t, _p, _p, c_size_t, _p, _p)
CloseFn = CFUNCTYPE(None, _p)


class BackendCallbacks(Structure):
    _fields_ = [("user", c_void_p), ("fetch", FetchFn), ("publish", FetchFn), ("poll", PollFn),
                ("quiesce", QuiesceFn), ("cancel", CancelFn), ("forget", ForgetFn), ("put", PutFn),
                ("get", GetFn), ("close", CloseFn), ("notifies", c_int32), ("_pad", c_int32),
                ("try_quiesce", TryQuiesceFn)]


CopyFn = CFUNCTYPE(c_int, _p, c_int32, c_uint64, _p, c_size_t)
RecordFn = CFUNCTYPE(c_int, _p, _p)
QueryFn = CFUNCTYPE(c_int, _p, c_uint64, _p)
ReleaseEventFn = CFUNCTYPE(None, _p, c_uint64)
AddressableFn = CFUNCTYPE(c_int, _p, c_uint64, c_size_t, _p, c_size_t)
LostFn = CFUNCTYPE(c_int, _p, _p, _p, c_size_t)
WaitFn = CFUNCTYPE(c_int, _p, c_uint64)


class DeviceCallbacks(Structure):
    _fields_ = [("user", c_void_p), ("copy", CopyFn), ("record", RecordFn), ("query", QueryFn),
                ("release_event", ReleaseEventFn), ("addressable", AddressableFn), ("lost", LostFn),
                ("close", CloseFn), ("wait", WaitFn)]


MakeBackendFn = CFUNCTYPE(c_int, _p, c_uint64, _p)

_u64p = POINTER(c_uint64)
_i32p = POINTER(c_int32)
_i64p = POINTER(c_int64)
_sizep = POINTER(c_size_t)


def _proto(name, *args, restype=c_int):
    f = getattr(lib, name)
    f.argtypes = list(args)
    f.restype = restype
    return f


def _testkit_proto(name, *args, restype=c_int):
    """A function only the test library exports (kvready.h: #ifdef
    KVREADY_TESTKIT): None in libkvready.so."""
    if not hasattr(lib, name):
        return None
    return _proto(name, *args, restype=restype)


abi_version = _proto("kvready_abi_version", restype=c_uint32)
version = _proto("kvready_version", c_char_p, c_size_t, _sizep)
last_error = _proto("kvready_last_error", c_uint64, c_char_p, c_size_t, _sizep)
detach_callbacks = _proto("kvready_detach_callbacks")
profile_validate = _proto("kvready_profile_validate", c_char_p, c_size_t)
layout_id = _proto("kvready_layout_id", c_char_p, c_size_t, u8p, _i32p)
names = _proto("kvready_names", u8p, c_size_t, u8p, c_size_t, _i32p, _i32p, c_size_t, _i32p, _i32p, c_int32,
               u8p, c_size_t, u8p)
memory_over = _proto("kvready_memory_over", POINTER(Group), c_size_t, POINTER(c_void_p), _u64p)
memory_write = _proto("kvready_memory_write", c_uint64, c_int32, c_int64, c_int64, c_void_p, c_size_t)
memory_read = _proto("kvready_memory_read", c_uint64, c_int32, c_int64, c_int64, c_void_p, c_size_t)
memory_row = _proto("kvready_memory_row", c_uint64, c_int32, c_int64, POINTER(c_void_p), _sizep)
memory_groups = _proto("kvready_memory_groups", c_uint64, POINTER(Group), c_size_t, _sizep)
memory_close = _proto("kvready_memory_close", c_uint64)
backend_open = _proto("kvready_backend_open", c_char_p, c_uint64, _u64p)
backend_new = _proto("kvready_backend_new", POINTER(BackendCallbacks), c_uint64, _u64p)
attempt_done = _proto("kvready_attempt_done", c_uint64, c_uint64)
backend_put = _proto("kvready_backend_put", c_uint64, c_char_p, c_size_t, c_char_p, c_char_p, c_size_t)
backend_get = _proto("kvready_backend_get", c_uint64, c_char_p, c_size_t, c_char_p, c_void_p, c_size_t, _sizep, _i32p)
backend_close = _proto("kvready_backend_close", c_uint64)
backend_open_tiers = _proto("kvready_backend_open_tiers", POINTER(c_char_p), c_size_t, c_uint64, _u64p)
backend_tier_stats = _proto("kvready_backend_tier_stats", c_uint64, POINTER(CTierStats), c_size_t, _sizep)
conformance_check = _testkit_proto("kvready_conformance_check", MakeBackendFn, c_void_p, c_int32, c_int32, c_int32,
                           c_char_p, c_size_t)
sim_device_new = _proto("kvready_sim_device_new", c_int64, c_int64, _u64p)
sim_alloc = _proto("kvready_sim_alloc", c_uint64, c_int64, _u64p)
sim_write = _proto("kvready_sim_write", c_uint64, c_uint64, c_char_p, c_size_t)
sim_read = _proto("kvready_sim_read", c_uint64, c_uint64, c_void_p, c_size_t)
sim_complete_all = _proto("kvready_sim_complete_all", c_uint64, _i64p)
sim_lose = _proto("kvready_sim_lose", c_uint64, c_char_p)
sim_device_new_bandwidth = _proto("kvready_sim_device_new_bandwidth", c_int64, c_double, _u64p)
sim_stream_new = _proto("kvready_sim_stream_new", c_uint64, POINTER(c_uint32))
sim_compute = _proto("kvready_sim_compute", c_uint64, c_uint32, c_int64)
sim_record = _proto("kvready_sim_record", c_uint64, c_uint32, _u64p)
sim_query = _proto("kvready_sim_query", c_uint64, c_uint64, _i32p)
sim_wait = _proto("kvready_sim_wait", c_uint64, c_uint32, c_uint64)
sim_complete_next = _proto("kvready_sim_complete_next", c_uint64, c_uint32, c_int64, _i64p)
sim_fail_next = _proto("kvready_sim_fail_next", c_uint64, c_uint32, c_int64, _i64p)
device_new = _proto("kvready_device_new", POINTER(DeviceCallbacks), _u64p)
device_close = _proto("kvready_device_close", c_uint64)
engine_config_defaults = _proto("kvready_engine_config_defaults", POINTER(EngineConfig))
engine_new = _proto("kvready_engine_new", POINTER(EngineConfig), _u64p)
engine_wake_fd = _proto("kvready_engine_wake_fd", c_uint64, _i32p)
progress = _proto("kvready_progress", c_uint64, POINTER(CRound), _u64p, _i32p, c_size_t)
changes = _proto("kvready_changes", c_uint64, _u64p, _i32p, c_size_t, _sizep)
lend = _proto("kvready_lend", c_uint64, POINTER(CRequest), _u64p)
lend_many = _proto("kvready_lend_many", c_uint64, POINTER(CRequest), c_size_t, _u64p, _i32p)
release = _proto("kvready_release", c_uint64, c_uint64)
release_many = _proto("kvready_release_many", c_uint64, _u64p, c_size_t, _i32p)
cancel = _proto("kvready_cancel", c_uint64, c_uint64)
cancel_with_result = _proto("kvready_cancel_with_result", c_uint64, c_uint64, POINTER(CCancelResult))
retry = _proto("kvready_retry", c_uint64, c_uint64)
lease_infos = _proto("kvready_lease_infos", c_uint64, _u64p, c_size_t, POINTER(CLeaseInfo), _i32p)
readiness = _proto("kvready_readiness", c_uint64, c_uint64, POINTER(CInterval))
layers = _proto("kvready_layers", c_uint64, _i32p)
layer_ready = _proto("kvready_layer_ready", c_uint64, c_uint64, c_int32, _i32p, POINTER(CInterval))
wait_layer = _proto("kvready_wait_layer", c_uint64, c_uint64, c_int32, c_int64, POINTER(CInterval))
layer_computed = _proto("kvready_layer_computed", c_uint64, c_uint64, c_int32, c_uint64)
arrived = _proto("kvready_arrived", c_uint64, c_uint64, _i32p, _i32p, c_size_t, _sizep)
wait = _proto("kvready_wait", c_uint64, c_uint64, c_int32, c_int64, POINTER(CLeaseInfo))
sync = _proto("kvready_sync", c_uint64, c_int64, _i64p)
count = _proto("kvready_count", c_uint64, c_int32, _i64p)
engine_stats = _proto("kvready_engine_stats", c_uint64, POINTER(CStats))
containments = _proto("kvready_containments", c_uint64, POINTER(CContainment), c_size_t, _sizep)
recoveries = _proto("kvready_recoveries", c_uint64, _u64p, c_size_t, _sizep)
engine_close = _proto("kvready_engine_close", c_uint64, POINTER(CReport))
engine_shutdown = _proto("kvready_engine_shutdown", c_uint64, c_int64, POINTER(CReport))
engine_report = _proto("kvready_engine_report", c_uint64, POINTER(CReport))
engine_free = _proto("kvready_engine_free", c_uint64, c_int32)
ucx_new = _proto("kvready_ucx_new", POINTER(CUcxConfig), _u64p)
ucx_address = _proto("kvready_ucx_address", c_uint64, u8p, c_size_t, _sizep)
ucx_add_peer = _proto("kvready_ucx_add_peer", c_uint64, c_char_p, c_size_t, c_char_p, c_size_t, _u64p)
ucx_close = _proto("kvready_ucx_close", c_uint64)
peer_config_defaults = _proto("kvready_peer_config_defaults", POINTER(CPeerConfig))
peer_receiver_new = _proto("kvready_peer_receiver_new", POINTER(CPeerConfig), c_uint64, _u64p)
peer_sender_new = _proto("kvready_peer_sender_new", POINTER(CPeerConfig), c_uint64, _u64p)
peer_capabilities = _proto("kvready_peer_capabilities", c_uint64, u8p, c_size_t, _sizep)
peer_connect = _proto("kvready_peer_connect", c_uint64, c_char_p, c_size_t)
peer_expect = _proto("kvready_peer_expect", c_uint64, POINTER(CPeerPlan), POINTER(CPeerPage), c_size_t, _sizep)
peer_forget = _proto("kvready_peer_forget", c_uint64, c_uint64, c_uint32, POINTER(CAccessor), _i32p)
peer_progress = _proto("kvready_peer_progress", c_uint64, _i64p)
peer_outcome = _proto("kvready_peer_outcome", c_uint64, c_uint64, c_uint32, POINTER(CTransferOutcome), _i32p)
peer_backend_stats = _proto("kvready_peer_backend_stats", c_uint64, POINTER(CPeerStats))
bench_go_lifecycle = _testkit_proto("kvready_bench_go_lifecycle", c_uint64, c_uint64, POINTER(CRequest), c_size_t, c_int64, _i64p)

#: Whether the loaded library is the test library (the conformance kit, the
#: in-library benchmark and the fault backends ``instant:``, ``mem:?mode=``).
testkit = conformance_check is not None

if abi_version() != ABI_VERSION:
    raise ImportError(f"kvready: the library speaks C ABI {abi_version()}, this package {ABI_VERSION}: rebuild with `make python`")


def config_defaults() -> EngineConfig:
    """The library's defaults (kvready_engine_config_defaults: readiness's,
    declared once, in Go) in a fresh EngineConfig, no handle set."""
    c = EngineConfig()
    check(engine_config_defaults(ctypes.byref(c)))
    return c


#: The fields of EngineConfig that are no setting: handles, the layout
#: document, padding. Every other field is a setting, and a keyword of
#: kvready.Engine (python/tests/test_declared.py).
NOT_SETTINGS = frozenset({"memory", "fetcher", "publisher", "device", "_pad", "layout", "layout_len"})


def message(handle: int) -> str:
    """The last error's message on handle (0: the calling thread's)."""
    size = 1024
    while True:
        buf = ctypes.create_string_buffer(size)
        n = c_size_t()
        st = last_error(handle, buf, size, ctypes.byref(n))
        if st == 0 or n.value < size - 1:
            return buf.value.decode("utf-8", "replace")
        size = n.value + 1


def check(status: int, handle: int = 0) -> None:
    """Raise the exception of a failed call's status, with its message."""
    if status != 0:
        raise errors.from_status(status, message(handle))
