/* bench.c — SPEC §5's C ABI figure, measured side by side in one run: a whole
 * one-row fetch lifecycle (lend, grant, submit, outcome, proof, copy, release)
 * driven from C through the ABI, against the same lifecycle driven in Go on
 * the same engine (kvready_bench_go_lifecycle), in rounds of 256 leases, with
 * the instant backend (its proofs answered on the owner thread, no allocation
 * a lease) and a simulated device whose copies land by the time they are
 * queried with no clock read (kvready_sim_device_new_instant): the lifecycle
 * of BenchmarkLifecycle/engine-256, which SPEC §5 compares it with, so that
 * the two measure the same thing. From C both ways a manager would: one call per
 * lease to lend and release, and one call per round (kvready_lend_many,
 * kvready_release_many). Alternates them, REPS times each, and prints
 * the medians; `make bench-abi` turns them into docs/performance-abi.md. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvready.h"

enum { LEASES = 256, REPS = 5 };
static const int64_t PER_REP = LEASES * 125;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void ok(int st, uint64_t h, const char *what) {
  if (st == KVREADY_OK) return;
  char msg[1024];
  kvready_last_error(h, msg, sizeof msg, NULL);
  fprintf(stderr, "bench: %s: status %d: %s\n", what, st, msg);
  exit(1);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint64_t eng, dev;
static kvready_request reqs[LEASES];

/* c_round runs one round of 64 lifecycles through the ABI, one call per lease
 * to lend and to release, as a C manager would. */
static void c_round(void) {
  uint64_t leases[LEASES];
  for (int i = 0; i < LEASES; i++) ok(kvready_lend(eng, &reqs[i], &leases[i]), eng, "lend");
  int64_t done = 0;
  for (int spins = 0; done < LEASES; spins++) {
    ok(kvready_sim_complete_all(dev, NULL), dev, "complete");
    ok(kvready_progress(eng, NULL, NULL, NULL, 0), eng, "progress");
    ok(kvready_count(eng, KVREADY_LOGICALLY_COMPLETE, &done), eng, "count");
    if (spins > 2) sched_yield(); /* the engine's goroutines need the core, as in Go */
  }
  for (int i = 0; i < LEASES; i++) ok(kvready_release(eng, leases[i]), eng, "release");
}

/* c_batch is c_round with one call per round to lend and to release. */
static void c_batch(void) {
  uint64_t leases[LEASES];
  ok(kvready_lend_many(eng, reqs, LEASES, leases, NULL), eng, "lend_many");
  int64_t done = 0;
  for (int spins = 0; done < LEASES; spins++) {
    ok(kvready_sim_complete_all(dev, NULL), dev, "complete");
    ok(kvready_progress(eng, NULL, NULL, NULL, 0), eng, "progress");
    ok(kvready_count(eng, KVREADY_LOGICALLY_COMPLETE, &done), eng, "count");
    if (spins > 2) sched_yield();
  }
  ok(kvready_release_many(eng, leases, LEASES, NULL), eng, "release_many");
}

int main(void) {
  static uint8_t slab[LEASES * 64];
  kvready_group g = {LEASES, 64};
  void *slabs[] = {slab};
  uint64_t mem, be;
  ok(kvready_memory_over(&g, 1, slabs, &mem), 0, "memory");
  ok(kvready_backend_open("instant:", mem, &be), 0, "backend");
  ok(kvready_sim_device_new_instant(1 << 16, &dev), 0, "device"); /* landed when queried */
  kvready_engine_config cfg = {.memory = mem, .fetcher = be, .device = dev, .tokens_per_block = 32,
                               .request_timeout_ns = 3600000000000LL, .drain_grace_ns = 3600000000000LL};
  ok(kvready_engine_new(&cfg, &eng), 0, "engine");
  static kvready_row rows[LEASES];
  uint64_t ptr;
  ok(kvready_sim_alloc(dev, 64, &ptr), dev, "alloc");
  for (int k = 0; k < LEASES; k++) {
    rows[k].name[0] = (uint8_t)k;
    rows[k].name[53] = 0x5A;
    rows[k].device = ptr;
    reqs[k] = (kvready_request){.kind = KVREADY_FETCH, .rows = &rows[k], .n_rows = 1};
  }
  /* Warm up both paths: every buffer grown once. */
  for (int i = 0; i < 50; i++) c_round();
  int64_t ns;
  ok(kvready_bench_go_lifecycle(eng, dev, reqs, LEASES, LEASES * 50, &ns), eng, "go lifecycle");

  double go[REPS], c[REPS], cb[REPS], bare[REPS];
  for (int r = 0; r < REPS; r++) {
    ok(kvready_bench_go_lifecycle(eng, dev, reqs, LEASES, PER_REP, &ns), eng, "go lifecycle");
    go[r] = (double)ns / (double)PER_REP;
    int64_t t0 = now_ns();
    for (int64_t i = 0; i < PER_REP; i += LEASES) c_round();
    c[r] = (double)(now_ns() - t0) / (double)PER_REP;
    t0 = now_ns();
    for (int64_t i = 0; i < PER_REP; i += LEASES) c_batch();
    cb[r] = (double)(now_ns() - t0) / (double)PER_REP;
    const int calls = 1000000;
    uint32_t sink = 0;
    t0 = now_ns();
    for (int i = 0; i < calls; i++) sink += kvready_abi_version();
    bare[r] = (double)(now_ns() - t0) / calls;
    if (sink != (uint32_t)calls * KVREADY_ABI_VERSION) return 1;
  }
  qsort(go, REPS, sizeof go[0], cmp);
  qsort(c, REPS, sizeof c[0], cmp);
  qsort(cb, REPS, sizeof cb[0], cmp);
  qsort(bare, REPS, sizeof bare[0], cmp);
  printf("go_lifecycle_ns_per_lease %.1f\n", go[REPS / 2]);
  printf("c_lifecycle_ns_per_lease %.1f\n", c[REPS / 2]);
  printf("c_batch_lifecycle_ns_per_lease %.1f\n", cb[REPS / 2]);
  printf("c_bare_call_ns %.1f\n", bare[REPS / 2]);
  printf("c_over_go %.3f\n", c[REPS / 2] / go[REPS / 2]);
  printf("c_batch_over_go %.3f\n", cb[REPS / 2] / go[REPS / 2]);
  kvready_report rep;
  ok(kvready_engine_shutdown(eng, 60000000000LL, &rep), eng, "shutdown");
  ok(kvready_engine_free(eng, 0), eng, "free");
  return 0;
}
