/*
 * The persistence interface: a table of functions that a store
 * backend fills in, in the shape of sqlite3_io_methods. Only background
 * jobs are stored. Adds and removes go into an open batch; flush commits
 * the batch, and only after a flush returns DSJOB_OK may the server tell
 * the submitters of the batch's jobs that they exist (JOB_CREATED). So one
 * commit covers every background submit of a loop turn.
 *
 * Every backend is built into dsjobd, so the table has no version: a new
 * op is filled in by every backend, or is optional (NULL) and says so.
 */
#ifndef DSJOB_SERVER_STORE_H
#define DSJOB_SERVER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_ERRLEN 512
#define STORE_HANDLE_MAX 64 /* bytes of a handle a shared store writes back, with its NUL */

struct store; /* a backend's own state */

/* What a store keeps of a job. Pointers are borrowed for the call's length. */
struct store_job {
    uint64_t id;        /* the number in the handle; the store's key */
    uint64_t seq;       /* submission order */
    const char *handle; /* the whole handle */
    size_t handle_len;
    const char *func; /* function name */
    size_t func_len;
    const void *unique; /* unique key ("-" when unique_is_data) */
    size_t unique_len;
    const void *reducer; /* SUBMIT_REDUCE_JOB reducer, or empty */
    size_t reducer_len;
    const void *data; /* payload */
    size_t data_len;
    int prio;            /* enum job_prio */
    int64_t when;        /* epoch seconds, 0 for now */
    bool unique_is_data; /* unique "-" */
    int64_t deadline_ms; /* LIVE: epoch ms it must start by, else it expires; 0: none (SQLite
                            keeps it; the other backends do not yet) */
    const char *batch;   /* add: the batch it joins (batch.c), kept beside the job in the same
                          change by a store that keeps batches; NULL or "": none */
    size_t batch_len;    /* bytes of batch */
    /* The job's life beyond gearmand's (retries, dead set, kept results). */
    int state;            /* enum store_state */
    uint32_t attempts;    /* attempts that failed so far */
    int64_t first_fail;   /* epoch seconds of the first failed attempt, or 0 */
    int64_t last_fail;    /* ... of the last one; for a DONE job, when it ended */
    const void *result;   /* DEAD: the last failure's text; DONE_*: the result bytes */
    size_t result_len;    /* its bytes */
    uint32_t numerator;   /* DONE_*: the last WORK_STATUS */
    uint32_t denominator; /* DONE_*: the last WORK_STATUS */
    /*
     * A store several servers share (postgres). The two
     * pointers are the server's, valid until flush returns; the backend
     * writes them only in flush.
     */
    bool leased; /* add: this server runs it (its lease starts now); else any server may */
    char *alias; /* add: where flush writes the handle of the live job of the same
                    function and unique key, on this or another server, that this add
                    coalesced onto (NUL-terminated, STORE_HANDLE_MAX bytes); "" if none */
    bool *lost;  /* remove, update: flush sets *lost when the row was no longer this
                    server's (its lease ran out and another server took it); add: flush
                    sets *lost when the store refused this row alone, saying why
                    in the err the add was given, while the batch's others committed */
};

/* What a stored job is: waiting to run, in its function's dead set, or a kept result. */
enum store_state {
    STORE_LIVE,          /* queued or scheduled (a retry's backoff is its when) */
    STORE_DEAD,          /* past its retries, in the dead set (--max-dead) */
    STORE_DONE_COMPLETE, /* finished with WORK_COMPLETE, kept (--keep-results) */
    STORE_DONE_FAIL,     /* finished with WORK_FAIL, kept */
    STORE_DONE_EXCEPTION /* finished with WORK_EXCEPTION, kept */
};

/* A function's stored settings (admin "retry FUNCTION N [BASE [MAX]]"). */
struct store_func {
    const char *name; /* borrowed for the call */
    size_t name_len;
    uint32_t retries;         /* attempts allowed; 0: --job-retries applies */
    uint32_t backoff_base_ms; /* first retry's wait */
    uint32_t backoff_max_ms;  /* longest wait */
    const char *flow;         /* its flow control settings line (flow_format), borrowed; NULL
                                 or "" (flow_len 0): none. A backend that keeps no flow
                                 settings (memcached) ignores it and replays none */
    size_t flow_len;          /* bytes of flow */
    uint32_t max_age;         /* admin "maxage": seconds; 0: --max-queue-age (SQLite only) */
    uint32_t unique_for;      /* admin "uniquefor": seconds; 0: --unique-for (SQLite only) */
};

