"""kvready's own log lines (the Go library's: containments, quarantines,
contract violations, a halt) through Python's ``logging``, on the logger
``kvready``, instead of straight to the process's stderr: the library calls
back (kvready_set_log) with each line and its level, and this forwards it.
Installed at import; a program configures it as any logger."""

from __future__ import annotations

import ctypes
import logging

from . import _abi

log = logging.getLogger("kvready")

LogFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t)

# slog's levels (kvready.h KVREADY_LOG_*) to logging's.
_LEVELS = ((8, logging.ERROR), (4, logging.WARNING), (0, logging.INFO))


def level_of(go_level: int) -> int:
    """The logging level of a Go slog level (a level between two is the
    lower one's)."""
    for at, level in _LEVELS:
        if go_level >= at:
            return level
    return logging.DEBUG


def _forward(_user, level, msg, n):
    try:
        text = ctypes.string_at(msg, n).decode("utf-8", "replace")
        log.log(level_of(level), "%s", text, extra={"kvready_go": True})
    except BaseException:  # a callback must never raise into Go
        pass


_callback = LogFn(_forward)  # kept alive as long as the module is

_abi.lib.kvready_set_log.argtypes = [LogFn, ctypes.c_void_p]
_abi.lib.kvready_set_log.restype = ctypes.c_int


def route_to_logging() -> None:
    """Send the library's log lines to the ``kvready`` logger (the default
    once kvready is imported)."""
    _abi.check(_abi.lib.kvready_set_log(_callback, None))


def route_to_stderr() -> None:
    """Send them back to the process's stderr, as Go writes them."""
    _abi.check(_abi.lib.kvready_set_log(LogFn(), None))
