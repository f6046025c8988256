/*
 * The PostgreSQL lease protocol, on a store several servers share: this
 * server runs a job only under its lease. It sits above storage.c, as a
 * user of it: its lease op (one per batch at most, added just before a
 * batch is handed over) takes ready jobs for the functions whose workers
 * here lack them, and every third of --pg-lease it renews the leases held
 * and lists them, so that a queued job whose lease another server took
 * meanwhile is dropped here, not run twice. The op's continuation queues
 * what it took. A notifier thread waits in the backend's LISTEN for other
 * servers' NOTIFY.
 */
#include "config.h"
#include "storage_lease.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "clock.h"
#include "durable.h"
#include "flow.h"
#include "flow_ctl.h"
#include "job.h"
#include "lifecycle.h"
#include "queue.h"
#include "srv.h"

#define STORAGE_EXPIRY_SLACK_MS 20 /* a lease that ran out or a job due is taken this long after */

static void shared_leased(struct srv *srv, struct store_op *op, bool ok);

_Static_assert(sizeof(((struct store_flow_cap *)0)->sep) == FLOW_SEP_MAX,
               "store_flow_cap.sep holds a flow_conf.sep");

/* Whether f's flow settings hold across the servers: a take of it goes through the shared row. */
static bool
flow_limited(const struct flow_conf *c)
{
    return c->paused || c->concurrency > 0 || c->rate > 0 || c->sequence != FLOW_SEQ_OFF ||
           c->key_concurrency > 0 || c->key_rate > 0;
}

/* f's flow settings as a stored row holds them ("" for none) into buf; their length. */
static size_t
func_line(const struct func *f, char *buf, size_t len)
{
    buf[0] = '\0';
    if (f->flow != NULL)
        flow_format(&f->flow->conf, buf, len);
    return strlen(buf);
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

    if (f->flow != NULL && flow_limited(&f->flow->conf)) {
        /*
         * A lease counts as running across the servers, and a job taken
         * took a token: take only what idle workers start now, never a
         * prefetch, and nothing while paused.
         */
        const struct flow_conf *c = &f->flow->conf;

        if (c->paused)
            return 0;
        if (c->concurrency > 0)
            idle = c->concurrency > f->nrunning
                       ? (c->concurrency - f->nrunning < idle ? c->concurrency - f->nrunning : idle)
                       : 0;
        return f->nworkers > 0 && idle > have ? idle - have : 0;
    }
    if (f->nworkers == 0 || have * 2 > target)
        return 0;
    return target - have;
}

/* The lease op's own take covers a job left to any server too, once it is due. */
bool
storage_lease_runs_here(struct srv *srv, const struct job *j)
{
    /* A limited function's jobs are all taken through its shared row, never leased at insert. */
    if (j->func->flow != NULL && flow_limited(&j->func->flow->conf))
        return false;
    return job_when(j) <= clock_now() && func_wants(&srv->storage, j->func) > 0;
}

void
storage_want_lease(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (!sg->shared)
        return;
    sg->want_lease = true;
    storage_kick(srv);
}

/*
 * Before a batch is handed over: put a lease op in it, if one was asked
 * for and none is in flight: what each function's workers here want, and
 * a renew if due.
 */
