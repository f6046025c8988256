/*
 * The group-commit engine. The store backend only keeps bytes; this module
 * decides when. A change (an add, a rewrite, a removal) is copied into the
 * open batch when it is made, and the batch is handed over once per loop
 * turn (an event made active at the first waiter runs after the turn's
 * other callbacks), after --store-commit-interval milliseconds if one is
 * set, or at once when --store-batch waiters are waiting. A writer thread,
 * the only thread that touches the backend after replay, writes and
 * commits the batch on the other core while the loop goes on serving:
 * foreground jobs do not wait behind SQLite. The loop keeps filling the
 * next batch meanwhile. When the writer is done it says so through a
 * pipe; then, on the loop, the batch's waiters' continuations run in the
 * order they were added, then its changes'. If the commit fails (a full
 * disk), the waiters hear so; nothing stored before is touched, the
 * removes and rewrites go again with the next batch, and that batch tries
 * again even if nothing new comes.
 */
#include "config.h"
#include "storage.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include <event2/event.h>

#include "clock.h"
#include "flow.h"
#include "job.h"
#include "log.h"
#include "srv.h"

#define STORAGE_RETRY_SECS 1       /* a failed commit is tried again this soon */
#define STORAGE_REMOVE_DELAY_MS 10 /* deletions alone wait this long to share a commit */
#define STORAGE_WRITER_NICE 10     /* the writer thread's nice value (Linux): below the loop */
#define STORAGE_LAZY_COMMIT_MS 2   /* commits this slow are not waited on to share (lazy ends) */

static void flush_cb(evutil_socket_t fd, short what, void *arg);
static void done_cb(evutil_socket_t fd, short what, void *arg);
static void stuck_cb(evutil_socket_t fd, short what, void *arg);
static void *writer_main(void *arg);

/* Every allocation of this module, so that a test can make any one of them fail. */
static void *
sg_malloc(struct storage *sg, const char *what, size_t size)
{
    if (sg->seam.alloc_fails != NULL && sg->seam.alloc_fails(what, sg->seam.arg))
        return NULL;
    return malloc(size);
}

static void *
sg_calloc(struct storage *sg, const char *what, size_t size)
{
    void *p = sg_malloc(sg, what, size);

    if (p != NULL)
        memset(p, 0, size);
    return p;
}

void *
storage_alloc(struct srv *srv, const char *what, size_t size)
{
    return sg_calloc(&srv->storage, what, size);
}

/* A job's outcome as its row's state (enum store_state), and a row's state as an outcome. */
static int
row_state(unsigned outcome)
{
    switch ((enum job_outcome)outcome) {
    case JOB_OUTCOME_COMPLETE: return STORE_DONE_COMPLETE;
    case JOB_OUTCOME_FAIL: return STORE_DONE_FAIL;
    case JOB_OUTCOME_EXCEPTION: return STORE_DONE_EXCEPTION;
    case JOB_OUTCOME_DEAD: return STORE_DEAD;
    case JOB_OUTCOME_NONE: break;
    }
    return STORE_LIVE;
}

enum job_outcome
storage_row_outcome(int state)
{
    switch ((enum store_state)state) {
    case STORE_DONE_COMPLETE: return JOB_OUTCOME_COMPLETE;
    case STORE_DONE_FAIL: return JOB_OUTCOME_FAIL;
    case STORE_DONE_EXCEPTION: return JOB_OUTCOME_EXCEPTION;
    case STORE_DEAD: return JOB_OUTCOME_DEAD;
    case STORE_LIVE: break;
    }
    return JOB_OUTCOME_NONE;
}

/*
 * An add for the writer: the job's fields copied, since the job may go
 * meanwhile, with extra bytes of room behind them (*room, if asked).
 */
static struct store_op *
op_add_new(struct storage *sg, const struct job *j, size_t extra, char **room)
{
    size_t rlen = job_row_len(j);
    size_t blen = j->ext != NULL && j->ext->batch != NULL ? strlen(j->ext->batch) : 0;
    size_t len = j->handle_len + j->func->name_len + j->unique_len + j->reducer_len + j->data_len +
                 rlen + blen;
    struct store_op *op = sg_malloc(sg, "op", sizeof(*op) + len + 1 + extra);
    struct store_job *sj;
    char *at;

    if (op == NULL)
        return NULL;
    memset(op, 0, sizeof(*op));
    sj = &op->sj;
    sj->id = j->id;
    sj->seq = j->seq;
    sj->prio = j->prio;
    sj->when = job_when(j);
    sj->deadline_ms = job_deadline_ms(j);
    sj->unique_is_data = j->unique_is_data;
    sj->attempts = job_attempts(j);
    if (j->ext != NULL) {
        sj->first_fail = j->ext->first_fail;
        sj->last_fail = j->ext->last_fail;
        sj->numerator = j->ext->numerator;
        sj->denominator = j->ext->denominator;
        sj->state = row_state(j->ext->outcome); /* STORE_LIVE until the job ends */
    }
    at = op->buf;
#define COPY(field, src, n)                                                                        \
    do {                                                                                           \
        sj->field = at;                                                                            \
        sj->field##_len = (n);                                                                     \
        memcpy(at, (src), (n));                                                                    \
        at += (n);                                                                                 \
    } while (0)
    COPY(handle, job_handle(j), j->handle_len);
    COPY(func, j->func->name, j->func->name_len);
    COPY(unique, job_unique(j), j->unique_len);
    COPY(reducer, job_reducer(j), j->reducer_len);
    COPY(data, job_data(j), j->data_len);
    if (rlen > 0)
        COPY(result, job_row_text(j), rlen);
    if (blen > 0)
        COPY(batch, j->ext->batch, blen);
#undef COPY
    sj->alias = op->alias;
    sj->lost = &op->lost;
    if (room != NULL)
        *room = at; /* extra bytes from here */
    return op;
}

