"""The engine: leases of staging slots, woken through a file descriptor."""

from __future__ import annotations

import array
import collections.abc
import ctypes
import json
import logging
import operator
import threading
import time
from dataclasses import dataclass, fields
from enum import IntEnum
from itertools import repeat
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from . import _abi
from . import errors
from ._border import MAX_WAIT_SECONDS, integer, integers, nanoseconds
from .backend import CancelDisposition
from .errors import EngineClosedError, InvalidArgumentError, KvreadyError, StaleLeaseError

log = logging.getLogger("kvready")

FETCH, PUBLISH = 1, 2


class Kind(IntEnum):
    """Which way a lease's content moves."""

    FETCH = 1
    PUBLISH = 2


class State(IntEnum):
    """Where a lease stands (the lifecycle of docs/states.md)."""

    WAITING = 0
    GRANTED = 1
    STAGED = 2  # waits for admission (max_outstanding)
    ADMITTED = 3
    REQUESTED = 4
    SERVED = 5
    PARTIAL = 6
    MISSED = 7
    FAILED = 8
    ACCESS_FENCED = 9
    COPY_UNPROVEN = 10
    LOGICALLY_COMPLETE = 11
    CONTAINED = 12  # the recover policy: held out of use while the backend is asked again
    QUARANTINED = 13
    RELEASED = 14


class OutcomeKind(IntEnum):
    """The outcome the engine latched: a miss is never a failure, and a
    cancellation is never folded into a failure."""

    NONE = 0
    SERVED = 1
    PARTIAL = 2
    MISSED = 3
    FAILED = 4
    CANCELLED = 5
    REJECTED = 6
    TIMEOUT = 7
    VIOLATION = 8


class Policy(IntEnum):
    """What the engine does when a lease's containment deadline passes with
    the backend's access or a copy unproven (SPEC §4 rule 5). Each raises one
    containment event and never frees what is unproven."""

    QUARANTINE = 0  # the default: the lease's slots leave circulation for ever; the rest goes on
    FATAL = 1       # the engine halts: it releases nothing further (EngineHaltedError); restart the manager
    RECOVER = 2     # a contained lease is asked again every recover_every; a later proof releases its slots

    @classmethod
    def of(cls, p: "Policy | str | int") -> "Policy":
        """A policy from itself, its name (``"quarantine"``, ``"fatal"``,
        ``"recover"``) or its value."""
        try:
            return cls[p.upper()] if isinstance(p, str) else cls(p)
        except (KeyError, ValueError):
            raise InvalidArgumentError(errors.INVALID, f"kvready: policy {p!r}; want 'quarantine', 'fatal' or 'recover' "
                                  "(or a kvready.Policy)") from None


class LayerStatus(IntEnum):
    """Where one layer of a fetch stands (SPEC §4 rule 16;
    :meth:`Lease.layer_status`)."""

    PENDING = 0  # its copies are not known to have landed yet
    READY = 1    # its copies' event completed: the device may read it
    FAILED = 2   # a copy of it or of an earlier layer failed: never ready
    NEVER = 3    # the lease was quarantined, or released before its copies landed


class Physical(IntEnum):
    """A lease's physical disposition (SPEC §4 rule 19, the reference's
    words): whether anything may still touch its memory. Apart from the
    outcome: a cancelled lease is QUIESCING until its backend's access is
    proven over. Memory is reusable only in NOT_EXPOSED and QUIESCED_*."""

    NOT_EXPOSED = 0       # nothing was ever handed the memory, and nothing touches it
    ACTIVE = 1            # an accessor may be touching it and its outcome is pending
    QUIESCING = 2         # the outcome is latched; the end of an accessor's access is awaited
    QUIESCED_SUCCESS = 3  # every accessor's access is proven over, after a transfer that did not fail
    QUIESCED_FAILURE = 4  # every accessor's access is proven over, after a transfer that failed
    IN_DOUBT = 5          # an accessor's end can never be proven: never reusable

    @property
    def reusable(self) -> bool:
        """Whether the memory may be reused (the reference's is_reusable)."""
        return self in (Physical.NOT_EXPOSED, Physical.QUIESCED_SUCCESS, Physical.QUIESCED_FAILURE)


class Logical(IntEnum):
    """What a cancel did to the lease's logical lifecycle (SPEC §4 rule 19,
    the reference's ``LogicalDisposition``). It never says whether the memory
    may be reused: :attr:`CancelResult.physical` does."""

    ACCEPTED = 1          # taken: Cancelled latched (a submission handed out: once answered), or withdrawn
    ALREADY_TERMINAL = 2  # nothing left to cancel: outcome or fence latched, or released (and still readable)
    NOT_FOUND = 3         # the handle names no lease the engine can read: its memory is IN_DOUBT
    REJECTED = 4          # the engine refused the call itself: it halted


@dataclass(frozen=True)
class CancelResult:
    """What a cancel answered, the logical and the physical result apart (the
    reference's ``CancelResult``): ``logical`` what the cancel did,
    ``physical`` whether anything may still touch the lease's memory right
    after it. A cancel accepted for a submitted lease is not
    :attr:`safe_to_reuse`: its memory is reusable once its backend's access is
    proven over (watch ``info().physical``, or wait for ``Until.RELEASED``).
    ``retryable`` is always False: every refusal of the engine is final."""

    logical: Logical
    physical: Physical
    retryable: bool = False
    reason: str = ""

    @property
    def safe_to_reuse(self) -> bool:
        """Whether the memory may be reused now: the physical disposition is
        NOT_EXPOSED or QUIESCED_*, whatever the logical answer."""
        return self.physical.reusable


class Until(IntEnum):
    """What :meth:`Engine.wait` waits for."""

    SETTLED = 1   # logically complete, quarantined or ungrantable: release it then
    RELEASED = 2  # its slots are back (or out for good: quarantined)
    GRANTED = 3   # it holds its staging slots (or never will): a layerwise publish takes layers then


class Row(NamedTuple):
    """One block of one layer group a request moves: its name (54 bytes),
    its local layer group, its block ordinal, its device address."""

    name: bytes
    group: int
    block: int
    device: int


