"""The exceptions kvready raises: one per status of the C ABI, each carrying
the engine's own message (what was wrong, and what was expected)."""

from __future__ import annotations

OK = 0
INVALID = 1
BAD_HANDLE = 2
STALE_LEASE = 3
NOT_READY = 4
CLOSED = 5
HALTED = 6
DEVICE_LOST = 7
UNGRANTABLE = 8
PROFILE = 9
TIMEOUT = 10
REJECTED = 11
REFUSED = 12
BUFFER = 13
BACKEND = 14
CONFORMANCE = 15
BUSY = 16
UNSUPPORTED = 17
FAILED = 18
INTERNAL = 19


class KvreadyError(Exception):
    """A call into kvready failed. ``status`` is the C ABI's status code and
    ``message`` the library's explanation."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class InvalidArgument(KvreadyError, ValueError):
    """A malformed argument or request; nothing changed."""


class BadHandle(KvreadyError):
    """The object was closed or freed (or the handle is not of its kind)."""


class StaleLease(KvreadyError):
    """The lease was retired (its record reused), or never existed."""


class NotReady(KvreadyError):
    """Readiness is not answerable for the lease (yet): its copies have not
    all landed, or it is a publish."""


class EngineClosed(KvreadyError):
    """The engine is closed and admits no new lease."""


class EngineHalted(KvreadyError):
    """The engine halted (a broken invariant, or a containment under the
    fatal policy): it releases nothing any more. Restart the manager."""


class DeviceLost(KvreadyError):
    """The device is lost. A Python device raises it from a callback too."""

    def __init__(self, status: int = DEVICE_LOST, message: str = "device lost"):
        super().__init__(status, message)


class Ungrantable(KvreadyError):
    """Quarantine left no contiguous run of slots that could ever hold it."""


class ProfileError(KvreadyError, ValueError):
    """The runtime profile is refused; the message lists every violation."""


class Timeout(KvreadyError, TimeoutError):
    """A wait ran out of time."""


class BackendError(KvreadyError):
    """Opening a backend, or a direct call on one, failed."""


class Busy(KvreadyError):
    """The object is still used by an engine."""


class Unsupported(KvreadyError):
    """The object cannot do that."""


class Failed(KvreadyError):
    """The call failed (see the message)."""


class InternalError(KvreadyError):
    """A bug in kvready: please report the message."""


class ConformanceError(KvreadyError, AssertionError):
    """The conformance kit found a broken rule. ``rule`` is its identifier
    (``"no_late_write"``, ...; empty when the failure names none) and
    ``report`` the kit's account of the failing trial."""

    def __init__(self, status: int, message: str, rule: str = ""):
        super().__init__(status, f"conformance rule {rule or '(none named)'} broken:\n{message}")
        self.rule = rule
        self.report = message


class SubmissionRejected(Exception):
    """Raised by a Python backend's fetch or publish when it refused the
    submission before anything escaped (no work, notification or memory
    access): there is nothing to wait for."""


class CopyRefused(Exception):
    """Raised by a Python device's copy when nothing was queued: nothing
    touches the memory, and no event needs to prove anything about it."""


_BY_STATUS = {
    INVALID: InvalidArgument, BAD_HANDLE: BadHandle, STALE_LEASE: StaleLease, NOT_READY: NotReady,
    CLOSED: EngineClosed, HALTED: EngineHalted, DEVICE_LOST: DeviceLost, UNGRANTABLE: Ungrantable,
    PROFILE: ProfileError, TIMEOUT: Timeout, BACKEND: BackendError, BUSY: Busy, UNSUPPORTED: Unsupported,
    FAILED: Failed, INTERNAL: InternalError, CONFORMANCE: ConformanceError,
}


def from_status(status: int, message: str) -> KvreadyError:
    """The exception for a failed call's status."""
    cls = _BY_STATUS.get(status, KvreadyError)
    return cls(status, message or f"kvready: status {status} (no message)")