/* A remove: on a shared store it names the row by handle, so it carries a copy. */
static struct store_op *
op_remove_new(struct storage *sg, const struct job *j)
{
    size_t len = sg->shared ? j->handle_len : 0;
    struct store_op *op = sg_calloc(sg, "remove", sizeof(*op) + len + 1);

    if (op == NULL)
        return NULL;
    op->kind = STORE_OP_REMOVE;
    op->sj.id = j->id;
    memcpy(op->buf, job_handle(j), len);
    op->sj.handle = op->buf;
    op->sj.handle_len = len;
    op->sj.lost = &op->lost;
    return op;
}

int
storage_open(struct srv *srv, const struct storage_hooks *hooks)
{
    struct storage *sg = &srv->storage;
    struct store_config scfg;
    char err[STORE_ERRLEN] = "", note[STORE_ERRLEN] = "";
    uint64_t boot = 0;

    TAILQ_INIT(&sg->open.acks);
    sg->open.tail = &sg->open.ops;
    sg->done_pipe[0] = sg->done_pipe[1] = -1;
    sg->hooks = hooks;
    sg->ops = sg->seam.ops;
    if (sg->ops == NULL)
        sg->ops = store_find(srv->cfg.store ? srv->cfg.store : "none", err);
    if (sg->ops == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "--store: %s", err);
        return -1;
    }
    memset(&scfg, 0, sizeof(scfg));
    scfg.work_dir = srv->cfg.work_dir;
    scfg.db_path = srv->cfg.store_db;
    scfg.sync = srv->cfg.store_sync;
    scfg.servers = srv->cfg.memcached_servers;
    scfg.prefix = srv->cfg.memcached_prefix;
    scfg.dsn = srv->cfg.pg_dsn;
    scfg.owner = srv->handle_prefix;
    scfg.lease_secs = srv->cfg.pg_lease;
    scfg.stop_grace_ms = srv->cfg.pg_stop_grace_ms;
    scfg.conflict_retries = srv->cfg.pg_conflict_retries;
    scfg.boot = &boot;
    scfg.import_table =
        strcmp(sg->ops->name, "postgres") == 0 ? srv->cfg.libpq_table : srv->cfg.libsqlite3_table;
    scfg.note = note;
    if (sg->ops->open(&sg->st, &scfg, err) != DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "%s", err);
        sg->ops = NULL;
        return -1;
    }
    if (note[0] != '\0')
        log_notice(&srv->log, "%s", note); /* a gearmand queue taken in, say */
    sg->shared =
        sg->ops->lease != NULL && sg->ops->remove_job != NULL && sg->ops->wait_notify != NULL;
    if (sg->shared) {
        /*
         * Handles and the leases' owner name this start: no other server or
         * start has it. A handle (prefix.start:id, the id up to 20 digits)
         * must fit STORE_HANDLE_MAX: a long host name in the default prefix
         * is cut; a --job-handle-prefix that long is refused.
         */
        char suffix[24];
        size_t n = strlen(srv->handle_prefix);
        size_t room =
            STORE_HANDLE_MAX - 1 - 21 - (size_t)snprintf(suffix, sizeof(suffix), ".%" PRIu64, boot);

        if (n > room && srv->cfg.job_handle_prefix != NULL) {
            snprintf(srv->errmsg, sizeof(srv->errmsg),
                     "--job-handle-prefix: with store %s it must be at most %zu bytes",
                     sg->ops->name, room);
            return -1;
        }
        if (n > room)
            n = room;
        snprintf(srv->handle_prefix + n, sizeof(srv->handle_prefix) - n, "%s", suffix);
    }
    sg->durable = sg->ops != &store_null_ops || sg->seam.ops != NULL;
    sg->batch_max = srv->cfg.store_batch ? srv->cfg.store_batch : 1;
    sg->interval_ms = srv->cfg.store_commit_interval_ms;
    sg->flush_ev = evtimer_new(srv->base, flush_cb, srv);
    sg->stuck_ev = evtimer_new(srv->base, stuck_cb, srv);
    if (sg->flush_ev == NULL || sg->stuck_ev == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the store's event");
        return -1;
    }
    if (sg->ops->replay_funcs(sg->st, hooks->replay_func, srv, err) != DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "replaying the store: %s", err);
        return -1;
    }
    /* Edges first: a replayed job knows at once whether it is held (deps.c). */
    if (sg->ops->dep_list != NULL && hooks->replay_dep != NULL &&
        sg->ops->dep_list(sg->st, hooks->replay_dep, srv, err) != DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "replaying the store: %s", err);
        return -1;
    }
    if (sg->ops->batch_replay != NULL && hooks->replay_batch != NULL &&
        sg->ops->batch_replay(sg->st, hooks->replay_batch, hooks->replay_member, srv, err) !=
            DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "replaying the store's batches: %s", err);
        return -1;
    }
    if (sg->ops->replay(sg->st, hooks->replay, srv, err) != DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "replaying the store: %s", err);
        return -1;
    }
    if (!sg->durable)
        return 0;
    /* From here on only the writer thread touches the backend. */
    if (pipe2(sg->done_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "pipe: %s", strerror(errno));
        return -1;
    }
    sg->done_ev = event_new(srv->base, sg->done_pipe[0], EV_READ | EV_PERSIST, done_cb, srv);
    if (sg->done_ev == NULL || event_add(sg->done_ev, NULL) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the store's event");
        return -1;
    }
    pthread_mutex_init(&sg->lock, NULL);
    pthread_cond_init(&sg->wake, NULL);
    if (pthread_create(&sg->writer, NULL, writer_main, sg) != 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot start the store's writer thread");
        return -1;
    }
    sg->writer_running = true;
    return 0;
}

