/*
 * Persistence glue. The store backend only keeps bytes; this module decides
 * when. A background job is copied into the open batch when it is
 * submitted, and the batch is handed over once per loop turn (an event
 * made active at the first add runs after the turn's other callbacks),
 * after --store-commit-interval milliseconds if one is set, or at once
 * when --store-batch answers are waiting. A writer thread, the only
 * thread that touches the backend after replay, writes and commits the
 * batch on the other core while the loop goes on serving: foreground jobs
 * do not wait behind SQLite. The loop keeps filling the next batch
 * meanwhile. When the writer is done it says so through a pipe; then, on
 * the loop, the batch's jobs are queued and their submitters told
 * JOB_CREATED, in the order they asked. If the commit fails (a full disk),
 * the batch's submitters get an ERROR and its jobs are dropped; nothing
 * stored before is touched, and the next batch tries again.
 */
#include "config.h"
#include "storage.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include <event2/event.h>

#include "conn.h"
#include "job.h"
#include "lifecycle.h"
#include "queue.h"
#include "srv.h"

#define STORAGE_RETRY_SECS 1       /* a failed commit is tried again this soon */
#define STORAGE_REMOVE_DELAY_MS 10 /* deletions alone wait this long to share a commit */
#define STORAGE_EXPIRY_SLACK_MS 20 /* a lease that ran out or a job due is taken this long after */
#define STORAGE_WRITER_NICE 10     /* the writer thread's nice value (Linux): below the loop */

static void flush_cb(evutil_socket_t fd, short what, void *arg);
static void done_cb(evutil_socket_t fd, short what, void *arg);
static void stuck_cb(evutil_socket_t fd, short what, void *arg);
static void *writer_main(void *arg);
static int shared_open(struct srv *srv);
static void shared_close(struct srv *srv);
static void shared_lease_op(struct srv *srv);
static void shared_leased(struct srv *srv, struct store_lease *ls);

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

static enum job_outcome
row_outcome(int state)
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

/* An add for the writer: the job's fields copied, since the job may go meanwhile. */
static struct store_op *
op_add_new(struct storage *sg, const struct job *j)
{
    size_t rlen = job_row_len(j);
    size_t len =
        j->handle_len + j->func->name_len + j->unique_len + j->reducer_len + j->data_len + rlen;
    struct store_op *op = sg_malloc(sg, "op", sizeof(*op) + len + 1);
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
#undef COPY
    sj->alias = op->alias;
    sj->lost = &op->lost;
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

/* Put one replayed job back where it was: its queue, its dead set or the kept results. */
static int
replay_one(const struct store_job *sj, void *arg)
{
    struct srv *srv = arg;
    struct func *f = queue_func(&srv->queue, sj->func, sj->func_len, true);
    bool ended = sj->state != STORE_LIVE;
    struct job *j;

    if (f == NULL)
        return -1;
    if (sj->state < STORE_LIVE || sj->state > STORE_DONE_EXCEPTION) {
        log_warn(&srv->log, "store: job %.*s has an unknown state %d: it is queued to run again",
                 (int)sj->handle_len, sj->handle, sj->state);
        ended = false;
    }
    j = job_new(sj->handle, sj->handle_len, sj->unique, sj->unique_len, sj->reducer,
                sj->reducer_len, sj->data, sj->data_len);
    if (j == NULL)
        return -1;
    j->id = sj->id;
    j->seq = sj->seq;
    j->prio = (uint8_t)(sj->prio >= 0 && sj->prio < JOB_NPRIO ? sj->prio : JOB_PRIO_NORMAL);
    if (job_set_when(j, ended ? 0 : sj->when) < 0)
        goto fail;
    if ((sj->attempts > 0 || sj->first_fail != 0 || ended) && job_ext(j) == NULL)
        goto fail;
    if (j->ext != NULL) {
        j->ext->attempts = sj->attempts;
        j->ext->first_fail = sj->first_fail;
        j->ext->last_fail = sj->last_fail;
        j->ext->numerator = sj->numerator;
        j->ext->denominator = sj->denominator;
        j->ext->outcome = (uint8_t)(ended ? row_outcome(sj->state) : JOB_OUTCOME_NONE);
    }
    if ((ended || sj->result_len > 0) && job_set_row_text(j, sj->result, sj->result_len) < 0)
        goto fail;
    j->background = true;
    j->stored = true;
    j->unique_is_data = sj->unique_is_data;
    if (queue_add_as(&srv->queue, f, j, srv_now(), ended) < 0)
        goto fail;
    stats_queued(srv, j); /* before the dead set's trim or the kept results may drop it */
    if (ended && sj->state == STORE_DEAD)
        lifecycle_bury_replayed(srv, j);
    else if (ended)
        lifecycle_keep_replayed(srv, j);
    if (sj->id >= srv->next_job_id)
        srv->next_job_id = sj->id + 1;
    if (sj->seq >= srv->next_seq)
        srv->next_seq = sj->seq + 1;
    srv->stats.replayed++;
    return 0;
fail:
    job_unref(j);
    return -1;
}

/* Give a replayed function setting back to its function. */
static int
replay_func(const struct store_func *sf, void *arg)
{
    struct srv *srv = arg;
    struct func *f = queue_func(&srv->queue, sf->name, sf->name_len, true);

    if (f == NULL)
        return -1;
    f->retries = sf->retries;
    f->backoff_base_ms = sf->backoff_base_ms;
    f->backoff_max_ms = sf->backoff_max_ms;
    return 0;
}

int
storage_open(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct store_config scfg;
    char err[STORE_ERRLEN] = "", note[STORE_ERRLEN] = "";
    size_t before = srv->queue.njobs;
    uint64_t boot = 0;

    TAILQ_INIT(&sg->open.acks);
    sg->open.tail = &sg->open.ops;
    sg->done_pipe[0] = sg->done_pipe[1] = -1;
    sg->notify_pipe[0] = sg->notify_pipe[1] = -1;
    sg->stop_pipe[0] = sg->stop_pipe[1] = -1;
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
    sg->shared = sg->ops->version >= 3 && sg->ops->lease != NULL && sg->ops->remove_job != NULL &&
                 sg->ops->wait_notify != NULL;
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
    sg->can_update = sg->ops->version >= 2 && sg->ops->update != NULL &&
                     sg->ops->set_func != NULL && sg->ops->replay_funcs != NULL;
    if (sg->durable && !sg->can_update)
        log_warn(&srv->log, "store %s keeps no retries, dead jobs or kept results across a restart",
                 sg->ops->name);
    sg->batch_max = srv->cfg.store_batch ? srv->cfg.store_batch : 1;
    sg->interval_ms = srv->cfg.store_commit_interval_ms;
    sg->flush_ev = evtimer_new(srv->base, flush_cb, srv);
    sg->stuck_ev = evtimer_new(srv->base, stuck_cb, srv);
    if (sg->flush_ev == NULL || sg->stuck_ev == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the store's event");
        return -1;
    }
    if (sg->can_update && sg->ops->replay_funcs(sg->st, replay_func, srv, err) != DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "replaying the store: %s", err);
        return -1;
    }
    if (sg->ops->replay(sg->st, replay_one, srv, err) != DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "replaying the store: %s", err);
        return -1;
    }
    if (sg->durable)
        log_notice(&srv->log, "store %s: replayed %zu jobs", sg->ops->name,
                   srv->queue.njobs - before);
    srv_epoch_arm(srv);
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
    return sg->shared ? shared_open(srv) : 0;
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
        storage_flush(srv);
        return;
    }
    if (sg->scheduled && sg->lazy) {
        /* A submitter waits now: do not let it wait for the deletions' timer. */
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
        struct timeval tv = {0, STORAGE_REMOVE_DELAY_MS * 1000};

        sg->scheduled = true;
        sg->lazy = true;
        evtimer_add(sg->flush_ev, &tv);
    }
}

