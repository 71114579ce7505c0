/* cgo.h — what the Go side of the C ABI needs beyond kvready.h: const
 * spellings cgo can name (so that every exported function's prototype matches
 * kvready.h exactly, which the compiler checks), and the trampolines that call
 * the embedder's callbacks (Go cannot call a C function pointer itself). Not
 * installed: embedders include kvready.h only. */
#ifndef KVREADY_CGO_H
#define KVREADY_CGO_H
#include <pthread.h>
#include "kvready.h"

typedef const void kv_cvoid;
typedef const char kv_cchar;
typedef const char *const kv_cstr;
typedef const uint8_t kv_cu8;
typedef const int32_t kv_ci32;
typedef const uint64_t kv_cu64;
typedef const kvready_group kv_cgroup;
typedef const kvready_request kv_crequest;
typedef const kvready_engine_config kv_cconfig;
typedef const kvready_backend_callbacks kv_cbackend_callbacks;
typedef const kvready_device_callbacks kv_cdevice_callbacks;
typedef const kvready_ucx_config kv_cucx_config;
typedef const kvready_peer_config kv_cpeer_config;
typedef const kvready_peer_plan kv_cpeer_plan;
typedef const kvready_accessor kv_caccessor;

/* The calling thread, to keep the last error of calls without a handle. */
static inline uint64_t kv_thread(void) { return (uint64_t)pthread_self(); }

/* The trampolines (trampolines.c). */
int kv_fetch(kvready_backend_callbacks *cb, int publish, const uint8_t *name, size_t name_len, const kvready_unit *units, size_t n, int32_t is_last, uint64_t *attempt, char *err, size_t err_cap);
int kv_poll(kvready_backend_callbacks *cb, uint64_t attempt, kvready_answer *answer, uint8_t *served, size_t cap);
int kv_quiesce(kvready_backend_callbacks *cb, const uint64_t *attempts, size_t n, int64_t timeout_ns, int32_t *proven, char *err, size_t err_cap);
int kv_try_quiesce(kvready_backend_callbacks *cb, const uint64_t *attempts, size_t n, int32_t *access, char *err, size_t err_cap);
int kv_cancel(kvready_backend_callbacks *cb, uint64_t attempt, int32_t *disposition, char *err, size_t err_cap);
void kv_forget(kvready_backend_callbacks *cb, uint64_t attempt);
int kv_put(kvready_backend_callbacks *cb, const uint8_t *ext, size_t ext_len, const uint8_t *name, const uint8_t *row, size_t n);
int kv_get(kvready_backend_callbacks *cb, const uint8_t *ext, size_t ext_len, const uint8_t *name, uint8_t *row, size_t cap, size_t *len, int32_t *found);
void kv_backend_close(kvready_backend_callbacks *cb);
int kv_copy(kvready_device_callbacks *cb, int32_t to_device, uint64_t device, void *host, size_t n);
int kv_record(kvready_device_callbacks *cb, uint64_t *event);
int kv_query(kvready_device_callbacks *cb, uint64_t event, int32_t *status);
void kv_release_event(kvready_device_callbacks *cb, uint64_t event);
int kv_addressable(kvready_device_callbacks *cb, uint64_t device, size_t n, char *err, size_t err_cap);
int kv_lost(kvready_device_callbacks *cb, int32_t *lost, char *reason, size_t cap);
void kv_device_close(kvready_device_callbacks *cb);
int kv_wait(kvready_device_callbacks *cb, uint64_t event);
int kv_make(kvready_make_backend make, void *user, uint64_t memory, uint64_t *backend);
void kv_log(kvready_log_fn fn, void *user, int32_t level, const char *msg, size_t len);
kvready_backend_callbacks *kv_copy_backend(const kvready_backend_callbacks *cb);
kvready_device_callbacks *kv_copy_device(const kvready_device_callbacks *cb);

#endif