static bool
batch_empty(const struct batch *b)
{
    return b->ops == NULL && TAILQ_EMPTY(&b->acks);
}

static void
batch_append(struct batch *b, struct store_op *op)
{
    *b->tail = op;
    b->tail = &op->next;
}

static void
schedule(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (sg->open.nacks >= sg->batch_max) {
        /*
         * Not while a finished batch's continuations run: a waiter that
         * waits again (a pipelined end whose commit failed) must go in the
         * same batch as the ops of its own that are tried again, which are
         * put back only after the continuations.
         */
        if (!sg->finishing && sg->held == 0)
            storage_flush(srv);
        return;
    }
    if (sg->scheduled && sg->lazy) {
        /* A waiter waits now: do not let it wait for the deletions' timer. */
        event_del(sg->flush_ev);
        sg->scheduled = false;
    }
    if (sg->scheduled)
        return;
    sg->scheduled = true;
    sg->lazy = false;
    if (sg->interval_ms > 0) {
        struct timeval tv = {sg->interval_ms / 1000, (sg->interval_ms % 1000) * 1000};

        evtimer_add(sg->flush_ev, &tv);
    } else {
        event_active(sg->flush_ev, EV_TIMEOUT, 0);
    }
}

/*
 * Changes nobody waits for (deletions, rewrites): gather them with others
 * for STORAGE_REMOVE_DELAY_MS, so that a drain by workers that do not
 * wait costs one commit per few milliseconds, not one per job.
 */
static void
schedule_lazy(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (!sg->scheduled) {
        unsigned ms = sg->seam.lazy_ms > 0 ? sg->seam.lazy_ms : STORAGE_REMOVE_DELAY_MS;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

        sg->scheduled = true;
        sg->lazy = true;
        evtimer_add(sg->flush_ev, &tv);
    }
}

struct store_op *
storage_op_add(struct srv *srv, const struct job *j)
{
    return op_add_new(&srv->storage, j, 0, NULL);
}

void
storage_add(struct srv *srv, struct store_op *op)
{
    batch_append(&srv->storage.open, op);
}

/*
 * What w waits for: the open batch's ops so far, the last of which it
 * keeps, so that an earlier flush of the batch that committed them
 * answers it even if the batch's last flush fails. None while a finished
 * batch's continuations run: a waiter that waits again then waits for ops
 * of its own that are put back only after them.
 */
static void
wait_after(struct storage *sg, struct storage_wait *w)
{
    w->after =
        sg->open.ops != NULL && !sg->finishing
            ? (struct store_op *)(void *)((char *)sg->open.tail - offsetof(struct store_op, next))
            : NULL;
}

void
storage_wait(struct srv *srv, struct storage_wait *w)
{
    wait_after(&srv->storage, w);
    TAILQ_INSERT_TAIL(&srv->storage.open.acks, w, link);
    srv->storage.open.nacks++;
    schedule(srv);
}

/*
 * A waiter that nobody waits for yet (a worker's first end not committed):
 * while the writer is idle and commits are quick (the last took under
 * STORAGE_LAZY_COMMIT_MS) it rides with the next waiter's commit, or the
 * deletions' timer's. Otherwise it is any waiter: a slow store's commit
 * (an fsync, PostgreSQL's round trips) is better overlapped with the
 * worker's next job than shared, and its writer must not idle while ends
 * wait. With --store-commit-interval, or on a shared store (PostgreSQL,
 * whose drain measured slower with lazy ends), it is any waiter.
 */
void
storage_wait_lazy(struct srv *srv, struct storage_wait *w)
{
    struct storage *sg = &srv->storage;

    wait_after(sg, w);
    TAILQ_INSERT_TAIL(&sg->open.acks, w, link);
    sg->open.nacks++;
    if (sg->open.nacks >= sg->batch_max || sg->interval_ms > 0 || sg->inflight != NULL ||
        sg->last_commit_ms >= STORAGE_LAZY_COMMIT_MS || sg->shared)
        schedule(srv);
    else
        schedule_lazy(srv);
}

void
storage_hold(struct srv *srv)
{
    srv->storage.held++;
}

void
storage_release(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (--sg->held == 0 && sg->open.nacks >= sg->batch_max)
        schedule(srv); /* the batch filled meanwhile: it goes now */
}

void
storage_kick(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (!sg->scheduled) {
        sg->scheduled = true;
        sg->lazy = false;
        event_active(sg->flush_ev, EV_TIMEOUT, 0);
    }
}

bool
storage_settle(struct srv *srv, struct job *j, unsigned outcome, storage_op_fn *done)
{
    struct storage *sg = &srv->storage;
    bool rewrite = j->ext != NULL && j->ext->settle_to != JOB_SETTLE_GONE;
    struct store_op *op;

    if (!j->stored)
        return false;
    /* The rewrite copies the job's final state: what it will be once it has settled. */
    op = rewrite ? op_add_new(sg, j, 0, NULL) : op_remove_new(sg, j);
    if (op == NULL) {
        log_err(&srv->log, "store: out of memory to %s job %s: it will run again after a restart",
                rewrite ? "end" : "remove", job_handle(j));
        j->stored = rewrite; /* the row is still there; without a rewrite it is live */
        return false;
    }
    j->stored = rewrite;
    op->kind = rewrite ? STORE_OP_UPDATE : STORE_OP_REMOVE;
    op->sj.id = j->id;
    if (!rewrite)
        op->sj.state = row_state(outcome); /* a batch counts it (postgres) */
    op->job = job_ref(j);
    op->settles = true;
    op->done = done;
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return true;
}

