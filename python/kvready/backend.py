"""Backends: kvready's own (opened by URL) and backends written in Python.

A Python backend subclasses :class:`Backend` and answers through
:class:`Attempt` objects. kvready calls it on these threads (the C ABI's
callback contracts):

- ``fetch`` / ``publish``: the engine's owner thread; must not block.
- ``Attempt.poll``: any thread, concurrently; must not block; once it has
  answered an outcome it answers the same for ever.
- ``quiesce``: a worker thread, never the owner's; **may block** up to its
  ``timeout``. True only when the listed attempts will never touch staging
  memory again.
- ``try_quiesce`` (optional): the owner thread; must not block. The same
  question answered now: :attr:`Access.ENDED`, :attr:`Access.UNPROVEN`, or
  :attr:`Access.UNKNOWN` when only waiting would tell (kvready then asks
  ``quiesce`` on a worker). A backend that knows at once whether its
  transfers ended implements it, and its proofs never leave the owner's
  thread.
- ``Attempt.request_cancel``: the owner thread; must not block.
- ``put`` / ``get``: any thread (the conformance kit, seeding a store).

A backend never calls the engine.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple, Sequence

from . import _abi
from ._callbacks import Registry, write_error
from .errors import InvalidArgumentError, SubmissionRejectedError
from . import errors

log = logging.getLogger("kvready")


class Unit(NamedTuple):
    """One unit of an extent: its content name (54 bytes) and where it is
    staged, pool group ``group`` slot ``local`` (process-local coordinates:
    never sent to a peer)."""

    name: bytes
    group: int
    local: int


class Extent(NamedTuple):
    """What a fetch fills or a publish reads: the extent's name, its units,
    and the sequence-end flag."""

    name: bytes
    units: tuple[Unit, ...]
    is_last: bool


class Delivered(NamedTuple):
    """The units fully delivered. An empty set is a miss (fetch) or an
    unaccepted publication: an ordinary answer, never a failure."""

    served: frozenset[bytes] = frozenset()

    @property
    def miss(self) -> bool:
        """Nothing was served."""
        return not self.served


class Failed(NamedTuple):
    """A failure; the destinations' contents are undefined."""

    reason: str


class Cancelled(NamedTuple):
    """A logical cancellation (by the peer: a transfer error)."""

    by_peer: bool = False


Outcome = Delivered | Failed | Cancelled


class CancelDisposition(IntEnum):
    """What a cancellation request answered; neither ends memory access."""

    UNSUPPORTED = 1
    REQUESTED = 2


class Access(IntEnum):
    """What :meth:`Backend.try_quiesce` answers: only waiting would tell
    (kvready asks ``quiesce`` on a worker), access ended (``quiesce`` True), or
    it cannot be established (``quiesce`` False)."""

    UNKNOWN = 0
    ENDED = 1
    UNPROVEN = 2


class Attempt:
    """One submitted delivery. Latch its answer with :meth:`set_outcome`
    (from any thread); kvready is told at once (no polling on a timer).
    Override :meth:`poll` only to answer some other way, and
    :meth:`request_cancel` to support cancellation requests."""

    def __init__(self) -> None:
        self._outcome: Outcome | None = None
        self._lock = threading.Lock()
        self._bound: tuple[int, int] | None = None  # (backend handle, attempt id)

    @property
    def outcome(self) -> Outcome | None:
        """The latched outcome, or None while pending."""
        return self._outcome

    def set_outcome(self, outcome: Outcome) -> None:
        """Latch the outcome (the first one wins: a different second one is a
        ValueError) and tell kvready it is pollable."""
        if not isinstance(outcome, (Delivered, Failed, Cancelled)):
            raise TypeError(f"kvready: an outcome is Delivered, Failed or Cancelled, not {type(outcome).__name__}")
        if isinstance(outcome, Delivered) and not isinstance(outcome.served, frozenset):
            outcome = Delivered(frozenset(outcome.served))
        with self._lock:
            if self._outcome is not None:
                if self._outcome != outcome:
                    raise ValueError(f"kvready: the attempt already answered {self._outcome}; an outcome never changes")
                return
            self._outcome = outcome
            bound = self._bound
        if bound is not None:
            _abi.attempt_done(*bound)

    def poll(self) -> Outcome | None:
        """The outcome, or None while pending. Never blocks."""
        return self._outcome

    def request_cancel(self) -> CancelDisposition:
        """Ask, best effort, to stop (owner thread, never blocks). The default
        supports no cancellation."""
        return CancelDisposition.UNSUPPORTED


