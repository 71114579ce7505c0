"""Devices: the simulated one (gpu/sim), and devices written in Python.

A Python device is how a PyTorch manager hands kvready its own stream and
events, as the reference's ``cuda_copy_completion`` does: ``copy`` queues a
copy on the manager's stream (``dst.copy_(src, non_blocking=True)``),
``record`` records an event after everything queued (``torch.cuda.Event()``
then ``event.record(stream)``), ``query`` answers ``event.query()``. Threads:

- ``copy``, ``record``, ``addressable``, ``lost``: the engine's owner thread;
  must not block.
- ``query``: any thread (the owner's, and kvready's watcher); must not block.

An event reads complete for kvready only once it and every event recorded
before it have completed, whatever order the device completes them in.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
from enum import IntEnum
from typing import Any, NamedTuple

from . import _abi
from ._border import integer, nanoseconds, real
from ._callbacks import Registry, write_error
from . import errors
from .errors import CopyRefusedError, DeviceLostError, InvalidArgumentError

log = logging.getLogger("kvready")


class EventStatus(IntEnum):
    """An event's status, as ``query`` may answer it (or True / False)."""

    PENDING = 0
    COMPLETE = 1
    FAILED = 2


def host_memory(address: int, nbytes: int) -> memoryview:
    """A writable memoryview over nbytes of staging memory at address (what
    ``copy`` is handed): valid while kvready holds the copy's slot."""
    address = integer(address, ctypes.c_uint64, "address", low=1)
    nbytes = integer(nbytes, ctypes.c_size_t, "nbytes", low=1)
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")


class Device:
    """A device written in Python: subclass it and override ``copy``,
    ``record`` and ``query`` (``addressable`` and ``lost`` optionally)."""

    def __init__(self) -> None:
        self.callback_errors: list[BaseException] = []
        self._handle = 0
        self._events: dict[int, Any] = {}
        self._waits: dict[int, Any] = {}  # events handed to layer_computed, until wait takes them
        self._tokens = itertools.count(1)
        self._user = 0
        self._table = None

    def copy(self, to_device: bool, device: int, host: int, nbytes: int) -> None:
        """Queue a copy of nbytes between staging memory at host and the
        device address (to_device: host to device). Raise CopyRefusedError if
        nothing was queued, DeviceLostError on a lost device."""
        raise NotImplementedError

    def record(self) -> Any:
        """Record an event after everything queued so far; return it."""
        raise NotImplementedError

    def query(self, event: Any) -> bool | EventStatus:
        """Whether the event completed (True / EventStatus.COMPLETE), is
        pending (False / PENDING), or failed (FAILED). Never blocks."""
        raise NotImplementedError

    def addressable(self, device: int, nbytes: int) -> bool:
        """Whether the stream can copy nbytes at the device address."""
        return True

    def lost(self) -> str | None:
        """Why the device is lost, or None."""
        return None

    def wait(self, event: Any) -> None:
        """Optional (owner thread; never blocks): hold every copy queued
        after this call until event — what :meth:`Lease.layer_computed` was
        handed, e.g. a ``torch.cuda.Event`` recorded on the compute stream:
        ``self.stream.wait_event(event)`` — resolved. A device without it
        takes a layerwise publish's layers with event None only. Raise if
        the stream cannot wait for it (that layer's copies are refused)."""
        raise NotImplementedError

    def _wait_token(self, event: Any) -> int:
        """A token for an event wait will be handed (through the library)."""
        if type(self).wait is Device.wait:
            raise InvalidArgumentError(errors.INVALID, f"kvready: {type(self).__name__} has no wait(): it cannot put its "
                                       "copies behind the compute stream's event; synchronise and report the layer with None")
        tok = next(self._tokens)
        self._waits[tok] = event
        return tok

    def close(self) -> None:
        """Called once when kvready closes the device."""

    @property
    def handle(self) -> int:
        """The device's C ABI handle (created on first use)."""
        if not self._handle:
            self._user = _live.register(self)
            cls = type(self)
            t = _abi.DeviceCallbacks()
            t.user = self._user
            t.copy, t.record, t.query, t.release_event, t.close = _COPY, _RECORD, _QUERY, _RELEASE, _CLOSE
            t.addressable = _ADDRESSABLE if cls.addressable is not Device.addressable else _abi.AddressableFn()
            t.lost = _LOST if cls.lost is not Device.lost else _abi.LostFn()
            t.wait = _WAIT if cls.wait is not Device.wait else _abi.WaitFn()
            h = ctypes.c_uint64()
            st = _abi.device_new(ctypes.byref(t), ctypes.byref(h))
            if st != 0:
                _live.pop(self._user)
                _abi.check(st)
            self._table, self._handle = t, h.value
        return self._handle

    def shut(self) -> None:
        """Close the device in kvready (refused while an engine uses it)."""
        if self._handle:
            _abi.check(_abi.device_close(self._handle), self._handle)

    def _failed(self, e: BaseException, where: str) -> None:
        self.callback_errors.append(e)
        log.error("kvready: %s.%s raised", type(self).__name__, where, exc_info=e)