static void
update_op(struct srv *srv, struct job *j, bool revives)
{
    struct storage *sg = &srv->storage;
    struct store_op *op;

    if (!j->stored || !sg->durable)
        return;
    op = op_add_new(sg, j, 0, NULL);
    if (op == NULL) {
        log_err(&srv->log, "store: out of memory to update job %s: the store keeps it as it was",
                job_handle(j));
        return;
    }
    op->kind = STORE_OP_UPDATE;
    op->revives = revives;
    op->job = job_ref(j);
    batch_append(&sg->open, op);
    schedule_lazy(srv);
}

void
storage_update(struct srv *srv, struct job *j)
{
    update_op(srv, j, false);
}

void
storage_revive(struct srv *srv, struct job *j)
{
    update_op(srv, j, true);
}

void
storage_remove(struct srv *srv, struct job *j)
{
    struct storage *sg = &srv->storage;
    struct store_op *op;

    if (!j->stored || !sg->durable)
        return;
    j->stored = false;
    op = op_remove_new(sg, j);
    if (op == NULL) {
        log_err(&srv->log, "store: out of memory to remove job %s: it comes back after a restart",
                job_handle(j));
        return;
    }
    batch_append(&sg->open, op);
    schedule_lazy(srv);
}

int
storage_set_func(struct srv *srv, const struct func *f)
{
    struct storage *sg = &srv->storage;
    struct store_op *op;

    char flow[FLOW_SPEC_MAX] = "";
    size_t flow_len;

    if (!sg->durable)
        return 0;
    if (f->flow != NULL)
        flow_format(&f->flow->conf, flow, sizeof(flow));
    flow_len = strlen(flow);
    op = sg_calloc(sg, "op", sizeof(*op) + f->name_len + 1 + flow_len + 1);
    if (op == NULL)
        return -1;
    op->kind = STORE_OP_FUNC;
    memcpy(op->buf, f->name, f->name_len);
    op->sf.name = op->buf;
    op->sf.name_len = f->name_len;
    memcpy(op->buf + f->name_len + 1, flow, flow_len + 1);
    op->sf.flow = op->buf + f->name_len + 1;
    op->sf.flow_len = flow_len;
    op->sf.retries = f->retries;
    op->sf.backoff_base_ms = f->backoff_base_ms;
    op->sf.backoff_max_ms = f->backoff_max_ms;
    op->sf.max_age = f->max_age;
    op->sf.unique_for = f->unique_for;
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return 0;
}

bool
storage_keeps_schedules(const struct srv *srv)
{
    return srv->storage.durable && srv->storage.ops->sched != NULL;
}

bool
storage_keeps_batches(const struct srv *srv)
{
    return !srv->storage.durable || srv->storage.ops->batch != NULL ||
           srv->storage.ops->batch_admin != NULL;
}

bool
storage_batches_shared(const struct srv *srv)
{
    return srv->storage.durable && srv->storage.ops->batch_admin != NULL;
}

uint64_t
storage_open_gen(const struct srv *srv)
{
    return srv->storage.handovers;
}

static size_t
batch_bytes(const struct store_batch *sb)
{
    return sb->id_len + sb->on_complete_len + sb->on_success_len + sb->failed_len + 4;
}

/* len bytes of p (NULL when len is 0) to buf; the byte after them is the caller's. */
static char *
copy_some(char *buf, const char *p, size_t len)
{
    if (len > 0)
        memcpy(buf, p, len);
    return buf;
}

/* Copy sb's strings to buf (batch_bytes of room), into out. */
static void
batch_copy(struct store_batch *out, const struct store_batch *sb, char *buf)
{
    *out = *sb;
    out->id = copy_some(buf, sb->id, sb->id_len);
    buf += sb->id_len + 1;
    out->on_complete = copy_some(buf, sb->on_complete, sb->on_complete_len);
    buf += sb->on_complete_len + 1;
    out->on_success = copy_some(buf, sb->on_success, sb->on_success_len);
    buf += sb->on_success_len + 1;
    out->failed = copy_some(buf, sb->failed, sb->failed_len);
}

struct store_op *
storage_batch(struct srv *srv, int what, const struct store_batch *sb, size_t room,
              storage_op_fn *done)
{
    struct storage *sg = &srv->storage;
    size_t size = batch_bytes(sb) + room;
    struct store_op *op = sg_calloc(sg, "op", sizeof(*op) + size);

    if (op == NULL)
        return NULL;
    op->kind = STORE_OP_BATCH;
    op->batch_what = what;
    op->done = done;
    op->buf_size = size;
    batch_copy(&op->sb, sb, op->buf);
    op->text = op->buf + batch_bytes(sb); /* an admin op's reply, written by rowfn */
    op->text_room = room;
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return op;
}

bool
storage_batch_redo(struct store_op *op, const struct store_batch *sb)
{
    if (batch_bytes(sb) > op->buf_size)
        return false;
    batch_copy(&op->sb, sb, op->buf);
    return true;
}

/* Copy len bytes to *at and advance it; the copy's address. */
static const char *
put_bytes(char **at, const void *p, size_t len)
{
    char *to = *at;

    if (len > 0)
        memcpy(to, p, len);
    to[len] = '\0';
    *at += len + 1;
    return to;
}

static size_t
sched_bytes(const struct store_sched *ss)
{
    return ss->name_len + ss->cron_len + ss->tz_len + ss->func_len + ss->data_len + 5;
}

/* Copy ss's strings to buf (sched_bytes of room), into out. */
static void
sched_copy(struct store_sched *out, const struct store_sched *ss, char *buf)
{
    *out = *ss;
    out->name = put_bytes(&buf, ss->name, ss->name_len);
    out->cron = put_bytes(&buf, ss->cron, ss->cron_len);
    out->tz = put_bytes(&buf, ss->tz, ss->tz_len);
    out->func = put_bytes(&buf, ss->func, ss->func_len);
    out->data = put_bytes(&buf, ss->data, ss->data_len);
}

