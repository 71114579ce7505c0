/* trampolines.c — Go calls a C function pointer only through a C function:
 * these call the embedder's callbacks, passing the table's user pointer first
 * as kvready.h documents. Declared in cgo.h. */
#include <stdlib.h>
#include "cgo.h"

int kv_fetch(kvready_backend_callbacks *cb, int publish, const uint8_t *name, size_t name_len,
		const kvready_unit *units, size_t n, int32_t is_last, uint64_t *attempt, char *err, size_t err_cap) {
	if (publish) return cb->publish(cb->user, name, name_len, units, n, is_last, attempt, err, err_cap);
	return cb->fetch(cb->user, name, name_len, units, n, is_last, attempt, err, err_cap);
}
int kv_poll(kvready_backend_callbacks *cb, uint64_t attempt, kvready_answer *answer,
		uint8_t *served, size_t cap) {
	return cb->poll(cb->user, attempt, answer, served, cap);
}
int kv_quiesce(kvready_backend_callbacks *cb, const uint64_t *attempts, size_t n,
		int64_t timeout_ns, int32_t *proven, char *err, size_t err_cap) {
	return cb->quiesce(cb->user, attempts, n, timeout_ns, proven, err, err_cap);
}
int kv_try_quiesce(kvready_backend_callbacks *cb, const uint64_t *attempts, size_t n,
		int32_t *access, char *err, size_t err_cap) {
	return cb->try_quiesce(cb->user, attempts, n, access, err, err_cap);
}
int kv_cancel(kvready_backend_callbacks *cb, uint64_t attempt, int32_t *disposition, char *err, size_t err_cap) {
	return cb->cancel(cb->user, attempt, disposition, err, err_cap);
}
void kv_forget(kvready_backend_callbacks *cb, uint64_t attempt) { cb->forget(cb->user, attempt); }
int kv_put(kvready_backend_callbacks *cb, const uint8_t *ext, size_t ext_len, const uint8_t *name,
		const uint8_t *row, size_t n) {
	return cb->put(cb->user, ext, ext_len, name, row, n);
}
int kv_get(kvready_backend_callbacks *cb, const uint8_t *ext, size_t ext_len, const uint8_t *name,
		uint8_t *row, size_t cap, size_t *len, int32_t *found) {
	return cb->get(cb->user, ext, ext_len, name, row, cap, len, found);
}
void kv_backend_close(kvready_backend_callbacks *cb) { cb->close(cb->user); }

int kv_copy(kvready_device_callbacks *cb, int32_t to_device, uint64_t device, void *host, size_t n) {
	return cb->copy(cb->user, to_device, device, host, n);
}
int kv_record(kvready_device_callbacks *cb, uint64_t *event) { return cb->record(cb->user, event); }
int kv_wait(kvready_device_callbacks *cb, uint64_t event) { return cb->wait(cb->user, event); }
int kv_query(kvready_device_callbacks *cb, uint64_t event, int32_t *status) {
	return cb->query(cb->user, event, status);
}
void kv_release_event(kvready_device_callbacks *cb, uint64_t event) { cb->release_event(cb->user, event); }
int kv_addressable(kvready_device_callbacks *cb, uint64_t device, size_t n, char *err, size_t err_cap) {
	return cb->addressable(cb->user, device, n, err, err_cap);
}
int kv_lost(kvready_device_callbacks *cb, int32_t *lost, char *reason, size_t cap) {
	return cb->lost(cb->user, lost, reason, cap);
}
void kv_device_close(kvready_device_callbacks *cb) { cb->close(cb->user); }

int kv_make(kvready_make_backend make, void *user, uint64_t memory, uint64_t *backend) {
	return make(user, memory, backend);
}

kvready_backend_callbacks *kv_copy_backend(const kvready_backend_callbacks *cb) {
	kvready_backend_callbacks *p = malloc(sizeof *p);
	if (p) *p = *cb;
	return p;
}
kvready_device_callbacks *kv_copy_device(const kvready_device_callbacks *cb) {
	kvready_device_callbacks *p = malloc(sizeof *p);
	if (p) *p = *cb;
	return p;
}

void kv_log(kvready_log_fn fn, void *user, int32_t level, const char *msg, size_t len) {
	fn(user, level, msg, len);
}