class Backend:
    """A backend written in Python: subclass it and override ``fetch``
    and/or ``publish``, and ``quiesce`` (``put`` and ``get`` for the
    conformance kit). ``memory`` is the staging memory units resolve into:
    write a fetched row with ``memory.write(unit.group, unit.local, data)``,
    read a published one with ``memory.read(unit.group, unit.local)``.

    Set ``notifies = False`` on a subclass whose attempts never call
    :meth:`Attempt.set_outcome` (they override ``poll``): kvready then polls
    them."""

    notifies = True

    def __init__(self, memory: Any):
        self.memory = memory
        self.callback_errors: list[BaseException] = []
        self._handle = 0
        self._attempts: dict[int, Attempt] = {}
        self._ids = itertools.count(1)
        self._user = 0
        self._table = None

    # ---- what a subclass overrides ----

    def fetch(self, extent: Extent) -> Attempt:
        """Submit a fetch into the units' slots; return an Attempt for
        anything that escaped.

        Raising is an answer too, and which exception says what escaped:

        - :class:`SubmissionRejectedError`: nothing escaped (no work queued,
          no notification, no access to the slots). The lease ends rejected
          and every slot returns at once, when it is released.
        - any other exception: the submission *may* have escaped (a transfer
          queued before the error). kvready logs it once with its type
          (logger ``kvready``), keeps it in ``callback_errors``, and — as the
          reference keeps the slots of an escaped submission error — holds
          the lease's slots until its containment deadline (the raise
          starts the drain, so one ``drain_grace`` later, 10 s by default),
          then keeps them out of use for good
          (quarantined: with no attempt there is nothing ``quiesce`` could
          prove, under every policy). No exception reaches the caller of
          ``lend``.

        The same holds for :meth:`publish`."""
        raise NotImplementedError

    def publish(self, extent: Extent) -> Attempt:
        """Submit a publication that reads the units' slots (raising: as
        for :meth:`fetch`)."""
        raise NotImplementedError

    def quiesce(self, attempts: Sequence[Attempt], timeout: float) -> bool:
        """True only when none of the attempts will ever touch staging memory
        again. May block, up to timeout seconds. False proves nothing: you
        will be asked again."""
        raise NotImplementedError

    def try_quiesce(self, attempts: Sequence[Attempt]) -> Access:
        """Optional: ``quiesce``'s question answered at once, on the owner's
        thread, without blocking. Never contradict ``quiesce``: ENDED only
        where it would answer True at once, UNPROVEN only where it would
        answer False; UNKNOWN hands the proof to ``quiesce`` on a worker."""
        raise NotImplementedError

    def put(self, extent_name: bytes, name: bytes, row: bytes) -> None:
        """Store a row, as a publication would (the conformance kit)."""
        raise NotImplementedError

    def get(self, extent_name: bytes, name: bytes) -> bytes | None:
        """Read a stored row back, or None (the conformance kit)."""
        raise NotImplementedError

    def close(self) -> None:
        """Called once when kvready closes the backend."""

    # ---- the binding ----

    @property
    def handle(self) -> int:
        """The backend's C ABI handle (created on first use)."""
        if not self._handle:
            self._user = _live.register(self)
            cls = type(self)
            t = _abi.BackendCallbacks()
            t.user = self._user
            t.fetch = _FETCH if cls.fetch is not Backend.fetch else _abi.FetchFn()
            t.publish = _PUBLISH if cls.publish is not Backend.publish else _abi.FetchFn()
            t.poll, t.quiesce, t.cancel, t.forget, t.close = _POLL, _QUIESCE, _CANCEL, _FORGET, _CLOSE
            t.try_quiesce = _TRY_QUIESCE if cls.try_quiesce is not Backend.try_quiesce else _abi.TryQuiesceFn()
            t.put = _PUT if cls.put is not Backend.put else _abi.PutFn()
            t.get = _GET if cls.get is not Backend.get else _abi.GetFn()
            t.notifies = 1 if self.notifies else 0
            h = ctypes.c_uint64()
            st = _abi.backend_new(ctypes.byref(t), self.memory.handle, ctypes.byref(h))
            if st != 0:
                _live.pop(self._user)
                _abi.check(st)
            self._table, self._handle = t, h.value
        return self._handle

    def shut(self) -> None:
        """Close the backend in kvready (refused while an engine uses it)."""
        if self._handle:
            _abi.check(_abi.backend_close(self._handle), self._handle)
            self._handle = 0

    def _bind(self, a: Attempt) -> int:
        aid = next(self._ids)
        self._attempts[aid] = a
        with a._lock:
            a._bound = (self._handle, aid)
        return aid

    def _failed(self, e: BaseException, where: str) -> None:
        self.callback_errors.append(e)
        if where in ("fetch", "publish"):
            consequence = ("the submission may have escaped: its slots stay held until the lease is contained "
                           "(one drain grace from now: the error starts the drain) and then stay out of use for "
                           "good; raise SubmissionRejectedError when nothing escaped, and they return at once")
        else:
            consequence = "see the Backend docstring for what it means"
        # One record per exception, its type in the message itself (not only
        # in the traceback), so that a log search by type finds it.
        log.error("kvready: %s.%s raised %s: %s; %s", type(self).__name__, where, type(e).__name__, e,
                  consequence, exc_info=e)