/*
 * A periodic schedule (schedule.c), as a store keeps it: one row per
 * name. Pointers are borrowed for the call.
 */
struct store_sched {
    const char *name; /* the schedule's name */
    size_t name_len;
    const char *cron; /* its cron expression */
    size_t cron_len;
    const char *tz; /* its zone ("UTC" or an IANA name) */
    size_t tz_len;
    const char *func; /* the function of the jobs it submits */
    size_t func_len;
    const void *data; /* their payload */
    size_t data_len;
    int prio;          /* their priority (enum job_prio) */
    bool catch_up;     /* after downtime: run once for the ticks missed (else skip them) */
    bool paused;       /* fires no tick until resumed */
    int64_t last_tick; /* epoch seconds of the last tick fired (claimed), 0 if none */
};

/* What a store's sched op does with a schedule. */
enum store_sched_what {
    STORE_SCHED_SET,    /* insert or replace it, all but last_tick (a new one gets 0) */
    STORE_SCHED_DELETE, /* delete it by name; none is not an error */
    STORE_SCHED_CLAIM,  /* set last_tick if it is lower: *claimed says if it was */
};

/*
 * A dependency edge (deps.c): child waits for parent, both by handle. One
 * row per edge, in a table beside the schema, as the schedules. Pointers
 * are borrowed for the call.
 */
struct store_dep {
    const char *child; /* the waiting job's handle */
    size_t child_len;
    const char *parent; /* the handle of the job it waits for ("" for a child op) */
    size_t parent_len;
    int policy; /* enum deps_policy: what the child does if the parent fails for good */
    int state;  /* enum store_dep_state */
    /*
     * STORE_DEP_SHOW: child is the job's handle, parent ""; or parent is a
     * function and child the unique key of its job to show.
     */
    char *out;       /* STORE_DEP_SHOW: where the store writes the child's lines (not borrowed: the
                   op's), or NULL */
    size_t out_room; /* bytes there */
    size_t *out_len; /* bytes it wrote */
};

/* Where an edge stands: the parent has not ended, or ended well, or for good badly. */
enum store_dep_state { STORE_DEP_WAITING, STORE_DEP_OK, STORE_DEP_FAILED };

/* What a store's dep op does. */
enum store_dep_what {
    STORE_DEP_ADD,    /* insert or replace the edge sd (child, parent, policy, state) */
    STORE_DEP_ENDED,  /* every waiting edge of sd->parent takes sd->state */
    STORE_DEP_FORGET, /* delete every edge of sd->child (it ran, or ended) */
    /*
     * A shared store's (postgres): if sd->child is a job held for its
     * parents, write admin "show job"'s lines for it, with its parents
     * still waited for, and "." to sd->out; else nothing.
     */
    STORE_DEP_SHOW,
};

/* Called by dep_list once per stored edge, by child; non-zero stops it. */
typedef int store_dep_fn(const struct store_dep *sd, void *arg);

/*
 * A batch (batch.c), as a store keeps it: one row per id, with its
 * counters. Its members are kept beside their jobs (store_job's batch): a
 * member's row goes with its job's row, or with the job's end. Pointers
 * are borrowed for the call.
 */
struct store_batch {
    const char *id; /* the batch's id */
    size_t id_len;
    const char *on_complete; /* function of the job submitted when every job ended, or "" */
    size_t on_complete_len;
    const char *on_success; /* ... when every job succeeded, or "" */
    size_t on_success_len;
    const char *failed; /* handles of the members that failed, each ended by a newline */
    size_t failed_len;
    uint64_t total;      /* jobs that joined */
    uint64_t done;       /* ... that ended with WORK_COMPLETE */
    uint64_t failed_n;   /* ... that ended otherwise (failed, cancelled, expired, dropped) */
    uint64_t dead;       /* ... that went to the dead set */
    bool closed;         /* takes no more jobs */
    bool fired_complete; /* its on_complete job was submitted (in the same commit) */
    bool fired_success;  /* its on_success job was submitted (in the same commit) */
    int64_t created;     /* epoch seconds it was opened */
};

