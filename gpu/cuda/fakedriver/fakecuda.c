/*
 * fakecuda: a fake CUDA driver (libcuda) for testing kvready's gpu/cuda
 * binding through real dlopen'ed C entry points, on a machine without a GPU.
 *
 * Build: gcc -O2 -shared -fPIC -pthread -o bin/libfakecuda.so fakecuda.c
 * (`make fakecuda`; the Go helper package gpu/cuda/fakecuda builds it for
 * tests). No CUDA headers: the few types are declared below.
 *
 * What it does:
 *  - devices (1 by default; FAKECUDA_DEVICES) with a primary context each and
 *    a PCI bus id (cuDeviceGetPCIBusId);
 *  - device memory is host memory the library owns (cuMemAlloc_v2 mallocs);
 *    device ranges are checked against live allocations of the current
 *    context; cuMemGetAddressRange_v2 answers from those allocations;
 *  - pinned host memory from cuMemHostAlloc; an asynchronous copy whose host
 *    range does not lie inside a pinned allocation is refused
 *    (CUDA_ERROR_INVALID_VALUE), nothing queued;
 *  - every stream has a worker thread that runs its queued copies and event
 *    records in order, each no earlier than a configurable delay after it was
 *    queued (FAKECUDA_DELAY_US, or FAKECUDA_SET_DELAY_NS); copies happen at
 *    that moment, not when queued, so a buffer recycled early shows it;
 *  - events complete in stream order; cuEventQuery on a created but never
 *    recorded event answers CUDA_SUCCESS, as the real driver does;
 *  - a stream used while another context is current is refused
 *    (CUDA_ERROR_INVALID_HANDLE);
 *  - steering through fakecuda_ctl (below): hold mode, where nothing runs
 *    until a test steps the stream (completing or failing the next events);
 *    CUDA_ERROR_ILLEGAL_ADDRESS from the nth next copy (sticky for its
 *    context, as on a real GPU); a sticky error such as
 *    CUDA_ERROR_LAUNCH_FAILED on a device's context; a lost device; the
 *    answer of cuInit; counters.
 *
 * Every entry point takes one global lock; copies run under it. This is a
 * test double: simple and correct rather than fast.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct fctx *CUcontext;
typedef struct fstream *CUstream;
typedef struct fevent *CUevent;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_LAUNCH_FAILED = 719,
	CUDA_ERROR_UNKNOWN = 999,
};

/* The control operations of fakecuda_ctl. Keep in step with gpu/cuda/fakecuda. */
enum {
	FAKECUDA_RESET = 0,          /* clear faults, hold mode, delay, counters; keep allocations */
	FAKECUDA_SET_DELAY_NS = 1,   /* a: ns between queuing an operation and running it */
	FAKECUDA_HOLD = 2,           /* a: 1 = nothing runs until FAKECUDA_STEP; 0 = the workers run */
	FAKECUDA_STEP = 3,           /* a: stream, b: events, c: 0 complete / a CUresult to fail with, d: poison byte;
	                                runs the stream's queue up to and including its next b event records;
	                                returns the events stepped */
	FAKECUDA_FAIL_COPY = 4,      /* a: the nth next asynchronous copy (1: the next) faults when it runs, b: its CUresult */
	FAKECUDA_STICKY = 5,         /* a: device, b: CUresult every later call on its context returns */
	FAKECUDA_LOSE = 6,           /* a: device, b: CUresult every later call on the device returns */
	FAKECUDA_INIT_RESULT = 7,    /* a: what cuInit answers */
	FAKECUDA_SET_DEVICES = 8,    /* a: number of devices (1..16) */
	FAKECUDA_SET_BUS = 9,        /* a: device, b: its PCI bus number */
	FAKECUDA_COUNTER = 10,       /* a: counter index (FC_*); returns its value */
	FAKECUDA_PENDING = 11,       /* a: stream; returns operations queued and not yet run */
	FAKECUDA_WAIT_IDLE = 12,     /* a: stream, b: timeout ns; returns 0 when the queue is empty, 1 on timeout */
};