class StoreBackend:
    """One of kvready's own backends, opened by URL (:func:`open_backend`)."""

    def __init__(self, url: str, memory: Any):
        h = ctypes.c_uint64()
        _abi.check(_abi.backend_open(url.encode(), memory.handle, ctypes.byref(h)))
        self.url, self.memory, self.handle = url, memory, h.value

    def put(self, extent_name: bytes, name: bytes, row: bytes) -> None:
        """Store a row directly (seeding a store)."""
        _check_name(name)
        _abi.check(_abi.backend_put(self.handle, extent_name, len(extent_name), name, bytes(row), len(row)), self.handle)

    def get(self, extent_name: bytes, name: bytes) -> bytes | None:
        """Read a row back, or None."""
        _check_name(name)
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n, found = ctypes.c_size_t(), ctypes.c_int32()
            st = _abi.backend_get(self.handle, extent_name, len(extent_name), name, buf, size, ctypes.byref(n), ctypes.byref(found))
            if st == errors.BUFFER and n.value > size:
                size = n.value
                continue
            _abi.check(st, self.handle)
            return buf.raw[:n.value] if found.value else None

    def shut(self) -> None:
        """Close it (refused while an engine uses it)."""
        if self.handle:
            _abi.check(_abi.backend_close(self.handle), self.handle)
            self.handle = 0

    close = shut

    def __enter__(self) -> "StoreBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.shut()


def open_backend(url: str, memory: Any) -> StoreBackend:
    """kvready's own backend over ``memory``: ``"mem"`` (in-process;
    ``"mem:?capacity=N"`` bounds it to N rows, ``"mem:?capacity_bytes=N"`` to
    N bytes, evicting the least recently used) or ``"redis://host:port/0"`` (a
    Redis-compatible store shared across processes; a store that stops
    answering is held for down and leases fail at once as REJECTED, "store
    unavailable", until a PING answers: tune it with
    ``?breaker_failures=3&breaker_probe=100ms&breaker_probe_max=2s``,
    ``breaker_failures=0`` turns it off). The test library
    (``KVREADY_LIBRARY=testkit``) also opens the fault backends:
    ``"mem:?mode=miss"``, ``fail``, ``cancel-by-peer``, ... (and the broken
    ``write-after-quiesce``, ...), and ``"instant:"`` (answers at once, writes
    nothing: for benchmarks); libkvready.so refuses them
    (:class:`UnsupportedError`)."""
    return StoreBackend(url, memory)


