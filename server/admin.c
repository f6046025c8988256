/*
 * Admin commands. Each reply is written whole into the connection's output
 * in the loop turn that read the line; listings end with a line holding a
 * single ".". Commands that stop or change the server (shutdown, cancel
 * job, drop function, maxqueue, priority, schedule but its list) are
 * refused to peers outside --admin-allow (loopback and the unix socket by
 * default): gearmand lets anyone do them.
 */
#include "config.h"
#include "admin.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "batch.h"
#include "conn.h"
#include "deps.h"
#include "durable.h"
#include "flow.h"
#include "flow_ctl.h"
#include "job.h"
#include "job_dead.h"
#include "lifecycle.h"
#include "proto/decimal.h"
#include "proto/textcmd.h"
#include "queue.h"
#include "schedule.h"
#include "srv.h"
#include "stats.h"
#include "storage.h"

#define WORD(cmd, i) (cmd)->word[(cmd)->first_arg + (i)]
#define WORD_LEN(cmd, i) (cmd)->word_len[(cmd)->first_arg + (i)]

/*
 * With the PostgreSQL store a function's total also counts its jobs waiting
 * in the shared table under no lease (as the last renewal counted them), and
 * a function known only there has a line: work no server here can do shows.
 */
static void
admin_status(struct conn *c)
{
    struct stats_walk it = {NULL, 0};
    const char *name;
    struct func *f;
    uint64_t n;

    TAILQ_FOREACH (f, &c->srv->queue.func_order, order)
        conn_printf(c, "%s\t%" PRIu64 "\t%u\t%u\n", f->name,
                    queue_total(f) + stats_pg_waiting(c->srv, f->name, f->name_len),
                    f->nrunning + f->nsettling, f->nworkers);
    while ((name = stats_pg_waiting_next(c->srv, &it, &n)) != NULL)
        if (queue_func(&c->srv->queue, name, strlen(name), false) == NULL &&
            queue_name_bad_byte(name, strlen(name)) < 0)
            conn_printf(c, "%s\t%" PRIu64 "\t0\t0\n", name, n);
    conn_write(c, ".\n", 2);
}

static void
admin_prioritystatus(struct conn *c)
{
    struct func *f;

    TAILQ_FOREACH (f, &c->srv->queue.func_order, order)
        conn_printf(c, "%s\t%u\t%u\t%u\t%u\n", f->name, f->nqueued[JOB_PRIO_HIGH],
                    f->nqueued[JOB_PRIO_NORMAL], f->nqueued[JOB_PRIO_LOW], f->nworkers);
    conn_write(c, ".\n", 2);
}

/* gearmand lists the newest connection first, each worker's newest function first. */
static void
admin_workers(struct conn *c)
{
    struct conn *w;

    TAILQ_FOREACH_REVERSE (w, &c->srv->conns, conn_list, link) {
        struct ability *a;

        conn_printf(c, "%d %s %s :", w->fd, w->ip, w->client_id ? w->client_id : "-");
        TAILQ_FOREACH (a, &w->worker.abilities, by_worker)
            conn_printf(c, " %s", a->func->name);
        conn_write(c, "\n", 1);
    }
    conn_write(c, ".\n", 2);
}

static void show_detail(struct conn *c, const struct job *j);

static void
show_job(struct conn *c, const struct job *j, bool unique, bool detail)
{
    if (detail)
        show_detail(c, j);
    else if (unique)
        conn_printf(c, "%s\n", job_unique(j));
    else /* handle, attempts, ignored (cancelled), and gearmand's "queued" column */
        conn_printf(c, "%s\t%" PRIu32 "\t%u\t%u\n", job_handle(j), job_attempts(j),
                    j->cancelled ? 1u : 0u, j->background ? 1u : 0u);
}

/*
 * Queued, scheduled and running jobs, as gearmand lists them (no header
 * line); "show jobs detail" lists them with function, priority, state,
 * attempts, run-at time, background and unique, then the dead and kept.
 */
static void
admin_show_jobs(struct conn *c, bool unique, bool detail)
{
    struct queue *q = &c->srv->queue;
    struct func *f;
    struct conn *w;
    size_t i;
    int p;

    TAILQ_FOREACH (f, &q->func_order, order) {
        for (p = 0; p < JOB_NPRIO; p++) {
            struct job *j;

            TAILQ_FOREACH (j, &f->jobs[p], link)
                show_job(c, j, unique, detail);
        }
    }
    for (i = 0; i < q->scheduled.len; i++)
        show_job(c, q->scheduled.elems[i], unique, detail);
    TAILQ_FOREACH (w, &c->srv->conns, link) {
        struct job *j;

        TAILQ_FOREACH (j, &w->worker.held, link)
            show_job(c, j, unique, detail);
    }
    if (detail) {
        struct job *j;

        TAILQ_FOREACH (f, &q->func_order, order)
            TAILQ_FOREACH (j, &f->dead, link)
                show_detail(c, j);
        TAILQ_FOREACH (j, &q->kept, link)
            show_detail(c, j);
    }
    conn_write(c, ".\n", 2);
}

