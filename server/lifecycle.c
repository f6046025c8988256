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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "batch.h"
#include "conn.h"
#include "deps.h"
#include "durable.h"
#include "flow.h"
#include "flow_ctl.h"
#include "job.h"
#include "queue.h"
#include "schedule.h"
#include "srv.h"
#include "storage.h"
#include "storage_lease.h"

#define LIFECYCLE_BACKOFF_MAX_MS 3600000u /* --retry-backoff's longest wait unless given */

/* The peer of the worker holding j, for job events; NULL if none holds it. */
static const char *
worker_peer(const struct job *j)
{
    struct qworker *w = job_worker(j);

    return w != NULL ? conn_of_worker(w)->peer : NULL;
}

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

    /* A send never closes its connection (conn_room defers that), so the list holds still. */
    if (j->ext != NULL)
        TAILQ_FOREACH (w, &j->ext->waiters, by_job)
            conn_send(w->client, type, nargs, args, lens);
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
    struct qworker *w;

    if (j->func->flow != NULL) {
        flow_ctl_wake(j->func); /* only if it may start, else when it may */
        return;
    }
    w = queue_wake_one(j->func);

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
    if (j->ext->silence) {
        log_notice(&srv->log, "job %s of '%s': its worker said nothing for %u s (--job-timeout)",
                   job_handle(j), j->func->name, srv->cfg.job_timeout);
        lifecycle_retry_as(srv, j, DSJOB_RETRY_TIMEOUT, "--job-timeout expired");
        return;
    }
    log_notice(&srv->log, "job %s of '%s' passed its CAN_DO_TIMEOUT", job_handle(j), j->func->name);
    lifecycle_retry_as(srv, j, DSJOB_RETRY_TIMEOUT, "CAN_DO_TIMEOUT expired");
}

void
lifecycle_arm_timeout(struct srv *srv, struct job *j, uint32_t timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};

    j->ext->silence = 0;
    j->ext->timeout_ev = evtimer_new(srv->base, timeout_cb, j);
    if (j->ext->timeout_ev != NULL)
        evtimer_add(j->ext->timeout_ev, &tv);
}

void
lifecycle_arm_silence(struct srv *srv, struct job *j)
{
    lifecycle_arm_timeout(srv, j, srv->cfg.job_timeout * 1000u);
    j->ext->silence = 1;
}

void
lifecycle_heard(struct srv *srv, struct job *j)
{
    struct timeval tv = {srv->cfg.job_timeout, 0};

    if (j->ext->silence && j->ext->timeout_ev != NULL)
        evtimer_add(j->ext->timeout_ev, &tv); /* a pending timer starts again from now */
}

void
lifecycle_sleeping(struct qworker *w)
{
    struct job *j;

    /* A worker that runs a job in the background and asks for more meanwhile is trusted. */
    TAILQ_FOREACH (j, &w->held, link) {
        if (j->ext != NULL && !j->ext->silence)
            stop_timer(j);
    }
}

void
lifecycle_pre_sleep(struct conn *c)
{
    struct srv *srv = c->srv;

    /* Work that arrived between NO_JOB and PRE_SLEEP must not wait for the next job. */
    if (!srv->draining && storage_lease_has_work(srv, &c->worker)) {
        conn_send(c, PACKET_NOOP, 0, NULL, NULL);
        return;
    }
    lifecycle_sleeping(&c->worker);
    queue_sleep(&c->worker);
    if (!TAILQ_EMPTY(&srv->queue.flows))
        flow_ctl_arm(srv); /* a token may wake it */
    storage_want_lease(srv);
}

static void end_job(struct srv *srv, struct job *j, enum job_outcome outcome, const void *data,
                    size_t len, bool tell, bool counted);

