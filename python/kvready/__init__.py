"""kvready from Python: decide when staged KV-cache memory is ready to use
and safe to reuse.

The engine, staging memory, backends (kvready's own by URL, or written in
Python) and devices (the simulated one, or written in Python: how a PyTorch
manager hands kvready its stream and events), and peer transfers between
processes over UCX (:mod:`kvready.transfer`), over ``libkvready.so`` through
ctypes. See docs/python.md.

>>> import kvready
>>> mem = kvready.Memory([kvready.Group(slots=16, slot_bytes=256)])
>>> dev = kvready.SimDevice(latency=20e-6)
>>> store = kvready.open_backend("mem", mem)
>>> with kvready.Engine(mem, 32, backend=store, device=dev) as eng:
...     pass
"""

from __future__ import annotations

import atexit

from . import _abi
from .backend import (Access, Attempt, Backend, CancelDisposition, Cancelled, Delivered, Extent, Failed, Outcome,
                      StoreBackend, TieredBackend, TierStats, Unit, open_backend, open_tiers)
from .device import Device, EventStatus, SimDevice, SimEvent, SimStream, host_memory
from .engine import (BackendFaults, CancelResult, Changes, Containment, Engine, Kind, LayerStatus, Lease, LeaseBatch, LeaseHandle,
                     LeaseInfo, LendError, Logical, OutcomeKind, Physical, Policy, Readiness, Report, Request, RequestBatch, Round, Row,
                     State, Stats, Until)
from .errors import (BackendConfigError, BackendError, BadHandleError, BusyError, CallFailedError, ConformanceError,
                     CopyRefusedError, DeviceLostError, EngineClosedError, EngineHaltedError, InternalError, InvalidArgumentError,
                     KvreadyError, LayerFailedError, NotReadyError, ProfileError, RejectedError, StaleLeaseError,
                     SubmissionRejectedError, TimedOutError, StoreUnavailableError, TransportUnavailableError, UngrantableError,
                     UnsupportedError)
from .memory import Group, KitMemory, Memory
from .names import Identity, LayoutID, layout_id, validate_profile
from .transfer import (Accessor, CacheKind, ChunkGroup, Mode, Page, PeerStats, Plan, Receiver, Role, Sender, TransferKind,
                       TransferOutcome, UcxTransport)
from . import conformance

NAME_SIZE = _abi.NAME_SIZE
KEY_SIZE = _abi.KEY_SIZE


def version() -> str:
    """kvready's version, C ABI and pinned contract revision."""
    import ctypes
    buf = ctypes.create_string_buffer(256)
    _abi.check(_abi.version(buf, 256, None))
    return buf.value.decode()


def abi_version() -> int:
    """The library's C ABI revision (one bare call into it)."""
    return _abi.abi_version()


# At exit, no callback into Python may run while the interpreter is torn down
# (the library's log lines then go to stderr).
atexit.register(_abi.detach_callbacks)

# The library's log lines go through logging, on the logger "kvready".
from . import _log  # noqa: E402
_log.route_to_logging()

__all__ = [
    "Access", "Attempt", "Backend", "BackendConfigError", "BackendError", "BackendFaults", "BadHandleError", "BusyError",
    "CallFailedError", "CancelDisposition", "CancelResult", "Changes",
    "Cancelled", "ConformanceError", "Containment", "CopyRefusedError", "Delivered", "Device", "DeviceLostError",
    "Engine", "EngineClosedError", "EngineHaltedError", "EventStatus", "Extent", "Failed", "Group", "Identity",
    "InternalError", "InvalidArgumentError", "Kind", "KitMemory", "KvreadyError", "LayerFailedError", "LayerStatus", "Physical",
    "LayoutID", "Lease", "LeaseBatch", "LeaseHandle", "LeaseInfo", "Logical",
    "LendError", "Memory", "NotReadyError", "Outcome", "OutcomeKind", "Policy", "ProfileError", "Readiness",
    "Report", "Request", "RequestBatch", "Round", "Row", "SimDevice", "SimEvent", "SimStream", "StaleLeaseError", "State", "Stats",
    "StoreBackend", "StoreUnavailableError", "SubmissionRejectedError", "TierStats", "TieredBackend", "TimedOutError",
    "UngrantableError", "Unit", "UnsupportedError",
    "Until", "abi_version", "conformance", "host_memory", "layout_id", "open_backend", "open_tiers", "validate_profile",
    "version", "NAME_SIZE", "KEY_SIZE",
    # peer transfers over UCX (kvready.transfer)
    "Accessor", "CacheKind", "ChunkGroup", "Mode", "Page", "PeerStats", "Plan", "Receiver", "RejectedError", "Role",
    "Sender", "TransferKind", "TransferOutcome", "TransportUnavailableError", "UcxTransport",
]