/* A maxqueue limit: as in gearmand, anything but a positive number means none. */
static unsigned
admin_limit(const char *s, size_t len)
{
    uint64_t v;

    return decimal_parse(s, len, UINT32_MAX, &v) == 0 ? (unsigned)v : 0;
}

/* A function name with a control byte would forge lines in the listings: refuse it. */
static bool
admin_name_ok(struct conn *c, const char *name, size_t len)
{
    if (queue_name_bad_byte(name, len) < 0)
        return true;
    conn_printf(c, "ERR INVALID_ARGUMENTS function+name+has+a+control+byte\r\n");
    return false;
}

#define INCOMPLETE(cmd)                                                                            \
    "ERR INVALID_ARGUMENTS An+incomplete+set+of+arguments+was+sent+to+this+command+" cmd "\r\n"

/* Print len bytes with control bytes, DEL, backslash and non-ASCII as \xHH. */
static void
print_escaped(struct conn *c, const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    size_t i, run = 0;

    for (i = 0; i < len; i++) {
        if (p[i] > 0x20 && p[i] < 0x7f && p[i] != '\\')
            continue;
        if (i > run)
            conn_write(c, p + run, i - run);
        conn_printf(c, "\\x%02x", p[i]);
        run = i + 1;
    }
    if (len > run)
        conn_write(c, p + run, len - run);
    if (len == 0)
        conn_write(c, "-", 1);
}

/* show job HANDLE, show job unique FUNCTION UNIQUE: finds the job, or says why not. */
static struct job *
admin_find(struct conn *c, const struct textcmd *cmd, const char *what)
{
    struct queue *q = &c->srv->queue;
    unsigned argc = textcmd_argc(cmd);
    struct func *f;
    struct job *j = NULL;

    if (argc == 3 && WORD_LEN(cmd, 0) == 6 && strncasecmp(WORD(cmd, 0), "unique", 6) == 0) {
        f = queue_func(q, WORD(cmd, 1), WORD_LEN(cmd, 1), false);
        if (f != NULL && (j = queue_find_unique(f, WORD(cmd, 2), WORD_LEN(cmd, 2))) == NULL &&
            (j = queue_find_settling(f, WORD(cmd, 2), WORD_LEN(cmd, 2))) == NULL)
            j = queue_find_kept(f, WORD(cmd, 2), WORD_LEN(cmd, 2));
    } else if (argc == 1) {
        j = queue_find_job(q, WORD(cmd, 0), WORD_LEN(cmd, 0));
    } else {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+%s+HANDLE+or+%s+unique+FUNCTION+UNIQUE\r\n",
                    what, what);
        return NULL;
    }
    if (j == NULL && strcmp(what, "show+result") == 0 && c->srv->cfg.keep_results == 0)
        /* Not this job only: none is ever kept here, and the client can say so. */
        conn_printf(c, "ERR UNKNOWN_JOB the+server+keeps+no+results+(--keep-results+0)\r\n");
    else if (j == NULL)
        conn_printf(c, "ERR UNKNOWN_JOB\r\n");
    return j;
}

/*
 * "show job unique F U" on postgres of a job no server holds: a child held
 * for its parents, which the store shows (as by handle). True if asked of
 * the store (it answers).
 */
static bool
admin_held_unique(struct conn *c, const struct textcmd *cmd)
{
    struct queue *q = &c->srv->queue;
    struct func *f;

    if (textcmd_argc(cmd) != 3 || WORD_LEN(cmd, 0) != 6 ||
        strncasecmp(WORD(cmd, 0), "unique", 6) != 0 || !storage_deps_shared(c->srv))
        return false;
    f = queue_func(q, WORD(cmd, 1), WORD_LEN(cmd, 1), false);
    if (f != NULL && (queue_find_unique(f, WORD(cmd, 2), WORD_LEN(cmd, 2)) != NULL ||
                      queue_find_settling(f, WORD(cmd, 2), WORD_LEN(cmd, 2)) != NULL ||
                      queue_find_kept(f, WORD(cmd, 2), WORD_LEN(cmd, 2)) != NULL))
        return false;
    deps_show_stored(c, WORD(cmd, 1), WORD_LEN(cmd, 1), WORD(cmd, 2), WORD_LEN(cmd, 2));
    return true;
}