class Request:
    """One lease request, packed for the C ABI once (reuse it freely)."""

    __slots__ = ("kind", "rows", "known_blocks", "deadline", "is_last", "layerwise", "_c", "_rows")

    def __init__(self, kind: Kind | int, rows: Sequence[Row | tuple], known_blocks: int = 0,
                 deadline: float | None = None, is_last: bool = False, layerwise: bool = False):
        c_kind = integer(kind, ctypes.c_int32, "kind")
        self.kind = Kind(kind) if kind in (1, 2) else kind
        self.rows = [Row(*r) for r in rows]
        self.known_blocks, self.deadline, self.is_last, self.layerwise = known_blocks, deadline, is_last, layerwise
        c_known = integer(known_blocks, ctypes.c_int32, "known_blocks")
        # deadline is a Unix time in seconds: as the C ABI's int64_t ns (None or 0: the engine's request timeout).
        c_deadline = nanoseconds(deadline or None, "deadline")
        arr = (_abi.CRow * max(len(self.rows), 1))()
        for i, r in enumerate(self.rows):
            if not isinstance(r.name, (bytes, bytearray, memoryview)) or len(r.name) != _abi.NAME_SIZE:
                got = f"{len(r.name)} bytes" if isinstance(r.name, (bytes, bytearray, memoryview)) else f"a {type(r.name).__name__}"
                raise InvalidArgumentError(errors.INVALID, f"kvready: row {i}: a name is {_abi.NAME_SIZE} bytes, got {got}")
            ctypes.memmove(arr[i].name, bytes(r.name), _abi.NAME_SIZE)
            arr[i].group = integer(r.group, ctypes.c_int32, f"row {i}: group")
            arr[i].block = integer(r.block, ctypes.c_int32, f"row {i}: block")
            arr[i].device = integer(r.device, ctypes.c_uint64, f"row {i}: device")
        self._rows = arr
        self._c = _abi.CRequest(c_kind, c_known, c_deadline, 1 if is_last else 0,
                                1 if layerwise else 0, ctypes.cast(arr, ctypes.POINTER(_abi.CRow)), len(self.rows))

    @classmethod
    def fetch(cls, rows: Sequence[Row | tuple], known_blocks: int = 0, **kw: Any) -> "Request":
        """A fetch of rows (whose blocks start at or after known_blocks)."""
        return cls(Kind.FETCH, rows, known_blocks, **kw)

    @classmethod
    def publish(cls, rows: Sequence[Row | tuple], **kw: Any) -> "Request":
        """A publication of rows. ``layerwise=True``: the forward pass
        reports each layer computed (:meth:`Lease.layer_computed`, vLLM's
        ``save_kv_layer``), and each layer's copies follow its report."""
        return cls(Kind.PUBLISH, rows, **kw)


class RequestBatch:
    """Requests packed into one array once, for :meth:`Engine.lend_many` in
    a hot loop (a manager's round). Any number of threads may lend one batch
    at once: what a call answers is written into the calling thread's own
    buffers, not the batch's."""

    __slots__ = ("requests", "_arr", "_n", "_packed", "_handles")

    def __init__(self, requests: Sequence[Request]):
        self.requests = list(requests)
        # What _arr was packed from, kept apart from the public list: the
        # array points into each request's rows, and lend_many reads exactly
        # _n of them, whatever is later done to self.requests.
        self._packed = tuple(self.requests)
        self._n = len(self._packed)
        self._arr = (_abi.CRequest * max(self._n, 1))(*[r._c for r in self._packed])
        # The type of the array lend_many answers this batch's handles in.
        self._handles = ctypes.c_uint64 * self._n

    def __len__(self) -> int:
        return self._n


class Readiness(NamedTuple):
    """Where a fetched request may resume: any p with
    restart_floor <= p <= usable_until (the reference's ``Readiness``)."""

    usable_until: int
    restart_floor: int

    @property
    def empty(self) -> bool:
        """Nothing is usable: recompute from 0."""
        return self.restart_floor > self.usable_until


class LeaseInfo(NamedTuple):
    """A lease as the engine sees it (the same before and after release)."""

    lease: int
    kind: Kind
    state: State
    outcome: OutcomeKind
    by_peer: bool
    reason: str
    release_requested: bool
    ungrantable: bool
    exposed: bool
    fenced: bool
    cancel_disposition: CancelDisposition | None  # what the backend answered a cancel; None: none was asked
    cancel_error: str
    rows: int
    contained: bool  # its containment deadline passed with something unproven (recovered or not)
    physical: Physical = Physical.NOT_EXPOSED  # whether anything may still touch its memory (rule 19)


def _disposition(d: int) -> CancelDisposition | None:
    return CancelDisposition(d) if d in CancelDisposition._value2member_map_ else None


def _info(c: _abi.CLeaseInfo) -> LeaseInfo:
    return LeaseInfo(c.lease, Kind(c.kind) if c.kind in (1, 2) else c.kind, State(c.state), OutcomeKind(c.outcome),
                     bool(c.by_peer), c.reason.decode("utf-8", "replace"), bool(c.release_requested),
                     bool(c.ungrantable), bool(c.exposed), bool(c.fenced), _disposition(c.cancel_disposition),
                     c.cancel_error.decode("utf-8", "replace"), c.rows, bool(c.contained), Physical(c.physical))


class LeaseHandle(int):
    """A lease's handle as the C ABI packs it (generation in the high half,
    record index in the low half): an int, equal to ``Lease.handle``, that
    prints as Go's ``readiness.Handle`` does, ``lease#INDEX.GENERATION``."""

    __slots__ = ()

    @property
    def index(self) -> int:
        """The lease record's index: small, reused by later leases."""
        return int(self) & 0xFFFFFFFF

    @property
    def generation(self) -> int:
        """The record's generation: a retired lease's handle is stale."""
        return int(self) >> 32

    def __repr__(self) -> str:
        return f"lease#{self.index}.{self.generation}"

    __str__ = __repr__


class Containment(NamedTuple):
    """A lease contained: access or a copy unproven past its deadline; its
    slots are held out of circulation. ``lease`` is a :class:`LeaseHandle`
    (equal to the contained ``Lease.handle``)."""

    lease: LeaseHandle
    slots: int
    deadline: float
    reason: str


class Changes(collections.abc.Sequence):
    """The leases one :meth:`Engine.progress` call saw move, each once, with
    its state now: a sequence of ``(handle, state)`` pairs (a lease's
    ``Lease.handle`` and a :class:`State` value), equal to the list of them.
    A pair is built when it is read (iteration, ``changes[i]``): a round
    whose moves nobody reads builds none, as the Go owner's reads none (SPEC
    §5: what the binding adds per lease). :attr:`handles` and :attr:`states`
    are the two columns, for a caller that takes them whole."""

    __slots__ = ("_h", "_s")

    def __init__(self, handles: array.array, states: array.array):
        # Copies of the library's answers (uint64 and int32 arrays), private
        # and never written again: a Changes is immutable.
        self._h, self._s = handles, states

    @property
    def handles(self) -> list[int]:
        """The handles, in order."""
        return self._h.tolist()

    @property
    def states(self) -> list[int]:
        """Their states, in the same order (State values)."""
        return self._s.tolist()

    def __len__(self) -> int:
        return len(self._h)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(zip(self._h[i], self._s[i]))
        return self._h[i], self._s[i]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self._h, self._s)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Changes):
            return other._h == self._h and other._s == self._s
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, which has none

    def __repr__(self) -> str:
        return f"Changes({list(self)!r})"