static void
shared_lease_op(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct store_op *op;
    struct func *f;
    size_t nf = 0, bytes = 0, stray_bytes, i, ncaps = 0;
    bool rf = sg->flow_due || sg->renew_due; /* the op reads the stored settings */
    char *at, line[FLOW_SPEC_MAX];

    if (!sg->want_lease || sg->lease_inflight)
        return;
    sg->want_lease = false;
    TAILQ_FOREACH (f, &srv->queue.func_order, order) {
        if (func_wants(sg, f) > 0) {
            nf++;
            bytes += f->name_len + 1;
            ncaps += f->flow != NULL && flow_limited(&f->flow->conf);
            if (rf)
                bytes += func_line(f, line, sizeof(line)) + 1;
        }
    }
    for (i = 0, at = sg->strays; i < sg->nstrays; i++, at += strlen(at) + 1)
        ;
    stray_bytes = sg->nstrays > 0 ? (size_t)(at - sg->strays) : 0;
    if (nf == 0 && !sg->renew_due && sg->nstrays == 0 && !sg->flow_due)
        return;
    op = storage_alloc(
        srv, "op",
        sizeof(*op) + (nf + sg->nstrays + (rf ? nf : 0)) * sizeof(char *) + nf * sizeof(unsigned) +
            (ncaps > 0 ? nf * sizeof(struct store_flow_cap) : 0) + bytes + stray_bytes + 16);
    if (op == NULL) {
        log_err(&srv->log, "store: out of memory for a lease; trying with the next batch");
        sg->want_lease = true;
        return;
    }
    op->kind = STORE_OP_LEASE;
    op->done = shared_leased;
    {
        /* buf: the name and stray pointers, the limits, the names, then the strays. */
        char *base = op->buf + (8 - ((uintptr_t)op->buf & 7)) % 8;
        const char **names = (const char **)(void *)base;
        const char **strays = names + nf;
        const char **lines = strays + sg->nstrays; /* nf of them with rf, else none */
        unsigned *limits = (unsigned *)(void *)(lines + (rf ? nf : 0));
        struct store_flow_cap *caps = (struct store_flow_cap *)(void *)(limits + nf);
        const char *h = sg->strays;

        at = ncaps > 0 ? (char *)(caps + nf) : (char *)(limits + nf);
        i = 0;
        TAILQ_FOREACH (f, &srv->queue.func_order, order) {
            unsigned want = func_wants(sg, f);

            if (want == 0)
                continue;
            memcpy(at, f->name, f->name_len + 1);
            names[i] = at;
            if (ncaps > 0) {
                const struct flow_conf *c = f->flow != NULL ? &f->flow->conf : NULL;

                memset(&caps[i], 0, sizeof(caps[i]));
                if (c != NULL && flow_limited(c)) {
                    caps[i].concurrency = c->concurrency;
                    caps[i].rate = c->rate;
                    caps[i].period_ms = c->period_ms;
                    caps[i].burst = c->burst;
                    caps[i].sequence = c->sequence;
                    caps[i].key_concurrency = c->key_concurrency;
                    caps[i].key_rate = c->key_rate;
                    caps[i].key_period_ms = c->key_period_ms;
                    caps[i].key_burst = c->key_burst;
                    memcpy(caps[i].sep, c->sep, sizeof(caps[i].sep));
                }
            }
            at += f->name_len + 1;
            if (rf) {
                size_t len = func_line(f, line, sizeof(line));

                memcpy(at, line, len + 1);
                lines[i] = at;
                at += len + 1;
            }
            limits[i++] = want;
        }
        op->ls.caps = ncaps > 0 ? caps : NULL;
        op->ls.lines = rf ? lines : NULL;
        op->ls.funcs = names;
        op->ls.limits = limits;
        op->ls.nfuncs = nf;
        op->ls.take_max = srv->cfg.pg_take_max;
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
    sg->lease_op_ms =
        clock_now_ms(); /* the renew's now() is later: its leases outlast this + lease */
    /* The stored flow settings are read at a NOTIFY flow and at each renewal. */
    op->ls.read_flow = rf;
    op->ls.flow_gen = sg->flow_gen;
    sg->flow_due = false;
    sg->renew_due = false;
    sg->lease_inflight = true;
    storage_add(srv, op);
}

/* Orders store_job pointers by handle, for qsort and bsearch. */
static int
cmp_sj_handles(const void *a, const void *b)
{
    const struct store_job *x = *(const struct store_job *const *)a;
    const struct store_job *y = *(const struct store_job *const *)b;
    size_t n = x->handle_len < y->handle_len ? x->handle_len : y->handle_len;
    int c = memcmp(x->handle, y->handle, n);

    return c != 0 ? c : (x->handle_len > y->handle_len) - (x->handle_len < y->handle_len);
}

/*
 * Whether op is a job's row change that a renewal may not have seen: an
 * add or a revive (a dead job retried by hand), which make the row live
 * and this server's; with removes (strays), any rewrite or remove too. A
 * plain rewrite (a requeue, a new priority) makes no row this server's:
 * its update finds another server's row and is lost, so it keeps no job
 * from being dropped.
 */
static bool
row_change(const struct store_op *op, bool removes)
{
    return op->sj.handle != NULL && op->sj.handle_len > 0 &&
           (op->kind == STORE_OP_ADD || (op->kind == STORE_OP_UPDATE && (op->revives || removes)) ||
            (removes && op->kind == STORE_OP_REMOVE));
}

/*
 * The rows of the open batch's row changes (row_change), sorted by handle,
 * into *out (NULL and 0 when none; -1 when out of memory). Run in a lease
 * op's continuation, when the open batch holds exactly the changes made
 * after the renew's batch was handed over (and those of its batch that
 * failed, put back): the renew saw none of them. A job of this server's
 * that came back to its queue meanwhile (a dead job retried by hand, a
 * submit adopted) has its row made live and this server's there.
 */
static int
open_rewrites(struct srv *srv, bool removes, const struct store_job ***out, size_t *n)
{
    const struct store_op *op;
    const struct store_job **sjs;
    size_t k = 0;

    *out = NULL;
    *n = 0;
    for (op = srv->storage.open.ops; op != NULL; op = op->next)
        k += row_change(op, removes);
    if (k == 0)
        return 0;
    if ((sjs = malloc(k * sizeof(*sjs))) == NULL)
        return -1;
    for (op = srv->storage.open.ops; op != NULL; op = op->next)
        if (row_change(op, removes))
            sjs[(*n)++] = &op->sj;
    qsort(sjs, *n, sizeof(*sjs), cmp_sj_handles);
    *out = sjs;
    return 0;
}

/* Whether handle h (NUL-terminated) is among pending (open_rewrites). */
static bool
pending_has(const struct store_job **pending, size_t npending, const char *h)
{
    struct store_job probe = {.handle = h, .handle_len = strlen(h)};
    const struct store_job *key = &probe;

    return npending > 0 &&
           bsearch(&key, pending, npending, sizeof(*pending), cmp_sj_handles) != NULL;
}

/*
 * Drop queued jobs whose lease this server no longer holds (held: those it
 * does), but not one whose row the open batch makes live or this server's:
 * the renew, in an earlier batch, did not see that yet (the next one does).
 */
static void
shared_drop_lost(struct srv *srv, const struct store_lease *ls)
{
    const char **held = malloc((ls->nheld + 1) * sizeof(*held));
    const char *h = ls->held;
    const struct store_job **pending;
    struct func *f;
    size_t i, npending;

    if (held == NULL || open_rewrites(srv, false, &pending, &npending) < 0) {
        free(held);
        return; /* the next renew checks again */
    }
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
                    bsearch(&key, held, ls->nheld, sizeof(*held), store_cmp_strs) != NULL ||
                    pending_has(pending, npending, key))
                    continue;
                srv->stats.pg_dropped++;
                LIFECYCLE_LOG(srv, DSJOB_LOG_NOTICE, "dropped", NULL, j,
                              "another server took it: this one's lease ran out");
                j->stored = false;
                queue_remove(&srv->queue, j);
            }
        }
    }
    free(pending);
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
 * up; nor one whose row the open batch changes (the renew did not see
 * that change: its row may be made this server's, or go).
 */
static void
shared_find_strays(struct srv *srv, const struct store_lease *ls)
{
    struct storage *sg = &srv->storage;
    const char *h = ls->held;
    const struct store_job **pending;
    size_t i, n = 0, bytes = 0, npending;
    char *at;

    if (open_rewrites(srv, true, &pending, &npending) < 0)
        return; /* the next renew finds them again */
    for (i = 0; i < ls->nheld; i++, h += strlen(h) + 1)
        if (queue_find_job(&srv->queue, h, strlen(h)) == NULL &&
            !pending_has(pending, npending, h)) {
            n++;
            bytes += strlen(h) + 1;
        }
    if (n == 0 || (at = malloc(bytes)) == NULL) {
        free(pending);
        return; /* none, or the next renew finds them again */
    }
    free(sg->strays);
    sg->strays = at;
    sg->nstrays = n;
    for (i = 0, h = ls->held; i < ls->nheld; i++, h += strlen(h) + 1)
        if (queue_find_job(&srv->queue, h, strlen(h)) == NULL &&
            !pending_has(pending, npending, h)) {
            memcpy(at, h, strlen(h) + 1);
            at += strlen(h) + 1;
        }
    free(pending);
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

/* Two thirds of --pg-lease, in ms: how long after a renewal began the leases surely hold. */
static int64_t
fresh_ms(const struct srv *srv)
{
    return (int64_t)srv->cfg.pg_lease * 2000 / 3;
}

/*
 * A renewal committed (after shared_drop_lost): the jobs still queued are
 * under this server's lease again; if grabs were refused meanwhile, wake
 * the workers for them.
 */
static void
shared_refreshed(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    bool was_stale = clock_now_ms() >= sg->lease_fresh_ms;
    struct func *f;

    sg->lease_fresh_ms = sg->lease_op_ms + fresh_ms(srv);
    if (!was_stale)
        return;
    TAILQ_FOREACH (f, &srv->queue.func_order, order) {
        int p;

        for (p = 0; p < JOB_NPRIO; p++) {
            struct job *j;

            TAILQ_FOREACH (j, &f->jobs[p], link)
                lifecycle_wake(j);
        }
    }
}

bool
storage_lease_fresh(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (!sg->shared || !sg->lease_opened || clock_now_ms() < sg->lease_fresh_ms)
        return true;
    sg->renew_due = true;
    storage_want_lease(srv);
    return false;
}

struct job *
storage_lease_grab(struct srv *srv, struct qworker *w, int64_t now)
{
    /* A job that is not stored needs no lease: it runs whatever the store's state. */
    return storage_lease_fresh(srv) ? queue_grab(&srv->queue, w, now)
                                    : queue_grab_unstored(&srv->queue, w, now);
}

bool
storage_lease_has_work(struct srv *srv, const struct qworker *w)
{
    return storage_lease_fresh(srv) ? queue_has_work(&srv->queue, w)
                                    : queue_has_unstored_work(&srv->queue, w);
}

/*
 * On the loop, the lease op's continuation: if it committed, queue what it
 * took and check what it renewed; if its batch failed, ask again with the
 * next one.
 */
static void
shared_leased(struct srv *srv, struct store_op *op, bool ok)
{
    struct storage *sg = &srv->storage;
    struct store_lease *ls = &op->ls;
    unsigned asked = 0;
    size_t i;

    sg->lease_inflight = false;
    if (!ok) {
        sg->want_lease = true; /* asked again with the next batch */
        sg->flow_due = sg->flow_due || ls->read_flow;
        sg->renew_due = sg->renew_due || ls->renew;
        return;
    }
    /* Settings changed here since the op was made are newer than what it read. */
    if (ls->flows_read && ls->flow_gen == sg->flow_gen) {
        flow_ctl_sync(srv, ls->flows, ls->nflows);
        /* A function this op skipped (its stored settings were newer) is taken now. */
        if (ls->lines != NULL)
            storage_want_lease(srv);
    }
    if (ls->renewed)
        shared_drop_lost(srv, ls);
    if (ls->renewed)
        shared_waiting(srv, ls);
    if (ls->renewed)
        shared_refreshed(srv);
    for (i = 0; i < ls->nfuncs; i++)
        asked += ls->limits[i];
    for (i = 0; i < ls->njobs; i++) {
        const struct store_job *sj = &ls->jobs[i];
        struct func *f;
        struct job *j;

        if (queue_find_job(&srv->queue, sj->handle, sj->handle_len) != NULL)
            continue; /* still here from an earlier lease of this server's */
        f = queue_func(&srv->queue, sj->func, sj->func_len, true);
        j = f != NULL ? job_from_store(srv, sj) : NULL;
        if (j == NULL) {
            log_err(&srv->log,
                    "store: out of memory for job %.*s: another server runs it when "
                    "this one's lease runs out",
                    (int)sj->handle_len, sj->handle);
            continue;
        }
        j->id = srv->next_job_id++;
        j->seq = srv->next_seq++;
        if (job_set_when(j, 0) < 0 || /* due: the table's clock said so */
            queue_add_as(&srv->queue, f, j, clock_now(), false) < 0) {
            job_unref(j);
            continue;
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
                durable_replay(&ls->ended[i], srv) == 0)
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
    if (ls->due_ms >= 0 || ls->token_ms >= 0) {
        /* An epoch job or a retry's backoff, or a token: taken when due, not at a poll. */
        int64_t ms = ls->due_ms;

        if (ls->token_ms >= 0 && (ms < 0 || ls->token_ms < ms))
            ms = ls->token_ms;
        shared_arm(sg->due_ev, ms);
    }
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
    struct srv *srv = arg;
    char buf[64];
    ssize_t n, i;

    (void)what;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        for (i = 0; i < n; i++)
            if (buf[i] == 2) /* a server changed flow settings */
                srv->storage.flow_due = true;
    storage_want_lease(srv);
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
        char byte = (char)rc; /* 1: jobs; 2: flow settings too */

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

int
storage_lease_open(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    unsigned renew_ms = srv->cfg.pg_lease * 1000 / 3;
    struct timeval poll_tv = {srv->cfg.pg_poll_ms / 1000, (srv->cfg.pg_poll_ms % 1000) * 1000};
    struct timeval renew_tv = {renew_ms / 1000, (renew_ms % 1000) * 1000};

    sg->lease_opened = true;
    sg->notify_pipe[0] = sg->notify_pipe[1] = -1;
    sg->stop_pipe[0] = sg->stop_pipe[1] = -1;
    sg->prefetch = srv->cfg.pg_prefetch;
    sg->before_flush = shared_lease_op;
    /* A job taken from now on is leased until now + --pg-lease at least. */
    sg->lease_fresh_ms = clock_now_ms() + fresh_ms(srv);
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

void
storage_lease_close(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    int i;

    if (!sg->lease_opened)
        return;
    sg->lease_opened = false;
    sg->before_flush = NULL;
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
