/*
 * kvready.h — the C ABI of kvready: decide when staged KV-cache memory is ready
 * to use and safe to reuse (libkvready.so, built by `make lib`; it links UCX's
 * libucp, Debian's libucx0, for peer transfers).
 *
 * Conventions
 *   - Every function returns a status (KVREADY_OK = 0, else a KVREADY_ERR_*),
 *     except kvready_abi_version. Out-parameters are written only on success.
 *   - Objects are named by integer handles (uint64_t, never 0): engines,
 *     staging memories, backends, devices and UCX transports. Leases are uint64_t handles too,
 *     scoped to their engine; they carry a generation, so a handle of a lease
 *     that was retired is refused (KVREADY_ERR_STALE_LEASE) and never reaches a
 *     newer lease. A bad handle of any kind returns a status; it never crashes.
 *   - No Go pointer ever crosses the boundary: kvready reads and writes only the
 *     caller's memory, during the call, and keeps only the pointers the caller
 *     documents as kept (staging slabs, the callback tables and their user data).
 *   - After a failing call, kvready_last_error(handle, ...) reads its message:
 *     per object handle (the engine's, the backend's, ...; a live handle passed
 *     where another kind is expected keeps the refusal too, under itself); for
 *     a call without a live handle (profile validation, names, creating an
 *     object, a handle closed or never issued), per calling thread (pass 0).
 *   - A length past the memory it names (n beyond the slot, or beyond the
 *     simulated device's memory; SIZE_MAX included) is KVREADY_ERR_INVALID,
 *     and the message names the bound. So is an input length past its own
 *     bound (a JSON document or an extent name: 16 MiB; a row: 4 GiB; names:
 *     2^24 at once) or one that runs past the end of the address space.
 *   - A capacity (cap: of a string buffer, of the arrays kvready_arrived,
 *     kvready_progress, kvready_changes, kvready_containments,
 *     kvready_recoveries, kvready_memory_groups, kvready_backend_tier_stats,
 *     kvready_backend_get, kvready_ucx_address, kvready_peer_capabilities and
 *     kvready_peer_expect fill)
 *     is compared unsigned: SIZE_MAX is a large buffer, never a negative one,
 *     and kvready writes only what it has (and a string's NUL) into it.
 *   - No length, capacity or count gives KVREADY_ERR_INTERNAL. INTERNAL is a
 *     bug in kvready (a recovered panic): its message is one line; the
 *     goroutine's stack goes to the log (Go's slog default logger: stderr).
 *
 * Threading
 *   - One owner thread calls every function taking an engine handle (the
 *     manager's scheduler thread). Different engines may have different owners.
 *   - Functions on memories, backends, devices and transports, and the name
 *     functions, are safe from any thread.
 *   - The engine wakes its owner through a pollable file descriptor
 *     (kvready_engine_wake_fd): readable when a round has work. The owner then
 *     calls kvready_progress (which drains it). It never has to poll on a timer.
 *   - Callbacks say below which thread calls them and whether they may block.
 */
#ifndef KVREADY_H
#define KVREADY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI revision this header describes; kvready_abi_version() answers it. */
#define KVREADY_ABI_VERSION 6

/* ---- statuses ---------------------------------------------------------- */

enum {
  KVREADY_OK = 0,
  KVREADY_ERR_INVALID = 1,      /* a malformed argument or request: nothing changed */
  KVREADY_ERR_BAD_HANDLE = 2,   /* no live object of the expected kind has the handle */
  KVREADY_ERR_STALE_LEASE = 3,  /* the lease was retired, or never existed */
  KVREADY_ERR_NOT_READY = 4,    /* readiness is not answerable for the lease (yet) */
  KVREADY_ERR_CLOSED = 5,       /* the engine is closed and admits no new lease */
  KVREADY_ERR_HALTED = 6,       /* the engine halted (fatal containment, broken invariant): see kvready_engine_new */
  KVREADY_ERR_DEVICE_LOST = 7,  /* the device is lost (also a device callback's answer) */
  KVREADY_ERR_UNGRANTABLE = 8,  /* quarantine left no run of slots that could hold it */
  KVREADY_ERR_PROFILE = 9,      /* the runtime profile is refused (every violation listed) */
  KVREADY_ERR_TIMEOUT = 10,     /* a wait ran out of time */
  KVREADY_ERR_REJECTED = 11,    /* backend callbacks: submission refused before anything escaped */
  KVREADY_ERR_REFUSED = 12,     /* device callbacks: the copy was refused before it was queued */
  KVREADY_ERR_BUFFER = 13,      /* the caller's buffer is too small (a length out-parameter says how much) */
  KVREADY_ERR_BACKEND = 14,     /* a backend call failed (opening one: see CONFIG and UNAVAILABLE) */
  KVREADY_ERR_CONFORMANCE = 15, /* the conformance kit found a broken rule */
  KVREADY_ERR_BUSY = 16,        /* the object is in use: an engine still refers to it */
  KVREADY_ERR_UNSUPPORTED = 17, /* the object cannot do that */
  KVREADY_ERR_FAILED = 18,      /* callbacks: a failure (an escaped submission, a failed query, ...) */
  KVREADY_ERR_INTERNAL = 19,    /* a bug in kvready (a recovered panic): one line; its stack is logged */
  KVREADY_ERR_LAYER_FAILED = 20, /* a copy of the layer waited for, or of an earlier one, failed: it never becomes ready */
  KVREADY_ERR_CONFIG = 21,      /* kvready_backend_open: the store's URL or one of its options is wrong: fix it (retrying changes nothing) */
  KVREADY_ERR_UNAVAILABLE = 22  /* kvready_backend_open: the store does not answer (down, unreachable): retry later */
};

/* ---- the lifecycle's vocabulary (the values of package readiness) ------- */

enum { KVREADY_FETCH = 1, KVREADY_PUBLISH = 2 };

/* A lease's state (docs/states.md). A staged lease waits for admission
 * (config.max_outstanding); a contained one, under KVREADY_POLICY_RECOVER, is
 * held out of use while its backend is asked again. */
enum {
  KVREADY_WAITING = 0, KVREADY_GRANTED, KVREADY_STAGED, KVREADY_ADMITTED, KVREADY_REQUESTED,
  KVREADY_SERVED, KVREADY_PARTIAL, KVREADY_MISSED, KVREADY_FAILED_STATE,
  KVREADY_ACCESS_FENCED, KVREADY_COPY_UNPROVEN, KVREADY_LOGICALLY_COMPLETE,
  KVREADY_CONTAINED, KVREADY_QUARANTINED, KVREADY_RELEASED,
  KVREADY_NUM_STATES
};

/* The outcome an engine latched for a lease. A miss is never a failure; a
 * cancellation is never folded into a failure. */
enum {
  KVREADY_OUTCOME_NONE = 0, KVREADY_OUTCOME_SERVED, KVREADY_OUTCOME_PARTIAL,
  KVREADY_OUTCOME_MISSED, KVREADY_OUTCOME_FAILED, KVREADY_OUTCOME_CANCELLED,
  KVREADY_OUTCOME_REJECTED, KVREADY_OUTCOME_TIMEOUT, KVREADY_OUTCOME_VIOLATION,
  KVREADY_NUM_OUTCOMES
};

/* What kvready_wait waits for. */
enum {
  KVREADY_UNTIL_SETTLED = 1,  /* logically complete, quarantined, or ungrantable: release it then */
  KVREADY_UNTIL_RELEASED = 2, /* its slots are back (released) or out for good (quarantined) */
  KVREADY_UNTIL_GRANTED = 3   /* it holds its staging slots (or never will): a layerwise publish takes layers then */
};

/* A cancellation request's disposition (contract +cancel-request-v1). */
enum { KVREADY_CANCEL_UNSUPPORTED = 1, KVREADY_CANCEL_REQUESTED = 2 };
/* What a backend's try_quiesce answers: only waiting would tell (kvready asks
 * quiesce on a worker thread), access ended (quiesce's *proven = 1), or it
 * cannot be established (quiesce's *proven = 0). */
enum { KVREADY_ACCESS_UNKNOWN = 0, KVREADY_ACCESS_ENDED = 1, KVREADY_ACCESS_UNPROVEN = 2 };

/* A backend's answer to a poll: pending, or one of the contract's outcomes. */
enum { KVREADY_PENDING = 0, KVREADY_DELIVERED = 1, KVREADY_ANSWER_FAILED = 2, KVREADY_CANCELLED = 3 };

/* The containment policy (SPEC §4 rule 5): what the engine does when a
 * lease's containment deadline passes with the backend's access or a local
 * copy unproven. Every policy queues one containment event for the lease
 * (kvready_containments) and never frees what is unproven. */
enum {
  KVREADY_POLICY_QUARANTINE = 0, /* the default: the lease's slots leave circulation for ever; the rest goes on */
  KVREADY_POLICY_FATAL = 1,      /* the reference's stance: the slots are quarantined and the engine halts */
  KVREADY_POLICY_RECOVER = 2     /* opt-in: a contained lease is asked again every recover_every_ns; a later
                                    proof (with every copy landed) releases its slots: a recovery event */
};

