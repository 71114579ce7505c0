/* abi_test.c — the C ABI exercised from C, against kvready.h and
 * libkvready.so (the production library: make abi-test links it, not the test
 * library): statuses and messages, bad handles, profiles, layouts and
 * names, a whole publish and fetch over backend/mem and the simulated device
 * woken through the wake fd, a backend and a device written here in C (the
 * device's events complete out of order), and the containment policies (fatal
 * halts the engine; recover releases a contained lease once its access is
 * proven), a cancel's logical and physical answers and a shutdown's count of
 * leases left in doubt, and a fetch layer by layer (the engine given the layout; the copy
 * stream stepped one layer's event at a time, a failed layer, a compute
 * stream), a backend of tiers opened in one call, and a peer transfer over
 * UCX between a prefill and a decode engine. Built and run by
 * `make test` (make abi-test); it prints
 * "N passed, N failed" and exits non-zero on any failure. Every wait is
 * bounded; no check measures a duration. */
#define _GNU_SOURCE /* pthread_timedjoin_np: a bounded join */
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvready.h"

static int passed, failed;

static void check(int ok, const char *what, uint64_t handle) {
  if (ok) {
    passed++;
    return;
  }
  failed++;
  char msg[4096];
  size_t n = 0;
  kvready_last_error(handle, msg, sizeof msg, &n);
  fprintf(stderr, "FAIL: %s (last error: %s)\n", what, msg);
}
#define CHECK(cond, handle) check((cond), #cond, (handle))

static int last_error_contains(uint64_t handle, const char *needle) {
  char msg[8192];
  size_t n = 0;
  if (kvready_last_error(handle, msg, sizeof msg, &n) != KVREADY_OK) return 0;
  return strstr(msg, needle) != NULL;
}

static void hex(const char *s, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) sscanf(s + 2 * i, "%2hhx", &out[i]);
}

/* pump runs rounds, woken by the wake fd, until lease reaches state (or any
 * state at or past it when at_least), for at most 10 s. */
static int pump(uint64_t eng, uint64_t lease, int state, int at_least) {
  int32_t fd = -1;
  if (kvready_engine_wake_fd(eng, &fd) != KVREADY_OK) return 0;
  for (int i = 0; i < 1000; i++) {
    kvready_round r;
    kvready_progress(eng, &r, NULL, NULL, 0);
    kvready_lease_info info;
    if (kvready_lease_infos(eng, &lease, 1, &info, NULL) != KVREADY_OK) return 0;
    if (info.state == state || (at_least && info.state > state)) return 1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, 10);
  }
  return 0;
}

/* ---- a backend written in C: an in-memory store that serves at once -------- */

typedef struct {
  uint8_t name[KVREADY_NAME_SIZE];
  uint8_t row[256];
  size_t n;
} entry;

typedef struct {
  uint64_t self, memory;
  entry store[64];
  int stored;
  struct { uint64_t id; int kind; uint64_t served; uint8_t names[16][KVREADY_NAME_SIZE]; } att[64];
  int attempts;
  int quiesce_calls, forgotten, closed;
  int hold; /* nonzero: quiesce proves nothing (a store that cannot tell) */
  int try_calls;
  int unknown; /* nonzero: try_quiesce cannot tell without waiting */
  int64_t last_local; /* the staging slot of the last unit it was handed */
} cbackend;

static int cb_put(void *user, const uint8_t *ext, size_t ext_len, const uint8_t *name, const uint8_t *row, size_t n) {
  (void)ext; (void)ext_len;
  cbackend *b = user;
  if (b->stored == 64 || n > 256) return KVREADY_ERR_FAILED;
  entry *e = &b->store[b->stored++];
  memcpy(e->name, name, KVREADY_NAME_SIZE);
  memcpy(e->row, row, n);
  e->n = n;
  return KVREADY_OK;
}

static int cb_fetch(void *user, const uint8_t *ext, size_t ext_len, const kvready_unit *units, size_t n,
                    int32_t is_last, uint64_t *attempt, char *err, size_t err_cap) {
  (void)ext; (void)ext_len; (void)is_last;
  cbackend *b = user;
  if (n > 16) {
    snprintf(err, err_cap, "at most 16 units, got %zu", n);
    return KVREADY_ERR_REJECTED;
  }
  if (b->attempts == 64) return KVREADY_ERR_REJECTED;
  int k = b->attempts++;
  if (n > 0) b->last_local = units[n - 1].local;
  b->att[k].id = 1000 + (uint64_t)k;
  b->att[k].kind = KVREADY_DELIVERED;
  b->att[k].served = 0;
  for (size_t i = 0; i < n; i++)
    for (int s = 0; s < b->stored; s++)
      if (memcmp(b->store[s].name, units[i].name, KVREADY_NAME_SIZE) == 0) {
        kvready_memory_write(b->memory, units[i].group, units[i].local, 0, b->store[s].row, b->store[s].n);
        memcpy(b->att[k].names[b->att[k].served++], units[i].name, KVREADY_NAME_SIZE);
      }
  *attempt = b->att[k].id;
  /* Reported before the submission returned it: kvready keeps the answer. */
  kvready_attempt_done(b->self, b->att[k].id);
  return KVREADY_OK;
}

static int cb_poll(void *user, uint64_t attempt, kvready_answer *a, uint8_t *served, size_t cap) {
  cbackend *b = user;
  for (int k = 0; k < b->attempts; k++)
    if (b->att[k].id == attempt) {
      if (b->att[k].served > cap) return KVREADY_ERR_FAILED;
      a->kind = b->att[k].kind;
      a->served = b->att[k].served;
      memcpy(served, b->att[k].names, b->att[k].served * KVREADY_NAME_SIZE);
      return KVREADY_OK;
    }
  return KVREADY_ERR_FAILED;
}

static int cb_quiesce(void *user, const uint64_t *attempts, size_t n, int64_t timeout_ns, int32_t *proven,
                      char *err, size_t err_cap) {
  (void)attempts; (void)n; (void)timeout_ns; (void)err; (void)err_cap;
  cbackend *b = user;
  __atomic_add_fetch(&b->quiesce_calls, 1, __ATOMIC_SEQ_CST);
  /* every write happened inside fetch; a held backend cannot say so yet */
  *proven = __atomic_load_n(&b->hold, __ATOMIC_SEQ_CST) ? 0 : 1;
  return KVREADY_OK;
}

/* Every write happens inside fetch, so the store knows at once. */
static int cb_try_quiesce(void *user, const uint64_t *attempts, size_t n, int32_t *access, char *err, size_t err_cap) {
  (void)attempts; (void)n; (void)err; (void)err_cap;
  cbackend *b = user;
  __atomic_add_fetch(&b->try_calls, 1, __ATOMIC_SEQ_CST);
  *access = b->unknown ? KVREADY_ACCESS_UNKNOWN : KVREADY_ACCESS_ENDED;
  return KVREADY_OK;
}

static void cb_forget(void *user, uint64_t attempt) {
  (void)attempt;
  cbackend *b = user;
  __atomic_add_fetch(&b->forgotten, 1, __ATOMIC_SEQ_CST);
}

static void cb_close(void *user) { ((cbackend *)user)->closed = 1; }

/* ---- a device written in C: copies complete when the test says, in any order */

typedef struct {
  int to_device;
  uint64_t device;
  void *host;
  size_t n;
  int done;
} ccopy;

typedef struct {
  uint8_t mem[8192]; /* device memory: address 0x1000 + offset */
  ccopy copies[64];
  int ncopies;
  int marks[64]; /* event k covers copies [marks[k-1], marks[k]) (deliberately not all before it) */
  int nevents;
  int released;
  uint64_t waits[8]; /* the events wait was handed, and how many copies were queued then */
  int waited_at[8];
  int nwaits;
  int wait_fails; /* nonzero: wait answers it cannot wait for the event */
} cdevice;

static int cd_copy(void *user, int32_t to_device, uint64_t device, void *host, size_t n) {
  cdevice *d = user;
  if (device < 0x1000 || device + n > 0x1000 + sizeof d->mem) return KVREADY_ERR_REFUSED;
  if (d->ncopies == 64) return KVREADY_ERR_REFUSED;
  d->copies[d->ncopies++] = (ccopy){to_device, device, host, n, 0};
  return KVREADY_OK;
}

static int cd_record(void *user, uint64_t *event) {
  cdevice *d = user;
  if (d->nevents == 63) return KVREADY_ERR_FAILED;
  d->marks[++d->nevents] = d->ncopies;
  *event = (uint64_t)d->nevents;
  return KVREADY_OK;
}

static int cd_query(void *user, uint64_t event, int32_t *status) {
  cdevice *d = user;
  if (event == 0 || event > (uint64_t)d->nevents) return KVREADY_ERR_INVALID;
  *status = KVREADY_EVENT_COMPLETE;
  for (int i = d->marks[event - 1]; i < d->marks[event]; i++)
    if (!__atomic_load_n(&d->copies[i].done, __ATOMIC_SEQ_CST)) *status = KVREADY_EVENT_PENDING;
  return KVREADY_OK;
}

static void cd_release(void *user, uint64_t event) { (void)event; ((cdevice *)user)->released++; }

static int cd_wait(void *user, uint64_t event) {
  cdevice *d = user;
  if (d->nwaits == 8 || d->wait_fails) return KVREADY_ERR_FAILED;
  d->waited_at[d->nwaits] = d->ncopies;
  d->waits[d->nwaits++] = event;
  return KVREADY_OK;
}

/* complete performs copy i now. */
static void cd_complete(cdevice *d, int i) {
  ccopy *c = &d->copies[i];
  uint8_t *dev = d->mem + (c->device - 0x1000);
  if (c->to_device) memcpy(dev, c->host, c->n);
  else memcpy(c->host, dev, c->n);
  __atomic_store_n(&c->done, 1, __ATOMIC_SEQ_CST);
}

/* ---- the tests ------------------------------------------------------------ */

static void test_library(void) {
  CHECK(kvready_abi_version() == KVREADY_ABI_VERSION, 0);
  char v[256];
  size_t n = 0;
  CHECK(kvready_version(v, sizeof v, &n) == KVREADY_OK && strstr(v, "147ed68276e7fb89d5de60002d4e793a78707a8c") != NULL, 0);
  CHECK(kvready_version(v, 4, &n) == KVREADY_ERR_BUFFER && n > 4 && strlen(v) == 3, 0);
  /* A capacity of SIZE_MAX is a large buffer: kvready writes what it has
   * (and its NUL) and nothing past it. */
  memset(v, 'x', sizeof v);
  CHECK(kvready_version(v, SIZE_MAX, &n) == KVREADY_OK && strlen(v) == n && v[n + 1] == 'x', 0);
  CHECK(kvready_layout_id("{}", 2, (uint8_t[32]){0}, NULL) == KVREADY_ERR_INVALID, 0);
  char msg[4096];
  size_t len = 0;
  memset(msg, 'x', sizeof msg);
  CHECK(kvready_last_error(0, msg, SIZE_MAX, &len) == KVREADY_OK && len > 0 && strlen(msg) == len && msg[len + 1] == 'x', 0);
}

static void test_bad_handles(void) {
  kvready_round r;
  CHECK(kvready_progress(0, &r, NULL, NULL, 0) == KVREADY_ERR_BAD_HANDLE, 0);
  CHECK(last_error_contains(0, "handle 0"), 0);
  CHECK(kvready_progress(12345, &r, NULL, NULL, 0) == KVREADY_ERR_BAD_HANDLE, 0);
  CHECK(kvready_release(0xdeadbeefULL << 24, 7) == KVREADY_ERR_BAD_HANDLE, 0);
  CHECK(kvready_memory_close(0) == KVREADY_ERR_BAD_HANDLE, 0);
  CHECK(kvready_backend_close(99) == KVREADY_ERR_BAD_HANDLE, 0);
  CHECK(kvready_device_close(~0ULL) == KVREADY_ERR_BAD_HANDLE, 0);
  uint64_t dev = 0;
  CHECK(kvready_sim_device_new(1 << 16, 0, &dev) == KVREADY_OK, 0);
  /* A device handle where an engine is expected: refused by kind. */
  CHECK(kvready_progress(dev, &r, NULL, NULL, 0) == KVREADY_ERR_BAD_HANDLE, 0);
  /* The refusal is kept under the handle passed, not the thread's. */
  CHECK(last_error_contains(dev, "is a device handle; want an engine handle"), dev);
  CHECK(kvready_device_close(dev) == KVREADY_OK, 0);
  CHECK(kvready_device_close(dev) == KVREADY_ERR_BAD_HANDLE, 0);
}

