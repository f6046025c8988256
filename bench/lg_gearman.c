/*
 * The libgearman back end of the load generator: each operation makes its
 * own gearman_client_st or gearman_worker_st, so a thread owns one
 * connection. Foreground clients keep a fixed number of jobs in flight by
 * adding a new task from the complete callback of the one that finished;
 * background clients pipeline a batch of submits and then read the batch's
 * JOB_CREATED replies. This is the back end that any Gearman user would
 * have, so it is the fair one for comparing dsjobd with gearmand.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep; built without config.h */

#include "loadgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libgearman-1.0/gearman.h>

/* Per-thread state of a foreground client, reached from the callbacks. */
struct fg_state {
    struct lg_fg_args *a;
    gearman_client_st *c;
    double *start;   /* submit time of the job in each slot */
    int outstanding; /* tasks added and not finished */
    int add_failed;  /* gearman_client_add_task failed */
};

static _Thread_local struct fg_state *cur_fg;

static int
fg_add(struct fg_state *s, uintptr_t slot)
{
    gearman_return_t ret;
    gearman_task_st *t;

    s->start[slot] = lg_now();
    t = gearman_client_add_task(s->c, NULL, (void *)slot, s->a->function, NULL, s->a->payload,
                                s->a->len, &ret);
    if (t == NULL) {
        s->add_failed = 1;
        return -1;
    }
    s->outstanding++;
    return 0;
}

static gearman_return_t
fg_finished(gearman_task_st *task, bool ok)
{
    struct fg_state *s = cur_fg;
    uintptr_t slot = (uintptr_t)gearman_task_context(task);
    double us = (lg_now() - s->start[slot]) * 1e6;

    s->outstanding--;
    if (ok) {
        atomic_fetch_add(&s->a->sh->completed, 1);
        if (atomic_load(&s->a->sh->measuring))
            lg_lat_add(&s->a->lat, us);
    } else {
        atomic_fetch_add(&s->a->sh->errors, 1);
    }
    if (!atomic_load(&s->a->sh->stop))
        fg_add(s, slot);
    return GEARMAN_SUCCESS;
}

static gearman_return_t
fg_complete(gearman_task_st *task)
{
    return fg_finished(task, true);
}

static gearman_return_t
fg_fail(gearman_task_st *task)
{
    return fg_finished(task, false);
}

static gearman_client_st *
client_new(in_port_t port, char *err, size_t errlen)
{
    gearman_client_st *c = gearman_client_create(NULL);

    if (c == NULL) {
        snprintf(err, errlen, "gearman_client_create failed");
        return NULL;
    }
    if (gearman_client_add_server(c, LG_HOST, port) != GEARMAN_SUCCESS) {
        snprintf(err, errlen, "add server: %s", gearman_client_error(c));
        gearman_client_free(c);
        return NULL;
    }
    gearman_client_set_timeout(c, LG_IO_TIMEOUT_MS);
    gearman_client_add_options(c, GEARMAN_CLIENT_FREE_TASKS);
    return c;
}

