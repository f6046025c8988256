/*
 * Flow control of a function: how many of its jobs may run at once, how
 * many may start per period (a token bucket with a burst), the same two
 * per partition key (the unique key's part before a separator, keys served
 * round robin), sequences (one job of a key at a time, in submission
 * order, held by a failed job), and pause. Plain data, no I/O, as queue.c: queue_grab asks
 * flow_head for the job of a function that may start now, and tells
 * flow_took, flow_queued, flow_unqueued and flow_stopped what moved. A
 * function without settings has no struct flow (func->flow NULL), and
 * the queue then does what it did before: one pointer test per ability.
 * flow_ctl.c is the server's side: settings, the store, timers, wake-ups.
 */
#ifndef DSJOB_SERVER_FLOW_H
#define DSJOB_SERVER_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "hmap.h"
#include "job.h"

struct func;

#define FLOW_SEP_MAX 8    /* bytes of a key separator, with its NUL */
#define FLOW_SPEC_MAX 256 /* bytes of a settings line (flow_format), with its NUL */
#define FLOW_DEFAULT_SEP ":"

/*
 * A sequence: its key's jobs run one at a time in submission order. A job
 * that failed holds its key while it waits for its retry (both), and while
 * it is in the dead set until it is retried or dropped (hold only).
 */
enum flow_seq {
    FLOW_SEQ_OFF,  /* no sequence */
    FLOW_SEQ_HOLD, /* a dead job holds its key too */
    FLOW_SEQ_SKIP, /* a dead job lets the next one run */
};

/* How a running job stops, for flow_hold. */
enum flow_stop {
    FLOW_STOP_RETRY, /* it waits for a retry (backoff) */
    FLOW_STOP_DEAD,  /* it goes to the dead set */
};

/* A function's settings: what "limit", "pause" and the config file set. */
struct flow_conf {
    uint32_t concurrency;     /* most of its jobs running at once; 0: no limit */
    uint32_t rate;            /* most starts per period_ms; 0: no limit */
    uint32_t period_ms;       /* rate's period */
    uint32_t burst;           /* most starts at once after a quiet time; 0: rate */
    uint32_t key_concurrency; /* most running of one key; 0: no limit */
    uint32_t key_rate;        /* most starts of one key per key_period_ms; 0: no limit */
    uint32_t key_period_ms;   /* key_rate's period */
    uint32_t key_burst;       /* key_rate's burst; 0: key_rate */
    char sep[FLOW_SEP_MAX];   /* the key ends at the unique key's first sep; "": ":" */
    bool keyed;               /* jobs are served by key (round robin), with or without limits */
    uint8_t sequence;         /* enum flow_seq: each key a sequence (keyed) */
    bool paused;              /* nothing starts */
};

/* A token bucket: rate tokens per period, at most burst held. */
struct flow_bucket {
    double tokens; /* held at at_ms */
    int64_t at_ms; /* when tokens was brought up to date; 0: never (full) */
};

/* Why a function's job may not start now. */
enum flow_why {
    FLOW_GO,              /* it may */
    FLOW_PAUSED,          /* the function is paused */
    FLOW_CONCURRENCY,     /* its concurrency limit is reached */
    FLOW_RATE,            /* its bucket is empty */
    FLOW_KEY_CONCURRENCY, /* every key with a job is at its concurrency limit */
    FLOW_KEY_RATE,        /* every key with a job has an empty bucket (or some are full) */
    FLOW_SEQUENCE,        /* every key with a job waits for an earlier job of its key */
};

/* A partition key of a keyed function. */
struct flow_key {
    struct hnode node;               /* in flow.keys */
    TAILQ_ENTRY(flow_key) ring;      /* in flow.ring while it has queued jobs */
    struct job_list jobs[JOB_NPRIO]; /* its queued jobs, FIFO per priority (job_ext.by_key);
                                        a sequence's all in jobs[0], by seq */
    struct job_list holding;         /* its failed jobs that hold a sequence (job_ext.by_key) */
    unsigned nqueued;                /* entries in jobs[] */
    unsigned nrunning;               /* its jobs running */
    unsigned nholding;               /* entries in holding */
    struct flow_bucket bucket;       /* key_rate's */
    bool in_ring;                    /* in flow.ring */
    bool orphan;                     /* out of flow.keys, kept while its jobs still run */
    size_t name_len;                 /* name bytes */
    char name[];                     /* the key (not NUL-terminated: binary safe) */
};
TAILQ_HEAD(flow_key_list, flow_key);

struct flow {
    struct flow_conf conf;     /* the settings */
    struct func *func;         /* its function (borrowed; it owns this) */
    TAILQ_ENTRY(flow) all;     /* in queue.flows */
    struct flow_bucket bucket; /* rate's */
    struct hmap keys;          /* struct flow_key by name, with conf.keyed */
    struct flow_key_list ring; /* keys with queued jobs, the next to serve first (a
                                  sequence's only while none of its jobs runs or holds it) */
    unsigned nkeys;            /* entries in keys */
    unsigned nkeys_held;       /* keys a failed job holds (sequence) */
    enum flow_why why;         /* why the last flow_head found nothing, with jobs queued */
    uint64_t held;             /* grabs that found its jobs held back */
    uint64_t started;          /* jobs it let start */
    void *ctl;                 /* the server (flow_ctl.c), or NULL */
};