/* One job, field by field: "name value" lines, then ".". */
static void
admin_show_one(struct conn *c, const struct textcmd *cmd)
{
    struct job *j;
    struct qworker *w;

    /* On postgres a child held for its parents is a row no server holds: the store shows it. */
    if (textcmd_argc(cmd) == 1 && storage_deps_shared(c->srv) &&
        queue_find_job(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0)) == NULL) {
        deps_show_stored(c, NULL, 0, WORD(cmd, 0), WORD_LEN(cmd, 0));
        return;
    }
    if (admin_held_unique(c, cmd))
        return;
    j = admin_find(c, cmd, "show+job");
    if (j == NULL)
        return;
    conn_printf(c, "handle %s\nfunction %s\nstate %s\n", job_handle(j), j->func->name,
                job_state_name(j));
    if (j->state == JOB_DONE)
        conn_printf(c, "outcome %s\n", job_outcome_name(j->ext->outcome));
    conn_printf(c, "priority %s\nbackground %d\nattempts %" PRIu32 "\nunique ",
                job_prio_name(j->prio), j->background ? 1 : 0, job_attempts(j));
    print_escaped(c, job_unique(j), j->unique_len);
    conn_printf(c, "\nrun_at %lld\npayload_size %" PRIu32 "\n",
                j->state == JOB_DEAD || j->state == JOB_DONE ? 0LL : (long long)job_when(j),
                j->data_len);
    w = job_worker(j);
    if (w != NULL) {
        struct conn *wc = conn_of_worker(w);

        conn_printf(c, "worker %d %s %s\n", wc->fd, wc->ip, wc->client_id ? wc->client_id : "-");
    } else {
        conn_printf(c, "worker -\n");
    }
    conn_printf(c, "status %" PRIu32 "/%" PRIu32 "\nwaiters %u\n", j->ext ? j->ext->numerator : 0,
                j->ext ? j->ext->denominator : 0, job_nwaiters(j));
    deps_show(c, j);
    if (job_deadline_ms(j) != 0 && !job_ended(j))
        conn_printf(c, "deadline %lld.%03lld\n", (long long)(job_deadline_ms(j) / 1000),
                    (long long)(job_deadline_ms(j) % 1000));
    if (j->ext != NULL && j->ext->first_fail != 0 && j->state != JOB_DONE)
        conn_printf(c, "first_failure %lld\nlast_failure %lld\n", (long long)j->ext->first_fail,
                    (long long)j->ext->last_fail);
    if (j->state == JOB_DONE)
        conn_printf(c, "ended %lld\nresult_size %" PRIu32 "\n", (long long)j->ext->last_fail,
                    j->ext->result_size);
    else if (j->ext != NULL && j->ext->first_fail != 0) {
        conn_write(c, "error ", 6);
        print_escaped(c, j->ext->error, j->ext->error_len);
        conn_write(c, "\n", 1);
    }
    conn_write(c, ".\n", 2);
}

/*
 * show result: "OK OUTCOME BYTES NUMERATOR DENOMINATOR SIZE", a newline,
 * BYTES bytes (the first --max-result-size of the SIZE the worker sent),
 * a newline.
 */
static void
admin_show_result(struct conn *c, const struct textcmd *cmd)
{
    struct job *j = admin_find(c, cmd, "show+result");

    if (j == NULL)
        return;
    if (j->state != JOB_DONE) {
        conn_printf(c, "ERR NOT_DONE job+is+%s\r\n", job_state_name(j));
        return;
    }
    conn_printf(c, "OK %s %" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRIu32 "\n",
                job_outcome_name(j->ext->outcome), j->ext->result_len, j->ext->numerator,
                j->ext->denominator, j->ext->result_size);
    if (j->ext->result_len > 0)
        conn_write(c, j->ext->result, j->ext->result_len);
    conn_write(c, "\n", 1);
}

static void
show_dead_of(struct conn *c, const struct func *f)
{
    const struct job *j;

    TAILQ_FOREACH (j, &f->dead, link) {
        conn_printf(c, "%s\t%s\t%s\t%" PRIu32 "\t%lld\t%lld\t%" PRIu32 "\t", job_handle(j), f->name,
                    job_prio_name(j->prio), job_attempts(j), (long long)j->ext->first_fail,
                    (long long)j->ext->last_fail, j->data_len);
        print_escaped(c, job_unique(j), j->unique_len);
        conn_write(c, "\t", 1);
        print_escaped(c, j->ext->error, j->ext->error_len);
        conn_printf(c, "\t%" PRIu64 "\n", f->dead_dropped);
    }
}

/* show dead [FUNCTION]: handle, function, priority, attempts, first and last failure, size,
 * unique, error, and the function's dead jobs dropped past --max-dead; oldest death first. */