int
storage_sched(struct srv *srv, int what, const struct store_sched *ss, storage_op_fn *done)
{
    struct storage *sg = &srv->storage;
    struct store_op *op = sg_calloc(sg, "op", sizeof(*op) + sched_bytes(ss));

    if (op == NULL)
        return -1;
    op->kind = STORE_OP_SCHED;
    op->sched_what = what;
    op->done = done;
    sched_copy(&op->ss, ss, op->buf);
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return 0;
}

int
storage_sched_fire(struct srv *srv, const struct store_sched *ss, struct job *j,
                   storage_op_fn *done)
{
    struct storage *sg = &srv->storage;
    char *room;
    struct store_op *op = op_add_new(sg, j, sched_bytes(ss), &room);

    if (op == NULL)
        return -1;
    op->kind = STORE_OP_FIRE;
    op->done = done;
    op->job = job_ref(j);
    sched_copy(&op->ss, ss, room);
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return 0;
}

int
storage_sched_list(struct srv *srv, storage_op_fn *done)
{
    struct storage *sg = &srv->storage;
    struct store_op *op = sg_calloc(sg, "op", sizeof(*op));

    if (op == NULL)
        return -1;
    op->kind = STORE_OP_SCHEDS;
    op->done = done;
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return 0;
}

void
storage_sched_rows_free(struct storage_sched_row *rows)
{
    while (rows != NULL) {
        struct storage_sched_row *next = rows->next;

        free(rows);
        rows = next;
    }
}

bool
storage_keeps_deps(const struct srv *srv)
{
    return srv->storage.durable && srv->storage.ops->dep != NULL;
}

bool
storage_deps_shared(const struct srv *srv)
{
    return storage_keeps_deps(srv) && srv->storage.shared;
}

int
storage_dep(struct srv *srv, int what, const struct store_dep *sd, storage_op_fn *done)
{
    struct storage *sg = &srv->storage;
    struct store_op *op = sg_calloc(sg, "op", sizeof(*op) + sd->child_len + sd->parent_len + 2);
    char *at;

    if (op == NULL)
        return -1;
    op->kind = STORE_OP_DEP;
    op->dep_what = what;
    op->sd = *sd;
    at = op->buf;
    op->sd.child = at;
    put_bytes(&at, sd->child, sd->child_len);
    op->sd.parent = at;
    put_bytes(&at, sd->parent, sd->parent_len);
    op->done = done;
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return 0;
}

struct store_op *
storage_dep_show(struct srv *srv, const char *func, size_t func_len, const char *handle, size_t len,
                 size_t room)
{
    struct storage *sg = &srv->storage;
    struct store_op *op;
    char *at;

    if (func == NULL)
        func_len = 0;
    op = sg_calloc(sg, "op", sizeof(*op) + len + func_len + 2 + room);

    if (op == NULL)
        return NULL;
    op->kind = STORE_OP_DEP;
    op->dep_what = STORE_DEP_SHOW;
    at = op->buf;
    op->sd.child = at;
    op->sd.child_len = len;
    put_bytes(&at, handle, len);
    op->sd.parent = at;
    op->sd.parent_len = func_len;
    put_bytes(&at, func_len > 0 ? func : "", func_len);
    op->text = at;
    op->text_room = room;
    op->sd.out = op->text;
    op->sd.out_room = room;
    op->sd.out_len = &op->text_len;
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return op;
}

/* On the writer: one row read by sched_list, copied onto the op's list (in order). */
static int
sched_row(const struct store_sched *ss, void *arg)
{
    struct storage_sched_row ***tail = arg;
    struct storage_sched_row *r = malloc(sizeof(*r) + sched_bytes(ss));

    if (r == NULL)
        return -1;
    r->next = NULL;
    sched_copy(&r->ss, ss, r->buf);
    **tail = r;
    *tail = &r->next;
    return 0;
}

/* On the writer: a schedule op, or a store that keeps none (it fails, saying so). */
static int
writer_sched(struct storage *sg, struct store_op *op)
{
    struct storage_sched_row **tail = &op->rows;
    int rc;

    if (sg->ops->sched == NULL)
        return store_say(op->why, DSJOB_ERR_ARG, "store %s keeps no schedules", sg->ops->name);
    if (op->kind == STORE_OP_FIRE)
        return sg->ops->sched_fire(sg->st, &op->ss, &op->sj, &op->claimed, op->why);
    if (op->kind == STORE_OP_SCHED)
        return sg->ops->sched(sg->st, op->sched_what, &op->ss, &op->claimed, op->why);
    rc = sg->ops->sched_list(sg->st, sched_row, &tail, op->why);
    if (rc != DSJOB_OK) {
        storage_sched_rows_free(op->rows);
        op->rows = NULL;
    }
    return rc;
}

/*
 * On the writer: before a shared store's batch admin op, which commits at
 * once, the ops gathered ahead of it in b are flushed, so that a close
 * sent after a client's adds never overtakes them. Those ops are then
 * committed whatever becomes of b's last flush: each is marked so
 * (batch_finish answers it ok even if b fails; an add refused alone fails
 * alone). False if that flush failed: b fails (b->ok false, its why), op
 * and the ops after it are not tried. *gathered: the backend holds ops of
 * b not yet flushed.
 */
static bool
writer_before_admin(struct storage *sg, struct batch *b, struct store_op *op, bool *gathered)
{
    struct store_op *o;

    if (op->kind != STORE_OP_BATCH || op->batch_what < STORE_BATCH_OPEN ||
        sg->ops->batch_admin == NULL || !*gathered)
        return true;
    *gathered = false;
    if (sg->ops->flush(sg->st, b->why) == DSJOB_OK) {
        for (o = b->ops; o != op; o = o->next) {
            if (o->failed || o->committed)
                continue;
            if (o->kind == STORE_OP_ADD && o->lost)
                o->failed = true; /* refused alone, as after the last flush */
            else
                o->committed = true;
        }
        return true;
    }
    b->ok = false;
    op->untried = true;
    op->failed = true;
    snprintf(op->why, sizeof(op->why), "%s", b->why);
    return false;
}

