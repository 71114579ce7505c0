"""The exceptions kvready raises: one per status of the C ABI, each carrying
the engine's own message (what was wrong, and what was expected).

Every exception's name ends in ``Error``, so that none shares a name with an
outcome (``kvready.Failed``, ``Delivered``, ``Cancelled``) or a state:
``except kvready.Failed`` raises TypeError, since an outcome is not an
exception."""

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
LAYER_FAILED = 20
CONFIG = 21
UNAVAILABLE = 22


class KvreadyError(Exception):
    """A call into kvready failed. ``status`` is the C ABI's status code and
    ``message`` the library's explanation."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class InvalidArgumentError(KvreadyError, ValueError):
    """A malformed argument or request; nothing changed."""


class BadHandleError(KvreadyError):
    """The object was closed or freed (or the handle is not of its kind)."""


class StaleLeaseError(KvreadyError):
    """The lease was retired (its record reused), or never existed."""


class NotReadyError(KvreadyError):
    """Readiness is not answerable for the lease (yet): its copies have not
    all landed, or it is a publish."""


class EngineClosedError(KvreadyError):
    """The engine is closed and admits no new lease."""


class EngineHaltedError(KvreadyError):
    """The engine halted (a broken invariant, or a containment under the
    fatal policy): it releases nothing any more. Restart the manager."""


class DeviceLostError(KvreadyError):
    """The device is lost. A Python device raises it from a callback too."""

    def __init__(self, status: int = DEVICE_LOST, message: str = "device lost"):
        super().__init__(status, message)


class LayerFailedError(KvreadyError):
    """A copy of the layer waited for, or of an earlier one, failed: it
    never becomes ready. The lease's served rows did not arrive (recompute
    them); its slots go to containment as any failed copy's."""


class UngrantableError(KvreadyError):
    """Quarantine left no contiguous run of slots that could ever hold it."""


class ProfileError(KvreadyError, ValueError):
    """The runtime profile is refused; the message lists every violation."""


class TimedOutError(KvreadyError, TimeoutError):
    """A wait ran out of time."""


class BackendError(KvreadyError):
    """Opening a backend, or a direct call on one, failed. Opening one fails
    with one of its two kinds: BackendConfigError (fix the URL) or
    StoreUnavailableError (retry later)."""


class BackendConfigError(BackendError, ValueError):
    """The backend's URL or one of its options is wrong (a value out of
    range or of the wrong form, a query key given twice, an unknown one):
    opening it again changes nothing until the configuration does."""


class StoreUnavailableError(BackendError, ConnectionError):
    """The store does not answer (down, unreachable, hung): the configuration
    may be right, and opening it again later may succeed."""


class BusyError(KvreadyError):
    """The object is still used by an engine — a staging memory that another
    live engine holds, too (the message names it)."""


class UnsupportedError(KvreadyError):
    """The object cannot do that."""


class CallFailedError(KvreadyError):
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


class RejectedError(KvreadyError):
    """The library refused what was asked before anything escaped: a peer
    that lacks what a transfer needs (negotiation), a plan whose attempt is
    already expected, or one more than the backend holds."""


class TransportUnavailableError(KvreadyError, ConnectionError):
    """UCX could not open a transport over the transports asked for (none of
    them present, or libucp refused): see the message."""


class SubmissionRejectedError(Exception):
    """Raised by a Python backend's fetch or publish when it refused the
    submission before anything escaped (no work, notification or memory
    access): there is nothing to wait for."""


class CopyRefusedError(Exception):
    """Raised by a Python device's copy when nothing was queued: nothing
    touches the memory, and no event needs to prove anything about it."""


_BY_STATUS = {
    INVALID: InvalidArgumentError, BAD_HANDLE: BadHandleError, STALE_LEASE: StaleLeaseError, NOT_READY: NotReadyError,
    CLOSED: EngineClosedError, HALTED: EngineHaltedError, DEVICE_LOST: DeviceLostError, UNGRANTABLE: UngrantableError,
    PROFILE: ProfileError, TIMEOUT: TimedOutError, BACKEND: BackendError, BUSY: BusyError, UNSUPPORTED: UnsupportedError,
    FAILED: CallFailedError, INTERNAL: InternalError, CONFORMANCE: ConformanceError, LAYER_FAILED: LayerFailedError,
    CONFIG: BackendConfigError, UNAVAILABLE: StoreUnavailableError, REJECTED: RejectedError,
}


def from_status(status: int, message: str) -> KvreadyError:
    """The exception for a failed call's status."""
    cls = _BY_STATUS.get(status, KvreadyError)
    return cls(status, message or f"kvready: status {status} (no message)")