/* What an ended job becomes: gone (1.1.20), in its function's dead set, or kept. */
static enum job_settle
end_to(const struct srv *srv, const struct job *j, enum job_outcome outcome)
{
    if (j->cancelled || outcome == JOB_OUTCOME_NONE)
        return JOB_SETTLE_GONE;
    /* --unique-for: its key stays taken, foreground or background, by keeping it. */
    if (!j->background)
        return lifecycle_unique_window(srv, j) > 0 ? JOB_SETTLE_DONE : JOB_SETTLE_GONE;
    if (outcome != JOB_OUTCOME_COMPLETE && srv->cfg.max_dead > 0)
        return JOB_SETTLE_DEAD;
    if (srv->cfg.keep_results > 0 || lifecycle_unique_window(srv, j) > 0)
        return JOB_SETTLE_DONE;
    return JOB_SETTLE_GONE;
}

uint32_t
lifecycle_unique_window(const struct srv *srv, const struct job *j)
{
    if (j->unique_len == 0 || j->unique_is_data)
        return 0;
    return j->func->unique_for ? j->func->unique_for : srv->cfg.unique_for;
}

/* Seconds an ended (kept) job stays: --keep-results for a background one, or its key's window. */
static int64_t
kept_for(const struct srv *srv, const struct job *j)
{
    uint32_t keep = j->background ? srv->cfg.keep_results : 0;
    uint32_t window = lifecycle_unique_window(srv, j);

    return keep > window ? keep : window;
}

/* Past --max-kept, the oldest kept results go, and are counted. */
static void
trim_kept(struct srv *srv)
{
    struct job *j;

    while (srv->queue.nkept > srv->cfg.max_kept && (j = TAILQ_FIRST(&srv->queue.kept)) != NULL) {
        log_info(&srv->log, "kept job %s of '%s' dropped: the kept results are at --max-kept %u",
                 job_handle(j), j->func->name, srv->cfg.max_kept);
        srv->stats.limits[STATS_LIMIT_MAX_KEPT]++;
        lifecycle_drop_ended(srv, j);
    }
}

/* Past --max-dead, the oldest dead jobs of f go, and are counted. */
static void
trim_dead(struct srv *srv, struct func *f)
{
    struct job *j;

    while (f->ndead > srv->cfg.max_dead && (j = TAILQ_FIRST(&f->dead)) != NULL) {
        log_notice(&srv->log, "dead job %s of '%s' dropped: the dead set is at --max-dead %u",
                   job_handle(j), f->name, srv->cfg.max_dead);
        f->dead_dropped++;
        srv->stats.limits[STATS_LIMIT_MAX_DEAD]++;
        lifecycle_drop_ended(srv, j);
    }
}

void
lifecycle_settled(struct srv *srv, struct job *j)
{
    enum job_settle to = j->ext != NULL ? (enum job_settle)j->ext->settle_to : JOB_SETTLE_GONE;

    if (to == JOB_SETTLE_GONE) {
        queue_remove(&srv->queue, j);
        return;
    }
    j->ext->settle_to = JOB_SETTLE_GONE;
    if (to == JOB_SETTLE_DEAD) {
        queue_bury(&srv->queue, j);
        trim_dead(srv, j->func);
    } else {
        queue_keep(&srv->queue, j);
        trim_kept(srv);
    }
}

/* The continuation of the change that settles a job: it committed. */
static void
settled(struct srv *srv, struct store_op *op, bool ok)
{
    (void)ok; /* always: a failed one is tried again */
    /* Only its own op settles it: a plain update may commit while it settles. */
    if (op->job->state == JOB_SETTLING)
        lifecycle_settled(srv, op->job);
}

/*
 * What j's clients hear of its end: WORK_COMPLETE with the result,
 * WORK_EXCEPTION with its data (to those that asked for exceptions), else
 * WORK_FAIL. With later, each answer waits for the commit of the open batch,
 * which holds the change that settles j (durable_tell): a client hears of a
 * stored job's end only once a crash cannot undo it.
 */
