"""The prefill process of test_transfer.py: a kvready.Sender over UCX tcp,
driven over its pipes. Not a test module (pytest collects test_*.py only).

It prints ``hello ADDR CAPS`` (hex), reads the decode's, then takes one
command a line:

    send REQ   publish request REQ's pages (each page's bytes page_bytes)
               and answer ``sent REQ SERVED`` once
               the publish lease settled and was released
    quit       shut down and answer ``bye SLOTS_FREE``

argv: incarnation. Every wait is bounded (the parent bounds the process).
"""

from __future__ import annotations

import sys
import time

import kvready  # the library is the parent's (KVREADY_LIBRARY), the package on PYTHONPATH

PAGE = 1024    # one page, one staging slot
SLOTS = 4      # staging slots on each side
TPB = 16       # tokens per block
PAGES = 2      # pages per request
PREFILL = kvready.Accessor("prefill")


def page_bytes(req: int, index: int) -> bytes:
    """Page index of request req: bytes that tell request, page and place apart."""
    return bytes((req * 31 + index * 7 + j + (j >> 8)) & 0xFF for j in range(PAGE))


def plan_of(req: int, decode: bool, attempt: int = 1) -> kvready.Plan:
    """Request req's transfer, as both sides plan it."""
    groups = [kvready.ChunkGroup([req * 10 + i for i in range(PAGES)])]
    if decode:
        return kvready.Plan(req, groups, PAGES * TPB, TPB, attempt=attempt, writers=[PREFILL])
    return kvready.Plan(req, groups, PAGES * TPB, TPB, attempt=attempt, to="decode", as_=PREFILL)


def main() -> int:
    inc = int(sys.argv[1])
    tr = kvready.UcxTransport("prefill", inc, "tcp")
    mem = kvready.Memory([kvready.Group(SLOTS, PAGE)])
    send = kvready.Sender(tr, mem, poll=0.0005, timeout=30)
    dev = kvready.SimDevice(1 << 20, latency=10e-6)
    eng = kvready.Engine(mem, TPB, device=dev, publisher=send)
    print(f"hello {tr.address.hex()} {send.capabilities.hex()}", flush=True)
    _, addr, caps = sys.stdin.readline().split()
    tr.add_peer(bytes.fromhex(addr))
    send.connect(bytes.fromhex(caps))
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "quit":
            break
        req = int(cmd[1])
        rows = []
        for pg in send.expect(plan_of(req, decode=False)):
            p = dev.alloc(PAGE)
            dev.write(p, page_bytes(req, pg.index))
            rows.append(pg.row(p))
        with eng.lend(kvready.Request.publish(rows, is_last=True)) as lease:
            info = lease.wait(timeout=30)
        print(f"sent {req} {info.outcome.name}", flush=True)
    deadline = time.monotonic() + 30
    while eng.stats().slots_free != SLOTS and time.monotonic() < deadline:
        eng.sync(timeout=1)
    free = eng.stats().slots_free
    eng.shutdown(timeout=30)
    eng.free()
    send.close()
    tr.close()
    print(f"bye {free}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
