/*
 * Persistence glue. The store backend only keeps bytes; this module decides
 * when: a background job is added to the open batch when it is submitted,
 * and the batch is committed once per loop turn (an event made active at
 * the first add runs after the turn's other callbacks), after
 * --store-commit-interval milliseconds if one is set, or at once when
 * --store-batch answers are waiting. Only then are the batch's jobs queued
 * and their submitters told JOB_CREATED, in the order they asked. If the
 * commit fails (a full disk), the batch's submitters get an ERROR and its
 * jobs are dropped; nothing stored before is touched, and the next batch
 * tries again.
 */
#include "config.h"
#include "storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "conn.h"
#include "dispatch.h"
#include "job.h"
#include "queue.h"
#include "srv.h"

#define STORAGE_RETRY_SECS 1 /* a failed commit is tried again this soon */

static void flush_cb(evutil_socket_t fd, short what, void *arg);

static void
to_store_job(const struct job *j, struct store_job *sj)
{
    memset(sj, 0, sizeof(*sj));
    sj->id = j->id;
    sj->seq = j->seq;
    sj->handle = job_handle(j);
    sj->handle_len = j->handle_len;
    sj->func = j->func->name;
    sj->func_len = j->func->name_len;
    sj->unique = job_unique(j);
    sj->unique_len = j->unique_len;
    sj->reducer = job_reducer(j);
    sj->reducer_len = j->reducer_len;
    sj->data = job_data(j);
    sj->data_len = j->data_len;
    sj->prio = j->prio;
    sj->when = j->when;
    sj->unique_is_data = j->unique_is_data;
}

/* Put one replayed job back in its queue, with its handle and order. */
static int
replay_one(const struct store_job *sj, void *arg)
{
    struct srv *srv = arg;
    struct func *f = queue_func(&srv->queue, sj->func, sj->func_len, true);
    struct job *j;

    if (f == NULL)
        return -1;
    j = job_new(sj->handle, sj->handle_len, sj->unique, sj->unique_len, sj->reducer,
                sj->reducer_len, sj->data, sj->data_len);
    if (j == NULL)
        return -1;
    j->id = sj->id;
    j->seq = sj->seq;
    j->prio = (uint8_t)(sj->prio >= 0 && sj->prio < JOB_NPRIO ? sj->prio : JOB_PRIO_NORMAL);
    j->when = sj->when;
    j->background = true;
    j->stored = true;
    j->unique_is_data = sj->unique_is_data;
    if (queue_add(&srv->queue, f, j, srv_now()) < 0) {
        job_unref(j);
        return -1;
    }
    if (sj->id >= srv->next_job_id)
        srv->next_job_id = sj->id + 1;
    if (sj->seq >= srv->next_seq)
        srv->next_seq = sj->seq + 1;
    return 0;
}

int
storage_open(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct store_config scfg;
    char err[STORE_ERRLEN] = "";
    size_t before = srv->queue.njobs;

    TAILQ_INIT(&sg->acks);
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
    if (sg->ops->open(&sg->st, &scfg, err) != DSJOB_OK) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "%s", err);
        sg->ops = NULL;
        return -1;
    }
    sg->durable = sg->ops != &store_null_ops;
    sg->batch_max = srv->cfg.store_batch ? srv->cfg.store_batch : 1;
    sg->interval_ms = srv->cfg.store_commit_interval_ms;
    sg->flush_ev = evtimer_new(srv->base, flush_cb, srv);
    if (sg->flush_ev == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the store's event");
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
    return 0;
}

static void
schedule(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (sg->nacks >= sg->batch_max) {
        storage_flush(srv);
        return;
    }
    if (sg->scheduled)
        return;
    sg->scheduled = true;
    if (sg->interval_ms > 0) {
        struct timeval tv = {sg->interval_ms / 1000, (sg->interval_ms % 1000) * 1000};

        evtimer_add(sg->flush_ev, &tv);
    } else {
        event_active(sg->flush_ev, EV_TIMEOUT, 0);
    }
}

static struct ack *
ack_new(struct srv *srv, struct conn *c, struct job *j)
{
    struct ack *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->job = j ? job_ref(j) : NULL;
    a->client = c;
    TAILQ_INSERT_TAIL(&srv->storage.acks, a, link);
    TAILQ_INSERT_TAIL(&c->acks, a, by_client);
    srv->storage.nacks++;
    c->nacks++;
    return a;
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
    a = ack_new(srv, c, NULL);
    if (a == NULL || (a->error = malloc(clen + 1 + tlen)) == NULL) {
        conn_send_error(c, code, "%s", text); /* out of memory: order matters less */
        return;
    }
    memcpy(a->error, code, clen);
    a->error[clen] = '\0';
    memcpy(a->error + clen + 1, text, tlen);
    a->error_len = clen + 1 + tlen;
    schedule(srv);
}