class Round(NamedTuple):
    """What one :meth:`Engine.progress` round did: the moves made, each
    lease that moved with its state now (:class:`Changes`: handles and
    State values), the containments it raised, whether the engine halted or
    drained, and the leases recovered (handles; the recover policy)."""

    moves: int
    changed: Changes
    containments: list[Containment]
    halted: bool
    drained: bool
    recoveries: list[LeaseHandle]


# Round's constructor without its Python-level __new__: progress builds one
# per call, with the fields in order (NamedTuple's own _make does the same).
_new_round = tuple.__new__
# CRound's fields, in order, read in one call (_abi.ROUND: its layout).
_unpack_round = _abi.ROUND.unpack_from


@dataclass(frozen=True)
class Report:
    """What an engine still holds, and whether its memory may be handed back
    (the reference's ``ShutdownResult``)."""

    held: dict[State, int]
    slots_held: int
    slots_quarantined: int
    drained: bool
    halted: bool
    halt_reason: str = ""  # why it halted; empty while it runs
    # Leases whose memory is not proven reusable (ACTIVE, QUIESCING, IN_DOUBT;
    # quarantined ones included): the reference's in_doubt_context_count.
    in_doubt: int = 0
    # The memory as a whole: IN_DOUBT while a lease is in doubt or a slot is
    # quarantined; else QUIESCED_SUCCESS, or NOT_EXPOSED if nothing was ever
    # handed to a backend.
    physical: Physical = Physical.IN_DOUBT
    # Drained, nothing in doubt, nothing quarantined: the memory may be
    # handed back to its owner (the reference's safe_to_release_managers).
    safe_to_release: bool = False


@dataclass(frozen=True)
class BackendFaults:
    """What one backend did that the contract forbids: each costs at most its
    own leases, never the engine."""

    violations: int = 0            # answers taken as contract violations
    panics: int = 0                # failures kvready caught inside a call into it
    repeated_completions: int = 0  # a completion reported again for an attempt: dropped
    early_completions: int = 0     # a completion poll did not bear out


def _faults(c: _abi.CBackendFaults) -> BackendFaults:
    return BackendFaults(c.violations, c.panics, c.repeated_completions, c.early_completions)


@dataclass(frozen=True)
class Stats:
    """The engine's counters (a miss is never counted as a failure)."""

    leases: dict[State, int]
    outcomes: dict[OutcomeKind, int]
    lent: int
    released: int
    quarantined_leases: int
    slots_free: int
    slots_held: int
    slots_quarantined: int
    refused: int
    stale_evidence: int
    violations: int
    unproven: int
    quiesce_calls: int
    quiesce_retries: int
    quiesce_timeouts: int
    cancel_requests: int
    cancel_errors: int
    ungrantable: int
    containments: int
    invariant_breaches: int
    halted: bool
    recovered: int = 0        # contained leases proven over after all (the recover policy)
    outstanding: int = 0      # submissions outstanding at the backends now
    max_outstanding: int = 0  # their bound (0: none)
    fetcher_faults: BackendFaults = BackendFaults()    # counted against the fetching backend
    publisher_faults: BackendFaults = BackendFaults()  # and the publishing one
    handoffs: int = 0         # thread hand-offs: work to a worker, the owner woken by another thread
    quiesce_probes: int = 0   # try_quiesce calls asked on the owner's thread
    slots_inherited: int = 0  # slots earlier engines over the same memory left out of circulation: never lent


# How a CStats field becomes its Stats field, where it is not an int.
_STATS_FIELD = {"leases": lambda a: {s: a[s] for s in State}, "outcomes": lambda a: {o: a[o] for o in OutcomeKind},
                "halted": bool, "fetcher_faults": _faults, "publisher_faults": _faults}


def _stats(c: _abi.CStats) -> Stats:
    """c as Stats: each field from the CStats field of its name (every CStats
    field reaches one: python/tests/test_declared.py)."""
    return Stats(**{f.name: _STATS_FIELD.get(f.name, int)(getattr(c, f.name)) for f in fields(Stats)})


def _report(c: _abi.CReport) -> Report:
    return Report({s: c.held[s] for s in State}, c.slots_held, c.slots_quarantined, bool(c.drained), bool(c.halted),
                  c.halt_reason.decode("utf-8", "replace"), c.in_doubt, Physical(c.physical), bool(c.safe_to_release))


def _cancel_result(c: _abi.CCancelResult) -> CancelResult:
    return CancelResult(Logical(c.logical), Physical(c.physical), bool(c.retryable), c.reason.decode("utf-8", "replace"))


class Lease:
    """One lease: the staging rows of one fetch or publish. A context manager
    that releases it on exit (its slots return once its fence is proven)."""

    __slots__ = ("engine", "handle")

    def __init__(self, engine: "Engine", handle: int):
        self.engine, self.handle = engine, handle

    def info(self) -> LeaseInfo:
        return self.engine.info(self)

    def readiness(self) -> Readiness:
        return self.engine.readiness(self)

    def arrived(self) -> list[tuple[int, int]]:
        return self.engine.arrived(self)

    def wait(self, until: Until = Until.SETTLED, timeout: float | None = None) -> LeaseInfo:
        """Run rounds until the lease reaches until: see :meth:`Engine.wait`
        (the default timeout outlasts the lease's default containment)."""
        return self.engine.wait(self, until, timeout)

    def layer_status(self, layer: int) -> LayerStatus:
        """Where layer (0 .. ``engine.layers`` - 1) of this fetch stands,
        without running a round: see :meth:`Engine.layer_status`."""
        return self.engine.layer_status(self, layer)[0]

    def layer_ready(self, layer: int) -> bool:
        """Whether layer's copies landed, so the device may read it
        (:class:`LayerStatus` ``READY``); never blocks, runs no round."""
        return self.engine.layer_ready(self.handle, layer)

    def wait_layer(self, layer: int, timeout: float | None = None) -> Readiness:
        """Block until layer is ready (vLLM's ``wait_for_layer_load``): see
        :meth:`Engine.wait_layer`. Raises LayerFailedError at once for a
        failed layer."""
        return self.engine.wait_layer(self, layer, timeout)

    def layer_computed(self, layer: int, event: Any = None) -> None:
        """Report layer of this layerwise publish computed (vLLM's
        ``save_kv_layer``): see :meth:`Engine.layer_computed`."""
        self.engine.layer_computed(self, layer, event)

    def release(self) -> None:
        self.engine.release(self)

    def cancel(self) -> CancelResult:
        """Cancel it: see :meth:`Engine.cancel`."""
        return self.engine.cancel(self)

    def retry(self) -> None:
        self.engine.retry(self)

    def __int__(self) -> int:
        return self.handle

    __index__ = __int__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lease) and other.handle == self.handle and other.engine is self.engine

    def __hash__(self) -> int:
        return hash(self.handle)

    def __repr__(self) -> str:
        return f"Lease(#{self.handle & 0xFFFFFFFF}.{self.handle >> 32})"

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.release()
        except StaleLeaseError:
            pass  # released already, and retired