static void test_profile_layout_names(void) {
  const char *ok = "{\"contract_revision\":\"147ed68276e7fb89d5de60002d4e793a78707a8c\",\"backend_revision\":\"c-1\","
                   "\"backend_kind\":\"native_nixl\",\"manager_kind\":\"KVCacheManagerV2\",\"cache_dtype\":\"bfloat16\","
                   "\"attention_backend\":\"TRTLLM\",\"attention_kind\":\"mha\",\"layout\":\"HND\","
                   "\"parallelism\":{\"tp\":1,\"dp\":1,\"pp\":1,\"cp\":1},\"staging\":\"manager_host\","
                   "\"committed_whole_blocks\":true,\"extra_features\":[]}";
  CHECK(kvready_profile_validate(ok, strlen(ok)) == KVREADY_OK, 0);
  const char *bad = "{\"contract_revision\":\"147ed68276e7fb89d5de60002d4e793a78707a8c\",\"backend_revision\":\"c-1\","
                    "\"backend_kind\":\"native_nixl\",\"manager_kind\":\"KVCacheManagerV2\",\"cache_dtype\":\"float16\","
                    "\"attention_backend\":\"TRTLLM\",\"attention_kind\":\"mha\",\"layout\":\"HND\","
                    "\"parallelism\":{\"tp\":2,\"dp\":1,\"pp\":1,\"cp\":1},\"staging\":\"manager_host\","
                    "\"committed_whole_blocks\":true,\"extra_features\":[]}";
  CHECK(kvready_profile_validate(bad, strlen(bad)) == KVREADY_ERR_PROFILE, 0);
  CHECK(last_error_contains(0, "cache_dtype") && last_error_contains(0, "parallelism.tp"), 0);
  CHECK(kvready_profile_validate("not json", 8) == KVREADY_ERR_PROFILE, 0);

  const char *layout =
      "{\"tokens_per_block\":32,\"pool_groups\":{\"0\":[65536]},"
      "\"layer_groups\":[{\"kind\":\"attention\",\"window\":null,\"sink_blocks\":0,\"pool_group\":0,\"layers\":[0,1],\"shard\":{\"count\":1,\"index\":0}}],"
      "\"buffers\":[{\"layer\":0,\"role\":\"key\",\"pool\":[0,0],\"offset\":0,\"size\":16384},{\"layer\":0,\"role\":\"value\",\"pool\":[0,0],\"offset\":16384,\"size\":16384},"
      "{\"layer\":1,\"role\":\"key\",\"pool\":[0,0],\"offset\":32768,\"size\":16384},{\"layer\":1,\"role\":\"value\",\"pool\":[0,0],\"offset\":49152,\"size\":16384}]}";
  uint8_t id[32], want[32];
  int32_t tpb = 0;
  hex("cb34d92ec6d4961a36d053db281528986f5614c44e0cc7871dc06c0b897ffc9d", want, 32);
  CHECK(kvready_layout_id(layout, strlen(layout), id, &tpb) == KVREADY_OK && memcmp(id, want, 32) == 0 && tpb == 32, 0);
  CHECK(kvready_layout_id("{}", 2, id, &tpb) == KVREADY_ERR_INVALID, 0);
  /* A document's length past its bound (SIZE_MAX included) is refused naming
   * the bound: never KVREADY_ERR_INTERNAL, and no stack in the message. */
  CHECK(kvready_layout_id(layout, SIZE_MAX, id, &tpb) == KVREADY_ERR_INVALID &&
            last_error_contains(0, "want at most 16777216") && !last_error_contains(0, "goroutine"), 0);
  CHECK(kvready_layout_id(layout, (size_t)1 << 24 | 1, id, &tpb) == KVREADY_ERR_INVALID, 0);
  CHECK(kvready_profile_validate(ok, SIZE_MAX) == KVREADY_ERR_INVALID && last_error_contains(0, "want at most 16777216"), 0);
  CHECK(kvready_profile_validate(NULL, 5) == KVREADY_ERR_INVALID && last_error_contains(0, "NULL with length 5"), 0);

  /* The SPEC's golden name. */
  uint8_t scope[32], lid[32], key[32], name[54], golden[54];
  hex("1a3a86f2ce5c55b257fc3af4f8bc886f968394e3533e47644088aae9a75a0336", scope, 32);
  hex("94ede4f3bb6ba356921f266190dc66280f21fe93edaa7f7c717fddc9d815670d", lid, 32);
  for (int i = 0; i < 32; i++) key[i] = (uint8_t)i;
  hex("ac0cbcea5a240bde17f6bac29386876a000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f000100040003", golden, 54);
  int32_t layers[] = {4, 5, 0, 1, 2, 3}, offsets[] = {0, 2, 6}, counts[] = {4, 1}, indexes[] = {3, 0};
  CHECK(kvready_name(scope, 32, lid, 32, layers, offsets, 2, counts, indexes, 0, key, name) == KVREADY_OK && memcmp(name, golden, 54) == 0, 0);
  int32_t badidx[] = {4, 0}; /* index 4 of 4 shards */
  CHECK(kvready_name(scope, 32, lid, 32, layers, offsets, 2, counts, badidx, 0, key, name) == KVREADY_ERR_INVALID, 0);
  CHECK(kvready_name(scope, 32, lid, 0, layers, offsets, 2, counts, indexes, 0, key, name) == KVREADY_ERR_INVALID, 0);
  CHECK(kvready_name(scope, SIZE_MAX, lid, 32, layers, offsets, 2, counts, indexes, 0, key, name) == KVREADY_ERR_INVALID &&
            last_error_contains(0, "runs past the end of the address space"), 0);
  CHECK(kvready_name(scope, 32, lid, SIZE_MAX, layers, offsets, 2, counts, indexes, 0, key, name) == KVREADY_ERR_INVALID, 0);
  CHECK(kvready_names(scope, 32, lid, 32, layers, offsets, 2, counts, indexes, 0, key, SIZE_MAX, name) == KVREADY_ERR_INVALID &&
            last_error_contains(0, "want at most 16777216"), 0);
  CHECK(kvready_names(scope, 32, lid, 32, layers, offsets, 2, counts, indexes, 0, key, (size_t)1 << 60, name) == KVREADY_ERR_INVALID, 0);
}

/* A publish of two blocks and a fetch back, over backend/mem and the
 * simulated device, woken through the wake fd. */
static void test_go_backend(void) {
  enum { SLOT = 64, SLOTS = 8 };
  uint8_t *slab = calloc(SLOTS, SLOT);
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, dev = 0, eng = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);
  CHECK(kvready_backend_open("mem", mem, &be) == KVREADY_OK, 0);
  uint64_t other = 0;
  /* libkvready.so (what this program links) has no fault backends: they are
   * the test library's (libkvready_testkit.so), and asking names it. */
  CHECK(kvready_backend_open("mem:?mode=miss", mem, &other) == KVREADY_ERR_UNSUPPORTED && last_error_contains(0, "libkvready_testkit.so") && other == 0, 0);
  CHECK(kvready_backend_open("instant:", mem, &other) == KVREADY_ERR_UNSUPPORTED && last_error_contains(0, "libkvready_testkit.so") && other == 0, 0);
  CHECK(kvready_backend_open("mem:?capacity=4&mode=", mem, &other) == KVREADY_ERR_UNSUPPORTED && other == 0, 0);
  CHECK(kvready_backend_open("mem:?bogus=1", mem, &other) == KVREADY_ERR_INVALID && last_error_contains(0, "unknown parameter \"bogus\"; want capacity") && other == 0, 0);
  CHECK(kvready_backend_open("mem:?capacity=4", mem, &other) == KVREADY_OK && other != 0, 0);
  CHECK(kvready_backend_close(other) == KVREADY_OK, other);
  CHECK(kvready_backend_open("gopher://x", mem, &(uint64_t){0}) == KVREADY_ERR_INVALID && last_error_contains(0, "unknown backend"), 0);
  CHECK(kvready_sim_device_new(1 << 16, 10000, &dev) == KVREADY_OK, 0);
  /* The library's defaults (readiness.Defaults) fill the whole config: every
   * setting its default, no handle, no layout; an engine assembles from them. */
  kvready_engine_config cfg;
  memset(&cfg, 0xff, sizeof cfg);
  CHECK(kvready_engine_config_defaults(NULL) == KVREADY_ERR_INVALID, 0);
  CHECK(kvready_engine_config_defaults(&cfg) == KVREADY_OK && cfg.request_timeout_ns > 0 && cfg.drain_grace_ns > 0 &&
            cfg.keep_released > 0 && cfg.quiesce_workers > 0 && cfg.policy == KVREADY_POLICY_QUARANTINE &&
            cfg.memory == 0 && cfg.device == 0 && cfg.layout == NULL && cfg.layout_len == 0 && cfg._pad == 0, 0);
  cfg.memory = mem, cfg.fetcher = be, cfg.publisher = be, cfg.device = dev, cfg.tokens_per_block = 32;
  /* A duration the engine would add to its clock past int64 ns is refused
   * naming the bound (it made every lease time out at once). */
  cfg.request_timeout_ns = INT64_MAX;
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_ERR_INVALID && eng == 0 &&
            last_error_contains(0, "config.request_timeout_ns 9223372036854775807; want at most 2305843009213693952"), 0);
  cfg.request_timeout_ns = 0;
  cfg.drain_grace_ns = ((int64_t)1 << 61) + 1;
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_ERR_INVALID && eng == 0 && last_error_contains(0, "config.drain_grace_ns"), 0);
  cfg.drain_grace_ns = 0;
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0);
  CHECK(kvready_memory_close(mem) == KVREADY_ERR_BUSY, mem);

  kvready_row rows[2];
  memset(rows, 0, sizeof rows);
  for (int b = 0; b < 2; b++) {
    rows[b].name[0] = 0xAB;
    rows[b].name[1] = (uint8_t)b;
    rows[b].block = b;
    CHECK(kvready_sim_alloc(dev, SLOT, &rows[b].device) == KVREADY_OK, dev);
    uint8_t content[SLOT];
    memset(content, 'a' + b, SLOT);
    CHECK(kvready_sim_write(dev, rows[b].device, content, SLOT) == KVREADY_OK, dev);
  }
  kvready_request pub = {.kind = KVREADY_PUBLISH, .rows = rows, .n_rows = 2};
  uint64_t lease = 0;
  CHECK(kvready_lend(eng, &pub, &lease) == KVREADY_OK, eng);
  kvready_lease_info info;
  CHECK(kvready_wait(eng, lease, KVREADY_UNTIL_SETTLED, 10000000000LL, &info) == KVREADY_OK, eng);
  CHECK(info.state == KVREADY_LOGICALLY_COMPLETE && info.outcome == KVREADY_OUTCOME_SERVED, eng);
  CHECK(kvready_release(eng, lease) == KVREADY_OK, eng);
  CHECK(pump(eng, lease, KVREADY_RELEASED, 0), eng);
  /* A stale lease is refused, and changes nothing. */
  CHECK(kvready_release(eng, lease) == KVREADY_ERR_STALE_LEASE && last_error_contains(eng, "stale"), eng);
  CHECK(kvready_cancel(eng, lease ^ (1ULL << 40)) == KVREADY_ERR_STALE_LEASE, eng);

  /* Fetch them into fresh blocks, and one more that was never published. */
  kvready_row frows[3];
  memcpy(frows, rows, sizeof rows);
  frows[2] = rows[1];
  frows[2].name[1] = 9;
  frows[2].block = 2;
  for (int b = 0; b < 3; b++) CHECK(kvready_sim_alloc(dev, SLOT, &frows[b].device) == KVREADY_OK, dev);
  kvready_request fetch = {.kind = KVREADY_FETCH, .rows = frows, .n_rows = 3};
  CHECK(kvready_lend(eng, &fetch, &lease) == KVREADY_OK, eng);
  CHECK(pump(eng, lease, KVREADY_LOGICALLY_COMPLETE, 0), eng);
  CHECK(kvready_lease_infos(eng, &lease, 1, &info, NULL) == KVREADY_OK && info.outcome == KVREADY_OUTCOME_PARTIAL, eng);
  kvready_interval iv;
  CHECK(kvready_readiness(eng, lease, &iv) == KVREADY_OK && iv.restart_floor == 0 && iv.usable_until == 64, eng);
  int32_t gs[4], bs[4];
  size_t n = 0;
  CHECK(kvready_arrived(eng, lease, gs, bs, 4, &n) == KVREADY_OK && n == 2 && bs[0] == 0 && bs[1] == 1, eng);
  /* Capacities are compared unsigned: SIZE_MAX holds anything, and kvready
   * writes only what there is. */
  gs[2] = bs[2] = -7;
  CHECK(kvready_arrived(eng, lease, gs, bs, SIZE_MAX, &n) == KVREADY_OK && n == 2 && bs[1] == 1 && gs[2] == -7 && bs[2] == -7, eng);
  CHECK(kvready_arrived(eng, lease, gs, bs, 1, &n) == KVREADY_ERR_BUFFER && n == 2 && last_error_contains(eng, "the arrays hold 1"), eng);
  {
    kvready_containment cs[2];
    uint64_t rs[2], ls[2];
    int32_t ss[2];
    kvready_round round;
    CHECK(kvready_containments(eng, cs, SIZE_MAX, &n) == KVREADY_OK && n == 0, eng);
    CHECK(kvready_recoveries(eng, rs, SIZE_MAX, &n) == KVREADY_OK && n == 0, eng);
    CHECK(kvready_progress(eng, &round, ls, ss, SIZE_MAX) == KVREADY_OK, eng);
    CHECK(kvready_changes(eng, ls, ss, SIZE_MAX, &n) == KVREADY_OK, eng);
    kvready_group gr[2] = {{-1, -1}, {-1, -1}};
    CHECK(kvready_memory_groups(mem, gr, SIZE_MAX, &n) == KVREADY_OK && n == 1 && gr[0].slots == SLOTS && gr[1].slots == -1, mem);
    uint8_t row[SLOT + 1];
    int32_t found = 0;
    memset(row, 'r', SLOT);
    CHECK(kvready_backend_put(be, (const uint8_t *)"e", 1, frows[0].name, row, SLOT) == KVREADY_OK, be);
    memset(row, 0, SLOT);
    row[SLOT] = 'z';
    CHECK(kvready_backend_get(be, (const uint8_t *)"e", 1, frows[0].name, row, SIZE_MAX, &n, &found) == KVREADY_OK &&
              found && n == SLOT && row[0] == 'r' && row[SLOT - 1] == 'r' && row[SLOT] == 'z', be);
    CHECK(kvready_backend_get(be, (const uint8_t *)"e", SIZE_MAX, frows[0].name, row, SLOT, &n, &found) == KVREADY_ERR_INVALID &&
              last_error_contains(be, "extent_name: length"), be);
    CHECK(kvready_backend_put(be, (const uint8_t *)"e", SIZE_MAX, frows[0].name, row, SLOT) == KVREADY_ERR_INVALID, be);
    CHECK(kvready_backend_put(be, (const uint8_t *)"e", 1, frows[0].name, row, SIZE_MAX) == KVREADY_ERR_INVALID &&
              last_error_contains(be, "row: length"), be);
  }
  uint8_t got[SLOT];
  CHECK(kvready_sim_read(dev, frows[1].device, got, SLOT) == KVREADY_OK && got[0] == 'b' && got[SLOT - 1] == 'b', dev);

  /* Lengths past the memory (SIZE_MAX too) are refused naming the bound,
   * never a recovered panic. */
  CHECK(kvready_memory_read(mem, 0, 0, 0, got, SIZE_MAX) == KVREADY_ERR_INVALID &&
            last_error_contains(mem, "want offset + n <= 64") && !last_error_contains(mem, "internal"), mem);
  CHECK(kvready_memory_write(mem, 0, 0, 8, got, SIZE_MAX) == KVREADY_ERR_INVALID &&
            last_error_contains(mem, "want offset + n <= 64"), mem);
  CHECK(kvready_memory_write(mem, 0, 0, 8, got, SLOT - 7) == KVREADY_ERR_INVALID, mem);
  CHECK(kvready_memory_write(mem, 0, 0, 8, got, SLOT - 8) == KVREADY_OK, mem);
  CHECK(kvready_sim_read(dev, frows[1].device, got, SIZE_MAX) == KVREADY_ERR_INVALID &&
            last_error_contains(dev, "want n <= 65536") && !last_error_contains(dev, "internal"), dev);
  CHECK(kvready_sim_write(dev, frows[1].device, got, SIZE_MAX) == KVREADY_ERR_INVALID &&
            last_error_contains(dev, "want n <= 65536"), dev);
  CHECK(kvready_sim_write(dev, frows[1].device, got, (size_t)1 << 63) == KVREADY_ERR_INVALID, dev);

  /* Refusals at the door name what was wrong and change nothing. */
  kvready_stats before, after;
  kvready_engine_stats(eng, &before);
  kvready_row bad = frows[0];
  bad.group = 5;
  kvready_request badreq = {.kind = KVREADY_FETCH, .rows = &bad, .n_rows = 1};
  uint64_t none = 0;
  CHECK(kvready_lend(eng, &badreq, &none) == KVREADY_ERR_INVALID && last_error_contains(eng, "group"), eng);
  badreq.kind = 7;
  CHECK(kvready_lend(eng, &badreq, &none) == KVREADY_ERR_INVALID && last_error_contains(eng, "kind 7"), eng);
  kvready_request late = {.kind = KVREADY_FETCH, .rows = frows, .n_rows = 1, .deadline_unix_ns = INT64_MAX};
  CHECK(kvready_lend(eng, &late, &none) == KVREADY_ERR_INVALID && last_error_contains(eng, "up to 4611686018427387904"), eng);
  late.deadline_unix_ns = -1;
  CHECK(kvready_lend(eng, &late, &none) == KVREADY_ERR_INVALID && last_error_contains(eng, "deadline_unix_ns -1"), eng);
  kvready_engine_stats(eng, &after);
  CHECK(before.lent == after.lent && none == 0, eng);
  CHECK(kvready_readiness(eng, 0, &iv) == KVREADY_ERR_STALE_LEASE, eng);

  CHECK(kvready_release(eng, lease) == KVREADY_OK, eng);
  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 0 &&
            rep.in_doubt == 0 && rep.physical == KVREADY_QUIESCED_SUCCESS && rep.safe_to_release, eng);
  CHECK(kvready_lend(eng, &fetch, &none) == KVREADY_ERR_CLOSED, eng);
  CHECK(kvready_engine_stats(eng, &after) == KVREADY_OK && after.outcomes[KVREADY_OUTCOME_FAILED] == 0 && after.slots_free == SLOTS, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_ERR_BAD_HANDLE, eng);
  CHECK(kvready_backend_close(be) == KVREADY_OK, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
  free(slab);
}

