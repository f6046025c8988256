/*
 * What a commit means for a job and its submitter: the continuations
 * storage.c runs once a batch is done (see durable.h). storage.c knows
 * nothing of connections or the queue; this module answers clients,
 * queues committed jobs, fails refused ones, and counts commits.
 */
#include "config.h"
#include "durable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "batch.h"
#include "clock.h"
#include "conn.h"
#include "deps.h"
#include "flow.h"
#include "flow_ctl.h"
#include "job.h"
#include "lifecycle.h"
#include "queue.h"
#include "srv.h"
#include "storage_lease.h"

static void ack_done(struct srv *srv, struct storage_wait *w, bool ok, const char *why);

struct job *
job_from_store(struct srv *srv, const struct store_job *sj)
{
    bool ended = sj->state != STORE_LIVE;
    struct job *j;

    if (sj->state < STORE_LIVE || sj->state > STORE_DONE_EXCEPTION) {
        log_warn(&srv->log, "store: job %.*s has an unknown state %d: it is queued to run again",
                 (int)sj->handle_len, sj->handle, sj->state);
        ended = false;
    }
    j = job_new(sj->handle, sj->handle_len, sj->unique, sj->unique_len, sj->reducer,
                sj->reducer_len, sj->data, sj->data_len);
    if (j == NULL)
        return NULL;
    j->id = sj->id;
    j->seq = sj->seq;
    j->prio = (uint8_t)(sj->prio >= 0 && sj->prio < JOB_NPRIO ? sj->prio : JOB_PRIO_NORMAL);
    if (job_set_when(j, ended ? 0 : sj->when) < 0)
        goto fail;
    if ((sj->attempts > 0 || sj->first_fail != 0 || ended || sj->numerator != 0 ||
         sj->denominator != 0 || (!ended && sj->deadline_ms != 0)) &&
        job_ext(j) == NULL)
        goto fail;
    if (j->ext != NULL) {
        j->ext->deadline_ms = ended ? 0 : sj->deadline_ms;
        j->ext->attempts = sj->attempts;
        j->ext->first_fail = sj->first_fail;
        j->ext->last_fail = sj->last_fail;
        j->ext->numerator = sj->numerator;
        j->ext->denominator = sj->denominator;
        j->ext->outcome = (uint8_t)(ended ? storage_row_outcome(sj->state) : JOB_OUTCOME_NONE);
    }
    if ((ended || sj->result_len > 0) && job_set_row_text(j, sj->result, sj->result_len) < 0)
        goto fail;
    j->background = true;
    j->stored = true;
    j->unique_is_data = sj->unique_is_data;
    return j;
fail:
    job_unref(j);
    return NULL;
}

int
durable_replay(const struct store_job *sj, void *arg)
{
    struct srv *srv = arg;
    struct func *f = queue_func(&srv->queue, sj->func, sj->func_len, true);
    struct job *j;
    bool ended;

    if (f == NULL || (j = job_from_store(srv, sj)) == NULL)
        return -1;
    ended = j->ext != NULL && j->ext->outcome != JOB_OUTCOME_NONE;
    /* A live job with stored edges waits, held, until deps_replayed decides. */
    if (queue_add_as(&srv->queue, f, j, clock_now(), ended || deps_replay_held(srv, j)) < 0) {
        job_unref(j);
        return -1;
    }
    if (j->held)
        queue_hold_deadline(&srv->queue, j); /* a held child expires held, too */
    stats_queued(srv, j); /* before the dead set's trim or the kept results may drop it */
    batch_replay_job(srv, j);
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
    if (sf->flow_len > 0) {
        char line[FLOW_SPEC_MAX];

        snprintf(line, sizeof(line), "%.*s", (int)sf->flow_len, sf->flow);
        flow_ctl_replay(srv, f, line);
    }
    f->max_age = sf->max_age;
    f->unique_for = sf->unique_for;
    return 0;
}

/* A batch is done: the server's counters. */
static void
committed(struct srv *srv, const struct storage_commit *sc)
{
    srv->stats.store_failing = !sc->ok;
    srv->stats.pg_lease_lost += sc->nlost;
    if (sc->ok) {
        srv->stats.commits++;
        stats_observe(&srv->stats.batch_ops, false, sc->nops);
        stats_observe(&srv->stats.commit_ms, true, sc->ms);
    } else {
        srv->stats.commit_errors++;
        snprintf(srv->stats.store_error, sizeof(srv->stats.store_error), "%.100s", sc->why);
    }
}

