/*
 * The server's side of persistence: it opens the configured store, replays
 * it into the queue at start, and makes the JOB_CREATED promise hold. A
 * background submit on a durable store is answered only after the batch
 * holding it commits; every background submit of a loop turn (up to
 * --store-batch) shares one commit, and so do the deletions of finished
 * jobs. Answers to one connection keep their order: once a connection has
 * a background submit waiting for a commit, its later requests other than
 * background submits wait too (conn.c asks storage_must_wait). The
 * backend is written by a thread of its own, so commits do not hold up
 * the loop.
 */
#ifndef DSJOB_SERVER_STORAGE_H
#define DSJOB_SERVER_STORAGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "store.h"

struct conn;
struct event;
struct func;
struct job;
struct srv;

/* What a store_op does. */
enum store_op_kind {
    STORE_OP_ADD,    /* add sj: a new job */
    STORE_OP_UPDATE, /* rewrite sj: a stored job changed (attempts, time, priority, state) */
    STORE_OP_REMOVE, /* remove sj.id */
    STORE_OP_FUNC,   /* set sf: a function's settings */
    STORE_OP_LEASE,  /* ls: take ready jobs and renew leases (a shared store) */
};

/*
 * One change for the writer thread: a job to add or rewrite (its fields
 * copied), an id to remove, or a function's settings.
 */
struct store_op {
    struct store_op *next;   /* next in the batch, in order */
    enum store_op_kind kind; /* what it does */
    /*
     * The job, referenced, or NULL: for a remove or update that settles it
     * (the job is SETTLING until this op commits), and for a plain update
     * (made again from the job if its batch fails).
     */
    struct job *job;
    bool settles;           /* the remove or rewrite that ends job's SETTLING */
    bool failed;            /* set by the writer: the backend refused it */
    char why[STORE_ERRLEN]; /* set by the writer: why */
    struct store_job sj;    /* for an add or update, pointers into buf */
    struct store_func sf;   /* for a func, its name in buf */
    /* A shared store's answers, written by the writer during flush. */
    bool lost;                    /* a remove or update found the row another server's */
    char alias[STORE_HANDLE_MAX]; /* an add coalesced onto this handle, or "" */
    struct store_lease ls;        /* for a lease, what to take and what was taken */
    char buf[];                   /* the job's bytes */
};

/* One answer owed to a submitter once the batch holding its job commits. */
struct ack {
    struct job *job;            /* referenced; JOB_CREATED names it */
    struct store_op *op;        /* the add of a new job, or NULL */
    struct conn *client;        /* who to answer, or NULL once it has gone */
    char *error;                /* "CODE\0text" to send instead of JOB_CREATED (behind the
                                   ack, in its allocation), or NULL */
    size_t error_len;           /* its length */
    TAILQ_ENTRY(ack) link;      /* in its batch's list, in submission order */
    TAILQ_ENTRY(ack) by_client; /* in the client's list */
};
TAILQ_HEAD(ack_list, ack);

/* The changes of one commit and the answers waiting for it. */
struct batch {
    struct store_op *ops;   /* adds and removes, in order */
    struct store_op **tail; /* where the next goes */
    struct ack_list acks;   /* answers owed, in order */
    unsigned nacks;         /* entries in acks */
    uint32_t handed_ms;     /* stats_clock() when handed to the writer */
    bool finished;          /* set by the writer (under lock): ok and why are final */
    bool ok;                /* the commit succeeded */
    char why[STORE_ERRLEN]; /* why not */
};

/*
 * What a test may set in struct storage before storage_open (tests/unit/
 * t_storage.c); the server leaves it zero. ops, when set, is the backend
 * instead of the one --store names (a durable one, even if it is
 * store_null_ops). alloc_fails, when set, is asked before each allocation
 * this module makes, with what names it ("op", "ack", "error", "batch",
 * "remove"), and makes that allocation fail by returning true.
 */
struct storage_seam {
    const struct store_ops *ops;                      /* the backend to use */
    bool (*alloc_fails)(const char *what, void *arg); /* fails an allocation */
    void *arg;                                        /* alloc_fails' argument */
};

struct storage {
    struct storage_seam seam;    /* tests only: see struct storage_seam */
    const struct store_ops *ops; /* the backend; store_null_ops when not durable */
    struct store *st;            /* its state: the writer's alone once it runs */
    struct batch open;           /* being filled by the loop */
    struct batch *inflight;      /* handed to the writer, or NULL */
    struct batch *handed;        /* under lock: the batch the writer is to take */
    unsigned batch_max;          /* --store-batch: hand over at once past this many */
    unsigned interval_ms;        /* --store-commit-interval; 0: at the end of the loop turn */
    struct event *flush_ev;      /* hands the open batch over */
    struct event *done_ev;       /* reads done_pipe */
    int done_pipe[2];            /* the writer's "batch done" to the loop */
    pthread_t writer;            /* the writer thread */
    pthread_mutex_t lock;        /* guards handed, finished, quit */
    pthread_cond_t wake;         /* signals the writer, and the loop in storage_drain */
    bool writer_running;         /* writer started (durable stores only) */
    bool quit;                   /* under lock: the writer should end */
    bool scheduled;              /* flush_ev is pending */
    bool lazy;                   /* ...on the deletions' timer, which a submit cuts short */
    bool want_flush;             /* flush asked for while a batch was in flight */
    bool retry;                  /* the last commit failed: flush even if empty */
    bool durable;                /* a backend other than none */
    /* A shared store (postgres): jobs run here only under this server's lease. */
    bool shared;             /* the backend has lease, remove_job and wait_notify */
    bool want_lease;         /* a lease op goes in the next batch */
    bool lease_inflight;     /* a lease op is in the batch in flight */
    bool renew_due;          /* the next lease op renews this server's leases */
    char *strays;            /* handles the last renew held that the queue lacks, back to back */
    size_t nstrays;          /* entries in strays: the next lease op gives their leases up */
    unsigned prefetch;       /* --pg-prefetch */
    struct event *poll_ev;   /* --pg-poll-ms: ask for ready jobs */
    struct event *renew_ev;  /* a third of --pg-lease: renew */
    struct event *expiry_ev; /* when another server's first lease runs out: take */
    struct event *due_ev;    /* when the first job waiting for its run-at time is due: take */
    struct event *notify_ev; /* reads notify_pipe */
    int notify_pipe[2];      /* the notifier's "jobs are ready" to the loop */
    int stop_pipe[2];        /* the loop's "stop" to the notifier */
    pthread_t notifier;      /* the thread in the backend's wait_notify */
    bool notifier_running;   /* notifier started */
    uint64_t commits;        /* batches committed */
    uint64_t failures;       /* batches that failed */
    struct event *stuck_ev;  /* the batch in flight has not come back for a while */
    bool stuck;              /* ...and it was logged: /healthz says so until it comes back */
    char *waiting;           /* shared: the last renewal's count of jobs ready in the table
                                under no lease, by function (store_lease's waiting, copied) */
    size_t nwaiting;         /* functions in waiting */
};