/* A backend and a device written in C; the device's events complete out of
 * order, and a lease is complete only once its copies and every earlier
 * event's have landed. */
static void test_c_backend_and_device(void) {
  enum { SLOT = 32, SLOTS = 4 };
  static uint8_t slab[SLOTS * SLOT];
  static cbackend cb;
  static cdevice cd;
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, dev = 0, eng = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);
  kvready_backend_callbacks bcb = {.user = &cb, .fetch = cb_fetch, .poll = cb_poll, .quiesce = cb_quiesce,
                                   .forget = cb_forget, .put = cb_put, .close = cb_close, .notifies = 1};
  kvready_backend_callbacks nopoll = bcb;
  nopoll.poll = NULL;
  CHECK(kvready_backend_new(&nopoll, mem, &be) == KVREADY_ERR_INVALID && last_error_contains(0, "poll"), 0);
  CHECK(kvready_backend_new(&bcb, mem, &be) == KVREADY_OK, 0);
  cb.self = be;
  cb.memory = mem;
  kvready_device_callbacks dcb = {.user = &cd, .copy = cd_copy, .record = cd_record, .query = cd_query, .release_event = cd_release};
  CHECK(kvready_device_new(&dcb, &dev) == KVREADY_OK, 0);
  kvready_engine_config cfg = {.memory = mem, .fetcher = be, .device = dev, .tokens_per_block = 16};
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0);
  kvready_request pub = {.kind = KVREADY_PUBLISH, .n_rows = 0};
  uint64_t none = 0;
  CHECK(kvready_lend(eng, &pub, &none) == KVREADY_ERR_INVALID && last_error_contains(eng, "no Publisher"), eng);

  kvready_row rows[2];
  memset(rows, 0, sizeof rows);
  for (int k = 0; k < 2; k++) {
    rows[k].name[0] = 0xCD;
    rows[k].name[1] = (uint8_t)k;
    rows[k].block = 0;
    rows[k].device = 0x1000 + (uint64_t)k * SLOT;
    uint8_t content[SLOT];
    memset(content, 'x' + k, SLOT);
    CHECK(kvready_backend_put(be, (const uint8_t *)"e", 1, rows[k].name, content, SLOT) == KVREADY_OK, be);
  }
  kvready_row outside = rows[0];
  outside.device = 0x9000000;
  kvready_request a = {.kind = KVREADY_FETCH, .rows = &rows[0], .n_rows = 1};
  kvready_request b = {.kind = KVREADY_FETCH, .rows = &rows[1], .n_rows = 1};
  uint64_t la = 0, lb = 0;
  CHECK(kvready_lend(eng, &a, &la) == KVREADY_OK, eng);
  CHECK(pump(eng, la, KVREADY_ACCESS_FENCED, 0), eng); /* A's copy queued, event 1 */
  CHECK(kvready_lend(eng, &b, &lb) == KVREADY_OK, eng);
  CHECK(pump(eng, lb, KVREADY_ACCESS_FENCED, 0), eng); /* B's copy queued, event 2 */
  CHECK(cd.ncopies == 2 && cd.nevents == 2, 0);
  cd_complete(&cd, 1); /* B's copy lands first */
  for (int i = 0; i < 5; i++) kvready_progress(eng, NULL, NULL, NULL, 0);
  kvready_lease_info info[2];
  uint64_t both[2] = {la, lb};
  CHECK(kvready_lease_infos(eng, both, 2, info, NULL) == KVREADY_OK, eng);
  CHECK(info[0].state == KVREADY_ACCESS_FENCED && info[1].state == KVREADY_ACCESS_FENCED, eng);
  kvready_interval iv;
  CHECK(kvready_readiness(eng, lb, &iv) == KVREADY_ERR_NOT_READY, eng);
  cd_complete(&cd, 0);
  CHECK(pump(eng, la, KVREADY_LOGICALLY_COMPLETE, 0) && pump(eng, lb, KVREADY_LOGICALLY_COMPLETE, 0), eng);
  CHECK(cd.mem[0] == 'x' && cd.mem[SLOT] == 'y', 0);
  CHECK(kvready_readiness(eng, lb, &iv) == KVREADY_OK && iv.usable_until == 16, eng);
  kvready_request c = {.kind = KVREADY_FETCH, .rows = &outside, .n_rows = 1};
  CHECK(kvready_lend(eng, &c, &none) == KVREADY_OK, eng); /* no addressable callback: taken, then refused by copy */
  CHECK(pump(eng, none, KVREADY_LOGICALLY_COMPLETE, 0), eng);
  CHECK(kvready_readiness(eng, none, &iv) == KVREADY_OK && iv.usable_until == 0, eng);
  int32_t statuses[3];
  uint64_t all[3] = {la, lb, none};
  CHECK(kvready_release_many(eng, all, 3, statuses) == KVREADY_OK, eng);
  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 0, eng);
  CHECK(__atomic_load_n(&cb.quiesce_calls, __ATOMIC_SEQ_CST) >= 1, 0);
  CHECK(kvready_backend_close(be) == KVREADY_ERR_BUSY, be);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(be) == KVREADY_OK && cb.closed, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK && cd.released == 3, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
}

/* A backend that answers its proof at once (try_quiesce) is never asked the
 * blocking quiesce: the proof stays on the owner thread. One that cannot tell
 * hands it to quiesce on a worker. */
static void test_try_quiesce(void) {
  enum { SLOT = 32, SLOTS = 4 };
  static uint8_t slab[SLOTS * SLOT];
  static cbackend cb;
  static cdevice cd;
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, dev = 0, eng = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);
  kvready_backend_callbacks bcb = {.user = &cb, .fetch = cb_fetch, .poll = cb_poll, .quiesce = cb_quiesce,
                                   .put = cb_put, .close = cb_close, .notifies = 1, .try_quiesce = cb_try_quiesce};
  CHECK(kvready_backend_new(&bcb, mem, &be) == KVREADY_OK, 0);
  cb.self = be;
  cb.memory = mem;
  kvready_device_callbacks dcb = {.user = &cd, .copy = cd_copy, .record = cd_record, .query = cd_query, .release_event = cd_release};
  CHECK(kvready_device_new(&dcb, &dev) == KVREADY_OK, 0);
  kvready_engine_config cfg = {.memory = mem, .fetcher = be, .device = dev, .tokens_per_block = 16};
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0);
  for (int round = 0; round < 2; round++) {
    cb.unknown = round;
    kvready_row row;
    memset(&row, 0, sizeof row);
    row.name[0] = 0xEE;
    row.name[1] = (uint8_t)round;
    row.device = 0x1000;
    uint8_t content[SLOT];
    memset(content, 'p' + round, SLOT);
    CHECK(kvready_backend_put(be, (const uint8_t *)"e", 1, row.name, content, SLOT) == KVREADY_OK, be);
    kvready_request r = {.kind = KVREADY_FETCH, .rows = &row, .n_rows = 1};
    uint64_t l = 0;
    CHECK(kvready_lend(eng, &r, &l) == KVREADY_OK, eng);
    CHECK(pump(eng, l, KVREADY_ACCESS_FENCED, 0), eng);
    cd_complete(&cd, cd.nevents - 1);
    CHECK(pump(eng, l, KVREADY_LOGICALLY_COMPLETE, 0), eng);
    CHECK(cd.mem[0] == 'p' + round, 0);
    CHECK(kvready_release(eng, l) == KVREADY_OK, eng);
    kvready_stats st;
    CHECK(kvready_engine_stats(eng, &st) == KVREADY_OK, eng);
    CHECK(st.quiesce_probes >= 1 && __atomic_load_n(&cb.try_calls, __ATOMIC_SEQ_CST) >= 1, eng);
    if (round == 0)
      CHECK(st.quiesce_calls == 0 && __atomic_load_n(&cb.quiesce_calls, __ATOMIC_SEQ_CST) == 0, eng);
    else
      CHECK(st.quiesce_calls >= 1 && __atomic_load_n(&cb.quiesce_calls, __ATOMIC_SEQ_CST) >= 1, eng);
    CHECK(st.fetcher_faults.panics == 0 && st.fetcher_faults.repeated_completions == 0, eng);
  }
  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(be) == KVREADY_OK, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
}

/* ---- rule 19: a cancel answers the logical and the physical result apart,
 * and a shutdown says how many leases it leaves in doubt ------------------- */

static void test_cancel_result_and_in_doubt(void) {
  enum { SLOT = 32, SLOTS = 4 };
  static uint8_t slab[SLOTS * SLOT];
  static cbackend cb;
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, dev = 0, eng = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);
  kvready_backend_callbacks bcb = {.user = &cb, .fetch = cb_fetch, .poll = cb_poll, .quiesce = cb_quiesce,
                                   .put = cb_put, .notifies = 1};
  CHECK(kvready_backend_new(&bcb, mem, &be) == KVREADY_OK, 0);
  cb.self = be;
  cb.memory = mem;
  cb.hold = 1; /* its quiesce proves nothing until the test lifts the hold */
  CHECK(kvready_sim_device_new(1 << 16, 10000, &dev) == KVREADY_OK, 0);
  kvready_engine_config cfg;
  CHECK(kvready_engine_config_defaults(&cfg) == KVREADY_OK, 0);
  cfg.memory = mem, cfg.fetcher = be, cfg.device = dev, cfg.tokens_per_block = 16;
  cfg.request_timeout_ns = cfg.drain_grace_ns = 60000000000LL; /* no containment within the test */
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0);

  kvready_row rows[SLOTS];
  memset(rows, 0, sizeof rows);
  for (int b = 0; b < SLOTS; b++) {
    rows[b].name[0] = 0xCE;
    rows[b].name[1] = (uint8_t)b;
    rows[b].block = b;
    CHECK(kvready_sim_alloc(dev, SLOT, &rows[b].device) == KVREADY_OK, dev);
  }
  uint8_t content[SLOT];
  memset(content, 'c', SLOT);
  CHECK(kvready_backend_put(be, (const uint8_t *)"e", 1, rows[0].name, content, SLOT) == KVREADY_OK, be);
  kvready_request one = {.kind = KVREADY_FETCH, .rows = rows, .n_rows = 1};
  kvready_request all = {.kind = KVREADY_FETCH, .rows = rows, .n_rows = SLOTS};
  uint64_t served = 0, waiting = 0;
  CHECK(kvready_lend(eng, &one, &served) == KVREADY_OK, eng);
  CHECK(pump(eng, served, KVREADY_SERVED, 0), eng); /* served at once; its access proof never comes */
  CHECK(kvready_lend(eng, &all, &waiting) == KVREADY_OK, eng); /* one slot short: it waits */

  kvready_cancel_result cr;
  CHECK(kvready_cancel_with_result(eng, waiting, NULL) == KVREADY_ERR_INVALID, eng);
  memset(&cr, 0xff, sizeof cr);
  CHECK(kvready_cancel_with_result(eng, waiting, &cr) == KVREADY_OK && cr.logical == KVREADY_LOGICAL_ACCEPTED &&
            cr.physical == KVREADY_NOT_EXPOSED && cr.safe_to_reuse == 1 && cr.retryable == 0 &&
            strstr(cr.reason, "withdrawn") != NULL, eng);
  memset(&cr, 0xff, sizeof cr);
  CHECK(kvready_cancel_with_result(eng, served, &cr) == KVREADY_ERR_FAILED && cr.logical == KVREADY_LOGICAL_ALREADY_TERMINAL &&
            cr.physical == KVREADY_QUIESCING && cr.safe_to_reuse == 0 && cr.retryable == 0 &&
            strstr(cr.reason, "outcome already latched") != NULL && last_error_contains(eng, "outcome already latched"), eng);
  kvready_lease_info info;
  CHECK(kvready_lease_infos(eng, &served, 1, &info, NULL) == KVREADY_OK && info.state == KVREADY_SERVED &&
            info.physical == KVREADY_QUIESCING, eng);
  memset(&cr, 0xff, sizeof cr);
  CHECK(kvready_cancel_with_result(eng, waiting, &cr) == KVREADY_ERR_STALE_LEASE && cr.logical == KVREADY_LOGICAL_ALREADY_TERMINAL &&
            cr.physical == KVREADY_NOT_EXPOSED && cr.safe_to_reuse == 1, eng);
  memset(&cr, 0xff, sizeof cr);
  CHECK(kvready_cancel_with_result(eng, waiting ^ (1ULL << 40), &cr) == KVREADY_ERR_STALE_LEASE &&
            cr.logical == KVREADY_LOGICAL_NOT_FOUND && cr.physical == KVREADY_IN_DOUBT && cr.safe_to_reuse == 0, eng);
  memset(&cr, 0x5a, sizeof cr);
  CHECK(kvready_cancel_with_result(eng + 1000, served, &cr) == KVREADY_ERR_BAD_HANDLE && cr.logical == 0x5a5a5a5a, 0);

  /* The shutdown gives up waiting for the proof: one lease left in doubt. */
  kvready_report rep;
  memset(&rep, 0xff, sizeof rep);
  CHECK(kvready_engine_shutdown(eng, 50000000LL, &rep) == KVREADY_ERR_TIMEOUT && !rep.drained && rep.in_doubt == 1 &&
            rep.physical == KVREADY_IN_DOUBT && rep.safe_to_release == 0 && last_error_contains(eng, "1 leases left in doubt"), eng);
  /* Proven at last: a clean drain leaves none, and the memory may go back. */
  __atomic_store_n(&cb.hold, 0, __ATOMIC_SEQ_CST);
  memset(&rep, 0xff, sizeof rep);
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.in_doubt == 0 &&
            rep.physical == KVREADY_QUIESCED_SUCCESS && rep.safe_to_release == 1, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(be) == KVREADY_OK, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
}