/* What a store's batch op does with a batch. */
enum store_batch_what {
    STORE_BATCH_SET,    /* insert or replace its row */
    STORE_BATCH_DELETE, /* delete its row and its members' rows */
    /* A shared store's (batch_admin): each row it finds or makes goes to the op's fn. */
    STORE_BATCH_OPEN,   /* insert the row of sb (id, callbacks) unless its id is taken */
    STORE_BATCH_CLOSE,  /* close it (and fire what is due): sb again if it was there */
    STORE_BATCH_STATUS, /* its row */
    STORE_BATCH_LIST,   /* every row, oldest first */
    STORE_BATCH_DROP,   /* delete it; its members run on, in no batch: sb if it was there */
};

/* Called by batch_replay once per stored batch; non-zero stops it. */
typedef int store_batch_fn(const struct store_batch *sb, void *arg);

/* Called by batch_replay once per stored member: the job id in batch id; non-zero stops it. */
typedef int store_member_fn(const char *id, size_t id_len, uint64_t job_id, void *arg);

/* Called by sched_list once per stored schedule; non-zero stops it. */
typedef int store_sched_fn(const struct store_sched *ss, void *arg);

/*
 * A shared store's lease op: take up to limits[i] ready jobs of funcs[i]
 * for this server, and renew the leases it holds. Filled in by flush.
 */
struct store_lease {
    const char *const *funcs;   /* in: function names (NUL-terminated) */
    const unsigned *limits;     /* in: jobs to take of each */
    size_t nfuncs;              /* in: entries in funcs and limits */
    unsigned take_max;          /* in: the most jobs of a function the store may take when it
                                   sizes a take to the workers' rate (--pg-take-max); 0: it
                                   takes limits alone */
    bool renew;                 /* in: renew this server's leases and list them in held */
    struct store_job *jobs;     /* out: the jobs taken, in priority, run-at, submit order */
    size_t njobs;               /* out: entries in jobs */
    char *held;                 /* out, with renew: the handles this server still holds, each
                                   NUL-terminated, back to back */
    size_t nheld;               /* out: handles in held */
    bool renewed;               /* out: renew ran */
    void *mem;                  /* out: what jobs, their bytes and held live in; the server
                                   frees jobs, held and mem with free() */
    const char *const *release; /* in: handles a renew listed as held that the server does
                                   not know (a take or an add whose answer was lost): their
                                   leases are given up, for any server to take */
    size_t nrelease;            /* in: entries in release */
    size_t nreleased;           /* out: leases given up */
    int64_t expiry_ms;          /* out, with renew: milliseconds until the first lease another
                                   server holds runs out (0: already out), or -1 for none */
    struct store_job *ended;    /* out, with renew: dead jobs and kept results taken from
                                   starts that are over, to replay (state, result set) */
    size_t nended;              /* out: entries in ended */
    void *ended_mem;            /* out: what ended and its bytes live in */
    int64_t due_ms;             /* out, when funcs were asked for: milliseconds until the first
                                   job of funcs that waits for its run-at time is due, or -1
                                   for none */
    const char *waiting;        /* out, with renew: functions with jobs ready in the shared
                                   table under no server's lease, each as its name then the
                                   count in decimal, both NUL-terminated, back to back (in
                                   held's allocation) */
    size_t nwaiting;            /* out: functions in waiting */
    /* Flow control across the servers sharing the store (store_pg_flow, postgres only). */
    const struct store_flow_cap *caps; /* in: each of funcs' limits (nfuncs entries), or NULL
                                          if none has one */
    bool read_flow;                    /* in: read every function's stored flow settings */
    const char *const *lines;          /* in, with read_flow: each of funcs' settings as this
                                          server holds them (flow_format; "" none): a function
                                          whose stored line differs is not taken by this op */
    char *flows;                       /* out, with read_flow: each function with a stored
                                          settings line, name then line, both NUL-terminated,
                                          back to back (owned: the server frees it) */
    size_t nflows;                     /* out: functions in flows */
    bool flows_read;                   /* out: read_flow ran */
    int64_t token_ms;                  /* out: ms until a rate-limited function that got fewer
                                          tokens than it asked for has one, or -1 */
    unsigned flow_gen;                 /* the server's own (storage_lease.c), not the store's */
};

