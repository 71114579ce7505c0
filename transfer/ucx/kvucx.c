/* See kvucx.h. The handlers decide everything about an incoming message in
 * C, inside kvu_progress, before anything is written: a checked put lands in
 * a registration only if the registration is live with the generation its
 * key names, the bytes fit, the endpoint is one this worker opened and the
 * sender claims to be that endpoint's peer. */
#include "kvucx.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bounce buffers kept for reuse: a fresh multi-MiB buffer costs its page
 * faults on every rendezvous, more than the copy out of it. */
#define KVU_SPARE_BOUNCES 32

/* A put's answer owed to the endpoint it came on: the owner answers every
 * put a progress applied or refused there in one message, not one each. */
typedef struct kvu_ack {
    uint64_t ep_id, seq, inc;
    int32_t status;
} kvu_ack;

typedef struct kvu_region {
    char *base;
    size_t len;
    uint64_t gen;      /* 0: the slot is free */
    uint32_t inflight; /* rendezvous received straight into it, not yet complete */
    int closing;       /* being revoked: refuses every put, waits for inflight */
} kvu_region;

struct kvu_worker {
    ucp_context_h ctx;
    ucp_worker_h worker;
    uint64_t inc;
    uint32_t name_len;
    char name[KVU_NAME_MAX + 1];
    int peer_errors;
    kvu_ep **eps; /* every endpoint record ever made: freed at kvu_close */
    size_t neps, capeps;
    uint64_t next_ep_id;
    kvu_region *regions;
    size_t nreg, capreg;
    uint64_t next_gen;
    kvu_event *ev;
    size_t nev, capev;
    kvu_stats stats;
    size_t max_carry; /* the largest report a put of ours carries */
    int direct;       /* receive a put's rendezvous straight into its registration */
    struct {
        void *buf;
        size_t cap;
    } spare[KVU_SPARE_BOUNCES]; /* put bounce buffers whose receive completed, for reuse */
    size_t nspare;
    kvu_ack *acks; /* put answers owed, sent together at the end of a progress */
    size_t nacks, capacks;
};

/* A rendezvous receive in flight: the data goes to a bounce buffer and is
 * judged again when it has all arrived — or, for a put when the worker
 * receives directly, straight into the registration, which counts it in
 * flight until it completes (a revocation waits for it). */
typedef struct kvu_rndv {
    kvu_worker *w;
    int kind;   /* KVU_AM_PUT or KVU_AM_GET_REP */
    int direct; /* buf is the registration's own memory */
    uint64_t ep_id, seq, region, gen, off;
    void *buf;
    size_t len;
    void *carry; /* the report the put carries (malloc'ed), or NULL */
    size_t carry_len;
} kvu_rndv;

/* ---- the wire: a fixed little-endian header, then the sender's name ---- */

#define KVU_MAGIC 0x5855564bu /* "KVUX" */

typedef struct kvu_hdr {
    uint8_t kind;
    uint32_t name_len;
    const char *name;
    uint64_t inc, target_inc, seq, region, gen, off, arg;
    const uint8_t *carry; /* a put's report, after the name: arg bytes */
    size_t carry_len;
} kvu_hdr;

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t hdr_pack(kvu_worker *w, uint8_t *p, uint8_t kind, uint64_t target_inc,
                       uint64_t seq, uint64_t region, uint64_t gen, uint64_t off, uint64_t arg) {
    memset(p, 0, KVU_HDR_FIXED);
    p[0] = 'K'; p[1] = 'V'; p[2] = 'U'; p[3] = 'X';
    p[4] = kind;
    p[5] = (uint8_t)w->name_len;
    put64(p + 8, w->inc);
    put64(p + 16, target_inc);
    put64(p + 24, seq);
    put64(p + 32, region);
    put64(p + 40, gen);
    put64(p + 48, off);
    put64(p + 56, arg);
    memcpy(p + KVU_HDR_FIXED, w->name, w->name_len);
    return KVU_HDR_FIXED + w->name_len;
}

/* hdr_parse accepts exactly one encoding: the magic, the kind it came as,
 * zero reserved bytes, a name of the length it states and, in a put alone,
 * the report it carries: arg bytes (at most KVU_CARRY_MAX) after the name. */
static int hdr_parse(const void *header, size_t len, uint8_t kind, kvu_hdr *h) {
    const uint8_t *p = header;
    if (len < KVU_HDR_FIXED || p[0] != 'K' || p[1] != 'V' || p[2] != 'U' || p[3] != 'X' ||
        p[4] != kind || p[6] != 0 || p[7] != 0 || p[5] == 0)
        return 0;
    size_t carry = kind == KVU_AM_PUT ? get64(p + 56) : 0;
    if (carry > KVU_CARRY_MAX || len != KVU_HDR_FIXED + (size_t)p[5] + carry)
        return 0;
    h->carry = carry ? p + KVU_HDR_FIXED + p[5] : NULL;
    h->carry_len = carry;
    h->kind = kind;
    h->name_len = p[5];
    h->name = (const char *)p + KVU_HDR_FIXED;
    h->inc = get64(p + 8);
    h->target_inc = get64(p + 16);
    h->seq = get64(p + 24);
    h->region = get64(p + 32);
    h->gen = get64(p + 40);
    h->off = get64(p + 48);
    h->arg = get64(p + 56);
    return 1;
}

/* ---- bounce buffers ---- */

