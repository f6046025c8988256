/*
 * Job lifecycle. A job enters the queue through a submit or a replay and
 * leaves it here: finished by its worker, failed, cancelled, or given up
 * after --job-retries. In between, this module keeps the two lists that tie
 * a job to connections (the clients waiting for it, each with a struct
 * waiter on both the job's and the client's list; the worker holding it,
 * through the queue) and the CAN_DO_TIMEOUT timer of a running job. Every
 * way a job can end goes through lifecycle_finish, so a stored job is
 * always deleted from the store, a waiter never outlives its job and a
 * graceful stop always notices its last running job.
 */
#include "config.h"
#include "lifecycle.h"

#include <stdlib.h>

#include <event2/event.h>

#include "conn.h"
#include "job.h"
#include "queue.h"
#include "srv.h"
#include "storage.h"

int
lifecycle_attach(struct conn *c, struct job *j)
{
    struct waiter *w;

    if (job_ext(j) == NULL)
        return -1;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -1;
    w->client = c;
    w->job = j;
    TAILQ_INSERT_TAIL(&j->ext->waiters, w, by_job);
    TAILQ_INSERT_TAIL(&c->waiting, w, by_client);
    return 0;
}

void
lifecycle_tell(struct job *j, enum packet_type type, unsigned nargs, const void *const *args,
               const size_t *lens)
{
    struct waiter *w;
    uint32_t gen;

    if (j->ext == NULL)
        return;
    job_ref(j);
    gen = ++j->ext->tell_gen;
    w = TAILQ_FIRST(&j->ext->waiters);
    while (w != NULL) {
        struct conn *c = w->client;

        if (w->told == gen) {
            w = TAILQ_NEXT(w, by_job);
            continue;
        }
        w->told = gen;
        conn_send(c, type, nargs, args, lens);
        /*
         * A client over --max-output-buffer is dropped inside conn_send,
         * and its waiters (w among them) are freed: start again from the
         * head, past the waiters already told. The connection itself is
         * freed only by the reaper, so c can still be looked at.
         */
        w = c->state == CONN_ACTIVE ? TAILQ_NEXT(w, by_job) : TAILQ_FIRST(&j->ext->waiters);
    }
    job_unref(j);
}

/* Forget every client waiting for j, telling them nothing. */
static void
release_waiters(struct job *j)
{
    struct waiter *w;

    if (j->ext == NULL)
        return;
    while ((w = TAILQ_FIRST(&j->ext->waiters)) != NULL) {
        TAILQ_REMOVE(&j->ext->waiters, w, by_job);
        TAILQ_REMOVE(&w->client->waiting, w, by_client);
        free(w);
    }
}

static void
stop_timer(struct job *j)
{
    if (j->ext != NULL && j->ext->timeout_ev != NULL) {
        event_free(j->ext->timeout_ev);
        j->ext->timeout_ev = NULL;
    }
}

void
lifecycle_wake(struct job *j)
{
    struct qworker *w = queue_wake_one(j->func);

    if (w != NULL)
        conn_send(conn_of_worker(w), PACKET_NOOP, 0, NULL, NULL);
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    struct job *j = arg;
    struct srv *srv = conn_of_worker(j->ext->worker)->srv;

    (void)fd;
    (void)what;
    log_notice(&srv->log, "job %s of '%s' passed its CAN_DO_TIMEOUT", job_handle(j), j->func->name);
    lifecycle_retry(srv, j, "CAN_DO_TIMEOUT expired");
}

void
lifecycle_arm_timeout(struct srv *srv, struct job *j, uint32_t timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};

    j->ext->timeout_ev = evtimer_new(srv->base, timeout_cb, j);
    if (j->ext->timeout_ev != NULL)
        evtimer_add(j->ext->timeout_ev, &tv);
}