enum {
	FC_EVENTS_CREATED,
	FC_EVENTS_DESTROYED,
	FC_COPIES_RUN,
	FC_COPIES_REFUSED,
	FC_QUERIES,
	FC_UNRECORDED_QUERIES,
	FC_STREAMS_LIVE,
	FC_NUM,
};

#define MAX_DEVICES 16
#define MAGIC_STREAM 0x5354524dU
#define MAGIC_EVENT 0x45564e54U
#define MAGIC_DEAD 0xdeadU

struct fctx {
	int dev;
	int refs;
	CUresult sticky;
};

struct alloc {
	uintptr_t base;
	size_t n;
	struct fctx *ctx; /* NULL for pinned host memory */
	struct alloc *next;
};

enum { OP_HTOD, OP_DTOH, OP_MARK, OP_WAIT };

struct op {
	int kind;
	uintptr_t dst, src;
	size_t n;
	struct fevent *ev;
	uint64_t seq;
	int64_t due;
	CUresult fault; /* injected: the copy faults with this when it runs */
	struct op *next;
};

static struct op *op_new(void);
static void op_free(struct op *o);
static void wake_waiters(struct fevent *e);

struct fstream {
	unsigned magic;
	struct fctx *ctx;
	pthread_t thr;
	pthread_cond_t cv;
	struct op *head, *tail;
	uint64_t seq; /* operations queued */
	size_t pending;
	int stop, waiting;
	struct fstream *all; /* the next live stream */
};

struct fevent {
	unsigned magic;
	struct fstream *stream; /* NULL: never recorded */
	uint64_t target;        /* the seq of its latest record */
	int done;
	CUresult result;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static int inited, configured;
static CUresult init_result;
static int ndev = 1;
static int bus[MAX_DEVICES];
static struct fctx ctxs[MAX_DEVICES];
static CUresult lost[MAX_DEVICES];
static struct alloc *devmem, *hostmem;
static int64_t delay_ns;
static int hold;
static long long fail_countdown;
static CUresult fail_code;
static long long counters[FC_NUM];
static struct fstream *streams; /* live streams, for wake_all */
static __thread struct fctx *current;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void configure(void)
{
	if (configured)
		return;
	configured = 1;
	const char *s = getenv("FAKECUDA_DEVICES");
	if (s && atoi(s) >= 1 && atoi(s) <= MAX_DEVICES)
		ndev = atoi(s);
	s = getenv("FAKECUDA_DELAY_US");
	if (s && atoll(s) >= 0)
		delay_ns = atoll(s) * 1000;
	s = getenv("FAKECUDA_HOLD");
	if (s && atoi(s) == 1)
		hold = 1;
	for (int i = 0; i < MAX_DEVICES; i++) {
		bus[i] = 0x17 + i;
		ctxs[i].dev = i;
	}
}

/* ctx_err is the error every call on ctx answers: the device's loss first,
   then the context's sticky error. */
static CUresult ctx_err(struct fctx *c)
{
	if (lost[c->dev])
		return lost[c->dev];
	return c->sticky;
}

/* enter checks that the driver is initialised and a context is current. */
static CUresult enter(void)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!current || current->refs == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ctx_err(current);
}

static struct alloc *find(struct alloc *list, uintptr_t p, size_t n, struct fctx *ctx)
{
	for (struct alloc *a = list; a; a = a->next)
		if (a->ctx == ctx && p >= a->base && p < a->base + a->n && n <= a->base + a->n - p)
			return a;
	return NULL;
}

static CUresult track(struct alloc **list, void *p, size_t n, struct fctx *ctx)
{
	struct alloc *a = malloc(sizeof *a);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->base = (uintptr_t)p;
	a->n = n;
	a->ctx = ctx;
	a->next = *list;
	*list = a;
	return CUDA_SUCCESS;
}

static int untrack(struct alloc **list, uintptr_t p, struct fctx *ctx)
{
	for (struct alloc **a = list; *a; a = &(*a)->next)
		if ((*a)->base == p && (*a)->ctx == ctx) {
			struct alloc *dead = *a;
			*a = dead->next;
			free(dead);
			return 1;
		}
	return 0;
}