/* A device event's status. */
enum { KVREADY_EVENT_PENDING = 0, KVREADY_EVENT_COMPLETE = 1, KVREADY_EVENT_FAILED = 2 };

/* Where one layer of a fetch stands (kvready_layer_ready; SPEC §4 rule 16). */
enum {
  KVREADY_LAYER_PENDING = 0, /* its copies are not known to have landed yet */
  KVREADY_LAYER_READY = 1,   /* its copies' event completed (or the lease's readiness is answerable) */
  KVREADY_LAYER_FAILED = 2,  /* a copy of it or of an earlier layer failed: it never becomes ready */
  KVREADY_LAYER_NEVER = 3    /* the lease was quarantined, or released before its copies were issued */
};

/* A lease's physical disposition (SPEC §4 rule 19, the reference's words): whether
 * anything — its backend, or a local copy — may still touch its memory. Apart from
 * the outcome: a cancelled lease is QUIESCING until its backend's access is proven
 * over. Memory is reusable only in NOT_EXPOSED and the QUIESCED_* dispositions. */
enum {
  KVREADY_NOT_EXPOSED = 0,      /* nothing was ever handed the memory, and nothing touches it */
  KVREADY_ACTIVE = 1,           /* an accessor may be touching it and its outcome is pending */
  KVREADY_QUIESCING = 2,        /* the outcome is latched; the end of an accessor's access is awaited */
  KVREADY_QUIESCED_SUCCESS = 3, /* every accessor's access is proven over, after a transfer that did not fail */
  KVREADY_QUIESCED_FAILURE = 4, /* every accessor's access is proven over, after a transfer that failed */
  KVREADY_IN_DOUBT = 5          /* an accessor's end can never be proven: never reusable */
};

/* What a cancel did to the lease's logical lifecycle (kvready_cancel_with_result;
 * the reference's LogicalDisposition). It never says whether the memory may be
 * reused: the physical disposition does. 0 is no answer. */
enum {
  KVREADY_LOGICAL_ACCEPTED = 1,         /* taken: Cancelled latched (a submission handed out: once answered), or withdrawn */
  KVREADY_LOGICAL_ALREADY_TERMINAL = 2, /* nothing left to cancel: outcome or fence latched, or released (and still readable) */
  KVREADY_LOGICAL_NOT_FOUND = 3,        /* the handle names no lease the engine can read: its physical is IN_DOUBT */
  KVREADY_LOGICAL_REJECTED = 4          /* the engine refused the call itself: it halted */
};

#define KVREADY_NAME_SIZE 54
#define KVREADY_KEY_SIZE 32
#define KVREADY_LAYOUT_ID_SIZE 32
#define KVREADY_REASON_SIZE 256
#define KVREADY_MAX_STATES 16

/* ---- plain data ---------------------------------------------------------- */

/* One pool group of staging memory: slots of slot_bytes bytes. */
typedef struct kvready_group {
  int64_t slots;
  int64_t slot_bytes;
} kvready_group;

/* One block of one layer group that a request moves. */
typedef struct kvready_row {
  uint8_t name[KVREADY_NAME_SIZE]; /* the lender's name (kvready_identity_name) */
  uint8_t _pad[2];
  int32_t group;                   /* local layer group (= staging pool group) */
  int32_t block;                   /* block ordinal in the request's sequence */
  uint64_t device;                 /* device address of the block (opaque to kvready) */
} kvready_row;

/* One lease request. rows is read during kvready_lend only. */
typedef struct kvready_request {
  int32_t kind;              /* KVREADY_FETCH or KVREADY_PUBLISH */
  int32_t known_blocks;      /* fetch: leading blocks the request already has */
  int64_t deadline_unix_ns;  /* 0: the engine's request timeout after submission; else at most 2^62 (the year 2116) */
  int32_t is_last;           /* the extent's sequence-end flag */
  int32_t layerwise;         /* publish, 1: the owner reports each layer computed (kvready_layer_computed), and
                                each layer's device->staging copies follow its report; 0: one copy of every row */
  const kvready_row *rows;
  uint64_t n_rows;
} kvready_request;

/* An engine's assembly. Durations in nanoseconds; 0 takes the default.
 * kvready_engine_config_defaults fills one with every default (the library's
 * own, readiness.Defaults): start from it, or from zeros. Each setting is a
 * field of readiness.Config, named here in snake case (durations with _ns;
 * Containment is policy); a test fails when one is missing here or its
 * default below differs from the library's. */
typedef struct kvready_engine_config {
  uint64_t memory;        /* staging memory (kvready_memory_over); required */
  uint64_t fetcher;       /* backend serving fetches, or 0 */
  uint64_t publisher;     /* backend serving publishes, or 0 */
  uint64_t device;        /* device carrying the copies; required */
  int32_t tokens_per_block;
  int32_t quiesce_workers;
  /* Each duration at most 2^61 ns (about 73 years): the engine adds them to
   * its clock in int64 ns. 0 takes the default. */
  int64_t request_timeout_ns;   /* default 30 s */
  int64_t drain_grace_ns;       /* default 10 s */
  int64_t quiesce_timeout_ns;   /* default 1 s */
  int64_t retry_backoff_ns;     /* default 1 ms */
  int64_t max_retry_backoff_ns; /* default 250 ms */
  int32_t keep_released;        /* released leases kept readable; default 1024 */
  int32_t policy;               /* KVREADY_POLICY_*; 0 (the default): quarantine */
  int64_t recover_every_ns;     /* KVREADY_POLICY_RECOVER: how often a contained lease is asked again; default 1 s */
  int32_t max_outstanding;      /* submissions outstanding at the backends at once; a lease beyond it waits, before
                                   its submission (its deadline not started). 0: the backend's own limit where it
                                   reports one, else no bound */
  int32_t _pad;
  /* The layout document (JSON, as kvready_layout_id reads it; layout_len
   * bytes, read during kvready_engine_new only), or NULL: a fetch's copies
   * then go layer by layer (SPEC §4 rule 16: each layer's byte ranges of
   * every served row, then one event; kvready_layer_ready). Layer group g is
   * staged in the memory's group g (one memory group per layer group, each of
   * its pool group's slot width, even where layer groups share a pool group).
   * tokens_per_block 0 takes the layout's; another value than the layout's is
   * refused. NULL: whole slots, one layer. */
  const char *layout;
  uint64_t layout_len;
} kvready_engine_config;

/* A lease as the engine sees it (the same before and after its release). */
typedef struct kvready_lease_info {
  uint64_t lease;
  int32_t kind;
  int32_t state;              /* KVREADY_WAITING ... KVREADY_RELEASED */
  int32_t outcome;            /* KVREADY_OUTCOME_* */
  int32_t by_peer;            /* a cancellation the peer made */
  int32_t release_requested;  /* released by the owner, waiting for its fence */
  int32_t ungrantable;        /* taken out of the line: release it */
  int32_t exposed;            /* the backend was handed its slots */
  int32_t fenced;             /* the backend's access was proven over (or never began) */
  int32_t cancel_disposition; /* 0: no answer; else KVREADY_CANCEL_* */
  int32_t rows;
  int32_t contained;          /* its containment deadline passed with something unproven (recovered or not) */
  int32_t physical;           /* its physical disposition: KVREADY_NOT_EXPOSED ... KVREADY_IN_DOUBT */
  uint64_t reason_len;        /* the full length of reason (it is cut to fit) */
  char reason[KVREADY_REASON_SIZE];       /* NUL-terminated */
  char cancel_error[KVREADY_REASON_SIZE]; /* NUL-terminated; empty if none */
} kvready_lease_info;

/* Where a fetched request may resume: any p with restart_floor <= p <= usable_until. */
typedef struct kvready_interval {
  int64_t restart_floor;
  int64_t usable_until;
} kvready_interval;

/* What one kvready_progress round did. */
typedef struct kvready_round {
  int64_t moves;        /* lifecycle moves made */
  int64_t changed;      /* entries written to the caller's changed arrays */
  int64_t more;         /* changed leases that did not fit: call kvready_changes */
  int64_t containments; /* containment events queued (kvready_containments reads them) */
  int64_t recoveries;   /* recovery events queued (kvready_recoveries reads them) */
  int32_t halted;       /* the engine halted: every further change is refused */
  int32_t drained;      /* a closed engine drained: nothing can change any more */
} kvready_round;

/* A lease contained: its access or a copy stayed unproven past its deadline;
 * its slots are held out of circulation. */
typedef struct kvready_containment {
  uint64_t lease;
  int64_t slots;
  int64_t deadline_unix_ns;
  char reason[KVREADY_REASON_SIZE];
} kvready_containment;

/* What one backend did that the contract forbids (readiness.BackendFaults):
 * each costs at most that backend's own leases, never the engine. */
