"""The library's own log lines (Go's: a containment, a quarantine, a halt)
reach a Python program through ``logging``, on the logger ``kvready``, at
their level — never written to the process's stderr behind logging's back."""

from __future__ import annotations

import logging

import kvready
from kvready import _log
from test_python_backend import Raises

CONTAINMENT = "kvready: containment: access or a local copy never proven"


def contain_one(rig):
    """Run a lease into containment: Go logs it at ERROR."""
    eng = rig.engine(Raises(rig.mem), request_timeout=0.2, drain_grace=0.1)
    lease = eng.lend(kvready.Request.fetch(rig.rows(1)))
    info = lease.wait(timeout=30)
    assert info.state == kvready.State.QUARANTINED, info
    return lease


def test_go_log_lines_go_through_python_logging(rig, caplog, capfd):
    with caplog.at_level(logging.INFO, logger="kvready"):
        lease = contain_one(rig)
    go = [r for r in caplog.records if getattr(r, "kvready_go", False)]
    lines = [r.getMessage() for r in go if r.getMessage().startswith(CONTAINMENT)]
    assert len(lines) == 1, [r.getMessage() for r in go]
    record = next(r for r in go if r.getMessage().startswith(CONTAINMENT))
    assert record.name == "kvready" and record.levelno == logging.ERROR
    # slog's attributes come with the message, the lease named as a handle.
    assert f"lease={kvready.LeaseHandle(lease.handle)}" in lines[0], lines[0]
    err = capfd.readouterr().err
    assert CONTAINMENT not in err, err


def test_route_to_stderr_gives_the_lines_back_to_stderr(rig, caplog, capfd):
    _log.route_to_stderr()
    try:
        with caplog.at_level(logging.INFO, logger="kvready"):
            contain_one(rig)
    finally:
        _log.route_to_logging()
    assert not [r for r in caplog.records if getattr(r, "kvready_go", False)]
    err = capfd.readouterr().err
    assert CONTAINMENT in err and " ERROR " in err, err


def test_go_levels_map_to_logging_levels():
    assert [_log.level_of(v) for v in (-4, -1, 0, 2, 4, 7, 8, 12)] == [
        logging.DEBUG, logging.DEBUG, logging.INFO, logging.INFO, logging.WARNING, logging.WARNING,
        logging.ERROR, logging.ERROR]