static void
tell_end(struct srv *srv, struct job *j, enum job_outcome outcome, const void *data, size_t len,
         bool later)
{
    const void *args[2] = {job_handle(j), data};
    size_t lens[2] = {j->handle_len, len};
    struct waiter *w;

    if (j->ext == NULL)
        return;
    TAILQ_FOREACH (w, &j->ext->waiters, by_job) {
        enum packet_type type = outcome == JOB_OUTCOME_COMPLETE ? PACKET_WORK_COMPLETE
                                : outcome == JOB_OUTCOME_EXCEPTION && w->client->exceptions
                                    ? PACKET_WORK_EXCEPTION
                                    : PACKET_WORK_FAIL;
        unsigned nargs = type == PACKET_WORK_FAIL ? 1 : 2;

        if (later)
            durable_tell(srv, w->client, type, nargs, args, lens);
        else
            conn_send(w->client, type, nargs, args, lens);
    }
}

/*
 * lifecycle_end, and with tell, what its clients hear of it (tell_end):
 * on a durable store, for a stored job, only once its end has committed
 * (unless --store-async-ends). counted: the outcome counts in the
 * function's stats (an expiry counts as expired instead).
 */
static void
end_job(struct srv *srv, struct job *j, enum job_outcome outcome, const void *data, size_t len,
        bool tell, bool counted)
{
    enum job_settle to = end_to(srv, j, outcome);
    struct qworker *w = job_worker(j);
    bool later = tell && j->stored && srv->storage.durable && !srv->cfg.store_async_ends &&
                 job_has_waiters(j);
    const void *told = outcome == JOB_OUTCOME_FAIL ? NULL : data;
    size_t told_len = outcome == JOB_OUTCOME_FAIL ? 0 : len;
    /*
     * Its end need not hurry its commit (durable_end) unless others wait on
     * it: a schedule's tick, a batch's counters, children (any graph here),
     * or the next job of its sequence, which starts once this one settles
     * (a crash before the commit would run this one again after it).
     */
    bool lazy_end = srv->deps == NULL && (j->ext == NULL || j->ext->batch == NULL) &&
                    (j->func->flow == NULL || j->func->flow->conf.sequence == FLOW_SEQ_OFF);

    if (to != JOB_SETTLE_GONE && job_ext(j) == NULL) {
        log_err(&srv->log, "out of memory to keep the outcome of job %s", job_handle(j));
        to = JOB_SETTLE_GONE;
    }
    if (to != JOB_SETTLE_GONE) {
        if (to == JOB_SETTLE_DONE && outcome == JOB_OUTCOME_FAIL)
            len = 0; /* WORK_FAIL carries no bytes; the text was for the dead set */
        /* The dead set keeps the text of the last failure; the kept results the result. */
        if (to == JOB_SETTLE_DEAD ? job_set_error(j, data, len, srv->cfg.max_result_size) < 0
                                  : job_set_result(j, data, len, srv->cfg.max_result_size) < 0)
            log_err(&srv->log, "out of memory to keep the result of job %s", job_handle(j));
        j->ext->outcome = (uint8_t)(to == JOB_SETTLE_DEAD ? JOB_OUTCOME_DEAD : outcome);
        if (to == JOB_SETTLE_DONE)
            j->ext->last_fail = clock_now(); /* when it ended: --keep-results counts from it */
        j->ext->settle_to = (uint8_t)to;
    }
    if (w != NULL)
        stats_ran(srv, j);
    if (counted && outcome == JOB_OUTCOME_COMPLETE)
        j->func->stats.completed++;
    else if (counted && outcome == JOB_OUTCOME_FAIL)
        j->func->stats.failed++;
    else if (counted && outcome == JOB_OUTCOME_EXCEPTION)
        j->func->stats.exceptions++;
    stop_timer(j);
    if (tell && !later)
        tell_end(srv, j, outcome, told, told_len, false);
    if (!later)
        release_waiters(j);
    if (j->unique_len > 6 && memcmp(job_unique(j), "sched:", 6) == 0) {
        lazy_end = false;
        schedule_ended(srv, j, to == JOB_SETTLE_DEAD ? JOB_OUTCOME_DEAD : outcome);
    }
    /* Its children hear of it in the batch of its end (before the settle: the same batch). */
    deps_ended(srv, j, outcome);
    /* A batch's member: its counters go in the open batch before the end itself (one commit). */
    if (j->refused || (j->ext != NULL && j->ext->batch != NULL))
        batch_ended(srv, j, to == JOB_SETTLE_DEAD ? JOB_OUTCOME_DEAD : outcome);
    if (storage_settle(srv, j, to == JOB_SETTLE_DEAD ? JOB_OUTCOME_DEAD : outcome, settled)) {
        if (later) {
            tell_end(srv, j, outcome, told, told_len, true); /* behind the settle, in its batch */
            release_waiters(j);
        }
        queue_settle(&srv->queue, j);
        /*
         * Unless --store-async-ends: its worker goes on while this end
         * commits, but is held if its last end has not committed yet.
         */
        if (w != NULL && !srv->cfg.store_async_ends)
            durable_end(srv, conn_of_worker(w), lazy_end);
    } else {
        if (later) {
            tell_end(srv, j, outcome, told, told_len, false);
            release_waiters(j);
        }
        lifecycle_settled(srv, j);
    }
    if (srv->draining)
        srv_check_drained(srv);
}

