"""A KV connector on kvready that loads layer by layer, as vLLM's does.

vLLM's KV connector API (KVConnectorBase_V1) has ``start_load_kv`` before
the forward pass, ``wait_for_layer_load(layer)`` before each attention
layer reads its KV, ``save_kv_layer(layer, ...)`` after each layer computed
its KV, and ``wait_for_save`` at the end. This program is that connector on
kvready over the simulated device (``kvready.SimDevice(bandwidth=...)``: the
engine's copy stream moves a set number of bytes per second, on the system
clock) and a compute stream beside it (``SimDevice.stream()``) where "compute
layer l" runs.

Request A misses: its forward pass computes every layer's KV on the device
and saves each layer as it is computed (a layerwise publish: the layer's
copies to staging wait behind the compute stream's event, and the store
gets the blocks once every layer landed). Request B has the same prompt: it starts the load of all its
blocks, then for each layer waits only for that layer's copies
(``Lease.wait_layer``), checks the bytes it reads are the ones A saved, and
computes the layer on the compute stream while the next layers still copy.
Request C does the same with whole-lease readiness (``Lease.wait``) before
its first layer, for comparison: it pays every layer's copy before any
compute.

    PYTHONPATH=python python3 examples/python/layerwise.py
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

import kvready

LAYERS = 4
BLOCKS = 4
TOKENS_PER_BLOCK = 16
HALF = 256                      # a key's (or a value's) bytes per layer per block
LAYER_BYTES = 2 * HALF          # one layer of one block: its key, then its value
BLOCK_BYTES = LAYERS * LAYER_BYTES
LAYOUT = {"tokens_per_block": TOKENS_PER_BLOCK, "pool_groups": {"0": [BLOCK_BYTES]},
          "layer_groups": [{"kind": "attention", "pool_group": 0, "layers": list(range(LAYERS))}],
          "buffers": [{"layer": l, "role": r, "pool": [0, 0], "offset": l * LAYER_BYTES + i * HALF, "size": HALF}
                      for l in range(LAYERS) for i, r in enumerate(("key", "value"))]}
TIMEOUT = 10.0                  # every wait is bounded


def kv_of(tokens: list[int], block: int, layer: int) -> bytes:
    """What layer computes for one block of the prompt: a stand-in derived
    from the tokens up to and including the block."""
    seed = repr((tokens[: (block + 1) * TOKENS_PER_BLOCK], layer)).encode()
    digest = hashlib.sha256(seed).digest()
    return (digest * (LAYER_BYTES // len(digest) + 1))[:LAYER_BYTES]


def block_keys(tokens: list[int]) -> list[bytes]:
    n = len(tokens) // TOKENS_PER_BLOCK
    return [hashlib.sha256(repr(tokens[: (b + 1) * TOKENS_PER_BLOCK]).encode()).digest() for b in range(n)]


def until_complete(event: kvready.SimEvent) -> float:
    """Poll a device event until it completed (TIMEOUT at most); the time
    then (time.monotonic)."""
    deadline = time.monotonic() + TIMEOUT
    while event.query() == kvready.EventStatus.PENDING:
        if time.monotonic() > deadline:
            raise TimeoutError("the compute stream's event never completed")
        time.sleep(0.0002)
    if event.query() != kvready.EventStatus.COMPLETE:
        raise RuntimeError("the compute stream's event failed")
    return time.monotonic()


class Connector:
    """The worker side of a KV connector, on one kvready engine."""

    def __init__(self, engine: kvready.Engine, device: kvready.SimDevice):
        self.engine, self.device = engine, device
        self.load: kvready.Lease | None = None
        self.save: kvready.Lease | None = None

    def start_load_kv(self, rows: list[kvready.Row]) -> None:
        """Lend a fetch of the request's blocks: their copies start as soon
        as the store served them, layer by layer."""
        self.load = self.engine.lend(kvready.Request.fetch(rows))

    def wait_for_layer_load(self, layer: int) -> kvready.Readiness:
        """Block until layer's copies landed (the later layers may still
        copy); LayerFailedError if a copy of it failed: recompute."""
        return self.load.wait_layer(layer, timeout=TIMEOUT)

    def start_save(self, rows: list[kvready.Row]) -> None:
        """Lend a layerwise publish of the blocks the forward pass will
        compute, and run rounds until its staging slots are granted (a
        layer is reported computed only then)."""
        self.save = self.engine.lend(kvready.Request.publish(rows, layerwise=True))
        self.save.wait(kvready.Until.GRANTED, timeout=TIMEOUT)

    def save_kv_layer(self, layer: int, computed: kvready.SimEvent) -> None:
        """Layer's KV is computed once computed (an event of the compute
        stream) completes: its device->staging copies are queued behind that
        event, while the next layers compute."""
        self.save.layer_computed(layer, computed)

    def wait_for_save(self) -> kvready.LeaseInfo:
        """Wait for the store to hold every layer (the publish is submitted
        once the last layer landed in staging)."""
        with self.save as lease:
            return lease.wait(timeout=TIMEOUT)

    def finish_load(self) -> kvready.Readiness:
        """The request resumes at the lease's readiness; the lease is
        released (its slots return once its fence is proven)."""
        with self.load as lease:
            lease.wait(timeout=TIMEOUT)
            return lease.readiness()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copy-ms", type=float, default=2.0, help="one layer's copy of the request's blocks, in ms")
    ap.add_argument("--compute-ms", type=float, default=3.0, help="one layer's compute, in ms")
    ap.add_argument("--timing", action="store_true", help="print the wall-clock time to the last layer computed")
    args = ap.parse_args()

    device = kvready.SimDevice(1 << 22, bandwidth=BLOCKS * LAYER_BYTES / (args.copy_ms / 1000))
    compute = device.stream()
    staging = kvready.Memory([kvready.Group(slots=4 * BLOCKS, slot_bytes=BLOCK_BYTES)])
    store = kvready.open_backend("mem", staging)
    names = kvready.Identity(hashlib.sha256(b"example-model").digest(), kvready.layout_id(LAYOUT).id,
                             layers=[list(range(LAYERS))])
    engine = kvready.Engine(staging, 0, backend=store, device=device, layout=LAYOUT)
    conn = Connector(engine, device)
    prompt = list(range(BLOCKS * TOKENS_PER_BLOCK))
    keys = names.names(0, block_keys(prompt))
    print(f"engine: {engine.layers} layers of {BLOCKS} blocks, {LAYER_BYTES} bytes per layer per block")

    # Request A: nothing stored; compute every layer and save it.
    rows = [kvready.Row(k, 0, b, device.alloc(BLOCK_BYTES)) for b, k in enumerate(keys)]
    conn.start_save(rows)
    for layer in range(LAYERS):
        for b, r in enumerate(rows):  # what the layer's kernel writes
            device.write(r.device + layer * LAYER_BYTES, kv_of(prompt, b, layer))
        compute.compute(args.compute_ms / 1000)
        conn.save_kv_layer(layer, compute.record())
    info = conn.wait_for_save()
    print(f"request A: computed and saved {LAYERS} layers, layer by layer: {info.rows} blocks published ({info.outcome.name})")

    # Request B: the same prompt, loaded layer by layer.
    def forward_with_load(label: str, layer_by_layer: bool) -> float:
        rows = [kvready.Row(k, 0, b, device.alloc(BLOCK_BYTES)) for b, k in enumerate(keys)]
        start = time.monotonic()
        conn.start_load_kv(rows)
        if not layer_by_layer:
            conn.load.wait(timeout=TIMEOUT)  # whole-lease readiness: every layer landed
        last = None
        for layer in range(LAYERS):
            conn.wait_for_layer_load(layer)
            for b, r in enumerate(rows):  # what the layer's kernel reads
                got = device.read(r.device + layer * LAYER_BYTES, LAYER_BYTES)
                assert got == kv_of(prompt, b, layer), f"{label}: layer {layer} of block {b} is not what A saved"
            compute.compute(args.compute_ms / 1000)
            last = compute.record()
            if layer_by_layer:
                print(f"{label}: layer {layer} loaded, {BLOCKS * LAYER_BYTES} bytes equal to what A saved; computing it")
        done = until_complete(last)
        ready = conn.finish_load()
        print(f"{label}: resumes at token {ready.usable_until} of {len(prompt)}")
        return (done - start) * 1000

    pipelined = forward_with_load("request B", True)
    whole = forward_with_load("request C", False)
    if args.timing:
        L, T, C = LAYERS, args.copy_ms, args.compute_ms
        print(f"time to last layer computed: layer by layer {pipelined:.1f} ms "
              f"(T + (L-1)·max(T, C) + C = {T + (L - 1) * max(T, C) + C:.1f} ms), "
              f"whole lease {whole:.1f} ms (L·T + L·C = {L * T + L * C:.1f} ms), on the system clock")

    report = engine.shutdown(timeout=30)
    engine.free()
    store.close()
    staging.close()
    print(f"engine: drained, slots quarantined {report.slots_quarantined}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
