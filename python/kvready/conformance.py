"""The backend conformance kit, run against a backend written in Python.

``check(make_backend)`` runs kvready's Go kit (package conformance:
CheckFetcher / CheckPublisher): random extents over real staging memory with
canary bytes, one fresh backend per trial, built by ``make_backend(memory)``
over the kit's memory (write and read its slots with ``memory.write`` /
``memory.read``). Attempts are also asked to cancel (``request_cancel``:
before the outcome, after it, after the proof, twice) and held to the
cancellation rules. It raises :class:`kvready.ConformanceError` naming the
broken rule (``err.rule``, one of :data:`RULES`: ``"no_late_write"``,
``"served_subset"``, ``"known_miss"``, ``"cancel_never_blocks"``, ...) with
the kit's report of the failing trial.

The kit lives in the test library, libkvready_testkit.so (``make
lib-testkit``; the wheel carries it beside libkvready.so), which links Go's
testing package and rapid; libkvready.so, which kvready loads by default,
links neither. Set ``KVREADY_LIBRARY=testkit`` (or the test library's path)
before kvready is first imported — in the environment of the test run — to
load it: one library per process, chosen once. ``check`` raises
:class:`kvready.UnsupportedError` saying so when the loaded library lacks the
kit.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Callable

from . import _abi
from . import errors
from ._border import integer
from .backend import Backend
from .memory import KitMemory

log = logging.getLogger("kvready")

#: The rules' identifiers, as ``ConformanceError.rule`` names them (kvready.h
#: lists the same).
RULES = ("served_subset", "unserved_untouched", "outside_untouched", "served_content", "stable", "no_late_write",
         "known_miss", "rejected_no_effect", "probe", "quiesce_cancelled", "attempt_or_error", "settle",
         "published_content", "publish_read_only",
         # contract +cancel-request-v1: Attempt.request_cancel
         "cancel_never_blocks", "cancel_answer", "cancel_idempotent", "cancel_no_new_access", "cancel_keeps_proof",
         "cancel_not_end", "completion_once", "probe_never_blocks", "probe_agrees")


def check(make_backend: Callable[[KitMemory], Backend], kind: str = "fetch", checks: int = 50,
          may_fail: bool = False) -> None:
    """Run the kit; return if every trial kept every rule.

    kind: ``"fetch"``, ``"publish"`` or ``"both"``. checks: trials (each a
    fresh backend). may_fail: the backend fails or cancels on purpose, so a
    failure cannot be told from a miss reported as one (the known-miss rule
    is then not checked)."""
    if _abi.conformance_check is None:
        raise errors.UnsupportedError(
            errors.UNSUPPORTED,
            f"kvready.conformance.check: the loaded library ({_abi.path}) is libkvready.so, which has no "
            f"conformance kit; run with KVREADY_LIBRARY=testkit (or the path of libkvready_testkit.so, built by "
            f"`make lib-testkit`) set before kvready is imported: the test library is libkvready.so plus the kit")
    checks = integer(checks, ctypes.c_int32, "checks", low=1)
    kinds = {"fetch": [1], "publish": [2], "both": [1, 2]}.get(kind) if isinstance(kind, str) else None
    if kinds is None:
        raise errors.InvalidArgumentError(errors.INVALID, f"kvready: kind {kind!r}; want 'fetch', 'publish' or 'both'")
    made: list[BaseException] = []

    def make(user, memory, out):
        try:
            b = make_backend(KitMemory(memory))
            if not isinstance(b, Backend):
                raise TypeError(f"make_backend returned {type(b).__name__}; want a kvready.Backend")
            ctypes.c_uint64.from_address(out).value = b.handle
            return 0
        except BaseException as e:  # noqa: BLE001 - reported by the kit as a failed trial
            made.append(e)
            log.error("kvready: make_backend raised", exc_info=e)
            return errors.FAILED

    fn = _abi.MakeBackendFn(make)
    for k in kinds:
        rule = ctypes.create_string_buffer(64)
        st = _abi.conformance_check(fn, None, k, checks, 1 if may_fail else 0, rule, 64)
        if st == errors.CONFORMANCE:
            report = _abi.message(0)
            if made:
                report += f"\nmake_backend raised: {made[-1]!r}"
            raise errors.ConformanceError(st, report, rule.value.decode())
        _abi.check(st)