/*
 * An answer, with room for an error of extra bytes behind it: one
 * allocation, so that an answer is either whole or not made at all.
 */
static struct ack *
ack_alloc(struct storage *sg, const char *what, size_t extra)
{
    return sg_calloc(sg, what, sizeof(struct ack) + extra);
}

/* Queue a's answer for c, in the open batch and in c's list. */
static void
ack_link(struct srv *srv, struct ack *a, struct conn *c, struct job *j, struct store_op *op)
{
    a->job = j ? job_ref(j) : NULL;
    a->op = op;
    a->client = c;
    TAILQ_INSERT_TAIL(&srv->storage.open.acks, a, link);
    TAILQ_INSERT_TAIL(&c->acks, a, by_client);
    srv->storage.open.nacks++;
    c->nacks++;
}

void
storage_refuse(struct srv *srv, struct conn *c, const char *code, const char *text)
{
    size_t clen = strlen(code), tlen = strlen(text);
    struct ack *a;

    if (c->nacks == 0) {
        conn_send_error(c, code, "%s", text);
        return;
    }
    a = ack_alloc(&srv->storage, "error", clen + 1 + tlen);
    if (a == NULL) {
        conn_send_error(c, code, "%s", text); /* out of memory: order matters less */
        return;
    }
    a->error = (char *)(a + 1);
    memcpy(a->error, code, clen);
    a->error[clen] = '\0';
    memcpy(a->error + clen + 1, text, tlen);
    a->error_len = clen + 1 + tlen;
    ack_link(srv, a, c, NULL, NULL);
    schedule(srv);
}

/* Ready jobs of f held here: queued, not yet grabbed. */
static unsigned
func_ready(const struct func *f)
{
    return f->nqueued[JOB_PRIO_HIGH] + f->nqueued[JOB_PRIO_NORMAL] + f->nqueued[JOB_PRIO_LOW];
}

/*
 * How many more ready jobs of f this server wants: one per idle worker,
 * and the prefetch; none until it holds half of that or less, so that a
 * drain takes jobs in few, large leases rather than one per grab.
 */
static unsigned
func_wants(const struct storage *sg, const struct func *f)
{
    unsigned idle = f->nworkers > f->nrunning ? f->nworkers - f->nrunning : 0;
    unsigned have = func_ready(f) + f->npending;
    unsigned target = idle + sg->prefetch;

    if (f->nworkers == 0 || have * 2 > target)
        return 0;
    return target - have;
}

/*
 * On a shared store, a new job runs here (under this server's lease from
 * its insert) when a worker here can do it now and the function does not
 * hold its share already; otherwise it is left to whichever server has a
 * worker free (and, when it is due, to this one's lease op too).
 */
static bool
shared_runs_here(struct srv *srv, const struct job *j)
{
    return job_when(j) <= srv_now() && func_wants(&srv->storage, j->func) > 0;
}

