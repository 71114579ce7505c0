"""Peer transfers over UCX: the transfer lease.

A prefill process moves a request's KV pages straight into a decode
process's staging slots over UCX, through the same fence as every backend
(kvready.h's "peer transfers" section; docs/ucx.md, docs/transfers.md):

- the decode side's :class:`Receiver` is its engine's fetcher: the engine
  lends staging slots to a fetch, the receiver registers them and offers
  their addresses to the plan's writers, and the slots return (after the
  engine copied them into the device pages) only once every writer is proven
  settled — its flush and report, or a revocation that fences;
- the prefill side's :class:`Sender` is its engine's publisher: the publish
  lease's device→staging copies fill the slots, the sender puts them into
  the receiver's offered pages, and the slots return only once every put
  completed.

Assembly, on each side::

    tr = kvready.UcxTransport("decode", incarnation=1, transports="tcp")
    recv = kvready.Receiver(tr, memory)                    # or Sender(tr, memory)
    eng = kvready.Engine(memory, 16, device=dev, fetcher=recv)  # publisher=sender
    # out of band (a pipe): send tr.address and recv.capabilities to the
    # peer; with what it sends back:
    tr.add_peer(peer_address)
    recv.connect(peer_capabilities)

Per request, both sides expect the same :class:`Plan` and lend one row per
:class:`Page` it answers (``page.row(device_address)``).

Nothing moves unless the transport is progressed: :meth:`Engine.progress`
progresses the engine's peer backends first (one bounded round); an owner
that sleeps on the engine's file descriptor, or waits with
:meth:`Engine.wait`, passes ``poll=`` (seconds) so that a library thread
progresses the backend on that interval, or calls :meth:`Receiver.progress`
itself.
"""

from __future__ import annotations

import ctypes
from enum import IntEnum
from typing import Any, NamedTuple, Sequence

from . import _abi, errors
from ._border import integer, nanoseconds
from .engine import Row
from .errors import InvalidArgumentError, TransportUnavailableError


class Mode(IntEnum):
    """How a transport's puts reach a registration. CHECKED (the default):
    the owner applies every put in its own progress and refuses it once the
    registration is revoked, so a revocation fences. ONE_SIDED: UCX puts; a
    revocation then proves nothing, and the memory stays registered for the
    process's life."""

    CHECKED = 0
    ONE_SIDED = 1


class Role(IntEnum):
    """What a writer moves: the KV pages, or the auxiliary buffers beside them."""

    KV = 1
    AUX = 2


class CacheKind(IntEnum):
    """A layer group's kind: PAGED (any prefix of the span is valid cache) or
    STATE (one slot whose content is an exact checkpoint)."""

    PAGED = 1
    STATE = 2


class TransferKind(IntEnum):
    """A transfer's outcome (kvready_peer_outcome)."""

    NONE = 0
    DELIVERED = 1
    FAILED = 2
    CANCELLED = 3


class Accessor(NamedTuple):
    """A writer of a transfer: a peer process, its rank, what it moves."""

    peer: str
    rank: int = 0
    role: Role = Role.KV


class ChunkGroup(NamedTuple):
    """One layer group of a chunk: its kind and its page ids (the device
    pages a PAGED group covers block by block; at most one STATE slot)."""

    ids: Sequence[int]
    kind: CacheKind = CacheKind.PAGED


class Plan(NamedTuple):
    """What both sides of one transfer agree on out of band: the request, its
    attempt (a retry is a new attempt, with new page names), the chunk — its
    groups, the token range ``[token_start, token_end)`` and whether it ends
    the sequence — and the tokens one PAGED page holds.

    A receiver reads ``writers`` (the exact cohort: every accessor that will
    write the pages); a sender reads ``to`` (the receiver), ``as_`` (the
    accessor it writes as) and ``share`` (its pages as ``(group, index)``;
    None: every page)."""

    request: int
    groups: Sequence[ChunkGroup]
    token_end: int
    block_tokens: int
    attempt: int = 1
    token_start: int = 0
    is_last: bool = True
    writers: Sequence[Accessor] = ()
    to: str | None = None
    as_: Accessor | None = None
    share: Sequence[tuple[int, int]] | None = None


class Page(NamedTuple):
    """One page of a plan: lend its row under ``name`` at ``block`` with the
    device address of the page ``id`` stands for (:meth:`row`). ``end`` is
    the token a delivery must reach for the page to be served."""

    name: bytes
    group: int
    index: int
    id: int
    kind: CacheKind
    block: int
    end: int

    def row(self, device: int) -> Row:
        """The engine row lending this page to ``device``."""
        return Row(self.name, self.group, self.block, device)


