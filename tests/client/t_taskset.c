/*
 * The task set: 2,000 foreground jobs (make check; 10,000 in make
 * check-long's t_taskset_long, -DNJOBS) pipelined on one connection, with
 * every failure and exception reported (not only the first), callbacks
 * with their per-task pointer, background tasks, progress callbacks,
 * failover of a whole set when its first server is down, a server that
 * refuses a submit, and the timeout. Runs against dsjobd and, when it is
 * installed, gearmand 1.1.20.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/client.h>

#include "common.h"
#include "lib/peer.h"
#include "tap.h"

#ifndef NJOBS
#define NJOBS 2000
#endif

struct counts {
    int created;   /* created callbacks */
    int complete;  /* complete callbacks */
    int fail;      /* fail callbacks */
    int exception; /* exception callbacks */
    int wrong;     /* results that did not match the task's pointer */
    int status;    /* status callbacks */
    int data;      /* data callbacks */
    int warning;   /* warning callbacks */
};

static struct counts n;

static void
cb_created(struct dsjob_task *t, const char *handle, void *user)
{
    (void)t;
    (void)handle;
    (void)user;
    n.created++;
}

static void
cb_status(struct dsjob_task *t, unsigned num, unsigned den, void *user)
{
    (void)t;
    (void)num;
    (void)den;
    (void)user;
    n.status++;
}

static void
cb_data(struct dsjob_task *t, const void *data, size_t len, void *user)
{
    (void)t;
    (void)data;
    (void)len;
    (void)user;
    n.data++;
}

static void
cb_warning(struct dsjob_task *t, const void *data, size_t len, void *user)
{
    (void)t;
    (void)data;
    (void)len;
    (void)user;
    n.warning++;
}

static void
cb_complete(struct dsjob_task *t, const void *result, size_t len, void *user)
{
    char want[32];
    int wl = snprintf(want, sizeof(want), "%ld", (long)(intptr_t)user);

    (void)t;
    n.complete++;
    if (user == NULL)
        return;
    if ((size_t)wl != len || memcmp(result, want, len) != 0)
        n.wrong++;
}

static void
cb_fail(struct dsjob_task *t, void *user)
{
    (void)t;
    (void)user;
    n.fail++;
}

static void
cb_exception(struct dsjob_task *t, const char *text, size_t len, void *user)
{
    (void)t;
    (void)user;
    n.exception++;
    if (len != 6 || memcmp(text, "eleven", 6) != 0)
        n.wrong++;
}

static const struct dsjob_task_callbacks cbs = {
    cb_created, cb_status, cb_data, cb_warning, cb_complete, cb_fail, cb_exception,
};