/* bounce_get answers a buffer of at least len bytes: a spare one if one is
 * large enough and not more than twice as large, else a fresh one. */
static void *bounce_get(kvu_worker *w, size_t len) {
    if (len == 0)
        len = 1;
    for (size_t i = 0; i < w->nspare; i++) {
        if (w->spare[i].cap >= len && w->spare[i].cap / 2 <= len) {
            void *buf = w->spare[i].buf;
            w->spare[i] = w->spare[--w->nspare];
            return buf;
        }
    }
    return malloc(len);
}

/* bounce_put keeps a put's bounce buffer whose receive completed (nothing
 * writes it any more) for reuse, or frees it when the spares are full. A
 * buffer whose receive failed never comes here: it is kept for ever. */
static void bounce_put(kvu_worker *w, void *buf, size_t len) {
    if (len == 0)
        len = 1;
    if (w->nspare == KVU_SPARE_BOUNCES) {
        free(buf);
        return;
    }
    w->spare[w->nspare].buf = buf;
    w->spare[w->nspare].cap = len;
    w->nspare++;
}

/* ---- tables ---- */

static kvu_ep *ep_by_handle(kvu_worker *w, ucp_ep_h ep) {
    if (ep == NULL)
        return NULL;
    for (size_t i = 0; i < w->neps; i++)
        if (w->eps[i]->live && w->eps[i]->ep == ep)
            return w->eps[i];
    return NULL;
}

static kvu_ep *ep_by_id(kvu_worker *w, uint64_t id) {
    for (size_t i = 0; i < w->neps; i++)
        if (w->eps[i]->live && w->eps[i]->id == id)
            return w->eps[i];
    return NULL;
}

static kvu_event *ev_push(kvu_worker *w, int kind) {
    if (w->nev == w->capev) {
        size_t cap = w->capev ? 2 * w->capev : 64;
        kvu_event *ev = realloc(w->ev, cap * sizeof *ev);
        if (ev == NULL)
            return NULL;
        w->ev = ev;
        w->capev = cap;
    }
    kvu_event *e = &w->ev[w->nev++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    return e;
}

/* region_check answers 0 when [off, off+len) lies in the live registration
 * idx of generation gen, else the refusal. */
static int region_check(kvu_worker *w, uint64_t idx, uint64_t gen, uint64_t off, uint64_t len) {
    if (idx >= w->nreg || gen == 0 || w->regions[idx].gen != gen || w->regions[idx].closing)
        return KVU_REFUSE_REVOKED;
    kvu_region *r = &w->regions[idx];
    if (off > r->len || len > r->len - off)
        return KVU_REFUSE_BOUNDS;
    return 0;
}

/* ---- sending ---- */

static void free_user_data(void *req, ucs_status_t status, void *user_data) {
    (void)req;
    (void)status;
    free(user_data);
}

/* answer sends a reply (an ack, or a get's answer with a copy of src) on
 * the endpoint the request came on, which is valid inside the handler that
 * calls this. Header and data share one allocation, freed once UCX is done
 * with it: at once, or by the send's callback. */
static void answer(kvu_worker *w, ucp_ep_h ep, unsigned id, const kvu_hdr *h, int32_t status,
                   const void *src, size_t len) {
    uint8_t *buf = malloc(KVU_HDR_FIXED + w->name_len + len);
    if (buf == NULL)
        return; /* the requester's operation stays open until its endpoint closes */
    size_t hlen = hdr_pack(w, buf, (uint8_t)id, h->inc, h->seq, 0, 0, 0, (uint64_t)(int64_t)status);
    if (len)
        memcpy(buf + hlen, src, len);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .flags = UCP_AM_SEND_FLAG_REPLY,
        .cb = {.send = free_user_data},
        .user_data = buf,
    };
    void *r = ucp_am_send_nbx(ep, id, buf, hlen, len ? buf + hlen : NULL, len, &p);
    if (r == NULL || UCS_PTR_IS_ERR(r))
        free(buf);
    else
        ucp_request_free(r); /* released, and buf freed, on completion */
}

/* ack_owed queues a put's answer to e, sent by acks_send with the others
 * the same progress owes e. If the queue cannot grow, it is sent alone. */
static void ack_owed(kvu_worker *w, kvu_ep *e, uint64_t inc, uint64_t seq, int32_t status) {
    if (w->nacks == w->capacks) {
        size_t cap = w->capacks ? 2 * w->capacks : 64;
        kvu_ack *a = realloc(w->acks, cap * sizeof *a);
        if (a == NULL) {
            kvu_hdr h = {.inc = inc, .seq = seq};
            answer(w, e->ep, KVU_AM_PUT_ACK, &h, status, NULL, 0);
            return;
        }
        w->acks = a;
        w->capacks = cap;
    }
    w->acks[w->nacks++] = (kvu_ack){.ep_id = e->id, .seq = seq, .inc = inc, .status = status};
}

/* acks_send sends the answers owed, one message per endpoint and at most
 * KVU_ACKS_MAX answers a message: the first in the header, the others in
 * the data as (seq, status) pairs of 8 bytes each, little-endian. An
 * endpoint that failed or closed since gets none: its requester's
 * operations end with it. */