void
lifecycle_end(struct srv *srv, struct job *j, enum job_outcome outcome, const void *data,
              size_t len)
{
    end_job(srv, j, outcome, data, len, false, true);
}

void
lifecycle_finish(struct srv *srv, struct job *j)
{
    lifecycle_end(srv, j, JOB_OUTCOME_NONE, NULL, 0);
}

void
lifecycle_fail(struct srv *srv, struct job *j)
{
    end_job(srv, j, JOB_OUTCOME_NONE, NULL, 0, true, true); /* its clients hear WORK_FAIL */
}

void
lifecycle_fail_as(struct srv *srv, struct job *j, const char *why)
{
    /* When it failed: the dead set's order, and what --dead-max-age counts from. */
    if (job_ext(j) != NULL) {
        j->ext->last_fail = clock_now();
        if (j->ext->first_fail == 0)
            j->ext->first_fail = j->ext->last_fail;
    }
    end_job(srv, j, JOB_OUTCOME_FAIL, why, strlen(why), true, true);
}

/* A small generator for the backoff's jitter; the loop thread alone uses it. */
static uint64_t
jitter_next(void)
{
    static uint64_t x;

    if (x == 0)
        x = ((uint64_t)clock_now() << 20) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15u;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

/*
 * The wait before j's next attempt, in milliseconds: the base (the
 * function's, else --retry-backoff's) doubled for each attempt already
 * failed, capped at the max, then a random point in its upper half, so
 * that jobs that failed together do not all come back together. 0 for no
 * wait, and always for a foreground job: a client waits.
 */
static uint64_t
backoff_ms(const struct srv *srv, const struct job *j)
{
    const struct func *f = j->func;
    uint64_t base = f->backoff_base_ms ? f->backoff_base_ms : srv->cfg.retry_backoff_base_ms;
    uint64_t max = f->backoff_base_ms ? f->backoff_max_ms : srv->cfg.retry_backoff_max_ms;
    uint32_t n = job_attempts(j);
    uint64_t d;

    if (base == 0 || !j->background)
        return 0;
    if (max == 0)
        max = LIFECYCLE_BACKOFF_MAX_MS;
    d = n >= 32 ? max : base << n;
    if (d > max || d < base)
        d = max;
    return d / 2 + jitter_next() % (d / 2 + 1);
}

/* The attempts j may use: its function's (admin "retry"), else --job-retries; 0: no limit. */
static bool
past_limit(const struct srv *srv, const struct job *j)
{
    unsigned limit = j->func->retries ? j->func->retries : srv->cfg.job_retries;

    return limit != 0 && job_attempts(j) + 1 >= limit;
}

/* An attempt failed: when, and why (the text the dead set keeps). */
static void
note_failure(struct srv *srv, struct job *j, const void *why, size_t len)
{
    if (job_ext(j) == NULL)
        return;
    j->ext->last_fail = clock_now();
    if (j->ext->first_fail == 0)
        j->ext->first_fail = j->ext->last_fail;
    if (j->background)
        (void)job_set_error(j, why, len, srv->cfg.max_result_size);
    (void)job_set_warning(j, NULL, 0, 0); /* the next attempt's warnings are its own */
}

/* Run j again: at once at the head of its queue, or after its backoff. */
static void
run_again(struct srv *srv, struct job *j, const char *why)
{
    uint64_t wait = backoff_ms(srv, j);
    /*
     * Run-at times are whole seconds (the epoch heap's and the store's
     * unit): the first second that starts after the wait has passed, so a
     * retry never comes back early, whatever part of a second it failed in.
     */
    int64_t now_ms = clock_now_ms(), when = (now_ms + (int64_t)wait + 999) / 1000;
    int64_t delay = wait > 0 ? when - now_ms / 1000 : 0;
    const char *peer = worker_peer(j);

    stats_ran(srv, j);
    j->func->stats.retried++;
    stats_queued(srv, j);
    if (delay > 0 && queue_backoff(&srv->queue, j, when) == 0) {
        if (LOG_ON(&srv->log, DSJOB_LOG_INFO)) {
            char text[200];

            snprintf(text, sizeof(text), "%s; runs again in %.3f s (attempt %u failed)", why,
                     (double)(when * 1000 - now_ms) / 1000, job_attempts(j));
            LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "requeued", peer, j, text);
        }
        storage_update(srv, j);
        srv_epoch_arm(srv);
    } else {
        if (delay == 0)
            queue_requeue(&srv->queue, j);
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "requeued", peer, j, why);
        if (!j->background && !job_has_waiters(j)) {
            deps_ended(srv, j, JOB_OUTCOME_NONE); /* its children see it fail */
            queue_remove(&srv->queue, j);         /* nobody is left to want it */
            return;
        }
        storage_update(srv, j);
        lifecycle_wake(j);
    }
    if (srv->draining)
        srv_check_drained(srv);
}