typedef struct kvready_backend_faults {
  uint64_t violations;           /* answers taken as contract violations */
  uint64_t panics;               /* failures kvready recovered inside a call into it */
  uint64_t repeated_completions; /* kvready_attempt_done again for an attempt: dropped */
  uint64_t early_completions;    /* a completion poll did not bear out */
} kvready_backend_faults;

/* The engine's counters (readiness.Stats): each counter of readiness.Stats
 * in the field of its name in snake case (a test fails when one is missing);
 * the latency histograms are not here (package metrics exports them). */
typedef struct kvready_stats {
  int64_t leases[KVREADY_MAX_STATES]; /* live leases by state */
  uint64_t outcomes[KVREADY_MAX_STATES]; /* latched outcomes by KVREADY_OUTCOME_* */
  uint64_t lent, released, quarantined_leases;
  int64_t slots_free, slots_held, slots_quarantined;
  uint64_t refused, stale_evidence, violations, unproven;
  uint64_t quiesce_calls, quiesce_retries, quiesce_timeouts;
  uint64_t cancel_requests, cancel_errors, ungrantable, containments, invariant_breaches;
  uint64_t recovered;        /* contained leases proven over after all (KVREADY_POLICY_RECOVER) */
  int64_t outstanding;       /* submissions outstanding at the backends now */
  int64_t max_outstanding;   /* their bound (0: none) */
  int32_t halted;            /* the engine halted (kvready_engine_report says why) */
  int32_t _pad;
  kvready_backend_faults fetcher_faults, publisher_faults;
  uint64_t handoffs;         /* thread hand-offs: work to a worker, the owner woken by another thread */
  uint64_t quiesce_probes;   /* try_quiesce calls asked on the owner thread */
  int64_t slots_inherited;   /* slots earlier engines over the same memory left out of circulation,
                                found at kvready_engine_new: never lent; counted in slots_quarantined */
} kvready_stats;

/* What an engine still holds, and whether its memory may be handed back (the
 * reference's ShutdownResult). */
typedef struct kvready_report {
  int64_t held[KVREADY_MAX_STATES];
  int64_t slots_held;
  int64_t slots_quarantined;
  int32_t drained;
  int32_t halted;                        /* the engine halted: it releases nothing any more */
  char halt_reason[KVREADY_REASON_SIZE]; /* why, NUL-terminated (cut to fit); empty while it runs */
  int64_t in_doubt;                      /* leases whose memory is not proven reusable (ACTIVE, QUIESCING,
                                            IN_DOUBT; quarantined ones included): the reference's
                                            in_doubt_context_count */
  int32_t physical;                      /* the memory as a whole: KVREADY_IN_DOUBT while in_doubt > 0 or a
                                            slot is quarantined; else KVREADY_QUIESCED_SUCCESS, or
                                            KVREADY_NOT_EXPOSED if nothing was ever handed to a backend */
  int32_t safe_to_release;               /* drained, nothing in doubt, nothing quarantined: the memory may
                                            be handed back to its owner */
} kvready_report;

/* What a cancel answered, the logical and the physical result apart (SPEC §4
 * rule 19; the reference's CancelResult). */
typedef struct kvready_cancel_result {
  int32_t logical;       /* KVREADY_LOGICAL_ACCEPTED ... KVREADY_LOGICAL_REJECTED */
  int32_t physical;      /* the lease's disposition right after the cancel: KVREADY_NOT_EXPOSED ...
                            KVREADY_IN_DOUBT (IN_DOUBT for a handle the engine cannot name) */
  int32_t retryable;     /* a later cancel could be taken: always 0 (every refusal is final) */
  int32_t safe_to_reuse; /* physical is NOT_EXPOSED or QUIESCED_*: the memory may be reused now */
  char reason[KVREADY_REASON_SIZE]; /* why, NUL-terminated (cut to fit) */
} kvready_cancel_result;

/* One unit of an extent handed to a backend. */
typedef struct kvready_unit {
  uint8_t name[KVREADY_NAME_SIZE];
  uint8_t _pad[2];
  int32_t group; /* local_group: the staging pool group */
  int32_t local; /* the staging slot index in it (kvready_memory_write/_row) */
} kvready_unit;

/* A backend's answer to a poll. served names go to the poll's buffer. */
typedef struct kvready_answer {
  int32_t kind;       /* KVREADY_PENDING, KVREADY_DELIVERED, KVREADY_ANSWER_FAILED, KVREADY_CANCELLED */
  int32_t by_peer;    /* KVREADY_CANCELLED: the peer cancelled */
  uint64_t served;    /* KVREADY_DELIVERED: names written to the buffer (0: a miss) */
  char reason[KVREADY_REASON_SIZE]; /* KVREADY_ANSWER_FAILED: why (NUL-terminated) */
} kvready_answer;

/* What one tier of a backend of tiers (kvready_backend_open_tiers) did since
 * it was opened: backend/tiers' TierStats, each field in the field of its
 * name in snake case (kvready_backend_tier_stats fills them, in tier order).
 * Counts are of units (rows) unless they say otherwise. */
#define KVREADY_TIER_NAME_SIZE 32
typedef struct kvready_tier_stats {
  char name[KVREADY_TIER_NAME_SIZE]; /* the tier's URL scheme ("mem", "redis", ...), "-i" added when an
                                        earlier tier has it ("mem-1"); NUL-terminated */
  uint64_t handed;          /* units fetches handed it: each is then a hit, a miss or a failure */
  uint64_t hits;            /* units it served */
  uint64_t misses;          /* units it answered (delivered) without serving */
  uint64_t failed;          /* units of its fetches that failed, were cancelled, gave no outcome or broke
                               the contract: never counted as misses */
  uint64_t published;       /* units publications wrote through into it (accepted) */
  uint64_t publish_failed;  /* units of publications it failed or cancelled */
  uint64_t promoted;        /* units promoted into it from a lower tier that served them (accepted) */
  uint64_t promote_failed;  /* units of promotions it failed */
  uint64_t promote_skipped; /* units not promoted: the lower tier's access was not proven in time, or a
                               cancel came first */
  uint64_t rejected;        /* its submissions refused before anything escaped (a breaker open, ...) */
  uint64_t no_outcome;      /* its attempts that gave no outcome within the backend's wait (30 s) */
  uint64_t violations;      /* its breaches of the contract: each cost only its own attempt */
  uint64_t cancel_errors;   /* cancel requests to it that erred */
  uint64_t evictions;       /* rows it evicted to stay within its bound (a mem tier) */
  int64_t bytes;            /* bytes of the rows it holds, when sized */
  int32_t sized;            /* 1: it reports bytes (a mem tier); 0: bytes is 0, not known (a shared store) */
  int32_t _pad;
} kvready_tier_stats;

/* ---- a backend written by the embedder ------------------------------------
 * Every callback gets the table's user pointer first. A callback that returns
 * an error may write a NUL-terminated message into err (err_cap bytes).
 * Callbacks must never call a function taking an engine handle.
 */