/* ---- the containment policies ------------------------------------------- */

/* policy_rig is an engine under policy over a C backend whose quiesce answers
 * nothing until its hold is lifted, with short deadlines, and one stored row
 * leased: the lease is contained some 40 ms after its submission. */
typedef struct {
  uint8_t slab[4 * 32];
  cbackend cb;
  uint64_t mem, be, dev, eng, lease;
  kvready_row row;
} policy_rig;

static void policy_rig_start(policy_rig *r, int32_t policy) {
  kvready_group g = {4, 32};
  void *slabs[] = {r->slab};
  CHECK(kvready_memory_over(&g, 1, slabs, &r->mem) == KVREADY_OK, 0);
  kvready_backend_callbacks bcb = {.user = &r->cb, .fetch = cb_fetch, .poll = cb_poll, .quiesce = cb_quiesce,
                                   .put = cb_put, .notifies = 1};
  CHECK(kvready_backend_new(&bcb, r->mem, &r->be) == KVREADY_OK, 0);
  r->cb.self = r->be;
  r->cb.memory = r->mem;
  r->cb.hold = 1;
  CHECK(kvready_sim_device_new(1 << 16, 10000, &r->dev) == KVREADY_OK, 0);
  kvready_engine_config cfg = {.memory = r->mem, .fetcher = r->be, .device = r->dev, .tokens_per_block = 16,
                               .request_timeout_ns = 20000000, .drain_grace_ns = 20000000,
                               .quiesce_timeout_ns = 5000000, .retry_backoff_ns = 1000000,
                               .max_retry_backoff_ns = 2000000, .recover_every_ns = 2000000, .policy = policy};
  kvready_engine_config bad = cfg;
  bad.policy = 3;
  uint64_t none = 0;
  bad.request_timeout_ns = -1;
  CHECK(kvready_engine_new(&bad, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "policy(3)") &&
            last_error_contains(0, "RequestTimeout") && none == 0, 0);
  bad = cfg;
  bad.max_outstanding = -1;
  CHECK(kvready_engine_new(&bad, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "MaxOutstanding") && none == 0, 0);
  CHECK(kvready_engine_new(&cfg, &r->eng) == KVREADY_OK, 0);
  memset(&r->row, 0, sizeof r->row);
  r->row.name[0] = 0xFA;
  r->row.name[1] = (uint8_t)policy;
  CHECK(kvready_sim_alloc(r->dev, 32, &r->row.device) == KVREADY_OK, r->dev);
  uint8_t content[32];
  memset(content, 'p', sizeof content);
  CHECK(kvready_backend_put(r->be, (const uint8_t *)"e", 1, r->row.name, content, sizeof content) == KVREADY_OK, r->be);
  kvready_request req = {.kind = KVREADY_FETCH, .rows = &r->row, .n_rows = 1};
  CHECK(kvready_lend(r->eng, &req, &r->lease) == KVREADY_OK, r->eng);
}

/* until_round runs rounds, woken by the wake fd, until the round says what
 * want asks (halted, or containments or recoveries queued), for at most 1000
 * waits of 10 ms. */
enum { WANT_HALTED, WANT_CONTAINMENT, WANT_RECOVERY };
static int until_round(uint64_t eng, int want) {
  int32_t fd = -1;
  if (kvready_engine_wake_fd(eng, &fd) != KVREADY_OK) return 0;
  for (int i = 0; i < 1000; i++) {
    kvready_round r;
    if (kvready_progress(eng, &r, NULL, NULL, 0) != KVREADY_OK) return 0;
    if ((want == WANT_HALTED && r.halted) || (want == WANT_CONTAINMENT && r.containments > 0) ||
        (want == WANT_RECOVERY && r.recoveries > 0))
      return 1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, 10);
  }
  return 0;
}

/* Under the fatal policy a containment halts the engine: it releases nothing
 * any more, even once the backend could prove access over, and every call
 * that would change anything returns KVREADY_ERR_HALTED. */
static void test_fatal_policy_halts(void) {
  static policy_rig r; /* static: the abandoned engine keeps its backend */
  policy_rig_start(&r, KVREADY_POLICY_FATAL);
  uint64_t eng = r.eng;
  CHECK(until_round(eng, WANT_HALTED), eng);
  kvready_containment ct;
  size_t n = 0;
  CHECK(kvready_containments(eng, &ct, 1, &n) == KVREADY_OK && n == 1 && ct.lease == r.lease && ct.slots == 1, eng);
  kvready_lease_info info;
  CHECK(kvready_lease_infos(eng, &r.lease, 1, &info, NULL) == KVREADY_OK && info.contained &&
            info.state == KVREADY_QUARANTINED, eng);

  kvready_request req = {.kind = KVREADY_FETCH, .rows = &r.row, .n_rows = 1};
  uint64_t none = 0;
  CHECK(kvready_lend(eng, &req, &none) == KVREADY_ERR_HALTED && last_error_contains(eng, "fatal policy") && none == 0, eng);
  CHECK(kvready_release(eng, r.lease) == KVREADY_ERR_HALTED, eng);
  CHECK(kvready_cancel(eng, r.lease) == KVREADY_ERR_HALTED, eng);
  kvready_cancel_result cr;
  CHECK(kvready_cancel_with_result(eng, r.lease, &cr) == KVREADY_ERR_HALTED && cr.logical == KVREADY_LOGICAL_REJECTED &&
            cr.physical == KVREADY_IN_DOUBT && !cr.safe_to_reuse && !cr.retryable, eng);
  CHECK(kvready_retry(eng, r.lease) == KVREADY_ERR_HALTED, eng);

  /* Late evidence changes nothing: the slot stays out. */
  __atomic_store_n(&r.cb.hold, 0, __ATOMIC_SEQ_CST);
  for (int i = 0; i < 5; i++) CHECK(kvready_progress(eng, NULL, NULL, NULL, 0) == KVREADY_OK, eng);
  kvready_stats st;
  CHECK(kvready_engine_stats(eng, &st) == KVREADY_OK && st.halted && st.containments == 1 && st.recovered == 0 &&
            st.slots_free == 3, eng);
  kvready_report rep;
  CHECK(kvready_engine_report(eng, &rep) == KVREADY_OK && rep.halted && !rep.drained &&
            strstr(rep.halt_reason, "fatal policy") != NULL && rep.in_doubt == 1 && rep.physical == KVREADY_IN_DOUBT &&
            !rep.safe_to_release, eng);
  CHECK(kvready_engine_shutdown(eng, 1000000000LL, &rep) == KVREADY_ERR_HALTED && rep.halted && !rep.drained, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_ERR_BUSY, eng);
  CHECK(kvready_engine_free(eng, 1) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(r.be) == KVREADY_ERR_BUSY, r.be); /* abandoned with what it used */
}

/* kvready_set_log: the library's log lines reach the embedder's callback,
 * with their level, instead of stderr — here the fatal policy's halt, logged
 * at ERROR; NULL gives them back to stderr. */
static struct {
  pthread_mutex_t mu;
  int lines, halted_at_error;
} logged = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void log_line(void *user, int32_t level, const char *msg, size_t len) {
  pthread_mutex_lock(&logged.mu);
  logged.lines++;
  if (user == &logged && level >= KVREADY_LOG_ERROR && strlen(msg) == len && strstr(msg, "engine halted") != NULL)
    logged.halted_at_error++;
  pthread_mutex_unlock(&logged.mu);
}

static void test_log_callback(void) {
  CHECK(kvready_set_log(log_line, &logged) == KVREADY_OK, 0);
  test_fatal_policy_halts();
  CHECK(kvready_set_log(NULL, NULL) == KVREADY_OK, 0);
  pthread_mutex_lock(&logged.mu);
  CHECK(logged.lines > 0 && logged.halted_at_error == 1, 0);
  pthread_mutex_unlock(&logged.mu);
}

/* A thread in kvready_wait on an engine another thread frees returns
 * KVREADY_ERR_CLOSED at once rather than waiting out its timeout (600 s
 * here; the join is bounded well below it). */
typedef struct {
  uint64_t eng, lease;
  int status, named;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  kvready_lease_info info;
  w->status = kvready_wait(w->eng, w->lease, KVREADY_UNTIL_RELEASED, 600000000000LL, &info);
  w->named = last_error_contains(0, "was freed (kvready_engine_free) while this thread waited");
  return NULL;
}

static void test_free_while_waiting(void) {
  static policy_rig r; /* static: the abandoned engine keeps its backend */
  policy_rig_start(&r, KVREADY_POLICY_RECOVER); /* contained, and never proven: the wait cannot end by itself */
  waiter w = {.eng = r.eng, .lease = r.lease, .status = -1};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_thread, &w) == 0, 0);
  /* Without force the free refuses while the waiter is inside; that message
   * says the waiter is in kvready_wait. */
  int inside = 0;
  for (int i = 0; i < 2000 && !inside; i++) {
    CHECK(kvready_engine_free(r.eng, 0) == KVREADY_ERR_BUSY, r.eng);
    inside = last_error_contains(r.eng, "another thread is waiting on this engine");
    if (!inside) nanosleep(&(struct timespec){0, 5000000}, NULL);
  }
  CHECK(inside, r.eng);
  CHECK(kvready_engine_free(r.eng, 1) == KVREADY_OK, r.eng);
  struct timespec bound;
  clock_gettime(CLOCK_REALTIME, &bound);
  bound.tv_sec += 60;
  int joined = pthread_timedjoin_np(t, NULL, &bound) == 0;
  CHECK(joined, 0);
  if (!joined) {
    fprintf(stderr, "FAIL: the waiter is still in kvready_wait after the free\n");
    exit(1);
  }
  CHECK(w.status == KVREADY_ERR_CLOSED && w.named, 0);
  kvready_lease_info info;
  CHECK(kvready_wait(r.eng, r.lease, KVREADY_UNTIL_RELEASED, 1000000LL, &info) == KVREADY_ERR_BAD_HANDLE, 0);
}

/* Under the recover policy a contained lease is asked again; once its
 * backend proves access over it goes on through the fence — a recovery event
 * — and its slot comes back. */
static void test_recover_policy(void) {
  static policy_rig r;
  policy_rig_start(&r, KVREADY_POLICY_RECOVER);
  uint64_t eng = r.eng;
  CHECK(until_round(eng, WANT_CONTAINMENT), eng);
  kvready_containment ct;
  size_t n = 0;
  CHECK(kvready_containments(eng, &ct, 1, &n) == KVREADY_OK && n == 1 && ct.lease == r.lease, eng);
  kvready_lease_info info;
  CHECK(kvready_lease_infos(eng, &r.lease, 1, &info, NULL) == KVREADY_OK && info.state == KVREADY_CONTAINED && info.contained, eng);
  uint64_t ids[4];
  CHECK(kvready_recoveries(eng, ids, 4, &n) == KVREADY_OK && n == 0, eng);

  /* The backend can tell now: its quiesce answers true the next time it is
   * asked, after the containment deadline. */
  __atomic_store_n(&r.cb.hold, 0, __ATOMIC_SEQ_CST);
  CHECK(until_round(eng, WANT_RECOVERY), eng);
  CHECK(kvready_recoveries(eng, ids, 4, &n) == KVREADY_OK && n == 1 && ids[0] == r.lease, eng);
  CHECK(kvready_recoveries(eng, ids, 4, &n) == KVREADY_OK && n == 0, eng);
  CHECK(kvready_wait(eng, r.lease, KVREADY_UNTIL_SETTLED, 10000000000LL, &info) == KVREADY_OK, eng);
  CHECK(info.state == KVREADY_LOGICALLY_COMPLETE && info.outcome == KVREADY_OUTCOME_SERVED && info.contained, eng);
  uint8_t got[32];
  CHECK(kvready_sim_read(r.dev, r.row.device, got, sizeof got) == KVREADY_OK && got[0] == 'p' && got[31] == 'p', r.dev);
  CHECK(kvready_release(eng, r.lease) == KVREADY_OK, eng);
  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && !rep.halted &&
            rep.slots_quarantined == 0 && rep.halt_reason[0] == 0, eng);
  kvready_stats st;
  CHECK(kvready_engine_stats(eng, &st) == KVREADY_OK && st.containments == 1 && st.recovered == 1 &&
            st.slots_free == 4 && !st.halted, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(r.be) == KVREADY_OK, r.be);
  CHECK(kvready_device_close(r.dev) == KVREADY_OK, r.dev);
  CHECK(kvready_memory_close(r.mem) == KVREADY_OK, r.mem);
}