/* j failed for good: its clients hear WORK_FAIL, and it ends (dead, kept or gone). */
static void
fail_for_good(struct srv *srv, struct job *j, const char *why)
{
    if (j->ext != NULL)
        j->ext->attempts++;
    end_job(srv, j, JOB_OUTCOME_FAIL, why, strlen(why), true, true);
}

bool
lifecycle_attempt_failed(struct srv *srv, struct job *j, unsigned how, const void *text, size_t len)
{
    if (!j->background || j->cancelled)
        return false;
    note_failure(srv, j, text, len);
    if (!(srv->cfg.retry_on & how) || past_limit(srv, j)) {
        if (srv->cfg.retry_on & how)
            log_warn(&srv->log, "job %s of '%s' failed after %u attempts", job_handle(j),
                     j->func->name, job_attempts(j) + 1);
        if (j->ext != NULL)
            j->ext->attempts++;
        return false;
    }
    stop_timer(j);
    run_again(srv, j, how == DSJOB_RETRY_FAIL ? "WORK_FAIL" : "WORK_EXCEPTION");
    return true;
}

void
lifecycle_warned(struct srv *srv, struct job *j, const void *text, size_t len)
{
    if (!j->background || srv->cfg.max_dead == 0 || j->cancelled)
        return;
    (void)job_set_warning(j, text, len, srv->cfg.max_result_size);
}