@dataclass(frozen=True)
class TierStats:
    """What one tier of a :class:`TieredBackend` did since it was opened
    (backend/tiers' TierStats; kvready_tier_stats), in units (rows) unless it
    says otherwise. A failure is never counted as a miss."""

    name: str               # the tier's URL scheme ("mem", "redis"), "-i" added when an earlier tier has it
    handed: int = 0         # units fetches handed it: each is then a hit, a miss or a failure
    hits: int = 0           # units it served
    misses: int = 0         # units it answered without serving
    failed: int = 0         # units of its fetches that failed, were cancelled, gave no outcome or broke the contract
    published: int = 0      # units publications wrote through into it (accepted)
    publish_failed: int = 0  # units of publications it failed or cancelled
    promoted: int = 0       # units promoted into it from a lower tier (accepted)
    promote_failed: int = 0  # units of promotions it failed
    promote_skipped: int = 0  # units not promoted: the lower tier's access unproven in time, or a cancel first
    rejected: int = 0       # its submissions refused before anything escaped (a breaker open, ...)
    no_outcome: int = 0     # its attempts with no outcome within the backend's wait
    violations: int = 0     # its breaches of the contract: each cost only its own attempt
    cancel_errors: int = 0  # cancel requests to it that erred
    evictions: int = 0      # rows it evicted to stay within its bound (a mem tier)
    bytes: int | None = None  # bytes of the rows it holds; None when it does not say (a shared store)

    @property
    def hit_rate(self) -> float:
        """Hits over the units handed (0.0 when none was)."""
        return self.hits / self.handed if self.handed else 0.0


def _tier_stats(c: _abi.CTierStats) -> TierStats:
    return TierStats(
        name=c.name.decode("utf-8", "replace"), handed=c.handed, hits=c.hits, misses=c.misses, failed=c.failed,
        published=c.published, publish_failed=c.publish_failed, promoted=c.promoted,
        promote_failed=c.promote_failed, promote_skipped=c.promote_skipped, rejected=c.rejected,
        no_outcome=c.no_outcome, violations=c.violations, cancel_errors=c.cancel_errors, evictions=c.evictions,
        bytes=c.bytes if c.sized else None)


class TieredBackend(StoreBackend):
    """A backend of tiers opened by :func:`open_tiers`: one handle, used as
    any of kvready's own backends (``Engine(backend=...)``, ``put`` into
    every tier, ``get`` from the first tier holding the row, ``close``
    closes every tier)."""

    def __init__(self, urls: Sequence[str], memory: Any):
        if isinstance(urls, (str, bytes)) or not isinstance(urls, Sequence):
            raise InvalidArgumentError(errors.INVALID, f"kvready: urls is {urls!r} (a {type(urls).__name__}); "
                                       "want a list of URLs, first tier first")
        encoded = []
        for i, u in enumerate(urls):
            if not isinstance(u, str) or "\0" in u:
                raise InvalidArgumentError(errors.INVALID, f"kvready: tier {i}: {u!r} (a {type(u).__name__}); "
                                           "want a URL string without NUL, as open_backend takes")
            encoded.append(u.encode())
        arr = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
        h = ctypes.c_uint64()
        _abi.check(_abi.backend_open_tiers(arr, len(encoded), memory.handle, ctypes.byref(h)))
        self.url, self.urls, self.memory, self.handle = encoded[0].decode(), tuple(urls), memory, h.value

    def tier_stats(self) -> list[TierStats]:
        """Each tier's counters, in tier order."""
        n = len(self.urls)
        arr = (_abi.CTierStats * n)()
        got = ctypes.c_size_t()
        _abi.check(_abi.backend_tier_stats(self.handle, arr, n, ctypes.byref(got)), self.handle)
        return [_tier_stats(arr[i]) for i in range(got.value)]