/* storage_open opens and replays the configured store. 0, or -1 with srv->errmsg set. */
int storage_open(struct srv *srv);

/* storage_close commits what is pending, answers its submitters, and closes the store. */
void storage_close(struct srv *srv);

/*
 * storage_submit answers a background submit on a durable store: j is a
 * new job (the caller's reference is taken over) or, with existing, the
 * job the submit coalesced onto. The answer (JOB_CREATED) waits for the
 * commit. On failure (out of memory) the submitter is sent an ERROR (after
 * the answers it is already owed, if memory allows) and the job is dropped
 * before it reaches the batch: nothing is stored that its client was told
 * failed.
 */
void storage_submit(struct srv *srv, struct conn *c, struct job *j, bool existing);

/*
 * storage_adopt answers a background submit on a durable store that
 * coalesced onto a live foreground job j, which no store holds: j becomes
 * background and is stored, and the answer (JOB_CREATED) waits for that
 * commit, so the job survives its foreground clients and a restart. On
 * out of memory the submitter is sent an ERROR and j is left as it was.
 */
void storage_adopt(struct srv *srv, struct conn *c, struct job *j);

/* storage_refuse queues an ERROR for c behind the answers it is owed. */
void storage_refuse(struct srv *srv, struct conn *c, const char *code, const char *text);

/*
 * storage_settle ends a finished job that is in the store: its deletion
 * (or, if j->ext->settle_to says it goes to the dead set or is kept, the
 * rewrite of its row with its final state) goes in the open batch, and the
 * job stays SETTLING in the queue (counted
 * by status, found by GET_STATUS) until that deletion commits, so that no
 * answer shows it gone before a crash would. If worker (the connection
 * that finished it) is given, its next request waits for that commit too,
 * so a worker sees its result durable before it is given more; the
 * batch then goes at the end of this loop turn, shared by every job that
 * ended in it, instead of after STORAGE_REMOVE_DELAY_MS. Returns true if j
 * is settling; false if j is not stored (or there was no memory for the
 * deletion, which is logged: the job then runs again after a restart),
 * and the caller removes it from the queue itself.
 */
bool storage_settle(struct srv *srv, struct job *j, struct conn *worker);

/*
 * storage_update puts the rewrite of stored job j (its attempts, time,
 * priority, and while it settles its final state) in the open batch, to
 * commit with the next one (within STORAGE_REMOVE_DELAY_MS). A no-op for a
 * job that is not stored. A failed commit makes it again from the job, so
 * the store gets the job's latest state. Out of memory is logged: the
 * store then keeps the job as it was.
 */
void storage_update(struct srv *srv, struct job *j);

/*
 * storage_remove deletes a stored job that is not settling (a dead job or
 * a kept result that is dropped) in the next commit, and marks it not
 * stored. A no-op for a job that is not stored.
 */
void storage_remove(struct srv *srv, struct job *j);

/* storage_set_func stores f's settings (admin "retry") with the next commit. 0, or -1 (memory). */
int storage_set_func(struct srv *srv, const struct func *f);

/*
 * storage_flush hands the open batch to the writer now (or, if one is in
 * flight, as soon as that one is done). Its answers go out when the writer
 * reports back.
 */
void storage_flush(struct srv *srv);

/* storage_drain blocks until everything handed or open is committed and answered (at a stop). */
void storage_drain(struct srv *srv);

/*
 * storage_want_lease asks, on a shared store, for a lease op in the next
 * batch: ready jobs for the functions whose workers here have too few
 * (a worker grabbed, found nothing, went to sleep or said CAN_DO; another
 * server said NOTIFY; the poll timer). A no-op on other stores.
 */
void storage_want_lease(struct srv *srv);

/*
 * storage_stuck says, in buf, that the commit in flight has not come back
 * for a while (it was logged), or returns NULL.
 */
const char *storage_stuck(const struct srv *srv, char *buf, size_t len);

/* storage_forget_client drops the answers owed to a connection that is closing. */
void storage_forget_client(struct srv *srv, struct conn *c);

/*
 * storage_must_wait tells whether c's next request, of packet type type
 * (0 for an admin line), must wait for c's pending answers first.
 */
bool storage_must_wait(const struct conn *c, uint32_t type);

#endif