static const struct storage_hooks durable_hooks = {
    .replay = durable_replay,
    .replay_func = replay_func,
    .replay_dep = deps_replay_edge,
    .replay_batch = batch_replay_row,
    .replay_member = batch_replay_member,
    .committed = committed,
};

int
durable_open(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    size_t before = srv->queue.njobs;

    if (storage_open(srv, &durable_hooks) < 0)
        return -1;
    batch_replayed(srv);
    if (sg->durable)
        log_notice(&srv->log, "store %s: replayed %zu jobs", sg->ops->name,
                   srv->queue.njobs - before);
    deps_replayed(srv);
    srv_epoch_arm(srv);
    return sg->shared ? storage_lease_open(srv) : 0;
}

void
durable_close(struct srv *srv)
{
    if (srv->storage.ops == NULL)
        return;
    storage_lease_close(srv);
    storage_close(srv);
}

/*
 * An answer, with room for an error of extra bytes behind it: one
 * allocation, so that an answer is either whole or not made at all.
 */
static struct ack *
ack_alloc(struct srv *srv, const char *what, size_t extra)
{
    return storage_alloc(srv, what, sizeof(struct ack) + extra);
}

/* Queue a's answer for c, in the open batch and in c's list. */
static void
ack_link(struct srv *srv, struct ack *a, struct conn *c, struct job *j, struct store_op *op)
{
    a->w.done = ack_done;
    a->w.op = op;
    a->job = j ? job_ref(j) : NULL;
    a->client = c;
    if (c != NULL) { /* NULL: a job the server submits itself (schedule.c) */
        TAILQ_INSERT_TAIL(&c->acks, a, by_client);
        c->nacks++;
    }
    storage_wait(srv, &a->w);
}

void
durable_refuse(struct srv *srv, struct conn *c, const char *code, const char *text)
{
    size_t clen = strlen(code), tlen = strlen(text);
    struct ack *a;

    if (c == NULL)
        return; /* nobody to tell */
    if (c->nacks == 0) {
        conn_send_error(c, code, "%s", text);
        return;
    }
    a = ack_alloc(srv, "error", clen + 1 + tlen);
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
}

void
durable_reply(struct srv *srv, struct conn *c, const char *text)
{
    size_t len = strlen(text);
    struct ack *a;

    if (!srv->storage.durable || (a = ack_alloc(srv, "reply", len + 1)) == NULL) {
        conn_printf(c, "%s", text);
        return;
    }
    a->error = (char *)(a + 1);
    memcpy(a->error, text, len + 1);
    a->error_len = len;
    a->text = true;
    ack_link(srv, a, c, NULL, NULL);
}