def open_tiers(urls: Sequence[str], memory: Any) -> TieredBackend:
    """A backend of tiers over ``memory`` in one call (backend/tiers;
    kvready_backend_open_tiers): ``urls[0]`` first, each a URL
    :func:`open_backend` takes — a bounded local tier in front of the shared
    store::

        store = kvready.open_tiers(["mem:?capacity_bytes=8589934592", "redis://127.0.0.1:6379/0"], mem)

    A fetch asks the first tier for every unit and the next only for what the
    tiers before it did not serve, within the same lease; what a lower tier
    served is promoted into the tiers above it; a publish writes through to
    every tier; a lease's slots return only once every tier's access is
    proven over. A tier's failure fails the lease, naming the tier — never a
    miss (docs/tiers.md). A tier that fails to open raises what
    :func:`open_backend` would for it (:class:`BackendConfigError`,
    :class:`StoreUnavailableError`, :class:`InvalidArgumentError`, ...), the
    message naming its index and URL, and leaves nothing open.
    :meth:`TieredBackend.tier_stats` reads each tier's counters."""
    return TieredBackend(urls, memory)


def _check_name(name: bytes) -> None:
    if len(name) != _abi.NAME_SIZE:
        raise InvalidArgumentError(1, f"kvready: a name is {_abi.NAME_SIZE} bytes, got {len(name)}")


# ---- the callbacks, shared by every Python backend ----

_live: Registry[Backend] = Registry()
_err = write_error


def _submit(publish: bool):
    def cb(user, name_addr, name_len, units_addr, n, is_last, attempt_out, err, err_cap):
        b = _live.get(user)
        if b is None:
            _err(err, err_cap, "kvready: the Python backend is gone")
            return errors.REJECTED
        try:
            name = ctypes.string_at(name_addr, name_len) if name_len else b""
            us = (_abi.CUnit * n).from_address(units_addr) if n else ()
            ext = Extent(name, tuple(Unit(bytes(u.name), u.group, u.local) for u in us), bool(is_last))
            a = b.publish(ext) if publish else b.fetch(ext)
            if not isinstance(a, Attempt):
                raise TypeError(f"{'publish' if publish else 'fetch'} returned {type(a).__name__}; want an Attempt "
                                "(or raise SubmissionRejectedError)")
            ctypes.c_uint64.from_address(attempt_out).value = b._bind(a)
            return 0
        except SubmissionRejectedError as e:
            _err(err, err_cap, str(e) or "rejected")
            return errors.REJECTED
        except BaseException as e:  # noqa: BLE001 - every failure must become a status
            b._failed(e, "publish" if publish else "fetch")
            _err(err, err_cap, f"{type(e).__name__}: {e}")
            return errors.FAILED
    return cb


def _poll(user, aid, answer, served, cap):
    b = _live.get(user)
    if b is None:
        return errors.FAILED
    try:
        a = b._attempts.get(aid)
        if a is None:
            raise KeyError(f"attempt {aid} is unknown (forgotten?)")
        o = a.poll()
        ans = _abi.CAnswer.from_address(answer)
        if o is None:
            ans.kind = 0
        elif isinstance(o, Delivered):
            names = list(o.served)
            if len(names) > cap:
                raise ValueError(f"{len(names)} served names for an extent of {cap - 1} units")
            for i, nm in enumerate(names):
                if len(nm) != _abi.NAME_SIZE:
                    raise ValueError(f"a served name of {len(nm)} bytes; names are {_abi.NAME_SIZE}")
                ctypes.memmove(served + i * _abi.NAME_SIZE, bytes(nm), _abi.NAME_SIZE)
            ans.kind, ans.served = 1, len(names)
        elif isinstance(o, Failed):
            ans.kind = 2
            ans.reason = str(o.reason).encode("utf-8", "replace")[:_abi.REASON_SIZE - 1]
        elif isinstance(o, Cancelled):
            ans.kind, ans.by_peer = 3, 1 if o.by_peer else 0
        else:
            raise TypeError(f"poll answered {type(o).__name__}; want None, Delivered, Failed or Cancelled")
        return 0
    except BaseException as e:  # noqa: BLE001 - kvready records it as a contract violation
        b._failed(e, "poll")
        return errors.FAILED