/* run performs one queued operation (the lock held). A copy whose device
   memory was freed after it was queued faults like an injected fault: the
   context's error becomes sticky. fail/poison: a stepped failure (not sticky)
   fills the copy's destination with poison instead. */
static void run(struct fstream *s, struct op *o, CUresult fail, int poison)
{
	struct fctx *c = s->ctx;
	if (o->kind == OP_MARK) {
		if (o->ev->stream == s && o->ev->target == o->seq) {
			o->ev->done = 1;
			o->ev->result = fail;
			wake_waiters(o->ev); /* a stream may wait for it (cuStreamWaitEvent) */
		}
		return;
	}
	if (o->kind == OP_WAIT)
		return;
	if (ctx_err(c))
		return; /* a broken context runs nothing */
	uintptr_t devp = o->kind == OP_HTOD ? o->dst : o->src;
	if (o->fault || !find(devmem, devp, o->n, c)) {
		c->sticky = o->fault ? o->fault : CUDA_ERROR_ILLEGAL_ADDRESS;
		return;
	}
	if (fail) {
		memset((void *)o->dst, poison, o->n);
		return;
	}
	memmove((void *)o->dst, (const void *)o->src, o->n);
	counters[FC_COPIES_RUN]++;
}

/* waits reports whether o is a cuStreamWaitEvent still waiting: for the
   record it captured when it was queued, which completes, or is replaced by a
   later record of the same event (then taken as done: the fake keeps no
   history of records). */
static int waits(struct op *o)
{
	if (o->kind != OP_WAIT)
		return 0;
	struct fevent *e = o->ev;
	return e->stream == (struct fstream *)o->dst && e->target == o->src && !e->done;
}

static struct op *pop(struct fstream *s)
{
	struct op *o = s->head;
	s->head = o->next;
	if (!s->head)
		s->tail = NULL;
	s->pending--;
	if (s->pending == 0)
		pthread_cond_broadcast(&idle_cv);
	return o;
}

static void *worker(void *arg)
{
	struct fstream *s = arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		if (s->stop)
			break;
		struct op *o = s->head;
		if (!o || hold || lost[s->ctx->dev] || waits(o)) {
			s->waiting = 1;
			pthread_cond_wait(&s->cv, &mu);
			s->waiting = 0;
			continue;
		}
		int64_t t = now_ns();
		if (o->due > t) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			int64_t w = (int64_t)ts.tv_nsec + (o->due - t);
			ts.tv_sec += w / 1000000000;
			ts.tv_nsec = w % 1000000000;
			s->waiting = 1;
			pthread_cond_timedwait(&s->cv, &mu, &ts);
			s->waiting = 0;
			continue;
		}
		pop(s);
		run(s, o, 0, 0);
		op_free(o);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

/* wake wakes s's worker when there is something new for it to do: an
   operation at the head of its queue, unless held (a worker waiting for an
   earlier operation's due time wakes on its own). */
static void wake(struct fstream *s)
{
	if (s->waiting && !hold && s->head && !s->head->next)
		pthread_cond_signal(&s->cv);
}

/* Ops are recycled through a free list (under mu), as a driver queues work
   into rings it owns rather than allocating per call. */
static struct op *free_ops;

static struct op *op_new(void)
{
	struct op *o = free_ops;
	if (!o)
		return calloc(1, sizeof *o);
	free_ops = o->next;
	memset(o, 0, sizeof *o);
	return o;
}

static void op_free(struct op *o)
{
	o->next = free_ops;
	free_ops = o;
}

static CUresult enqueue(struct fstream *s, int kind, uintptr_t dst, uintptr_t src, size_t n, struct fevent *ev,
			uint64_t *seq)
{
	struct op *o = op_new();
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->kind = kind;
	o->dst = dst;
	o->src = src;
	o->n = n;
	o->ev = ev;
	o->seq = ++s->seq;
	o->due = delay_ns > 0 ? now_ns() + delay_ns : 0;
	if (kind != OP_MARK && kind != OP_WAIT && fail_countdown > 0 && --fail_countdown == 0)
		o->fault = fail_code;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	s->pending++;
	if (seq)
		*seq = o->seq;
	wake(s);
	return CUDA_SUCCESS;
}