/*
 * The writer thread: wait for a batch, apply its adds and removes to the
 * backend, commit, and tell the loop through the pipe. It reads the batch
 * and writes only its result fields; the loop does not touch the batch
 * until it is told.
 */
static void *
writer_main(void *arg)
{
    struct storage *sg = arg;

#ifdef __linux__
    /*
     * On Linux a thread has a nice value of its own. The loop serves
     * latency (foreground jobs, workers); the writer serves throughput,
     * and when the two want the same core the loop should win: a slower
     * writer only makes the next group commit larger.
     */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), STORAGE_WRITER_NICE);
#endif
    pthread_mutex_lock(&sg->lock);
    for (;;) {
        struct batch *b;
        struct store_op *op;
        char byte = 1;
        bool gathered = false; /* the backend holds ops of b not yet flushed */

        while (sg->handed == NULL && !sg->quit)
            pthread_cond_wait(&sg->wake, &sg->lock);
        if (sg->handed == NULL)
            break;
        b = sg->handed;
        sg->handed = NULL;
        pthread_mutex_unlock(&sg->lock);
        b->ok = true;
        for (op = b->ops; op != NULL; op = op->next) {
            int rc = DSJOB_OK;

            op->why[0] = '\0'; /* an update may say something even when it works */
            if (!b->ok) {
                op->untried = true; /* an earlier flush of this batch failed */
                op->failed = true;
                snprintf(op->why, sizeof(op->why), "%s", b->why);
                continue;
            }
            if (!writer_before_admin(sg, b, op, &gathered))
                continue;
            gathered = true;
            switch (op->kind) {
            case STORE_OP_ADD: rc = sg->ops->add(sg->st, &op->sj, op->why); break;
            case STORE_OP_UPDATE: rc = sg->ops->update(sg->st, &op->sj, op->why); break;
            case STORE_OP_REMOVE:
                rc = sg->shared ? sg->ops->remove_job(sg->st, &op->sj, op->why)
                                : sg->ops->remove(sg->st, op->sj.id, op->why);
                break;
            case STORE_OP_FUNC: rc = sg->ops->set_func(sg->st, &op->sf, op->why); break;
            case STORE_OP_LEASE: rc = sg->ops->lease(sg->st, &op->ls, op->why); break;
            case STORE_OP_SCHED:
            case STORE_OP_SCHEDS:
            case STORE_OP_FIRE: rc = writer_sched(sg, op); break;
            case STORE_OP_DEP:
                rc = sg->ops->dep != NULL
                         ? sg->ops->dep(sg->st, op->dep_what, &op->sd, op->why)
                         : store_say(op->why, DSJOB_ERR_ARG, "store %s keeps no dependencies",
                                     sg->ops->name);
                break;
            case STORE_OP_BATCH:
                if (op->batch_what >= STORE_BATCH_OPEN) {
                    rc = sg->ops->batch_admin != NULL
                             ? sg->ops->batch_admin(sg->st, op->batch_what, &op->sb, op->rowfn, op,
                                                    op->why)
                             : store_say(op->why, DSJOB_ERR_ARG, "store %s keeps no batches",
                                         sg->ops->name);
                    break;
                }
                rc = sg->ops->batch != NULL
                         ? sg->ops->batch(sg->st, op->batch_what, &op->sb, op->why)
                         : store_say(op->why, DSJOB_ERR_ARG, "store %s keeps no batches",
                                     sg->ops->name);
                break;
            }
            op->failed = rc != DSJOB_OK;
            /* An admin op commits on its own, at once. */
            op->committed = !op->failed && op->kind == STORE_OP_BATCH &&
                            op->batch_what >= STORE_BATCH_OPEN && sg->ops->batch_admin != NULL;
        }
        if (b->ok)
            b->ok = sg->ops->flush(sg->st, b->why) == DSJOB_OK;
        /* An add the backend refused alone: only its submitter is refused. */
        for (op = b->ops; b->ok && op != NULL; op = op->next)
            if (op->kind == STORE_OP_ADD && op->lost)
                op->failed = true;
        pthread_mutex_lock(&sg->lock);
        b->finished = true; /* b is the loop's from here: not touched again */
        pthread_mutex_unlock(&sg->lock);
        /*
         * Woken after the unlock, the loop (done_cb, storage_drain) finds
         * the lock free instead of sleeping on it and waking this thread
         * again to hand it over: two futex calls and a switch less a commit.
         */
        pthread_cond_broadcast(&sg->wake);
        if (write(sg->done_pipe[1], &byte, 1) < 0) {
            /* A full pipe already holds a wake-up for the loop. */
        }
        pthread_mutex_lock(&sg->lock);
    }
    pthread_mutex_unlock(&sg->lock);
    return NULL;
}

/*
 * op_again: what to put in the next batch for an op whose commit failed.
 * The remove or rewrite that settles a job goes again as it is (the job
 * settles with the next commit that holds it); a function's settings too.
 * A plain update is made again from the job, whose state may have moved on
 * since, unless the job is no longer stored or is settling: then the op
 * that settles it, already in the open batch, carries its final state, and
 * the old update appended after it would undo that. Adds and removes of
 * nothing settling are the backend's to keep (a remove, unless it was
 * never given to the backend) or were refused (an add). An op with a
 * continuation that is not tried again (a lease) hears that it failed.
 * Returns the op to append, or NULL (op is freed).
 */