def _attempts_of(b: Backend, ids: int, n: int) -> list[Attempt]:
    """The backend's attempts a callback names, by id."""
    atts = []
    for aid in (ctypes.c_uint64 * n).from_address(ids):
        a = b._attempts.get(aid)
        if a is None:
            raise KeyError(f"attempt {aid} is unknown")
        atts.append(a)
    return atts


def _quiesce(user, ids, n, timeout_ns, proven, err, err_cap):
    b = _live.get(user)
    if b is None:
        _err(err, err_cap, "kvready: the Python backend is gone")
        return errors.FAILED
    try:
        ok = b.quiesce(_attempts_of(b, ids, n), timeout_ns / 1e9)
        ctypes.c_int32.from_address(proven).value = 1 if ok is True else 0
        return 0
    except BaseException as e:  # noqa: BLE001 - proves nothing; kvready asks again
        b._failed(e, "quiesce")
        _err(err, err_cap, f"{type(e).__name__}: {e}")
        return errors.FAILED


def _try_quiesce(user, ids, n, access, err, err_cap):
    b = _live.get(user)
    if b is None:
        _err(err, err_cap, "kvready: the Python backend is gone")
        return errors.FAILED
    try:
        ctypes.c_int32.from_address(access).value = int(Access(b.try_quiesce(_attempts_of(b, ids, n))))
        return 0
    except BaseException as e:  # noqa: BLE001 - proves nothing; kvready asks again
        b._failed(e, "try_quiesce")
        _err(err, err_cap, f"{type(e).__name__}: {e}")
        return errors.FAILED


def _cancel(user, aid, disposition, err, err_cap):
    b = _live.get(user)
    if b is None:
        return errors.FAILED
    try:
        d = b._attempts[aid].request_cancel()
        ctypes.c_int32.from_address(disposition).value = int(d)
        return 0
    except BaseException as e:  # noqa: BLE001 - recorded on the lease
        b._failed(e, "request_cancel")
        _err(err, err_cap, f"{type(e).__name__}: {e}")
        return errors.FAILED


def _forget(user, aid):
    b = _live.get(user)
    if b is not None:
        a = b._attempts.pop(aid, None)
        if a is not None:
            with a._lock:
                a._bound = None


def _put(user, ext, ext_len, name, row, n):
    b = _live.get(user)
    if b is None:
        return errors.FAILED
    try:
        b.put(ctypes.string_at(ext, ext_len) if ext_len else b"", ctypes.string_at(name, _abi.NAME_SIZE),
              ctypes.string_at(row, n) if n else b"")
        return 0
    except BaseException as e:  # noqa: BLE001
        b._failed(e, "put")
        return errors.FAILED


def _get(user, ext, ext_len, name, row, cap, n_out, found):
    b = _live.get(user)
    if b is None:
        return errors.FAILED
    try:
        v = b.get(ctypes.string_at(ext, ext_len) if ext_len else b"", ctypes.string_at(name, _abi.NAME_SIZE))
        if v is None:
            ctypes.c_int32.from_address(found).value = 0
            return 0
        v = bytes(v)
        ctypes.c_int32.from_address(found).value = 1
        ctypes.c_size_t.from_address(n_out).value = len(v)
        if len(v) > cap:
            return errors.BUFFER
        ctypes.memmove(row, v, len(v))
        return 0
    except BaseException as e:  # noqa: BLE001
        b._failed(e, "get")
        return errors.FAILED


def _close(user):
    b = _live.pop(user)
    if b is not None:
        b._handle = 0
        try:
            b.close()
        except BaseException as e:  # noqa: BLE001
            b._failed(e, "close")


_FETCH = _abi.FetchFn(_submit(False))
_PUBLISH = _abi.FetchFn(_submit(True))
_POLL = _abi.PollFn(_poll)
_QUIESCE = _abi.QuiesceFn(_quiesce)
_TRY_QUIESCE = _abi.TryQuiesceFn(_try_quiesce)
_CANCEL = _abi.CancelFn(_cancel)
_FORGET = _abi.ForgetFn(_forget)
_PUT = _abi.PutFn(_put)
_GET = _abi.GetFn(_get)
_CLOSE = _abi.CloseFn(_close)