void
lifecycle_finish(struct srv *srv, struct job *j)
{
    struct qworker *w = job_worker(j);

    stop_timer(j);
    release_waiters(j);
    if (!storage_settle(srv, j, w != NULL ? conn_of_worker(w) : NULL))
        queue_remove(&srv->queue, j);
    if (srv->draining)
        srv_check_drained(srv);
}

void
lifecycle_fail(struct srv *srv, struct job *j)
{
    const void *args[1] = {job_handle(j)};
    size_t lens[1] = {j->handle_len};

    lifecycle_tell(j, PACKET_WORK_FAIL, 1, args, lens);
    lifecycle_finish(srv, j);
}

void
lifecycle_exception(struct srv *srv, struct job *j, const void *data, size_t len)
{
    const void *args[2] = {job_handle(j), data};
    size_t lens[2] = {j->handle_len, len};
    struct waiter *w;

    if (j->ext != NULL) {
        TAILQ_FOREACH (w, &j->ext->waiters, by_job) {
            if (w->client->exceptions)
                conn_send(w->client, PACKET_WORK_EXCEPTION, 2, args, lens);
            else
                conn_send(w->client, PACKET_WORK_FAIL, 1, args, lens);
        }
    }
    lifecycle_finish(srv, j);
}

void
lifecycle_retry(struct srv *srv, struct job *j, const char *why)
{
    unsigned limit = srv->cfg.job_retries;

    stop_timer(j);
    if (j->cancelled) {
        lifecycle_fail(srv, j); /* not run again; clients that attached since hear why */
        return;
    }
    if (limit != 0 && job_attempts(j) + 1 >= limit) {
        log_warn(&srv->log, "job %s of '%s' failed after %u attempts (--job-retries %u): %s",
                 job_handle(j), j->func->name, job_attempts(j) + 1, limit, why);
        lifecycle_fail(srv, j);
        return;
    }
    log_info(&srv->log, "job %s of '%s' requeued: %s", job_handle(j), j->func->name, why);
    queue_requeue(&srv->queue, j);
    if (!j->background && !job_has_waiters(j)) {
        queue_remove(&srv->queue, j); /* nobody is left to want it */
        return;
    }
    lifecycle_wake(j);
    if (srv->draining)
        srv_check_drained(srv);
}

void
lifecycle_give_back(struct conn *c, const struct func *f, const char *why)
{
    struct job *j, *next;

    for (j = TAILQ_FIRST(&c->worker.held); j != NULL; j = next) {
        next = TAILQ_NEXT(j, link);
        if (f == NULL || j->func == f)
            lifecycle_retry(c->srv, j, why);
    }
}

void
lifecycle_detach(struct conn *c)
{
    struct srv *srv = c->srv;
    struct waiter *w;
    struct job *j;

    storage_forget_client(srv, c);
    while ((w = TAILQ_FIRST(&c->waiting)) != NULL) {
        j = w->job;
        TAILQ_REMOVE(&c->waiting, w, by_client);
        TAILQ_REMOVE(&j->ext->waiters, w, by_job);
        free(w);
        /* A foreground job nobody waits for any more is dropped before it runs. */
        if (!j->background && !job_has_waiters(j) &&
            (j->state == JOB_QUEUED || j->state == JOB_SCHEDULED))
            queue_remove(&srv->queue, j);
    }
    queue_awake(&c->worker);
    queue_reset_abilities(&srv->queue, &c->worker);
    while ((j = TAILQ_FIRST(&c->worker.held)) != NULL)
        lifecycle_retry(srv, j, "its worker disconnected");
}

void
lifecycle_cancel(struct srv *srv, struct job *j)
{
    const void *args[1] = {job_handle(j)};
    size_t lens[1] = {j->handle_len};

    if (j->state != JOB_RUNNING) {
        lifecycle_fail(srv, j);
        return;
    }
    /* The worker may finish it, but nobody hears of it any more. */
    lifecycle_tell(j, PACKET_WORK_FAIL, 1, args, lens);
    release_waiters(j);
    j->cancelled = true;
}