static int
lg_fg_client(struct lg_fg_args *a, char *err, size_t errlen)
{
    struct fg_state s = {.a = a};
    gearman_return_t ret;
    int rc = 0;

    s.c = client_new(a->port, err, errlen);
    if (s.c == NULL)
        return -1;
    s.start = calloc((size_t)a->inflight, sizeof(*s.start));
    if (s.start == NULL) {
        gearman_client_free(s.c);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    gearman_client_set_complete_fn(s.c, fg_complete);
    gearman_client_set_fail_fn(s.c, fg_fail);
    gearman_client_set_exception_fn(s.c, fg_fail);
    cur_fg = &s;
    for (uintptr_t i = 0; i < (uintptr_t)a->inflight; i++)
        fg_add(&s, i);
    /* Callbacks refill the task list; run until stop and every task ended. */
    while (s.outstanding > 0) {
        ret = gearman_client_run_tasks(s.c);
        if (ret != GEARMAN_SUCCESS) {
            snprintf(err, errlen, "run tasks: %s", gearman_client_error(s.c));
            atomic_fetch_add(&a->sh->errors, 1);
            rc = -1;
            break;
        }
        if (s.add_failed) {
            snprintf(err, errlen, "add task: %s", gearman_client_error(s.c));
            rc = -1;
            break;
        }
    }
    cur_fg = NULL;
    free(s.start);
    gearman_client_free(s.c);
    return rc;
}

static int
lg_bg_client(struct lg_bg_args *a, char *err, size_t errlen)
{
    gearman_client_st *c = client_new(a->port, err, errlen);
    char unique[64];
    uint64_t sent = 0;
    gearman_return_t ret;
    int rc = 0;

    double t0 = lg_now();

    a->done = 0;
    if (c == NULL)
        return -1;
    while (sent < a->n && !atomic_load(&a->sh->stop)) {
        uint64_t b = a->n - sent;

        lg_pace(a, t0, sent);
        if (b > (uint64_t)a->batch)
            b = (uint64_t)a->batch;
        for (uint64_t i = 0; i < b; i++) {
            lg_unique(unique, sizeof(unique), a->id, sent + i);
            if (gearman_client_add_task_background(c, NULL, NULL, a->function, unique, a->payload,
                                                   a->len, &ret) == NULL) {
                snprintf(err, errlen, "add task: %s", gearman_client_error(c));
                rc = -1;
                goto out;
            }
        }
        ret = gearman_client_run_tasks(c);
        if (ret != GEARMAN_SUCCESS) {
            snprintf(err, errlen, "run tasks: %s", gearman_client_error(c));
            rc = -1;
            goto out;
        }
        sent += b;
        a->done = sent;
        atomic_fetch_add(&a->sh->acked, b);
    }
out:
    gearman_client_free(c);
    return rc;
}

static void *
echo_fn(gearman_job_st *job, void *context, size_t *result_size, gearman_return_t *ret_ptr)
{
    struct lg_worker_args *a = context;
    size_t n = gearman_job_workload_size(job);
    void *r = malloc(n ? n : 1);

    if (r == NULL) {
        *ret_ptr = GEARMAN_WORK_FAIL;
        return NULL;
    }
    memcpy(r, gearman_job_workload(job), n);
    *result_size = n;
    *ret_ptr = GEARMAN_SUCCESS;
    lg_mark_unique(a->sh, gearman_job_unique(job));
    atomic_fetch_add(&a->sh->worked, 1);
    return r;
}

static int
lg_worker(struct lg_worker_args *a, char *err, size_t errlen)
{
    gearman_worker_st *w = gearman_worker_create(NULL);
    gearman_return_t ret;
    int rc = 0;

    if (w == NULL) {
        snprintf(err, errlen, "gearman_worker_create failed");
        atomic_fetch_add(a->ready, 1);
        return -1;
    }
    for (int i = 0; i < a->nports; i++) {
        if (gearman_worker_add_server(w, LG_HOST, a->ports[i]) != GEARMAN_SUCCESS) {
            snprintf(err, errlen, "worker add server %u: %s", (unsigned)a->ports[i],
                     gearman_worker_error(w));
            gearman_worker_free(w);
            atomic_fetch_add(a->ready, 1);
            return -1;
        }
    }
    if (gearman_worker_add_function(w, a->function, 0, echo_fn, a) != GEARMAN_SUCCESS) {
        snprintf(err, errlen, "worker setup: %s", gearman_worker_error(w));
        gearman_worker_free(w);
        atomic_fetch_add(a->ready, 1);
        return -1;
    }
    /* An idle worker wakes this often to look at the stop flag. */
    gearman_worker_set_timeout(w, LG_WORKER_POLL_MS);
    /* Register now, so the caller knows the function exists on the server. */
    ret = gearman_worker_echo(w, "ready", 5);
    atomic_fetch_add(a->ready, 1);
    if (ret != GEARMAN_SUCCESS) {
        snprintf(err, errlen, "worker echo: %s", gearman_worker_error(w));
        gearman_worker_free(w);
        return -1;
    }
    while (!atomic_load(&a->sh->stop_workers)) {
        ret = gearman_worker_work(w);
        if (ret == GEARMAN_SUCCESS || ret == GEARMAN_TIMEOUT || ret == GEARMAN_IO_WAIT ||
            ret == GEARMAN_NO_JOBS)
            continue;
        snprintf(err, errlen, "work: %s", gearman_worker_error(w));
        atomic_fetch_add(&a->sh->errors, 1);
        rc = -1;
        break;
    }
    gearman_worker_free(w);
    return rc;
}

static int
lg_one_job(in_port_t port, const char *function, const void *payload, size_t len, double *us,
           char *err, size_t errlen)
{
    gearman_client_st *c = client_new(port, err, errlen);
    gearman_return_t ret;
    size_t rlen = 0;
    double t0;
    void *r;

    if (c == NULL)
        return -1;
    t0 = lg_now();
    r = gearman_client_do(c, function, NULL, payload, len, &rlen, &ret);
    *us = (lg_now() - t0) * 1e6;
    if (ret != GEARMAN_SUCCESS || rlen != len ||
        (len > 0 && (r == NULL || memcmp(r, payload, len) != 0))) {
        snprintf(err, errlen, "do: %s (%zu bytes back)", gearman_client_error(c), rlen);
        free(r);
        gearman_client_free(c);
        return -1;
    }
    free(r);
    gearman_client_free(c);
    return 0;
}

const struct lg_backend lg_gearman_backend = {
    .name = "gearman",
    .fg_client = lg_fg_client,
    .bg_client = lg_bg_client,
    .worker = lg_worker,
    .one_job = lg_one_job,
};