class LendError(KvreadyError):
    """Some requests of :meth:`Engine.lend_many` were refused: ``leases``
    holds the leases lent (None where refused), ``errors`` the refusals."""

    def __init__(self, leases: list[Lease | None], errs: list[KvreadyError | None]):
        first = next(e for e in errs if e is not None)
        super().__init__(first.status, f"{sum(e is not None for e in errs)} of {len(errs)} requests refused; the first: {first}")
        self.leases, self.errors = leases, errs


class LeaseBatch(collections.abc.Sequence):
    """The leases one :meth:`Engine.lend_many` call lent, in its requests'
    order: a sequence of :class:`Lease` (``batch[i]``, iteration, ``len``),
    equal to the list of the same leases. Each Lease is built when it is
    read, and the handles stay packed as the C ABI takes them, so that a
    batch handed back whole — :meth:`Engine.release_many`,
    :meth:`Engine.infos` — costs no Python work per lease (SPEC §5: what the
    binding adds per lease is what it must). Immutable: any number of threads
    may read it and hand it back."""

    __slots__ = ("engine", "_c")

    def __init__(self, engine: "Engine", handles: Any):
        # handles: a ctypes uint64_t array the library filled; kept private,
        # never written again, so its handles need no check on the way back.
        self.engine, self._c = engine, handles

    def __len__(self) -> int:
        return len(self._c)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [Lease(self.engine, h) for h in self._c[i]]
        return Lease(self.engine, self._c[i])

    def __iter__(self) -> Iterator[Lease]:
        return map(Lease, repeat(self.engine, len(self._c)), self._c)

    @property
    def handles(self) -> list[int]:
        """The leases' handles (``Lease.handle``), in order."""
        return self._c[:]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LeaseBatch):
            return other.engine is self.engine and other._c[:] == self._c[:]
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, which has none

    def __repr__(self) -> str:
        return f"LeaseBatch({list(self)!r})"


# The library's defaults (kvready_engine_config_defaults: declared once, in
# Go). An Engine starts from them; a setting left None keeps its default.
DEFAULTS = _abi.config_defaults()
# The default request deadline and drain grace, in seconds; a pending lease
# is contained at their sum.
DEFAULT_REQUEST_TIMEOUT = DEFAULTS.request_timeout_ns / 1e9
DEFAULT_DRAIN_GRACE = DEFAULTS.drain_grace_ns / 1e9
# What a default wait adds to the containment horizon: time for the round
# that contains the lease to run and be seen.
WAIT_MARGIN = 2.0


def _lease(x: Any) -> int:
    """A lease (or its handle) as the C ABI's uint64_t."""
    return integer(x, ctypes.c_uint64, "lease")


_HANDLE = operator.attrgetter("handle")
_LEASE_TYPE = frozenset({Lease})


def _leases(xs: Sequence[Lease | int]) -> array.array:
    """Leases (or their handles) as the C ABI's uint64_t array, checked in
    bulk (_border.integers) rather than with one _lease() call per lease.
    A list of nothing but Lease objects has its handles read and converted
    in C: array.array refuses a handle that is no integer or does not fit
    (TypeError, OverflowError), and those batches take the checked path
    instead, which names the first such value."""
    if (type(xs) is list or type(xs) is tuple) and _LEASE_TYPE.issuperset(map(type, xs)):
        try:
            return array.array("Q", map(_HANDLE, xs))
        except (TypeError, OverflowError):
            xs = list(map(_HANDLE, xs))
    return integers(xs, ctypes.c_uint64, "lease")


def _u64s(arr: array.array) -> Any:
    """A uint64 array.array as the uint64_t * argument the C ABI takes,
    sharing its memory (None for an empty one: the C ABI takes NULL with 0)."""
    return (ctypes.c_uint64 * len(arr)).from_buffer(arr) if arr else None


def _packed(engine: "Engine", leases: LeaseBatch | Sequence[Lease | int]) -> Any:
    """leases as the uint64_t array a batched call on engine takes (None:
    none): a LeaseBatch of engine as lend_many packed it, anything else
    checked (_leases)."""
    if type(leases) is LeaseBatch:
        if leases.engine is not engine:
            raise InvalidArgumentError(errors.INVALID, "kvready: a LeaseBatch of another engine; want the leases "
                                       "this engine lent (each lease's handle names a lease of its own engine only)")
        return leases._c if len(leases._c) else None
    return _u64s(_leases(leases))


def _layer(x: Any) -> int:
    """A layer number as the C ABI's int32_t."""
    return integer(x, ctypes.c_int32, "layer")


def _handle(x: Any, what: str) -> int:
    if x is None:
        return 0
    h = getattr(x, "handle", None)
    if not isinstance(h, int) or not h:
        raise InvalidArgumentError(errors.INVALID, f"kvready: {what} is a {type(x).__name__}; want an object with a live handle")
    return h



class _Scratch(threading.local):
    """An engine's out-parameters, one set per thread: ctypes releases the
    GIL during a call, so threads that call one engine at once (SPEC §4 rule
    18) each write into their own, never into another's answer."""

    cap = 1024

    def __init__(self) -> None:
        self.round = _abi.CRound()
        self.round_ref = ctypes.byref(self.round)
        # Python arrays, and ctypes views of the same memory for the calls:
        # an array's slice is read in C at a few ns a value, where a ctypes
        # slice or a memoryview's tolist() unpacks each value for 20-30 ns.
        self.lease_buf = array.array("Q", bytes(8 * self.cap))
        self.state_buf = array.array("i", bytes(4 * self.cap))
        self.leases = (ctypes.c_uint64 * self.cap).from_buffer(self.lease_buf)
        self.states = (ctypes.c_int32 * self.cap).from_buffer(self.state_buf)
        self.one = (ctypes.c_uint64 * 1)()
        self.info = _abi.CLeaseInfo()
        self.iv = _abi.CInterval()
        self.layer_st = ctypes.c_int32()
        self.layer_ref = ctypes.byref(self.layer_st)
        self.count = ctypes.c_int64()
        self.count_ref = ctypes.byref(self.count)
        # What the hot calls read, each in one look-up of this thread's
        # attributes (a threading.local's costs 50-70 ns).
        self.progress_args = (self.round, self.round_ref, self.leases, self.states, self.cap, self.lease_buf,
                              self.state_buf)
        self.count_args = (self.count_ref, self.count)