static int valid_stream(struct fstream *s)
{
	return s && s->magic == MAGIC_STREAM;
}

static int valid_event(struct fevent *e)
{
	return e && e->magic == MAGIC_EVENT;
}

#define LOCKED(body)                                                                                                   \
	do {                                                                                                           \
		pthread_mutex_lock(&mu);                                                                               \
		CUresult r_ = (body);                                                                                  \
		pthread_mutex_unlock(&mu);                                                                             \
		return r_;                                                                                             \
	} while (0)

static CUresult init_locked(unsigned flags)
{
	configure();
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (init_result)
		return init_result;
	inited = 1;
	return CUDA_SUCCESS;
}

CUresult cuInit(unsigned flags) { LOCKED(init_locked(flags)); }

static CUresult count_locked(int *n)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	*n = ndev;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n) { LOCKED(count_locked(n)); }

static CUresult device_get_locked(CUdevice *dev, int ordinal)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) { LOCKED(device_get_locked(dev, ordinal)); }

static CUresult bus_id_locked(char *out, int len, CUdevice dev)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!out || len < 13)
		return CUDA_ERROR_INVALID_VALUE;
	if (lost[dev])
		return lost[dev];
	snprintf(out, (size_t)len, "00000000:%02X:00.0", bus[dev] & 0xff);
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *out, int len, CUdevice dev) { LOCKED(bus_id_locked(out, len, dev)); }

static CUresult retain_locked(CUcontext *ctx, CUdevice dev)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (lost[dev])
		return lost[dev];
	ctxs[dev].refs++;
	*ctx = &ctxs[dev];
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) { LOCKED(retain_locked(ctx, dev)); }

static CUresult release_locked(CUdevice dev)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (ctxs[dev].refs == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctxs[dev].refs--;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { LOCKED(release_locked(dev)); }

static CUresult set_current_locked(CUcontext ctx)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx && (ctx < &ctxs[0] || ctx >= &ctxs[MAX_DEVICES] || ctx->refs == 0))
		return CUDA_ERROR_INVALID_CONTEXT;
	current = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) { LOCKED(set_current_locked(ctx)); }

/* create checks the context and the out pointer of a cuXxxCreate call and
   allocates its zeroed object; NULL with *r set on failure. */
static void *create(const void *out, size_t size, CUresult *r)
{
	if ((*r = enter()) != CUDA_SUCCESS)
		return NULL;
	if (!out) {
		*r = CUDA_ERROR_INVALID_VALUE;
		return NULL;
	}
	void *p = calloc(1, size);
	if (!p)
		*r = CUDA_ERROR_OUT_OF_MEMORY;
	return p;
}

/* stream_ok checks that s is a live stream of the current context. */
static CUresult stream_ok(struct fstream *s)
{
	CUresult r = enter();
	if (r)
		return r;
	if (!valid_stream(s) || s->ctx != current)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

static CUresult stream_create_locked(CUstream *out, unsigned flags)
{
	(void)flags;
	CUresult r;
	struct fstream *s = create(out, sizeof *s, &r);
	if (!s)
		return r;
	s->magic = MAGIC_STREAM;
	s->ctx = current;
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->thr, NULL, worker, s) != 0) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	counters[FC_STREAMS_LIVE]++;
	s->all = streams;
	streams = s;
	*out = s;
	return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *out, unsigned flags) { LOCKED(stream_create_locked(out, flags)); }

/* The stream's structure is never freed: events recorded on it may still
   name it. Its worker stops and its queue is dropped. */