void
durable_reply_op(struct srv *srv, struct conn *c, struct store_op *op, const char *none,
                 const char *tail)
{
    size_t nlen = strlen(none), tlen = strlen(tail);
    struct ack *a = ack_alloc(srv, "reply", nlen + tlen + 2);

    if (a == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    a->error = (char *)(a + 1);
    memcpy(a->error, none, nlen + 1);
    memcpy(a->error + nlen + 1, tail, tlen + 1);
    a->error_len = nlen;
    a->text = true;
    a->from_op = true;
    ack_link(srv, a, c, NULL, op);
}

void
durable_submit(struct srv *srv, struct conn *c, struct job *j, bool existing)
{
    struct store_op *op = NULL;
    struct ack *a;

    if (existing && j->refused) {
        durable_refuse(srv, c, "STORE_ERROR", "job not stored");
        return;
    }
    /*
     * Everything that can fail comes before the job enters the batch: a
     * job in the batch is stored and runs (after a restart, at the
     * latest), so its submitter must not be told "out of memory".
     */
    a = ack_alloc(srv, "ack", 0);
    if (a != NULL && !existing) {
        op = storage_op_add(srv, j);
        if (op == NULL || queue_add_as(&srv->queue, j->func, j, clock_now(), true) < 0) {
            free(op);
            free(a);
            a = NULL;
        }
    }
    if (a == NULL) {
        if (!existing)
            job_unref(j);
        durable_refuse(srv, c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    if (!existing) {
        j->stored = true;
        if (srv->storage.shared)
            op->sj.leased = !j->held && storage_lease_runs_here(srv, j); /* a child: held there */
        storage_add(srv, op);
        srv->next_job_id++;
    }
    ack_link(srv, a, c, j, op);
}

void
durable_adopt(struct srv *srv, struct conn *c, struct job *j)
{
    struct ack *a = ack_alloc(srv, "ack", 0);
    struct store_op *op;

    j->background = true; /* what storage_op_add stores; undone below if it cannot be */
    op = a != NULL ? storage_op_add(srv, j) : NULL;
    if (op == NULL) {
        j->background = false;
        free(a);
        durable_refuse(srv, c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    j->stored = true;
    if (srv->storage.shared)
        op->sj.leased = true; /* it is here already, queued or running */
    storage_add(srv, op);
    ack_link(srv, a, c, j, op);
}

void
durable_hold(struct srv *srv, struct conn *worker)
{
    struct ack *a;

    if (worker->state != CONN_ACTIVE)
        return;
    a = ack_alloc(srv, "ack", 0);
    if (a == NULL)
        return;
    a->holds = true;
    worker->nholds++;
    ack_link(srv, a, worker, NULL, NULL); /* an answer of nothing */
}

void
durable_end(struct srv *srv, struct conn *worker, bool lazy)
{
    struct ack *a, *last;
    bool held = false;

    if (worker->state != CONN_ACTIVE)
        return;
    a = ack_alloc(srv, "ack", 0);
    if (a == NULL) {
        durable_hold(srv, worker);
        return;
    }
    /* Its last end is not durable yet: that end's note holds it until it is. */
    TAILQ_FOREACH_REVERSE (last, &worker->acks, ack_list, by_client)
        if (last->end && !last->holds) {
            last->holds = true;
            worker->nacks++;
            worker->nholds++;
            held = true;
            break;
        }
    a->w.done = ack_done;
    a->end = true;
    a->client = worker;
    TAILQ_INSERT_TAIL(&worker->acks, a, by_client);
    worker->nends++;
    /* Held, the worker waits for the last end's batch: hurry it (this one goes with it or next). */
    if (lazy && !held)
        storage_wait_lazy(srv, &a->w);
    else
        storage_wait(srv, &a->w);
}

void
durable_tell(struct srv *srv, struct conn *c, uint32_t type, unsigned nargs,
             const void *const *args, const size_t *lens)
{
    size_t len1 = nargs > 1 ? lens[1] : 0;
    struct ack *a = c->state == CONN_ACTIVE ? ack_alloc(srv, "ack", lens[0] + len1) : NULL;

    if (a == NULL) {
        conn_send(c, type, nargs, args, lens);
        return;
    }
    a->packet = type;
    a->nargs = nargs > 1 ? 2 : 1;
    a->error = (char *)(a + 1);
    memcpy(a->error, args[0], lens[0]);
    if (len1 > 0)
        memcpy(a->error + lens[0], args[1], len1);
    a->split = lens[0];
    a->error_len = lens[0] + len1;
    ack_link(srv, a, c, NULL, NULL);
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

/* What the commit means for a's job (still pending): queued, handed off, or refused. */
static bool
ack_commit_job(struct srv *srv, struct ack *a, bool ok, const char *err)
{
    struct store_op *op = a->w.op;
    struct job *j = a->job;
    const char *peer = a->client != NULL ? a->client->peer : NULL;

    if (ok && op != NULL && srv->storage.shared && !op->sj.leased) {
        /* In the shared table for any server (or coalesced onto a job there). */
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", peer, j,
                      op->alias[0] != '\0' ? "coalesced in the store" : "left to any server");
        shared_hand_off(srv, j, op->alias);
    } else if (ok && op != NULL && srv->storage.shared && op->alias[0] != '\0') {
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", peer, j, "coalesced in the store");
        shared_hand_off(srv, j, op->alias);
    } else if (ok && deps_committed(srv, j)) {
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", peer, j, "held: it waits for other jobs");
    } else if (ok && queue_commit(&srv->queue, j, clock_now()) == 0) {
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
    return ok;
}

/* Answer one submitter after the commit: ok says whether it succeeded. */
static void
ack_resolve(struct srv *srv, struct ack *a, bool ok, const char *err)
{
    struct job *j = a->job;

    if (j != NULL && j->state == JOB_PENDING)
        ok = ack_commit_job(srv, a, ok, err);
    else if (j != NULL && j->refused)
        ok = false;
    if (a->client == NULL)
        return;
    if (a->text) {
        char why[200];
        size_t i;

        if (ok && a->from_op) {
            const struct store_op *op = a->w.op;

            if (op->text_len > 0)
                conn_write(a->client, op->text, op->text_len);
            else
                conn_printf(a->client, "%s", a->error);
            conn_printf(a->client, "%s", a->error + a->error_len + 1);
            return;
        }
        if (ok) {
            conn_printf(a->client, "%s", a->error);
            return;
        }
        snprintf(why, sizeof(why), "not stored: %s", err);
        for (i = 0; why[i] != '\0'; i++)
            if (why[i] == ' ' || why[i] == '\r' || why[i] == '\n')
                why[i] = '+';
        conn_printf(a->client, "ERR STORE_ERROR %s\r\n", why);
        return;
    }
    if (a->packet != 0) {
        const void *args[2] = {a->error, a->error + a->split};
        size_t lens[2] = {a->split, a->error_len - a->split};

        conn_send(a->client, (enum packet_type)a->packet, a->nargs, args, lens);
        return;
    }
    if (j == NULL && a->error == NULL)
        return; /* durable_hold's: nothing to send */
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
 * An answer's continuation: its batch is done (or, with why NULL, the
 * store closed first and nobody is told). A send never closes a
 * connection, so c stays as it is until conn_resume.
 */
static void
ack_done(struct srv *srv, struct storage_wait *w, bool ok, const char *why)
{
    struct ack *a = (struct ack *)w;
    struct conn *c = a->client;
    bool held = !a->end || a->holds; /* its connection waited for it */

    if ((a->end || a->packet != 0) && why != NULL && !ok) {
        storage_wait(srv, w); /* the end goes again in the open batch: so does what waits for it */
        return;
    }
    if (why != NULL && !a->end)
        ack_resolve(srv, a, ok, why);
    if (c != NULL) {
        TAILQ_REMOVE(&c->acks, a, by_client);
        if (a->end)
            c->nends--;
        if (held)
            c->nacks--;
        if (a->holds)
            c->nholds--;
    }
    job_unref(a->job);
    free(a); /* a->error is part of it */
    if (c != NULL && c->nholds == 0)
        c->grab_due = false; /* its next hold waits again */
    if (c != NULL && c->nholds == 0 && c->grab_ev != NULL)
        evtimer_del(c->grab_ev);
    /*
     * Its hold is over: a worker that went to sleep meanwhile sleeps now, or
     * hears of work, before the answers to what it sent after PRE_SLEEP.
     */
    if (why != NULL && c != NULL && c->nholds == 0 && c->hold_slept && c->state == CONN_ACTIVE) {
        c->hold_slept = false;
        lifecycle_pre_sleep(c);
    }
    /* Its last answer is out: what it sent meanwhile can be read now. */
    if (why != NULL && c != NULL && c->nacks == 0 && held)
        conn_resume(c);
}

void
durable_forget_client(struct conn *c)
{
    struct ack *a;

    while ((a = TAILQ_FIRST(&c->acks)) != NULL) {
        TAILQ_REMOVE(&c->acks, a, by_client);
        a->client = NULL; /* the job still commits; nobody is told */
    }
    c->nacks = 0;
    c->nends = 0;
    c->nholds = 0;
    c->hold_slept = false;
    c->grab_due = false;
    if (c->grab_ev != NULL) {
        event_free(c->grab_ev);
        c->grab_ev = NULL;
    }
}

bool
durable_held(const struct conn *c)
{
    return c->nholds > 0;
}

/* --store-grab-wait ran out for a held worker's GRAB_JOB: it gets NO_JOB now. */
static void
grab_wait_cb(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    (void)fd;
    (void)what;
    c->grab_due = true;
    conn_resume(c);
}

/* Whether a held worker's GRAB_JOB or PRE_SLEEP waits: until the commit or --store-grab-wait. */
static bool
grab_waits(struct conn *c)
{
    unsigned ms = c->srv->cfg.store_grab_wait_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    if (c->grab_due || ms == 0)
        return false;
    if (c->grab_ev == NULL)
        c->grab_ev = evtimer_new(c->srv->base, grab_wait_cb, c);
    if (c->grab_ev == NULL)
        return false; /* without memory for the timer, at once */
    if (!evtimer_pending(c->grab_ev, NULL))
        evtimer_add(c->grab_ev, &tv);
    return true;
}

bool
durable_must_wait(struct conn *c, uint32_t type)
{
    if (c->nacks == 0)
        return false;
    switch (type) {
    case PACKET_GRAB_JOB:
    case PACKET_GRAB_JOB_UNIQ:
    case PACKET_GRAB_JOB_ALL:
    case PACKET_PRE_SLEEP:
        /* A hold owes no answer: the grab is answered NO_JOB (dispatch.c) past the wait. */
        return c->nacks > c->nholds || grab_waits(c);
    case PACKET_SUBMIT_JOB_BG:
    case PACKET_SUBMIT_JOB_HIGH_BG:
    case PACKET_SUBMIT_JOB_LOW_BG:
    case PACKET_SUBMIT_JOB_EPOCH:
    case PACKET_SUBMIT_REDUCE_JOB_BACKGROUND:
        return false; /* answered in order through the same batch */
    default: return true;
    }
}