class SimEvent(NamedTuple):
    """An event recorded on a stream of a :class:`SimDevice`
    (:meth:`SimStream.record`)."""

    device: "SimDevice"
    token: int

    def query(self) -> EventStatus:
        """Its status, without blocking."""
        return self.device.query(self)

    def __int__(self) -> int:
        return self.token


class SimStream:
    """A stream of a :class:`SimDevice` beside the engine's copy stream: the
    manager's compute stream, on which a forward pass runs "compute layer
    l" (:meth:`compute`) behind the wait for layer l."""

    __slots__ = ("device", "number")

    def __init__(self, device: "SimDevice", number: int):
        self.device, self.number = device, number

    def compute(self, seconds: float) -> None:
        """Queue a kernel that occupies the stream for seconds of the
        device's clock and touches no memory; work queued after it starts
        when it ended."""
        d = self.device
        _abi.check(_abi.sim_compute(d.handle, self.number, nanoseconds(seconds, "seconds")), d.handle)

    def record(self) -> SimEvent:
        """An event after everything queued on the stream so far."""
        d = self.device
        tok = ctypes.c_uint64()
        _abi.check(_abi.sim_record(d.handle, self.number, ctypes.byref(tok)), d.handle)
        return SimEvent(d, tok.value)

    def wait(self, event: SimEvent) -> None:
        """Hold what is queued on this stream from now on until event, of
        another stream, resolved (cuStreamWaitEvent)."""
        d = self.device
        _abi.check(_abi.sim_wait(d.handle, self.number, _event(event)), d.handle)

    def __repr__(self) -> str:
        return f"SimStream({self.number})"


class _Count(threading.local):
    """complete_all's out-parameter, one per thread (ctypes releases the GIL
    during a call: threads completing at once each write their own), made
    once rather than per call."""

    def __init__(self) -> None:
        n = ctypes.c_int64()
        self.args = (ctypes.byref(n), n)


_count = _Count()


class SimDevice:
    """The simulated device (gpu/sim): device memory is host memory, copies
    really copy. With ``latency`` > 0 seconds they complete by themselves;
    with 0 only :meth:`complete_all` (or :meth:`complete_next`) completes
    them (tests that step it). With ``bandwidth`` (bytes per second) each
    stream is a copy engine on the system clock instead: the copies queued
    on one stream run one after another, and a :meth:`stream` beside the
    engine's runs the forward pass (:meth:`SimStream.compute`)."""

    def __init__(self, mem_bytes: int = 1 << 20, latency: float = 0.0, bandwidth: float | None = None):
        h = ctypes.c_uint64()
        c_mem = integer(mem_bytes, ctypes.c_int64, "mem_bytes")
        if bandwidth is not None:
            c_bw = real(bandwidth, "bandwidth")
            if latency:
                raise InvalidArgumentError(errors.INVALID, f"kvready: SimDevice(latency={latency}, bandwidth={bandwidth}); "
                                           "want one timing model: a latency or a bandwidth")
            _abi.check(_abi.sim_device_new_bandwidth(c_mem, c_bw, ctypes.byref(h)))
        else:
            _abi.check(_abi.sim_device_new(c_mem, nanoseconds(latency, "latency"), ctypes.byref(h)))
        self.handle = h.value

    def stream(self) -> SimStream:
        """A new stream beside the engine's copy stream (stream 0)."""
        n = ctypes.c_uint32()
        _abi.check(_abi.sim_stream_new(self.handle, ctypes.byref(n)), self.handle)
        return SimStream(self, n.value)

    def query(self, event: SimEvent | int) -> EventStatus:
        """An event's status, without blocking."""
        st = ctypes.c_int32()
        _abi.check(_abi.sim_query(self.handle, _event(event), ctypes.byref(st)), self.handle)
        return EventStatus(st.value)

    def complete_next(self, stream: SimStream | int = 0, n: int = 1) -> int:
        """Complete the next n events of stream (0: the engine's copy stream,
        whose events a fetch records one per layer), with the copies before
        each; how many were completed."""
        k = ctypes.c_int64()
        _abi.check(_abi.sim_complete_next(self.handle, _stream_no(stream), integer(n, ctypes.c_int64, "n"), ctypes.byref(k)),
                   self.handle)
        return k.value

    def fail_next(self, stream: SimStream | int = 0, n: int = 1) -> int:
        """Fail the next n events of stream: their copies are not performed
        (the destinations poisoned); how many were failed."""
        k = ctypes.c_int64()
        _abi.check(_abi.sim_fail_next(self.handle, _stream_no(stream), integer(n, ctypes.c_int64, "n"), ctypes.byref(k)),
                   self.handle)
        return k.value

    def alloc(self, nbytes: int) -> int:
        """Reserve device memory; its address."""
        p = ctypes.c_uint64()
        _abi.check(_abi.sim_alloc(self.handle, integer(nbytes, ctypes.c_int64, "nbytes"), ctypes.byref(p)), self.handle)
        return p.value

    def write(self, ptr: int, data: Any) -> None:
        """Copy data to device memory now."""
        c_ptr = integer(ptr, ctypes.c_uint64, "ptr")
        b = bytes(data)
        _abi.check(_abi.sim_write(self.handle, c_ptr, b, len(b)), self.handle)

    def read(self, ptr: int, nbytes: int) -> bytes:
        """Copy device memory out now."""
        c_ptr, n = integer(ptr, ctypes.c_uint64, "ptr"), integer(nbytes, ctypes.c_size_t, "nbytes")
        buf = ctypes.create_string_buffer(n)
        _abi.check(_abi.sim_read(self.handle, c_ptr, buf, n), self.handle)
        return buf.raw

    def complete_all(self) -> int:
        """Complete every queued copy and event; how many events."""
        h = self.handle
        ref, n = _count.args
        st = _abi.sim_complete_all(h, ref)
        if st:
            _abi.check(st, h)
        return n.value

    def lose(self, reason: str = "lost") -> None:
        """Lose the device: copies in flight become unproven."""
        _abi.check(_abi.sim_lose(self.handle, reason.encode()), self.handle)

    def shut(self) -> None:
        """Close it (refused while an engine uses it)."""
        if self.handle:
            _abi.check(_abi.device_close(self.handle), self.handle)
            self.handle = 0

    close = shut


