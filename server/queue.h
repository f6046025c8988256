/*
 * The job queues: functions by name, each with three FIFO lists (high,
 * normal, low), a unique-key index and the workers that can do it; jobs by
 * handle; the epoch heap of jobs waiting for their time; and the sleeping
 * workers to wake. Plain data structures, no I/O: callers decide what to
 * send (a NOOP to the worker queue_wake_one returns, a JOB_ASSIGN for the
 * job queue_grab returns), so every rule here is unit-tested without a loop.
 */
#ifndef DSJOB_SERVER_QUEUE_H
#define DSJOB_SERVER_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "heap.h"
#include "hmap.h"
#include "job.h"
#include "stats.h"

struct func;
struct flow;
TAILQ_HEAD(flow_list, flow);

/* One function a worker can do. */
struct ability {
    struct qworker *worker;         /* the worker (borrowed) */
    struct func *func;              /* the function (borrowed) */
    TAILQ_ENTRY(ability) by_func;   /* in func->workers */
    TAILQ_ENTRY(ability) by_worker; /* in worker->abilities, in grab order */
    TAILQ_ENTRY(ability) sleeping;  /* in func->sleepers while the worker sleeps */
    uint32_t timeout_ms;            /* CAN_DO_TIMEOUT, 0 for none */
};
TAILQ_HEAD(ability_list, ability);

/* The queue's view of a worker connection; embedded in struct conn. */
struct qworker {
    struct ability_list abilities; /* what it can do, newest first: the grab order */
    struct job_list held;          /* jobs it is running */
    unsigned nabilities;           /* entries in abilities */
    unsigned nheld;                /* entries in held */
    bool asleep;                   /* sent PRE_SLEEP, not woken since */
};

struct func {
    struct hnode node;               /* in queue.funcs */
    TAILQ_ENTRY(func) order;         /* in queue.func_order, by creation */
    struct job_list jobs[JOB_NPRIO]; /* queued jobs, FIFO per priority */
    unsigned nqueued[JOB_NPRIO];     /* entries in jobs[] */
    unsigned nscheduled;             /* its jobs waiting in the epoch heap */
    unsigned npending;               /* its jobs waiting for the store to commit them */
    unsigned nsettling;              /* its done jobs waiting for their deletion to commit */
    unsigned nrunning;               /* its jobs held by workers */
    unsigned max_queue[JOB_NPRIO];   /* maxqueue limits; 0 for none */
    struct hmap uniques;             /* its jobs by explicit unique key */
    struct hmap payloads;            /* its jobs of unique "-", by payload */
    struct hmap settling;            /* its SETTLING jobs with a unique key, by that key */
    struct ability_list workers;     /* every worker that can do it */
    struct ability_list sleepers;    /* of those, the ones asleep */
    unsigned nworkers;               /* entries in workers */
    struct job_list dead;            /* its DEAD jobs, oldest death first */
    unsigned ndead;                  /* entries in dead */
    uint64_t dead_dropped;           /* dead jobs dropped as the oldest past --max-dead */
    unsigned nkept;                  /* its DONE jobs (in queue.kept) */
    struct hmap kept;                /* of those, the ones with a unique key, by that key */
    uint32_t retries;                /* admin "retry": attempts allowed; 0: --job-retries */
    uint32_t backoff_base_ms;        /* admin "retry": first wait; with max, 0: the server's */
    uint32_t backoff_max_ms;         /* admin "retry": longest wait */
    uint32_t max_age;                /* admin "maxage": seconds a job may wait to start; 0:
                                        --max-queue-age */
    uint32_t unique_for;             /* admin "uniquefor": seconds an ended job's unique key
                                        stays taken; 0: --unique-for */
    struct stats_func stats;         /* its counters (stats.c) */
    struct flow *flow;               /* owned: its flow control (flow.c), or NULL: none */
    size_t name_len;                 /* name bytes */
    char name[];                     /* NUL-terminated */
};
TAILQ_HEAD(func_list, func);

/*
 * The time index of --priority-aging: when jobs were submitted, without a
 * field in struct job. seq grows with every submit, so a ring of samples
 * (the seq of the first job added in each period of gran seconds, and that
 * period's start) tells the submit time of any seq by binary search: the
 * job was added in the period of the last sample whose seq is <= its own.
 * Samples older than any age that still matters are dropped; a seq before
 * the first sample left maps to floor, which is that old too.
 */
