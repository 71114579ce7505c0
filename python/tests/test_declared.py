"""Every setting and every counter of the C ABI reaches Python, from the one
declaration in Go: each setting field of kvready_engine_config is a keyword
of kvready.Engine that takes the library's default (kvready_engine_config
_defaults) when left out, and each field of kvready_stats reaches
kvready.Stats. The Go side (cabi's TestEveryConfigFieldCrossesIntoC and
TestEveryCounterReachesC) holds the C structs to readiness.Config and
readiness.Stats."""

from __future__ import annotations

import ctypes
import dataclasses
import inspect

import kvready
from kvready import _abi, engine

from conftest import Store

SETTINGS = [f for f, _ in _abi.EngineConfig._fields_ if f not in _abi.NOT_SETTINGS]


def keyword(field: str) -> str:
    """The Engine keyword of a setting field: durations in seconds, without _ns."""
    return field.removesuffix("_ns")


def test_every_setting_is_a_keyword_defaulted_by_the_library():
    params = inspect.signature(kvready.Engine.__init__).parameters
    assert len(SETTINGS) >= 10, SETTINGS
    for f in SETTINGS:
        assert keyword(f) in params, f"kvready_engine_config.{f} is no keyword of kvready.Engine: add {keyword(f)}"
        if f != "tokens_per_block":  # required
            assert params[keyword(f)].default is None, (
                f"kvready.Engine's {keyword(f)} defaults to {params[keyword(f)].default!r}; want None: the library's "
                "default (kvready_engine_config_defaults), never one of the binding's own")
    for f, _ in _abi.EngineConfig._fields_:
        assert f in _abi.NOT_SETTINGS or f in SETTINGS


def test_an_engine_left_to_its_defaults_has_the_librarys(rig):
    library = _abi.config_defaults()
    assert library.request_timeout_ns > 0 and library.keep_released > 0, "the library names its defaults"
    with kvready.Engine(rig.mem, 32, backend=Store(rig.mem), device=rig.dev) as eng:
        for f in SETTINGS:
            if f == "tokens_per_block":
                continue
            assert getattr(eng._config, f) == getattr(library, f), (
                f"kvready.Engine passed {f} = {getattr(eng._config, f)}; the library's default is {getattr(library, f)}")
        assert eng.request_timeout == library.request_timeout_ns / 1e9 == engine.DEFAULT_REQUEST_TIMEOUT
        assert eng.drain_grace == library.drain_grace_ns / 1e9 == engine.DEFAULT_DRAIN_GRACE


def test_every_setting_reaches_the_config(rig):
    kw, want = {}, {}
    for i, f in enumerate(SETTINGS):
        n = 3 + i
        if f == "policy":
            n = kvready.Policy.RECOVER  # 2: distinct from the others, and a policy
        kw[keyword(f)] = n
        want[f] = n * 1_000_000_000 if f.endswith("_ns") else int(n)
    tokens = kw.pop("tokens_per_block")
    with kvready.Engine(rig.mem, tokens, backend=Store(rig.mem), device=rig.dev, **kw) as eng:
        for f in SETTINGS:
            assert getattr(eng._config, f) == want[f], f"kvready.Engine({keyword(f)}=...) did not reach kvready_engine_config.{f}"


def fill(c: ctypes.Structure, counter: list[int]) -> None:
    """A distinct value in every field of c, nested structs and arrays too
    (an int32_t flag gets 1)."""
    for f, t in c._fields_:
        if f.startswith("_"):
            continue
        if isinstance(t, type) and issubclass(t, ctypes.Structure):
            fill(getattr(c, f), counter)
        elif isinstance(t, type) and issubclass(t, ctypes.Array):
            arr = getattr(c, f)
            for i in range(len(arr)):
                counter[0] += 1
                arr[i] = counter[0]
        else:
            counter[0] += 1
            setattr(c, f, 1 if t is ctypes.c_int32 else counter[0])


def check(c: ctypes.Structure, py: object, path: str) -> None:
    """Every field of c reached py's attribute of its name; and py has no
    field that c lacks."""
    names = {f for f, _ in c._fields_ if not f.startswith("_")}
    have = {f.name for f in dataclasses.fields(py)}
    assert have == names, (f"{type(c).__name__}'s fields {sorted(names - have)} are not in {type(py).__name__}, "
                           f"and {sorted(have - names)} of {type(py).__name__} are not in {type(c).__name__}")
    for f, t in c._fields_:
        if f.startswith("_"):
            continue
        got, v = getattr(py, f), getattr(c, f)
        where = f"{path}{f}"
        if isinstance(t, type) and issubclass(t, ctypes.Structure):
            check(v, got, where + ".")
        elif isinstance(t, type) and issubclass(t, ctypes.Array):
            assert got and all(got[k] == v[int(k)] for k in got), f"{where}: {got} from {list(v)}"
            assert len(got) == len(type(next(iter(got)))), f"{where}: not every member of the enum"
        else:
            assert got == v, f"kvready_stats.{where} = {v} reached kvready.Stats as {got}"


def test_every_counter_reaches_stats():
    c = _abi.CStats()
    fill(c, [1000])
    check(c, engine._stats(c), "")