static struct store_op *
op_again(struct srv *srv, struct store_op *op)
{
    struct job *j = op->job;
    struct store_op *again;

    if (op->kind == STORE_OP_FUNC || op->settles ||
        (op->kind == STORE_OP_DEP && op->dep_what != STORE_DEP_SHOW))
        return op; /* a show is a read: its reader was told it failed */
    if (op->untried && op->kind == STORE_OP_REMOVE)
        return op; /* the backend never had it to keep */
    if (op->done != NULL) {
        op->done(srv, op, false); /* a lease, a schedule's tick: its caller decides */
        job_unref(op->job);
        free(op);
        return NULL;
    }
    if (op->kind == STORE_OP_UPDATE && j != NULL && j->stored && j->state != JOB_SETTLING) {
        again = op_add_new(&srv->storage, j, 0, NULL);
        if (again != NULL) {
            again->kind = STORE_OP_UPDATE;
            again->revives = op->revives;
            again->job = j; /* takes over op's reference */
            free(op);
            return again;
        }
        log_err(&srv->log, "store: out of memory to update job %s again", job_handle(j));
    }
    job_unref(j);
    free(op);
    return NULL;
}

/* On the loop: the writer finished the batch in flight; run its continuations. */
static void
batch_finish(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct batch *b = sg->inflight;
    struct storage_commit sc = {b->ok, b->why, 0, clock_loop_ms(srv->base) - b->handed_ms, 0};
    struct store_op *op, *next;
    struct storage_wait *w;

    sg->inflight = NULL;
    sg->last_commit_ms = sc.ms;
    event_del(sg->stuck_ev);
    if (sg->stuck) {
        sg->stuck = false;
        log_notice(&srv->log, "store: the commit that was stuck ended after %" PRIu32 " ms (%s)",
                   sc.ms, b->ok ? "committed" : "failed");
    }
    if (b->ok) {
        sg->commits++;
    } else {
        unsigned ms = sg->seam.retry_ms > 0 ? sg->seam.retry_ms : STORAGE_RETRY_SECS * 1000;
        struct timeval retry = {ms / 1000, (ms % 1000) * 1000};

        sg->failures++;
        log_err(&srv->log, "store: commit of %u jobs failed: %s", b->nacks, b->why);
        /*
         * Deletions of that batch are still owed: try again even if nothing
         * new comes. Not lazy: a waiter (an end put back) must not take
         * this timer for the deletions' and go at once, into the same error.
         */
        sg->retry = true;
        if (!sg->scheduled || sg->lazy) {
            event_del(sg->flush_ev);
            sg->scheduled = true;
            sg->lazy = false;
            evtimer_add(sg->flush_ev, &retry);
        }
    }
    for (op = b->ops; op != NULL; op = op->next) {
        sc.nops++;
        if (op->failed && op->kind == STORE_OP_ADD)
            log_err(&srv->log, "store: job %.*s refused: %s", (int)op->sj.handle_len, op->sj.handle,
                    op->why);
        else if (b->ok && !op->failed && op->kind == STORE_OP_UPDATE && op->why[0] != '\0')
            log_warn(&srv->log, "store: job %.*s: %s", (int)op->sj.handle_len, op->sj.handle,
                     op->why);
        if ((b->ok || op->committed) && !op->failed && op->lost) {
            sc.nlost++;
            log_notice(&srv->log,
                       "store: job %.*s had been taken by another server (this one's lease ran "
                       "out): its %s here is discarded",
                       (int)op->sj.handle_len, op->sj.handle,
                       op->kind == STORE_OP_REMOVE ? "end" : "rewrite");
        }
    }
    sg->hooks->committed(srv, &sc);
    /* Each waiter's continuation owns it: it may add to the open batch, not to this one. */
    sg->finishing = true;
    while ((w = TAILQ_FIRST(&b->acks)) != NULL) {
        bool ok = b->ok;
        const char *why = b->why;

        TAILQ_REMOVE(&b->acks, w, link);
        if (w->op != NULL && w->op->committed && !w->op->failed)
            ok = true; /* an earlier flush of the batch committed it (writer_before_admin) */
        /*
         * One with no op of its own (an end) waits for the ops before it:
         * if an earlier flush committed the last of them, it committed
         * them all (or refused one alone, as a commit does).
         */
        if (w->op == NULL && w->after != NULL && w->after->committed && !w->after->failed)
            ok = true;
        if (w->op != NULL && w->op->failed) {
            ok = false;
            why = w->op->why;
        }
        w->done(srv, w, ok, why);
    }
    for (op = b->ops; op != NULL; op = next) {
        next = op->next;
        if ((!b->ok && !op->committed) || op->failed) {
            op = op_again(srv, op);
            if (op != NULL) {
                op->next = NULL;
                op->failed = false;
                op->untried = false;
                batch_append(&sg->open, op);
            }
            continue;
        }
        if (op->done != NULL)
            op->done(srv, op, true);
        job_unref(op->job);
        free(op);
    }
    sg->finishing = false;
    free(b);
    /* What gathered while the writer was busy goes next (after a failure, at the retry timer). */
    if (sg->want_flush || (!batch_empty(&sg->open) && !sg->scheduled))
        storage_flush(srv);
}

static void
done_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    char buf[64];

    (void)what;
    /* One byte a commit and one commit in flight: a read that does not fill buf got them all. */
    while (read(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf))
        ;
    pthread_mutex_lock(&srv->storage.lock);
    if (srv->storage.inflight == NULL || !srv->storage.inflight->finished) {
        pthread_mutex_unlock(&srv->storage.lock);
        return;
    }
    pthread_mutex_unlock(&srv->storage.lock);
    batch_finish(srv);
}