void
storage_submit(struct srv *srv, struct conn *c, struct job *j, bool existing)
{
    struct storage *sg = &srv->storage;
    struct store_op *op = NULL;
    struct ack *a;

    if (existing && j->refused) {
        storage_refuse(srv, c, "STORE_ERROR", "job not stored");
        return;
    }
    /*
     * Everything that can fail comes before the job enters the batch: a
     * job in the batch is stored and runs (after a restart, at the
     * latest), so its submitter must not be told "out of memory".
     */
    a = ack_alloc(sg, "ack", 0);
    if (a != NULL && !existing) {
        op = op_add_new(sg, j);
        if (op == NULL || queue_add_as(&srv->queue, j->func, j, srv_now(), true) < 0) {
            free(op);
            free(a);
            a = NULL;
        }
    }
    if (a == NULL) {
        if (!existing)
            job_unref(j);
        storage_refuse(srv, c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    if (!existing) {
        j->stored = true;
        if (sg->shared)
            op->sj.leased = shared_runs_here(srv, j);
        batch_append(&sg->open, op);
        srv->next_job_id++;
    }
    ack_link(srv, a, c, j, op);
    schedule(srv);
}

void
storage_adopt(struct srv *srv, struct conn *c, struct job *j)
{
    struct storage *sg = &srv->storage;
    struct ack *a = ack_alloc(sg, "ack", 0);
    struct store_op *op;

    j->background = true; /* what op_add_new stores; undone below if it cannot be */
    op = a != NULL ? op_add_new(sg, j) : NULL;
    if (op == NULL) {
        j->background = false;
        free(a);
        storage_refuse(srv, c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    j->stored = true;
    if (sg->shared)
        op->sj.leased = true; /* it is here already, queued or running */
    batch_append(&sg->open, op);
    ack_link(srv, a, c, j, op);
    schedule(srv);
}

bool
storage_settle(struct srv *srv, struct job *j, struct conn *worker)
{
    struct storage *sg = &srv->storage;
    bool rewrite = j->ext != NULL && j->ext->settle_to != JOB_SETTLE_GONE && sg->can_update;
    struct store_op *op;
    struct ack *a = NULL;

    if (!j->stored)
        return false;
    /* The rewrite copies the job's final state: what it will be once it has settled. */
    op = rewrite ? op_add_new(sg, j) : op_remove_new(sg, j);
    if (op == NULL) {
        log_err(&srv->log, "store: out of memory to %s job %s: it will run again after a restart",
                rewrite ? "end" : "remove", job_handle(j));
        j->stored = rewrite; /* the row is still there; without a rewrite it is live */
        return false;
    }
    j->stored = rewrite;
    op->kind = rewrite ? STORE_OP_UPDATE : STORE_OP_REMOVE;
    op->sj.id = j->id;
    op->job = job_ref(j);
    op->settles = true;
    batch_append(&sg->open, op);
    queue_settle(&srv->queue, j);
    /* Unless --store-async-ends: more work once this end is durable. */
    if (worker != NULL && worker->state == CONN_ACTIVE && !srv->cfg.store_async_ends)
        a = ack_alloc(sg, "ack", 0);
    if (a != NULL) {
        /* An answer of nothing: it only holds the worker's next request. */
        ack_link(srv, a, worker, NULL, NULL);
        schedule(srv);
        return true;
    }
    schedule_lazy(srv);
    return true;
}

void
storage_update(struct srv *srv, struct job *j)
{
    struct storage *sg = &srv->storage;
    struct store_op *op;

    if (!j->stored || !sg->durable || !sg->can_update)
        return;
    op = op_add_new(sg, j);
    if (op == NULL) {
        log_err(&srv->log, "store: out of memory to update job %s: the store keeps it as it was",
                job_handle(j));
        return;
    }
    op->kind = STORE_OP_UPDATE;
    op->job = job_ref(j);
    batch_append(&sg->open, op);
    schedule_lazy(srv);
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

    if (!sg->durable || !sg->can_update)
        return 0;
    op = sg_calloc(sg, "op", sizeof(*op) + f->name_len + 1);
    if (op == NULL)
        return -1;
    op->kind = STORE_OP_FUNC;
    memcpy(op->buf, f->name, f->name_len);
    op->sf.name = op->buf;
    op->sf.name_len = f->name_len;
    op->sf.retries = f->retries;
    op->sf.backoff_base_ms = f->backoff_base_ms;
    op->sf.backoff_max_ms = f->backoff_max_ms;
    batch_append(&sg->open, op);
    schedule_lazy(srv);
    return 0;
}

/*
 * A committed job that does not run here: it waits in the shared table
 * for any server's lease, or it coalesced onto the live job alias there.
 * It leaves this server's queue; its submitters are told its handle (or
 * alias). A client waiting for it here (a foreground submit coalesced
 * onto it) is told WORK_FAIL: its result will come to another server.
 */
static void
shared_hand_off(struct srv *srv, struct job *j, const char *alias)
{
    size_t len = strlen(alias);

    if (len > 0 && job_set_alias(j, alias, len) == 0)
        j->aliased = true;
    j->stored = false; /* the row is not this server's to delete */
    if (job_has_waiters(j))
        lifecycle_fail(srv, j);
    else
        queue_remove(&srv->queue, j);
}

/* Answer one submitter after the commit: ok says whether it succeeded. */
static void
ack_resolve(struct srv *srv, struct ack *a, bool ok, const char *err)
{
    struct job *j = a->job;

    if (a->op != NULL && a->op->failed) {
        ok = false;
        err = a->op->why;
    }
    if (j != NULL && j->state == JOB_PENDING) {
        const char *peer = a->client != NULL ? a->client->peer : NULL;

        if (ok && a->op != NULL && srv->storage.shared && !a->op->sj.leased) {
            /* In the shared table for any server (or coalesced onto a job there). */
            LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", peer, j,
                          a->op->alias[0] != '\0' ? "coalesced in the store"
                                                  : "left to any server");
            shared_hand_off(srv, j, a->op->alias);
        } else if (ok && a->op != NULL && srv->storage.shared && a->op->alias[0] != '\0') {
            LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", peer, j, "coalesced in the store");
            shared_hand_off(srv, j, a->op->alias);
        } else if (ok && queue_commit(&srv->queue, j, srv_now()) == 0) {
            LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", peer, j, NULL);
            if (j->state == JOB_SCHEDULED)
                srv_epoch_arm(srv);
            else
                lifecycle_wake(j);
        } else {
            if (LOG_ON(&srv->log, DSJOB_LOG_NOTICE)) {
                char why[300];

                snprintf(why, sizeof(why), "STORE_ERROR: job not stored: %.200s", err ? err : "");
                LIFECYCLE_LOG(srv, DSJOB_LOG_NOTICE, "refused", peer, j, why);
            }
            j->stored = false; /* not in the store: nothing to delete */
            j->refused = true; /* later acks of a coalesced submit say so too */
            lifecycle_fail(srv, j);
            ok = false;
        }
    } else if (j != NULL && j->refused) {
        ok = false;
    }
    if (a->client == NULL)
        return;
    if (j == NULL && a->error == NULL)
        return; /* storage_settle's hold on a worker: nothing to send */
    if (a->error != NULL) {
        const void *args[2] = {a->error, a->error + strlen(a->error) + 1};
        size_t lens[2] = {strlen(a->error), a->error_len - strlen(a->error) - 1};

        conn_send(a->client, PACKET_ERROR, 2, args, lens);
    } else if (ok && j->aliased) {
        conn_send_raw(a->client, PACKET_JOB_CREATED, j->ext->alias, strlen(j->ext->alias));
    } else if (ok) {
        conn_send_raw(a->client, PACKET_JOB_CREATED, job_handle(j), j->handle_len);
    } else {
        conn_send_error(a->client, "STORE_ERROR", "job not stored: %s", err);
    }
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

        while (sg->handed == NULL && !sg->quit)
            pthread_cond_wait(&sg->wake, &sg->lock);
        if (sg->handed == NULL)
            break;
        b = sg->handed;
        sg->handed = NULL;
        pthread_mutex_unlock(&sg->lock);
        for (op = b->ops; op != NULL; op = op->next) {
            int rc = DSJOB_OK;

            op->why[0] = '\0'; /* an update may say something even when it works */
            switch (op->kind) {
            case STORE_OP_ADD: rc = sg->ops->add(sg->st, &op->sj, op->why); break;
            case STORE_OP_UPDATE: rc = sg->ops->update(sg->st, &op->sj, op->why); break;
            case STORE_OP_REMOVE:
                rc = sg->shared ? sg->ops->remove_job(sg->st, &op->sj, op->why)
                                : sg->ops->remove(sg->st, op->sj.id, op->why);
                break;
            case STORE_OP_FUNC: rc = sg->ops->set_func(sg->st, &op->sf, op->why); break;
            case STORE_OP_LEASE: rc = sg->ops->lease(sg->st, &op->ls, op->why); break;
            }
            op->failed = rc != DSJOB_OK;
        }
        b->ok = sg->ops->flush(sg->st, b->why) == DSJOB_OK;
        /* An add the backend refused alone (version 4): only its submitter is refused. */
        for (op = b->ops; b->ok && sg->ops->version >= 4 && op != NULL; op = op->next)
            if (op->kind == STORE_OP_ADD && op->lost)
                op->failed = true;
        pthread_mutex_lock(&sg->lock);
        b->finished = true;
        pthread_cond_broadcast(&sg->wake);
        if (write(sg->done_pipe[1], &byte, 1) < 0) {
            /* A full pipe already holds a wake-up for the loop. */
        }
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
 * nothing settling are the backend's to keep (a remove) or were refused
 * (an add). Returns the op to append, or NULL (op is freed).
 */
static struct store_op *
op_again(struct srv *srv, struct store_op *op)
{
    struct job *j = op->job;
    struct store_op *again;

    if (op->kind == STORE_OP_FUNC || op->settles)
        return op;
    if (op->kind == STORE_OP_LEASE) {
        srv->storage.lease_inflight = false;
        srv->storage.want_lease = true; /* asked again with the next batch */
        free(op);
        return NULL;
    }
    if (op->kind == STORE_OP_UPDATE && j != NULL && j->stored && j->state != JOB_SETTLING) {
        again = op_add_new(&srv->storage, j);
        if (again != NULL) {
            again->kind = STORE_OP_UPDATE;
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

/* On the loop: the writer finished the batch in flight; answer its submitters. */
static void
batch_finish(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct batch *b = sg->inflight;
    struct store_op *op, *next;
    uint64_t nops = 0;
    struct ack *a;

    sg->inflight = NULL;
    for (op = b->ops; op != NULL; op = op->next)
        nops++;
    event_del(sg->stuck_ev);
    if (sg->stuck) {
        sg->stuck = false;
        log_notice(&srv->log, "store: the commit that was stuck ended after %" PRIu32 " ms (%s)",
                   stats_clock(srv) - b->handed_ms, b->ok ? "committed" : "failed");
    }
    srv->stats.store_failing = !b->ok;
    if (b->ok) {
        sg->commits++;
        srv->stats.commits++;
        stats_observe(&srv->stats.batch_ops, false, nops);
        stats_observe(&srv->stats.commit_ms, true, (uint32_t)(stats_clock(srv) - b->handed_ms));
    } else {
        struct timeval retry = {STORAGE_RETRY_SECS, 0};

        sg->failures++;
        srv->stats.commit_errors++;
        snprintf(srv->stats.store_error, sizeof(srv->stats.store_error), "%.100s", b->why);
        log_err(&srv->log, "store: commit of %u jobs failed: %s", b->nacks, b->why);
        /* Deletions of that batch are still owed: try again even if nothing new comes. */
        sg->retry = true;
        if (!sg->scheduled) {
            sg->scheduled = true;
            evtimer_add(sg->flush_ev, &retry);
        }
    }
    for (op = b->ops; op != NULL; op = op->next) {
        if (op->failed && op->kind == STORE_OP_ADD)
            log_err(&srv->log, "store: job %.*s refused: %s", (int)op->sj.handle_len, op->sj.handle,
                    op->why);
        else if (b->ok && !op->failed && op->kind == STORE_OP_UPDATE && op->why[0] != '\0')
            log_warn(&srv->log, "store: job %.*s: %s", (int)op->sj.handle_len, op->sj.handle,
                     op->why);
    }
    while ((a = TAILQ_FIRST(&b->acks)) != NULL) {
        struct conn *c = a->client;

        TAILQ_REMOVE(&b->acks, a, link);
        ack_resolve(srv, a, b->ok, b->why);
        if (c != NULL) {
            TAILQ_REMOVE(&c->acks, a, by_client);
            c->nacks--;
        }
        job_unref(a->job);
        free(a); /* a->error is part of it */
        /* Its last answer is out: what it sent meanwhile can be read now. */
        if (c != NULL && c->nacks == 0)
            conn_resume(c);
    }
    for (op = b->ops; op != NULL; op = next) {
        next = op->next;
        if (!b->ok || op->failed) {
            op = op_again(srv, op);
            if (op != NULL) {
                op->next = NULL;
                op->failed = false;
                batch_append(&sg->open, op);
            }
            continue;
        }
        if (op->kind == STORE_OP_LEASE) {
            shared_leased(srv, &op->ls);
            free(op);
            continue;
        }
        if (op->lost) {
            srv->stats.pg_lease_lost++;
            log_notice(&srv->log,
                       "store: job %.*s had been taken by another server (this one's lease ran "
                       "out): its %s here is discarded",
                       (int)op->sj.handle_len, op->sj.handle,
                       op->kind == STORE_OP_REMOVE ? "end" : "rewrite");
        }
        if (op->job != NULL) {
            /* Only its own op settles it: a plain update may commit while it settles. */
            if (op->settles && op->job->state == JOB_SETTLING)
                lifecycle_settled(srv, op->job);
            job_unref(op->job);
        }
        free(op);
    }
    free(b);
    /* What gathered while the writer was busy goes next. */
    if (sg->want_flush || (!batch_empty(&sg->open) && !sg->scheduled))
        storage_flush(srv);
}

static void
done_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    char buf[64];

    (void)what;
    while (read(fd, buf, sizeof(buf)) > 0)
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
    if (sg->shared && sg->want_lease && !sg->lease_inflight)
        shared_lease_op(srv);
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
    sg->inflight = b;
    b->handed_ms = stats_clock(srv);
    {
        struct timeval stuck = {(time_t)srv->cfg.store_stuck_secs, 0};

        evtimer_add(sg->stuck_ev, &stuck);
    }
    pthread_mutex_lock(&sg->lock);
    sg->handed = b;
    pthread_cond_broadcast(&sg->wake);
    pthread_mutex_unlock(&sg->lock);
}

void
storage_drain(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    int rounds;

    /* A backend whose database hangs gives up in bounded time from now (a stop). */
    if (sg->writer_running && sg->ops->version >= 4 && sg->ops->stop != NULL)
        sg->ops->stop(sg->st);
    /*
     * Three rounds: the batch in flight, the one that gathered behind it,
     * and the one that answering those let in (conn_resume runs a client's
     * buffered requests once its answers are out). A later one is not
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
             (stats_clock(srv) - sg->inflight->handed_ms) / 1000);
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

void
storage_forget_client(struct srv *srv, struct conn *c)
{
    struct ack *a;

    (void)srv;
    while ((a = TAILQ_FIRST(&c->acks)) != NULL) {
        TAILQ_REMOVE(&c->acks, a, by_client);
        a->client = NULL; /* the job still commits; nobody is told */
    }
    c->nacks = 0;
}

/*
 * batch_release frees what a batch still holds at close: the ops of a
 * commit that never came (the jobs of their adds and removes run again
 * after a restart, which at-least-once allows) and answers nobody reads.
 */
static void
batch_release(struct batch *b)
{
    struct store_op *op, *next;
    struct ack *a;

    for (op = b->ops; op != NULL; op = next) {
        next = op->next;
        job_unref(op->job);
        free(op);
    }
    b->ops = NULL;
    b->tail = &b->ops;
    while ((a = TAILQ_FIRST(&b->acks)) != NULL) {
        TAILQ_REMOVE(&b->acks, a, link);
        if (a->client != NULL) {
            TAILQ_REMOVE(&a->client->acks, a, by_client);
            a->client->nacks--;
        }
        job_unref(a->job);
        free(a);
    }
    b->nacks = 0;
}

void
storage_close(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (sg->ops == NULL)
        return;
    shared_close(srv);
    storage_drain(srv);
    if (sg->writer_running) {
        pthread_mutex_lock(&sg->lock);
        sg->quit = true;
        pthread_cond_broadcast(&sg->wake);
        pthread_mutex_unlock(&sg->lock);
        pthread_join(sg->writer, NULL);
        sg->writer_running = false;
        pthread_mutex_destroy(&sg->lock);
        pthread_cond_destroy(&sg->wake);
    }
    sg->ops->close(sg->st);
    sg->ops = NULL;
    sg->st = NULL;
    batch_release(&sg->open);
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

bool
storage_must_wait(const struct conn *c, uint32_t type)
{
    if (c->nacks == 0)
        return false;
    switch (type) {
    case PACKET_SUBMIT_JOB_BG:
    case PACKET_SUBMIT_JOB_HIGH_BG:
    case PACKET_SUBMIT_JOB_LOW_BG:
    case PACKET_SUBMIT_JOB_EPOCH:
    case PACKET_SUBMIT_REDUCE_JOB_BACKGROUND:
        return false; /* answered in order through the same batch */
    default: return true;
    }
}

/*
 * The shared store (postgres). This server runs a job only under its
 * lease. The lease op (one per batch at most) takes ready jobs for the
 * functions whose workers here lack them, and every third of --pg-lease
 * it renews the leases held and lists them, so that a queued job whose
 * lease another server took meanwhile is dropped here, not run twice.
 */

void
storage_want_lease(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (!sg->shared)
        return;
    sg->want_lease = true;
    if (!sg->scheduled) {
        sg->scheduled = true;
        sg->lazy = false;
        event_active(sg->flush_ev, EV_TIMEOUT, 0);
    }
}

/* Put a lease op in the open batch: what each function's workers here want, and a renew if due. */
static void
shared_lease_op(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct store_op *op;
    struct func *f;
    size_t nf = 0, bytes = 0, stray_bytes, i;
    char *at;

    sg->want_lease = false;
    TAILQ_FOREACH (f, &srv->queue.func_order, order) {
        if (func_wants(sg, f) > 0) {
            nf++;
            bytes += f->name_len + 1;
        }
    }
    for (i = 0, at = sg->strays; i < sg->nstrays; i++, at += strlen(at) + 1)
        ;
    stray_bytes = sg->nstrays > 0 ? (size_t)(at - sg->strays) : 0;
    if (nf == 0 && !sg->renew_due && sg->nstrays == 0)
        return;
    op = sg_calloc(sg, "op",
                   sizeof(*op) + (nf + sg->nstrays) * sizeof(char *) + nf * sizeof(unsigned) +
                       bytes + stray_bytes + 16);
    if (op == NULL) {
        log_err(&srv->log, "store: out of memory for a lease; trying with the next batch");
        sg->want_lease = true;
        return;
    }
    op->kind = STORE_OP_LEASE;
    {
        /* buf: the name and stray pointers, the limits, the names, then the strays. */
        char *base = op->buf + (8 - ((uintptr_t)op->buf & 7)) % 8;
        const char **names = (const char **)(void *)base;
        const char **strays = names + nf;
        unsigned *limits = (unsigned *)(void *)(strays + sg->nstrays);
        const char *h = sg->strays;

        at = (char *)(limits + nf);
        i = 0;
        TAILQ_FOREACH (f, &srv->queue.func_order, order) {
            unsigned want = func_wants(sg, f);

            if (want == 0)
                continue;
            memcpy(at, f->name, f->name_len + 1);
            names[i] = at;
            limits[i++] = want;
            at += f->name_len + 1;
        }
        op->ls.funcs = names;
        op->ls.limits = limits;
        op->ls.nfuncs = nf;
        for (i = 0; i < sg->nstrays; i++, h += strlen(h) + 1) {
            memcpy(at, h, strlen(h) + 1);
            strays[i] = at;
            at += strlen(h) + 1;
        }
        op->ls.release = strays;
        op->ls.nrelease = sg->nstrays;
    }
    /* Not asked again if this op's batch fails: the next renew lists them again. */
    free(sg->strays);
    sg->strays = NULL;
    sg->nstrays = 0;
    op->ls.renew = sg->renew_due;
    sg->renew_due = false;
    sg->lease_inflight = true;
    batch_append(&sg->open, op);
}

/* Drop queued jobs whose lease this server no longer holds (held: those it does). */
static void
shared_drop_lost(struct srv *srv, const struct store_lease *ls)
{
    const char **held = malloc((ls->nheld + 1) * sizeof(*held));
    const char *h = ls->held;
    struct func *f;
    size_t i;

    if (held == NULL)
        return; /* the next renew checks again */
    for (i = 0; i < ls->nheld; i++, h += strlen(h) + 1)
        held[i] = h;
    qsort(held, ls->nheld, sizeof(*held), store_cmp_strs);
    TAILQ_FOREACH (f, &srv->queue.func_order, order) {
        int p;

        for (p = 0; p < JOB_NPRIO; p++) {
            struct job *j, *next;

            for (j = TAILQ_FIRST(&f->jobs[p]); j != NULL; j = next) {
                const char *key = job_handle(j);

                next = TAILQ_NEXT(j, link);
                if (!j->stored || job_has_waiters(j) ||
                    bsearch(&key, held, ls->nheld, sizeof(*held), store_cmp_strs) != NULL)
                    continue;
                srv->stats.pg_dropped++;
                LIFECYCLE_LOG(srv, DSJOB_LOG_NOTICE, "dropped", NULL, j,
                              "another server took it: this one's lease ran out");
                j->stored = false;
                queue_remove(&srv->queue, j);
            }
        }
    }
    free(held);
}

/*
 * Rows under this server's lease that its queue lacks: a take or a leased
 * add whose batch committed while its answer was lost with the connection
 * (or whose alias lookup failed after the commit). The renew keeps their
 * leases alive, so no server would ever take them: the next lease op gives
 * them up, and its NOTIFY lets a server with a worker free take them. Run
 * after the takes of the same batch are queued. The renewal lists live
 * rows only, and a live job leaves the queue only once its deletion or
 * rewrite commits (it settles first), so no job of this server's is given
 * up.
 */
static void
shared_find_strays(struct srv *srv, const struct store_lease *ls)
{
    struct storage *sg = &srv->storage;
    const char *h = ls->held;
    size_t i, n = 0, bytes = 0;
    char *at;

    for (i = 0; i < ls->nheld; i++, h += strlen(h) + 1)
        if (queue_find_job(&srv->queue, h, strlen(h)) == NULL) {
            n++;
            bytes += strlen(h) + 1;
        }
    if (n == 0)
        return;
    at = malloc(bytes);
    if (at == NULL)
        return; /* the next renew finds them again */
    free(sg->strays);
    sg->strays = at;
    sg->nstrays = n;
    for (i = 0, h = ls->held; i < ls->nheld; i++, h += strlen(h) + 1)
        if (queue_find_job(&srv->queue, h, strlen(h)) == NULL) {
            memcpy(at, h, strlen(h) + 1);
            at += strlen(h) + 1;
        }
    log_notice(&srv->log,
               "store: %zu jobs under this server's lease were not in its queue (a batch's answer "
               "was lost with the connection): giving their leases up",
               n);
    storage_want_lease(srv);
}

/*
 * Arm the one-shot timer ev for a lease op ms milliseconds from now (as
 * PostgreSQL counted them), a little after, so that PostgreSQL's clock has
 * passed that time too; at most a day ahead (a later renewal or lease op
 * arms it again).
 */
static void
shared_arm(struct event *ev, int64_t ms)
{
    struct timeval tv;

    ms = (ms < 86400000 ? ms : 86400000) + STORAGE_EXPIRY_SLACK_MS;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    evtimer_add(ev, &tv);
}

/* Keep what a renewal counted waiting in the shared table, for stats (replacing the last). */
static void
shared_waiting(struct srv *srv, const struct store_lease *ls)
{
    struct storage *sg = &srv->storage;
    const char *at = ls->waiting;
    size_t i, len = 0;
    char *copy = NULL;

    for (i = 0; i < ls->nwaiting; i++) {
        len += strlen(at + len) + 1;
        len += strlen(at + len) + 1;
    }
    if (len > 0 && (copy = malloc(len)) == NULL)
        return; /* the next renewal counts again */
    if (len > 0)
        memcpy(copy, at, len);
    free(sg->waiting);
    sg->waiting = copy;
    sg->nwaiting = ls->nwaiting;
}

/* On the loop: a lease op committed. Queue what it took; check what it renewed. */
static void
shared_leased(struct srv *srv, struct store_lease *ls)
{
    struct storage *sg = &srv->storage;
    unsigned asked = 0;
    size_t i;

    sg->lease_inflight = false;
    if (ls->renewed)
        shared_drop_lost(srv, ls);
    if (ls->renewed)
        shared_waiting(srv, ls);
    for (i = 0; i < ls->nfuncs; i++)
        asked += ls->limits[i];
    for (i = 0; i < ls->njobs; i++) {
        const struct store_job *sj = &ls->jobs[i];
        struct func *f;
        struct job *j;

        if (queue_find_job(&srv->queue, sj->handle, sj->handle_len) != NULL)
            continue; /* still here from an earlier lease of this server's */
        f = queue_func(&srv->queue, sj->func, sj->func_len, true);
        j = f != NULL ? job_new(sj->handle, sj->handle_len, sj->unique, sj->unique_len, sj->reducer,
                                sj->reducer_len, sj->data, sj->data_len)
                      : NULL;
        if (j == NULL) {
            log_err(&srv->log,
                    "store: out of memory for job %.*s: another server runs it when "
                    "this one's lease runs out",
                    (int)sj->handle_len, sj->handle);
            continue;
        }
        j->id = srv->next_job_id++;
        j->seq = srv->next_seq++;
        j->prio = (uint8_t)(sj->prio >= 0 && sj->prio < JOB_NPRIO ? sj->prio : JOB_PRIO_NORMAL);
        j->background = true;
        j->stored = true;
        j->unique_is_data = sj->unique_is_data;
        if ((sj->attempts > 0 && job_ext(j) == NULL) ||
            queue_add_as(&srv->queue, f, j, srv_now(), false) < 0) {
            job_unref(j);
            continue;
        }
        if (j->ext != NULL) {
            j->ext->attempts = sj->attempts;
            j->ext->first_fail = sj->first_fail;
            j->ext->last_fail = sj->last_fail;
        }
        srv->stats.pg_claimed++;
        stats_queued(srv, j);
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "leased", NULL, j, NULL);
        lifecycle_wake(j);
    }
    srv->stats.pg_released += ls->nreleased;
    if (ls->nended > 0) {
        size_t took = 0;

        for (i = 0; i < ls->nended; i++)
            if (queue_find_job(&srv->queue, ls->ended[i].handle, ls->ended[i].handle_len) == NULL &&
                replay_one(&ls->ended[i], srv) == 0)
                took++;
        log_notice(&srv->log,
                   "store: took %zu dead jobs and kept results of servers that are gone or "
                   "stopped",
                   took);
    }
    if (ls->renewed)
        shared_find_strays(srv, ls);
    if (ls->renewed && ls->expiry_ms >= 0)
        shared_arm(sg->expiry_ev, ls->expiry_ms);
    if (ls->due_ms >= 0) /* an epoch job or a retry's backoff: taken when due, not at a poll */
        shared_arm(sg->due_ev, ls->due_ms);
    if (ls->njobs > 0 && ls->njobs >= asked)
        storage_want_lease(srv); /* there may be more */
    store_lease_free(ls);
}

static void
poll_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    storage_want_lease(arg);
}

static void
renew_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;

    (void)fd;
    (void)what;
    srv->storage.renew_due = true;
    storage_want_lease(srv);
}

static void
notify_cb(evutil_socket_t fd, short what, void *arg)
{
    char buf[64];

    (void)what;
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    storage_want_lease(arg);
}

/*
 * The notifier thread: waits in the backend's wait_notify (its own
 * connection, LISTEN) and writes a byte to notify_pipe for each wake-up.
 * It touches nothing else; a lost connection is tried again every second.
 */
static void *
notifier_main(void *arg)
{
    struct storage *sg = arg;
    char err[STORE_ERRLEN];

    for (;;) {
        int rc = sg->ops->wait_notify(sg->st, sg->stop_pipe[0], err);
        char byte = 1;

        if (rc == 0)
            break;
        if (rc > 0) {
            if (write(sg->notify_pipe[1], &byte, 1) < 0) {
                /* A full pipe already holds a wake-up. */
            }
            continue;
        }
        {
            struct pollfd p = {sg->stop_pipe[0], POLLIN, 0};

            if (poll(&p, 1, 1000) > 0)
                break;
        }
    }
    return NULL;
}

static int
shared_open(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    unsigned renew_ms = srv->cfg.pg_lease * 1000 / 3;
    struct timeval poll_tv = {srv->cfg.pg_poll_ms / 1000, (srv->cfg.pg_poll_ms % 1000) * 1000};
    struct timeval renew_tv = {renew_ms / 1000, (renew_ms % 1000) * 1000};

    sg->prefetch = srv->cfg.pg_prefetch;
    if (pipe2(sg->notify_pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        pipe2(sg->stop_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "pipe: %s", strerror(errno));
        return -1;
    }
    sg->notify_ev = event_new(srv->base, sg->notify_pipe[0], EV_READ | EV_PERSIST, notify_cb, srv);
    sg->poll_ev = event_new(srv->base, -1, EV_PERSIST, poll_cb, srv);
    sg->renew_ev = event_new(srv->base, -1, EV_PERSIST, renew_cb, srv);
    sg->expiry_ev = evtimer_new(srv->base, poll_cb, srv);
    sg->due_ev = evtimer_new(srv->base, poll_cb, srv);
    if (sg->notify_ev == NULL || sg->poll_ev == NULL || sg->renew_ev == NULL ||
        sg->expiry_ev == NULL || sg->due_ev == NULL || event_add(sg->notify_ev, NULL) < 0 ||
        event_add(sg->poll_ev, &poll_tv) < 0 || event_add(sg->renew_ev, &renew_tv) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the store's events");
        return -1;
    }
    if (pthread_create(&sg->notifier, NULL, notifier_main, sg) != 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot start the store's notifier thread");
        return -1;
    }
    sg->notifier_running = true;
    log_notice(&srv->log, "store %s: shared; this server's handles and leases are %s",
               sg->ops->name, srv->handle_prefix);
    return 0;
}

static void
shared_close(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    int i;

    if (sg->notifier_running) {
        char byte = 1;

        if (write(sg->stop_pipe[1], &byte, 1) < 0) {
            /* The pipe is empty and ours: this does not fail. */
        }
        pthread_join(sg->notifier, NULL);
        sg->notifier_running = false;
    }
    if (sg->notify_ev != NULL)
        event_free(sg->notify_ev);
    if (sg->poll_ev != NULL)
        event_free(sg->poll_ev);
    if (sg->renew_ev != NULL)
        event_free(sg->renew_ev);
    if (sg->expiry_ev != NULL)
        event_free(sg->expiry_ev);
    if (sg->due_ev != NULL)
        event_free(sg->due_ev);
    sg->notify_ev = sg->poll_ev = sg->renew_ev = sg->expiry_ev = sg->due_ev = NULL;
    free(sg->strays);
    sg->strays = NULL;
    sg->nstrays = 0;
    free(sg->waiting);
    sg->waiting = NULL;
    sg->nwaiting = 0;
    for (i = 0; i < 2; i++) {
        if (sg->notify_pipe[i] >= 0)
            close(sg->notify_pipe[i]);
        if (sg->stop_pipe[i] >= 0)
            close(sg->stop_pipe[i]);
        sg->notify_pipe[i] = sg->stop_pipe[i] = -1;
    }
}