void
lifecycle_work_done(struct srv *srv, struct job *j, enum packet_type type, const void *data,
                    size_t len)
{
    static const char fail_text[] = "WORK_FAIL";

    if (type == PACKET_WORK_FAIL) {
        /* Its text: the attempt's last WORK_WARNING (dsjob worker sends why), else none. */
        unsigned char *warned = NULL;
        const void *text = fail_text;
        size_t text_len = sizeof(fail_text) - 1;

        if (j->ext != NULL && j->ext->warning != NULL) {
            warned = j->ext->warning; /* taken over: the attempt is over */
            text = warned;
            text_len = j->ext->warning_len;
            j->ext->warning = NULL;
            j->ext->warning_len = 0;
        }
        if (lifecycle_attempt_failed(srv, j, DSJOB_RETRY_FAIL, text, text_len)) {
            free(warned);
            return;
        }
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "failed", worker_peer(j), j, "WORK_FAIL");
        end_job(srv, j, JOB_OUTCOME_FAIL, text, text_len, true, true);
        free(warned);
        return;
    }
    LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "completed", worker_peer(j), j, NULL);
    end_job(srv, j, JOB_OUTCOME_COMPLETE, data, len, true, true);
}

void
lifecycle_exception(struct srv *srv, struct job *j, const void *data, size_t len)
{
    if (lifecycle_attempt_failed(srv, j, DSJOB_RETRY_EXCEPTION, data, len))
        return;
    LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "failed", worker_peer(j), j, "WORK_EXCEPTION");
    end_job(srv, j, JOB_OUTCOME_EXCEPTION, data, len, true, true);
}

void
lifecycle_retry_as(struct srv *srv, struct job *j, unsigned how, const char *why)
{
    stop_timer(j);
    if (j->cancelled) {
        lifecycle_fail(srv, j); /* not run again; clients that attached since hear why */
        return;
    }
    note_failure(srv, j, why, strlen(why));
    if (!(srv->cfg.retry_on & how) || past_limit(srv, j)) {
        if (LOG_ON(&srv->log, DSJOB_LOG_WARNING)) {
            char text[200];

            if (!(srv->cfg.retry_on & how))
                snprintf(text, sizeof(text), "%s (not retried, see --retry-on)", why);
            else
                snprintf(text, sizeof(text), "%s, after %u attempts", why, job_attempts(j) + 1);
            LIFECYCLE_LOG(srv, DSJOB_LOG_WARNING, "failed", worker_peer(j), j, text);
        }
        fail_for_good(srv, j, why);
        return;
    }
    run_again(srv, j, why);
}

void
lifecycle_retry(struct srv *srv, struct job *j, const char *why)
{
    lifecycle_retry_as(srv, j, DSJOB_RETRY_CRASH, why);
}

void
lifecycle_keep_replayed(struct srv *srv, struct job *j)
{
    queue_keep(&srv->queue, j);
    if (kept_for(srv, j) == 0)
        lifecycle_drop_ended(srv, j); /* kept by a run with --keep-results; this one keeps none */
    else
        trim_kept(srv);
}

void
lifecycle_bury_replayed(struct srv *srv, struct job *j)
{
    queue_bury(&srv->queue, j);
    trim_dead(srv, j->func); /* buried by a run with a larger --max-dead, or with one */
}

void
lifecycle_drop_ended(struct srv *srv, struct job *j)
{
    storage_remove(srv, j);
    queue_remove(&srv->queue, j);
}

int
lifecycle_revive(struct srv *srv, struct job *j)
{
    uint32_t attempts = j->ext->attempts;
    int rc;

    j->ext->attempts = 0;
    j->ext->when = 0;
    j->ext->deadline_ms = 0; /* retried by hand: not to expire again at once */
    rc = queue_revive(&srv->queue, j, clock_now());
    if (rc != 0) {
        j->ext->attempts = attempts;
        return rc;
    }
    j->ext->first_fail = j->ext->last_fail = 0;
    j->ext->outcome = JOB_OUTCOME_NONE;
    j->ext->numerator = j->ext->denominator = 0;
    (void)job_set_error(j, NULL, 0, 0);
    storage_revive(srv, j);
    lifecycle_wake(j);
    return 0;
}