CUresult cuStreamDestroy_v2(CUstream s)
{
	pthread_mutex_lock(&mu);
	CUresult r = stream_ok(s);
	if (r) {
		pthread_mutex_unlock(&mu);
		return r;
	}
	s->magic = MAGIC_DEAD;
	s->stop = 1;
	for (struct fstream **p = &streams; *p; p = &(*p)->all)
		if (*p == s) {
			*p = s->all;
			break;
		}
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&mu);
	pthread_join(s->thr, NULL);
	pthread_mutex_lock(&mu);
	while (s->head)
		op_free(pop(s));
	counters[FC_STREAMS_LIVE]--;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

static CUresult event_create_locked(CUevent *out, unsigned flags)
{
	(void)flags;
	CUresult r;
	struct fevent *e = create(out, sizeof *e, &r);
	if (!e)
		return r;
	e->magic = MAGIC_EVENT;
	counters[FC_EVENTS_CREATED]++;
	*out = e;
	return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *out, unsigned flags) { LOCKED(event_create_locked(out, flags)); }

static CUresult record_locked(CUevent e, CUstream s)
{
	CUresult r = stream_ok(s);
	if (r)
		return r;
	if (!valid_event(e))
		return CUDA_ERROR_INVALID_HANDLE;
	uint64_t seq;
	e->stream = s;
	e->done = 0;
	e->result = CUDA_SUCCESS;
	e->target = s->seq + 1;
	r = enqueue(s, OP_MARK, 0, 0, 0, e, &seq);
	if (r)
		e->stream = NULL;
	return r;
}

CUresult cuEventRecord(CUevent e, CUstream s) { LOCKED(record_locked(e, s)); }

/* cuStreamWaitEvent: what s queues after it waits for e's latest record at
   the time of the call; an event never recorded is no wait at all, as the
   driver documents. */
static CUresult stream_wait_locked(CUstream s, CUevent e, unsigned flags)
{
	CUresult r = stream_ok(s);
	if (r)
		return r;
	if (!valid_event(e) || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!e->stream || e->done)
		return CUDA_SUCCESS;
	if (e->stream->ctx->dev != s->ctx->dev)
		return CUDA_ERROR_INVALID_HANDLE; /* kvready waits on one device only */
	return enqueue(s, OP_WAIT, (uintptr_t)e->stream, (uintptr_t)e->target, 0, e, NULL);
}

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { LOCKED(stream_wait_locked(s, e, flags)); }

static CUresult query_locked(CUevent e)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!valid_event(e))
		return CUDA_ERROR_INVALID_HANDLE;
	counters[FC_QUERIES]++;
	if (!e->stream) {
		counters[FC_UNRECORDED_QUERIES]++;
		return CUDA_SUCCESS; /* what the real driver answers */
	}
	CUresult r = ctx_err(e->stream->ctx);
	if (r)
		return r;
	if (!e->done)
		return CUDA_ERROR_NOT_READY;
	return e->result;
}

CUresult cuEventQuery(CUevent e) { LOCKED(query_locked(e)); }

static CUresult event_destroy_locked(CUevent e)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!valid_event(e))
		return CUDA_ERROR_INVALID_HANDLE;
	/* Never freed: a queued record may still name it. */
	e->magic = MAGIC_DEAD;
	counters[FC_EVENTS_DESTROYED]++;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e) { LOCKED(event_destroy_locked(e)); }

static CUresult copy_async_locked(int kind, uintptr_t dst, uintptr_t src, size_t n, CUstream s)
{
	CUresult r = stream_ok(s);
	if (r)
		return r;
	if (n == 0)
		return CUDA_SUCCESS;
	uintptr_t host = kind == OP_HTOD ? src : dst, dev = kind == OP_HTOD ? dst : src;
	if (!find(hostmem, host, n, NULL) || !find(devmem, dev, n, current)) {
		counters[FC_COPIES_REFUSED]++;
		return CUDA_ERROR_INVALID_VALUE;
	}
	return enqueue(s, kind, dst, src, n, NULL, NULL);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	LOCKED(copy_async_locked(OP_HTOD, (uintptr_t)dst, (uintptr_t)src, n, s));
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	LOCKED(copy_async_locked(OP_DTOH, (uintptr_t)dst, (uintptr_t)src, n, s));
}

