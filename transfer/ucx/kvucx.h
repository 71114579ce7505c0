/* The C side of package ucx: one UCP context and worker, the endpoint and
 * registration tables its active-message handlers check, and the wire layout
 * of those messages. Every function here is called with the Go transport's
 * lock held, and every handler runs inside one of them — most inside
 * kvu_progress, but an endpoint's error handler also inside a send to a
 * dead peer (ucp_am_send_nbx failing at once over tcp) — so nothing here
 * locks. No Go pointer is stored in C memory except the registered pages of
 * a checked registration, which Go pins for as long as they are in the
 * table. */
#ifndef KVUCX_H
#define KVUCX_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

/* Active-message ids: one per kind of message. */
enum {
    KVU_AM_MSG = 1, /* a report: Handlers.Message */
    KVU_AM_PUT,     /* a checked put: data for a registration */
    KVU_AM_PUT_ACK, /* the owner applied (or refused) a put */
    KVU_AM_GET,     /* a checked get: read a registration */
    KVU_AM_GET_REP, /* the owner's answer to a get, with the data */
    KVU_AM_LAST
};

/* What a handler hands Go after progress. */
enum {
    KVU_EV_MSG = 1,     /* a message on an endpoint of ours, identity checked */
    KVU_EV_MSG_UNKNOWN, /* a message on an endpoint we did not open (yet) */
    KVU_EV_PUT_DONE,    /* a put's answer: status 0 applied, else refused */
    KVU_EV_GET_DONE,    /* a get's answer, with the data */
    KVU_EV_EP_ERROR     /* the endpoint failed */
};

/* Why the owner refused a put or a get (the answer's status, negated UCS
 * codes stay UCX's own). */
enum {
    KVU_REFUSE_REVOKED = 1, /* no live registration with that id/generation */
    KVU_REFUSE_BOUNDS,      /* outside the registration */
    KVU_REFUSE_ENDPOINT,    /* from an endpoint the owner did not open */
    KVU_REFUSE_IDENTITY,    /* the claimed sender is not the endpoint's peer */
    KVU_REFUSE_TARGET,      /* addressed to another incarnation of the owner */
    KVU_REFUSE_TRANSFER     /* the data could not be received */
};

#define KVU_NAME_MAX 255
#define KVU_HDR_FIXED 64
/* The largest report a checked put carries in its header (a DONE is about
 * a hundred bytes): delivered as a message only once the put is applied. */
#define KVU_CARRY_MAX 1024
/* The most put answers one ack carries: the first in its header, the others
 * as (seq, status) pairs in its data (16 bytes each, well within eager). */
#define KVU_ACKS_MAX 64

typedef struct kvu_stats {
    uint64_t puts_applied;     /* puts written into a live registration */
    uint64_t puts_refused;     /* puts refused (any reason) */
    uint64_t puts_late;        /* of those, naming a revoked registration */
    uint64_t gets_served;
    uint64_t gets_refused;
    uint64_t msgs_refused;     /* malformed, misaddressed, or claiming another identity */
    uint64_t answers_refused;  /* acks and get answers from the wrong endpoint */
    uint64_t bounces_contained;/* rendezvous buffers kept after a failed receive */
    uint64_t reports_carried;  /* reports a put carried, delivered once it was applied */
    uint64_t reports_dropped;  /* reports a put carried, dropped with the put refused */
    uint64_t puts_rndv;        /* rendezvous puts whose receive began */
    uint64_t puts_direct;      /* of those, received straight into a registration */
    uint64_t revokes_waited;   /* revocations that waited for such a receive */
    uint64_t revokes_unfenced; /* revocations whose wait ran out: answered new-only */
    uint64_t acks_sent;        /* answers to puts sent: each answers every put one progress settled from its endpoint */
} kvu_stats;

typedef struct kvu_worker kvu_worker;

typedef struct kvu_ep {
    kvu_worker *w;
    ucp_ep_h ep;
    uint64_t id;
    uint64_t inc;
    uint32_t name_len;
    char name[KVU_NAME_MAX + 1];
    int live; /* in the table: what arrives on it is heard */
} kvu_ep;

typedef struct kvu_event {
    int32_t kind;
    int32_t status; /* 0, a KVU_REFUSE_* code, or a negative ucs_status_t */
    uint64_t ep_id;
    uint64_t seq;       /* a put's or get's answer: its sequence; a message: how many it bundles (0: one) */
    uintptr_t reply_ep; /* KVU_EV_MSG_UNKNOWN: the endpoint it came on */
    uint64_t inc;       /* KVU_EV_MSG_UNKNOWN: the claimed sender */
    uint32_t name_len;
    char name[KVU_NAME_MAX + 1];
    void *data; /* malloc'ed copy, freed by the next kvu_progress */
    size_t len;
} kvu_event;

/* An operation Go posted: a send, a one-sided put or get, a flush, a close. */
typedef struct kvu_op {
    void *req;    /* the UCX request while in flight */
    int done;
    int32_t status;
    uint8_t hdr[KVU_HDR_FIXED + KVU_NAME_MAX + KVU_CARRY_MAX];
    void *copy; /* a message's own copy */
} kvu_op;

