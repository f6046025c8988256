/*
 * The numbers the server keeps: plain counters bumped on the loop thread,
 * fixed log-scale histograms, and the one renderer that writes them out
 * as Prometheus text samples (the admin "stats" listing and HTTP /metrics
 * print the same lines; /metrics adds the # HELP and # TYPE comments).
 * Per-function counters live in struct func (struct stats_func); the rest
 * in struct srv (struct stats). Gauges (queued, running, workers, the
 * oldest job's age, connections by kind) are read from the queue and the
 * connection list when rendered, so nothing keeps them twice.
 */
#ifndef DSJOB_SERVER_STATS_H
#define DSJOB_SERVER_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct func;
struct job;
struct srv;

/* Buckets of a histogram, the last one being +Inf. */
#define STATS_NBOUNDS 14

/*
 * A histogram: how many observations fell in each bucket (not cumulative:
 * the renderer adds them up) and their sum, in the histogram's own unit
 * (milliseconds for times, operations for batch sizes).
 */
struct stats_hist {
    uint64_t n[STATS_NBOUNDS + 1]; /* observations <= bound i, and > every lower bound */
    uint64_t sum;                  /* of every observation */
};

/* What --max-* or another limit refused, by name (dsjob_limit_hits_total{limit=...}). */
enum stats_limit {
    STATS_LIMIT_MAX_CONNECTIONS,   /* a connection refused at accept */
    STATS_LIMIT_MAX_JOBS,          /* a submit refused: the server is full */
    STATS_LIMIT_MAX_QUEUE,         /* a submit refused: its function's queue is full */
    STATS_LIMIT_MAX_PACKET_SIZE,   /* a peer dropped for a packet too large */
    STATS_LIMIT_MAX_OUTPUT_BUFFER, /* a peer dropped for not reading its replies */
    STATS_LIMIT_IDLE_TIMEOUT,      /* a peer dropped for an incomplete message */
    STATS_LIMIT_REJECT_NO_WORKER,  /* a submit refused: no worker can do it */
    STATS_LIMIT_MAX_DEAD,          /* a dead job dropped as the oldest past --max-dead */
    STATS_LIMIT_DEAD_MAX_AGE,      /* a dead job dropped, older than --dead-max-age */
    STATS_LIMIT_MAX_KEPT,          /* a kept result dropped as the oldest past --max-kept */
    STATS_NLIMITS
};

/* One function's counters; embedded in struct func, zero when it is made. */
struct stats_func {
    uint64_t submitted;     /* jobs made by a submit (not coalesced onto another) */
    uint64_t completed;     /* WORK_COMPLETE that ended a job */
    uint64_t failed;        /* jobs that ended failed (WORK_FAIL, or out of attempts) */
    uint64_t exceptions;    /* jobs that ended with WORK_EXCEPTION */
    uint64_t retried;       /* failed attempts run again (--retry-on, crashes) */
    uint64_t cancelled;     /* jobs cancelled by "cancel job" or "drop function" */
    uint64_t expired;       /* jobs not started by their deadline (lifecycle_expire_jobs) */
    struct stats_hist wait; /* ms from queued (or run again) to grabbed */
    struct stats_hist run;  /* ms from grabbed to its end or failed attempt */
};

/* The server-wide counters; embedded in struct srv. */
struct stats {
    uint64_t accepted;              /* connections accepted */
    uint64_t bytes_in;              /* bytes read from peers */
    uint64_t bytes_out;             /* bytes written to peers */
    uint64_t limits[STATS_NLIMITS]; /* refusals, by limit */
    uint64_t replayed;              /* jobs replayed from the store at start */
    uint64_t pg_claimed;            /* jobs this server took by lease from a shared store */
    uint64_t pg_lease_lost;         /* results or rewrites discarded: the lease had been lost */
    uint64_t pg_dropped;            /* queued jobs dropped here: their lease had been lost */
    uint64_t pg_released;           /* leases given up: on jobs it had lost track of */
    uint64_t commits;               /* store batches committed */
    uint64_t commit_errors;         /* store batches that failed */
    uint64_t sched_fires;           /* jobs submitted by schedules (schedule.c) */
    int64_t started;                /* clock_uptime() when the server was bound */
    uint64_t render_us;             /* how long the last stats_render took, microseconds */
    bool store_failing;             /* the last commit failed */
    char store_error[128];          /* ... and why */
    struct stats_hist batch_ops;    /* operations per committed batch */
    struct stats_hist commit_ms;    /* ms from a batch's hand-off to its answer on the loop */
};

/* stats_limit_name names a limit as the limit label does ("max_jobs"); static text. */
const char *stats_limit_name(enum stats_limit limit);

/* stats_clock returns the loop's cached wall clock in ms (wraps: only differences count). */
uint32_t stats_clock(const struct srv *srv);

/* stats_observe counts value v (in the histogram's unit); times is true for a time in ms. */
void stats_observe(struct stats_hist *h, bool times, uint64_t v);

/* stats_grabbed notes that j was grabbed: its queue wait ends, its run starts. */
void stats_grabbed(struct srv *srv, struct job *j);

/* stats_ran notes that j's attempt ended (done, failed or given back) after it was grabbed. */
void stats_ran(struct srv *srv, struct job *j);

/* stats_queued restarts j's queue wait: it was queued, run again or replayed now. */
void stats_queued(struct srv *srv, struct job *j);

/*
 * stats_render appends every sample to out as Prometheus text lines
 * ("name{labels} value"), with # HELP and # TYPE lines when comments is
 * true. 0, or -1 if out of memory (out then holds part of it).
 */
int stats_render(struct srv *srv, struct evbuffer *out, bool comments);

/*
 * stats_pg_waiting returns how many jobs of the function named name wait in
 * the shared PostgreSQL table under no server's lease, as the last lease
 * renewal counted them (0 for other stores). stats_pg_waiting_next walks
 * the functions counted, from a walk set to {NULL, 0}: it returns the next
 * name and sets *n, or NULL after the last.
 */
struct stats_walk {
    const char *at;
    size_t i;
};
uint64_t stats_pg_waiting(const struct srv *srv, const char *name, size_t len);
const char *stats_pg_waiting_next(const struct srv *srv, struct stats_walk *it, uint64_t *n);

/* stats_oldest_ms returns how long f's oldest queued job has waited, in ms; 0 if none. */
uint64_t stats_oldest_ms(const struct srv *srv, const struct func *f);

/* stats_conns counts the open connections by kind: client, worker, admin. */
void stats_conns(const struct srv *srv, unsigned counts[3]);

#endif