static CUresult copy_sync_locked(uintptr_t dst, uintptr_t src, size_t n, uintptr_t dev)
{
	CUresult r = enter();
	if (r)
		return r;
	if (n == 0)
		return CUDA_SUCCESS;
	if (!find(devmem, dev, n, current) || (dst == dev ? !src : !dst))
		return CUDA_ERROR_INVALID_VALUE;
	memmove((void *)dst, (const void *)src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	LOCKED(copy_sync_locked((uintptr_t)dst, (uintptr_t)src, n, (uintptr_t)dst));
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	LOCKED(copy_sync_locked((uintptr_t)dst, (uintptr_t)src, n, (uintptr_t)src));
}

static CUresult mem_alloc_locked(CUdeviceptr *p, size_t n, struct alloc **list, struct fctx *owner)
{
	CUresult r = enter();
	if (r)
		return r;
	if (!p || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	void *m = NULL;
	if (posix_memalign(&m, 256, (n + 255) / 256 * 256) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(m, 0, n);
	if ((r = track(list, m, n, owner)) != CUDA_SUCCESS) {
		free(m);
		return r;
	}
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	pthread_mutex_lock(&mu);
	CUresult r = mem_alloc_locked(p, n, &devmem, current);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUresult mem_free_locked(uintptr_t p, struct alloc **list, struct fctx *owner)
{
	CUresult r = enter();
	if (r)
		return r;
	if (!untrack(list, p, owner))
		return CUDA_ERROR_INVALID_VALUE;
	free((void *)p);
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) { LOCKED(mem_free_locked((uintptr_t)p, &devmem, current)); }

CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
	(void)flags;
	pthread_mutex_lock(&mu);
	CUdeviceptr d = 0;
	CUresult r = p ? mem_alloc_locked(&d, n, &hostmem, NULL) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*p = (void *)(uintptr_t)d;
	pthread_mutex_unlock(&mu);
	return r;
}

CUresult cuMemFreeHost(void *p) { LOCKED(mem_free_locked((uintptr_t)p, &hostmem, NULL)); }

static CUresult range_locked(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	CUresult r = enter();
	if (r)
		return r;
	struct alloc *a = find(devmem, (uintptr_t)p, 1, current);
	if (!a)
		return CUDA_ERROR_NOT_FOUND;
	if (base)
		*base = a->base;
	if (size)
		*size = a->n;
	return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) { LOCKED(range_locked(base, size, p)); }

CUresult cuGetErrorName(CUresult code, const char **out)
{
	static const struct {
		CUresult code;
		const char *name;
	} names[] = {
		{CUDA_SUCCESS, "CUDA_SUCCESS"},
		{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
		{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
		{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
		{CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED"},
		{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
		{CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
		{CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
		{CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
		{CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
		{CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
		{CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
		{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
	};
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].code == code) {
			*out = names[i].name;
			return CUDA_SUCCESS;
		}
	*out = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

/* step runs s's queue inline up to and including its next `events` records;
   fail (a CUresult, 0 for none) fails them, poisoning the copies' destinations. */
static long long step_locked(struct fstream *s, long long events, CUresult fail, int poison)
{
	if (!valid_stream(s) || events < 0)
		return -1;
	long long stepped = 0;
	while (s->head && stepped < events && !waits(s->head)) {
		struct op *o = pop(s);
		run(s, o, fail, poison);
		if (o->kind == OP_MARK)
			stepped++;
		op_free(o);
	}
	return stepped;
}

static long long wait_idle_locked(struct fstream *s, long long timeout_ns)
{
	if (!valid_stream(s))
		return -1;
	int64_t deadline = now_ns() + timeout_ns;
	while (s->pending > 0 && !hold && !lost[s->ctx->dev] && !ctx_err(s->ctx)) {
		int64_t t = now_ns();
		if (t >= deadline)
			return 1;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t w = (int64_t)ts.tv_nsec + (deadline - t < 1000000 ? deadline - t : 1000000);
		ts.tv_sec += w / 1000000000;
		ts.tv_nsec = w % 1000000000;
		pthread_cond_timedwait(&idle_cv, &mu, &ts);
	}
	return s->pending > 0;
}

/* wake_waiters wakes the workers whose next operation waits for e: only they
   can move when it completes, and a signal per stream per event would cost
   every record. */
static void wake_waiters(struct fevent *e)
{
	for (struct fstream *s = streams; s; s = s->all)
		if (s->head && s->head->kind == OP_WAIT && s->head->ev == e)
			pthread_cond_signal(&s->cv);
}

/* wake_all makes every worker re-check hold mode, loss and its queue. */
static void wake_all(void)
{
	for (struct fstream *s = streams; s; s = s->all)
		pthread_cond_signal(&s->cv);
}

/* fakecuda_ctl steers the fake driver; see the FAKECUDA_* operations. It
   returns -1 for an operation or argument it does not know. */
long long fakecuda_ctl(int op, long long a, long long b, long long c, long long d)
{
	long long ret = 0;
	pthread_mutex_lock(&mu);
	configure();
	switch (op) {
	case FAKECUDA_RESET:
		for (int i = 0; i < MAX_DEVICES; i++) {
			ctxs[i].sticky = 0;
			lost[i] = 0;
			bus[i] = 0x17 + i;
		}
		delay_ns = 0;
		hold = 0;
		fail_countdown = 0;
		fail_code = 0;
		init_result = 0;
		for (int i = 0; i < FC_NUM; i++)
			if (i != FC_STREAMS_LIVE)
				counters[i] = 0;
		break;
	case FAKECUDA_SET_DELAY_NS:
		ret = a >= 0 ? (delay_ns = a, 0) : -1;
		break;
	case FAKECUDA_HOLD:
		hold = a != 0;
		break;
	case FAKECUDA_STEP:
		ret = step_locked((struct fstream *)(uintptr_t)a, b, (CUresult)c, (int)d);
		break;
	case FAKECUDA_FAIL_COPY:
		ret = a >= 1 ? (fail_countdown = a, fail_code = b ? (CUresult)b : CUDA_ERROR_ILLEGAL_ADDRESS, 0) : -1;
		break;
	case FAKECUDA_STICKY:
	case FAKECUDA_LOSE:
		if (a < 0 || a >= MAX_DEVICES || b == 0) {
			ret = -1;
			break;
		}
		if (op == FAKECUDA_STICKY)
			ctxs[a].sticky = (CUresult)b;
		else
			lost[a] = (CUresult)b;
		pthread_cond_broadcast(&idle_cv);
		break;
	case FAKECUDA_INIT_RESULT:
		init_result = (CUresult)a;
		break;
	case FAKECUDA_SET_DEVICES:
		ret = a >= 1 && a <= MAX_DEVICES ? (ndev = (int)a, 0) : -1;
		break;
	case FAKECUDA_SET_BUS:
		ret = a >= 0 && a < MAX_DEVICES && b >= 0 && b <= 0xff ? (bus[a] = (int)b, 0) : -1;
		break;
	case FAKECUDA_COUNTER:
		ret = a >= 0 && a < FC_NUM ? counters[a] : -1;
		break;
	case FAKECUDA_PENDING:
		ret = valid_stream((struct fstream *)(uintptr_t)a) ? (long long)((struct fstream *)(uintptr_t)a)->pending : -1;
		break;
	case FAKECUDA_WAIT_IDLE:
		ret = wait_idle_locked((struct fstream *)(uintptr_t)a, b);
		break;
	default:
		ret = -1;
	}
	/* Only what a waiting worker must re-check wakes the workers: stepping,
	   counting and waiting change nothing they wait on, and waking them on
	   every step would make the test double dearer than what it stands for. */
	switch (op) {
	case FAKECUDA_RESET:
	case FAKECUDA_SET_DELAY_NS:
	case FAKECUDA_HOLD:
	case FAKECUDA_STICKY:
	case FAKECUDA_LOSE:
		wake_all();
	}
	pthread_mutex_unlock(&mu);
	return ret;
}