/* Every call that runs rounds raises the events, not only kvready_progress:
 * the containment a kvready_wait ran into is queued, the wake fd is readable
 * after it, and the next round counts it. */
static void test_wait_queues_containment(void) {
  static policy_rig r;
  policy_rig_start(&r, KVREADY_POLICY_QUARANTINE);
  uint64_t eng = r.eng;
  kvready_lease_info info;
  CHECK(kvready_wait(eng, r.lease, KVREADY_UNTIL_SETTLED, 10000000000LL, &info) == KVREADY_OK &&
            info.state == KVREADY_QUARANTINED && info.contained, eng);
  int32_t fd = -1;
  CHECK(kvready_engine_wake_fd(eng, &fd) == KVREADY_OK, eng);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  CHECK(poll(&p, 1, 0) == 1 && (p.revents & POLLIN), eng);
  kvready_round round;
  CHECK(kvready_progress(eng, &round, NULL, NULL, 0) == KVREADY_OK && round.containments == 1, eng);
  kvready_containment ct;
  size_t n = 0;
  CHECK(kvready_containments(eng, &ct, 1, &n) == KVREADY_OK && n == 1 && ct.lease == r.lease && ct.slots == 1 &&
            strstr(ct.reason, "containment deadline") != NULL, eng);
  /* Releasing the quarantined lease gives up the claim; waiting for its
   * release returns it. */
  CHECK(kvready_release(eng, r.lease) == KVREADY_OK, eng);
  CHECK(kvready_wait(eng, r.lease, KVREADY_UNTIL_RELEASED, 10000000000LL, &info) == KVREADY_OK &&
            info.state == KVREADY_QUARANTINED && info.release_requested, eng);
  __atomic_store_n(&r.cb.hold, 0, __ATOMIC_SEQ_CST);
  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 1, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(r.be) == KVREADY_OK, r.be);
  CHECK(kvready_device_close(r.dev) == KVREADY_OK, r.dev);
  CHECK(kvready_memory_close(r.mem) == KVREADY_OK, r.mem);
}

/* One live engine per staging memory (SPEC §4 rule 17): a second engine over
 * memory a live one holds is refused (BUSY, naming the holder) and changes
 * nothing; after a quarantine and a shutdown, a new engine over the same
 * memory inherits the quarantined slot, never lends it, and a late writer
 * that kept the slot it was handed never reaches a new lease's bytes. */
static void test_one_engine_per_memory(void) {
  static policy_rig r;
  policy_rig_start(&r, KVREADY_POLICY_QUARANTINE);
  kvready_engine_config cfg = {.memory = r.mem, .fetcher = r.be, .device = r.dev, .tokens_per_block = 16,
                               .request_timeout_ns = 20000000, .drain_grace_ns = 20000000,
                               .quiesce_timeout_ns = 5000000, .retry_backoff_ns = 1000000,
                               .max_retry_backoff_ns = 2000000};
  uint64_t next = 0;
  CHECK(kvready_engine_new(&cfg, &next) == KVREADY_ERR_BUSY && last_error_contains(0, "engine#") &&
            last_error_contains(0, "holds it") && next == 0, 0);
  kvready_lease_info info;
  CHECK(kvready_wait(r.eng, r.lease, KVREADY_UNTIL_SETTLED, 10000000000LL, &info) == KVREADY_OK &&
            info.state == KVREADY_QUARANTINED, r.eng);
  int64_t kept = r.cb.last_local; /* the late writer keeps the slot it was handed */
  CHECK(kept >= 0 && kept < 4, 0);
  CHECK(kvready_release(r.eng, r.lease) == KVREADY_OK, r.eng);
  __atomic_store_n(&r.cb.hold, 0, __ATOMIC_SEQ_CST);
  kvready_report rep;
  CHECK(kvready_engine_shutdown(r.eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 1, r.eng);
  CHECK(kvready_engine_free(r.eng, 0) == KVREADY_OK, r.eng);

  CHECK(kvready_engine_new(&cfg, &next) == KVREADY_OK, 0);
  kvready_stats st;
  CHECK(kvready_engine_stats(next, &st) == KVREADY_OK && st.slots_inherited == 1 && st.slots_quarantined == 1 &&
            st.slots_free == 3, next);
  kvready_row rows[4];
  memset(rows, 0, sizeof rows);
  for (int i = 0; i < 4; i++) {
    rows[i].name[0] = 0xFB;
    rows[i].name[1] = (uint8_t)i;
    rows[i].block = i;
    CHECK(kvready_sim_alloc(r.dev, 32, &rows[i].device) == KVREADY_OK, r.dev);
    uint8_t content[32];
    memset(content, 'A' + i, sizeof content);
    CHECK(kvready_backend_put(r.be, (const uint8_t *)"e", 1, rows[i].name, content, sizeof content) == KVREADY_OK, r.be);
  }
  kvready_request all = {.kind = KVREADY_FETCH, .rows = rows, .n_rows = 4};
  uint64_t none = 0;
  CHECK(kvready_lend(next, &all, &none) == KVREADY_ERR_UNGRANTABLE && none == 0, next);
  uint64_t leases[3];
  for (int i = 0; i < 3; i++) {
    kvready_row one = rows[i];
    one.block = 0;
    kvready_request req = {.kind = KVREADY_FETCH, .rows = &one, .n_rows = 1};
    CHECK(kvready_lend(next, &req, &leases[i]) == KVREADY_OK, next);
    memset(r.slab + kept * 32, 'L', 32); /* the late writer */
    CHECK(kvready_wait(next, leases[i], KVREADY_UNTIL_SETTLED, 10000000000LL, &info) == KVREADY_OK &&
              info.state == KVREADY_LOGICALLY_COMPLETE && info.outcome == KVREADY_OUTCOME_SERVED, next);
    CHECK(r.cb.last_local != kept, 0);
    memset(r.slab + kept * 32, 'L', 32);
  }
  for (int i = 0; i < 3; i++) {
    uint8_t got[32];
    CHECK(kvready_sim_read(r.dev, rows[i].device, got, sizeof got) == KVREADY_OK && got[0] == 'A' + i &&
              got[31] == 'A' + i, r.dev);
    CHECK(kvready_release(next, leases[i]) == KVREADY_OK, next);
  }
  CHECK(kvready_engine_shutdown(next, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 1, next);
  CHECK(kvready_engine_free(next, 0) == KVREADY_OK, next);
  CHECK(kvready_backend_close(r.be) == KVREADY_OK, r.be);
  CHECK(kvready_device_close(r.dev) == KVREADY_OK, r.dev);
  CHECK(kvready_memory_close(r.mem) == KVREADY_OK, r.mem);
}

/* Layer by layer (SPEC §4 rule 16): an engine given the layout copies a
 * fetch's rows one layer at a time, each layer ending in its own event; the
 * test steps the copy stream one event at a time. Layer 0 is ready (and its
 * bytes are on the device) while layer 1 is still pending; a layer landing
 * makes the wake fd readable; kvready_wait_layer is bounded; a failed layer
 * ends its wait at once with KVREADY_ERR_LAYER_FAILED while the layer before
 * it stays ready. A compute stream runs "compute layer l" behind the wait. */
#define LAYOUT_2L                                                                                                      \
  "{\"tokens_per_block\":32,\"pool_groups\":{\"0\":[64]},"                                                            \
  "\"layer_groups\":[{\"kind\":\"attention\",\"pool_group\":0,\"layers\":[0,1]}],"                                     \
  "\"buffers\":[{\"layer\":0,\"role\":\"key\",\"pool\":[0,0],\"offset\":0,\"size\":16},"                              \
  "{\"layer\":0,\"role\":\"value\",\"pool\":[0,0],\"offset\":16,\"size\":16},"                                        \
  "{\"layer\":1,\"role\":\"key\",\"pool\":[0,0],\"offset\":32,\"size\":16},"                                          \
  "{\"layer\":1,\"role\":\"value\",\"pool\":[0,0],\"offset\":48,\"size\":16}]}"

/* fenced_fetch lends a fetch of row and runs rounds until its copies are
 * queued (access_fenced): nothing of them has landed on the stepped device. */
static uint64_t fenced_fetch(uint64_t eng, kvready_row *row) {
  kvready_request req = {.kind = KVREADY_FETCH, .rows = row, .n_rows = 1};
  uint64_t lease = 0;
  CHECK(kvready_lend(eng, &req, &lease) == KVREADY_OK, eng);
  CHECK(pump(eng, lease, KVREADY_ACCESS_FENCED, 0), eng);
  return lease;
}

/* woken_ready waits (10 s at most) for the wake fd, then runs a round, until
 * layer reads want; it reports whether the fd was ever readable. */
static int woken_ready(uint64_t eng, uint64_t lease, int32_t layer, int32_t want, int *woken) {
  int32_t fd = -1, st = -1;
  if (kvready_engine_wake_fd(eng, &fd) != KVREADY_OK) return 0;
  for (int i = 0; i < 100; i++) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) == 1) *woken = 1;
    kvready_progress(eng, NULL, NULL, NULL, 0);
    if (kvready_layer_ready(eng, lease, layer, &st, NULL) != KVREADY_OK) return 0;
    if (st == want) return 1;
  }
  return 0;
}

static void test_layer_by_layer(void) {
  enum { SLOT = 64, SLOTS = 4 };
  static uint8_t slab[SLOTS * SLOT];
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, dev = 0, eng = 0, none = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);
  CHECK(kvready_backend_open("mem", mem, &be) == KVREADY_OK, 0);
  CHECK(kvready_sim_device_new(1 << 16, 0, &dev) == KVREADY_OK, 0); /* stepped: only the test completes events */
  const char *layout = LAYOUT_2L;
  kvready_engine_config cfg = {.memory = mem, .fetcher = be, .publisher = be, .device = dev,
                               .layout = layout, .layout_len = strlen(layout),
                               .request_timeout_ns = 200000000, .drain_grace_ns = 100000000};
  /* A layout that disagrees with the config, or with the memory, is refused
   * naming what; nothing is created. */
  kvready_engine_config bad = cfg;
  bad.tokens_per_block = 16;
  CHECK(kvready_engine_new(&bad, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "tokens_per_block 16, but config.layout has 32") && none == 0, 0);
  bad = cfg;
  bad.layout_len = 5;
  CHECK(kvready_engine_new(&bad, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "config.layout") && none == 0, 0);
  bad = cfg;
  bad.layout = NULL;
  CHECK(kvready_engine_new(&bad, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "layout NULL") && none == 0, 0);
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0); /* tokens_per_block 0: the layout's */
  int32_t layers = 0;
  CHECK(kvready_layers(eng, &layers) == KVREADY_OK && layers == 2, eng);
  CHECK(kvready_layers(eng, NULL) == KVREADY_ERR_INVALID, eng);

  kvready_row row;
  memset(&row, 0, sizeof row);
  row.name[0] = 0x1A;
  uint8_t content[SLOT];
  for (int i = 0; i < SLOT; i++) content[i] = (uint8_t)(i < 32 ? 'A' : 'B'); /* layer 0 'A', layer 1 'B' */
  CHECK(kvready_backend_put(be, (const uint8_t *)"trtllm:shared-kv:staging:1", 26, row.name, content, SLOT) == KVREADY_OK, be);
  CHECK(kvready_sim_alloc(dev, SLOT, &row.device) == KVREADY_OK, dev);

  uint64_t lease = fenced_fetch(eng, &row);
  int32_t st = -1;
  kvready_interval iv = {-1, -1};
  CHECK(kvready_layer_ready(eng, lease, 0, &st, &iv) == KVREADY_OK && st == KVREADY_LAYER_PENDING, eng);
  CHECK(kvready_layer_ready(eng, lease, 2, &st, &iv) == KVREADY_ERR_INVALID && last_error_contains(eng, "layer 2"), eng);
  CHECK(kvready_layer_ready(eng, lease, -1, &st, &iv) == KVREADY_ERR_INVALID, eng);
  CHECK(kvready_layer_ready(eng, lease, 0, NULL, &iv) == KVREADY_ERR_INVALID, eng);
  CHECK(kvready_wait_layer(eng, lease, 0, 0, &iv) == KVREADY_ERR_INVALID && last_error_contains(eng, "bounded"), eng);
  CHECK(kvready_wait_layer(eng, lease, 0, 20000000, &iv) == KVREADY_ERR_TIMEOUT, eng); /* nothing landed */

  /* Layer 0's event completes: its bytes are on the device, layer 1's not. */
  int64_t done = 0;
  kvready_progress(eng, NULL, NULL, NULL, 0); /* drain the fd */
  CHECK(kvready_sim_complete_next(dev, 0, 1, &done) == KVREADY_OK && done == 1, dev);
  int woken = 0;
  CHECK(woken_ready(eng, lease, 0, KVREADY_LAYER_READY, &woken) && woken, eng);
  CHECK(kvready_layer_ready(eng, lease, 0, &st, &iv) == KVREADY_OK && st == KVREADY_LAYER_READY &&
            iv.restart_floor == 0 && iv.usable_until == 32, eng);
  CHECK(kvready_layer_ready(eng, lease, 1, &st, NULL) == KVREADY_OK && st == KVREADY_LAYER_PENDING, eng);
  CHECK(kvready_readiness(eng, lease, &iv) == KVREADY_ERR_NOT_READY, eng);
  uint8_t got[SLOT];
  CHECK(kvready_sim_read(dev, row.device, got, SLOT) == KVREADY_OK && memcmp(got, content, 32) == 0 && got[32] == 0 && got[63] == 0, dev);

  /* Compute layer 0 on a stream of its own, then wait for layer 1. */
  uint32_t compute = 0;
  uint64_t ev = 0;
  CHECK(kvready_sim_stream_new(dev, &compute) == KVREADY_OK && compute == 1, dev);
  CHECK(kvready_sim_compute(dev, compute, 1000) == KVREADY_OK, dev);
  CHECK(kvready_sim_record(dev, compute, &ev) == KVREADY_OK && ev != 0, dev);
  CHECK(kvready_sim_query(dev, ev, &st) == KVREADY_OK && st == KVREADY_EVENT_PENDING, dev);
  CHECK(kvready_sim_complete_next(dev, compute, 1, &done) == KVREADY_OK && done == 1, dev);
  CHECK(kvready_sim_query(dev, ev, &st) == KVREADY_OK && st == KVREADY_EVENT_COMPLETE, dev);
  CHECK(kvready_sim_compute(dev, 0, 1000) == KVREADY_ERR_INVALID && last_error_contains(dev, "copy stream"), dev);
  CHECK(kvready_sim_compute(dev, 7, 1000) == KVREADY_ERR_INVALID, dev);
  CHECK(kvready_sim_compute(dev, compute, -1) == KVREADY_ERR_INVALID, dev);
  CHECK(kvready_sim_query(dev, ev + 5, &st) == KVREADY_ERR_INVALID, dev);
  CHECK(kvready_sim_query(dev, 0, &st) == KVREADY_ERR_INVALID, dev);
  CHECK(kvready_sim_wait(dev, compute, ev) == KVREADY_ERR_INVALID && last_error_contains(dev, "another stream"), dev);
  CHECK(kvready_sim_complete_next(dev, 0, 1, &done) == KVREADY_OK && done == 1, dev);
  CHECK(kvready_wait_layer(eng, lease, 1, 10000000000LL, &iv) == KVREADY_OK && iv.usable_until == 32, eng);
  CHECK(kvready_sim_read(dev, row.device, got, SLOT) == KVREADY_OK && memcmp(got, content, SLOT) == 0, dev);
  CHECK(pump(eng, lease, KVREADY_LOGICALLY_COMPLETE, 0), eng);
  CHECK(kvready_readiness(eng, lease, &iv) == KVREADY_OK && iv.usable_until == 32, eng);
  CHECK(kvready_release(eng, lease) == KVREADY_OK, eng);

  /* Layer 1's copy fails: its wait ends at once, layer 0 stays ready. */
  kvready_row again = row;
  CHECK(kvready_sim_alloc(dev, SLOT, &again.device) == KVREADY_OK, dev);
  lease = fenced_fetch(eng, &again);
  CHECK(kvready_sim_complete_next(dev, 0, 1, &done) == KVREADY_OK && done == 1, dev);
  CHECK(kvready_sim_fail_next(dev, 0, 1, &done) == KVREADY_OK && done == 1, dev);
  CHECK(kvready_wait_layer(eng, lease, 1, 10000000000LL, &iv) == KVREADY_ERR_LAYER_FAILED && last_error_contains(eng, "layer 1"), eng);
  CHECK(kvready_layer_ready(eng, lease, 1, &st, NULL) == KVREADY_OK && st == KVREADY_LAYER_FAILED, eng);
  CHECK(kvready_layer_ready(eng, lease, 0, &st, NULL) == KVREADY_OK && st == KVREADY_LAYER_READY, eng);
  CHECK(kvready_wait_layer(eng, lease, 0, 10000000000LL, &iv) == KVREADY_OK, eng);
  CHECK(kvready_readiness(eng, lease, &iv) == KVREADY_ERR_NOT_READY, eng);
  CHECK(kvready_release(eng, lease) == KVREADY_OK, eng);

  /* A publish has no layers to wait for (readiness is a fetch's answer). */
  kvready_request pub = {.kind = KVREADY_PUBLISH, .rows = &row, .n_rows = 1};
  uint64_t pl = 0;
  CHECK(kvready_lend(eng, &pub, &pl) == KVREADY_OK, eng);
  CHECK(kvready_layer_ready(eng, pl, 0, &st, NULL) == KVREADY_ERR_NOT_READY && last_error_contains(eng, "publish"), eng);
  CHECK(kvready_cancel(eng, pl) == KVREADY_OK || kvready_release(eng, pl) == KVREADY_OK, eng);
  kvready_sim_complete_all(dev, NULL);

  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_layers(eng, &layers) == KVREADY_ERR_BAD_HANDLE, eng);
  CHECK(kvready_backend_close(be) == KVREADY_OK, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
}