typedef struct kvready_backend_callbacks {
  void *user;
  /* Owner thread; must not block. Submit a fetch into the units' staging
   * slots. extent_name and units are valid during the call only (copy what
   * you keep; resolve slots with kvready_memory_write/_row). Return KVREADY_OK
   * with a nonzero *attempt for every submission whose effects escaped
   * (report a failure through poll), KVREADY_ERR_REJECTED if nothing escaped,
   * anything else if it failed with effects unknown. NULL: no fetches. */
  int (*fetch)(void *user, const uint8_t *extent_name, size_t name_len,
               const kvready_unit *units, size_t n_units, int32_t is_last,
               uint64_t *attempt, char *err, size_t err_cap);
  /* As fetch, for a publication that reads the units' slots. NULL: none. */
  int (*publish)(void *user, const uint8_t *extent_name, size_t name_len,
                 const kvready_unit *units, size_t n_units, int32_t is_last,
                 uint64_t *attempt, char *err, size_t err_cap);
  /* Any thread, concurrently; must not block. Answer the attempt's outcome
   * (answer->kind KVREADY_PENDING while there is none); for KVREADY_DELIVERED
   * write the fully delivered names, KVREADY_NAME_SIZE bytes each, into
   * served and their count in answer->served. served_cap is one more than
   * the extent's units: more names than units means a name never asked for,
   * and one such name is room enough to report it (a violation all the
   * same). Once answered, answer the same for ever. A nonzero return is a
   * contract violation: nothing the attempt says is trusted. */
  int (*poll)(void *user, uint64_t attempt, kvready_answer *answer,
              uint8_t *served, size_t served_cap);
  /* A worker thread (never the owner's); MAY BLOCK, up to timeout_ns. Set
   * *proven = 1 only when none of the attempts will ever touch staging memory
   * again; 0 (or an error) proves nothing and you will be asked again. */
  int (*quiesce)(void *user, const uint64_t *attempts, size_t n,
                 int64_t timeout_ns, int32_t *proven, char *err, size_t err_cap);
  /* Owner thread; must not block. Optional (NULL: unsupported). Ask the
   * attempt, best effort, to stop; *disposition = KVREADY_CANCEL_*. It never
   * ends memory access: only quiesce does. */
  int (*cancel)(void *user, uint64_t attempt, int32_t *disposition, char *err, size_t err_cap);
  /* Any thread. Optional. kvready holds the attempt no more: drop it. */
  void (*forget)(void *user, uint64_t attempt);
  /* Any thread. Optional; the conformance kit needs put (fetch) and uses get
   * (publish): store a row under (extent, name), read one back (*found = 0 if
   * absent; KVREADY_ERR_BUFFER with *len if it does not fit). */
  int (*put)(void *user, const uint8_t *extent_name, size_t name_len,
             const uint8_t *name, const uint8_t *row, size_t n);
  int (*get)(void *user, const uint8_t *extent_name, size_t name_len,
             const uint8_t *name, uint8_t *row, size_t cap, size_t *len, int32_t *found);
  /* Called once, from the thread that closes the backend. Optional. */
  void (*close)(void *user);
  /* 1: the backend calls kvready_attempt_done once each attempt's outcome is
   * pollable, so kvready never polls it on a timer. 0: kvready polls. */
  int32_t notifies;
  int32_t _pad;
  /* Owner thread; must not block. Optional (NULL: every proof is a quiesce
   * on a worker thread). quiesce's question answered now: *access =
   * KVREADY_ACCESS_ENDED when none of the attempts will ever touch staging
   * memory again, KVREADY_ACCESS_UNPROVEN when that cannot be established,
   * KVREADY_ACCESS_UNKNOWN when only waiting would tell — kvready then asks
   * quiesce on a worker. Never contradict quiesce. A backend that knows at
   * once whether its transfers ended (its own bookkeeping) spares the owner a
   * thread hand-off per proof. */
  int (*try_quiesce)(void *user, const uint64_t *attempts, size_t n, int32_t *access,
                     char *err, size_t err_cap);
} kvready_backend_callbacks;

/* ---- a device written by the embedder -------------------------------------
 * The copies of one engine go through one in-order queue (a CUDA stream). */
typedef struct kvready_device_callbacks {
  void *user;
  /* Owner thread; must not block. Queue a copy of nbytes between staging
   * (host, caller memory kvready lent) and the device address: to_device 1 is
   * host-to-device. The host memory stays valid and untouched by kvready until
   * an event recorded after the copy reads complete. Return KVREADY_ERR_REFUSED
   * if nothing was queued (nothing touches the memory), KVREADY_ERR_DEVICE_LOST
   * on a lost device, anything else if work may have been queued. */
  int (*copy)(void *user, int32_t to_device, uint64_t device, void *host, size_t nbytes);
  /* Owner thread; must not block. Record an event after every copy queued so
   * far and return the embedder's token for it in *event. */
  int (*record)(void *user, uint64_t *event);
  /* Any thread (the owner's and kvready's watcher); must not block. Answer
   * KVREADY_EVENT_PENDING, _COMPLETE or _FAILED in *status. An event reads
   * complete, for kvready, only once it and every event recorded before it
   * have completed, whatever order they complete in. */
  int (*query)(void *user, uint64_t event, int32_t *status);
  /* Any thread. Optional. kvready no longer needs the event. */
  void (*release_event)(void *user, uint64_t event);
  /* Owner thread. Optional (NULL: any nonzero address). Can the queue copy
   * nbytes at device? Return KVREADY_OK or KVREADY_ERR_INVALID with a message. */
  int (*addressable)(void *user, uint64_t device, size_t nbytes, char *err, size_t err_cap);
  /* Owner thread. Optional. *lost = 1 once the device is lost (write why). */
  int (*lost)(void *user, int32_t *lost, char *reason, size_t reason_cap);
  /* Called once, from the thread that closes the device. Optional. */
  void (*close)(void *user);
  /* Owner thread; must not block. Optional (NULL: a layerwise publish's
   * layers are reported computed with event 0 only, once synchronised).
   * Hold every copy queued on the queue after this call until event — the
   * embedder's own token, as kvready_layer_computed was handed it: a CUevent
   * recorded on the manager's compute stream (cuStreamWaitEvent) — resolved;
   * if it failed, the copies behind it must read failed too. Return
   * KVREADY_OK, or anything else if the queue cannot wait for it (nothing is
   * then queued for that layer: its copies are refused). */
  int (*wait)(void *user, uint64_t event);
} kvready_device_callbacks;

/* The conformance kit: build a fresh backend over the kit's staging memory. */
typedef int (*kvready_make_backend)(void *user, uint64_t memory, uint64_t *backend);

/* One of kvready's log lines (kvready_set_log): level is Go log/slog's —
 * KVREADY_LOG_DEBUG, _INFO, _WARN, _ERROR (a value between two is the lower
 * one's) — and msg the line, "message key=value ...", without the time or the
 * level, len bytes, NUL-terminated, valid only during the call. Called on any
 * thread, possibly on several at once, and possibly while kvready holds its
 * own locks: it must not block for long and must not call kvready. */
typedef void (*kvready_log_fn)(void *user, int32_t level, const char *msg, size_t len);
enum { KVREADY_LOG_DEBUG = -4, KVREADY_LOG_INFO = 0, KVREADY_LOG_WARN = 4, KVREADY_LOG_ERROR = 8 };

/* ---- the library ---------------------------------------------------------- */

/* KVREADY_ABI_VERSION of the library (a bare call, also the benchmarks' unit). */
uint32_t kvready_abi_version(void);
/* kvready's version and pinned contract revision, NUL-terminated
 * (KVREADY_ERR_BUFFER, *len the full length, when cap does not hold it). */
int kvready_version(char *buf, size_t cap, size_t *len);
/* The message of the last failing call on handle (0: the calling thread's),
 * NUL-terminated; *len is its full length. A cap that does not hold it
 * returns KVREADY_ERR_BUFFER (the message cut to fit), without replacing it. */
int kvready_last_error(uint64_t handle, char *buf, size_t cap, size_t *len);
/* Stop calling the embedder's callbacks for good (process exit): polls answer
 * pending, quiesce proves nothing, copies are refused. */
int kvready_detach_callbacks(void);
/* Send kvready's log lines (containments, quarantines, contract violations, a
 * halt, ...; and anything else the library's Go code logs) to fn instead of
 * the process's stderr, from now on and for every engine; NULL sends them back
 * to stderr (a line already being delivered may still reach the previous fn).
 * Once kvready_detach_callbacks was called they go to stderr. The Python
 * package sets one that forwards to logging.getLogger("kvready"). */
int kvready_set_log(kvready_log_fn fn, void *user);

/* ---- profiles, layouts, names --------------------------------------------- */

/* KVREADY_OK, or KVREADY_ERR_PROFILE with every violated field in the error
 * (len: at most 16 MiB, as kvready_layout_id's; more is KVREADY_ERR_INVALID). */
int kvready_profile_validate(const char *json, size_t len);
/* The layout id (LAYOUT_ID_VERSION 2) of a layout document, and its tokens per block. */
int kvready_layout_id(const char *json, size_t len, uint8_t id[KVREADY_LAYOUT_ID_SIZE], int32_t *tokens_per_block);
/* Derive one name: scope and layout id bytes, the local layer groups' global
 * layer ids (group g has layers[offsets[g] .. offsets[g+1]), n_groups+1
 * offsets), each group's shard (count, index), the group and the 32-byte key. */
int kvready_name(const uint8_t *scope, size_t scope_len, const uint8_t *layout_id, size_t layout_id_len,
                 const int32_t *layers, const int32_t *offsets, size_t n_groups,
                 const int32_t *shard_counts, const int32_t *shard_indexes,
                 int32_t group, const uint8_t key[KVREADY_KEY_SIZE], uint8_t name[KVREADY_NAME_SIZE]);
/* Many names of one group at once: n keys of 32 bytes -> n names of 54. */
int kvready_names(const uint8_t *scope, size_t scope_len, const uint8_t *layout_id, size_t layout_id_len,
                  const int32_t *layers, const int32_t *offsets, size_t n_groups,
                  const int32_t *shard_counts, const int32_t *shard_indexes,
                  int32_t group, const uint8_t *keys, size_t n, uint8_t *names);

/* ---- staging memory -------------------------------------------------------- */

/* Staging memory over the caller's slabs, one per pool group (slabs[g] at
 * least slots * slot_bytes bytes). kvready keeps the pointers: the slabs stay
 * valid and unmoved until kvready_memory_close. On a GPU they must be pinned. */
int kvready_memory_over(const kvready_group *groups, size_t n_groups, void **slabs, uint64_t *memory);
/* Copy into / out of slot local of pool group group, at offset
 * (KVREADY_ERR_INVALID unless offset + n <= the slot's size). */