class Engine:
    """A readiness engine over staging memory, a backend and a device.

    Every method is called from one owner thread. The engine wakes its owner
    through :meth:`fileno` (register the engine with ``selectors`` or
    ``asyncio``'s ``loop.add_reader``); run :meth:`progress` when it is
    readable, or block on one lease with :meth:`wait`. A context manager:
    on exit it shuts down (every lease proven and released, or contained)
    and frees the engine.

    ``policy`` is the containment policy (:class:`Policy` or its name;
    quarantine by default); ``recover_every`` the recover policy's cadence
    (seconds, default 1). ``max_outstanding`` bounds the submissions
    outstanding at the backends (0: the backend's own limit where it reports
    one, else none): a lease beyond it waits before its submission, its
    deadline not started. Durations are in seconds. A setting left None (a
    duration also 0) takes the library's default, read from the library
    itself (kvready_engine_config_defaults; :data:`DEFAULTS`): every field of
    the C config is a keyword here, defaulted there.
    ``on_containment``, ``on_recovery`` (a lease handle) and ``on_halt`` (the
    reason) are called on the owner thread by every call that runs rounds:
    :meth:`progress`, :meth:`wait`, :meth:`sync`, :meth:`close` and
    :meth:`shutdown` (and so the context manager's exit), once per event.

    ``layout`` (the layout document: a dict, or its JSON) makes a fetch's
    copies go layer by layer (SPEC §4 rule 16): each layer's byte ranges of
    every served row, then one event, so that :meth:`Lease.wait_layer`
    returns as soon as that layer landed while later layers still copy.
    Layer group g is staged in the memory's group g (one memory group per
    layer group, of its pool group's slot width). ``tokens_per_block`` 0
    takes the layout's; another value than the layout's is refused.

    One live engine per :class:`Memory` (SPEC §4 rule 17): an engine over
    memory another live engine holds raises :class:`BusyError` naming the
    holder. The claim ends when :meth:`close` or :meth:`shutdown` returns,
    or when the engine halts. A later engine over the memory never lends a
    slot that was not free then (quarantined, or held by a lease left
    unfinished: an old backend may still touch it) and counts them in
    ``stats().slots_inherited``; only freeing the memory forgets them. Shut
    down (the context manager does) to hand over every slot.
    """

    def __init__(self, memory: Any, tokens_per_block: int, *, device: Any, backend: Any = None,
                 fetcher: Any = None, publisher: Any = None, request_timeout: float | None = None,
                 drain_grace: float | None = None, quiesce_timeout: float | None = None,
                 retry_backoff: float | None = None, max_retry_backoff: float | None = None,
                 quiesce_workers: int | None = None, keep_released: int | None = None,
                 policy: Policy | str | int | None = None, max_outstanding: int | None = None,
                 recover_every: float | None = None,
                 on_containment: Callable[[Containment], None] | None = None,
                 on_recovery: Callable[[int], None] | None = None,
                 on_halt: Callable[[str], None] | None = None, shutdown_timeout: float = 60.0,
                 layout: dict | str | bytes | None = None):
        self._h = 0
        if backend is not None:
            fetcher = fetcher if fetcher is not None else backend
            publisher = publisher if publisher is not None else backend
        # Keep what the engine calls into alive as long as it may.
        self.memory, self.device, self.fetcher, self.publisher = memory, device, fetcher, publisher
        # The library's defaults (read once, at import): a setting left None
        # (a duration also 0) keeps its default.
        cfg = _abi.EngineConfig.from_buffer_copy(DEFAULTS)
        cfg.memory = _handle(memory, "memory")
        cfg.device = _handle(device, "device")
        cfg.fetcher = _handle(fetcher, "fetcher") if fetcher is not None and _has(fetcher, "fetch") else 0
        cfg.publisher = _handle(publisher, "publisher") if publisher is not None and _has(publisher, "publish") else 0
        cfg.tokens_per_block = integer(tokens_per_block, ctypes.c_int32, "tokens_per_block")
        for name, seconds in (("request_timeout", request_timeout), ("drain_grace", drain_grace),
                              ("quiesce_timeout", quiesce_timeout), ("retry_backoff", retry_backoff),
                              ("max_retry_backoff", max_retry_backoff), ("recover_every", recover_every)):
            if ns := nanoseconds(seconds, name):
                setattr(cfg, name + "_ns", ns)
        for name, n in (("quiesce_workers", quiesce_workers), ("keep_released", keep_released),
                        ("max_outstanding", max_outstanding)):
            if n is not None:
                setattr(cfg, name, integer(n, ctypes.c_int32, name))
        if policy is not None:
            cfg.policy = Policy.of(policy)
        # The wait's default timeout is derived from these.
        self.request_timeout = cfg.request_timeout_ns / 1e9
        self.drain_grace = cfg.drain_grace_ns / 1e9
        nanoseconds(shutdown_timeout, "shutdown_timeout")  # refused now, not at the end
        if layout is not None:
            doc = layout if isinstance(layout, bytes) else (layout if isinstance(layout, str) else json.dumps(layout)).encode()
            cfg.layout, cfg.layout_len = doc, len(doc)
        h = ctypes.c_uint64()
        _abi.check(_abi.engine_new(ctypes.byref(cfg), ctypes.byref(h)))
        self._h = h.value
        self._config = cfg  # what it was assembled with (python/tests/test_declared.py reads it)
        self.policy = Policy(cfg.policy)
        self.on_containment = on_containment
        self.on_recovery = on_recovery
        self.on_halt = on_halt
        self._halt_seen = False
        self.shutdown_timeout = shutdown_timeout
        fd = ctypes.c_int32()
        _abi.check(_abi.engine_wake_fd(self.handle, ctypes.byref(fd)), self.handle)
        self._fd = fd.value
        self._sc = _Scratch()

    @property
    def handle(self) -> int:
        """The engine's C handle; EngineClosedError once it was freed (its
        ``with`` block ended, or :meth:`free`), so that a call after that
        says the engine is gone rather than that a handle is bad."""
        if not self._h:
            raise EngineClosedError(errors.CLOSED, "kvready: the engine was shut down and freed (its with block ended, "
                                    "or free() was called); want a live engine: create a new one")
        return self._h

    @property
    def containment_horizon(self) -> float:
        """Seconds from a lease's submission to its containment deadline
        (request_timeout + drain_grace): by then it has settled, or it is
        contained."""
        return self.request_timeout + self.drain_grace

    @property
    def wait_timeout(self) -> float:
        """The default timeout of :meth:`wait`: the containment horizon
        plus WAIT_MARGIN."""
        return min(self.containment_horizon + WAIT_MARGIN, MAX_WAIT_SECONDS)

    @property
    def closed(self) -> bool:
        """Whether the engine was freed (its ``with`` block ended, or
        :meth:`free`): every call then raises EngineClosedError."""
        return not self._h

    # ---- waking ----

    def fileno(self) -> int:
        """The wake file descriptor: readable when a round has work. Do not
        read or close it; :meth:`progress` drains it."""
        return self._fd

    wake_fd = property(fileno)

    def progress(self) -> Round:
        """Run one round (never blocks) and say what moved."""
        h = self._h or self.handle
        # One look-up of the thread's buffers, and CRound's fields in one
        # unpack: per call, each attribute of a threading.local or a ctypes
        # Structure costs 50-70 ns, as much as the rest of a quiet round's
        # Python work (SPEC §5: what the binding adds per lease).
        rnd, round_ref, leases, states, cap, lease_buf, state_buf = self._sc.progress_args
        st = _abi.progress(h, round_ref, leases, states, cap)
        if st:
            _abi.check(st, h)
        moves, n, more, contained, recovered, halted, drained = _unpack_round(rnd)
        # Copies of the thread's buffers (array slices: one memcpy each), the
        # pairs left to be built when read.
        handles, states_now = lease_buf[:n], state_buf[:n]
        if more or contained or recovered or halted:
            return self._round_rest(h, moves, handles, states_now, more, contained, recovered, halted, drained)
        return _new_round(Round, (moves, Changes(handles, states_now), [], False, drained != 0, []))

    def _round_rest(self, h: int, moves: int, handles: array.array, states: array.array, more: int,
                    contained: int, recovered: int, halted: int, drained: int) -> Round:
        """progress() for a round that left changes to read, or raised
        events: read them, tell the callbacks, and build the Round."""
        sc = self._sc
        while more:
            k = ctypes.c_size_t()
            _abi.check(_abi.changes(h, sc.leases, sc.states, sc.cap, ctypes.byref(k)), h)
            handles.extend(sc.lease_buf[:k.value])
            states.extend(sc.state_buf[:k.value])
            more -= k.value
            if not k.value:
                break
        containments = self.containments() if contained else []
        recoveries = self.recoveries() if recovered else []
        if halted:
            self._tell_halt()
        return _new_round(Round, (moves, Changes(handles, states), containments, halted != 0, drained != 0,
                                  recoveries))

    def _tell_halt(self) -> None:
        if not self._halt_seen:
            self._halt_seen = True
            if self.on_halt is not None:
                self.on_halt(self.report().halt_reason)

    def _deliver(self) -> None:
        """Pass what a call that ran rounds (wait, sync, close, shutdown)
        raised to the callbacks that are set. Without a callback the events
        stay queued for progress() to return."""
        if not self.handle:
            return
        if self.on_containment is not None:
            self.containments()
        if self.on_recovery is not None:
            self.recoveries()
        if self.on_halt is not None and not self._halt_seen and self.report().halted:
            self._tell_halt()

    def containments(self) -> list[Containment]:
        """Containment events not yet read, oldest first; each is also passed
        to on_containment, if set."""
        out: list[Containment] = []
        buf = (_abi.CContainment * 64)()
        while True:
            n = ctypes.c_size_t()
            _abi.check(_abi.containments(self.handle, buf, 64, ctypes.byref(n)), self.handle)
            for c in buf[:n.value]:
                out.append(Containment(LeaseHandle(c.lease), c.slots, c.deadline_unix_ns / 1e9, c.reason.decode("utf-8", "replace")))
            if n.value < 64:
                break
        if self.on_containment is not None:
            for c in out:
                self.on_containment(c)
        return out

    def recoveries(self) -> list[LeaseHandle]:
        """Recovery events not yet read, oldest first (the recover policy):
        the handles of contained leases whose access was proven over after
        all, their slots back; each is also passed to on_recovery, if set."""
        out: list[int] = []
        buf = (ctypes.c_uint64 * 64)()
        while True:
            n = ctypes.c_size_t()
            _abi.check(_abi.recoveries(self.handle, buf, 64, ctypes.byref(n)), self.handle)
            out.extend(LeaseHandle(h) for h in buf[:n.value])
            if n.value < 64:
                break
        if self.on_recovery is not None:
            for h in out:
                self.on_recovery(h)
        return out

    # ---- leases ----

    def lend(self, request: Request) -> Lease:
        """Ask for a lease; refused requests raise with the engine's reason
        and change nothing."""
        out = self._sc.one
        _abi.check(_abi.lend(self.handle, ctypes.byref(request._c), out), self.handle)
        return Lease(self, out[0])

    def lend_many(self, requests: RequestBatch | Sequence[Request]) -> LeaseBatch:
        """Lend many at once (one call): a :class:`LeaseBatch`, the leases in
        the requests' order; LendError if any was refused."""
        batch = requests if isinstance(requests, RequestBatch) else RequestBatch(requests)
        n = batch._n
        h = self._h or self.handle
        # The handles go straight into the LeaseBatch's own array (a fresh
        # one: no other call writes it, nothing to copy after), the statuses
        # into the calling thread's buffer (a batch's own for a batch larger
        # than it), never into one another thread's call may be writing.
        out = batch._handles()
        if n == 0:
            return LeaseBatch(self, out)
        sts = self._sc.states if n <= _Scratch.cap else (ctypes.c_int32 * n)()
        st = _abi.lend_many(h, batch._arr, n, out, sts)
        if st == 0:
            return LeaseBatch(self, out)
        if st == errors.BAD_HANDLE:
            _abi.check(st, h)
        msg = _abi.message(h)
        leases: list[Lease | None] = []
        errs: list[KvreadyError | None] = []
        for lh, s in zip(out[:n], sts[:n]):
            leases.append(Lease(self, lh) if s == 0 else None)
            errs.append(None if s == 0 else errors.from_status(s, msg))
        raise LendError(leases, errs)

    def release(self, lease: Lease | int) -> None:
        """Done with the lease: its slots return once it is logically
        complete (at once if it is; else when its fence is proven). Releasing
        a quarantined lease gives up the claim: its slots stay out for ever,
        and wait(Until.RELEASED) returns it as quarantined."""
        _abi.check(_abi.release(self.handle, _lease(lease)), self.handle)

    def release_many(self, leases: LeaseBatch | Sequence[Lease | int]) -> None:
        """Release many at once (one call); raises the first refusal. A
        handle that does not fit a uint64_t refuses the whole call before
        any lease is released; so does a LeaseBatch of another engine."""
        if type(leases) is LeaseBatch and leases.engine is self:
            arr = leases._c  # packed by lend_many, never written since: no check needed
            n = len(arr)
        else:
            arr = _packed(self, leases)
            n = len(arr) if arr is not None else 0
        h = self._h or self.handle
        st = _abi.release_many(h, arr if n else None, n, None)
        if st:
            _abi.check(st, h)

    def cancel(self, lease: Lease | int) -> CancelResult:
        """Cancel a lease still waiting for its outcome (a local Cancelled).
        A submitted lease's backend is asked once to stop; its slots return
        once access is proven over. A lease not yet submitted is withdrawn:
        no request, its slots back at once (a publish's once its copies
        landed), no release needed. Refused (nothing changes) only for a
        stale handle or an outcome already latched.

        Returns the :class:`CancelResult` (SPEC §4 rule 19): ``ACCEPTED``,
        with the lease's physical disposition right after the cancel —
        ``safe_to_reuse`` only for a lease never exposed. A refusal raises as
        before (StaleLeaseError, CallFailedError, EngineHaltedError), the
        exception's ``result`` holding the answer: ``ALREADY_TERMINAL``,
        ``NOT_FOUND`` or ``REJECTED``."""
        c = _abi.CCancelResult()
        st = _abi.cancel_with_result(self.handle, _lease(lease), ctypes.byref(c))
        if st != 0:
            err = errors.from_status(st, _abi.message(self.handle))
            if c.logical:  # the engine answered; a bad engine handle writes nothing
                err.result = _cancel_result(c)
            raise err
        return _cancel_result(c)

    def retry(self, lease: Lease | int) -> None:
        """Ask the backend again, next round, whether access has ended."""
        _abi.check(_abi.retry(self.handle, _lease(lease)), self.handle)

    def info(self, lease: Lease | int) -> LeaseInfo:
        """Describe a lease."""
        sc = self._sc
        sc.one[0] = _lease(lease)
        _abi.check(_abi.lease_infos(self.handle, sc.one, 1, ctypes.byref(sc.info), None), self.handle)
        return _info(sc.info)

    def infos(self, leases: LeaseBatch | Sequence[Lease | int]) -> list[LeaseInfo | KvreadyError]:
        """Describe many leases in one call (an exception in place of each
        lease refused, e.g. StaleLeaseError)."""
        arr = _packed(self, leases)
        n = len(arr) if arr is not None else 0
        if not n:
            return []
        out = (_abi.CLeaseInfo * n)()
        sts = (ctypes.c_int32 * n)()
        st = _abi.lease_infos(self.handle, arr, n, out, sts)
        if st == errors.BAD_HANDLE:
            _abi.check(st, self.handle)
        msg = _abi.message(self.handle) if st else ""
        return [_info(out[i]) if sts[i] == 0 else errors.from_status(sts[i], msg) for i in range(n)]

    def readiness(self, lease: Lease | int) -> Readiness:
        """Where a fetched request may resume (NotReadyError until its copies
        landed)."""
        iv = self._sc.iv
        _abi.check(_abi.readiness(self.handle, _lease(lease), ctypes.byref(iv)), self.handle)
        return Readiness(iv.usable_until, iv.restart_floor)

    @property
    def layers(self) -> int:
        """How many layers a fetch's copies go in: the layout's layers
        (layer k is its k-th layer id, ascending), or 1 without a layout."""
        n = ctypes.c_int32()
        _abi.check(_abi.layers(self.handle, ctypes.byref(n)), self.handle)
        return n.value

    def layer_status(self, lease: Lease | int, layer: int) -> tuple[LayerStatus, Readiness | None]:
        """Where layer of the fetch lease stands, and with READY the
        readiness it answers (the same for every layer; the lease's own once
        every layer landed). It runs no round: :meth:`progress` (woken by
        :meth:`fileno`, which a layer landing makes readable) moves the engine
        on. InvalidArgumentError for a layer out of range, NotReadyError for
        a publish."""
        st, iv = self._sc.layer_st, self._sc.iv
        _abi.check(_abi.layer_ready(self.handle, _lease(lease), _layer(layer), ctypes.byref(st), ctypes.byref(iv)), self.handle)
        status = LayerStatus(st.value)
        return status, (Readiness(iv.usable_until, iv.restart_floor) if status == LayerStatus.READY else None)

    def layer_ready(self, lease: Lease | int, layer: int) -> bool:
        """Whether layer of the fetch lease is READY (:meth:`layer_status`'s
        question, answered with one call and nothing built: a connector may
        ask it per layer of every forward pass)."""
        h = self._h or self.handle
        sc = self._sc
        st = _abi.layer_ready(h, _lease(lease), _layer(layer), sc.layer_ref, None)
        if st:
            _abi.check(st, h)
        return sc.layer_st.value == 1

    def layer_computed(self, lease: Lease | int, layer: int, event: Any = None) -> None:
        """Report layer (0 .. :attr:`layers` - 1) of the layerwise publish
        lease (``Request.publish(rows, layerwise=True)``) computed: its
        device→staging copies of every row are queued at the next round
        behind event — a :class:`SimEvent` of the engine's simulated device
        (a compute stream's :meth:`SimStream.record`), or for a
        :class:`Device` written in Python any event its ``wait`` takes (a
        ``torch.cuda.Event`` recorded on the compute stream) — or at once
        with None (computed and synchronised already). Layers are reported
        in order, once each, once the lease is GRANTED. The publish is
        submitted when every layer landed in staging; releasing or
        cancelling it before the last layer withdraws it (nothing is
        submitted; its slots return once the queued copies landed).
        Anything else raises InvalidArgumentError naming why, and changes
        nothing."""
        c_lease, c_layer = _lease(lease), _layer(layer)  # checked before the device is handed the event
        token = self._event_token(event)
        try:
            _abi.check(_abi.layer_computed(self.handle, c_lease, c_layer, token), self.handle)
        except BaseException:
            # Refused: nothing will ever wait for the event the device was handed.
            from .device import Device
            if isinstance(self.device, Device):
                self.device._waits.pop(token, None)
            raise

    def _event_token(self, event: Any) -> int:
        """What kvready_layer_computed takes for event on this engine's device."""
        from .device import Device, SimEvent
        if event is None:
            return 0
        if isinstance(event, SimEvent):
            if event.device is not self.device:
                raise InvalidArgumentError(errors.INVALID, f"kvready: {event!r} is an event of another device than the "
                                           "engine's; want an event of a stream of the engine's device")
            return event.token
        if isinstance(self.device, Device):
            return self.device._wait_token(event)
        raise InvalidArgumentError(errors.INVALID, f"kvready: event {event!r}; the engine's device takes a kvready.SimEvent "
                                   "of its own streams, or None")

    def wait_layer(self, lease: Lease | int, layer: int, timeout: float | None = None) -> Readiness:
        """Run rounds on this thread until layer of the fetch lease is ready
        (the GIL released), and return the readiness it answers. Raises
        LayerFailedError at once when a copy of the layer or of an earlier
        one failed (the message says why: recompute the lease's rows),
        NotReadyError when it is never answered (quarantined, or released
        before its copies landed), TimedOutError after timeout seconds (None:
        :attr:`wait_timeout`)."""
        c_lease, c_layer = _lease(lease), _layer(layer)
        ns = nanoseconds(self.wait_timeout if timeout is None else timeout, "timeout") or 1
        iv = _abi.CInterval()
        try:
            _abi.check(_abi.wait_layer(self.handle, c_lease, c_layer, ns, ctypes.byref(iv)), self.handle)
        finally:
            self._deliver()
        return Readiness(iv.usable_until, iv.restart_floor)

    def arrived(self, lease: Lease | int) -> list[tuple[int, int]]:
        """The (group, block) pairs of a fetch that arrived."""
        c_lease = _lease(lease)
        cap = 64
        while True:
            gs, bs = (ctypes.c_int32 * cap)(), (ctypes.c_int32 * cap)()
            n = ctypes.c_size_t()
            st = _abi.arrived(self.handle, c_lease, gs, bs, cap, ctypes.byref(n))
            if st == errors.BUFFER and n.value > cap:
                cap = n.value
                continue
            _abi.check(st, self.handle)
            return list(zip(gs[:n.value], bs[:n.value]))

    def wait(self, lease: Lease | int, until: Until = Until.SETTLED, timeout: float | None = None) -> LeaseInfo:
        """Run rounds on this thread until the lease reaches until (TimedOutError
        after timeout seconds). Python backends and devices keep running on
        other threads meanwhile (the GIL is released).

        The default timeout (None) is :attr:`wait_timeout`: the engine's
        containment horizon — ``request_timeout + drain_grace``, 30 s + 10 s
        = 40 s with the defaults — plus :data:`WAIT_MARGIN` (2 s) for the
        round that contains the lease. So a lease that waits with the
        defaults ends settled, or contained (QUARANTINED), never in a
        TimedOutError first, whatever its backend does: the two defaults
        agree. (A lease held back by ``max_outstanding`` starts its deadline
        only at its submission: pass a longer timeout for it.)"""
        c_lease, c_until = _lease(lease), integer(until, ctypes.c_int32, "until")
        ns = nanoseconds(self.wait_timeout if timeout is None else timeout, "timeout") or 1
        info = _abi.CLeaseInfo()
        try:
            _abi.check(_abi.wait(self.handle, c_lease, c_until, ns, ctypes.byref(info)), self.handle)
        finally:
            self._deliver()
        return _info(info)

    def sync(self, timeout: float = 30.0) -> int:
        """Run rounds until the background has caught up and a round changes
        nothing; the moves made."""
        ns = nanoseconds(timeout, "timeout") or 1
        n = ctypes.c_int64()
        try:
            _abi.check(_abi.sync(self.handle, ns, ctypes.byref(n)), self.handle)
        finally:
            self._deliver()
        return n.value

    def count(self, state: State | int) -> int:
        """The number of leases in a state."""
        h = self._h or self.handle
        # A State is an int32 by construction, and ctypes takes it as the int
        # it is: the check is for anything else.
        c_state = state if type(state) is State else integer(state, ctypes.c_int32, "state")
        ref, n = self._sc.count_args
        st = _abi.count(h, c_state, ref)
        if st:
            _abi.check(st, h)
        return n.value

    def stats(self) -> Stats:
        """A snapshot of the counters."""
        c = _abi.CStats()
        _abi.check(_abi.engine_stats(self.handle, ctypes.byref(c)), self.handle)
        return _stats(c)

    # ---- the end ----

    def close(self) -> Report:
        """Stop admission and tell every lease; run one round. The memory is
        handed over as it returns: what is still held stays out of
        circulation for later engines over it (use :meth:`shutdown`)."""
        c = _abi.CReport()
        try:
            _abi.check(_abi.engine_close(self.handle, ctypes.byref(c)), self.handle)
        finally:
            self._deliver()
        return _report(c)

    def shutdown(self, timeout: float | None = None) -> Report:
        """Close, then run rounds until drained (TimedOutError otherwise, its
        message and its ``report`` saying how many leases the shutdown leaves
        in doubt). The memory is handed over as it returns: drained, every
        slot; ``report.safe_to_release`` says whether it may go back to its
        owner."""
        ns = nanoseconds(self.shutdown_timeout if timeout is None else timeout, "timeout") or 1
        c = _abi.CReport()
        try:
            st = _abi.engine_shutdown(self.handle, ns, ctypes.byref(c))
            if st != 0:
                err = errors.from_status(st, _abi.message(self.handle))
                err.report = _report(c)
                raise err
        finally:
            self._deliver()
        return _report(c)

    def report(self) -> Report:
        """What the engine holds now."""
        c = _abi.CReport()
        _abi.check(_abi.engine_report(self.handle, ctypes.byref(c)), self.handle)
        return _report(c)

    def free(self, force: bool = False) -> None:
        """Forget a drained engine (force: abandon one that is not, keeping
        what it holds held)."""
        if self._h:
            _abi.check(_abi.engine_free(self._h, 1 if force else 0), self._h)
            self._h = 0

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._h:
            return
        try:
            self.shutdown()
        except errors.TimedOutError as e:
            log.error("kvready: the engine did not drain in %s s; abandoning it with its slots held (%d leases in doubt)",
                      self.shutdown_timeout, e.report.in_doubt)
            self.free(force=True)
            raise
        except errors.EngineHaltedError:
            log.error("kvready: the engine halted; abandoning it with what it holds (restart the manager)")
            self.free(force=True)
            raise
        self.free()


def _has(obj: Any, method: str) -> bool:
    """Whether a backend can fetch / publish: kvready's own backends do
    both; a Python backend what it overrides."""
    from .backend import Backend
    if isinstance(obj, Backend):
        return getattr(type(obj), method) is not getattr(Backend, method)
    return bool(getattr(obj, "can_" + method, True))  # a peer backend does one of the two