/* pump_sim runs rounds, completing everything queued on the stepped device
 * between them, until lease reaches state (1000 rounds at most). */
static int pump_sim(uint64_t eng, uint64_t dev, uint64_t lease, int state) {
  for (int i = 0; i < 1000; i++) {
    kvready_sim_complete_all(dev, NULL);
    kvready_progress(eng, NULL, NULL, NULL, 0);
    kvready_lease_info info;
    if (kvready_lease_infos(eng, &lease, 1, &info, NULL) != KVREADY_OK) return 0;
    if (info.state == state) return 1;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return 0;
}

/* A layerwise publish (SPEC §4 rule 16): each layer's device->staging copies
 * follow its report, behind an event of the compute stream; the publish is
 * submitted only once every layer landed, and a fetch reads back what each
 * layer's compute wrote. Refusals change nothing; releasing before the last
 * layer withdraws it: nothing reaches the store. */
static void test_layerwise_publish(void) {
  enum { SLOT = 64, SLOTS = 4 };
  static uint8_t slab[SLOTS * SLOT];
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, dev = 0, eng = 0, none = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);
  CHECK(kvready_backend_open("mem", mem, &be) == KVREADY_OK, 0);
  CHECK(kvready_sim_device_new(1 << 16, 0, &dev) == KVREADY_OK, 0);
  const char *layout = LAYOUT_2L;
  kvready_engine_config cfg = {.memory = mem, .fetcher = be, .publisher = be, .device = dev,
                               .layout = layout, .layout_len = strlen(layout)};
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0);
  uint32_t compute = 0;
  CHECK(kvready_sim_stream_new(dev, &compute) == KVREADY_OK, dev);

  kvready_row row;
  memset(&row, 0, sizeof row);
  row.name[0] = 0x2B;
  CHECK(kvready_sim_alloc(dev, SLOT, &row.device) == KVREADY_OK, dev);
  kvready_request pub = {.kind = KVREADY_PUBLISH, .rows = &row, .n_rows = 1, .layerwise = 2};
  uint64_t pl = 0;
  CHECK(kvready_lend(eng, &pub, &pl) == KVREADY_ERR_INVALID && last_error_contains(eng, "layerwise 2") && pl == 0, eng);
  pub.layerwise = 1;
  CHECK(kvready_lend(eng, &pub, &pl) == KVREADY_OK, eng);
  kvready_lease_info info;
  /* Before the grant (grants are taken in rounds): a misuse, INVALID, and
   * nothing changes. */
  CHECK(kvready_layer_computed(eng, pl, 0, 0) == KVREADY_ERR_INVALID && last_error_contains(eng, "granted"), eng);
  CHECK(kvready_lease_infos(eng, &pl, 1, &info, NULL) == KVREADY_OK && info.state == KVREADY_WAITING, eng);
  CHECK(kvready_wait(eng, pl, 4, 10000000000LL, &info) == KVREADY_ERR_INVALID && last_error_contains(eng, "KVREADY_UNTIL_GRANTED (3)"), eng);
  CHECK(kvready_wait(eng, pl, KVREADY_UNTIL_GRANTED, 10000000000LL, &info) == KVREADY_OK && info.state == KVREADY_GRANTED, eng);
  CHECK(kvready_layer_computed(eng, pl, 1, 0) == KVREADY_ERR_INVALID && last_error_contains(eng, "next layer is 0"), eng);
  CHECK(kvready_layer_computed(eng, pl, 2, 0) == KVREADY_ERR_INVALID, eng);
  CHECK(kvready_layer_computed(eng, pl, 0, 12345) == KVREADY_ERR_INVALID && last_error_contains(eng, "no token"), eng);

  /* Layer 0: its kernel writes the block's first half, on the compute stream. */
  uint8_t content[SLOT];
  for (int i = 0; i < SLOT; i++) content[i] = (uint8_t)(i < 32 ? 'P' : 'Q');
  CHECK(kvready_sim_write(dev, row.device, content, 32) == KVREADY_OK, dev);
  CHECK(kvready_sim_compute(dev, compute, 1000) == KVREADY_OK, dev);
  uint64_t ev = 0;
  CHECK(kvready_sim_record(dev, compute, &ev) == KVREADY_OK, dev);
  CHECK(kvready_layer_computed(eng, pl, 0, ev) == KVREADY_OK, eng);
  CHECK(kvready_layer_computed(eng, pl, 0, 0) == KVREADY_ERR_INVALID && last_error_contains(eng, "already reported"), eng);
  for (int i = 0; i < 5; i++) kvready_progress(eng, NULL, NULL, NULL, 0);
  int64_t done = -1;
  /* The copy stream waits behind the compute event: nothing of it resolves first. */
  CHECK(kvready_sim_complete_next(dev, 0, 1, &done) == KVREADY_OK && done == 0, dev);
  CHECK(kvready_sim_complete_next(dev, compute, 1, &done) == KVREADY_OK && done == 1, dev);
  CHECK(kvready_sim_complete_next(dev, 0, 1, &done) == KVREADY_OK && done == 1, dev);
  CHECK(kvready_lease_infos(eng, &pl, 1, &info, NULL) == KVREADY_OK && info.state == KVREADY_GRANTED, eng); /* not submitted */
  /* Layer 1, computed and synchronised already: event 0. */
  CHECK(kvready_sim_write(dev, row.device + 32, content + 32, 32) == KVREADY_OK, dev);
  CHECK(kvready_layer_computed(eng, pl, 1, 0) == KVREADY_OK, eng);
  CHECK(pump_sim(eng, dev, pl, KVREADY_LOGICALLY_COMPLETE), eng);
  CHECK(kvready_lease_infos(eng, &pl, 1, &info, NULL) == KVREADY_OK && info.outcome == KVREADY_OUTCOME_SERVED, eng);
  CHECK(kvready_release(eng, pl) == KVREADY_OK, eng);
  uint8_t got[SLOT];
  size_t n = 0;
  int32_t found = 0;
  CHECK(kvready_backend_get(be, (const uint8_t *)"trtllm:shared-kv:staging:1", 26, row.name, got, SLOT, &n, &found) == KVREADY_OK &&
            found && n == SLOT && memcmp(got, content, SLOT) == 0, be);

  /* Reporting layers of a fetch, or of a whole publish, is refused. */
  kvready_request whole = {.kind = KVREADY_PUBLISH, .rows = &row, .n_rows = 1};
  CHECK(kvready_lend(eng, &whole, &pl) == KVREADY_OK, eng);
  CHECK(kvready_layer_computed(eng, pl, 0, 0) == KVREADY_ERR_INVALID && last_error_contains(eng, "not a layerwise publish"), eng);
  CHECK(pump_sim(eng, dev, pl, KVREADY_LOGICALLY_COMPLETE) && kvready_release(eng, pl) == KVREADY_OK, eng);

  /* Released after layer 0: withdrawn, nothing reaches the store. */
  kvready_row gone = row;
  gone.name[1] = 1;
  pub.rows = &gone;
  CHECK(kvready_lend(eng, &pub, &pl) == KVREADY_OK && pump_sim(eng, dev, pl, KVREADY_GRANTED), eng);
  CHECK(kvready_layer_computed(eng, pl, 0, 0) == KVREADY_OK, eng);
  CHECK(kvready_release(eng, pl) == KVREADY_OK, eng);
  CHECK(kvready_layer_computed(eng, pl, 1, 0) == KVREADY_ERR_INVALID && last_error_contains(eng, "withdrawn"), eng);
  CHECK(pump_sim(eng, dev, pl, KVREADY_RELEASED), eng);
  CHECK(kvready_backend_get(be, (const uint8_t *)"trtllm:shared-kv:staging:1", 26, gone.name, got, SLOT, &n, &found) == KVREADY_OK && !found, be);
  (void)none;

  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 0, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(be) == KVREADY_OK, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
}

/* A device of callbacks puts its queue behind the embedder's own event (its
 * wait callback, handed the token kvready_layer_computed got, before that
 * layer's copies); without a wait callback only event 0 is taken. */