/*
 * A function's limits across every server sharing the store: its jobs
 * under a lease count as running (at most concurrency), and each job
 * taken takes a token of the shared bucket (rate per period_ms, at most
 * burst held). 0: no such limit.
 */
struct store_flow_cap {
    uint32_t concurrency;
    uint32_t rate, period_ms, burst;
    /*
     * By key (the unique key's part before sep): a sequence (1 hold, 2
     * skip, 0 none) and the per-key limits, held across the servers too.
     */
    uint32_t sequence, key_concurrency;
    uint32_t key_rate, key_period_ms, key_burst;
    char sep[8]; /* FLOW_SEP_MAX */
};

/* store_lease_free frees what a flush put in ls (jobs, held, mem) and empties its outputs. */
void store_lease_free(struct store_lease *ls);

/* store_cmp_strs orders pointers to strings by strcmp, for qsort and bsearch of handles. */
int store_cmp_strs(const void *a, const void *b);

/* Settings a backend may read; unused ones are ignored. */
struct store_config {
    const char *work_dir; /* sqlite: directory of dsjobd.db */
    const char *db_path;  /* sqlite: the database file itself, if given */
    int sync;             /* sqlite: 0 off, 1 normal, 2 full */
    unsigned busy_ms;     /* sqlite: how long a write waits for another's lock; 0: 5 s (tests) */
    const char *servers;  /* memcached: host:port,... */
    const char *prefix;   /* memcached: key prefix */
    const char *dsn;      /* postgres: libpq connection string */
    const char *owner;    /* postgres: this server's name in the leases it takes */
    unsigned lease_secs;  /* postgres: how long a lease lasts unless renewed */
    uint64_t *boot;       /* postgres: open writes a number no other start got */
    /* gearmand's queue, taken in at the first open (sqlite, postgres). */
    const char *import_table; /* its table's name; NULL: gearmand's default */
    char *note;               /* out: what open did worth a NOTICE ("" if nothing), at most
                                 STORE_ERRLEN bytes; NULL: not asked */
    unsigned stop_grace_ms;   /* postgres: ms the database has to answer once stop is called */

    /* postgres: times a batch of ends refused by a deadlock or a serialization failure is sent
       again at once. */
    unsigned conflict_retries;
};

/* Called by replay once per stored job, in submission order; non-zero stops it. */
typedef int store_replay_fn(const struct store_job *sj, void *arg);

/* Called by replay_funcs once per stored function setting; non-zero stops it. */
typedef int store_func_fn(const struct store_func *sf, void *arg);

/*
 * Every op that takes err writes a message of at most STORE_ERRLEN bytes
 * into it on failure: lower case, the file or server named.
 */