class TransferOutcome(NamedTuple):
    """A receiver's outcome of one transfer: DELIVERED up to ``token_end``
    (absolute), FAILED (``reason``) or CANCELLED (``by_peer``)."""

    kind: TransferKind
    token_end: int = 0
    by_peer: bool = False
    reason: str = ""


class PeerStats(NamedTuple):
    """A peer backend's counters; a field of the other side's stays 0."""

    in_flight: int    # transfers not yet proven over: now
    in_doubt: int     # receiver: transfers whose pages are contained for ever: now
    delivered: int
    failed: int
    cancelled: int
    settled: int      # transfers proven over
    rejected: int     # submissions refused before anything escaped
    peers_lost: int   # endpoint errors
    evidence: int     # receiver: evidence taken
    refused: int      # receiver: evidence refused; sender: offers dropped
    revocations: int  # receiver: leased sessions revoked
    fenced: int       # receiver: of those, revocations that fenced every page
    offers: int       # sender: offers taken
    puts: int         # sender: puts posted


def _blob(fn, handle: int) -> bytes:
    """A variable-length output (an address, an advertisement), sized by a
    first call."""
    n = ctypes.c_size_t()
    st = fn(handle, None, 0, ctypes.byref(n))
    if st not in (0, errors.BUFFER):
        _abi.check(st, handle)
    buf = (ctypes.c_uint8 * max(n.value, 1))()
    _abi.check(fn(handle, buf, n.value, ctypes.byref(n)), handle)
    return bytes(buf[:n.value])


def _name(s: str, what: str) -> bytes:
    if not isinstance(s, str):
        raise InvalidArgumentError(errors.INVALID, f"kvready: {what} is a {type(s).__name__}; want a str of 1 to 255 bytes")
    return s.encode()