int kvready_memory_write(uint64_t memory, int32_t group, int64_t local, int64_t offset, const void *src, size_t n);
int kvready_memory_read(uint64_t memory, int32_t group, int64_t local, int64_t offset, void *dst, size_t n);
/* The address and size of a slot of caller memory (KVREADY_ERR_UNSUPPORTED
 * for the conformance kit's memory, which is reached through write/read). */
int kvready_memory_row(uint64_t memory, int32_t group, int64_t local, void **row, size_t *nbytes);
/* The pool groups: n_groups of them (KVREADY_ERR_BUFFER, with *n_groups, if
 * more than cap). */
int kvready_memory_groups(uint64_t memory, kvready_group *groups, size_t cap, size_t *n_groups);
int kvready_memory_close(uint64_t memory);

/* ---- backends -------------------------------------------------------------- */

/* A Go backend by URL, over the staging memory it resolves units into:
 *   "mem", "mem:?capacity=N"            in-process store (backend/mem): at most N rows,
 *   "mem:?capacity_bytes=N"              or N bytes of rows (both may be given); the least
 *                                        recently used rows are evicted to make room
 *   "redis://host:port[/db]", "rediss://...", "unix:///path"  a shared store (backend/redis);
 *                                        a store that stops answering is held for down
 *                                        and submissions are rejected at once ("store
 *                                        unavailable") until a PING answers: query
 *                                        breaker_failures=N (connection errors in a row,
 *                                        default 3, 0 off; one call with no reply within
 *                                        its bound is enough), breaker_probe=100ms,
 *                                        breaker_probe_max=2s
 * A wrong URL or query value (a key given twice included) is KVREADY_ERR_CONFIG;
 * a store that does not answer is KVREADY_ERR_UNAVAILABLE (retry later);
 * and, in the test library only (libkvready_testkit.so; KVREADY_ERR_UNSUPPORTED
 * from libkvready.so):
 *   "mem:?mode=M&capacity=N"            backend/mem with a fault on every submission:
 *                                        M a mode name of backend/mem (miss, fail,
 *                                        cancel-by-peer, ...) or a broken one of
 *                                        backend/mem/memtest (write-after-quiesce, ...)
 *   "instant:"                           answers at once, serves every unit, writes
 *                                        nothing (benchmarks and smoke tests) */
int kvready_backend_open(const char *url, uint64_t memory, uint64_t *backend);
/* A backend the embedder implements (the table is copied; user is kept). */
int kvready_backend_new(const kvready_backend_callbacks *callbacks, uint64_t memory, uint64_t *backend);
/* Any thread: the attempt's outcome is pollable now (callbacks.notifies). */
int kvready_attempt_done(uint64_t backend, uint64_t attempt);
/* Store / read a row directly (mem, redis and embedder backends with put/get). */
int kvready_backend_put(uint64_t backend, const uint8_t *extent_name, size_t name_len,
                        const uint8_t name[KVREADY_NAME_SIZE], const void *row, size_t n);
int kvready_backend_get(uint64_t backend, const uint8_t *extent_name, size_t name_len,
                        const uint8_t name[KVREADY_NAME_SIZE], void *row, size_t cap, size_t *len, int32_t *found);
/* KVREADY_ERR_BUSY while an engine uses it. */
int kvready_backend_close(uint64_t backend);
/* A backend of tiers (backend/tiers) from one call: urls[0] first, each
 * opened as kvready_backend_open opens it, over the same staging memory — a
 * bounded local tier in front of the shared store:
 *     const char *urls[] = {"mem:?capacity_bytes=8589934592", "redis://127.0.0.1:6379/0"};
 *     kvready_backend_open_tiers(urls, 2, memory, &backend);
 * A fetch asks the first tier for every unit, and the next only for the units
 * the tiers before it did not serve, within the same lease; a unit a lower
 * tier served is promoted (published) into the tiers above it from the
 * staging rows while the lease holds them. A publish writes through to every
 * tier. The lease's slots return only once every tier's access is proven
 * over (SPEC §4 rule 19). A tier's failure is the lease's failure, naming the
 * tier, never a miss: docs/tiers.md. Use the handle as any backend's
 * (config.fetcher and .publisher, kvready_backend_put — into every tier —
 * kvready_backend_get — from the first tier holding the row —,
 * kvready_backend_close, which closes every tier). n is 1 to 16; a NULL URL
 * is KVREADY_ERR_INVALID. A tier that fails to open fails the call with that
 * tier's status (KVREADY_ERR_CONFIG, _UNAVAILABLE, _INVALID, _UNSUPPORTED, as
 * kvready_backend_open's), the message naming its index and URL (a password
 * hidden); the tiers opened before it are closed: nothing stays open. */
int kvready_backend_open_tiers(const char *const *urls, size_t n, uint64_t memory, uint64_t *backend);
/* Each tier's counters, in tier order, into stats (cap entries); *n (may be
 * NULL) is how many tiers there are. KVREADY_ERR_BUFFER, with *n, when cap
 * does not hold them; KVREADY_ERR_UNSUPPORTED for a backend that is not a
 * backend of tiers. */
int kvready_backend_tier_stats(uint64_t backend, kvready_tier_stats *stats, size_t cap, size_t *n);

/* ---- peer transfers over UCX (docs/ucx.md, docs/transfers.md) ----------------
 * A prefill process moves a request's KV pages straight into a decode
 * process's staging slots over UCX (libucp: Debian's libucx0, which
 * libkvready.so links), through the same fence as every backend: the decode
 * side's slots return to its engine only once every writer is proven settled
 * (its flush and report, or a revocation that fences), and the prefill
 * side's source slots only once every put that reads them completed (the
 * Sender's Quiesce). Go packages transfer/ucx (the transport) and
 * backend/peer (the Receiver and the Sender) do the work.
 *
 * Assembly, on each side: one transport (kvready_ucx_new), one peer backend
 * over it (kvready_peer_receiver_new on the decode side, _sender_new on the
 * prefill side; one backend per transport), used as the engine's
 * config.fetcher (a receiver) or config.publisher (a sender). Then, out of
 * band (a pipe, a control channel; no port is opened): each side hands the
 * other its transport's address (kvready_ucx_address) and its backend's
 * capabilities (kvready_peer_capabilities); each adds the other's address
 * (kvready_ucx_add_peer) and then connects to its capabilities
 * (kvready_peer_connect), which negotiates before anything is published.
 * A restarted peer is a new incarnation: add its new address and connect
 * again.
 *
 * Per request, before lending: kvready_peer_expect with the request's plan
 * (the same request, attempt, chunk and block_tokens on both sides) answers
 * its pages; lend one row per page, named page.name, at page.block, with
 * its device address (the decode side's destination page, the prefill side's
 * source page). The decode side lends a KVREADY_FETCH request, the prefill
 * side a KVREADY_PUBLISH one; the receiver's offer meets the sender's
 * publication whichever comes first.
 *
 * Driving: nothing moves unless the transport is progressed. kvready_progress
 * on an engine whose fetcher or publisher is a peer backend runs one
 * bounded kvready_peer_progress of it first, so an owner that runs rounds
 * drives UCX too. UCX arriving does not make the engine's wake fd readable:
 * an owner that sleeps on the fd sets config.poll_ns (a thread of the
 * library then progresses the backend every poll_ns, a bounded call each
 * time, until the backend is closed) or calls kvready_progress on its own
 * timer. kvready_wait and kvready_sync progress the backend only with
 * poll_ns set.
 *
 * Threading: the functions below are safe from any thread. */

/* A transport's mode (transfer/ucx Mode). Checked (the default): every put is
 * applied by the owner's progress and refused once its registration is
 * revoked, so a revocation fences. One-sided: ucp_put_nbx; a revocation then
 * proves nothing, and the registered slabs must outlive the process. */
enum { KVREADY_UCX_CHECKED = 0, KVREADY_UCX_ONE_SIDED = 1 };
/* An accessor's role, a layer group's cache kind (package transfer). */
enum { KVREADY_ROLE_KV = 1, KVREADY_ROLE_AUX = 2 };
enum { KVREADY_CACHE_PAGED = 1, KVREADY_CACHE_STATE = 2 };
/* A transfer's outcome (kvready_peer_outcome). */
enum {
  KVREADY_TRANSFER_NONE = 0, KVREADY_TRANSFER_DELIVERED = 1, KVREADY_TRANSFER_FAILED = 2,
  KVREADY_TRANSFER_CANCELLED = 3
};
/* Room for a peer name and its NUL (names are 1 to 255 bytes). */
#define KVREADY_PEER_NAME_SIZE 256

typedef struct kvready_ucx_config {
  const char *name;       /* this process's peer name: 1 to 255 bytes, NUL-terminated; required */
  uint64_t incarnation;   /* this life of the process, >= 1; a restarted process takes a larger one */
  const char *transports; /* UCX_TLS for this transport alone: "tcp", "sm", "tcp,cma"; NULL or "": the environment's */
  int32_t mode;           /* KVREADY_UCX_CHECKED (0) or KVREADY_UCX_ONE_SIDED */
  int32_t no_peer_errors; /* 1: endpoints without peer error handling (UCX's sm transports need it); a dead peer is then never reported */
} kvready_ucx_config;