static void acks_send(kvu_worker *w) {
    uint8_t pairs[16 * (KVU_ACKS_MAX - 1)];
    while (w->nacks > 0) {
        kvu_ack first = w->acks[0];
        size_t n = 0, kept = 0;
        for (size_t i = 1; i < w->nacks; i++) {
            kvu_ack a = w->acks[i];
            if (a.ep_id == first.ep_id && a.inc == first.inc && n < KVU_ACKS_MAX - 1) {
                put64(pairs + 16 * n, a.seq);
                put64(pairs + 16 * n + 8, (uint64_t)(int64_t)a.status);
                n++;
            } else {
                w->acks[kept++] = a;
            }
        }
        w->nacks = kept;
        kvu_ep *e = ep_by_id(w, first.ep_id);
        if (e == NULL)
            continue;
        kvu_hdr h = {.inc = first.inc, .seq = first.seq};
        answer(w, e->ep, KVU_AM_PUT_ACK, &h, first.status, n ? pairs : NULL, 16 * n);
        w->stats.acks_sent++;
    }
}

/* ---- handlers ---- */

/* heard finds the endpoint a message came on and checks what the sender
 * claims against it; it answers the endpoint, or NULL with *why set. */
static kvu_ep *heard(kvu_worker *w, const ucp_am_recv_param_t *p, const kvu_hdr *h, int *why) {
    ucp_ep_h reply = (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? p->reply_ep : NULL;
    kvu_ep *e = ep_by_handle(w, reply);
    if (e == NULL) {
        *why = KVU_REFUSE_ENDPOINT;
        return NULL;
    }
    if (e->inc != h->inc || e->name_len != h->name_len || memcmp(e->name, h->name, h->name_len) != 0) {
        *why = KVU_REFUSE_IDENTITY;
        return NULL;
    }
    if (h->target_inc != w->inc) {
        *why = KVU_REFUSE_TARGET;
        return NULL;
    }
    return e;
}

static ucs_status_t refuse_put(kvu_worker *w, kvu_ep *e, const ucp_am_recv_param_t *p,
                               const kvu_hdr *h, int why, int rndv) {
    w->stats.puts_refused++;
    if (why == KVU_REFUSE_REVOKED)
        w->stats.puts_late++;
    if (h->carry_len)
        w->stats.reports_dropped++;
    ucp_ep_h reply = (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? p->reply_ep : NULL;
    /* The answer carries the reason; a rendezvous refused also fails the
     * sender's send (UCS_ERR_REJECTED), and the sender then waits for it. */
    if (e != NULL)
        ack_owed(w, e, h->inc, h->seq, why);
    else if (reply != NULL)
        answer(w, reply, KVU_AM_PUT_ACK, h, why, NULL, 0);
    return rndv ? UCS_ERR_REJECTED : UCS_OK;
}

static void rndv_done(void *req, ucs_status_t status, size_t length, void *user_data);

/* rndv_start receives a rendezvous message's data into dst, the checked
 * registration's own memory (counted in flight there), or, when dst is
 * NULL, into a bounce buffer. */
static ucs_status_t rndv_start(kvu_worker *w, void *desc, size_t len, kvu_rndv *proto, char *dst) {
    kvu_rndv *rv = malloc(sizeof *rv);
    void *buf = dst != NULL ? dst : proto->kind == KVU_AM_PUT ? bounce_get(w, len) : malloc(len ? len : 1);
    void *carry = proto->carry_len ? malloc(proto->carry_len) : NULL;
    if (rv == NULL || buf == NULL || (proto->carry_len && carry == NULL)) {
        free(rv);
        if (dst == NULL && proto->kind == KVU_AM_PUT && buf != NULL)
            bounce_put(w, buf, len);
        else if (dst == NULL)
            free(buf);
        free(carry);
        return UCS_ERR_NO_MEMORY;
    }
    *rv = *proto;
    rv->direct = dst != NULL;
    if (rv->kind == KVU_AM_PUT)
        w->stats.puts_rndv++;
    if (rv->direct) {
        w->regions[rv->region].inflight++;
        w->stats.puts_direct++;
    }
    if (carry != NULL)
        memcpy(carry, proto->carry, proto->carry_len);
    rv->carry = carry;
    rv->w = w;
    rv->buf = buf;
    rv->len = len;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb = {.recv_am = rndv_done},
        .user_data = rv,
    };
    void *r = ucp_am_recv_data_nbx(w->worker, desc, buf, len, &p);
    if (r == NULL)
        rndv_done(NULL, UCS_OK, len, rv);
    else if (UCS_PTR_IS_ERR(r))
        rndv_done(NULL, UCS_PTR_STATUS(r), 0, rv);
    return UCS_INPROGRESS;
}

/* carried hands Go a report a put carried, as a message from e, after the
 * put was applied: the report's claim that the writer's puts landed is true
 * when it is heard. */
static void carried(kvu_worker *w, kvu_ep *e, const void *msg, size_t len) {
    void *copy = malloc(len);
    kvu_event *ev = copy ? ev_push(w, KVU_EV_MSG) : NULL;
    if (ev == NULL) {
        free(copy);
        w->stats.reports_dropped++;
        return;
    }
    memcpy(copy, msg, len);
    ev->ep_id = e->id;
    ev->data = copy;
    ev->len = len;
    w->stats.reports_carried++;
}

/* apply_put writes a put whose registration is checked once more, answers
 * the writer, and delivers the report the put carried only if it applied. */
static void apply_put(kvu_worker *w, kvu_ep *e, uint64_t seq, uint64_t inc, uint64_t idx,
                      uint64_t gen, uint64_t off, const void *data, size_t len,
                      const void *carry, size_t carry_len) {
    int why = region_check(w, idx, gen, off, len);
    kvu_hdr h = {.inc = inc, .seq = seq};
    if (why == 0) {
        memcpy(w->regions[idx].base + off, data, len);
        w->stats.puts_applied++;
    } else {
        w->stats.puts_refused++;
        if (why == KVU_REFUSE_REVOKED)
            w->stats.puts_late++;
    }
    if (carry_len && why == 0)
        carried(w, e, carry, carry_len);
    else if (carry_len)
        w->stats.reports_dropped++;
    ack_owed(w, e, h.inc, h.seq, why);
}

/* direct_done ends a put received straight into its registration: applied
 * if every byte came while the registration was live (a revocation waits
 * for it, so it still is unless the revocation gave up waiting); refused
 * otherwise. Nothing is copied: the bytes are where the put named. */
static void direct_done(kvu_worker *w, kvu_rndv *rv, kvu_ep *e, int ok) {
    kvu_region *r = rv->region < w->nreg && w->regions[rv->region].gen == rv->gen ? &w->regions[rv->region] : NULL;
    if (r != NULL)
        r->inflight--;
    int why = !ok ? KVU_REFUSE_TRANSFER : r == NULL ? KVU_REFUSE_REVOKED : 0;
    if (why == 0 && e != NULL) {
        w->stats.puts_applied++;
        if (rv->carry_len)
            carried(w, e, rv->carry, rv->carry_len);
    } else {
        /* Its endpoint failed or closed while the data came (the bytes that
         * came are in a registration still live: its revocation waited
         * for them), or the transfer failed, or the revocation gave up. */
        w->stats.puts_refused++;
        if (why == KVU_REFUSE_REVOKED)
            w->stats.puts_late++;
        if (rv->carry_len)
            w->stats.reports_dropped++;
        why = why ? why : KVU_REFUSE_ENDPOINT;
    }
    if (e != NULL)
        ack_owed(w, e, e->inc, rv->seq, why);
}

static void rndv_done(void *req, ucs_status_t status, size_t length, void *user_data) {
    kvu_rndv *rv = user_data;
    kvu_worker *w = rv->w;
    kvu_ep *e = ep_by_id(w, rv->ep_id);
    if (rv->direct) {
        direct_done(w, rv, e, status == UCS_OK && length == rv->len);
    } else if (status != UCS_OK || length != rv->len) {
        /* A failed receive may still be written by the transport (a
         * put-based rendezvous from the sender): keep the buffer for ever. */
        w->stats.bounces_contained++;
        if (rv->kind == KVU_AM_PUT) {
            w->stats.puts_refused++;
            if (rv->carry_len)
                w->stats.reports_dropped++;
            if (e != NULL)
                ack_owed(w, e, e->inc, rv->seq, KVU_REFUSE_TRANSFER);
        } else if (e != NULL) {
            kvu_event *ev = ev_push(w, KVU_EV_GET_DONE);
            if (ev) {
                ev->ep_id = rv->ep_id;
                ev->seq = rv->seq;
                ev->status = KVU_REFUSE_TRANSFER;
            }
        }
    } else if (rv->kind == KVU_AM_PUT && e == NULL) {
        /* Its endpoint failed or was closed while the data came: nothing
         * from that endpoint is applied after, whole or in part. */
        w->stats.puts_refused++;
        if (rv->carry_len)
            w->stats.reports_dropped++;
        bounce_put(w, rv->buf, rv->len);
    } else if (rv->kind == KVU_AM_PUT) {
        apply_put(w, e, rv->seq, e->inc, rv->region, rv->gen, rv->off, rv->buf, rv->len, rv->carry,
                  rv->carry_len);
        bounce_put(w, rv->buf, rv->len);
    } else {
        kvu_event *ev = ev_push(w, KVU_EV_GET_DONE);
        if (ev) {
            ev->ep_id = rv->ep_id;
            ev->seq = rv->seq;
            ev->data = rv->buf;
            ev->len = rv->len;
        } else {
            free(rv->buf);
        }
    }
    if (req != NULL)
        ucp_request_free(req);
    free(rv->carry);
    free(rv);
}

static ucs_status_t am_put(void *arg, const void *header, size_t hlen, void *data, size_t len,
                           const ucp_am_recv_param_t *p) {
    kvu_worker *w = arg;
    kvu_hdr h;
    int rndv = (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    int why = 0;
    if (!hdr_parse(header, hlen, KVU_AM_PUT, &h)) {
        w->stats.puts_refused++;
        return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    kvu_ep *e = heard(w, p, &h, &why);
    if (e == NULL)
        return refuse_put(w, NULL, p, &h, why, rndv);
    why = region_check(w, h.region, h.gen, h.off, len);
    if (why != 0)
        return refuse_put(w, e, p, &h, why, rndv);
    if (!rndv) {
        apply_put(w, e, h.seq, h.inc, h.region, h.gen, h.off, data, len, h.carry, h.carry_len);
        return UCS_OK;
    }
    kvu_rndv proto = {.kind = KVU_AM_PUT, .ep_id = e->id, .seq = h.seq, .region = h.region,
                      .gen = h.gen, .off = h.off, .carry = (void *)h.carry, .carry_len = h.carry_len};
    return rndv_start(w, data, len, &proto, w->direct ? w->regions[h.region].base + h.off : NULL);
}

static ucs_status_t am_get(void *arg, const void *header, size_t hlen, void *data, size_t len,
                           const ucp_am_recv_param_t *p) {
    kvu_worker *w = arg;
    kvu_hdr h;
    int why = 0;
    (void)data;
    if (!hdr_parse(header, hlen, KVU_AM_GET, &h) || len != 0) {
        w->stats.gets_refused++;
        return UCS_OK;
    }
    kvu_ep *e = heard(w, p, &h, &why);
    if (e == NULL) {
        w->stats.gets_refused++;
        if (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
            answer(w, p->reply_ep, KVU_AM_GET_REP, &h, why, NULL, 0);
        return UCS_OK;
    }
    why = region_check(w, h.region, h.gen, h.off, h.arg);
    if (why != 0) {
        w->stats.gets_refused++;
        answer(w, e->ep, KVU_AM_GET_REP, &h, why, NULL, 0);
        return UCS_OK;
    }
    /* The read happens now, under the owner's progress: a copy goes out. */
    w->stats.gets_served++;
    answer(w, e->ep, KVU_AM_GET_REP, &h, 0, w->regions[h.region].base + h.off, h.arg);
    return UCS_OK;
}

/* acks_valid answers whether len bytes are the further answers a put's ack
 * may carry: whole (seq, status) pairs, at most KVU_ACKS_MAX - 1. */
static int acks_valid(size_t len) {
    return len % 16 == 0 && len / 16 < KVU_ACKS_MAX;
}

/* answered hands Go one put's answer from e. */
static void answered(kvu_worker *w, kvu_ep *e, uint64_t seq, int32_t status) {
    kvu_event *ev = ev_push(w, KVU_EV_PUT_DONE);
    if (ev == NULL)
        return; /* the requester's operation stays open until its endpoint closes */
    ev->ep_id = e->id;
    ev->seq = seq;
    ev->status = status;
}

/* am_answer handles acks and get answers: only from the endpoint the
 * request went out on (Go checks the sequence belongs to it). */
static ucs_status_t am_answer(kvu_worker *w, unsigned id, const void *header, size_t hlen,
                              void *data, size_t len, const ucp_am_recv_param_t *p) {
    kvu_hdr h;
    int why = 0;
    int rndv = (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    kvu_ep *e = NULL;
    if (hdr_parse(header, hlen, (uint8_t)id, &h))
        e = heard(w, p, &h, &why);
    if (e == NULL || (id == KVU_AM_PUT_ACK && (rndv || !acks_valid(len)))) {
        w->stats.answers_refused++;
        return rndv ? UCS_ERR_REJECTED : UCS_OK;
    }
    if (id == KVU_AM_PUT_ACK) {
        answered(w, e, h.seq, (int32_t)(int64_t)h.arg);
        for (size_t i = 0; i < len / 16; i++) {
            const uint8_t *pair = (const uint8_t *)data + 16 * i;
            answered(w, e, get64(pair), (int32_t)(int64_t)get64(pair + 8));
        }
        return UCS_OK;
    }
    if (rndv) {
        kvu_rndv proto = {.kind = KVU_AM_GET_REP, .ep_id = e->id, .seq = h.seq};
        return rndv_start(w, data, len, &proto, NULL);
    }
    kvu_event *ev = ev_push(w, id == KVU_AM_PUT_ACK ? KVU_EV_PUT_DONE : KVU_EV_GET_DONE);
    if (ev == NULL)
        return UCS_OK;
    ev->ep_id = e->id;
    ev->seq = h.seq;
    ev->status = (int32_t)(int64_t)h.arg;
    if (len) {
        ev->data = malloc(len);
        if (ev->data == NULL) {
            ev->status = KVU_REFUSE_TRANSFER;
        } else {
            memcpy(ev->data, data, len);
            ev->len = len;
        }
    }
    return UCS_OK;
}

static ucs_status_t am_put_ack(void *arg, const void *header, size_t hlen, void *data, size_t len,
                               const ucp_am_recv_param_t *p) {
    return am_answer(arg, KVU_AM_PUT_ACK, header, hlen, data, len, p);
}

static ucs_status_t am_get_rep(void *arg, const void *header, size_t hlen, void *data, size_t len,
                               const ucp_am_recv_param_t *p) {
    return am_answer(arg, KVU_AM_GET_REP, header, hlen, data, len, p);
}

static ucs_status_t am_msg(void *arg, const void *header, size_t hlen, void *data, size_t len,
                           const ucp_am_recv_param_t *p) {
    kvu_worker *w = arg;
    kvu_hdr h;
    int why = 0;
    if ((p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || !hdr_parse(header, hlen, KVU_AM_MSG, &h)) {
        w->stats.msgs_refused++;
        return (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_REJECTED : UCS_OK;
    }
    kvu_ep *e = heard(w, p, &h, &why);
    if (e == NULL && (why != KVU_REFUSE_ENDPOINT || h.target_inc != w->inc ||
                      !(p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))) {
        w->stats.msgs_refused++;
        return UCS_OK;
    }
    void *copy = NULL;
    if (len) {
        copy = malloc(len);
        if (copy == NULL)
            return UCS_OK;
        memcpy(copy, data, len);
    }
    kvu_event *ev = ev_push(w, e ? KVU_EV_MSG : KVU_EV_MSG_UNKNOWN);
    if (ev == NULL) {
        free(copy);
        return UCS_OK;
    }
    if (e != NULL) {
        ev->ep_id = e->id;
    } else {
        /* Heard on an endpoint this worker did not open: Go holds it until
         * it opens one that turns out to be the same (UCX matches the two
         * directions of a pair), then checks the identity again. */
        ev->reply_ep = (uintptr_t)p->reply_ep;
        ev->inc = h.inc;
        ev->name_len = h.name_len;
        memcpy(ev->name, h.name, h.name_len);
    }
    ev->data = copy;
    ev->len = len;
    ev->seq = h.arg; /* 0: one message; else how many the data bundles (Go splits it) */
    return UCS_OK;
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    kvu_ep *e = arg;
    (void)ep;
    if (!e->live)
        return;
    e->live = 0; /* nothing more is heard on it */
    kvu_event *ev = ev_push(e->w, KVU_EV_EP_ERROR);
    if (ev) {
        ev->ep_id = e->id;
        ev->status = status;
    }
}

/* ---- lifecycle ---- */

static int set_handler(kvu_worker *w, unsigned id, ucp_am_recv_callback_t cb) {
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = id,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = cb,
        .arg = w,
    };
    return ucp_worker_set_am_recv_handler(w->worker, &hp);
}

int kvu_open(kvu_worker **out, const char *tls, int rma, int peer_errors, int direct,
             int rndv_get, const char *name, uint32_t name_len, uint64_t inc,
             const char *keepalive) {
    if (name_len == 0 || name_len > KVU_NAME_MAX)
        return UCS_ERR_INVALID_PARAM;
    kvu_worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return UCS_ERR_NO_MEMORY;
    w->inc = inc;
    w->name_len = name_len;
    memcpy(w->name, name, name_len);
    w->peer_errors = peer_errors;
    w->direct = direct;
    w->next_gen = 1;
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        goto fail;
    if (tls != NULL && tls[0] != 0)
        st = ucp_config_modify(cfg, "TLS", tls);
    if (st == UCS_OK && keepalive != NULL && keepalive[0] != 0)
        st = ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", keepalive);
    /* Over shared memory a rendezvous is to be the receiver's get: the
     * writer packs its buffer's address in every RTS, and the owner reads it
     * (cma's process_vm_readv) in its own worker's progress; UCX 1.13's
     * receiver falls back from a get that cannot start to an RTR without a
     * key (the data as active messages), never to the writer's put, when
     * the RTS carried an address. The v1 protocols are the ones that read
     * RNDV_SCHEME this way: the environment may not switch them. That was
     * verified on 1.13 alone, and later UCX retires the v1 protocols (and
     * may not know PROTO_ENABLE): on any other version, or where a setting
     * is refused, nothing is received straight into a registration, and
     * every rendezvous goes to a bounce buffer, as the fence needs. */
    if (st == UCS_OK && rndv_get) {
        unsigned major, minor, release;
        ucp_get_version(&major, &minor, &release);
        if (major != 1 || minor != 13 ||
            ucp_config_modify(cfg, "RNDV_SCHEME", "get_zcopy") != UCS_OK ||
            ucp_config_modify(cfg, "PROTO_ENABLE", "n") != UCS_OK)
            w->direct = 0;
    }
    if (st != UCS_OK) {
        ucp_config_release(cfg);
        goto fail;
    }
    ucp_params_t pp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_AM | (rma ? UCP_FEATURE_RMA : 0),
    };
    st = ucp_init(&pp, cfg, &w->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        goto fail;
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED, /* Go's lock serialises */
    };
    st = ucp_worker_create(w->ctx, &wp, &w->worker);
    if (st != UCS_OK) {
        ucp_cleanup(w->ctx);
        goto fail;
    }
    if ((st = set_handler(w, KVU_AM_MSG, am_msg)) != UCS_OK ||
        (st = set_handler(w, KVU_AM_PUT, am_put)) != UCS_OK ||
        (st = set_handler(w, KVU_AM_PUT_ACK, am_put_ack)) != UCS_OK ||
        (st = set_handler(w, KVU_AM_GET, am_get)) != UCS_OK ||
        (st = set_handler(w, KVU_AM_GET_REP, am_get_rep)) != UCS_OK) {
        ucp_worker_destroy(w->worker);
        ucp_cleanup(w->ctx);
        goto fail;
    }
    ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER};
    if (ucp_worker_query(w->worker, &wa) == UCS_OK && wa.max_am_header > KVU_HDR_FIXED + KVU_NAME_MAX) {
        size_t room = wa.max_am_header - KVU_HDR_FIXED - KVU_NAME_MAX;
        w->max_carry = room < KVU_CARRY_MAX ? room : KVU_CARRY_MAX;
    }
    *out = w;
    return UCS_OK;
fail:
    free(w);
    return st;
}

void kvu_close(kvu_worker *w) {
    ucp_worker_destroy(w->worker);
    ucp_cleanup(w->ctx);
    for (size_t i = 0; i < w->neps; i++)
        free(w->eps[i]);
    free(w->eps);
    free(w->regions);
    for (size_t i = 0; i < w->nspare; i++)
        free(w->spare[i].buf);
    kvu_events_clear(w);
    free(w->ev);
    free(w->acks);
    free(w);
}

ucs_status_t kvu_address(kvu_worker *w, void **addr, size_t *len) {
    return ucp_worker_get_address(w->worker, (ucp_address_t **)addr, len);
}

void kvu_address_release(kvu_worker *w, void *addr) {
    ucp_worker_release_address(w->worker, addr);
}

ucs_status_t kvu_connect(kvu_worker *w, const void *addr, const char *name, uint32_t name_len,
                         uint64_t inc, kvu_ep **out) {
    if (name_len == 0 || name_len > KVU_NAME_MAX)
        return UCS_ERR_INVALID_PARAM;
    if (w->neps == w->capeps) {
        size_t cap = w->capeps ? 2 * w->capeps : 16;
        kvu_ep **eps = realloc(w->eps, cap * sizeof *eps);
        if (eps == NULL)
            return UCS_ERR_NO_MEMORY;
        w->eps = eps;
        w->capeps = cap;
    }
    kvu_ep *e = calloc(1, sizeof *e);
    if (e == NULL)
        return UCS_ERR_NO_MEMORY;
    e->w = w;
    e->id = ++w->next_ep_id;
    e->inc = inc;
    e->name_len = name_len;
    memcpy(e->name, name, name_len);
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = addr,
        .err_mode = w->peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE,
        .err_handler = {.cb = ep_error, .arg = e},
    };
    ucs_status_t st = ucp_ep_create(w->worker, &ep, &e->ep);
    if (st != UCS_OK) {
        free(e);
        return st;
    }
    e->live = 1;
    w->eps[w->neps++] = e;
    *out = e;
    return UCS_OK;
}

uintptr_t kvu_ep_handle(kvu_ep *e) { return (uintptr_t)e->ep; }

/* op_from turns an nbx return into an op: done at once (NULL), failed (an
 * error pointer: no op), or in flight. */
static ucs_status_t op_from(void *r, kvu_op *op, kvu_op **out) {
    if (UCS_PTR_IS_ERR(r)) {
        free(op->copy);
        free(op);
        return UCS_PTR_STATUS(r);
    }
    op->req = r;
    if (r == NULL)
        op->done = 1;
    *out = op;
    return UCS_OK;
}

ucs_status_t kvu_ep_close(kvu_worker *w, kvu_ep *e, int force, kvu_op **out) {
    (void)w;
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    e->live = 0; /* nothing more is heard on it, and its errors are not reported */
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
    };
    return op_from(ucp_ep_close_nbx(e->ep, &p), op, out);
}

unsigned kvu_progress(kvu_worker *w, unsigned max, size_t done, kvu_event **ev, size_t *nev) {
    /* The first done events were answered by the last call and read since:
     * freed here, so that reading them costs no call of its own. Only those:
     * one recorded since — an endpoint's error, which UCX may raise inside a
     * send to a dead peer — is kept and answered now (freeing every event
     * here lost it, and the conformance kit's dead-peer property failed). */
    if (done > w->nev)
        done = w->nev;
    if (done > 0) {
        for (size_t i = 0; i < done; i++)
            free(w->ev[i].data);
        memmove(w->ev, w->ev + done, (w->nev - done) * sizeof *w->ev);
        w->nev -= done;
    }
    unsigned n = 0;
    acks_send(w); /* any owed outside a progress (a receive ended by a close) */
    for (unsigned i = 0; i < max; i++) {
        unsigned k = ucp_worker_progress(w->worker);
        if (k == 0)
            break;
        n += k;
    }
    acks_send(w);
    if (nev)
        *nev = w->nev;
    if (ev)
        *ev = w->ev;
    return n;
}

void kvu_events_clear(kvu_worker *w) {
    for (size_t i = 0; i < w->nev; i++)
        free(w->ev[i].data);
    w->nev = 0;
}

kvu_stats kvu_get_stats(kvu_worker *w) { return w->stats; }

int kvu_region_add(kvu_worker *w, void *base, size_t len, uint64_t *idx, uint64_t *gen) {
    size_t i;
    for (i = 0; i < w->nreg && w->regions[i].gen != 0; i++)
        ;
    if (i == w->nreg) {
        if (w->nreg == w->capreg) {
            size_t cap = w->capreg ? 2 * w->capreg : 16;
            kvu_region *r = realloc(w->regions, cap * sizeof *r);
            if (r == NULL)
                return UCS_ERR_NO_MEMORY;
            w->regions = r;
            w->capreg = cap;
        }
        w->nreg++;
    }
    /* A generation is never reused, so a key to a revoked registration never
     * names the slot's next one. */
    w->regions[i] = (kvu_region){.base = base, .len = len, .gen = w->next_gen++};
    *idx = i;
    *gen = w->regions[i].gen;
    return UCS_OK;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int kvu_region_revoke(kvu_worker *w, uint64_t idx, uint64_t gen, int64_t wait_ns) {
    if (idx >= w->nreg || w->regions[idx].gen != gen)
        return 1;
    /* Refuse every put from now on, then let the receives already writing
     * it finish: only this worker's progress writes it, here or later. */
    w->regions[idx].closing = 1;
    int waited = w->regions[idx].inflight > 0;
    if (waited) {
        int64_t deadline = now_ns() + wait_ns;
        while (w->regions[idx].inflight > 0 && now_ns() < deadline)
            if (ucp_worker_progress(w->worker) == 0)
                sched_yield(); /* the writer may need this CPU to send */
    }
    acks_send(w); /* the puts that completed while it waited */
    int fenced = w->regions[idx].inflight == 0;
    if (!fenced)
        w->stats.revokes_unfenced++; /* its receives complete as refused, into the memory */
    else if (waited)
        w->stats.revokes_waited++;
    w->regions[idx] = (kvu_region){0};
    return fenced;
}

ucs_status_t kvu_send_msg(kvu_worker *w, kvu_ep *e, const void *msg, size_t len, uint64_t count,
                          kvu_op **out) {
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    if (len) {
        op->copy = malloc(len);
        if (op->copy == NULL) {
            free(op);
            return UCS_ERR_NO_MEMORY;
        }
        memcpy(op->copy, msg, len);
    }
    size_t hlen = hdr_pack(w, op->hdr, KVU_AM_MSG, e->inc, 0, 0, 0, 0, count);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
    };
    return op_from(ucp_am_send_nbx(e->ep, KVU_AM_MSG, op->hdr, hlen, op->copy, len, &p), op, out);
}

size_t kvu_max_carry(kvu_worker *w) { return w->max_carry; }

ucs_status_t kvu_send_put(kvu_worker *w, kvu_ep *e, uint64_t seq, uint64_t target_inc,
                          uint64_t region, uint64_t gen, uint64_t off, const void *src, size_t len,
                          const void *carry, size_t carry_len, int eager, kvu_op **out) {
    if (carry_len > w->max_carry)
        return UCS_ERR_INVALID_PARAM;
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    size_t hlen = hdr_pack(w, op->hdr, KVU_AM_PUT, target_inc, seq, region, gen, off, carry_len);
    if (carry_len) {
        memcpy(op->hdr + hlen, carry, carry_len);
        hlen += carry_len;
    }
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_REPLY | (eager ? UCP_AM_SEND_FLAG_EAGER : 0),
    };
    return op_from(ucp_am_send_nbx(e->ep, KVU_AM_PUT, op->hdr, hlen, src, len, &p), op, out);
}

ucs_status_t kvu_send_get(kvu_worker *w, kvu_ep *e, uint64_t seq, uint64_t target_inc,
                          uint64_t region, uint64_t gen, uint64_t off, uint64_t len,
                          kvu_op **out) {
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    size_t hlen = hdr_pack(w, op->hdr, KVU_AM_GET, target_inc, seq, region, gen, off, len);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
    };
    return op_from(ucp_am_send_nbx(e->ep, KVU_AM_GET, op->hdr, hlen, NULL, 0, &p), op, out);
}