static void
admin_show_dead(struct conn *c, const struct textcmd *cmd)
{
    struct queue *q = &c->srv->queue;
    struct func *f;

    if (textcmd_argc(cmd) >= 1) {
        f = queue_func(q, WORD(cmd, 0), WORD_LEN(cmd, 0), false);
        if (f != NULL)
            show_dead_of(c, f);
    } else {
        TAILQ_FOREACH (f, &q->func_order, order)
            show_dead_of(c, f);
    }
    conn_write(c, ".\n", 2);
}

/* retry dead / drop dead HANDLE|FUNCTION: one dead job by handle, or all of a function's. */
static void
admin_dead(struct conn *c, const struct textcmd *cmd, bool retry)
{
    struct srv *srv = c->srv;
    unsigned done, held;

    if (textcmd_argc(cmd) != 1) {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+%s+dead+HANDLE|FUNCTION\r\n",
                    retry ? "retry" : "drop");
        return;
    }
    if (job_dead_apply(srv, WORD(cmd, 0), WORD_LEN(cmd, 0), retry, &done, &held) < 0) {
        conn_printf(c, "ERR UNKNOWN_JOB no+dead+job+or+function+%.*s\r\n", (int)WORD_LEN(cmd, 0),
                    WORD(cmd, 0));
        return;
    }
    log_notice(&srv->log, "%s: %s %u dead jobs of '%.*s'", c->peer, retry ? "retried" : "dropped",
               done, (int)WORD_LEN(cmd, 0), WORD(cmd, 0));
    if (held > 0)
        conn_printf(c, "OK %u (%u not: a live job holds the unique key, or no memory)\n", done,
                    held);
    else
        conn_printf(c, "OK %u\n", done);
}

/* A number of seconds with up to three decimals, as milliseconds; -1 if it is not one. */
static long long
admin_seconds_ms(const char *s, size_t len)
{
    uint64_t whole = 0, frac = 0, scale = 1000;
    size_t dot = 0;

    while (dot < len && s[dot] != '.')
        dot++;
    if (decimal_parse(s, dot, 86400 * 7, &whole) != 0)
        return -1;
    if (dot < len) {
        size_t i;

        for (i = dot + 1; i < len; i++) {
            if (s[i] < '0' || s[i] > '9')
                return -1;
            if (scale > 1)
                frac += (uint64_t)(s[i] - '0') * (scale /= 10);
        }
    }
    return (long long)(whole * 1000 + frac);
}

/*
 * retry FUNCTION [N [BASE [MAX]]]: the function's attempts (as
 * --job-retries counts them; 0 gives it back to --job-retries) and backoff
 * in seconds (BASE 0 gives it back to --retry-backoff). Stored with the
 * function. Alone, it prints the setting: "OK N BASE MAX".
 */
static void
admin_retry(struct conn *c, const struct textcmd *cmd)
{
    unsigned argc = textcmd_argc(cmd);
    long long base = 0, max = 0;
    uint64_t n = 0;
    struct func *f;

    if (argc == 0 || argc > 4) {
        conn_printf(c, INCOMPLETE("retry"));
        return;
    }
    if (!admin_name_ok(c, WORD(cmd, 0), WORD_LEN(cmd, 0)))
        return;
    if (argc == 1) {
        f = queue_func(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0), false);
        conn_printf(c, "OK %" PRIu32 " %.3f %.3f\n", f ? f->retries : 0, /* MAX 0: an hour */
                    f ? f->backoff_base_ms / 1000.0 : 0.0, f ? f->backoff_max_ms / 1000.0 : 0.0);
        return;
    }
    if (decimal_parse(WORD(cmd, 1), WORD_LEN(cmd, 1), UINT32_MAX, &n) != 0 ||
        (argc > 2 && (base = admin_seconds_ms(WORD(cmd, 2), WORD_LEN(cmd, 2))) < 0) ||
        (argc > 3 && (max = admin_seconds_ms(WORD(cmd, 3), WORD_LEN(cmd, 3))) < 0)) {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+retry+FUNCTION+N+[BASE+[MAX]]+(seconds)\r\n");
        return;
    }
    if (max != 0 && max < base) {
        conn_printf(c, "ERR INVALID_ARGUMENTS MAX+is+shorter+than+BASE\r\n");
        return;
    }
    f = queue_func(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0), true);
    if (f == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    f->retries = (uint32_t)n;
    f->backoff_base_ms = (uint32_t)base;
    f->backoff_max_ms = (uint32_t)max;
    if (storage_set_func(c->srv, f) < 0) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
        return;
    }
    log_notice(&c->srv->log, "%s: function '%s' retries %" PRIu32 ", backoff %u ms to %u ms",
               c->peer, f->name, f->retries, f->backoff_base_ms, f->backoff_max_ms);
    conn_printf(c, "OK\r\n");
}