void
storage_submit(struct srv *srv, struct conn *c, struct job *j, bool existing)
{
    struct storage *sg = &srv->storage;
    struct store_job sj;
    char err[STORE_ERRLEN] = "";

    if (!existing) {
        to_store_job(j, &sj);
        if (sg->ops->add(sg->st, &sj, err) != DSJOB_OK) {
            log_err(&srv->log, "store: cannot add job %s: %s", job_handle(j), err);
            job_unref(j);
            storage_refuse(srv, c, "STORE_ERROR", err);
            return;
        }
        j->stored = true;
        if (queue_add_as(&srv->queue, j->func, j, srv_now(), true) < 0) {
            sg->ops->remove(sg->st, j->id, err);
            job_unref(j);
            storage_refuse(srv, c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
            return;
        }
        srv->next_job_id++;
    }
    if (ack_new(srv, c, j) == NULL) {
        conn_send_error(c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    schedule(srv);
}

void
storage_remove(struct srv *srv, struct job *j)
{
    struct storage *sg = &srv->storage;
    char err[STORE_ERRLEN] = "";

    if (!j->stored)
        return;
    j->stored = false;
    if (sg->ops->remove(sg->st, j->id, err) != DSJOB_OK)
        log_err(&srv->log, "store: cannot remove job %s: %s", job_handle(j), err);
    schedule(srv);
}

/* Answer one submitter after the commit: ok says whether it succeeded. */
static void
ack_resolve(struct srv *srv, struct ack *a, bool ok, const char *err)
{
    struct job *j = a->job;

    if (j != NULL && j->state == JOB_PENDING) {
        if (ok && queue_commit(&srv->queue, j, srv_now()) == 0) {
            if (j->state == JOB_SCHEDULED)
                srv_epoch_arm(srv);
            else
                dispatch_wake(j);
        } else {
            j->stored = false; /* not in the store: nothing to delete */
            dispatch_fail(srv, j);
            ok = false;
        }
    }
    if (a->client == NULL)
        return;
    if (a->error != NULL) {
        const void *args[2] = {a->error, a->error + strlen(a->error) + 1};
        size_t lens[2] = {strlen(a->error), a->error_len - strlen(a->error) - 1};

        conn_send(a->client, PACKET_ERROR, 2, args, lens);
    } else if (ok) {
        conn_send_raw(a->client, PACKET_JOB_CREATED, job_handle(j), j->handle_len);
    } else {
        conn_send_error(a->client, "STORE_ERROR", "job not stored: %s", err);
    }
}

void
storage_flush(struct srv *srv)
{
    struct storage *sg = &srv->storage;
    struct ack_list done;
    char err[STORE_ERRLEN] = "";
    struct ack *a;
    bool ok;

    if (sg->scheduled) {
        event_del(sg->flush_ev);
        sg->scheduled = false;
    }
    if (sg->ops == NULL)
        return;
    ok = sg->ops->flush(sg->st, err) == DSJOB_OK;
    if (ok) {
        sg->commits++;
    } else {
        struct timeval retry = {STORAGE_RETRY_SECS, 0};

        sg->failures++;
        log_err(&srv->log, "store: commit of %u jobs failed: %s", sg->nacks, err);
        /* Deletions of that batch are still owed: try again even if nothing new comes. */
        sg->scheduled = true;
        evtimer_add(sg->flush_ev, &retry);
    }
    /* Answers may start new batches (a resumed client submits again): take this one out first. */
    TAILQ_INIT(&done);
    TAILQ_CONCAT(&done, &sg->acks, link);
    sg->nacks = 0;
    while ((a = TAILQ_FIRST(&done)) != NULL) {
        struct conn *c = a->client;

        TAILQ_REMOVE(&done, a, link);
        ack_resolve(srv, a, ok, err);
        if (c != NULL) {
            TAILQ_REMOVE(&c->acks, a, by_client);
            c->nacks--;
        }
        job_unref(a->job);
        free(a->error);
        free(a);
        /* Its last answer is out: what it sent meanwhile can be read now. */
        if (c != NULL && c->nacks == 0)
            conn_resume(c);
    }
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

void
storage_close(struct srv *srv)
{
    struct storage *sg = &srv->storage;

    if (sg->ops == NULL)
        return;
    storage_flush(srv);
    sg->ops->close(sg->st);
    sg->ops = NULL;
    sg->st = NULL;
    if (sg->flush_ev != NULL)
        event_free(sg->flush_ev);
    sg->flush_ev = NULL;
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
    default:
        return true;
    }
}
