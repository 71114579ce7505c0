"""The border: every value a public call hands the C ABI is checked here
against the C type it becomes, before the call, so that nothing is truncated
on the way (ctypes keeps the low bits of an integer that does not fit: layer
2**32 would reach C as layer 0). A value that does not fit is refused with
:class:`InvalidArgumentError` naming the argument, what was given and the
bounds, and nothing is called.

- :func:`integer`: an integer (``int``, or anything with ``__index__``: an
  IntEnum, a :class:`Lease`, a numpy integer) within the ctypes type's range.
  ``bool`` (and numpy's) is refused: ``True`` is no block number.
- :func:`integers`: a batch of them (a sequence, or a numpy integer array)
  as one ``array.array`` of the C type, checked in bulk where every value is
  a plain int, value by value through :func:`integer` otherwise: the same
  values are refused, with the same words.
- :func:`nanoseconds`: seconds (an int or a float) as the C ABI's
  ``int64_t`` nanoseconds; refused when negative, NaN, infinite, past
  2**63 - 1 ns (about 292 years: no wait for ever, every wait is bounded) or
  not a number. A positive duration never becomes 0 ns (0 is "the default").
- :func:`real`: a finite float for a C ``double``.

Internal: the public names are in :mod:`kvready`.
"""

from __future__ import annotations

import array
import ctypes
import math
import numbers
import operator
from typing import Any

from . import errors

#: The largest duration the C ABI takes: 2**63 - 1 ns.
MAX_NS = (1 << 63) - 1
#: The same in seconds, as the refusals print it.
MAX_SECONDS = "9223372036.854775807"
#: The longest default wait (whole seconds under MAX_NS): a default derived
#: from long timeouts is cut to it, never refused.
MAX_WAIT_SECONDS = 9223372036.0


_BOUNDS: dict[Any, tuple[int, int, str]] = {}


def bounds(ctype: Any) -> tuple[int, int, str]:
    """The range of a ctypes integer type and its C name (``int32_t``...)."""
    b = _BOUNDS.get(ctype)
    if b is None:
        bits = 8 * ctypes.sizeof(ctype)
        if ctype(-1).value < 0:
            b = -(1 << (bits - 1)), (1 << (bits - 1)) - 1, f"int{bits}_t"
        else:
            b = 0, (1 << bits) - 1, f"uint{bits}_t"
        _BOUNDS[ctype] = b
    return b


def _refuse(message: str) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(errors.INVALID, "kvready: " + message)


def _dtype_kind(value: Any) -> str | None:
    """numpy's kind letter of value's dtype ("b" for numpy's bool, whose
    True is no more a number here than Python's), None for what has none."""
    return getattr(getattr(value, "dtype", None), "kind", None)


def integer(value: Any, ctype: Any, what: str, low: int | None = None) -> int:
    """value as an int of ctype, or InvalidArgumentError naming what and the
    range (low, if given, raises the lower bound: 1 for a count that must be
    positive)."""
    lo, hi, cname = bounds(ctype)
    if type(value) is int and lo <= value <= hi and (low is None or value >= low):
        return value  # the common case, decided without building anything
    if low is not None:
        lo = max(lo, low)
    if isinstance(value, bool) or not (isinstance(value, int) or (hasattr(type(value), "__index__")
                                                                  and _dtype_kind(value) != "b")):
        raise _refuse(f"{what} is {value!r} (a {type(value).__name__}); want an integer in {lo} .. {hi} (a C {cname})")
    v = operator.index(value)
    if not lo <= v <= hi:
        raise _refuse(f"{what} {v} is out of range; want an integer in {lo} .. {hi} (a C {cname})")
    return v  # an IntEnum, a Lease, a numpy integer: no message built unless refused


_INTS = frozenset({int})
_TYPECODES: dict[Any, str] = {}


def _typecode(ctype: Any) -> str:
    """The array module's typecode of ctype's width and signedness."""
    code = _TYPECODES.get(ctype)
    if code is None:
        signed = ctype(-1).value < 0
        code = next(c for c in "bBhHiIlLqQ" if array.array(c).itemsize == ctypes.sizeof(ctype)
                    and (c.islower() == signed))
        _TYPECODES[ctype] = code
    return code


def integers(values: Any, ctype: Any, what: str) -> array.array:
    """values (a sequence of integers, or a numpy integer array) as an
    array.array of ctype, each checked as :func:`integer` checks one.

    A batched call pays for it in bulk rather than per value in Python (SPEC
    §5: what the binding adds per lease): when every value is a plain int —
    one pass in C over their types, which keeps ``bool`` and floats out —
    array.array converts them all in C, and it refuses a value that does
    not fit (OverflowError) rather than keeping its low bits as ctypes
    would. Anything else, and a batch array refused, goes value by value
    through integer(), so that the refusal names the first value that does
    not fit in the same words as a single call's."""
    code = _typecode(ctype)
    if getattr(values, "ndim", None) == 1 and _dtype_kind(values) in ("i", "u"):
        values = values.tolist()  # a numpy integer array: plain ints, converted in C
    elif type(values) is not list and type(values) is not tuple:
        values = list(values)  # read twice below: an iterator would be empty the second time
    if _INTS.issuperset(map(type, values)):
        try:
            return array.array(code, values)
        except OverflowError:
            pass  # one does not fit: integer() below names it
    return array.array(code, [integer(v, ctype, what) for v in values])


def nanoseconds(seconds: Any, what: str) -> int:
    """A duration in seconds as int64 nanoseconds (None: 0, the default)."""
    if seconds is None:
        return 0
    want = f"want a number of seconds from 0 to {MAX_SECONDS} (2**63 - 1 ns: every wait is bounded)"
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise _refuse(f"{what} is {seconds!r} (a {type(seconds).__name__}); {want}")
    if isinstance(seconds, numbers.Integral):
        ns = operator.index(seconds) * 1_000_000_000
    else:
        f = float(seconds)
        if math.isnan(f):
            raise _refuse(f"{what} is nan; {want}")
        if math.isinf(f):
            raise _refuse(f"{what} is {f} s; {want}")
        scaled = f * 1e9
        if scaled >= 2.0 ** 63:
            raise _refuse(f"{what} {f} s is too long; {want}")
        ns = math.ceil(scaled) if scaled > 0 else int(scaled)  # a positive duration never becomes 0 ns
    if ns < 0:
        raise _refuse(f"{what} is negative ({seconds} s); {want}")
    if ns > MAX_NS:
        raise _refuse(f"{what} {seconds} s is too long; {want}")
    return ns


def real(value: Any, what: str) -> float:
    """value as a finite C double, or InvalidArgumentError naming what."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _refuse(f"{what} is {value!r} (a {type(value).__name__}); want a finite number")
    f = float(value)
    if not math.isfinite(f):
        raise _refuse(f"{what} is {f}; want a finite number")
    return f