/*
 * maxage FUNCTION [SECONDS] and uniquefor FUNCTION [SECONDS]: a job of the
 * function not started within SECONDS of its submit (or run-at time)
 * expires; an ended job's unique key stays taken SECONDS after its end. 0
 * gives it back to --max-queue-age or --unique-for. Stored with the
 * function (SQLite). Alone, it prints the function's own: "OK SECONDS".
 */
static void
admin_func_secs(struct conn *c, const struct textcmd *cmd, bool unique_for)
{
    const char *name = unique_for ? "uniquefor" : "maxage";
    unsigned argc = textcmd_argc(cmd);
    uint64_t n = 0;
    struct func *f;
    uint32_t *field;

    if (argc == 0 || argc > 2) {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+%s+FUNCTION+[SECONDS]\r\n", name);
        return;
    }
    if (!admin_name_ok(c, WORD(cmd, 0), WORD_LEN(cmd, 0)))
        return;
    if (argc == 1) {
        f = queue_func(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0), false);
        conn_printf(c, "OK %" PRIu32 "\n", f == NULL ? 0 : unique_for ? f->unique_for : f->max_age);
        return;
    }
    if (decimal_parse(WORD(cmd, 1), WORD_LEN(cmd, 1), 86400 * 365, &n) != 0) {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+%s+FUNCTION+SECONDS+(0+to+31536000)\r\n",
                    name);
        return;
    }
    f = queue_func(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0), true);
    if (f == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    field = unique_for ? &f->unique_for : &f->max_age;
    *field = (uint32_t)n;
    if (storage_set_func(c->srv, f) < 0) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
        return;
    }
    log_notice(&c->srv->log, "%s: function '%s' %s %" PRIu32 " s", c->peer, f->name,
               unique_for ? "unique-for" : "max-queue-age", *field);
    conn_printf(c, "OK\r\n");
}

/* show jobs detail: every job, dead and kept ones too, one line each. */
static void
show_detail(struct conn *c, const struct job *j)
{
    /* A dead or done job runs at no time: 0, as show job says (its time was a retry's). */
    conn_printf(c, "%s\t%s\t%s\t%s\t%" PRIu32 "\t%lld\t%d\t", job_handle(j), j->func->name,
                job_prio_name(j->prio), job_state_name(j), job_attempts(j),
                j->state == JOB_DEAD || j->state == JOB_DONE ? 0LL : (long long)job_when(j),
                j->background ? 1 : 0);
    print_escaped(c, job_unique(j), j->unique_len);
    conn_write(c, "\n", 1);
}

/*
 * maxqueue FUNCTION [ALL | HIGH NORMAL [LOW]]: no limit resets all three;
 * one sets all three; two set high and normal and clear low (gearmand).
 */
static void
admin_maxqueue(struct conn *c, const struct textcmd *cmd)
{
    unsigned argc = textcmd_argc(cmd);
    unsigned max[JOB_NPRIO] = {0, 0, 0};
    struct func *f;
    unsigned p;

    if (argc == 0) {
        conn_printf(c, INCOMPLETE("maxqueue"));
        return;
    }
    if (argc == 2) {
        max[0] = max[1] = max[2] = admin_limit(WORD(cmd, 1), WORD_LEN(cmd, 1));
    } else {
        for (p = 0; p < JOB_NPRIO && 1 + p < argc; p++)
            max[p] = admin_limit(WORD(cmd, 1 + p), WORD_LEN(cmd, 1 + p));
    }
    if (!admin_name_ok(c, WORD(cmd, 0), WORD_LEN(cmd, 0)))
        return;
    f = queue_func(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0), true);
    if (f == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    for (p = 0; p < JOB_NPRIO; p++)
        f->max_queue[p] = max[p];
    conn_printf(c, "OK\r\n");
}

static void
admin_cancel(struct conn *c, const struct textcmd *cmd)
{
    struct job *j;

    if (textcmd_argc(cmd) != 1) {
        conn_printf(c, "ERR UNKNOWN_COMMAND Unknown+server+commandcancel\r\n");
        return;
    }
    j = queue_find_job(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0));
    if (j == NULL) {
        conn_printf(c, "ERR UNKNOWN_JOB\r\n");
        return;
    }
    if (job_ended(j)) {
        conn_printf(c, "ERR JOB_ENDED the+job+has+ended%s\r\n",
                    j->state == JOB_DEAD ? ";+drop+dead+removes+it" : "");
        return;
    }
    log_notice(&c->srv->log, "%s: cancelled job %s of '%s'", c->peer, job_handle(j), j->func->name);
    lifecycle_cancel(c->srv, j);
    conn_printf(c, "OK\r\n");
}

#define PRIORITY_USAGE "ERR INVALID_ARGUMENTS usage:+priority+HANDLE+high|normal|low\r\n"

/*
 * priority HANDLE high|normal|low: a job that waits (queued, scheduled, or
 * waiting for its store commit) gets that priority; a queued one moves to
 * the tail of its new list. A stored job's row is rewritten too, so a
 * restart keeps it.
 */