struct store_ops {
    const char *name; /* "none", "sqlite", "memcached", "postgres" */
    /* open: make *out. On failure return an enum dsjob_err and say why in err. */
    int (*open)(struct store **out, const struct store_config *cfg, char *err);
    /*
     * add: put a job in the open batch. A failure refuses that job; the
     * batch's other adds are confirmed, or not, by flush alone.
     */
    int (*add)(struct store *st, const struct store_job *sj, char *err);
    /*
     * remove: put the deletion of job id in the open batch. A remove is
     * never lost once it returned DSJOB_OK: a failed batch keeps it for the
     * next one. Removing an id that is not stored is not an error.
     */
    int (*remove)(struct store *st, uint64_t id, char *err);
    /*
     * flush: commit the open batch. DSJOB_OK: every add and remove before
     * it is durable. Otherwise the batch's jobs must be refused, and its
     * removes stay pending: the server must flush again later even if
     * nothing new arrives. A backend that cannot know whether a failed
     * commit landed (memcached, when a reply is lost) may have stored the
     * refused jobs; they then run once more after a restart, which
     * at-least-once allows. The store keeps working once the cause (a full
     * disk, a server back up) is gone. replay skips jobs whose remove is
     * still pending.
     */
    int (*flush)(struct store *st, char *err);
    /* replay: call fn for every stored job, in submission order; DSJOB_OK also if fn stopped it. */
    int (*replay)(struct store *st, store_replay_fn *fn, void *arg, char *err);
    /*
     * close: flush what is pending (best effort: removes that do not land
     * then mean those jobs run again after a restart) and free st. NULL is
     * a no-op.
     */
    void (*close)(struct store *st);
    /*
     * update: put the rewrite of a stored job (sj->id) in the open batch:
     * every field but id, seq, handle and func may have changed. Like
     * remove, a failed batch loses it (the server makes it again); unlike
     * remove, an update of an id that is not stored is not an error either
     * (the job is then not stored, as before). A backend that cannot keep
     * all of sj->result (memcached: a record must fit in an item) keeps its
     * first bytes and returns DSJOB_OK with a message in err, which the
     * server logs; otherwise err is left as it was on DSJOB_OK.
     */
    int (*update)(struct store *st, const struct store_job *sj, char *err);
    /* set_func: put a function's settings in the open batch (all zero: forget them). */
    int (*set_func)(struct store *st, const struct store_func *sf, char *err);
    /* replay_funcs: call fn for every stored function setting, before replay. */
    int (*replay_funcs)(struct store *st, store_func_fn *fn, void *arg, char *err);
    /* A store several servers share (all three, or none: NULL in the others). */
    /*
     * remove_job: remove as above, by sj->handle, and only if the row is
     * still this server's (sj->lost says if not, at flush).
     */
    int (*remove_job)(struct store *st, const struct store_job *sj, char *err);
    /* lease: put a lease op in the open batch; flush fills ls (nothing on a failed flush). */
    int (*lease)(struct store *st, struct store_lease *ls, char *err);
    /*
     * wait_notify: for a thread of its own: block until another server
     * (or dsjob.submit) says that jobs are ready, or until stop_fd is
     * readable. 1: told; 0: stop_fd; -1: the connection failed (err says
     * why; call again later, it reconnects).
     */
    int (*wait_notify)(struct store *st, int stop_fd, char *err);
    /*
     * stop: the server is stopping (called from the loop while the writer
     * may be in flush): from now on the backend gives a database that does
     * not answer a bounded time, then fails what it was doing, so that the
     * stop ends. NULL: the backend's waits are bounded already.
     */
    void (*stop)(struct store *st);
    /*
     * Schedules (both, or none: NULL in a store that keeps none, memcached
     * and none; the server then keeps its schedules in memory only).
     * sched: what (enum store_sched_what) to ss. sqlite puts it in the open
     * batch; postgres runs it at once, committed on its own, so that a
     * claim moves last_tick for every server sharing the table before the
     * tick's job is submitted (a claim by two servers: one wins).
     */
    int (*sched)(struct store *st, int what, const struct store_sched *ss, bool *claimed,
                 char *err);
    /* sched_list: call fn for every stored schedule, by name. */
    int (*sched_list)(struct store *st, store_sched_fn *fn, void *arg, char *err);
    /*
     * sched_fire: a tick, in one transaction: the claim of ss->last_tick
     * (as STORE_SCHED_CLAIM) and, only if it moved the tick, the add of sj,
     * the tick's job; *claimed says whether it did. A tick claimed is then
     * a tick whose job is stored, whatever becomes of this server. sqlite
     * puts both in the open batch; postgres runs one statement at once,
     * the job left to any server. Set with sched.
     */
    int (*sched_fire)(struct store *st, const struct store_sched *ss, const struct store_job *sj,
                      bool *claimed, char *err);
    /*
     * Dependency edges (both, or none: NULL in a store that keeps none;
     * the server then refuses dependencies, naming the store). dep puts
     * what (enum store_dep_what) to sd in the open batch, so that a
     * parent's end and its edges commit together.
     */
    int (*dep)(struct store *st, int what, const struct store_dep *sd, char *err);
    /* dep_list: call fn for every stored edge, by child, before replay. */
    int (*dep_list)(struct store *st, store_dep_fn *fn, void *arg, char *err);
    /*
     * Batches (both, or none: NULL in a store that keeps none, and then
     * the server refuses batches). batch: put what (enum store_batch_what)
     * to sb in the open batch. A store that has them also adds a member's
     * row with an add whose batch is set, and deletes it with the job's
     * remove or with an update that ends it (state not LIVE), in the same
     * commit. batch_replay, before replay: fn for each stored batch, then
     * mfn for each member.
     */
    int (*batch)(struct store *st, int what, const struct store_batch *sb, char *err);
    int (*batch_replay)(struct store *st, store_batch_fn *fn, store_member_fn *mfn, void *arg,
                        char *err);
    /*
     * Batches on a store several servers share (postgres; NULL elsewhere):
     * the store is the batches' one copy, and no server keeps them. A
     * member joins (the add's sj.batch) in the commit of its add, refused
     * alone if the batch is not open; its end moves the counters in the
     * commit of the end (a remove's sj.state is the end's row state, STORE_LIVE
     * for a remove that ends nothing), and the end that leaves a closed
     * batch with no member pending submits its callback jobs in that same
     * commit, under no server's lease. batch_admin runs what (OPEN to DROP
     * of enum store_batch_what) to sb at once, committed on its own, and
     * calls fn for each row it found or made.
     */
    int (*batch_admin)(struct store *st, int what, const struct store_batch *sb, store_batch_fn *fn,
                       void *arg, char *err);
};

