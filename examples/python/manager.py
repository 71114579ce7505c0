"""A miniature KV cache manager in Python, sharing blocks through kvready
over Redis.

Two managers (think: two inference processes) share one Redis store. The
first serves request A: it computes the KV blocks of A's prompt and
publishes them. The second serves request B, whose prompt shares A's first
three blocks: it fetches what the store has, resumes B at the readiness
kvready answers (``usable_until``), and computes only the rest. The device is
written in Python (``HostGPU``): its copies run on a thread of their own, as
a CUDA stream's do, and kvready learns of them only through the events it
records — how a PyTorch manager hands kvready its stream and events.

    PYTHONPATH=python python3 examples/python/manager.py --redis redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import hashlib
import queue
import selectors
import sys
import threading

import kvready

TOKENS_PER_BLOCK = 32
BLOCK_BYTES = 512
LAYOUT = {"tokens_per_block": TOKENS_PER_BLOCK, "pool_groups": {"0": [BLOCK_BYTES]},
          "layer_groups": [{"kind": "attention", "pool_group": 0, "layers": [0, 1]}],
          "buffers": [{"layer": l, "role": r, "pool": [0, 0], "offset": 256 * l + 128 * i, "size": 128}
                      for l in (0, 1) for i, r in enumerate(("key", "value"))]}


class HostGPU(kvready.Device):
    """A device written in Python: "GPU" blocks are bytearrays, and a worker
    thread performs the queued copies in order, as a stream would."""

    def __init__(self):
        super().__init__()
        self.blocks: dict[int, bytearray] = {}
        self.next_addr = 0x10000
        self.work: queue.Queue = queue.Queue()
        self.done = 0  # copies performed (read and written under lock)
        self.queued = 0
        self.lock = threading.Lock()
        self.worker = threading.Thread(target=self._run, daemon=True)
        self.worker.start()

    def alloc(self) -> int:
        addr = self.next_addr
        self.next_addr += 0x1000
        self.blocks[addr] = bytearray(BLOCK_BYTES)
        return addr

    def copy(self, to_device, device, host, nbytes):
        if device not in self.blocks or nbytes != BLOCK_BYTES:
            raise kvready.CopyRefusedError(f"no {nbytes}-byte block at {device:#x}")
        self.queued += 1
        self.work.put((to_device, device, host, nbytes))

    def record(self):
        return self.queued  # complete once this many copies were performed

    def query(self, event):
        with self.lock:
            return self.done >= event

    def addressable(self, device, nbytes):
        return device in self.blocks and nbytes == BLOCK_BYTES

    def _run(self):
        while True:
            to_device, device, host, n = self.work.get()
            staging = kvready.host_memory(host, n)
            if to_device:
                self.blocks[device][:] = staging
            else:
                staging[:] = self.blocks[device]
            with self.lock:
                self.done += 1


def kv_of(tokens: list[int], block: int) -> bytes:
    """The KV content of one block: what the model computes from the tokens
    up to and including it (here, a stand-in derived from them)."""
    digest = hashlib.sha256(repr(tokens[: (block + 1) * TOKENS_PER_BLOCK]).encode()).digest()
    return (digest * (BLOCK_BYTES // len(digest) + 1))[:BLOCK_BYTES]


class Manager:
    """One process's KV cache manager: a device, staging memory, an engine."""

    def __init__(self, label: str, redis_url: str):
        self.label = label
        self.gpu = HostGPU()
        self.staging = kvready.Memory([kvready.Group(slots=32, slot_bytes=BLOCK_BYTES)])
        self.store = kvready.open_backend(redis_url, self.staging)
        layout = kvready.layout_id(LAYOUT)
        scope = hashlib.sha256(b"example-model:weights-rev-1").digest()
        self.names = kvready.Identity(scope, layout.id, layers=[[0, 1]])
        self.engine = kvready.Engine(self.staging, TOKENS_PER_BLOCK, backend=self.store, device=self.gpu)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.engine, selectors.EVENT_READ)

    def block_keys(self, tokens: list[int]) -> list[bytes]:
        n = len(tokens) // TOKENS_PER_BLOCK
        return [hashlib.sha256(repr(tokens[: (b + 1) * TOKENS_PER_BLOCK]).encode()).digest() for b in range(n)]

    def run_until(self, leases: list[kvready.Lease], state: kvready.State) -> None:
        """The scheduler loop: sleep on the engine's fd, run a round."""
        pending = {l.handle for l in leases}
        for _ in range(10_000):
            for h, s in self.engine.progress().changed:
                if s == state or s == kvready.State.QUARANTINED:
                    pending.discard(h)
            pending = {h for h in pending if self.engine.info(h).state not in (state, kvready.State.QUARANTINED)}
            if not pending:
                return
            self.selector.select(timeout=1.0)
        raise TimeoutError(f"{self.label}: leases still not {state.name}")

    def prefill_and_publish(self, tokens: list[int]) -> int:
        """Compute every block of the prompt on the device and publish it."""
        names = self.names.names(0, self.block_keys(tokens))
        rows = []
        for b, name in enumerate(names):
            addr = self.gpu.alloc()
            self.gpu.blocks[addr][:] = kv_of(tokens, b)  # the model's forward pass
            rows.append(kvready.Row(name, 0, b, addr))
        lease = self.engine.lend(kvready.Request.publish(rows))
        self.run_until([lease], kvready.State.LOGICALLY_COMPLETE)
        info = lease.info()
        lease.release()
        return len(rows) if info.outcome == kvready.OutcomeKind.SERVED else 0

    def serve(self, tokens: list[int]) -> tuple[int, int, int]:
        """Fetch what the store has of the prompt, resume at usable_until and
        compute the rest. Returns (resume token, blocks fetched, computed)."""
        names = self.names.names(0, self.block_keys(tokens))
        rows = [kvready.Row(name, 0, b, self.gpu.alloc()) for b, name in enumerate(names)]
        with self.engine.lend(kvready.Request.fetch(rows, known_blocks=0)) as lease:
            self.run_until([lease], kvready.State.LOGICALLY_COMPLETE)
            if lease.info().outcome == kvready.OutcomeKind.MISSED:
                pass  # a miss is not an error: everything is recomputed
            ready = lease.readiness()
        resume = ready.usable_until  # the request may resume at any p in [restart_floor, usable_until]
        fetched = resume // TOKENS_PER_BLOCK
        for b in range(fetched):  # what was fetched is exactly what A computed
            assert self.gpu.blocks[rows[b].device] == kv_of(tokens, b), f"block {b} corrupt"
        for b in range(fetched, len(rows)):  # recompute from the resume point
            self.gpu.blocks[rows[b].device][:] = kv_of(tokens, b)
        return resume, fetched, len(rows) - fetched

    def close(self) -> None:
        self.selector.close()
        report = self.engine.shutdown(timeout=30)
        self.engine.free()
        self.store.close()
        self.staging.close()
        print(f"{self.label}: drained, slots quarantined {report.slots_quarantined}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis", required=True, help="the shared store, redis://host:port/db")
    args = ap.parse_args()
    prompt_a = list(range(5 * TOKENS_PER_BLOCK))                     # five blocks
    prompt_b = prompt_a[: 3 * TOKENS_PER_BLOCK] + [7] * (2 * TOKENS_PER_BLOCK)  # shares the first three

    first, second = Manager("manager 1", args.redis), Manager("manager 2", args.redis)
    try:
        print(f"manager 1: request A published {first.prefill_and_publish(prompt_a)} blocks")
        resume, fetched, computed = second.serve(prompt_b)
        print(f"manager 2: request B resumes at token {resume} of {len(prompt_b)} "
              f"({fetched} blocks fetched, {computed} computed)")
        resume, fetched, computed = second.serve(list(range(1000, 1000 + 2 * TOKENS_PER_BLOCK)))
        print(f"manager 2: request C resumes at token {resume} ({fetched} fetched, {computed} computed: a miss, not an error)")
    finally:
        first.close()
        second.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