static void
admin_priority(struct conn *c, const struct textcmd *cmd)
{
    struct srv *srv = c->srv;
    struct job *j;
    unsigned old;
    int p;

    if (textcmd_argc(cmd) != 2) {
        conn_printf(c, PRIORITY_USAGE);
        return;
    }
    p = job_prio_named(WORD(cmd, 1), WORD_LEN(cmd, 1));
    if (p < 0) {
        conn_printf(c, PRIORITY_USAGE);
        return;
    }
    j = queue_find_job(&srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0));
    if (j == NULL) {
        conn_printf(c, "ERR UNKNOWN_JOB\r\n");
        return;
    }
    if (j->state == JOB_RUNNING || j->state == JOB_SETTLING || j->state == JOB_DEAD ||
        j->state == JOB_DONE) {
        conn_printf(c, "ERR JOB_NOT_QUEUED the+job+is+%s\r\n", job_state_name(j));
        return;
    }
    old = j->prio;
    queue_set_prio(&srv->queue, j, (enum job_prio)p); /* cannot fail: the job waits */
    if (old != (unsigned)p)
        storage_update(srv, j); /* the row gets the new priority with the next commit */
    log_notice(&srv->log, "%s: job %s of '%s' moved from %s to %s priority", c->peer, job_handle(j),
               j->func->name, job_prio_name(old), job_prio_name((unsigned)p));
    conn_printf(c, "OK\r\n");
}

static void
admin_create(struct conn *c, const struct textcmd *cmd)
{
    if (textcmd_argc(cmd) < 1) {
        conn_printf(c, INCOMPLETE("create"));
        return;
    }
    if (!admin_name_ok(c, WORD(cmd, 0), WORD_LEN(cmd, 0)))
        return;
    if (queue_func(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0), true) == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    conn_printf(c, "OK\r\n");
}

/* Unlike gearmand, the dropped function's queued jobs go too: nothing is left orphaned. */
static void
admin_drop(struct conn *c, const struct textcmd *cmd)
{
    struct func *f;
    struct job *j;

    if (textcmd_argc(cmd) < 1) {
        conn_printf(c, INCOMPLETE("drop"));
        return;
    }
    f = queue_func(&c->srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0), false);
    if (f == NULL) {
        conn_printf(c, "ERR function not found\r\n");
        return;
    }
    if (f->nworkers > 0 || f->nrunning > 0) {
        conn_printf(c, "ERR there are still connected workers or executing clients\r\n");
        return;
    }
    if (f->npending > 0) {
        /* Their commit would land on the freed function; it is milliseconds away. */
        conn_printf(c, "ERR there are still jobs waiting for the store to commit them\r\n");
        return;
    }
    log_notice(&c->srv->log, "%s: dropped function '%s' with %u jobs", c->peer, f->name,
               queue_total(f));
    while ((j = queue_first_idle(&c->srv->queue, f)) != NULL)
        lifecycle_cancel(c->srv, j);
    while ((j = TAILQ_FIRST(&f->dead)) != NULL)
        lifecycle_drop_ended(c->srv, j);
    if (f->nkept > 0) {
        struct job *next;

        for (j = TAILQ_FIRST(&c->srv->queue.kept); j != NULL; j = next) {
            next = TAILQ_NEXT(j, link);
            if (j->func == f)
                lifecycle_drop_ended(c->srv, j);
        }
    }
    if (f->retries != 0 || f->backoff_base_ms != 0 || f->max_age != 0 || f->unique_for != 0 ||
        f->flow != NULL) {
        char ferr[64];

        /* Its flow settings go too (flow_ctl frees them), else a replay makes it again. */
        if (f->flow != NULL)
            (void)flow_ctl_apply(c->srv, f, "off resumed", false, ferr, sizeof(ferr));
        f->retries = f->backoff_base_ms = f->backoff_max_ms = 0;
        f->max_age = f->unique_for = 0;
        (void)storage_set_func(c->srv, f); /* forget its settings in the store too */
    }
    if (queue_total(f) > 0) {
        /* Stored jobs settle until their deletion commits; the function must outlive them. */
        conn_printf(c, "ERR its jobs are cancelled but their deletion is not committed yet; "
                       "try again\r\n");
        return;
    }
    queue_drop_func(&c->srv->queue, f);
    conn_printf(c, "OK\r\n");
}

static void
admin_shutdown(struct conn *c, const struct textcmd *cmd)
{
    bool graceful = textcmd_argc(cmd) >= 1 && WORD_LEN(cmd, 0) == 8 &&
                    strncasecmp(WORD(cmd, 0), "graceful", 8) == 0;

    if (textcmd_argc(cmd) >= 1 && !graceful) {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+shutdown+[graceful]\r\n");
        return;
    }
    log_notice(&c->srv->log, "%s: shutdown%s requested", c->peer, graceful ? " graceful" : "");
    conn_printf(c, "OK\r\n");
    srv_stop(c->srv, graceful);
}

