"""A disaggregated KV connector on kvready: prefill and decode as two
processes, the pages moving over UCX through kvready's transfer leases.

The connector has the worker-side shape of vLLM's KV connector API
(``vllm/distributed/kv_transfer/kv_connector/v1/base.py``,
``KVConnectorBase_V1``): ``bind_connector_metadata`` (the scheduler's plan
for the step), ``start_load_kv(forward_context)`` before the forward pass,
``wait_for_layer_load(layer_name)`` before each attention layer reads its
KV, ``save_kv_layer(layer_name, kv_layer, attn_metadata)`` after each layer
computed it, ``wait_for_save()`` as the forward pass ends (after it the
paged buffer may be overwritten), and ``get_finished(finished_req_ids)``
answering ``(sending done, receiving done)``: a request's blocks stay
allocated until it is reported there. It is the shape only: nothing of vLLM
is imported, layers are named ``"layer.<i>"``, the paged buffer is
kvready's simulated device, and the scheduler is this program.

How the leases keep the pages safe:

- the **prefill** process saves each layer as it is computed (a layerwise
  publish lease: the layer's device->staging copies follow its compute
  stream's event); once every layer landed in staging, ``wait_for_save``
  returns and the device pages may be reused — the example overwrites them
  at once. The publish goes to a ``kvready.Sender``: its puts read the
  staging slots, which return to the engine only once every put completed
  (the Sender's Quiesce); ``get_finished`` reports the request sent then.
- the **decode** process lends staging slots to a ``kvready.Receiver`` (a
  fetch lease): the prefill's puts land there, and the engine copies them
  into the decode's device pages, layer by layer, only once the receiver
  proved the writer settled (its flush and report; the session's
  registration revoked, which in UCX's Checked mode fences late writes).
  ``wait_for_layer_load`` waits for each layer's copies; ``get_finished``
  reports the request received once the lease settled.

The decode process (this program) starts the prefill process (this program
with ``--prefill``) itself; the two exchange UCX addresses and capabilities
over the child's pipes (no port), then the pages move over UCX ``tcp``.

    PYTHONPATH=python python3 examples/python/disagg_connector.py
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from typing import Any, NamedTuple

import kvready

LAYERS = 4
TOKENS_PER_BLOCK = 16
BLOCKS = 3                       # pages per request
LAYER_BYTES = 512                # one layer of one block
BLOCK_BYTES = LAYERS * LAYER_BYTES
SLOTS = 2 * BLOCKS               # staging slots on each side
LAYOUT = {"tokens_per_block": TOKENS_PER_BLOCK, "pool_groups": {"0": [BLOCK_BYTES]},
          "layer_groups": [{"kind": "attention", "pool_group": 0, "layers": list(range(LAYERS))}],
          "buffers": [{"layer": l, "role": "key", "pool": [0, 0], "offset": l * LAYER_BYTES, "size": LAYER_BYTES}
                      for l in range(LAYERS)]}
TIMEOUT = 30.0                   # every wait is bounded
POLL = 0.0005                    # the peer backends' progress interval (s): a library thread, bounded per round
PREFILL = kvready.Accessor("prefill", 0, kvready.Role.KV)


def layer_name(layer: int) -> str:
    return f"layer.{layer}"


def layer_of(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def kv_of(request: int, block: int, layer: int) -> bytes:
    """What the prefill's layer computes for one block of a request."""
    digest = hashlib.sha256(repr((request, block, layer)).encode()).digest()
    return (digest * (LAYER_BYTES // len(digest) + 1))[:LAYER_BYTES]


def plan_of(request: int, decode: bool) -> kvready.Plan:
    """The transfer both sides agree on for a request (what vLLM's
    kv_transfer_params carry): the decode's page ids, the token range, the
    one writer."""
    ids = [request * 100 + b for b in range(BLOCKS)]
    common = dict(request=request, groups=[kvready.ChunkGroup(ids)], token_end=BLOCKS * TOKENS_PER_BLOCK,
                  block_tokens=TOKENS_PER_BLOCK)
    if decode:
        return kvready.Plan(**common, writers=[PREFILL])
    return kvready.Plan(**common, to="decode", as_=PREFILL)


class ConnectorMetadata(NamedTuple):
    """What the scheduler binds for one step: the requests to load (decode)
    or to save (prefill), each with its plan."""

    plans: dict[int, kvready.Plan]


class KvreadyConnector:
    """The worker side of a KV connector (KVConnectorBase_V1's shape) over
    one kvready engine whose fetcher (decode) or publisher (prefill) is a
    peer backend."""

    def __init__(self, role: str, engine: kvready.Engine, backend: Any, device: kvready.SimDevice):
        self.role, self.engine, self.backend, self.device = role, engine, backend, device
        self.compute = device.stream()
        self.meta: ConnectorMetadata | None = None
        self.loads: dict[int, kvready.Lease] = {}
        self.saves: dict[int, kvready.Lease] = {}
        self.rows: dict[int, list[kvready.Row]] = {}

    def bind_connector_metadata(self, meta: ConnectorMetadata) -> None:
        self.meta = meta

    def clear_connector_metadata(self) -> None:
        self.meta = None

    # ---- decode ----

    def start_load_kv(self, forward_context: Any = None, **kwargs: Any) -> None:
        """Lend each request's pages to its transfer: the receiver offers
        them to the prefill writer; the engine copies them into the device
        pages once the writer is proven settled."""
        for req, plan in self.meta.plans.items():
            pages = self.backend.expect(plan)
            rows = [pg.row(self.device.alloc(BLOCK_BYTES)) for pg in pages]
            self.rows[req] = rows
            self.loads[req] = self.engine.lend(kvready.Request.fetch(rows, is_last=plan.is_last))

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Block until the layer's copies landed for every request loading."""
        for lease in self.loads.values():
            lease.wait_layer(layer_of(layer_name), timeout=TIMEOUT)

    # ---- prefill ----

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        """The layer is computed once kv_layer (an event of the compute
        stream) completes: its device->staging copies follow it. The first
        layer of a request lends its publish lease."""
        for req, plan in self.meta.plans.items():
            if req not in self.saves:
                pages = self.backend.expect(plan)
                self.rows[req] = [pg.row(attn_metadata[req][pg.index]) for pg in pages]
                lease = self.engine.lend(kvready.Request.publish(self.rows[req], layerwise=True, is_last=plan.is_last))
                lease.wait(kvready.Until.GRANTED, timeout=TIMEOUT)
                self.saves[req] = lease
            self.saves[req].layer_computed(layer_of(layer_name), kv_layer)

    def wait_for_save(self) -> None:
        """Block until every layer of every save landed in staging: the
        device pages may be overwritten after this. The staging slots stay
        held until the Sender's puts completed."""
        deadline = time.monotonic() + TIMEOUT
        for lease in self.saves.values():
            while lease.info().state < kvready.State.REQUESTED:  # the publish is submitted once every layer landed
                if time.monotonic() > deadline:
                    raise TimeoutError("a save's layers never landed in staging")
                self.engine.sync(timeout=TIMEOUT)
                time.sleep(POLL)

    # ---- both ----

    def get_finished(self, finished_req_ids: set[int]) -> tuple[set[int] | None, set[int] | None]:
        """Requests whose transfer settled: (sent — the prefill's staging
        slots proven read no more — , received — the decode's pages copied
        behind the fence). Their leases are released here. It runs one
        engine round first: vLLM calls it every step."""
        self.engine.progress()
        sent, received = set(), set()
        for done, leases in ((sent, self.saves), (received, self.loads)):
            for req, lease in list(leases.items()):
                if leases is self.saves and req not in finished_req_ids:
                    continue
                info = lease.info()
                if info.state in (kvready.State.LOGICALLY_COMPLETE, kvready.State.QUARANTINED):
                    if info.outcome != kvready.OutcomeKind.SERVED:
                        raise RuntimeError(f"request {req}: {info.outcome.name}: {info.reason}")
                    lease.release()
                    del leases[req]
                    done.add(req)
        return sent or None, received or None


def assemble(name: str, receiver: bool):
    transport = kvready.UcxTransport(name, incarnation=1, transports="tcp")
    staging = kvready.Memory([kvready.Group(SLOTS, BLOCK_BYTES)])
    backend = (kvready.Receiver if receiver else kvready.Sender)(transport, staging, poll=POLL, timeout=TIMEOUT)
    device = kvready.SimDevice(1 << 22, latency=20e-6)
    role = {"fetcher": backend} if receiver else {"publisher": backend}
    engine = kvready.Engine(staging, 0, device=device, layout=LAYOUT, **role)
    return transport, staging, backend, device, engine


def handshake(transport: kvready.UcxTransport, backend: Any, send, recv) -> None:
    """Exchange addresses and capabilities over a pipe (no port)."""
    send(f"hello {transport.address.hex()} {backend.capabilities.hex()}")
    _, addr, caps = recv().split()
    transport.add_peer(bytes.fromhex(addr))
    backend.connect(bytes.fromhex(caps))


def until(what: str, ok) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {TIMEOUT} s")
        time.sleep(POLL)


def close(transport, staging, backend, device, engine) -> kvready.Report:
    report = engine.shutdown(timeout=TIMEOUT)
    engine.free()
    backend.close()
    transport.close()
    staging.close()
    return report


def prefill() -> int:
    """The prefill process: commands on stdin, answers on stdout."""
    out = sys.stdout

    def send(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    parts = assemble("prefill", receiver=False)
    transport, staging, sender, device, engine = parts
    handshake(transport, sender, send, lambda: sys.stdin.readline())
    conn = KvreadyConnector("prefill", engine, sender, device)
    for line in sys.stdin:
        cmd = line.split()
        if cmd == ["quit"]:
            break
        req = int(cmd[1])
        pages = [device.alloc(BLOCK_BYTES) for _ in range(BLOCKS)]
        conn.bind_connector_metadata(ConnectorMetadata({req: plan_of(req, decode=False)}))
        for layer in range(LAYERS):  # the forward pass
            for b, p in enumerate(pages):  # what the layer's kernel writes into the paged buffer
                device.write(p + layer * LAYER_BYTES, kv_of(req, b, layer))
            conn.compute.compute(0.0002)
            conn.save_kv_layer(layer_name(layer), conn.compute.record(), {req: pages})
        conn.wait_for_save()
        for p in pages:  # the paged buffer is reused at once: the staging copies hold the request's KV
            device.write(p, b"\xEE" * BLOCK_BYTES)
        held = engine.stats().slots_held
        conn.clear_connector_metadata()
        sent: set[int] = set()
        until(f"request {req} sent", lambda: sent.update(conn.get_finished({req})[0] or ()) or req in sent)
        send(f"saved {req}: {LAYERS} layers, device pages reused after wait_for_save, "
             f"{held} staging slots held until the sender's puts completed")
    stats = sender.stats()
    until("every staging slot free", lambda: engine.stats().slots_free == SLOTS)
    free = engine.stats().slots_free
    report = close(*parts)
    send(f"prefill: {stats.delivered} sent, {stats.puts} puts, {stats.in_flight} in flight; "
         f"slots free {free}/{SLOTS}, quarantined {report.slots_quarantined}")
    return 0


def decode(requests: int) -> int:
    """The decode process: starts the prefill, then loads each request."""
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--prefill"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        return run_decode(child, requests)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=TIMEOUT)


def run_decode(child: subprocess.Popen, requests: int) -> int:
    def send(line: str) -> None:
        child.stdin.write(line + "\n")
        child.stdin.flush()

    def recv() -> str:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError("the prefill process exited")
        return line.strip()

    parts = assemble("decode", receiver=True)
    transport, staging, recv_be, device, engine = parts
    handshake(transport, recv_be, send, recv)
    conn = KvreadyConnector("decode", engine, recv_be, device)
    print(f"decode: connected to the prefill process over UCX tcp; {LAYERS} layers, {BLOCKS} pages per request")
    for req in range(1, requests + 1):
        conn.bind_connector_metadata(ConnectorMetadata({req: plan_of(req, decode=True)}))
        conn.start_load_kv()
        send(f"prefill {req}")
        rows = conn.rows[req]
        for layer in range(LAYERS):  # the forward pass
            conn.wait_for_layer_load(layer_name(layer))
            for b, r in enumerate(rows):  # what the layer's kernel reads
                got = device.read(r.device + layer * LAYER_BYTES, LAYER_BYTES)
                assert got == kv_of(req, b, layer), f"request {req}: layer {layer} of page {b} is not what prefill computed"
        conn.clear_connector_metadata()
        received: set[int] = set()
        until(f"request {req} received", lambda: received.update(conn.get_finished(set())[1] or ()) or req in received)
        out = recv_be.outcome(req)
        print(f"request {req}: {LAYERS} layers loaded, {BLOCKS * BLOCK_BYTES} bytes equal to what prefill computed "
              f"({out.kind.name}, token_end {out.token_end})")
        print(recv())  # the prefill's "saved" line
    stats = recv_be.stats()
    until("every staging slot free", lambda: engine.stats().slots_free == SLOTS)
    free = engine.stats().slots_free
    report = close(*parts)
    send("quit")
    print(recv())
    print(f"decode: {stats.delivered} received, {stats.fenced} fenced by revocation, {stats.in_doubt} in doubt; "
          f"slots free {free}/{SLOTS}, quarantined {report.slots_quarantined}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefill", action="store_true", help="run as the prefill process (the decode process starts it)")
    ap.add_argument("--requests", type=int, default=3)
    args = ap.parse_args()
    return prefill() if args.prefill else decode(args.requests)


if __name__ == "__main__":
    sys.exit(main())