#define QUEUE_AGE_SAMPLES 256

struct queue_age_sample {
    uint64_t seq; /* the first job added in the period */
    int64_t t;    /* the period's start, wall-clock seconds */
};

struct queue_ages {
    struct queue_age_sample s[QUEUE_AGE_SAMPLES]; /* a ring, oldest at head */
    unsigned head;                                /* index of the oldest sample */
    unsigned n;                                   /* samples held */
    int64_t floor;                                /* the time of seqs before the first sample */
    int64_t gran;                                 /* seconds per period: aging / 64, at least 1 */
};

struct queue {
    struct hmap funcs;           /* struct func by name */
    struct func_list func_order; /* the same, oldest first */
    struct hmap jobs;            /* struct job by handle */
    struct heap scheduled;       /* SCHEDULED jobs by time */
    struct heap expiring;        /* waiting (QUEUED, SCHEDULED) jobs with a deadline, by it */
    struct job_list kept;        /* DONE jobs of every function, oldest end first */
    bool round_robin;            /* rotate a worker's abilities after a grab */
    size_t njobs;                /* jobs in queue.jobs */
    size_t nended;               /* of those, DEAD or DONE (see queue_live) */
    size_t nkept;                /* of those, DONE (in kept) */
    unsigned default_max_queue;  /* a new function's maxqueue, every priority; 0: none */
    bool global;                 /* --priority global: the best job over all abilities */
    bool turns;                  /* --priority gearmand-2.0: the best priority over all
                                    abilities, the abilities taking turns within it */
    bool ranked;                 /* global, turns or aging: queue_grab compares list heads */
    unsigned aging;              /* --priority-aging seconds per level; 0: off */
    struct queue_ages ages;      /* submit times, with aging */
    struct flow_list flows;      /* the struct flow of every function that has one */
    int64_t (*now_ms)(void);     /* the clock flow's rates read (monotonic ms), or NULL: 0 */
    void (*flow_freed)(struct func *f, void *arg); /* a running job of f with a struct flow
                                                      stopped: a slot may be free */
    void *flow_arg;                                /* flow_freed's arg */
};

void queue_init(struct queue *q, bool round_robin);

/* The grab orders of --priority. */
enum queue_order {
    QUEUE_ORDER_FUNCTION, /* gearmand 1.1.20: the first ability with work (the default) */
    QUEUE_ORDER_GLOBAL,   /* the highest priority over all abilities, oldest first */
    QUEUE_ORDER_TURNS,    /* gearmand 2.0: the highest priority over all abilities, and
                             among those with a job of it the first, which then moves to
                             the back (round robin, always) */
};

/*
 * queue_set_order chooses how queue_grab ranks jobs, before any job is
 * added: QUEUE_ORDER_GLOBAL takes the highest-priority job among all of a
 * worker's functions (first submitted first within a priority) instead of
 * the first function with work; QUEUE_ORDER_TURNS the highest priority
 * too, from the first of the worker's abilities (in their rotating order)
 * that has a job of it; aging > 0 counts a job that has waited more than
 * aging seconds one priority higher, and one more for each further aging
 * seconds, up to high. now is the wall clock (seconds).
 */
void queue_set_order(struct queue *q, enum queue_order order, unsigned aging, int64_t now);

/*
 * queue_rank returns the priority j counts as at time now: its own, or
 * higher with aging (JOB_PRIO_HIGH is the highest).
 */
enum job_prio queue_rank(const struct queue *q, const struct job *j, int64_t now);

/*
 * queue_set_prio gives a job that waits (queued, scheduled or waiting for
 * its store commit) another priority; a queued job moves to the tail of its
 * new list (it stays where it is if the priority does not change). -1 if
 * the job does not wait (running, or done and settling): nothing changes.
 */
int queue_set_prio(struct queue *q, struct job *j, enum job_prio prio);

/* queue_release unrefs every job and frees every function. */
void queue_release(struct queue *q);

/*
 * queue_name_bad_byte returns the offset of the first control byte (below
 * 0x20, or 0x7f) in a function name of len bytes, or -1 if there is none.
 * Callers refuse such names before queue_func creates them: the admin
 * listings print names between tabs and newlines, and a name holding them
 * would forge lines there (gearmand takes them).
 */
ptrdiff_t queue_name_bad_byte(const char *name, size_t len);

