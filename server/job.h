/*
 * A job: one allocation holding the struct, its handle, unique key, reducer
 * and payload. Jobs are refcounted: the queue holds one reference while the
 * job exists for clients; anything that must keep a finished job alive for
 * a while (a pending store batch, a reply being built) takes another.
 *
 * A queued background job is what a deep queue holds hundreds of thousands
 * of, so struct job keeps only what every job needs. What only running,
 * foreground or scheduled jobs need (the worker, the waiting clients, the
 * timeout, the status, the epoch time and heap slot, the attempts) lives in
 * a struct job_ext allocated the first time the job needs it.
 */
#ifndef DSJOB_SERVER_JOB_H
#define DSJOB_SERVER_JOB_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "hmap.h"

struct conn;
struct func;
struct event;
struct qworker;

enum job_prio { JOB_PRIO_HIGH, JOB_PRIO_NORMAL, JOB_PRIO_LOW, JOB_NPRIO };

enum job_state {
    JOB_NEW,       /* made, not yet in the queue */
    JOB_QUEUED,    /* in its function's queue, waiting for a worker */
    JOB_RUNNING,   /* held by a worker */
    JOB_SCHEDULED, /* waiting in the epoch heap for its time */
    JOB_PENDING,   /* indexed, waiting for the store to commit it */
    JOB_SETTLING,  /* done, stored: counted and found until its deletion commits */
    JOB_DEAD,      /* past its retries, in its function's dead set (--max-dead) */
    JOB_DONE,      /* finished, its outcome kept for --keep-results seconds */
};
#define JOB_NSTATES 8 /* struct job's 3-bit state holds them all */

/*
 * How a job ended, as its dead set or kept results remember it: NONE
 * while it lives (and for an end that keeps nothing, as a cancel); one of
 * the worker's three ends; DEAD once it is in its function's dead set.
 */
enum job_outcome {
    JOB_OUTCOME_NONE,      /* not ended, or nothing of its end is kept */
    JOB_OUTCOME_COMPLETE,  /* WORK_COMPLETE */
    JOB_OUTCOME_FAIL,      /* WORK_FAIL, or failed by the server (timeout, worker gone) */
    JOB_OUTCOME_EXCEPTION, /* WORK_EXCEPTION */
    JOB_OUTCOME_DEAD,      /* past its retries, in its function's dead set (--max-dead) */
};

/* What a SETTLING job becomes once its store change commits. */
enum job_settle { JOB_SETTLE_GONE, JOB_SETTLE_DEAD, JOB_SETTLE_DONE };

/* A client connection waiting for a foreground job's result. */
struct waiter {
    struct conn *client;           /* the waiting connection (borrowed) */
    struct job *job;               /* the job it waits for (borrowed) */
    TAILQ_ENTRY(waiter) by_job;    /* in job->waiters */
    TAILQ_ENTRY(waiter) by_client; /* in the client connection's list */
};
TAILQ_HEAD(waiter_list, waiter);

/* The part of a job that a plain queued background job does without. */
struct job_ext {
    struct qworker *worker;     /* the worker holding it, while RUNNING */
    struct waiter_list waiters; /* foreground clients to tell */
    struct event *timeout_ev;   /* CAN_DO_TIMEOUT timer while running, or NULL */
    int64_t when;               /* epoch seconds to run at; 0 for now */
    size_t heap_pos;            /* index in the epoch heap while SCHEDULED */
    uint32_t numerator;         /* last WORK_STATUS */
    uint32_t denominator;       /* last WORK_STATUS */
    uint32_t attempts;      /* failed attempts: a worker left, timed out, or (--retry-on) failed */
    int64_t first_fail;     /* epoch seconds of the first failed attempt, or 0 */
    int64_t last_fail;      /* ... of the last one; for a DONE job, when it ended */
    unsigned char *result;  /* owned: its kept result once it ends kept (--keep-results) */
    uint32_t result_len;    /* bytes in result */
    uint32_t result_size;   /* bytes the worker sent (more than result_len if cut) */
    unsigned char *error;   /* owned: the last failed attempt's text (retrying, dead); NULL none */
    uint32_t error_len;     /* bytes in error */
    uint8_t outcome;        /* enum job_outcome: NONE until it ends dead or kept */
    uint8_t settle_to;      /* SETTLING: enum job_settle */
    unsigned char *warning; /* owned: this attempt's last WORK_WARNING, the text a WORK_FAIL
                               after it gives the dead set (--max-dead); NULL: none */
    uint32_t warning_len;   /* bytes in warning */
    uint8_t silence;        /* timeout_ev is --job-timeout's: a report about the job restarts it */
    char *alias; /* owned: shared store, the handle of the job elsewhere it coalesced onto */
    TAILQ_ENTRY(job) by_key; /* in its flow key's list while queued, or its holding list */
    struct flow_key *key;    /* its flow key while queued, running or holding, or NULL */
    bool key_queued;         /* in its key's list */
    bool key_held;           /* in its key's holding list: a failed job holds a sequence */
    int64_t deadline_ms;     /* epoch ms it must start by, else it expires (dead set); 0: none */
    size_t expire_pos;       /* index in queue.expiring while it waits with a deadline */
    bool expiring;           /* in queue.expiring */
    bool deadline_started;   /* started with a deadline the store's row still has */
    char *batch;             /* owned: the id of the batch it joined (batch.c), or NULL */
};