ucs_status_t kvu_mem_map(kvu_worker *w, void *base, size_t len, ucp_mem_h *mh, void **rkey,
                         size_t *rkey_len) {
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = base,
        .length = len,
    };
    ucs_status_t st = ucp_mem_map(w->ctx, &mp, mh);
    if (st != UCS_OK)
        return st;
    st = ucp_rkey_pack(w->ctx, *mh, rkey, rkey_len);
    if (st != UCS_OK)
        ucp_mem_unmap(w->ctx, *mh);
    return st;
}

void kvu_rkey_buffer_release(void *rkey) { ucp_rkey_buffer_release(rkey); }

ucs_status_t kvu_mem_unmap(kvu_worker *w, ucp_mem_h mh) { return ucp_mem_unmap(w->ctx, mh); }

ucs_status_t kvu_rkey_unpack(kvu_ep *e, const void *buf, ucp_rkey_h *out) {
    return ucp_ep_rkey_unpack(e->ep, buf, out);
}

void kvu_rkey_destroy(ucp_rkey_h rk) { ucp_rkey_destroy(rk); }

ucs_status_t kvu_put_os(kvu_ep *e, const void *src, size_t len, uint64_t raddr, ucp_rkey_h rk,
                        kvu_op **out) {
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    ucp_request_param_t p = {0};
    return op_from(ucp_put_nbx(e->ep, src, len, raddr, rk, &p), op, out);
}