/* Open a UCP context and worker. KVREADY_ERR_INVALID names a bad field;
 * KVREADY_ERR_UNAVAILABLE: UCX could not open one over those transports. */
int kvready_ucx_new(const kvready_ucx_config *config, uint64_t *transport);
/* This transport's address (the name, the incarnation, the UCP worker
 * address): copy it to the peer out of band. KVREADY_ERR_BUFFER, with *len,
 * when cap does not hold it. */
int kvready_ucx_address(uint64_t transport, uint8_t *buf, size_t cap, size_t *len);
/* Record a peer's address; name (NULL, or room for KVREADY_PEER_NAME_SIZE
 * bytes: KVREADY_ERR_BUFFER otherwise, recording nothing) and incarnation
 * (may be NULL) say whose it is. An address older
 * than the one recorded for that peer, or a second one for the same
 * incarnation, is KVREADY_ERR_INVALID and changes nothing. */
int kvready_ucx_add_peer(uint64_t transport, const uint8_t *address, size_t len, char *name, size_t name_cap,
                         uint64_t *incarnation);
/* Close the transport (KVREADY_ERR_BUSY while a peer backend uses it). */
int kvready_ucx_close(uint64_t transport);

/* A peer backend's assembly. Durations in ns; kvready_peer_config_defaults
 * fills every default. */
typedef struct kvready_peer_config {
  uint64_t transport; /* kvready_ucx_new; required; one peer backend per transport */
  int64_t timeout_ns; /* a session (publication) fails when it has no outcome this long after submission (20 s) */
  int64_t grace_ns;   /* receiver: how long after that its pages may stay unproven before they are contained (10 s);
                         keep timeout + grace at or under the engine's request_timeout + drain_grace (the
                         defaults are: 30 s under 40 s) */
  int64_t window_ns;  /* how long a tombstone, an outcome and a held offer are kept (1 h) */
  int64_t poll_ns;    /* > 0: a library thread progresses the backend every poll_ns; 0 (the default): the owner does,
                         through kvready_progress or kvready_peer_progress */
  int32_t sessions;   /* sessions held at most, and plans expected at most (64) */
  int32_t tombstones; /* cancels that came before their session, held at most (64) */
  int32_t leased;     /* receiver: 1 (the default): each session's pages under a registration of their own, revoked
                         (in Checked mode: fenced) before they return; 0: each slot registered once, for life */
  int32_t _pad;
} kvready_peer_config;

/* A writer of a transfer: a peer process and what it writes as. */
typedef struct kvready_accessor {
  const char *peer; /* 1 to 255 bytes, NUL-terminated */
  int32_t rank;     /* 0 to 65535 */
  int32_t role;     /* KVREADY_ROLE_KV or KVREADY_ROLE_AUX */
} kvready_accessor;

/* One layer group of a chunk: its kind and the ids of its pages (the device
 * pages a PAGED group covers block by block; at most one STATE slot). */
typedef struct kvready_chunk_group {
  int32_t kind; /* KVREADY_CACHE_PAGED or KVREADY_CACHE_STATE */
  int32_t _pad;
  const int64_t *ids;
  uint64_t n_ids;
} kvready_chunk_group;

/* One page of a chunk by its layer group and its index in the group. */
typedef struct kvready_page_ref {
  int32_t group;
  int32_t index;
} kvready_page_ref;

/* A transfer's plan: what both sides agree on out of band (backend/peer's
 * Plan and SendPlan). A receiver reads writers; a sender reads to, as and
 * share; a field of the other side's must be zero or NULL. */
typedef struct kvready_peer_plan {
  uint64_t request;     /* the request id */
  uint32_t attempt;     /* >= 1; a retry is a new attempt, with new page names */
  int32_t block_tokens; /* tokens one PAGED page holds, >= 1 */
  int64_t token_start;  /* the token range the chunk moves, [token_start, token_end): token_start on a block boundary */
  int64_t token_end;
  int32_t is_last;      /* the chunk ends the request's sequence */
  int32_t _pad;
  const kvready_chunk_group *groups;
  uint64_t n_groups;
  const kvready_accessor *writers; /* receiver: the exact cohort of writers (1 to 64) */
  uint64_t n_writers;
  const char *to;                  /* sender: the receiver's peer name */
  kvready_accessor as;             /* sender: the accessor this process writes as (its peer: this process) */
  const kvready_page_ref *share;   /* sender: this accessor's pages; NULL and 0: every page */
  uint64_t n_share;
} kvready_peer_plan;

/* One page of a plan: lend its row under name, at block, with the device
 * address of the page id stands for. */
typedef struct kvready_peer_page {
  uint8_t name[KVREADY_NAME_SIZE];
  uint8_t _pad[2];
  int32_t group;
  int32_t index;
  int64_t id;    /* the chunk's id of the page */
  int32_t kind;  /* KVREADY_CACHE_PAGED or _STATE */
  int32_t block; /* the block ordinal to lend the row at */
  int64_t end;   /* the token a delivery must reach for the page to be served */
} kvready_peer_page;

/* A transfer's outcome, while the backend keeps it (config.window_ns). */
typedef struct kvready_transfer_outcome {
  int32_t kind;      /* KVREADY_TRANSFER_* */
  int32_t by_peer;   /* cancelled by the peer */
  int64_t token_end; /* delivered: the absolute token the ask was met up to */
  char reason[KVREADY_REASON_SIZE];
} kvready_transfer_outcome;

/* A peer backend's counters (backend/peer's ReceiverStats, SenderStats);
 * a field of the other side's stays 0. */
typedef struct kvready_peer_stats {
  uint64_t in_flight;  /* sessions (publications) not yet proven over: now */
  uint64_t in_doubt;   /* receiver: sessions whose pages are contained for ever: now */
  uint64_t delivered, failed, cancelled; /* outcomes latched, by kind */
  uint64_t settled;    /* sessions (publications) proven over */
  uint64_t rejected;   /* submissions refused before anything escaped */
  uint64_t peers_lost; /* endpoint errors */
  uint64_t evidence;   /* receiver: evidence taken */
  uint64_t refused;    /* receiver: evidence refused (stale, another life, duplicate); sender: offers dropped */
  uint64_t revocations; /* receiver: leased sessions whose registrations were revoked */
  uint64_t fenced;     /* receiver: of those, revocations that fenced every page */
  uint64_t offers;     /* sender: offers taken */
  uint64_t puts;       /* sender: puts posted */
} kvready_peer_stats;

int kvready_peer_config_defaults(kvready_peer_config *config);
/* The decode side: a backend that fetches (config.fetcher) by lending the
 * engine's staging slots to the writers of a plan. memory: the engine's. */
int kvready_peer_receiver_new(const kvready_peer_config *config, uint64_t memory, uint64_t *backend);
/* The prefill side: a backend that publishes (config.publisher): its puts
 * read the publish lease's staging slots, which return once every put
 * completed. */
int kvready_peer_sender_new(const kvready_peer_config *config, uint64_t memory, uint64_t *backend);
/* What this backend advertises (its peer, incarnation and capabilities):
 * copy it to the peer out of band. KVREADY_ERR_BUFFER, with *len, when cap
 * does not hold it. */
int kvready_peer_capabilities(uint64_t backend, uint8_t *buf, size_t cap, size_t *len);
/* Negotiate with one life of a peer from its advertisement (add its address
 * first: kvready_ucx_add_peer). KVREADY_ERR_REJECTED: it lacks what a
 * session needs (the message names what); nothing is published to it. */
int kvready_peer_connect(uint64_t backend, const uint8_t *capabilities, size_t len);
/* Record a plan before its pages are lent and write its pages (cap entries;
 * *n, may be NULL, how many). KVREADY_ERR_BUFFER (with *n) when cap does not
 * hold them, KVREADY_ERR_INVALID (every mistake named) for a plan that does
 * not validate, KVREADY_ERR_REJECTED for one whose attempt is already
 * expected or fetched, one more than config.sessions, or a closed backend:
 * each records nothing. */
int kvready_peer_expect(uint64_t backend, const kvready_peer_plan *plan, kvready_peer_page *pages, size_t cap,
                        size_t *n);
/* Drop a plan expected and never lent (a sender names the accessor it
 * planned as; a receiver passes NULL). *forgotten (may be NULL): whether one
 * waited. */
int kvready_peer_forget(uint64_t backend, uint64_t request, uint32_t attempt, const kvready_accessor *as,
                        int32_t *forgotten);
/* One bounded round: the transport's progress, what arrived (offers,
 * reports, lost peers), the deadlines, the puts to post. *events (may be
 * NULL): how many things it handled. Never blocks. */
