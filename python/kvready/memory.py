"""Staging memory: the caller's buffers, cut into slots, that kvready lends."""

from __future__ import annotations

import ctypes
from typing import Any, Iterable, NamedTuple, Sequence

from . import _abi
from ._border import bounds, integer
from .errors import InvalidArgumentError, UnsupportedError


class Group(NamedTuple):
    """One pool group of staging memory: ``slots`` slots of ``slot_bytes``
    bytes. A lease's rows of local layer group g use pool group g."""

    slots: int
    slot_bytes: int


def _address(buf: Any, need: int) -> tuple[int, Any]:
    """The address of a writable buffer of at least need bytes, and the
    object that keeps it exported (and so unmoved: a bytearray with an export
    cannot be resized). An int is taken as an address the caller keeps
    valid (pinned memory from torch: tensor.data_ptr())."""
    if isinstance(buf, int) and not isinstance(buf, bool):
        return integer(buf, ctypes.c_uint64, f"staging address (of at least {need} bytes)", low=1), None
    try:
        mv = memoryview(buf)
    except TypeError:
        lo, hi, _ = bounds(ctypes.c_uint64)
        raise InvalidArgumentError(1, f"kvready: a {type(buf).__name__} is not a buffer; want a writable buffer "
                                 f"(bytearray, memoryview, numpy array) or an address (an integer in 1 .. {hi})") from None
    if mv.readonly:
        raise InvalidArgumentError(1, f"kvready: the {type(buf).__name__} is read-only; staging memory must be writable")
    if not mv.c_contiguous:
        raise InvalidArgumentError(1, f"kvready: the {type(buf).__name__} is not contiguous; staging memory must be")
    if mv.nbytes < need:
        raise InvalidArgumentError(1, f"kvready: the buffer has {mv.nbytes} bytes; the pool group needs {need}")
    arr = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return ctypes.addressof(arr), arr


class Memory:
    """Staging memory over the caller's buffers, one per pool group.

    ``Memory([Group(64, 65536)])`` allocates a ``bytearray`` per group;
    ``Memory(groups, buffers=[...])`` lends buffers you own (anything with the
    writable buffer protocol: ``bytearray``, ``memoryview``, a numpy array) or
    addresses you keep valid (pinned host memory, e.g. a torch tensor's
    ``data_ptr()``). kvready keeps the buffers exported (a ``bytearray``
    cannot be resized meanwhile) until :meth:`close`. On a GPU staging memory
    must be pinned.
    """

    def __init__(self, groups: Sequence[Group | tuple[int, int]], buffers: Sequence[Any] | None = None):
        self.groups = [Group(integer(s, ctypes.c_int64, f"pool group {i}: slots", low=1),
                             integer(b, ctypes.c_int64, f"pool group {i}: slot_bytes", low=1))
                       for i, (s, b) in enumerate(Group(*g) for g in groups)]
        if not self.groups:
            raise InvalidArgumentError(1, "kvready: no pool groups; want one per local layer group")
        for i, g in enumerate(self.groups):
            integer(g.slots * g.slot_bytes, ctypes.c_int64, f"pool group {i}: slots * slot_bytes")
        if buffers is None:
            buffers = [bytearray(g.slots * g.slot_bytes) for g in self.groups]
        if len(buffers) != len(self.groups):
            raise InvalidArgumentError(1, f"kvready: {len(buffers)} buffers for {len(self.groups)} pool groups; want one each")
        self.buffers = list(buffers)
        self._keep = []
        addrs = []
        for g, buf in zip(self.groups, self.buffers):
            addr, keep = _address(buf, g.slots * g.slot_bytes)
            addrs.append(addr)
            self._keep.append(keep)
        cg = (_abi.Group * len(self.groups))(*[_abi.Group(g.slots, g.slot_bytes) for g in self.groups])
        slabs = (ctypes.c_void_p * len(addrs))(*addrs)
        h = ctypes.c_uint64()
        _abi.check(_abi.memory_over(cg, len(self.groups), slabs, ctypes.byref(h)))
        self.handle = h.value
        self._views = [(ctypes.c_char * (g.slots * g.slot_bytes)).from_address(a) for g, a in zip(self.groups, addrs)]

    def row(self, group: int, local: int) -> memoryview:
        """Slot ``local`` of pool group ``group``, as a writable memoryview
        (no copy): what a Python backend writes a fetched row into."""
        g = self.groups[group] if 0 <= group < len(self.groups) else None
        if g is None or not 0 <= local < g.slots:
            raise InvalidArgumentError(1, f"kvready: no slot {local} in pool group {group}")
        return memoryview(self._views[group]).cast("B")[local * g.slot_bytes:(local + 1) * g.slot_bytes]

    def write(self, group: int, local: int, data: Any, offset: int = 0) -> None:
        """Copy data into a slot (at offset)."""
        mv = memoryview(data).cast("B")
        row = self.row(group, local)
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= len(row) - mv.nbytes:
            raise InvalidArgumentError(1, f"kvready: {mv.nbytes} bytes at offset {offset!r} of the {len(row)}-byte slot "
                                          f"{local} of pool group {group}; want 0 <= offset <= {len(row) - mv.nbytes}")
        row[offset:offset + mv.nbytes] = mv

    def read(self, group: int, local: int) -> bytes:
        """A copy of a slot."""
        return bytes(self.row(group, local))

    def close(self) -> None:
        """Forget the memory (refused while an engine or backend uses it)."""
        if self.handle:
            _abi.check(_abi.memory_close(self.handle), self.handle)
            self.handle = 0
            self._views = []
            self._keep = []

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class KitMemory:
    """The conformance kit's staging memory, handed to ``make_backend``: Go
    memory, reached through :meth:`write` and :meth:`read` only (it has no
    address to hand out)."""

    def __init__(self, handle: int):
        self.handle = handle
        cg = (_abi.Group * 64)()
        n = ctypes.c_size_t()
        _abi.check(_abi.memory_groups(handle, cg, 64, ctypes.byref(n)), handle)
        self.groups = [Group(cg[i].slots, cg[i].slot_bytes) for i in range(n.value)]

    def write(self, group: int, local: int, data: Any, offset: int = 0) -> None:
        """Copy data into a slot (at offset)."""
        b = bytes(data)
        _abi.check(_abi.memory_write(self.handle, integer(group, ctypes.c_int32, "group"),
                                     integer(local, ctypes.c_int64, "local"), integer(offset, ctypes.c_int64, "offset"),
                                     b, len(b)), self.handle)

    def read(self, group: int, local: int) -> bytes:
        """A copy of a slot."""
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < len(self.groups):
            raise InvalidArgumentError(1, f"kvready: no pool group {group!r}; want 0 .. {len(self.groups) - 1}")
        n = self.groups[group].slot_bytes
        buf = ctypes.create_string_buffer(n)
        _abi.check(_abi.memory_read(self.handle, group, integer(local, ctypes.c_int64, "local"), 0, buf, n), self.handle)
        return buf.raw

    def row(self, group: int, local: int) -> memoryview:
        """Refused: the kit's memory is reached through write and read."""
        raise UnsupportedError(17, "kvready: the conformance kit's memory is Go memory: reach it through write and read")