/* queue_func finds a function by name; creates it if create. NULL if absent or no memory. */
struct func *queue_func(struct queue *q, const char *name, size_t len, bool create);

/* queue_drop_func frees a function that has no workers and no jobs (queue_total 0). */
void queue_drop_func(struct queue *q, struct func *f);

/* queue_first_idle returns a queued or scheduled job of f (to empty it), or NULL. */
struct job *queue_first_idle(const struct queue *q, const struct func *f);

/* queue_find_job finds a job by handle, or NULL. */
struct job *queue_find_job(const struct queue *q, const char *handle, size_t len);

/* queue_find_unique finds a job of f with this explicit unique key, or NULL. */
struct job *queue_find_unique(const struct func *f, const void *unique, size_t len);

/* queue_find_payload finds a job of f submitted with unique "-" and this payload, or NULL. */
struct job *queue_find_payload(const struct func *f, const void *data, size_t len);

/*
 * queue_total counts f's jobs: queued, scheduled, pending (waiting for the
 * store) and running.
 */
unsigned queue_total(const struct func *f);

/*
 * queue_full tells whether f's maxqueue limit for prio is reached: the limit
 * is compared with all of f's jobs (queue_total), as gearmand compares it.
 */
bool queue_full(const struct func *f, enum job_prio prio);

/*
 * queue_add takes over a reference to a JOB_NEW job of f and indexes it by
 * handle and unique key (its payload, in a key space of its own, if
 * unique_is_data). A job with a time
 * after now goes to the epoch heap,
 * any other to the tail of its priority list. Returns 0, or -1 if out of
 * memory (the reference stays with the caller).
 */
int queue_add(struct queue *q, struct func *f, struct job *j, int64_t now);

/*
 * queue_add_as is queue_add, except that with pending the job is only
 * indexed (so that its unique key coalesces) and waits, JOB_PENDING, for
 * queue_commit: the store has not yet made it durable.
 */
int queue_add_as(struct queue *q, struct func *f, struct job *j, int64_t now, bool pending);

/* queue_commit places a JOB_PENDING job in its list or the epoch heap. 0, or -1 (no memory). */
int queue_commit(struct queue *q, struct job *j, int64_t now);

/*
 * queue_settle ends a stored job whose deletion the store has not yet
 * committed: it leaves its list, heap or worker and its unique index (a
 * new submit with its key makes a new job), but keeps its handle, its
 * place in queue_total and the queue's reference, and queue_find_settling
 * finds it by unique key, so that no answer says it is gone before the
 * store would also say so after a crash. queue_remove (the store's commit)
 * ends it. The caller must have detached its waiters.
 */
void queue_settle(struct queue *q, struct job *j);

/* queue_find_settling finds a SETTLING job of f by its unique key, or NULL. */
struct job *queue_find_settling(const struct func *f, const void *unique, size_t len);

/*
 * queue_bury moves a job (running, settling, or just replayed as pending)
 * into its function's dead set: out of its list and its unique index (a
 * new submit with its key makes a new job), still found by handle, not
 * counted by queue_total. The caller must have detached its waiters.
 */
void queue_bury(struct queue *q, struct job *j);

/*
 * queue_keep moves a finished job (as queue_bury takes them) to the tail of
 * queue.kept, JOB_DONE: found by handle and, the newest of a key first, by
 * queue_find_kept, not counted by queue_total.
 */
void queue_keep(struct queue *q, struct job *j);

/* queue_find_kept finds the newest DONE job of f with this explicit unique key, or NULL. */
struct job *queue_find_kept(const struct func *f, const void *unique, size_t len);

/*
 * queue_revive puts a DEAD job back at the tail of its list (or the epoch
 * heap, if its time is later than now), indexed by its unique key again.
 * 0; -1 if out of memory, -2 if a live job of its function holds its
 * unique key (it stays dead).
 */
int queue_revive(struct queue *q, struct job *j, int64_t now);

/*
 * queue_backoff takes a RUNNING job back from its worker, as
 * queue_requeue does (one attempt counted), but puts it in the epoch heap
 * to run at when. 0, or -1 if out of memory (it is then requeued at the
 * head of its list instead).
 */
int queue_backoff(struct queue *q, struct job *j, int64_t when);