ucs_status_t kvu_get_os(kvu_ep *e, void *dst, size_t len, uint64_t raddr, ucp_rkey_h rk,
                        kvu_op **out) {
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    ucp_request_param_t p = {0};
    return op_from(ucp_get_nbx(e->ep, dst, len, raddr, rk, &p), op, out);
}

ucs_status_t kvu_ep_flush(kvu_ep *e, kvu_op **out) {
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    ucp_request_param_t p = {0};
    return op_from(ucp_ep_flush_nbx(e->ep, &p), op, out);
}

ucs_status_t kvu_worker_flush(kvu_worker *w, kvu_op **out) {
    kvu_op *op = calloc(1, sizeof *op);
    if (op == NULL)
        return UCS_ERR_NO_MEMORY;
    ucp_request_param_t p = {0};
    return op_from(ucp_worker_flush_nbx(w->worker, &p), op, out);
}

int kvu_op_test(kvu_op *op) {
    if (op->done)
        return 1;
    ucs_status_t st = ucp_request_check_status(op->req);
    if (st == UCS_INPROGRESS)
        return 0;
    op->status = st;
    op->done = 1;
    ucp_request_free(op->req);
    op->req = NULL;
    return 1;
}

ucs_status_t kvu_op_settle(kvu_op *op) {
    if (!kvu_op_test(op))
        return UCS_INPROGRESS;
    ucs_status_t st = op->status;
    kvu_op_free(op);
    return st;
}

void kvu_op_abandon(kvu_op *op) {
    if (op->req != NULL)
        ucp_request_free(op->req); /* released by UCX when it completes */
    op->req = NULL;
}

void kvu_op_free(kvu_op *op) {
    if (op == NULL)
        return;
    free(op->copy);
    free(op);
}