static void test_layerwise_publish_c_device(void) {
  enum { SLOT = 64, SLOTS = 4 };
  static uint8_t slab[SLOTS * SLOT];
  static cdevice cd, nowait;
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, dev = 0, dev2 = 0, eng = 0, eng2 = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);
  CHECK(kvready_backend_open("mem", mem, &be) == KVREADY_OK, 0);
  kvready_device_callbacks dcb = {.user = &cd, .copy = cd_copy, .record = cd_record, .query = cd_query, .wait = cd_wait};
  CHECK(kvready_device_new(&dcb, &dev) == KVREADY_OK, 0);
  const char *layout = LAYOUT_2L;
  kvready_engine_config cfg = {.memory = mem, .publisher = be, .device = dev, .layout = layout, .layout_len = strlen(layout)};
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0);
  kvready_row row;
  memset(&row, 0, sizeof row);
  row.name[0] = 0x3C;
  row.device = 0x1000;
  memset(cd.mem, 'w', SLOT);
  kvready_request pub = {.kind = KVREADY_PUBLISH, .rows = &row, .n_rows = 1, .layerwise = 1};
  uint64_t pl = 0;
  kvready_lease_info info;
  CHECK(kvready_lend(eng, &pub, &pl) == KVREADY_OK && kvready_wait(eng, pl, KVREADY_UNTIL_GRANTED, 10000000000LL, &info) == KVREADY_OK, eng);
  CHECK(kvready_layer_computed(eng, pl, 0, 0xE7) == KVREADY_OK, eng);
  CHECK(pump(eng, pl, KVREADY_GRANTED, 0) && cd.ncopies > 0, eng);
  CHECK(cd.nwaits == 1 && cd.waits[0] == 0xE7 && cd.waited_at[0] == 0, eng); /* the wait came before layer 0's copies */
  CHECK(kvready_layer_computed(eng, pl, 1, 0) == KVREADY_OK, eng);
  for (int i = 0; i < 1000 && cd.ncopies < 2; i++) {
    kvready_progress(eng, NULL, NULL, NULL, 0);
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  CHECK(cd.ncopies == 2 && cd.nwaits == 1, eng); /* event 0: no wait */
  for (int i = 0; i < cd.ncopies; i++) cd_complete(&cd, i);
  CHECK(pump(eng, pl, KVREADY_LOGICALLY_COMPLETE, 0), eng);
  CHECK(kvready_lease_infos(eng, &pl, 1, &info, NULL) == KVREADY_OK && info.outcome == KVREADY_OUTCOME_SERVED, eng);
  CHECK(kvready_release(eng, pl) == KVREADY_OK, eng);

  /* A wait the device cannot make refuses that layer's copies: the publish
   * fails, never submitted with a layer missing, and nothing is stored. */
  cd.wait_fails = 1;
  row.name[1] = 1;
  int before = cd.ncopies;
  CHECK(kvready_lend(eng, &pub, &pl) == KVREADY_OK && kvready_wait(eng, pl, KVREADY_UNTIL_GRANTED, 10000000000LL, &info) == KVREADY_OK, eng);
  CHECK(kvready_layer_computed(eng, pl, 0, 0xE8) == KVREADY_OK && kvready_layer_computed(eng, pl, 1, 0) == KVREADY_OK, eng);
  for (int i = 0; i < 1000; i++) {
    kvready_progress(eng, NULL, NULL, NULL, 0);
    for (int k = before; k < cd.ncopies; k++) cd_complete(&cd, k);
    if (kvready_lease_infos(eng, &pl, 1, &info, NULL) != KVREADY_OK || info.state == KVREADY_LOGICALLY_COMPLETE) break;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  CHECK(info.state == KVREADY_LOGICALLY_COMPLETE && info.outcome == KVREADY_OUTCOME_FAILED && !info.exposed &&
            strstr(info.reason, "refused") != NULL, eng);
  uint8_t got[SLOT];
  size_t n = 0;
  int32_t found = 1;
  CHECK(kvready_backend_get(be, (const uint8_t *)"trtllm:shared-kv:staging:1", 26, row.name, got, SLOT, &n, &found) == KVREADY_OK && !found, be);
  CHECK(kvready_release(eng, pl) == KVREADY_OK, eng);
  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 0, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);

  dcb.user = &nowait;
  dcb.wait = NULL;
  CHECK(kvready_device_new(&dcb, &dev2) == KVREADY_OK, 0);
  cfg.device = dev2;
  CHECK(kvready_engine_new(&cfg, &eng2) == KVREADY_OK, 0);
  CHECK(kvready_lend(eng2, &pub, &pl) == KVREADY_OK && pump(eng2, pl, KVREADY_GRANTED, 0), eng2);
  CHECK(kvready_layer_computed(eng2, pl, 0, 0xE7) == KVREADY_ERR_INVALID && last_error_contains(eng2, "no wait"), eng2);
  CHECK(kvready_cancel(eng2, pl) == KVREADY_OK, eng2);
  CHECK(kvready_engine_shutdown(eng2, 10000000000LL, &rep) == KVREADY_OK && rep.drained, eng2);
  CHECK(kvready_engine_free(eng2, 0) == KVREADY_OK, eng2);
  CHECK(kvready_backend_close(be) == KVREADY_OK, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK && kvready_device_close(dev2) == KVREADY_OK, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
}

/* A device with a bandwidth: its copies and a compute stream's work complete
 * by themselves, on the system clock; a stream waits behind another's event. */
static void test_sim_bandwidth(void) {
  uint64_t dev = 0;
  CHECK(kvready_sim_device_new_bandwidth(1 << 16, 0, &dev) == KVREADY_ERR_INVALID && last_error_contains(0, "positive"), 0);
  CHECK(kvready_sim_device_new_bandwidth(1 << 16, -INFINITY, &dev) == KVREADY_ERR_INVALID, 0);
  CHECK(kvready_sim_device_new_bandwidth(1 << 16, 1e9, &dev) == KVREADY_OK, 0);
  uint32_t a = 0, b = 0;
  uint64_t ea = 0, eb = 0;
  CHECK(kvready_sim_stream_new(dev, &a) == KVREADY_OK && kvready_sim_stream_new(dev, &b) == KVREADY_OK && a == 1 && b == 2, dev);
  CHECK(kvready_sim_compute(dev, a, 1000000) == KVREADY_OK && kvready_sim_record(dev, a, &ea) == KVREADY_OK, dev);
  CHECK(kvready_sim_wait(dev, b, ea) == KVREADY_OK && kvready_sim_record(dev, b, &eb) == KVREADY_OK, dev);
  int32_t st = KVREADY_EVENT_PENDING;
  for (int i = 0; i < 1000 && st == KVREADY_EVENT_PENDING; i++) {
    CHECK(kvready_sim_query(dev, eb, &st) == KVREADY_OK, dev);
    if (st == KVREADY_EVENT_PENDING) nanosleep(&(struct timespec){0, 10000000}, NULL);
  }
  CHECK(st == KVREADY_EVENT_COMPLETE, dev);
  CHECK(kvready_sim_query(dev, ea, &st) == KVREADY_OK && st == KVREADY_EVENT_COMPLETE, dev); /* b waited behind a */
  uint64_t other = 0, foreign = 0;
  uint32_t oa = 0;
  CHECK(kvready_sim_device_new_bandwidth(1 << 16, 1e9, &other) == KVREADY_OK && kvready_sim_stream_new(other, &oa) == KVREADY_OK, 0);
  CHECK(kvready_sim_record(other, oa, &foreign) == KVREADY_OK && foreign != ea && foreign != eb, other);
  CHECK(kvready_sim_query(dev, foreign, &st) == KVREADY_ERR_INVALID && last_error_contains(dev, "no token"), dev);
  CHECK(kvready_sim_wait(dev, a, foreign) == KVREADY_ERR_INVALID, dev);
  CHECK(kvready_device_close(other) == KVREADY_OK, other);
  CHECK(kvready_sim_lose(dev, "gone") == KVREADY_OK, dev);
  CHECK(kvready_sim_compute(dev, a, 1) == KVREADY_ERR_DEVICE_LOST, dev);
  CHECK(kvready_sim_record(dev, a, &ea) == KVREADY_ERR_DEVICE_LOST, dev);
  CHECK(kvready_device_close(dev) == KVREADY_OK, dev);
}

/* A backend of tiers from one call: a local tier bounded in bytes in front of
 * a second store. Refusals name the tier at fault and open nothing; a row the
 * local tier evicted is served by the next one, promoted back, and the next
 * fetch of it is a local hit; per-tier stats read from C. */
static int tier_stats_of(uint64_t be, kvready_tier_stats st[2]) {
  size_t n = 0;
  return kvready_backend_tier_stats(be, st, 2, &n) == KVREADY_OK && n == 2;
}

static void test_tiers(void) {
  enum { SLOT = 64, SLOTS = 8 };
  static uint8_t slab[SLOTS * SLOT];
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {slab};
  uint64_t mem = 0, be = 0, plain = 0, dev = 0, eng = 0, none = 0;
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);

  /* Refused, naming what and which tier; the out-parameter untouched. */
  const char *bad_n[17];
  for (int i = 0; i < 17; i++) bad_n[i] = "mem";
  CHECK(kvready_backend_open_tiers(NULL, 1, mem, &none) == KVREADY_ERR_INVALID && none == 0, 0);
  CHECK(kvready_backend_open_tiers(bad_n, 0, mem, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "want 1 to 16 tiers") && none == 0, 0);
  CHECK(kvready_backend_open_tiers(bad_n, 17, mem, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "n 17") && none == 0, 0);
  CHECK(kvready_backend_open_tiers(bad_n, SIZE_MAX, mem, &none) == KVREADY_ERR_INVALID && none == 0, 0);
  CHECK(kvready_backend_open_tiers(bad_n, 2, 0, &none) == KVREADY_ERR_BAD_HANDLE && none == 0, 0);
  const char *null_tier[] = {"mem", NULL};
  CHECK(kvready_backend_open_tiers(null_tier, 2, mem, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "tier 1: its URL is NULL") && none == 0, 0);
  const char *down[] = {"mem:?capacity_bytes=128", "redis://127.0.0.1:1/0"};
  CHECK(kvready_backend_open_tiers(down, 2, mem, &none) == KVREADY_ERR_UNAVAILABLE &&
            last_error_contains(0, "tier 1 (redis://127.0.0.1:1/0)") && last_error_contains(0, "nothing was opened") && none == 0, 0);
  const char *wrong[] = {"mem", "redis://127.0.0.1:1/0?breaker_failures=-1"};
  CHECK(kvready_backend_open_tiers(wrong, 2, mem, &none) == KVREADY_ERR_CONFIG && last_error_contains(0, "tier 1 (") && none == 0, 0);
  const char *unknown[] = {"gopher://x", "mem"};
  CHECK(kvready_backend_open_tiers(unknown, 2, mem, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "tier 0 (gopher://x)") && none == 0, 0);
  const char *badcap[] = {"mem:?capacity_bytes=lots", "mem"};
  CHECK(kvready_backend_open_tiers(badcap, 2, mem, &none) == KVREADY_ERR_INVALID && last_error_contains(0, "capacity_bytes \"lots\"") && none == 0, 0);
  /* Nothing a refusal opened holds the memory. */
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
  CHECK(kvready_memory_over(&g, 1, slabs, &mem) == KVREADY_OK, 0);

  /* The local tier holds two rows (128 bytes); the next holds every row. */
  const char *urls[] = {"mem:?capacity_bytes=128", "mem"};
  CHECK(kvready_backend_open_tiers(urls, 2, mem, &be) == KVREADY_OK && be != 0, 0);
  CHECK(kvready_backend_open("mem", mem, &plain) == KVREADY_OK, 0);
  kvready_tier_stats st[2];
  size_t n = 0;
  CHECK(kvready_backend_tier_stats(plain, st, 2, &n) == KVREADY_ERR_UNSUPPORTED && last_error_contains(plain, "no tiers"), plain);
  CHECK(kvready_backend_tier_stats(be, st, 1, &n) == KVREADY_ERR_BUFFER && n == 2 && last_error_contains(be, "2 tiers"), be);
  CHECK(kvready_backend_tier_stats(be, NULL, 0, &n) == KVREADY_ERR_BUFFER && n == 2, be);
  CHECK(tier_stats_of(be, st) && strcmp(st[0].name, "mem") == 0 && strcmp(st[1].name, "mem-1") == 0 && st[0].sized == 1 &&
            st[0].bytes == 0 && st[0].handed == 0, be);
  CHECK(kvready_backend_close(plain) == KVREADY_OK, plain);

  CHECK(kvready_sim_device_new(1 << 16, 10000, &dev) == KVREADY_OK, 0);
  kvready_engine_config cfg;
  CHECK(kvready_engine_config_defaults(&cfg) == KVREADY_OK, 0);
  cfg.memory = mem, cfg.fetcher = be, cfg.publisher = be, cfg.device = dev, cfg.tokens_per_block = 32;
  CHECK(kvready_engine_new(&cfg, &eng) == KVREADY_OK, 0);
  CHECK(kvready_backend_close(be) == KVREADY_ERR_BUSY, be);

  /* Publish three rows: written through, the local tier keeps the last two. */
  kvready_row rows[3];
  memset(rows, 0, sizeof rows);
  for (int b = 0; b < 3; b++) {
    rows[b].name[0] = 0x71;
    rows[b].name[1] = (uint8_t)b;
    rows[b].block = b;
    CHECK(kvready_sim_alloc(dev, SLOT, &rows[b].device) == KVREADY_OK, dev);
    uint8_t content[SLOT];
    memset(content, 'p' + b, SLOT);
    CHECK(kvready_sim_write(dev, rows[b].device, content, SLOT) == KVREADY_OK, dev);
  }
  kvready_request pub = {.kind = KVREADY_PUBLISH, .rows = rows, .n_rows = 3};
  uint64_t lease = 0;
  kvready_lease_info info;
  CHECK(kvready_lend(eng, &pub, &lease) == KVREADY_OK, eng);
  CHECK(kvready_wait(eng, lease, KVREADY_UNTIL_SETTLED, 10000000000LL, &info) == KVREADY_OK && info.outcome == KVREADY_OUTCOME_SERVED, eng);
  CHECK(kvready_release(eng, lease) == KVREADY_OK, eng);
  CHECK(kvready_wait(eng, lease, KVREADY_UNTIL_RELEASED, 10000000000LL, &info) == KVREADY_OK, eng);
  CHECK(tier_stats_of(be, st) && st[0].published == 3 && st[1].published == 3 && st[0].bytes == 2 * SLOT && st[0].evictions == 1 &&
            st[1].bytes == 3 * SLOT, be);

  /* Fetch row 0 twice into a fresh block: the first is served by the next
   * tier (the local one evicted it) and promoted; the second is a local hit. */
  for (int round = 0; round < 2; round++) {
    kvready_row f = rows[0];
    CHECK(kvready_sim_alloc(dev, SLOT, &f.device) == KVREADY_OK, dev);
    kvready_request fetch = {.kind = KVREADY_FETCH, .rows = &f, .n_rows = 1};
    CHECK(kvready_lend(eng, &fetch, &lease) == KVREADY_OK, eng);
    CHECK(kvready_wait(eng, lease, KVREADY_UNTIL_SETTLED, 10000000000LL, &info) == KVREADY_OK && info.outcome == KVREADY_OUTCOME_SERVED, eng);
    CHECK(kvready_release(eng, lease) == KVREADY_OK, eng);
    CHECK(kvready_wait(eng, lease, KVREADY_UNTIL_RELEASED, 10000000000LL, &info) == KVREADY_OK, eng);
    uint8_t got[SLOT];
    CHECK(kvready_sim_read(dev, f.device, got, SLOT) == KVREADY_OK && got[0] == 'p' && got[SLOT - 1] == 'p', dev);
  }
  CHECK(tier_stats_of(be, st), be);
  CHECK(st[0].handed == 2 && st[0].misses == 1 && st[0].hits == 1 && st[0].promoted == 1 && st[0].evictions == 2, be);
  CHECK(st[1].handed == 1 && st[1].hits == 1 && st[1].misses == 0 && st[1].failed == 0 && st[1].promoted == 0, be);

  /* A put goes into every tier; a get reads the first tier holding the row. */
  uint8_t row[SLOT], back[SLOT];
  memset(row, 'z', SLOT);
  CHECK(kvready_backend_put(be, (const uint8_t *)"t", 1, rows[2].name, row, SLOT) == KVREADY_OK, be);
  int32_t found = 0;
  CHECK(kvready_backend_get(be, (const uint8_t *)"t", 1, rows[2].name, back, SLOT, &n, &found) == KVREADY_OK && found && back[0] == 'z', be);

  kvready_report rep;
  CHECK(kvready_engine_shutdown(eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained && rep.slots_quarantined == 0, eng);
  CHECK(kvready_engine_free(eng, 0) == KVREADY_OK, eng);
  CHECK(kvready_backend_close(be) == KVREADY_OK, be);
  CHECK(kvready_backend_tier_stats(be, st, 2, &n) == KVREADY_ERR_BAD_HANDLE, be);
  CHECK(kvready_device_close(dev) == KVREADY_OK, dev);
  CHECK(kvready_memory_close(mem) == KVREADY_OK, mem);
}

/* ---- peer transfers over UCX: a prefill engine's publish lease puts its
 * pages straight into a decode engine's fetch lease, over two transports in
 * this process (UCX tcp): the decode pages hold the prefill's bytes once the
 * fence is passed, both leases settle, and every refusal changes nothing. */
typedef struct {
  uint64_t tr, mem, dev, be, eng;
  uint8_t *slab;
} peer_side;

static void peer_side_open(peer_side *s, const char *name, int receiver) {
  enum { SLOT = 256, SLOTS = 4 };
  memset(s, 0, sizeof *s);
  kvready_ucx_config uc = {.name = name, .incarnation = 1, .transports = "tcp"};
  CHECK(kvready_ucx_new(&uc, &s->tr) == KVREADY_OK, 0);
  s->slab = calloc(SLOTS, SLOT);
  kvready_group g = {SLOTS, SLOT};
  void *slabs[] = {s->slab};
  CHECK(kvready_memory_over(&g, 1, slabs, &s->mem) == KVREADY_OK, 0);
  kvready_peer_config pc;
  CHECK(kvready_peer_config_defaults(&pc) == KVREADY_OK && pc.leased == 1 && pc.poll_ns == 0 && pc.timeout_ns > 0, 0);
  pc.transport = s->tr;
  CHECK((receiver ? kvready_peer_receiver_new : kvready_peer_sender_new)(&pc, s->mem, &s->be) == KVREADY_OK, 0);
  CHECK(kvready_sim_device_new(1 << 16, 1000, &s->dev) == KVREADY_OK, 0);
  kvready_engine_config cfg;
  CHECK(kvready_engine_config_defaults(&cfg) == KVREADY_OK, 0);
  cfg.memory = s->mem, cfg.device = s->dev, cfg.tokens_per_block = 16;
  if (receiver) cfg.fetcher = s->be; else cfg.publisher = s->be;
  CHECK(kvready_engine_new(&cfg, &s->eng) == KVREADY_OK, 0);
}

static void peer_side_close(peer_side *s) {
  kvready_report rep;
  CHECK(kvready_engine_shutdown(s->eng, 10000000000LL, &rep) == KVREADY_OK && rep.drained, s->eng);
  CHECK(kvready_engine_free(s->eng, 0) == KVREADY_OK, s->eng);
  CHECK(kvready_ucx_close(s->tr) == KVREADY_ERR_BUSY && last_error_contains(s->tr, "kvready_backend_close"), s->tr);
  CHECK(kvready_backend_close(s->be) == KVREADY_OK, s->be);
  CHECK(kvready_ucx_close(s->tr) == KVREADY_OK, s->tr);
  CHECK(kvready_device_close(s->dev) == KVREADY_OK, s->dev);
  CHECK(kvready_memory_close(s->mem) == KVREADY_OK, s->mem);
  free(s->slab);
}

/* connect_sides hands each side the other's address and capabilities, as
 * two processes would over a pipe. */
static void connect_sides(peer_side *a, peer_side *b) {
  uint8_t addr[4096], caps[256];
  size_t n = 0, m = 0;
  char name[KVREADY_PEER_NAME_SIZE];
  uint64_t inc = 0;
  CHECK(kvready_ucx_address(a->tr, addr, 1, &n) == KVREADY_ERR_BUFFER && n > 1, a->tr);
  CHECK(kvready_ucx_address(a->tr, addr, sizeof addr, &n) == KVREADY_OK, a->tr);
  CHECK(kvready_peer_capabilities(a->be, caps, sizeof caps, &m) == KVREADY_OK && m > 0, a->be);
  CHECK(kvready_ucx_add_peer(b->tr, addr, n, name, sizeof name, &inc) == KVREADY_OK && inc == 1, b->tr);
  CHECK(kvready_peer_connect(b->be, caps, m) == KVREADY_OK, b->be);
  /* A second, different address for the same life is refused. */
  addr[n - 1] ^= 0xff;
  CHECK(kvready_ucx_add_peer(b->tr, addr, n, NULL, 0, NULL) == KVREADY_ERR_INVALID, b->tr);
}

static void test_peer_transfer(void) {
  peer_side dec, pre;
  peer_side_open(&dec, "decode", 1);
  peer_side_open(&pre, "prefill", 0);
  {
    /* Bad configurations are refused, naming what is wrong. */
    kvready_ucx_config bad = {.name = "", .incarnation = 0, .mode = 7};
    uint64_t t = 0;
    CHECK(kvready_ucx_new(&bad, &t) == KVREADY_ERR_INVALID && t == 0 && last_error_contains(0, "incarnation 0") &&
              last_error_contains(0, "mode 7"), 0);
    kvready_peer_config pc;
    kvready_peer_config_defaults(&pc);
    pc.transport = dec.tr;
    uint64_t b = 0;
    CHECK(kvready_peer_sender_new(&pc, dec.mem, &b) == KVREADY_ERR_BUSY && b == 0, 0); /* one backend per transport */
    pc.transport = dec.mem;
    CHECK(kvready_peer_sender_new(&pc, dec.mem, &b) == KVREADY_ERR_INVALID && last_error_contains(0, "transport"), 0);
    /* Every mistake is named at once, and nothing is made. */
    kvready_ucx_config uc = {.name = "spare", .incarnation = 1, .transports = "tcp"};
    uint64_t spare = 0;
    CHECK(kvready_ucx_new(&uc, &spare) == KVREADY_OK, 0);
    kvready_peer_config_defaults(&pc);
    pc.transport = spare, pc.timeout_ns = -1, pc.sessions = 1 << 21, pc.leased = 2, pc.poll_ns = -5;
    CHECK(kvready_peer_receiver_new(&pc, dec.mem, &b) == KVREADY_ERR_INVALID && b == 0 && last_error_contains(0, "timeout_ns -1") &&
              last_error_contains(0, "sessions 2097152") && last_error_contains(0, "leased 2") && last_error_contains(0, "poll_ns -5"), 0);
    kvready_peer_config_defaults(&pc);
    pc.transport = spare;
    CHECK(kvready_peer_receiver_new(&pc, dec.mem, &b) == KVREADY_OK && b != 0, 0); /* the refusals left the transport free */
    CHECK(kvready_backend_close(b) == KVREADY_OK && kvready_ucx_close(spare) == KVREADY_OK, 0);
  }
  connect_sides(&dec, &pre);
  connect_sides(&pre, &dec);

  int64_t ids[2] = {40, 41};
  kvready_chunk_group grp = {.kind = KVREADY_CACHE_PAGED, .ids = ids, .n_ids = 2};
  kvready_accessor kv = {.peer = "prefill", .rank = 0, .role = KVREADY_ROLE_KV};
  kvready_peer_plan rp = {.request = 7, .attempt = 1, .block_tokens = 16, .token_end = 32, .is_last = 1,
                          .groups = &grp, .n_groups = 1, .writers = &kv, .n_writers = 1};
  kvready_peer_plan sp = rp;
  sp.writers = NULL, sp.n_writers = 0, sp.to = "decode", sp.as = kv;
  kvready_peer_page pages[2];
  size_t n = 0;
  /* Refusals record nothing: the same attempt is expected afterwards. */
  kv.role = 9;
  CHECK(kvready_peer_expect(dec.be, &rp, pages, 2, &n) == KVREADY_ERR_INVALID && last_error_contains(dec.be, "writers[0].role 9"), dec.be);
  kv.role = KVREADY_ROLE_KV;
  CHECK(kvready_peer_expect(dec.be, &sp, pages, 2, &n) == KVREADY_ERR_INVALID && last_error_contains(dec.be, "a sender's"), dec.be);
  ids[1] = -3;
  CHECK(kvready_peer_expect(dec.be, &rp, pages, 2, &n) == KVREADY_ERR_INVALID && last_error_contains(dec.be, "id -3"), dec.be);
  ids[1] = 41;
  rp.block_tokens = 0, rp.attempt = 0;
  CHECK(kvready_peer_expect(dec.be, &rp, pages, 2, &n) == KVREADY_ERR_INVALID && last_error_contains(dec.be, "attempt") &&
            last_error_contains(dec.be, "block_tokens"), dec.be);
  rp.block_tokens = 16, rp.attempt = 1;
  CHECK(kvready_peer_expect(dec.be, &rp, pages, 1, &n) == KVREADY_ERR_BUFFER && n == 2, dec.be);
  CHECK(kvready_peer_expect(dec.be, &rp, pages, 2, &n) == KVREADY_OK && n == 2 && pages[1].id == 41 && pages[1].block == 1 &&
            pages[1].end == 32, dec.be);
  CHECK(kvready_peer_expect(dec.be, &rp, pages, 2, &n) == KVREADY_ERR_REJECTED && last_error_contains(dec.be, "already expected"), dec.be);
  kvready_row drows[2], prows[2];
  memset(drows, 0, sizeof drows);
  for (int i = 0; i < 2; i++) {
    memcpy(drows[i].name, pages[i].name, KVREADY_NAME_SIZE);
    drows[i].block = pages[i].block;
    CHECK(kvready_sim_alloc(dec.dev, 256, &drows[i].device) == KVREADY_OK, dec.dev);
  }
  CHECK(kvready_peer_expect(pre.be, &sp, pages, 2, &n) == KVREADY_OK && n == 2, pre.be);
  memset(prows, 0, sizeof prows);
  for (int i = 0; i < 2; i++) {
    memcpy(prows[i].name, pages[i].name, KVREADY_NAME_SIZE);
    prows[i].block = pages[i].block;
    CHECK(kvready_sim_alloc(pre.dev, 256, &prows[i].device) == KVREADY_OK, pre.dev);
    uint8_t content[256];
    memset(content, 0xA0 + i, sizeof content);
    CHECK(kvready_sim_write(pre.dev, prows[i].device, content, sizeof content) == KVREADY_OK, pre.dev);
  }
  kvready_request fetch = {.kind = KVREADY_FETCH, .rows = drows, .n_rows = 2, .is_last = 1};
  kvready_request pub = {.kind = KVREADY_PUBLISH, .rows = prows, .n_rows = 2, .is_last = 1};
  uint64_t dl = 0, pl = 0;
  CHECK(kvready_lend(dec.eng, &fetch, &dl) == KVREADY_OK, dec.eng);
  CHECK(kvready_lend(pre.eng, &pub, &pl) == KVREADY_OK, pre.eng);
  /* Both owners run rounds (kvready_progress progresses their peer backends):
   * bounded at 10 s. */
  kvready_lease_info di, pi;
  for (int i = 0; i < 10000; i++) {
    kvready_progress(dec.eng, NULL, NULL, NULL, 0);
    kvready_progress(pre.eng, NULL, NULL, NULL, 0);
    if (kvready_lease_infos(dec.eng, &dl, 1, &di, NULL) != KVREADY_OK || kvready_lease_infos(pre.eng, &pl, 1, &pi, NULL) != KVREADY_OK) break;
    if (di.state == KVREADY_LOGICALLY_COMPLETE && pi.state == KVREADY_LOGICALLY_COMPLETE) break;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  CHECK(di.state == KVREADY_LOGICALLY_COMPLETE && di.outcome == KVREADY_OUTCOME_SERVED && di.fenced, dec.eng);
  CHECK(pi.state == KVREADY_LOGICALLY_COMPLETE && pi.outcome == KVREADY_OUTCOME_SERVED, pre.eng);
  for (int i = 0; i < 2; i++) {
    uint8_t got[256], want[256];
    memset(want, 0xA0 + i, sizeof want);
    CHECK(kvready_sim_read(dec.dev, drows[i].device, got, sizeof got) == KVREADY_OK && memcmp(got, want, sizeof got) == 0, dec.dev);
  }
  kvready_transfer_outcome o;
  int32_t found = 0;
  CHECK(kvready_peer_outcome(dec.be, 7, 1, &o, &found) == KVREADY_OK && found && o.kind == KVREADY_TRANSFER_DELIVERED && o.token_end == 32, dec.be);
  CHECK(kvready_peer_outcome(pre.be, 7, 1, &o, &found) == KVREADY_ERR_UNSUPPORTED, pre.be);
  kvready_peer_stats ds, ps;
  CHECK(kvready_peer_backend_stats(dec.be, &ds) == KVREADY_OK && ds.delivered == 1 && ds.settled == 1 && ds.in_flight == 0 && ds.fenced == 1, dec.be);
  CHECK(kvready_peer_backend_stats(pre.be, &ps) == KVREADY_OK && ps.delivered == 1 && ps.puts == 2 && ps.offers == 1 && ps.in_flight == 0, pre.be);
  int32_t forgotten = 1;
  CHECK(kvready_peer_forget(dec.be, 7, 1, NULL, &forgotten) == KVREADY_OK && !forgotten, dec.be);
  CHECK(kvready_peer_forget(pre.be, 7, 1, NULL, &forgotten) == KVREADY_ERR_INVALID, pre.be);
  CHECK(kvready_release(dec.eng, dl) == KVREADY_OK && kvready_release(pre.eng, pl) == KVREADY_OK, dec.eng);
  CHECK(pump(dec.eng, dl, KVREADY_RELEASED, 0) && pump(pre.eng, pl, KVREADY_RELEASED, 0), dec.eng);
  CHECK(kvready_peer_progress(dec.mem, NULL) == KVREADY_ERR_BAD_HANDLE, dec.mem);
  peer_side_close(&dec);
  peer_side_close(&pre);
  CHECK(kvready_peer_progress(dec.be, NULL) == KVREADY_ERR_BAD_HANDLE, 0);
}

int main(void) {
  test_library();
  test_bad_handles();
  test_profile_layout_names();
  test_go_backend();
  test_c_backend_and_device();
  test_try_quiesce();
  test_cancel_result_and_in_doubt();
  test_log_callback(); /* runs test_fatal_policy_halts */
  test_recover_policy();
  test_wait_queues_containment();
  test_layer_by_layer();
  test_layerwise_publish();
  test_layerwise_publish_c_device();
  test_sim_bandwidth();
  test_free_while_waiting();
  test_one_engine_per_memory();
  test_tiers();
  test_peer_transfer();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