void
lifecycle_expire(struct srv *srv, int64_t now)
{
    struct job *j, *next;
    struct func *f;
    int64_t least = srv->cfg.keep_results;

    /*
     * The kept results are in end order, each kept for kept_for seconds:
     * none ended after now less the shortest of those can be due, so the
     * walk stops there. With one retention for all (the usual case) it
     * looks at the due ones and one more.
     */
    if (srv->cfg.unique_for > 0 && (least == 0 || srv->cfg.unique_for < least))
        least = srv->cfg.unique_for;
    TAILQ_FOREACH (f, &srv->queue.func_order, order)
        if (f->unique_for > 0 && (least == 0 || f->unique_for < least))
            least = f->unique_for;
    for (j = TAILQ_FIRST(&srv->queue.kept); j != NULL && j->ext->last_fail + least <= now;
         j = next) {
        next = TAILQ_NEXT(j, link);
        if (j->ext->last_fail + kept_for(srv, j) <= now)
            lifecycle_drop_ended(srv, j);
    }
    /* --dead-max-age: each dead set is in end order too. */
    if (srv->cfg.dead_max_age == 0)
        return;
    TAILQ_FOREACH (f, &srv->queue.func_order, order) {
        while ((j = TAILQ_FIRST(&f->dead)) != NULL &&
               j->ext->last_fail + (int64_t)srv->cfg.dead_max_age <= now) {
            log_info(&srv->log, "dead job %s of '%s' dropped: older than --dead-max-age %u s",
                     job_handle(j), f->name, srv->cfg.dead_max_age);
            srv->stats.limits[STATS_LIMIT_DEAD_MAX_AGE]++;
            lifecycle_drop_ended(srv, j);
        }
    }
}

/*
 * j waited past its deadline: its clients hear WORK_FAIL and it ends as a
 * failure whose text is "expired" (to the dead set, with --max-dead).
 */
static void
expired(struct srv *srv, struct job *j, int64_t now_ms)
{
    static const char why[] = "expired";
    const void *args[1] = {job_handle(j)};
    size_t lens[1] = {j->handle_len};

    j->func->stats.expired++;
    if (LOG_ON(&srv->log, DSJOB_LOG_NOTICE)) {
        char text[120];

        snprintf(text, sizeof(text), "expired: not started by its deadline (%.3f s ago)",
                 (double)(now_ms - j->ext->deadline_ms) / 1000);
        LIFECYCLE_LOG(srv, DSJOB_LOG_NOTICE, "expired", NULL, j, text);
    }
    j->ext->last_fail = now_ms / 1000; /* when it ended: the dead set's order */
    if (j->ext->first_fail == 0)
        j->ext->first_fail = j->ext->last_fail;
    lifecycle_tell(j, PACKET_WORK_FAIL, 1, args, lens);
    end_job(srv, j, JOB_OUTCOME_FAIL, why, sizeof(why) - 1, false, false);
}

void
lifecycle_expire_jobs(struct srv *srv, int64_t now_ms)
{
    struct job *j;

    while ((j = queue_expired(&srv->queue, now_ms)) != NULL)
        expired(srv, j, now_ms);
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

    durable_forget_client(c);
    while ((w = TAILQ_FIRST(&c->waiting)) != NULL) {
        j = w->job;
        TAILQ_REMOVE(&c->waiting, w, by_client);
        TAILQ_REMOVE(&j->ext->waiters, w, by_job);
        free(w);
        /* A foreground job nobody waits for any more is dropped before it runs. */
        if (!j->background && !job_has_waiters(j) &&
            (j->state == JOB_QUEUED || j->state == JOB_SCHEDULED)) {
            deps_ended(srv, j, JOB_OUTCOME_NONE); /* its children see it fail */
            queue_remove(&srv->queue, j);
        } else if (!j->background && !job_has_waiters(j) && j->held)
            lifecycle_finish(srv, j); /* and out of the jobs it waited for (deps.c) */
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

    j->func->stats.cancelled++;
    if (j->state != JOB_RUNNING) {
        lifecycle_fail(srv, j);
        return;
    }
    /* The worker may finish it, but nobody hears of it any more. */
    lifecycle_tell(j, PACKET_WORK_FAIL, 1, args, lens);
    release_waiters(j);
    j->cancelled = true;
}
