"""Runtime profiles, layout ids and names (byte-compatible with the
reference lender: KEY_FORMAT_VERSION 2, LAYOUT_ID_VERSION 2)."""

from __future__ import annotations

import ctypes
import json
from typing import Any, NamedTuple, Sequence

from . import _abi
from ._border import integer
from .errors import InvalidArgumentError


def _json(doc: str | bytes | dict) -> bytes:
    if isinstance(doc, dict):
        return json.dumps(doc).encode()
    return doc.encode() if isinstance(doc, str) else bytes(doc)


def validate_profile(profile: str | bytes | dict) -> None:
    """Validate a runtime profile before any staging hold, registration or
    extent exists: ProfileError lists every violated field at once, each
    naming what was given and what is supported."""
    b = _json(profile)
    _abi.check(_abi.profile_validate(b, len(b)))


class LayoutID(NamedTuple):
    """A layout's id (32 bytes) and its tokens per block."""

    id: bytes
    tokens_per_block: int

    def hex(self) -> str:
        return self.id.hex()


def layout_id(layout: str | bytes | dict) -> LayoutID:
    """The layout id of a layout document (what ``kvready layout id`` reads)."""
    b = _json(layout)
    out = (ctypes.c_uint8 * _abi.LAYOUT_ID_SIZE)()
    tpb = ctypes.c_int32()
    _abi.check(_abi.layout_id(b, len(b), out, ctypes.byref(tpb)))
    return LayoutID(bytes(out), tpb.value)


class Identity:
    """The names of one manager: a scope (what must match for processes to
    share blocks: model, weights, tokenizer), a layout id, its local layer
    groups' global layer ids and each group's shard (count, index)."""

    def __init__(self, scope: bytes, layout_id: bytes, layers: Sequence[Sequence[int]],
                 shards: Sequence[tuple[int, int]] | None = None):
        if not layers:
            raise InvalidArgumentError(1, "kvready: no layer groups; want one list of global layer ids per local group")
        self.scope, self.layout_id = bytes(scope), bytes(layout_id)
        self.layers = [[integer(l, ctypes.c_int32, f"layer group {g}: layer id") for l in ls] for g, ls in enumerate(layers)]
        self.shards = [tuple(s) for s in shards] if shards is not None else [(1, 0)] * len(self.layers)
        for g, s in enumerate(self.shards):
            if len(s) != 2:
                raise InvalidArgumentError(1, f"kvready: layer group {g}: shard {s!r}; want (count, index)")
            integer(s[0], ctypes.c_int32, f"layer group {g}: shard count")
            integer(s[1], ctypes.c_int32, f"layer group {g}: shard index")
        if len(self.shards) != len(self.layers):
            raise InvalidArgumentError(1, f"kvready: {len(self.shards)} shards for {len(self.layers)} layer groups; want one each")
        flat = [l for g in self.layers for l in g]
        offs = [0]
        for g in self.layers:
            offs.append(offs[-1] + len(g))
        n = len(self.layers)
        self._layers = (ctypes.c_int32 * max(len(flat), 1))(*flat)
        self._offs = (ctypes.c_int32 * (n + 1))(*offs)
        self._counts = (ctypes.c_int32 * n)(*[s[0] for s in self.shards])
        self._idx = (ctypes.c_int32 * n)(*[s[1] for s in self.shards])
        self._scope = (ctypes.c_uint8 * max(len(self.scope), 1)).from_buffer_copy(self.scope.ljust(1, b"\0"))
        self._lid = (ctypes.c_uint8 * max(len(self.layout_id), 1)).from_buffer_copy(self.layout_id.ljust(1, b"\0"))
        self.name(0, bytes(32))  # refuse a bad identity now, not at the first name

    def names(self, group: int, keys: Sequence[bytes]) -> list[bytes]:
        """The names of blocks of one local layer group, by 32-byte block key
        (a hash of the tokens up to and including the block)."""
        c_group = integer(group, ctypes.c_int32, "group")
        n = len(keys)
        if n == 0:
            return []
        kb = b"".join(keys)
        if len(kb) != 32 * n or any(len(k) != 32 for k in keys):
            raise InvalidArgumentError(1, "kvready: every block key is 32 bytes")
        kbuf = (ctypes.c_uint8 * len(kb)).from_buffer_copy(kb)
        out = (ctypes.c_uint8 * (_abi.NAME_SIZE * n))()
        _abi.check(_abi.names(self._scope, len(self.scope), self._lid, len(self.layout_id), self._layers, self._offs,
                              len(self.layers), self._counts, self._idx, c_group, kbuf, n, out))
        raw = bytes(out)
        return [raw[i * _abi.NAME_SIZE:(i + 1) * _abi.NAME_SIZE] for i in range(n)]

    def name(self, group: int, key: bytes) -> bytes:
        """The name of one block."""
        return self.names(group, [key])[0]