struct job {
    struct hnode by_handle;  /* in queue.jobs */
    struct hnode by_unique;  /* in func->uniques (payloads if unique_is_data), if unique_len */
    TAILQ_ENTRY(job) link;   /* in a func queue, or a worker's held list */
    struct func *func;       /* its function (borrowed; functions outlive jobs) */
    struct job_ext *ext;     /* owned: the rest of its state, or NULL while not needed */
    uint64_t id;             /* the number in the handle */
    uint64_t seq;            /* submission order, kept across restarts */
    uint32_t data_len;       /* payload bytes */
    uint32_t unique_len;     /* unique key bytes */
    uint32_t refs;           /* references held */
    uint32_t stamp;          /* stats_clock() when queued, then when grabbed (stats.c) */
    uint16_t reducer_len;    /* reducer name bytes (SUBMIT_REDUCE_JOB) */
    uint8_t handle_len;      /* handle bytes */
    unsigned prio : 2;       /* enum job_prio */
    unsigned state : 3;      /* enum job_state */
    bool background : 1;     /* no client waits for it */
    bool cancelled : 1;      /* cancelled while running: never run again */
    bool unique_is_data : 1; /* unique "-": coalesce on the payload (gearmand) */
    bool stored : 1;         /* written to the store: remove it there when done */
    bool refused : 1;        /* the store refused it: coalesced submits are told */
    bool settle_indexed : 1; /* SETTLING or DONE, and in its function's index of those */
    bool aliased : 1;        /* shared store: coalesced onto a job elsewhere, whose handle
                                is in ext->alias */
    bool held : 1;           /* PENDING until the jobs it waits for succeed (deps.c) */
    char buf[];              /* handle NUL unique NUL reducer NUL data */
};
TAILQ_HEAD(job_list, job);

#define JOB_HANDLE_MAX 200
#define JOB_ID_DIGITS 20 /* the number in a handle, zero-padded: a uint64_t in full */

/*
 * job_handle_format writes PREFIX:NUMBER into buf, the number zero-padded
 * to JOB_ID_DIGITS, so that no handle is a prefix of another: libgearman
 * 2.0 matches a reply to its task by the task's handle as a prefix of the
 * reply's, and would give task H:x:2 the reply of H:x:20. Returns the
 * length, or -1 if it does not fit in size.
 */
int job_handle_format(char *buf, size_t size, const char *prefix, uint64_t id);

/*
 * job_new makes a job with one reference and no job_ext. handle, unique,
 * reducer and data are copied. Returns NULL if out of memory or a length is
 * over its field (a handle over JOB_HANDLE_MAX, data over UINT32_MAX).
 */
struct job *job_new(const char *handle, size_t handle_len, const void *unique, size_t unique_len,
                    const void *reducer, size_t reducer_len, const void *data, size_t data_len);

static inline const char *
job_handle(const struct job *j)
{
    return j->buf;
}

static inline const char *
job_unique(const struct job *j)
{
    return j->buf + j->handle_len + 1;
}

static inline const char *
job_reducer(const struct job *j)
{
    return j->buf + j->handle_len + 1 + j->unique_len + 1;
}

static inline const unsigned char *
job_data(const struct job *j)
{
    return (const unsigned char *)j->buf + j->handle_len + 1 + j->unique_len + 1 + j->reducer_len +
           1;
}

/*
 * job_ext returns j's job_ext, allocating a zeroed one the first time.
 * NULL if out of memory (j is unchanged).
 */
struct job_ext *job_ext(struct job *j);

/* job_worker returns the worker holding j, or NULL. */
static inline struct qworker *
job_worker(const struct job *j)
{
    return j->ext ? j->ext->worker : NULL;
}

/* job_when returns the epoch time j runs at, 0 for now. */
static inline int64_t
job_when(const struct job *j)
{
    return j->ext ? j->ext->when : 0;
}

/* job_set_when sets the epoch time j runs at. 0, or -1 if out of memory. */
int job_set_when(struct job *j, int64_t when);