/*
 * queue_remove takes a job out of wherever it is (list, heap, worker) and
 * out of the indexes, and drops the queue's reference. The caller must have
 * detached its waiters first.
 */
void queue_remove(struct queue *q, struct job *j);

/*
 * queue_grab gives worker w the next job it can do: over its abilities,
 * newest registration first as in gearmand (with round_robin, the function
 * just served moves to the back), the first high, else normal, else low
 * job. With global order, the job of the highest priority over all its
 * abilities, the lowest seq (first submitted) among equals; with turns,
 * of that priority the job first in the first ability that has one, which
 * then moves to the back of w's abilities (gearmand 2.0); with aging,
 * priorities are those of queue_rank at now (wall-clock seconds, read only
 * with aging). The job becomes RUNNING and is held by w. NULL if there is
 * none, or if there is no memory for the job's job_ext (the job stays
 * first in line).
 */
struct job *queue_grab(struct queue *q, struct qworker *w, int64_t now);

/*
 * queue_grab_unstored is queue_grab over the jobs that are not stored
 * (j->stored false: foreground jobs, and any job a store does not keep),
 * for a server that may not hand out its stored jobs now (a shared
 * store's leases that may have run out, storage_lease.c). A stored job
 * ahead of one in its list is skipped, and stays first in line.
 * queue_has_unstored_work is queue_has_work over the same jobs.
 */
struct job *queue_grab_unstored(struct queue *q, struct qworker *w, int64_t now);
bool queue_has_unstored_work(struct queue *q, const struct qworker *w);

/* queue_ability_of returns w's ability for f, or NULL. */
struct ability *queue_ability_of(const struct qworker *w, const struct func *f);

/*
 * queue_requeue puts a RUNNING job back at the head of its priority list
 * (it was first in line once already) and counts one attempt.
 */
void queue_requeue(struct queue *q, struct job *j);

/*
 * queue_due moves every scheduled job whose time is <= now to the tail of
 * its list, in time order, calling due(job, arg) for each. Returns the time
 * of the next scheduled job, or 0 if none is left.
 */
int64_t queue_due(struct queue *q, int64_t now, void (*due)(struct job *, void *), void *arg);

/*
 * queue_expired takes out of queue.expiring and returns the waiting job
 * whose deadline is the earliest, if it is at or before now_ms (epoch
 * ms); NULL if none is. The job stays where it waits: the caller ends it.
 */
struct job *queue_expired(struct queue *q, int64_t now_ms);

/* queue_next_due returns the earliest scheduled time, or 0. */
int64_t queue_next_due(const struct queue *q);

/*
 * queue_hold_deadline: a held job (JOB_PENDING until the jobs it waits for
 * end, deps.c) keeps its deadline: it joins the expiring heap, so that
 * queue_expired gives it once the deadline passes, held or queued.
 */
void queue_hold_deadline(struct queue *q, struct job *j);

/* Workers. */
void queue_worker_init(struct qworker *w);

/*
 * queue_can_do adds w's ability for f, at the front of its grab order, or
 * updates its timeout if w already has it. 0, or -1 if out of memory.
 */
int queue_can_do(struct queue *q, struct qworker *w, struct func *f, uint32_t timeout_ms);

/* queue_cant_do removes w's ability for f, if it has one. */
void queue_cant_do(struct queue *q, struct qworker *w, struct func *f);

/* queue_reset_abilities removes all of w's abilities. */
void queue_reset_abilities(struct queue *q, struct qworker *w);

/*
 * queue_has_work tells whether some function w can do has a queued job
 * that may start now (flow control may hold a function's jobs back).
 */
bool queue_has_work(const struct queue *q, const struct qworker *w);

/* queue_sleep marks w asleep: queue_wake_one may pick it. */
void queue_sleep(struct qworker *w);

/* queue_awake marks w awake (it sent something other than PRE_SLEEP, or was woken). */
void queue_awake(struct qworker *w);

/*
 * queue_wake_one picks the sleeping worker that has slept longest among
 * those that can do f, marks it awake, and returns it (the caller sends it
 * a NOOP). NULL if no worker of f sleeps.
 */
struct qworker *queue_wake_one(struct func *f);

/*
 * queue_live counts the jobs --max-jobs bounds: every job held but the
 * ended ones (the dead sets and the kept results).
 */
static inline size_t
queue_live(const struct queue *q)
{
    return q->njobs - q->nended;
}

#endif
