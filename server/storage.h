/*
 * The group-commit engine between the server and its store backend: it
 * opens the configured store and replays it, gathers the changes of a
 * loop turn into one batch, has its writer thread commit the batch, and
 * then, on the loop, runs the continuation each change or waiter was
 * given: what the commit means is the caller's (lifecycle.c, durable.c,
 * storage_lease.c), never this module's. Every background submit of a
 * loop turn (up to --store-batch) shares one commit, and so do the
 * deletions of finished jobs. The backend is written by a thread of its
 * own, so commits do not hold up the loop. Nothing here calls a module
 * above it (tests/meta/layers.sh checks).
 */
#ifndef DSJOB_SERVER_STORAGE_H
#define DSJOB_SERVER_STORAGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "store.h"

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
    STORE_OP_SCHED,  /* ss: set, delete or claim a schedule (sched_what) */
    STORE_OP_SCHEDS, /* read every stored schedule into rows */
    STORE_OP_FIRE,   /* claim ss's tick and, if claimed, add sj (its job) in one transaction */
    STORE_OP_DEP,    /* sd: add, end or forget dependency edges (dep_what) */
    STORE_OP_BATCH,  /* sb: set or delete a batch's row (batch_what) */
};

/* A stored schedule read by a STORE_OP_SCHEDS, its bytes in buf; a list by next. */
struct storage_sched_row {
    struct storage_sched_row *next; /* the next row, or NULL */
    struct store_sched ss;          /* the schedule, its strings in buf */
    char buf[];                     /* name, cron, tz, func and payload */
};

struct store_op;

/*
 * A change's continuation: what the caller does once the batch holding op
 * is done with it, on the loop. ok: op committed; else it was dropped (a
 * lease whose batch failed). A change that settles a job is retried until
 * it commits, so its continuation only ever hears ok.
 */
typedef void storage_op_fn(struct srv *srv, struct store_op *op, bool ok);

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
    bool revives;           /* an update that makes a dead job live again (storage_revive) */
    storage_op_fn *done;    /* the caller's continuation, or NULL */
    bool failed;            /* set by the writer: the backend refused it */
    bool untried;           /* set by the writer: never given to the backend (a flush before it
                               in its batch failed) */
    bool committed;         /* set by the writer: an earlier flush of its batch committed it
                               (writer_before_admin), whatever becomes of the batch's last */
    char why[STORE_ERRLEN]; /* set by the writer: why */
    struct store_job sj;    /* for an add or update, pointers into buf */
    struct store_func sf;   /* for a func, its name in buf */
    /* A shared store's answers, written by the writer during flush. */
    bool lost;                      /* a remove or update found the row another server's */
    char alias[STORE_HANDLE_MAX];   /* an add coalesced onto this handle, or "" */
    struct store_lease ls;          /* for a lease, what to take and what was taken */
    struct store_sched ss;          /* for a sched op, its strings in buf */
    int sched_what;                 /* for a sched op: enum store_sched_what */
    bool claimed;                   /* set by the writer: a claim moved the schedule's last tick */
    struct storage_sched_row *rows; /* set by the writer for a STORE_OP_SCHEDS: the rows read
                                       (its continuation takes them) */
    struct store_dep sd;            /* for a dep op, its handles in buf */
    int dep_what;                   /* for a dep op: enum store_dep_what */
    struct store_batch sb;          /* for a batch op, its strings in buf */
    int batch_what;                 /* for a batch op: enum store_batch_what */
    size_t buf_size;                /* for a batch op: bytes of buf */
    store_batch_fn *rowfn;          /* for a shared store's batch admin op: called on the writer
                                       for each row (arg: the op), writing text */
    char *text;                     /* ... the reply it wrote (the room behind sb's strings) */
    size_t text_len, text_room;     /* its bytes, and the room there is for them */
    char buf[];                     /* the job's bytes */
};

struct storage_wait;

/*
 * A waiter's continuation, run on the loop once w's batch is done, in the
 * order the waiters were added: ok says whether it committed (and w->op,
 * if set, was not refused alone); why says why not. why is NULL when the
 * store closes before the batch was handed over: nobody is to be told.
 * It owns w from then on (it frees it).
 */
typedef void storage_wait_fn(struct srv *srv, struct storage_wait *w, bool ok, const char *why);

/*
 * Something that waits for the commit of the open batch: a submitter's
 * answer, or a worker held until its job's end is durable. The caller
 * embeds it (first) in a struct of its own.
 */
struct storage_wait {
    storage_wait_fn *done;          /* the caller's continuation */
    struct store_op *op;            /* an add whose own refusal fails w too, or NULL */
    struct store_op *after;         /* set by storage: the batch's last op when w came, or NULL */
    TAILQ_ENTRY(storage_wait) link; /* in its batch's list, in order */
};
TAILQ_HEAD(storage_wait_list, storage_wait);