class UcxTransport:
    """A UCP context and worker (package transfer/ucx): this process's
    ``name`` and ``incarnation`` (>= 1; a restarted process takes a larger
    one), the UCX transports (``"tcp"``, ``"sm"``; None: the environment's
    ``UCX_TLS``), the :class:`Mode`, and ``no_peer_errors`` (UCX's shared
    memory transports need it; a dead peer is then never reported).
    :class:`TransportUnavailableError` when UCX cannot open one."""

    def __init__(self, name: str, incarnation: int = 1, transports: str | None = "tcp", mode: Mode = Mode.CHECKED,
                 no_peer_errors: bool = False):
        self._h = 0
        c = _abi.CUcxConfig(name=_name(name, "name"), incarnation=integer(incarnation, ctypes.c_uint64, "incarnation"),
                            transports=None if transports is None else transports.encode(),
                            mode=integer(mode, ctypes.c_int32, "mode"), no_peer_errors=1 if no_peer_errors else 0)
        h = ctypes.c_uint64()
        st = _abi.ucx_new(ctypes.byref(c), ctypes.byref(h))
        if st == errors.UNAVAILABLE:
            raise TransportUnavailableError(st, _abi.message(0))
        _abi.check(st)
        self._h = h.value
        self.name, self.incarnation = name, incarnation

    @property
    def handle(self) -> int:
        if not self._h:
            raise errors.BadHandleError(errors.BAD_HANDLE, "kvready: the transport was closed")
        return self._h

    @property
    def address(self) -> bytes:
        """What the peer passes to :meth:`add_peer`: carry it out of band."""
        return _blob(_abi.ucx_address, self.handle)

    def add_peer(self, address: bytes) -> tuple[str, int]:
        """Record a peer's address; answers whose it is (name, incarnation).
        An older address than the one recorded for that peer, or a second
        one for the same incarnation, is refused (InvalidArgumentError) and
        changes nothing."""
        address = bytes(address)
        name = ctypes.create_string_buffer(_abi.PEER_NAME_SIZE)
        inc = ctypes.c_uint64()
        _abi.check(_abi.ucx_add_peer(self.handle, address, len(address), name, _abi.PEER_NAME_SIZE, ctypes.byref(inc)),
                   self.handle)
        return name.value.decode(), inc.value

    def close(self) -> None:
        """Close it (BusyError while a peer backend uses it)."""
        if self._h:
            _abi.check(_abi.ucx_close(self._h), self._h)
            self._h = 0

    def __enter__(self) -> "UcxTransport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _PeerBackend:
    """What a Receiver and a Sender share: the backend handle, the
    advertisement, the negotiation, the plans, progress and counters."""

    _receiver = True

    def __init__(self, transport: UcxTransport, memory: Any, *, timeout: float | None = None,
                 grace: float | None = None, window: float | None = None, poll: float | None = None,
                 sessions: int | None = None, tombstones: int | None = None, leased: bool = True):
        self._h = 0
        # Every value is checked before the library is called: a refusal calls nothing.
        settings = {field: ns for field, seconds in (("timeout_ns", timeout), ("grace_ns", grace), ("window_ns", window),
                                                     ("poll_ns", poll)) if (ns := nanoseconds(seconds, field[:-3]))}
        settings.update({field: integer(n, ctypes.c_int32, field)
                         for field, n in (("sessions", sessions), ("tombstones", tombstones)) if n is not None})
        th = transport.handle
        c = _abi.CPeerConfig()
        _abi.check(_abi.peer_config_defaults(ctypes.byref(c)))
        c.transport = th
        for field, v in settings.items():
            setattr(c, field, v)
        c.leased = 1 if leased else 0
        h = ctypes.c_uint64()
        new = _abi.peer_receiver_new if self._receiver else _abi.peer_sender_new
        _abi.check(new(ctypes.byref(c), memory.handle, ctypes.byref(h)))
        self._h = h.value
        # What the library uses stays alive as long as the backend.
        self.transport, self.memory = transport, memory

    @property
    def handle(self) -> int:
        if not self._h:
            raise errors.BadHandleError(errors.BAD_HANDLE, "kvready: the peer backend was closed")
        return self._h

    @property
    def capabilities(self) -> bytes:
        """This side's advertisement (peer, incarnation, capabilities): carry
        it to the peer out of band, beside the transport's address."""
        return _blob(_abi.peer_capabilities, self.handle)

    def connect(self, capabilities: bytes) -> None:
        """Negotiate with one life of a peer from its advertisement (add its
        address to the transport first). :class:`RejectedError` when it
        lacks what a transfer needs: nothing is published to it."""
        capabilities = bytes(capabilities)
        _abi.check(_abi.peer_connect(self.handle, capabilities, len(capabilities)), self.handle)

    def expect(self, plan: Plan) -> list[Page]:
        """Record a plan before its pages are lent; answers its pages, in
        chunk order. A plan that does not validate is InvalidArgumentError
        (every mistake named); one already expected, or one too many,
        RejectedError; either records nothing."""
        c, keep = _plan(plan, self._receiver)
        n = ctypes.c_size_t()
        st = _abi.peer_expect(self.handle, ctypes.byref(c), None, 0, ctypes.byref(n))
        if st != errors.BUFFER:
            _abi.check(st, self.handle)
        out = (_abi.CPeerPage * max(n.value, 1))()
        _abi.check(_abi.peer_expect(self.handle, ctypes.byref(c), out, n.value, ctypes.byref(n)), self.handle)
        del keep
        return [Page(bytes(p.name), p.group, p.index, p.id, CacheKind(p.kind), p.block, p.end) for p in out[:n.value]]

    def progress(self) -> int:
        """One bounded round (the transport's progress, what arrived, the
        deadlines, the puts to post); never blocks. Answers how many things
        it handled."""
        n = ctypes.c_int64()
        _abi.check(_abi.peer_progress(self.handle, ctypes.byref(n)), self.handle)
        return n.value

    def stats(self) -> PeerStats:
        c = _abi.CPeerStats()
        _abi.check(_abi.peer_backend_stats(self.handle, ctypes.byref(c)), self.handle)
        return PeerStats(*(getattr(c, f) for f, _ in _abi.CPeerStats._fields_))

    def close(self) -> None:
        """Close the backend (BusyError while an engine uses it)."""
        if self._h:
            _abi.check(_abi.backend_close(self._h), self._h)
            self._h = 0

    shut = close

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Receiver(_PeerBackend):
    """The decode side: an engine's fetcher (``Engine(..., fetcher=recv)``)
    that lends the engine's staging slots to the writers of a plan.

    ``timeout`` (seconds): a transfer with no outcome this long after its
    submission fails; ``grace``: how long after that its pages may stay
    unproven before they are contained (keep both within the engine's
    request_timeout and drain_grace); ``leased`` (default True): each
    transfer's pages under a registration of their own, revoked (fenced, in
    CHECKED mode) before they return. ``poll`` (seconds): a library thread
    progresses the backend on that interval; None: the owner does
    (:meth:`Engine.progress`, :meth:`progress`)."""

    _receiver = True
    can_fetch, can_publish = True, False

    def forget(self, request: int, attempt: int = 1) -> bool:
        """Drop a plan expected and never lent; answers whether one waited."""
        out = ctypes.c_int32()
        _abi.check(_abi.peer_forget(self.handle, integer(request, ctypes.c_uint64, "request"),
                                    integer(attempt, ctypes.c_uint32, "attempt"), None, ctypes.byref(out)), self.handle)
        return bool(out.value)

    def outcome(self, request: int, attempt: int = 1) -> TransferOutcome | None:
        """The transfer's outcome, while it is kept (``window``); None before
        it has one."""
        c, found = _abi.CTransferOutcome(), ctypes.c_int32()
        _abi.check(_abi.peer_outcome(self.handle, integer(request, ctypes.c_uint64, "request"),
                                     integer(attempt, ctypes.c_uint32, "attempt"), ctypes.byref(c), ctypes.byref(found)),
                   self.handle)
        if not found.value:
            return None
        return TransferOutcome(TransferKind(c.kind), c.token_end, bool(c.by_peer), c.reason.decode("utf-8", "replace"))