/* job_deadline_ms returns the epoch ms j must start by, 0 for none. */
static inline int64_t
job_deadline_ms(const struct job *j)
{
    return j->ext ? j->ext->deadline_ms : 0;
}

/* job_attempts returns how many times a worker took j and did not finish it. */
static inline uint32_t
job_attempts(const struct job *j)
{
    return j->ext ? j->ext->attempts : 0;
}

/* job_moves: for each state, a bit (1 << state) for each state a job may go to from it. */
extern const uint8_t job_moves[JOB_NSTATES];

/*
 * job_set_state moves j to state; the move must be one a job makes
 * (job_moves, checked by assert). The queue moves jobs, as it moves them
 * between its lists. Inline: grabs and pushes are the hot path.
 */
static inline void
job_set_state(struct job *j, enum job_state state)
{
    assert(job_moves[j->state] & (1u << state));
    j->state = state;
}

/*
 * job_set_result keeps len bytes of data (at most max of them) as j's
 * kept result, replacing any before. 0, or -1 if out of memory (j then
 * keeps no bytes, only the size).
 */
int job_set_result(struct job *j, const void *data, size_t len, size_t max);

/*
 * job_set_error keeps len bytes of text (at most max of them) as the
 * text of j's last failed attempt, which a retrying or dead job shows;
 * len 0 forgets it. 0, or -1 if out of memory (j then keeps none).
 */
int job_set_error(struct job *j, const void *text, size_t len, size_t max);

/*
 * job_set_alias keeps the handle (len bytes) of the job on a shared
 * store that j coalesced onto, which its submitters are told. 0, or -1
 * if out of memory.
 */
int job_set_alias(struct job *j, const char *handle, size_t len);

/* job_kept_result tells whether j's outcome is one whose result is kept (not dead, not none). */
static inline bool
job_kept_result(const struct job *j)
{
    return j->ext != NULL &&
           (j->ext->outcome == JOB_OUTCOME_COMPLETE || j->ext->outcome == JOB_OUTCOME_FAIL ||
            j->ext->outcome == JOB_OUTCOME_EXCEPTION);
}

/*
 * job_row_text is what a store row keeps as j's result (struct
 * store_job's result): the result of a kept outcome, else the last
 * failure's text (a dead or retrying job); NULL if none. job_row_len is
 * its length.
 */
static inline const unsigned char *
job_row_text(const struct job *j)
{
    return j->ext == NULL ? NULL : job_kept_result(j) ? j->ext->result : j->ext->error;
}

static inline size_t
job_row_len(const struct job *j)
{
    return j->ext == NULL ? 0 : job_kept_result(j) ? j->ext->result_len : j->ext->error_len;
}

/*
 * job_set_row_text keeps a store row's result (len bytes) where
 * job_row_text finds it, by j's outcome, which is set first. 0, or -1 if
 * out of memory.
 */
int job_set_row_text(struct job *j, const void *text, size_t len);

/*
 * job_set_warning keeps len bytes of text (at most max of them) as the
 * current attempt's last WORK_WARNING, apart from the last failure's text
 * in error; len 0 forgets it. Returns 0, or -1 out of memory.
 */
int job_set_warning(struct job *j, const void *text, size_t len, size_t max);

/* job_has_waiters tells whether any client waits for j. */
static inline bool
job_has_waiters(const struct job *j)
{
    return j->ext != NULL && !TAILQ_EMPTY(&j->ext->waiters);
}

struct job *job_ref(struct job *j);

/*
 * job_unref drops a reference; the last one frees the job and its job_ext.
 * NULL is a no-op.
 */
void job_unref(struct job *j);

/* job_nwaiters counts the clients attached to a job. */
unsigned job_nwaiters(const struct job *j);

/*
 * job_state_name names j's state for people, as admin "show job" and
 * /api/job do: a SETTLING job is "running" (status counts it so), a
 * scheduled one that failed before "retrying", a pending one that waits
 * for other jobs (deps.c) "held". Static text.
 */
const char *job_state_name(const struct job *j);

/* job_prio_name names a priority: "high", "normal" or "low"; static text. */
const char *job_prio_name(unsigned prio);

/* job_prio_named returns the priority named by len bytes of name (any case), or -1. */
int job_prio_named(const char *name, size_t len);

/* job_outcome_name names an outcome ("complete", "fail", "exception", "dead"; "-" none). */
const char *job_outcome_name(unsigned outcome);

/*
 * job_ended tells whether j has ended (settling, dead or kept): only its
 * deletion, or its place among dead or kept jobs, is left, so it cannot
 * be cancelled.
 */
static inline bool
job_ended(const struct job *j)
{
    return j->state == JOB_SETTLING || j->state == JOB_DEAD || j->state == JOB_DONE;
}

#endif