static void
suite(const char *kind, int port)
{
    const char *const servers[] = {addr_of(port), NULL};
    pid_t w[3];
    struct dsjob_client *c = dsjob_client_new();
    struct dsjob_taskset *ts;
    int want_fail = 0, want_exc = 0, i, err, listed_ok = 1, dead;
    size_t k;

    for (i = 0; i < 3; i++)
        w[i] = worker_fork(servers);
    dsjob_client_add_server(c, addr_of(port));
    dsjob_client_set_timeout(c, 2000, 10000);
    ts = dsjob_taskset_new(c, &cbs);
    tap_ok(ts != NULL, "%s: task set made", kind);
    memset(&n, 0, sizeof(n));
    for (i = 1; i <= NJOBS; i++) {
        char payload[32];
        int len = snprintf(payload, sizeof(payload), "%d", i);

        if (dsjob_taskset_add(ts, "sometimes", NULL, payload, (size_t)len, DSJOB_PRIO_NORMAL, 0,
                              (void *)(intptr_t)i, NULL) != DSJOB_OK)
            break;
        if (i % 7 == 0)
            want_fail++;
        else if (i % 11 == 0)
            want_exc++;
    }
    tap_is_int((long long)dsjob_taskset_count(ts), NJOBS, "%s: %d tasks added", kind, NJOBS);
    err = dsjob_taskset_run(ts, 60000);
    tap_is_int(err, DSJOB_ERR_JOB_FAILED,
               "%s: run ends with DSJOB_ERR_JOB_FAILED since some failed", kind);
    tap_is_int(n.created, NJOBS, "%s: every task was created", kind);
    tap_is_int(n.complete, NJOBS - want_fail - want_exc, "%s: every other task completed", kind);
    tap_is_int(n.fail, want_fail, "%s: every WORK_FAIL reached the fail callback", kind);
    tap_is_int(n.exception, want_exc, "%s: every WORK_EXCEPTION reached the exception callback",
               kind);
    tap_is_int(n.wrong, 0, "%s: each result went to its own task", kind);
    tap_is_int((long long)dsjob_taskset_nfailed(ts), want_fail + want_exc,
               "%s: the failed list holds every failed job, not only the first", kind);
    for (k = 0; k < dsjob_taskset_nfailed(ts); k++) {
        struct dsjob_task *t = dsjob_taskset_failed(ts, k);
        long v = (long)(intptr_t)dsjob_task_user(t);
        int e = dsjob_task_error(t);

        if (!dsjob_task_done(t) || (v % 7 == 0 && e != DSJOB_ERR_JOB_FAILED) ||
            (v % 7 != 0 && (v % 11 != 0 || e != DSJOB_ERR_JOB_EXCEPTION ||
                            strcmp(dsjob_task_errmsg(t), "eleven") != 0)))
            listed_ok = 0;
    }
    tap_ok(listed_ok, "%s: each listed task says why it failed", kind);
    tap_ok(dsjob_taskset_failed(ts, dsjob_taskset_nfailed(ts)) == NULL, "%s: past the end is NULL",
           kind);
    dsjob_taskset_free(ts);

    /* Progress callbacks and background tasks in one set. */
    ts = dsjob_taskset_new(c, &cbs);
    memset(&n, 0, sizeof(n));
    dsjob_taskset_add(ts, "progress", NULL, "p", 1, DSJOB_PRIO_HIGH, 0, NULL, NULL);
    for (i = 0; i < 5; i++)
        dsjob_taskset_add(ts, "nobody", NULL, "bg", 2, DSJOB_PRIO_LOW, DSJOB_TASK_BACKGROUND, NULL,
                          NULL);
    err = dsjob_taskset_run(ts, 10000);
    tap_is_int(err, DSJOB_OK, "%s: progress and background tasks all end", kind);
    tap_ok(n.status == 2 && n.data == 1 && n.warning == 1 && n.complete == 1 && n.created == 6,
           "%s: status, data, warning and created callbacks (%d %d %d %d %d)", kind, n.status,
           n.data, n.warning, n.complete, n.created);
    dsjob_taskset_free(ts);

    /* A server that refuses a submit (a full queue: maxqueue). */
    {
        int fd = peer_connect(port);
        char buf[256];
        struct dsjob_task *t1, *t2;

        /* gearmand sets a limit only on a function that exists: make it first. */
        dsjob_client_submit_bg(c, "full", NULL, "0", 1, DSJOB_PRIO_NORMAL, NULL, 0);
        peer_admin(fd, "maxqueue full 2", false, buf, sizeof(buf));
        close(fd);
        ts = dsjob_taskset_new(c, &cbs);
        dsjob_taskset_add(ts, "full", NULL, "1", 1, DSJOB_PRIO_NORMAL, DSJOB_TASK_BACKGROUND, NULL,
                          &t1);
        dsjob_taskset_add(ts, "full", NULL, "2", 1, DSJOB_PRIO_NORMAL, DSJOB_TASK_BACKGROUND, NULL,
                          &t2);
        err = dsjob_taskset_run(ts, 10000);
        tap_ok(err == DSJOB_ERR_JOB_FAILED && dsjob_task_error(t1) == DSJOB_OK &&
                   dsjob_task_error(t2) == DSJOB_ERR_SERVER,
               "%s: an ERROR answer fails only the task it answers (%s)", kind,
               dsjob_task_errmsg(t2));
        dsjob_taskset_free(ts);
    }

    /* Timeout: a job no worker does. */
    ts = dsjob_taskset_new(c, &cbs);
    dsjob_taskset_add(ts, "nobody-fg", NULL, "x", 1, DSJOB_PRIO_NORMAL, 0, NULL, NULL);
    tap_is_int(dsjob_taskset_run(ts, 300), DSJOB_ERR_TIMEOUT, "%s: run times out with a task left",
               kind);
    dsjob_taskset_free(ts);
    dsjob_client_free(c);

    /* Failover: the first server is down; every task still completes. */
    c = dsjob_client_new();
    dead = free_port();
    dsjob_client_add_server(c, addr_of(dead));
    dsjob_client_add_server(c, addr_of(port));
    ts = dsjob_taskset_new(c, &cbs);
    memset(&n, 0, sizeof(n));
    for (i = 1; i <= 200; i++) {
        char key[32], payload[16];
        int len = snprintf(payload, sizeof(payload), "%d", i * 13 % 7 == 0 ? 1 : i * 13);

        snprintf(key, sizeof(key), "fo-%s-%d", kind, i);
        dsjob_taskset_add(ts, "echo", i % 2 ? key : NULL, payload, (size_t)len, DSJOB_PRIO_NORMAL,
                          0, NULL, NULL);
    }
    err = dsjob_taskset_run(ts, 20000);
    tap_ok(err == DSJOB_OK && n.complete == 200,
           "%s: with the first server down all 200 tasks fail over (%d)", kind, n.complete);
    dsjob_taskset_free(ts);
    dsjob_client_free(c);

    /* No server at all: every task fails with the connection error, and is listed. */
    c = dsjob_client_new();
    dsjob_client_add_server(c, addr_of(dead));
    ts = dsjob_taskset_new(c, &cbs);
    memset(&n, 0, sizeof(n));
    for (i = 0; i < 3; i++)
        dsjob_taskset_add(ts, "echo", NULL, "x", 1, DSJOB_PRIO_NORMAL, 0, NULL, NULL);
    err = dsjob_taskset_run(ts, 5000);
    tap_ok(err == DSJOB_ERR_JOB_FAILED && dsjob_taskset_nfailed(ts) == 3 && n.fail == 3 &&
               dsjob_task_error(dsjob_taskset_failed(ts, 2)) == DSJOB_ERR_SYS,
           "%s: unreachable: all 3 tasks fail with DSJOB_ERR_SYS (%s)", kind,
           dsjob_taskset_nfailed(ts) ? dsjob_task_errmsg(dsjob_taskset_failed(ts, 0)) : "");
    dsjob_taskset_free(ts);
    dsjob_client_free(c);

    for (i = 0; i < 3; i++)
        worker_reap(w[i]);
}

int
main(void)
{
    struct daemon d;
    struct gearmand g;

    alarm(280);
    signal(SIGPIPE, SIG_IGN);
    tap_ok(dsjob_taskset_new(NULL, NULL) == NULL, "a task set needs a client");
    daemon_start(&d, NULL);
    suite("dsjobd", d.port);
    daemon_stop(&d);
    if (gearmand_start(&g)) {
        suite("gearmand", g.port);
        gearmand_stop(&g);
    } else {
        tap_skip(1, "gearmand not installed");
    }
    return tap_done();
}