void
storage_flush(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct batch *b;

    if (sg->scheduled) {
        event_del(sg->flush_ev);
        sg->scheduled = false;
    }
    if (!sg->writer_running)
        return;
    if (sg->inflight != NULL) {
        sg->want_flush = true; /* batch_finish hands this one over */
        return;
    }
    if (sg->before_flush != NULL)
        sg->before_flush(srv); /* a lease op, on a shared store */
    if (batch_empty(&sg->open) && !sg->retry)
        return;
    b = sg_calloc(sg, "batch", sizeof(*b));
    if (b == NULL) {
        struct timeval soon = {0, STORAGE_REMOVE_DELAY_MS * 1000};

        /*
         * On a timer, not through schedule(): that hands over at once past
         * --store-batch answers, which would call this again, and again.
         */
        log_err(&srv->log, "store: out of memory for a batch; trying again");
        sg->scheduled = true;
        sg->lazy = false;
        evtimer_add(sg->flush_ev, &soon);
        return;
    }
    /* Move the open batch into b and start a fresh one. */
    b->ops = sg->open.ops;
    TAILQ_INIT(&b->acks);
    TAILQ_CONCAT(&b->acks, &sg->open.acks, link);
    b->nacks = sg->open.nacks;
    sg->open.ops = NULL;
    sg->open.tail = &sg->open.ops;
    sg->open.nacks = 0;
    sg->want_flush = false;
    sg->retry = false;
    sg->handovers++;
    sg->inflight = b;
    b->handed_ms = clock_loop_ms(srv->base);
    {
        struct timeval stuck = {(time_t)srv->cfg.store_stuck_secs, 0};

        evtimer_add(sg->stuck_ev, &stuck);
    }
    pthread_mutex_lock(&sg->lock);
    sg->handed = b;
    pthread_mutex_unlock(&sg->lock);
    pthread_cond_broadcast(&sg->wake); /* after the unlock: the writer wakes to a free lock */
}

void
storage_drain(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    int rounds;

    /* A backend whose database hangs gives up in bounded time from now (a stop). */
    if (sg->writer_running && sg->ops->stop != NULL)
        sg->ops->stop(sg->st);
    /*
     * Three rounds: the batch in flight, the one that gathered behind it,
     * and the one that those continuations let in (an answered client's
     * buffered requests run once its answers are out). A later one is not
     * waited for.
     */
    for (rounds = 0; rounds < 3 && sg->writer_running; rounds++) {
        if (sg->inflight == NULL)
            storage_flush(srv);
        if (sg->inflight == NULL)
            return;
        pthread_mutex_lock(&sg->lock);
        while (!sg->inflight->finished)
            pthread_cond_wait(&sg->wake, &sg->lock);
        pthread_mutex_unlock(&sg->lock);
        sg->want_flush = false;
        batch_finish(srv);
    }
}

/* On the loop: the batch in flight has not come back for --store-stuck-after seconds. */
static void
stuck_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    struct storage *sg = &srv->storage;

    (void)fd;
    (void)what;
    if (sg->inflight == NULL)
        return;
    sg->stuck = true;
    log_err(&srv->log,
            "store: a commit of %u jobs has not ended after %u s (--store-stuck-after; the "
            "database does not answer?)",
            sg->inflight->nacks, srv->cfg.store_stuck_secs);
}

const char *
storage_stuck(const struct srv *srv, char *buf, size_t len)
{
    const struct storage *sg = &srv->storage;

    if (!sg->stuck || sg->inflight == NULL)
        return NULL;
    snprintf(buf, len, "store: a commit has not ended after %" PRIu32 " s",
             (clock_loop_ms(srv->base) - sg->inflight->handed_ms) / 1000);
    return buf;
}

static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;

    (void)fd;
    (void)what;
    srv->storage.scheduled = false;
    storage_flush(srv);
}

/*
 * batch_release frees what a batch still holds at close: the ops of a
 * commit that never came (the jobs of their adds and removes run again
 * after a restart, which at-least-once allows) and waiters nobody is to
 * tell (their continuations release them).
 */
static void
batch_release(struct srv *srv, struct batch *b)
{
    struct store_op *op, *next;
    struct storage_wait *w;

    for (op = b->ops; op != NULL; op = next) {
        next = op->next;
        job_unref(op->job);
        free(op);
    }
    b->ops = NULL;
    b->tail = &b->ops;
    while ((w = TAILQ_FIRST(&b->acks)) != NULL) {
        TAILQ_REMOVE(&b->acks, w, link);
        w->done(srv, w, false, NULL); /* nobody is told */
    }
    b->nacks = 0;
}

void
storage_close(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (sg->ops == NULL)
        return;
    storage_drain(srv);
    if (sg->writer_running) {
        pthread_mutex_lock(&sg->lock);
        sg->quit = true;
        pthread_cond_broadcast(&sg->wake);
        pthread_mutex_unlock(&sg->lock);
        pthread_join(sg->writer, NULL);
        sg->writer_running = false;
        sg->quit = false; /* a later open (a bind tried again) starts a writer that stays */
        pthread_mutex_destroy(&sg->lock);
        pthread_cond_destroy(&sg->wake);
    }
    sg->ops->close(sg->st);
    sg->ops = NULL;
    sg->st = NULL;
    batch_release(srv, &sg->open);
    if (sg->flush_ev != NULL)
        event_free(sg->flush_ev);
    sg->flush_ev = NULL;
    if (sg->stuck_ev != NULL)
        event_free(sg->stuck_ev);
    sg->stuck_ev = NULL;
    if (sg->done_ev != NULL)
        event_free(sg->done_ev);
    sg->done_ev = NULL;
    if (sg->done_pipe[0] >= 0)
        close(sg->done_pipe[0]);
    if (sg->done_pipe[1] >= 0)
        close(sg->done_pipe[1]);
    sg->done_pipe[0] = sg->done_pipe[1] = -1;
}