/* The changes of one commit and the answers waiting for it. */
struct batch {
    struct store_op *ops;          /* adds and removes, in order */
    struct store_op **tail;        /* where the next goes */
    struct storage_wait_list acks; /* waiters, in order */
    unsigned nacks;                /* entries in acks */
    uint32_t handed_ms;            /* stats_clock() when handed to the writer */
    bool finished;                 /* set by the writer (under lock): ok and why are final */
    bool ok;                       /* the commit succeeded */
    char why[STORE_ERRLEN];        /* why not */
};

/* What a commit did, for the counters (struct storage_hooks' committed). */
struct storage_commit {
    bool ok;         /* it committed */
    const char *why; /* why not */
    uint64_t nops;   /* changes it held */
    uint32_t ms;     /* how long the writer took, handed to done */
    unsigned nlost;  /* removes and rewrites that found the row another server's */
};

/* What the layer above gives storage_open: how replayed rows come back, what a commit counts. */
struct storage_hooks {
    store_replay_fn *replay;        /* a stored job (arg: the srv) */
    store_func_fn *replay_func;     /* a function's stored settings (arg: the srv) */
    store_dep_fn *replay_dep;       /* a dependency edge, before the jobs (arg: the srv), or NULL */
    store_batch_fn *replay_batch;   /* a stored batch, before the jobs (arg: the srv) */
    store_member_fn *replay_member; /* a stored batch member, before the jobs (arg: the srv) */
    void (*committed)(struct srv *srv, const struct storage_commit *sc); /* or failed */
};

/*
 * What a test may set in struct storage before storage_open (tests/unit/
 * t_storage.c); the server leaves it zero. ops, when set, is the backend
 * instead of the one --store names (a durable one, even if it is
 * store_null_ops). alloc_fails, when set, is asked before each allocation
 * this module makes, with what names it ("op", "ack", "error", "batch",
 * "remove"; through storage_alloc also batch.c's "callback"), and makes
 * that allocation fail by returning true.
 */
struct storage_seam {
    const struct store_ops *ops;                      /* the backend to use */
    bool (*alloc_fails)(const char *what, void *arg); /* fails an allocation */
    void *arg;                                        /* alloc_fails' argument */
    unsigned lazy_ms;  /* what deletions and lazy ends wait to share a commit; 0: 10 ms */
    unsigned retry_ms; /* a failed commit (batch.c: a callback without memory) is tried again
                          this soon; 0: 1 s */
};

struct storage {
    struct storage_seam seam;              /* tests only: see struct storage_seam */
    const struct store_ops *ops;           /* the backend; store_null_ops when not durable */
    const struct storage_hooks *hooks;     /* the layer above's, from storage_open */
    void (*before_flush)(struct srv *srv); /* storage_lease.c's: the last op of a batch */
    struct store *st;                      /* its state: the writer's alone once it runs */
    struct batch open;                     /* being filled by the loop */
    struct batch *inflight;                /* handed to the writer, or NULL */
    struct batch *handed;                  /* under lock: the batch the writer is to take */
    unsigned batch_max;                    /* --store-batch: hand over at once past this many */
    unsigned interval_ms;    /* --store-commit-interval; 0: at the end of the loop turn */
    struct event *flush_ev;  /* hands the open batch over */
    struct event *done_ev;   /* reads done_pipe */
    int done_pipe[2];        /* the writer's "batch done" to the loop */
    pthread_t writer;        /* the writer thread */
    pthread_mutex_t lock;    /* guards handed, finished, quit */
    pthread_cond_t wake;     /* signals the writer, and the loop in storage_drain */
    bool writer_running;     /* writer started (durable stores only) */
    bool quit;               /* under lock: the writer should end */
    bool scheduled;          /* flush_ev is pending */
    bool lazy;               /* ...on the deletions' timer, which a submit cuts short */
    bool want_flush;         /* flush asked for while a batch was in flight */
    bool finishing;          /* batch_finish runs continuations: a full batch waits for it */
    unsigned held;           /* storage_hold's depth: a full batch waits for storage_release */
    bool retry;              /* the last commit failed: flush even if empty */
    bool durable;            /* a backend other than none */
    bool shared;             /* the backend has lease, remove_job and wait_notify */
    uint64_t commits;        /* batches committed */
    uint64_t handovers;      /* open batches handed to the writer (storage_open_gen) */
    uint32_t last_commit_ms; /* how long the last commit took (storage_wait_lazy) */
    uint64_t failures;       /* batches that failed */
    struct event *stuck_ev;  /* the batch in flight has not come back for a while */
    bool stuck;              /* ...and it was logged: /healthz says so until it comes back */
    /* A shared store (postgres): storage_lease.c's, which runs jobs here only under a lease. */
    bool lease_opened;       /* storage_lease_open ran: storage_lease_close has to undo it */
    bool want_lease;         /* a lease op goes in the next batch */
    bool lease_inflight;     /* a lease op is in the batch in flight */
    bool renew_due;          /* the next lease op renews this server's leases */
    bool flow_due;           /* the next lease op reads the stored flow settings (NOTIFY flow) */
    int64_t lease_op_ms;     /* when the lease op in flight was made (clock_now_ms) */
    int64_t lease_fresh_ms;  /* until then the leases of the jobs queued here surely hold */
    unsigned flow_gen;       /* flow settings changed here so far (flow_ctl_apply, stored) */
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
    char *waiting;           /* the last renewal's count of jobs ready in the table
                                under no lease, by function (store_lease's waiting, copied) */
    size_t nwaiting;         /* functions in waiting */
};