def _stream_no(stream: SimStream | int) -> int:
    return stream.number if isinstance(stream, SimStream) else integer(stream, ctypes.c_uint32, "stream")


def _event(event: SimEvent | int) -> int:
    return event.token if isinstance(event, SimEvent) else integer(event, ctypes.c_uint64, "event")


_live: Registry[Device] = Registry()


def _copy(user, to_device, dev, host, n):
    d = _live.get(user)
    if d is None:
        return errors.REFUSED
    try:
        d.copy(bool(to_device), dev, host, n)
        return 0
    except CopyRefusedError:
        return errors.REFUSED
    except DeviceLostError:
        return errors.DEVICE_LOST
    except BaseException as e:  # noqa: BLE001 - work may have been queued: unproven
        d._failed(e, "copy")
        return errors.FAILED


def _record(user, out):
    d = _live.get(user)
    if d is None:
        return errors.FAILED
    try:
        ev = d.record()
        tok = next(d._tokens)
        d._events[tok] = ev
        ctypes.c_uint64.from_address(out).value = tok
        return 0
    except BaseException as e:  # noqa: BLE001
        d._failed(e, "record")
        return errors.FAILED


def _query(user, tok, status):
    d = _live.get(user)
    if d is None:
        return errors.FAILED
    try:
        st = d.query(d._events[tok])
        if st is True:
            st = EventStatus.COMPLETE
        elif st is False or st is None:
            st = EventStatus.PENDING
        ctypes.c_int32.from_address(status).value = int(EventStatus(st))
        return 0
    except DeviceLostError:
        ctypes.c_int32.from_address(status).value = int(EventStatus.FAILED)
        return 0
    except BaseException as e:  # noqa: BLE001 - the event stays unproven
        d._failed(e, "query")
        return errors.FAILED


def _release(user, tok):
    d = _live.get(user)
    if d is not None:
        d._events.pop(tok, None)


def _addressable(user, dev, n, err, err_cap):
    d = _live.get(user)
    if d is None:
        return errors.INVALID
    try:
        ok = d.addressable(dev, n)
        if ok is True:
            return 0
        msg = ok if isinstance(ok, str) else f"device address {dev:#x} ({n} bytes) is not addressable"
    except BaseException as e:  # noqa: BLE001
        d._failed(e, "addressable")
        msg = f"{type(e).__name__}: {e}"
    write_error(err, err_cap, msg)
    return errors.INVALID


def _lost(user, out, reason, cap):
    d = _live.get(user)
    if d is None:
        return errors.FAILED
    try:
        why = d.lost()
    except BaseException as e:  # noqa: BLE001
        d._failed(e, "lost")
        return errors.FAILED
    ctypes.c_int32.from_address(out).value = 1 if why else 0
    if why:
        write_error(reason, cap, why)
    return 0


def _wait(user, tok):
    d = _live.get(user)
    if d is None:
        return errors.FAILED
    try:
        d.wait(d._waits.pop(tok))
        return 0
    except BaseException as e:  # noqa: BLE001 - nothing queued behind it: the layer's copies are refused
        d._failed(e, "wait")
        return errors.FAILED


def _close(user):
    d = _live.pop(user)
    if d is not None:
        d._handle = 0
        try:
            d.close()
        except BaseException as e:  # noqa: BLE001
            d._failed(e, "close")


_COPY = _abi.CopyFn(_copy)
_RECORD = _abi.RecordFn(_record)
_QUERY = _abi.QueryFn(_query)
_RELEASE = _abi.ReleaseEventFn(_release)
_ADDRESSABLE = _abi.AddressableFn(_addressable)
_LOST = _abi.LostFn(_lost)
_CLOSE = _abi.CloseFn(_close)
_WAIT = _abi.WaitFn(_wait)