/* rndv_get sets this context's rendezvous to the receiver's get_zcopy
 * (RNDV_SCHEME, and the v1 protocols that honour it): over shared memory
 * the owner's own worker then reads every rendezvous put into its pages. */
int kvu_open(kvu_worker **out, const char *tls, int rma, int peer_errors,
             int direct, int rndv_get, const char *name, uint32_t name_len,
             uint64_t inc, const char *keepalive);
void kvu_close(kvu_worker *w);
ucs_status_t kvu_address(kvu_worker *w, void **addr, size_t *len);
void kvu_address_release(kvu_worker *w, void *addr);

ucs_status_t kvu_connect(kvu_worker *w, const void *addr, const char *name,
                         uint32_t name_len, uint64_t inc, kvu_ep **out);
uintptr_t kvu_ep_handle(kvu_ep *e);
ucs_status_t kvu_ep_close(kvu_worker *w, kvu_ep *e, int force, kvu_op **out);

/* kvu_progress first frees the first done events (those the last call
 * answered, which the caller has read), then progresses; ev and nev, when
 * not NULL, receive every event recorded and not yet freed, valid until the
 * next kvu_progress or kvu_close. */
unsigned kvu_progress(kvu_worker *w, unsigned max, size_t done, kvu_event **ev, size_t *nev);
void kvu_events_clear(kvu_worker *w);
kvu_stats kvu_get_stats(kvu_worker *w);

int kvu_region_add(kvu_worker *w, void *base, size_t len, uint64_t *idx,
                   uint64_t *gen);
/* kvu_region_revoke takes a registration out of the table: every put is
 * refused from then on, and the puts being received straight into it are
 * waited for, progressing the worker, for at most wait_ns. It answers 1 when
 * none is left (nothing writes the memory after), 0 when the wait ran out
 * (they complete as refused, but may still write the memory). */
int kvu_region_revoke(kvu_worker *w, uint64_t idx, uint64_t gen, int64_t wait_ns);

/* kvu_send_msg sends a message, or, with count 2 or more, a bundle of count
 * messages framed in msg (the header's arg says how many; Go frames and
 * splits them). */
ucs_status_t kvu_send_msg(kvu_worker *w, kvu_ep *e, const void *msg,
                          size_t len, uint64_t count, kvu_op **out);
/* kvu_send_put sends a checked put; a report of carry_len bytes (at most
 * kvu_max_carry) rides in its header, for the owner to hand Go as a message
 * only once it applied the put. eager: sent eager whatever its size (no
 * rendezvous), landing in UCX's buffer for the owner's handler to copy. */
ucs_status_t kvu_send_put(kvu_worker *w, kvu_ep *e, uint64_t seq,
                          uint64_t target_inc, uint64_t region, uint64_t gen,
                          uint64_t off, const void *src, size_t len,
                          const void *carry, size_t carry_len, int eager, kvu_op **out);
/* kvu_max_carry answers the largest report a put of this worker carries:
 * KVU_CARRY_MAX, or less where UCX's active-message header is smaller. */
size_t kvu_max_carry(kvu_worker *w);
ucs_status_t kvu_send_get(kvu_worker *w, kvu_ep *e, uint64_t seq,
                          uint64_t target_inc, uint64_t region, uint64_t gen,
                          uint64_t off, uint64_t len, kvu_op **out);

ucs_status_t kvu_mem_map(kvu_worker *w, void *base, size_t len, ucp_mem_h *mh,
                         void **rkey, size_t *rkey_len);
void kvu_rkey_buffer_release(void *rkey);
ucs_status_t kvu_mem_unmap(kvu_worker *w, ucp_mem_h mh);
ucs_status_t kvu_rkey_unpack(kvu_ep *e, const void *buf, ucp_rkey_h *out);
void kvu_rkey_destroy(ucp_rkey_h rk);
ucs_status_t kvu_put_os(kvu_ep *e, const void *src, size_t len, uint64_t raddr,
                        ucp_rkey_h rk, kvu_op **out);
ucs_status_t kvu_get_os(kvu_ep *e, void *dst, size_t len, uint64_t raddr,
                        ucp_rkey_h rk, kvu_op **out);
ucs_status_t kvu_ep_flush(kvu_ep *e, kvu_op **out);
ucs_status_t kvu_worker_flush(kvu_worker *w, kvu_op **out);

int kvu_op_test(kvu_op *op);
/* kvu_op_test answers whether op completed (then its request is released
 * and op->status set); it never blocks. kvu_op_abandon releases the request
 * of an op still in flight before the worker is destroyed. kvu_op_free frees
 * an op that completed, or one abandoned once kvu_close returned (UCX may
 * read its header until then). */
void kvu_op_abandon(kvu_op *op);
void kvu_op_free(kvu_op *op);
/* kvu_op_settle is kvu_op_test and, once op completed, kvu_op_free in one
 * call into C, not two: UCS_INPROGRESS while op is in flight (op kept),
 * else op's status (op freed). */
ucs_status_t kvu_op_settle(kvu_op *op);

#endif