/*
 * storage_open opens the configured store and replays it through hooks
 * (kept: they must outlive the store). 0, or -1 with srv->errmsg set.
 */
int storage_open(struct srv *srv, const struct storage_hooks *hooks);

/* storage_close commits what is pending, runs its continuations, and closes the store. */
void storage_close(struct srv *srv);

/*
 * storage_alloc allocates size zeroed bytes, or NULL: what names the
 * allocation for a test's seam (struct storage_seam).
 */
void *storage_alloc(struct srv *srv, const char *what, size_t size);

/* storage_row_outcome is how a stored row's state (enum store_state) reads as a job's outcome. */
enum job_outcome storage_row_outcome(int state);

/*
 * storage_op_add makes the add of new job j (its fields copied), for
 * storage_add; NULL if out of memory. Free it with free() if unused.
 */
struct store_op *storage_op_add(struct srv *srv, const struct job *j);

/* storage_add puts op in the open batch; a waiter (storage_wait) sees it go. */
void storage_add(struct srv *srv, struct store_op *op);

/*
 * storage_wait makes w wait for the open batch's commit: its continuation
 * runs once that batch is done, after those of earlier waiters. The batch
 * goes at the end of this loop turn (or --store-commit-interval, or at
 * once past --store-batch waiters).
 */
void storage_wait(struct srv *srv, struct storage_wait *w);

/*
 * storage_wait_lazy is storage_wait for a waiter that nobody waits for yet
 * (a worker's end while the worker goes on): while no commit is in flight
 * its batch is not hurried, it goes with the next storage_wait's or after
 * the deletions' 10 ms, so that ends that nobody waits for share commits
 * as deletions do. With a commit in flight or the last one slow (2 ms),
 * --store-commit-interval, or a shared store, it is storage_wait.
 */
void storage_wait_lazy(struct srv *srv, struct storage_wait *w);

/*
 * storage_settle puts the end of finished job j in the open batch: its
 * deletion (which names outcome, an enum job_outcome, for a store that
 * counts batches, postgres) or, if j->ext->settle_to says it goes to the
 * dead set or is kept, the rewrite of its row with its final state. done runs once that
 * commits (a failed commit tries again). Returns true if so; false if j
 * is not stored (or there was no memory, which is logged: the job then
 * runs again after a restart), and nothing is owed. The batch goes within
 * STORAGE_REMOVE_DELAY_MS, or with the first waiter's.
 */
bool storage_settle(struct srv *srv, struct job *j, unsigned outcome, storage_op_fn *done);

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
 * storage_update for a dead job retried by hand: on a shared store its
 * row, this server's, is live again once the rewrite commits, so a lease
 * renewal that did not see it keeps the job (storage_lease.c).
 */
void storage_revive(struct srv *srv, struct job *j);

/*
 * storage_remove deletes a stored job that is not settling (a dead job or
 * a kept result that is dropped) in the next commit, and marks it not
 * stored. A no-op for a job that is not stored.
 */
void storage_remove(struct srv *srv, struct job *j);

/* storage_set_func stores f's settings (admin "retry") with the next commit. 0, or -1 (memory). */
int storage_set_func(struct srv *srv, const struct func *f);

/*
 * storage_keeps_schedules says whether the store keeps schedules (sqlite,
 * postgres); else the server keeps them in memory only.
 */
bool storage_keeps_schedules(const struct srv *srv);

/*
 * storage_hold and storage_release bracket changes that must share one
 * commit (a job's add and its dependency edges): between them a full open
 * batch is not handed over; storage_release hands it over if it filled.
 */
void storage_hold(struct srv *srv);
void storage_release(struct srv *srv);