/*
 * stats: every counter as a Prometheus sample, "name{labels} value", one a
 * line, then ".". Rendered into a buffer of its own first, so that running
 * out of memory half way answers an ERR rather than a listing cut short.
 */
static void
admin_stats(struct conn *c)
{
    struct evbuffer *buf = evbuffer_new();

    if (buf == NULL || stats_render(c->srv, buf, false) < 0) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        evbuffer_free(buf);
        return;
    }
    evbuffer_add(buf, ".\n", 2);
    conn_write(c, evbuffer_pullup(buf, -1), evbuffer_get_length(buf));
    evbuffer_free(buf);
}

/* An error line: ERR CODE TEXT, with TEXT's blanks as '+'. */
static void
admin_err(struct conn *c, const char *code, const char *text)
{
    char buf[256];
    size_t i;

    snprintf(buf, sizeof(buf), "%s", text);
    for (i = 0; buf[i] != '\0'; i++)
        if (buf[i] == ' ' || buf[i] == '\r' || buf[i] == '\n')
            buf[i] = '+';
    conn_printf(c, "ERR %s %s\r\n", code, buf);
}

/*
 * limit [FUNCTION [SETTINGS...]], pause FUNCTION, resume FUNCTION: flow
 * control (flow_ctl.c). Without settings, one line per function (every
 * function with settings, or the one named), then ".". The settings are
 * the rest of the line, so they are not bound by TEXTCMD_MAX_WORDS.
 */