/* flow_conf_init sets c to no limits, not paused, separator ":". */
void flow_conf_init(struct flow_conf *c);

/* flow_conf_any tells whether c differs from flow_conf_init's. */
bool flow_conf_any(const struct flow_conf *c);

/*
 * flow_conf_parse applies words (a settings line, as "limit" takes it
 * after the function and flow_format writes it) to c: "concurrency N",
 * "rate N/s" (or /m, /h, /ms, or N/Ks for K seconds; "off" or 0: none),
 * "burst N", the same with "key-" in front, "key-separator S", "keyed",
 * "sequence hold|skip|off", "paused", "resumed", "off" (every limit off,
 * keys and sequence off; paused stays). 0, or -1 with
 * err (errlen bytes) naming the bad word; c is then unchanged.
 */
int flow_conf_parse(struct flow_conf *c, const char *words, char *err, size_t errlen);

/* flow_format writes c as one line flow_conf_parse reads back ("" if no settings). */
void flow_format(const struct flow_conf *c, char *buf, size_t len);

/* flow_rate_format writes N/PERIOD ("100/s", "5/m", "7/1500ms"), or "off". */
void flow_rate_format(uint32_t rate, uint32_t period_ms, char *buf, size_t len);

/*
 * flow_new gives f a struct flow with no settings (f->flow), or returns
 * the one it has. NULL if out of memory.
 */
struct flow *flow_new(struct func *f);

/* flow_free frees fl and its keys; the jobs' key pointers must be gone (flow_set). */
void flow_free(struct flow *fl);

/*
 * flow_set gives fl new settings at now_ms: keys are made for every
 * queued and running job when conf->keyed turns on (0, or -1 out of
 * memory: nothing changed), dropped when it turns off (and made again
 * when the separator or sequence on or off changes: failed jobs then hold
 * no key until they fail again); from hold to skip, dead jobs let go of
 * their keys; the buckets keep what they hold, up to their new bursts.
 */
int flow_set(struct flow *fl, const struct flow_conf *conf, int64_t now_ms);

/*
 * flow_head returns the job of f at priority prio that may start at
 * now_ms: the head of f's list, or with keys the head of the first key in
 * the ring that may start one. NULL if none may (fl->why says why, when
 * f has queued jobs).
 */
struct job *flow_head(struct func *f, int prio, int64_t now_ms);

/* flow_took: j, from flow_head, starts: a token taken, its key to the ring's back. */
void flow_took(struct func *f, struct job *j, int64_t now_ms);

/* flow_queued: j joins f's list at prio (head or tail): its key's list too. */
void flow_queued(struct func *f, struct job *j, bool head);

/* flow_unqueued: j leaves f's list (grabbed, removed, moved): its key's list too. */
void flow_unqueued(struct func *f, struct job *j);

/* flow_stopped: running j stops (ended, requeued, lost, backed off): its key's slot frees. */
void flow_stopped(struct func *f, struct job *j);

/*
 * flow_hold: j stops running (or, at replay, is placed) as how says, and
 * with a sequence that holds for how, and a failed attempt counted
 * (job_attempts), it holds its key (a key made for it if it had none)
 * until flow_queued or flow_released; else as flow_stopped. Running or not,
 * j then leaves its slot; a job that holds already keeps holding.
 */
void flow_hold(struct func *f, struct job *j, enum flow_stop how);

/*
 * flow_released: j, which may hold its key, leaves (dropped, cancelled,
 * settings changed): true if a job of its key may start now that it let go.
 */
bool flow_released(struct func *f, struct job *j);

/*
 * flow_ready tells whether some queued job of f may start at now_ms (any
 * priority): what queue_has_work asks of a function with a struct flow.
 */
bool flow_ready(struct func *f, int64_t now_ms);

/*
 * flow_next_ms returns when a token for f may next arrive (so that a
 * waiting job may start) if f waits for one at now_ms, or -1 if f does not
 * wait for a token.
 */
int64_t flow_next_ms(struct func *f, int64_t now_ms);

/* flow_tokens returns the tokens f's bucket holds at now_ms, or -1 without a rate. */
double flow_tokens(struct flow *fl, int64_t now_ms);

/* flow_why_name names a reason ("paused", "concurrency", "rate", "key-concurrency", ...). */
const char *flow_why_name(enum flow_why why);

/* flow_sweep frees keys with nothing queued or running and a full bucket at now_ms. */
void flow_sweep(struct flow *fl, int64_t now_ms);

/*
 * flow_key_of finds the key of a unique key of len bytes: the bytes before
 * the first separator, or "" (every job without one shares that key).
 * Sets *klen.
 */
const char *flow_key_of(const struct flow_conf *c, const char *unique, size_t len, size_t *klen);

#endif