/*
 * storage_sched puts what (enum store_sched_what) to ss in the open batch,
 * its strings copied; done runs once its batch is done (ok false: it did
 * not commit), and may read op->ss and op->claimed. 0, or -1 (memory).
 */
int storage_sched(struct srv *srv, int what, const struct store_sched *ss, storage_op_fn *done);

/*
 * storage_sched_fire puts a schedule's tick in the open batch: the claim of
 * ss->last_tick and j, the tick's job (copied), which the store adds only
 * if the claim moves the tick, in the same transaction; so a claimed tick
 * always has its job stored, whatever happens to this server after. done
 * runs once the batch is done (ok false: neither committed), with op->job
 * referencing j and op->claimed. 0, or -1 (memory).
 */
int storage_sched_fire(struct srv *srv, const struct store_sched *ss, struct job *j,
                       storage_op_fn *done);

/*
 * storage_sched_list reads every stored schedule with the open batch;
 * done gets them in op->rows, which it frees with storage_sched_rows_free
 * (and sets op->rows to NULL). 0, or -1 (memory).
 */
int storage_sched_list(struct srv *srv, storage_op_fn *done);

/* storage_sched_rows_free frees a list of rows; NULL is a no-op. */
void storage_sched_rows_free(struct storage_sched_row *rows);

/*
 * storage_keeps_deps says whether the store keeps dependency edges
 * (sqlite); false for none (nothing to keep) and for memcached and
 * postgres, which keep none.
 */
bool storage_keeps_deps(const struct srv *srv);

/*
 * storage_dep puts what (enum store_dep_what) to sd in the open batch, its
 * strings copied; done (or NULL) runs once it commits, and may read
 * op->sd. Like a settle, a failed commit tries it again, so done hears
 * only ok. 0, or -1 (memory).
 */
int storage_dep(struct srv *srv, int what, const struct store_dep *sd, storage_op_fn *done);

/*
 * storage_dep_show puts a STORE_DEP_SHOW of the job handle (len bytes) in
 * the open batch, or with func (func_len bytes, not NULL) of the job of
 * that function and unique key (handle, len), with room bytes for what the
 * store writes (op->text, op->text_len). Not tried again if its batch
 * fails. The op, or NULL (memory); the caller waits for it
 * (durable_reply_op).
 */
struct store_op *storage_dep_show(struct srv *srv, const char *func, size_t func_len,
                                  const char *handle, size_t len, size_t room);

/*
 * storage_deps_shared says whether the store keeps the dependency graph
 * for the servers that share it (postgres): a child is left to any
 * server, held in the store, and its parents' ends move it there; the
 * server keeps no graph and writes only a child's edges (STORE_DEP_ADD).
 */
bool storage_deps_shared(const struct srv *srv);

/*
 * storage_keeps_batches says whether the server can have batches: in
 * memory without a durable store, or in a store that keeps them (sqlite,
 * postgres); memcached cannot (batch.c refuses them).
 */
bool storage_keeps_batches(const struct srv *srv);

/*
 * storage_batches_shared says whether the store is the batches' one copy,
 * shared with other servers (postgres: store_ops' batch_admin): the server
 * keeps none of them, and asks the store with storage_batch.
 */
bool storage_batches_shared(const struct srv *srv);

/*
 * storage_batch puts what (enum store_batch_what) to sb in the open batch,
 * its strings copied with room bytes to spare for storage_batch_redo;
 * done runs once its batch is done (ok false: it did not commit, and the
 * op is freed after). The op, or NULL (memory).
 */
struct store_op *storage_batch(struct srv *srv, int what, const struct store_batch *sb, size_t room,
                               storage_op_fn *done);

/*
 * storage_batch_redo makes op, a batch op still in the open batch (no
 * handover since: storage_open_gen), write sb instead. false: sb does not
 * fit in op's room (op is unchanged).
 */
bool storage_batch_redo(struct store_op *op, const struct store_batch *sb);

/* storage_open_gen changes each time the open batch is handed over. */
uint64_t storage_open_gen(const struct srv *srv);

/* storage_kick hands the open batch over at the end of this loop turn, even an empty one. */
void storage_kick(struct srv *srv);

/*
 * storage_flush hands the open batch to the writer now (or, if one is in
 * flight, as soon as that one is done). Its answers go out when the writer
 * reports back.
 */
void storage_flush(struct srv *srv);

/* storage_drain blocks until everything handed or open is committed and answered (at a stop). */
void storage_drain(struct srv *srv);

/*
 * storage_stuck says, in buf, that the commit in flight has not come back
 * for a while (it was logged), or returns NULL.
 */
const char *storage_stuck(const struct srv *srv, char *buf, size_t len);

#endif