/* The backends built into this dsjobd. */
extern const struct store_ops store_null_ops;
#ifdef HAVE_SQLITE
extern const struct store_ops store_sqlite_ops;
#endif
#ifdef HAVE_MEMCACHED
extern const struct store_ops store_memcached_ops;
#endif
#ifdef HAVE_LIBPQ
extern const struct store_ops store_postgres_ops;
struct pg_conn; /* libpq's PGconn */
/*
 * pg_import_gearmand (store_pg_import.c) takes the rows of gearmand's
 * libpq queue table (table, or "queue" if NULL) in db's database into
 * dsjob.jobs and renames the table TABLE_dsjob_import, in one transaction
 * under an advisory lock; no such table is not an error. db must be in
 * autocommit, schema dsjob made. On success writes how many it took into
 * note (STORE_ERRLEN bytes, if not NULL) when there was a table; else
 * DSJOB_ERR_* and why in err.
 */
int pg_import_gearmand(struct pg_conn *db, const char *table, char *note, char *err);
#endif

/* store_say writes a message of at most STORE_ERRLEN bytes to err and returns code. */
int store_say(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * store_ids_push appends id to a growing array (*ids, *n used, *cap room),
 * as backends keep the removes a failed batch left pending. 0, or -1 if out
 * of memory (nothing changed).
 */
int store_ids_push(uint64_t **ids, size_t *n, size_t *cap, uint64_t id);

/*
 * store_make_dir creates dir and its missing parents, as mkdir -p does
 * (mode 0750). DSJOB_OK, or an enum dsjob_err with err naming the
 * directory and the reason.
 */
int store_make_dir(const char *dir, char *err);

/*
 * store_find names a backend ("none", "sqlite", "memcached", or gearmand's
 * "builtin", "libsqlite3", "libmemcached"). NULL, with err saying whether
 * the name is unknown or the backend was not built (and which configure
 * flag builds it).
 */
const struct store_ops *store_find(const char *name, char *err);

/*
 * pq_lazy_load and mc_lazy_load open libpq and libmemcached (lazy/lazylib.h
 * says why on first use): 0, or -1 with why ("cannot load libpq.so.5: ...")
 * in err (errlen bytes). pq_lazy.c and mc_lazy.c define them and the
 * library functions the stores call.
 */
int pq_lazy_load(char *err, size_t errlen);
int mc_lazy_load(char *err, size_t errlen);

#endif