static void
admin_flow(struct conn *c, const struct textcmd *cmd, const char *line, size_t len)
{
    unsigned argc = textcmd_argc(cmd);
    struct queue *q = &c->srv->queue;
    char buf[FLOW_SPEC_MAX + 256], err[200];
    const char *words = NULL;
    struct func *f;

    if (cmd->kind != TEXTCMD_LIMIT && argc != 1) {
        admin_err(c, "INVALID_ARGUMENTS",
                  cmd->kind == TEXTCMD_PAUSE ? "usage: pause FUNCTION" : "usage: resume FUNCTION");
        return;
    }
    if (argc == 0) {
        struct flow *fl;

        TAILQ_FOREACH (fl, &q->flows, all) {
            flow_ctl_show(c->srv, fl->func, buf, sizeof(buf));
            conn_printf(c, "%s\n", buf);
        }
        conn_printf(c, ".\n");
        return;
    }
    if (!admin_name_ok(c, WORD(cmd, 0), WORD_LEN(cmd, 0)))
        return;
    if (cmd->kind == TEXTCMD_PAUSE)
        words = "paused";
    else if (cmd->kind == TEXTCMD_RESUME)
        words = "resumed";
    else if (argc > 1)
        words = WORD(cmd, 1);
    f = queue_func(q, WORD(cmd, 0), WORD_LEN(cmd, 0), words != NULL);
    if (words == NULL) {
        if (f != NULL) {
            flow_ctl_show(c->srv, f, buf, sizeof(buf));
            conn_printf(c, "%s\n", buf);
        }
        conn_printf(c, ".\n");
        return;
    }
    if (f == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    if (cmd->kind == TEXTCMD_LIMIT) {
        size_t n = (size_t)(line + len - words);

        while (n > 0 && (words[n - 1] == '\r' || words[n - 1] == ' ' || words[n - 1] == '\t'))
            n--;
        if (n >= sizeof(buf)) {
            admin_err(c, "INVALID_ARGUMENTS", "settings too long");
            return;
        }
        memcpy(buf, words, n);
        buf[n] = '\0';
        words = buf;
    }
    if (flow_ctl_apply(c->srv, f, words, true, err, sizeof(err)) < 0) {
        admin_err(c,
                  strcmp(err, "out of memory") == 0 ? "MEMORY_ALLOCATION_FAILURE"
                                                    : "INVALID_ARGUMENTS",
                  err);
        return;
    }
    log_notice(&c->srv->log, "%s: %.*s '%s'%s%s", c->peer, (int)cmd->word_len[0], cmd->word[0],
               f->name, cmd->kind == TEXTCMD_LIMIT ? " " : "",
               cmd->kind == TEXTCMD_LIMIT ? words : "");
    durable_reply(c->srv, c, "OK\r\n"); /* once the settings' commit is done */
}

/* Commands that stop or change the server need an allowed peer. */
static bool
admin_privileged(const struct textcmd *cmd)
{
    enum textcmd_kind kind = cmd->kind;

    if (kind == TEXTCMD_LIMIT)
        return textcmd_argc(cmd) > 1; /* showing is not changing */
    return kind == TEXTCMD_PAUSE || kind == TEXTCMD_RESUME || kind == TEXTCMD_SHUTDOWN ||
           kind == TEXTCMD_CANCEL_JOB || kind == TEXTCMD_DROP_FUNCTION ||
           kind == TEXTCMD_MAXQUEUE || kind == TEXTCMD_RETRY || kind == TEXTCMD_RETRY_DEAD ||
           kind == TEXTCMD_DROP_DEAD || kind == TEXTCMD_PRIORITY || kind == TEXTCMD_MAXAGE ||
           kind == TEXTCMD_UNIQUEFOR;
}

void
admin_line(struct conn *c, const char *line, size_t len)
{
    struct textcmd cmd;

    textcmd_parse(line, len, &cmd);
    if ((admin_privileged(&cmd) ||
         (cmd.kind == TEXTCMD_SCHEDULE && schedule_admin_changes(line, len)) ||
         (cmd.kind == TEXTCMD_BATCH && batch_admin_changes(line, len))) &&
        !c->admin_ok) {
        log_warn(&c->srv->log, "%s: refused admin command '%.*s': peer not in --admin-allow",
                 c->peer, (int)cmd.word_len[0], cmd.word[0]);
        conn_printf(c, "ERR PERMISSION_DENIED %.*s+is+not+allowed+from+%s+(see+--admin-allow)\r\n",
                    (int)cmd.word_len[0], cmd.word[0], c->ip);
        return;
    }
    switch (cmd.kind) {
    case TEXTCMD_EMPTY: conn_printf(c, "ERR UNKNOWN_COMMAND Unknown+server+command\r\n"); break;
    case TEXTCMD_SHOW_UNKNOWN: conn_printf(c, "ERR UNKNOWN_SHOW_ARGUMENTS\r\n"); break;
    case TEXTCMD_STATUS: admin_status(c); break;
    case TEXTCMD_PRIORITYSTATUS: admin_prioritystatus(c); break;
    case TEXTCMD_WORKERS: admin_workers(c); break;
    case TEXTCMD_VERSION: conn_printf(c, "OK %s\n", DSJOB_VERSION_STRING); break;
    case TEXTCMD_GETPID: conn_printf(c, "OK %ld\n", (long)getpid()); break;
    case TEXTCMD_VERBOSE: conn_printf(c, "OK %s\n", log_level_name(c->srv->log.level)); break;
    case TEXTCMD_MAXQUEUE: admin_maxqueue(c, &cmd); break;
    case TEXTCMD_SHOW_JOBS:
        admin_show_jobs(c, false,
                        textcmd_argc(&cmd) == 1 && WORD_LEN(&cmd, 0) == 6 &&
                            strncasecmp(WORD(&cmd, 0), "detail", 6) == 0);
        break;
    case TEXTCMD_SHOW_UNIQUE_JOBS: admin_show_jobs(c, true, false); break;
    case TEXTCMD_SHOW_JOB: admin_show_one(c, &cmd); break;
    case TEXTCMD_SHOW_DEAD: admin_show_dead(c, &cmd); break;
    case TEXTCMD_SHOW_RESULT: admin_show_result(c, &cmd); break;
    case TEXTCMD_RETRY_DEAD: admin_dead(c, &cmd, true); break;
    case TEXTCMD_DROP_DEAD: admin_dead(c, &cmd, false); break;
    case TEXTCMD_RETRY: admin_retry(c, &cmd); break;
    case TEXTCMD_CANCEL_JOB: admin_cancel(c, &cmd); break;
    case TEXTCMD_CREATE_FUNCTION: admin_create(c, &cmd); break;
    case TEXTCMD_DROP_FUNCTION: admin_drop(c, &cmd); break;
    case TEXTCMD_SHUTDOWN: admin_shutdown(c, &cmd); break;
    case TEXTCMD_PRIORITY: admin_priority(c, &cmd); break;
    case TEXTCMD_STATS: admin_stats(c); break;
    case TEXTCMD_LIMIT:
    case TEXTCMD_PAUSE:
    case TEXTCMD_RESUME: admin_flow(c, &cmd, line, len); break;
    case TEXTCMD_MAXAGE: admin_func_secs(c, &cmd, false); break;
    case TEXTCMD_UNIQUEFOR: admin_func_secs(c, &cmd, true); break;
    case TEXTCMD_SCHEDULE: schedule_admin(c, line, len); break;
    case TEXTCMD_BATCH: batch_admin(c, line, len); break;
    case TEXTCMD_UNKNOWN:
        conn_printf(c, "ERR UNKNOWN_COMMAND Unknown+server+command%.*s\r\n", (int)cmd.word_len[0],
                    cmd.word[0]);
        break;
    }
}