int kvready_peer_progress(uint64_t backend, int64_t *events);
/* A receiver's transfer outcome for (request, attempt), while it is kept;
 * *found 0 when none is (yet). KVREADY_ERR_UNSUPPORTED on a sender. */
int kvready_peer_outcome(uint64_t backend, uint64_t request, uint32_t attempt, kvready_transfer_outcome *outcome,
                         int32_t *found);
int kvready_peer_backend_stats(uint64_t backend, kvready_peer_stats *stats);

/* ---- the test library only ----------------------------------------------------
 * What follows inside #ifdef KVREADY_TESTKIT exists only in
 * libkvready_testkit.so (make lib-testkit: the same sources built with the
 * kvready_testkit tag, so a superset of libkvready.so). Compile with
 * -DKVREADY_TESTKIT and link -lkvready_testkit to call it. libkvready.so links
 * no test code (Go's testing, rapid) and never reads the host's flags. Load
 * one library per process, never both: each holds a Go runtime. */
#ifdef KVREADY_TESTKIT
/* Run the backend conformance kit (package conformance: CheckFetcher /
 * CheckPublisher) against backends make builds, one per trial, over the kit's
 * memory. kind: KVREADY_FETCH or KVREADY_PUBLISH. checks: trials (0:
 * RAPID_CHECKS or 100). may_fail: the backend fails or cancels on purpose.
 * A backend with a cancel callback is also asked to cancel (before the
 * outcome, after it, after the proof, twice) and held to the cancellation
 * rules. On a broken rule: KVREADY_ERR_CONFORMANCE, the rule's identifier in
 * rule and the kit's report as the thread's last error. The identifiers:
 *   served_subset unserved_untouched outside_untouched served_content stable
 *   no_late_write known_miss rejected_no_effect probe quiesce_cancelled
 *   attempt_or_error settle published_content publish_read_only
 *   cancel_never_blocks cancel_answer cancel_idempotent cancel_no_new_access
 *   cancel_keeps_proof cancel_not_end completion_once probe_never_blocks
 *   probe_agrees
 * (rule is empty when the failure names none: make_backend failed, say). */
int kvready_conformance_check(kvready_make_backend make, void *user, int32_t kind, int32_t checks,
                              int32_t may_fail, char *rule, size_t rule_cap);
#endif /* KVREADY_TESTKIT */

/* ---- devices --------------------------------------------------------------- */

/* A simulated device (gpu/sim) with mem_bytes of device memory. latency_ns > 0:
 * copies and events complete by themselves that long after queuing (on the
 * system clock); 0: only kvready_sim_complete_all completes them (tests that
 * step the device, and the benchmarks). */
int kvready_sim_device_new(int64_t mem_bytes, int64_t latency_ns, uint64_t *device);
int kvready_sim_alloc(uint64_t device, int64_t n, uint64_t *ptr);
/* Copy into / out of device memory (KVREADY_ERR_INVALID past mem_bytes, or
 * outside an allocation). */
int kvready_sim_write(uint64_t device, uint64_t ptr, const void *src, size_t n);
int kvready_sim_read(uint64_t device, uint64_t ptr, void *dst, size_t n);
/* Complete every queued copy and event; *completed counts the events. */
int kvready_sim_complete_all(uint64_t device, int64_t *completed);
/* Complete, or fail, the next n events of stream (0: the engine's copy
 * stream, so a test steps a fetch layer by layer: each layer's copies end in
 * one event), in order, with the copies queued before each; a failed event's
 * copies are not performed (their destination is poisoned). *done (may be
 * NULL) counts the events resolved: fewer when fewer are queued. */
int kvready_sim_complete_next(uint64_t device, uint32_t stream, int64_t n, int64_t *done);
int kvready_sim_fail_next(uint64_t device, uint32_t stream, int64_t n, int64_t *done);
int kvready_sim_lose(uint64_t device, const char *reason);
/* A simulated device whose streams are copy engines of bytes_per_second
 * (gpu/sim WithBandwidth, on the system clock): the copies queued on one
 * stream run one after another, n bytes taking n / bytes_per_second, and an
 * event completes when everything queued before it did. With a compute
 * stream beside the engine's copy stream it runs a forward pass layer by
 * layer: layer l's copy, then "compute layer l" (kvready_sim_compute). */
int kvready_sim_device_new_bandwidth(int64_t mem_bytes, double bytes_per_second, uint64_t *device);
/* Another stream of a simulated device (a compute stream), safe from any
 * thread: *stream is its number, 1 or more (0 is the engine's copy stream,
 * which only the engine queues on). */
int kvready_sim_stream_new(uint64_t device, uint32_t *stream);
/* Queue work that occupies stream for ns of the device's clock and touches no
 * memory: the simulated kernel of a forward pass. Work queued on the stream
 * after it starts when it ended. On a device without a clock
 * (kvready_sim_device_new with latency 0) only kvready_sim_complete_all
 * resolves it. */
int kvready_sim_compute(uint64_t device, uint32_t stream, int64_t ns);
/* Record an event after everything queued on stream so far; *event is its
 * token (never 0), for kvready_sim_query and kvready_sim_wait on this device
 * (a token of another device's stream is refused, never taken for one of
 * this device's events). */
int kvready_sim_record(uint64_t device, uint32_t stream, uint64_t *event);
/* An event's status (KVREADY_EVENT_*) without blocking. */
int kvready_sim_query(uint64_t device, uint64_t event, int32_t *status);
/* Hold everything queued on stream after this call until event, of another
 * stream of the device, resolved (cuStreamWaitEvent). A failed event fails
 * the stream's next event. */
int kvready_sim_wait(uint64_t device, uint32_t stream, uint64_t event);
/* A device the embedder implements (the table is copied; user is kept). */
int kvready_device_new(const kvready_device_callbacks *callbacks, uint64_t *device);
/* KVREADY_ERR_BUSY while an engine uses it. */
int kvready_device_close(uint64_t device);

/* ---- the engine (owner thread) ----------------------------------------------
 * An engine halts under KVREADY_POLICY_FATAL when a lease is contained (and
 * under any policy if a safety invariant breaks, a bug in kvready): from then
 * on it releases nothing, and every call that would change anything — lend,
 * release, cancel, retry, wait, shutdown — returns KVREADY_ERR_HALTED with
 * the reason as the engine's last error. Reads still answer (lease infos,
 * stats, report, progress: round->halted), and kvready_engine_free(engine, 1)
 * abandons it with what it holds; the manager restarts.
 *
 * One live engine per staging memory (SPEC §4 rule 17): kvready_engine_new
 * over a memory another live engine holds returns KVREADY_ERR_BUSY, its
 * message naming the holder ("engine#3 (created …)"), and changes nothing.
 * An engine's claim ends when kvready_engine_close or kvready_engine_shutdown
 * returns, or when it halts (kvready_engine_free with force closes it). Every
 * slot not free then — quarantined, or held by a lease still unfinished, which
 * an old backend or copy may still touch — stays out of circulation for every
 * later engine over the memory (kvready_stats.slots_inherited) until the memory
 * is freed: shut down (drained) to hand over every slot. */

/* Fill *config with the library's defaults (readiness.Defaults): every
 * setting holds the value 0 would take; the handles are 0 and layout NULL.
 * The defaults are declared once, in Go; bindings read theirs from here. */
int kvready_engine_config_defaults(kvready_engine_config *config);
int kvready_engine_new(const kvready_engine_config *config, uint64_t *engine);
/* The pollable file descriptor (eventfd; a pipe where there is none): readable
 * when a round has work — a copy landed (each layer's, with a layout), a
 * backend answered, a deadline came. Owned by the engine: do not close or
 * read it. */
int kvready_engine_wake_fd(uint64_t engine, int32_t *fd);
/* One round: never blocks. Drains the wake fd, runs the round, and writes the
 * leases whose state moved since the last read (each once, with its state
 * now) into leases/states (cap entries; round->more says how many did not fit,
 * for kvready_changes). With no arrays (NULL or cap 0) they are not kept.
 * round may be NULL. */
int kvready_progress(uint64_t engine, kvready_round *round, uint64_t *leases, int32_t *states, size_t cap);
/* The changed leases that did not fit in the last round's arrays. */
int kvready_changes(uint64_t engine, uint64_t *leases, int32_t *states, size_t cap, size_t *n);
/* Ask for one lease; or n at once (statuses[i] for each; the call returns the
 * first failure's status, and the last failure's message). */
int kvready_lend(uint64_t engine, const kvready_request *request, uint64_t *lease);
int kvready_lend_many(uint64_t engine, const kvready_request *requests, size_t n, uint64_t *leases, int32_t *statuses);
/* Done with the lease: its slots return once it is logically complete.
 * Releasing a quarantined lease gives up the claim: accepted, its slots stay
 * out for ever, and kvready_wait(KVREADY_UNTIL_RELEASED) returns it. */
