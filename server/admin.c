/*
 * Admin commands. Each reply is written whole into the connection's output
 * in the loop turn that read the line; listings end with a line holding a
 * single ".". Commands that stop or change the server (shutdown, cancel
 * job, drop function, maxqueue, priority) are refused to peers outside
 * --admin-allow (loopback and the unix socket by default): gearmand lets
 * anyone do them.
 */
#include "config.h"
#include "admin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conn.h"
#include "lifecycle.h"
#include "proto/decimal.h"
#include "proto/textcmd.h"
#include "queue.h"
#include "srv.h"
#include "storage.h"

#ifndef HAVE_STORAGE_UPDATE
/*
 * TEMPORARY, until the merge with main: storage_update (server/storage.h)
 * rewrites a stored job's row (priority, when, attempts) in the next batch.
 * Until it is there, a stored job's new priority is kept in memory only and
 * a restart brings back the old one. The merge replaces this stub.
 */
static int
storage_update(struct storage *s, struct job *j)
{
    (void)s;
    (void)j;
    return 0;
}
#endif

#define WORD(cmd, i) (cmd)->word[(cmd)->first_arg + (i)]
#define WORD_LEN(cmd, i) (cmd)->word_len[(cmd)->first_arg + (i)]

static void
admin_status(struct conn *c)
{
    struct func *f;

    TAILQ_FOREACH (f, &c->srv->queue.func_order, order)
        conn_printf(c, "%s\t%u\t%u\t%u\n", f->name, queue_total(f), f->nrunning + f->nsettling,
                    f->nworkers);
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

static void
show_job(struct conn *c, const struct job *j, bool unique)
{
    if (unique)
        conn_printf(c, "%s\n", job_unique(j));
    else /* handle, attempts, ignored (cancelled), and gearmand's "queued" column */
        conn_printf(c, "%s\t%" PRIu32 "\t%u\t%u\n", job_handle(j), job_attempts(j),
                    j->cancelled ? 1u : 0u, j->background ? 1u : 0u);
}

/* Queued, scheduled and running jobs, as gearmand lists them (no header line). */
static void
admin_show_jobs(struct conn *c, bool unique)
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
                show_job(c, j, unique);
        }
    }
    for (i = 0; i < q->scheduled.len; i++)
        show_job(c, q->scheduled.elems[i], unique);
    TAILQ_FOREACH (w, &c->srv->conns, link) {
        struct job *j;

        TAILQ_FOREACH (j, &w->worker.held, link)
            show_job(c, j, unique);
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
    static const char *const names[JOB_NPRIO] = {"high", "normal", "low"};
    struct srv *srv = c->srv;
    struct job *j;
    unsigned old;
    int p;

    if (textcmd_argc(cmd) != 2) {
        conn_printf(c, PRIORITY_USAGE);
        return;
    }
    for (p = 0; p < JOB_NPRIO; p++)
        if (WORD_LEN(cmd, 1) == strlen(names[p]) &&
            strncasecmp(WORD(cmd, 1), names[p], WORD_LEN(cmd, 1)) == 0)
            break;
    if (p == JOB_NPRIO) {
        conn_printf(c, PRIORITY_USAGE);
        return;
    }
    j = queue_find_job(&srv->queue, WORD(cmd, 0), WORD_LEN(cmd, 0));
    if (j == NULL) {
        conn_printf(c, "ERR UNKNOWN_JOB\r\n");
        return;
    }
    if (j->state == JOB_RUNNING || j->state == JOB_SETTLING) {
        conn_printf(c, "ERR JOB_NOT_QUEUED the+job+is+%s\r\n",
                    j->state == JOB_RUNNING ? "running" : "done");
        return;
    }
    old = j->prio;
    if (old != (unsigned)p && j->stored) {
        int rc;

        /* The row is written with the new priority; the job moves only once that is queued. */
        j->prio = (uint8_t)p;
        rc = storage_update(&srv->storage, j);
        j->prio = (uint8_t)old;
        if (rc < 0) {
            conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
            return;
        }
    }
    queue_set_prio(&srv->queue, j, (enum job_prio)p); /* cannot fail: the job waits */
    log_notice(&srv->log, "%s: job %s of '%s' moved from %s to %s priority", c->peer, job_handle(j),
               j->func->name, names[old], names[p]);
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

/* Commands that stop or change the server need an allowed peer. */
static bool
admin_privileged(enum textcmd_kind kind)
{
    return kind == TEXTCMD_SHUTDOWN || kind == TEXTCMD_CANCEL_JOB ||
           kind == TEXTCMD_DROP_FUNCTION || kind == TEXTCMD_MAXQUEUE || kind == TEXTCMD_PRIORITY;
}

void
admin_line(struct conn *c, const char *line, size_t len)
{
    struct textcmd cmd;

    textcmd_parse(line, len, &cmd);
    if (admin_privileged(cmd.kind) && !c->admin_ok) {
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
    case TEXTCMD_SHOW_JOBS: admin_show_jobs(c, false); break;
    case TEXTCMD_SHOW_UNIQUE_JOBS: admin_show_jobs(c, true); break;
    case TEXTCMD_CANCEL_JOB: admin_cancel(c, &cmd); break;
    case TEXTCMD_CREATE_FUNCTION: admin_create(c, &cmd); break;
    case TEXTCMD_DROP_FUNCTION: admin_drop(c, &cmd); break;
    case TEXTCMD_SHUTDOWN: admin_shutdown(c, &cmd); break;
    case TEXTCMD_PRIORITY: admin_priority(c, &cmd); break;
    case TEXTCMD_UNKNOWN:
        conn_printf(c, "ERR UNKNOWN_COMMAND Unknown+server+command%.*s\r\n", (int)cmd.word_len[0],
                    cmd.word[0]);
        break;
    }
}
