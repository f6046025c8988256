/*
 * A job: one allocation holding the struct, its handle, unique key, reducer
 * and payload. Jobs are refcounted: the queue holds one reference while the
 * job exists for clients; anything that must keep a finished job alive for
 * a while (a pending store batch, a reply being built) takes another.
 */
#ifndef DSJOB_SERVER_JOB_H
#define DSJOB_SERVER_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "hmap.h"

struct conn;
struct func;
struct event;
struct qworker;

enum job_prio {
    JOB_PRIO_HIGH,
    JOB_PRIO_NORMAL,
    JOB_PRIO_LOW,
    JOB_NPRIO
};

enum job_state {
    JOB_NEW,       /* made, not yet in the queue */
    JOB_QUEUED,    /* in its function's queue, waiting for a worker */
    JOB_RUNNING,   /* held by a worker */
    JOB_SCHEDULED, /* waiting in the epoch heap for its time */
    JOB_PENDING,   /* indexed, waiting for the store to commit it */
};

/* A client connection waiting for a foreground job's result. */
struct waiter {
    struct conn *client;           /* the waiting connection (borrowed) */
    struct job *job;               /* the job it waits for (borrowed) */
    TAILQ_ENTRY(waiter) by_job;    /* in job->waiters */
    TAILQ_ENTRY(waiter) by_client; /* in the client connection's list */
};
TAILQ_HEAD(waiter_list, waiter);

struct job {
    struct hnode by_handle;        /* in queue.jobs */
    struct hnode by_unique;        /* in func->uniques, when unique_len > 0 */
    TAILQ_ENTRY(job) link;         /* in a func queue, or a worker's held list */
    struct func *func;             /* its function (borrowed; functions outlive jobs) */
    struct qworker *worker;        /* the worker holding it, while RUNNING */
    struct waiter_list waiters;    /* foreground clients to tell */
    struct event *timeout_ev;      /* CAN_DO_TIMEOUT timer while running, or NULL */
    int64_t when;                  /* epoch seconds to run at; 0 for now */
    uint64_t id;                   /* the number in the handle */
    uint64_t seq;                  /* submission order, kept across restarts */
    size_t heap_pos;               /* index in the epoch heap while SCHEDULED */
    size_t data_len;               /* payload bytes */
    uint32_t unique_len;           /* unique key bytes */
    uint32_t numerator;            /* last WORK_STATUS */
    uint32_t denominator;          /* last WORK_STATUS */
    uint32_t attempts;             /* times a worker took it and did not finish */
    uint32_t refs;                 /* references held */
    uint16_t reducer_len;          /* reducer name bytes (SUBMIT_REDUCE_JOB) */
    uint8_t handle_len;            /* handle bytes */
    uint8_t prio;                  /* enum job_prio */
    uint8_t state;                 /* enum job_state */
    bool background;               /* no client waits for it */
    bool cancelled;                /* cancelled while running: never run again */
    bool unique_is_data;           /* unique "-": coalesce on the payload (gearmand) */
    bool stored;                   /* written to the store: remove it there when done */
    bool refused;                  /* the store refused it: coalesced submits are told */
    char buf[];                    /* handle NUL unique NUL reducer NUL data */
};
TAILQ_HEAD(job_list, job);

#define JOB_HANDLE_MAX 200

/*
 * job_new makes a job with one reference. handle, unique, reducer and data
 * are copied. Returns NULL if out of memory or the handle is too long.
 */
struct job *job_new(const char *handle, size_t handle_len, const void *unique,
                    size_t unique_len, const void *reducer, size_t reducer_len,
                    const void *data, size_t data_len);

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
    return (const unsigned char *)j->buf + j->handle_len + 1 + j->unique_len + 1 +
           j->reducer_len + 1;
}

struct job *job_ref(struct job *j);

/* job_unref drops a reference; the last one frees the job. NULL is a no-op. */
void job_unref(struct job *j);

/* job_nwaiters counts the clients attached to a job. */
unsigned job_nwaiters(const struct job *j);

#endif