int kvready_release(uint64_t engine, uint64_t lease);
int kvready_release_many(uint64_t engine, const uint64_t *leases, size_t n, int32_t *statuses);
/* Cancel a lease still waiting for its outcome: Cancelled (not by the peer) is
 * latched locally. Submitted: one request goes to the backend, and the slots
 * return only once access is proven over. Not yet submitted (waiting,
 * granted, staged): the lease is withdrawn, no request is sent, and its slots
 * return at once (a publish's once its device->staging copies landed), with
 * no release needed. Refused only for a stale handle or an outcome already
 * latched, and then nothing changes. */
int kvready_cancel(uint64_t engine, uint64_t lease);
/* kvready_cancel, answering what the cancel did (SPEC §4 rule 19): the same
 * status and message, and *result written whatever the engine answered — the
 * one exception to "out-parameters are written only on success": KVREADY_OK
 * with KVREADY_LOGICAL_ACCEPTED; KVREADY_ERR_FAILED (the lifecycle refused
 * it) with ALREADY_TERMINAL; KVREADY_ERR_STALE_LEASE with ALREADY_TERMINAL
 * for a released lease still readable (config.keep_released), else
 * NOT_FOUND; KVREADY_ERR_HALTED with REJECTED. A
 * cancel accepted for a submitted lease is not safe_to_reuse: the memory is
 * reusable once its backend's access is proven over (watch
 * kvready_lease_info.physical, or wait for KVREADY_UNTIL_RELEASED). result is
 * not written for a bad engine handle, and NULL is KVREADY_ERR_INVALID. */
int kvready_cancel_with_result(uint64_t engine, uint64_t lease, kvready_cancel_result *result);
int kvready_retry(uint64_t engine, uint64_t lease);
/* Describe n leases at once (statuses[i] for each, may be NULL). */
int kvready_lease_infos(uint64_t engine, const uint64_t *leases, size_t n, kvready_lease_info *infos, int32_t *statuses);
int kvready_readiness(uint64_t engine, uint64_t lease, kvready_interval *interval);
/* Layer by layer (SPEC §4 rule 16; config.layout). The layers a fetch's
 * copies go in: layer k is the k-th layer id of the layout, ascending (1
 * without a layout: the whole slots). */
int kvready_layers(uint64_t engine, int32_t *n);
/* Whether layer (0 .. kvready_layers - 1) of the fetch lease is ready: its
 * copies' event completed. *status is a KVREADY_LAYER_*; with
 * KVREADY_LAYER_READY, interval (may be NULL) is what the layer answers, the
 * same for every layer (the lease's own once every layer landed). O(1), and
 * it allocates nothing: the owner may ask it per layer of every forward pass.
 * It runs no round: kvready_progress (woken by the wake fd, which a layer
 * landing makes readable) or kvready_wait_layer moves the engine on. A layer
 * out of range is KVREADY_ERR_INVALID, a publish KVREADY_ERR_NOT_READY (as
 * kvready_readiness), a retired lease KVREADY_ERR_STALE_LEASE. */
int kvready_layer_ready(uint64_t engine, uint64_t lease, int32_t layer, int32_t *status, kvready_interval *interval);
/* Run rounds on this thread until layer of the fetch lease is ready (vLLM's
 * wait_for_layer_load), sleeping on the wake fd between; then interval (may
 * be NULL) is what it answers. Returns at once KVREADY_ERR_LAYER_FAILED when a
 * copy of the layer or of an earlier one failed (the message names why: the
 * lease's served rows did not arrive, recompute them), KVREADY_ERR_NOT_READY
 * when it is never answered (quarantined, or released before its copies
 * landed), KVREADY_ERR_TIMEOUT after timeout_ns (> 0: every wait is
 * bounded), KVREADY_ERR_HALTED if the engine halts, KVREADY_ERR_CLOSED when
 * another thread frees the engine under it (as kvready_wait). */
int kvready_wait_layer(uint64_t engine, uint64_t lease, int32_t layer, int64_t timeout_ns, kvready_interval *interval);
/* Report layer (0 .. kvready_layers - 1) of the layerwise publish lease
 * (kvready_request.layerwise) computed, as vLLM's save_kv_layer does: the
 * layer's device->staging copies of every row are queued at the next round
 * behind event — a token of kvready_sim_record on a stream of the engine's
 * simulated device, or, for a device of callbacks, the embedder's own event,
 * which its wait callback is handed — or at once for event 0 (the layer is
 * computed and synchronised already). Layers are reported in order, once
 * each, once the lease is granted (KVREADY_GRANTED: a lease still waiting for
 * slots refuses it). The publish is submitted when every layer landed in
 * staging; releasing or cancelling it before every layer was reported
 * withdraws it: nothing is submitted, and its slots return once the copies
 * already queued landed. Anything else (a lease not granted yet, a fetch, a
 * whole publish, a layer out of order or again, an event the device cannot
 * wait for) is KVREADY_ERR_INVALID naming why, and changes nothing. */
int kvready_layer_computed(uint64_t engine, uint64_t lease, int32_t layer, uint64_t event);
/* The blocks of a fetch that arrived: (group, block) pairs; *n is how many.
 * Arrays of cap pairs that do not hold them: KVREADY_ERR_BUFFER. */
int kvready_arrived(uint64_t engine, uint64_t lease, int32_t *groups, int32_t *blocks, size_t cap, size_t *n);
/* Run rounds on this thread until the lease reaches until, timeout_ns passes
 * (KVREADY_ERR_TIMEOUT) or the engine halts; sleeps on the wake fd between.
 * kvready_wait, kvready_sync and kvready_engine_shutdown return
 * KVREADY_ERR_CLOSED at once when another thread frees the engine under them
 * (kvready_engine_free with force). */
int kvready_wait(uint64_t engine, uint64_t lease, int32_t until, int64_t timeout_ns, kvready_lease_info *info);
/* Run rounds until the background has caught up and a round changes nothing. */
int kvready_sync(uint64_t engine, int64_t timeout_ns, int64_t *moves);
/* The number of leases in a state (KVREADY_WAITING ...). */
int kvready_count(uint64_t engine, int32_t state, int64_t *count);
int kvready_engine_stats(uint64_t engine, kvready_stats *stats);
/* Containment events queued since the last call, oldest first (at most
 * 65536 wait; later ones are counted in kvready_stats and logged, not queued).
 * Every call that runs rounds queues them — kvready_progress, kvready_wait,
 * kvready_sync, kvready_engine_close and kvready_engine_shutdown — and the
 * wake fd is readable after each of those, so the next kvready_progress
 * round counts what is queued (kvready_round.containments, .recoveries). */
int kvready_containments(uint64_t engine, kvready_containment *out, size_t cap, size_t *n);
/* Recovery events (KVREADY_POLICY_RECOVER) queued since the last call, oldest
 * first: the leases whose access was proven over after their containment,
 * their slots back in circulation (same bound as containments). */
int kvready_recoveries(uint64_t engine, uint64_t *leases, size_t cap, size_t *n);
/* Stop admission, tell every lease, run one round; report what is held
 * (in_doubt: the leases not yet proven reusable). The memory is handed over
 * as it returns: what is still held stays out of circulation for later
 * engines. */
int kvready_engine_close(uint64_t engine, kvready_report *report);
/* Close, then run rounds until drained or timeout_ns (KVREADY_ERR_TIMEOUT,
 * the report and the message saying how many leases it leaves in doubt); the
 * memory is handed over as it returns (drained: every slot). */
int kvready_engine_shutdown(uint64_t engine, int64_t timeout_ns, kvready_report *report);
int kvready_engine_report(uint64_t engine, kvready_report *report);
/* Forget a drained engine (KVREADY_ERR_BUSY until drained, unless force: then
 * its leases are abandoned where they stand and nothing of it is freed).
 * While another thread waits on the engine (kvready_wait, _sync,
 * _engine_shutdown) it is KVREADY_ERR_BUSY without force; with force that wait
 * returns KVREADY_ERR_CLOSED at once and the engine is freed. */
int kvready_engine_free(uint64_t engine, int32_t force);

/* ---- measurements (make bench-abi; the test library only) -------------------- */
#ifdef KVREADY_TESTKIT

/* Drive rounds of up to 256 one-row fetch lifecycles in Go, as kvready_lend /
 * _progress / _release would from C, on an engine over the sim device:
 * requests are leased n times in all; *ns is the time taken. */
int kvready_bench_go_lifecycle(uint64_t engine, uint64_t device, const kvready_request *requests,
                               size_t n_requests, int64_t n, int64_t *ns);

/* The benchmarks' simulated device, BenchmarkLifecycle's: copies and events
 * land by the time they are queried, with no clock read for them (gpu/sim
 * with a zero latency on the system clock). kvready_sim_device_new cannot make
 * it: its latency 0 means completed only by kvready_sim_complete_all, and any
 * latency above 0 reads the clock for every copy, event and query. */
int kvready_sim_device_new_instant(int64_t mem_bytes, uint64_t *device);
#endif /* KVREADY_TESTKIT */

#ifdef __cplusplus
}
#endif
#endif /* KVREADY_H */