class Sender(_PeerBackend):
    """The prefill side: an engine's publisher (``Engine(...,
    publisher=send)``): its puts read the publish lease's staging slots,
    which return only once every put completed. ``timeout``, ``poll`` as
    :class:`Receiver`'s."""

    _receiver = False
    can_fetch, can_publish = False, True

    def __init__(self, transport: UcxTransport, memory: Any, **kw: Any):
        if "grace" in kw or "leased" in kw:
            raise InvalidArgumentError(errors.INVALID, "kvready: grace and leased are a Receiver's settings; a Sender "
                                       "takes timeout, window, poll, sessions and tombstones")
        super().__init__(transport, memory, **kw)

    def forget(self, request: int, as_: Accessor, attempt: int = 1) -> bool:
        """Drop a plan expected and never published; answers whether one
        waited."""
        out = ctypes.c_int32()
        acc, keep = _accessor(as_, "as_")
        _abi.check(_abi.peer_forget(self.handle, integer(request, ctypes.c_uint64, "request"),
                                    integer(attempt, ctypes.c_uint32, "attempt"), ctypes.byref(acc), ctypes.byref(out)),
                   self.handle)
        del keep
        return bool(out.value)


def _accessor(a: Accessor, what: str) -> tuple[_abi.CAccessor, bytes]:
    a = Accessor(*a)
    peer = _name(a.peer, f"{what}.peer")
    return _abi.CAccessor(peer=peer, rank=integer(a.rank, ctypes.c_int32, f"{what}.rank"),
                          role=integer(a.role, ctypes.c_int32, f"{what}.role")), peer


def _plan(p: Plan, receiver: bool) -> tuple[_abi.CPeerPlan, list]:
    """The plan as the C struct, and what keeps its arrays alive."""
    keep: list = []
    groups = (_abi.CChunkGroup * max(len(p.groups), 1))()
    for i, g in enumerate(p.groups):
        g = ChunkGroup(*g)
        ids = (ctypes.c_int64 * max(len(g.ids), 1))(*[integer(x, ctypes.c_int64, f"groups[{i}].ids") for x in g.ids])
        keep.append(ids)
        groups[i].kind = integer(g.kind, ctypes.c_int32, f"groups[{i}].kind")
        groups[i].ids, groups[i].n_ids = ctypes.cast(ids, ctypes.POINTER(ctypes.c_int64)), len(g.ids)
    keep.append(groups)
    c = _abi.CPeerPlan(request=integer(p.request, ctypes.c_uint64, "request"),
                       attempt=integer(p.attempt, ctypes.c_uint32, "attempt"),
                       block_tokens=integer(p.block_tokens, ctypes.c_int32, "block_tokens"),
                       token_start=integer(p.token_start, ctypes.c_int64, "token_start"),
                       token_end=integer(p.token_end, ctypes.c_int64, "token_end"), is_last=1 if p.is_last else 0)
    c.groups, c.n_groups = ctypes.cast(groups, ctypes.POINTER(_abi.CChunkGroup)), len(p.groups)
    if p.writers:
        ws = (_abi.CAccessor * len(p.writers))()
        for i, w in enumerate(p.writers):
            ws[i], name = _accessor(w, f"writers[{i}]")
            keep.append(name)
        keep.append(ws)
        c.writers, c.n_writers = ctypes.cast(ws, ctypes.POINTER(_abi.CAccessor)), len(p.writers)
    if p.to is not None:
        c.to = _name(p.to, "to")
    if p.as_ is not None:
        acc, name = _accessor(p.as_, "as_")
        keep.append(name)
        setattr(c, "as", acc)
    if p.share is not None:
        if not p.share:
            raise InvalidArgumentError(errors.INVALID, "kvready: share is empty; want None (every page) or at least one "
                                       "(group, index) of the chunk")
        refs = (_abi.CPageRef * max(len(p.share), 1))(
            *[_abi.CPageRef(integer(g, ctypes.c_int32, f"share[{i}].group"), integer(x, ctypes.c_int32, f"share[{i}].index"))
              for i, (g, x) in enumerate(p.share)])
        keep.append(refs)
        c.share, c.n_share = ctypes.cast(refs, ctypes.POINTER(_abi.CPageRef)), len(p.share)
    return c, keep
