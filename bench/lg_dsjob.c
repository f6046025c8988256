/*
 * The libdsjobclient/libdsjobworker back end of the load generator: the
 * same four operations as lg_gearman.c, through our own libraries, so that
 * a run can tell the server's cost from libgearman's. Foreground clients
 * keep a fixed number of jobs in flight in one task set, adding a new task
 * from the complete callback of the one that finished; background clients
 * add a batch of background tasks and run the set until the batch's
 * JOB_CREATED replies are in. A task set keeps every task it ran until it
 * is freed, so each thread replaces its set (and so its connection) after
 * LG_DSJOB_GENERATION tasks, which bounds its memory on long runs.
 * Workers run dsjob_worker_run, as a program built on the library would
 * (it sends each result with the next GRAB_JOB_UNIQ), and a small thread
 * per worker calls dsjob_worker_stop once the scenario says stop.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep; built without config.h */

#include "loadgen.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

#define LG_DSJOB_GENERATION 20000 /* tasks run by one task set before it is replaced */
#define LG_RUN_SLICE_MS 200       /* dsjob_taskset_run slice between progress checks */

/* Per-thread state of a foreground client, reached from the callbacks. */
struct fg_state {
    struct lg_fg_args *a;
    struct dsjob_taskset *ts; /* the current generation's set */
    double *start;            /* submit time of the job in each slot */
    size_t added;             /* tasks added to the current set */
    int add_failed;           /* dsjob_taskset_add failed */
    uint64_t ended;           /* tasks ended, for the progress check */
};

static struct dsjob_client *
client_new(in_port_t port, char *err, size_t errlen)
{
    struct dsjob_client *c = dsjob_client_new();
    char addr[64];

    if (c == NULL) {
        snprintf(err, errlen, "dsjob_client_new failed");
        return NULL;
    }
    snprintf(addr, sizeof(addr), "%s:%u", LG_HOST, (unsigned)port);
    if (dsjob_client_add_server(c, addr) != DSJOB_OK) {
        snprintf(err, errlen, "add server '%s': %s", addr, dsjob_client_errmsg(c));
        dsjob_client_free(c);
        return NULL;
    }
    dsjob_client_set_timeout(c, LG_IO_TIMEOUT_MS, LG_IO_TIMEOUT_MS);
    /* bench/batch/run: every background job joins dsjobd batch $LG_BATCH. */
    if (getenv("LG_BATCH") != NULL && dsjob_client_set_batch(c, getenv("LG_BATCH")) != DSJOB_OK) {
        snprintf(err, errlen, "LG_BATCH: %s", dsjob_client_errmsg(c));
        dsjob_client_free(c);
        return NULL;
    }
    if (lg_tls_ca != NULL && dsjob_client_set_tls(c, lg_tls_ca, NULL, NULL, 0) != DSJOB_OK) {
        snprintf(err, errlen, "--tls-ca: %s", dsjob_client_errmsg(c));
        dsjob_client_free(c);
        return NULL;
    }
    return c;
}

static void
fg_add(struct fg_state *s, uintptr_t slot)
{
    s->start[slot] = lg_now();
    if (dsjob_taskset_add(s->ts, s->a->function, NULL, s->a->payload, s->a->len, DSJOB_PRIO_NORMAL,
                          0, (void *)slot, NULL) != DSJOB_OK)
        s->add_failed = 1;
    else
        s->added++;
}

static _Thread_local struct fg_state *cur_fg;

/* Ends one task; refills its slot unless stopping or the set is used up. */
static void
fg_end(struct dsjob_task *t, bool ok)
{
    struct fg_state *s = cur_fg;
    uintptr_t slot = (uintptr_t)dsjob_task_user(t);
    double us = (lg_now() - s->start[slot]) * 1e6;

    s->ended++;
    if (ok) {
        atomic_fetch_add(&s->a->sh->completed, 1);
        if (atomic_load(&s->a->sh->measuring))
            lg_lat_add(&s->a->lat, us);
    } else {
        atomic_fetch_add(&s->a->sh->errors, 1);
    }
    if (!atomic_load(&s->a->sh->stop) && s->added < LG_DSJOB_GENERATION)
        fg_add(s, slot);
}

static void
fg_complete(struct dsjob_task *t, const void *result, size_t len, void *user)
{
    (void)user;
    fg_end(t, len == cur_fg->a->len && memcmp(result, cur_fg->a->payload, len) == 0);
}

static void
fg_fail(struct dsjob_task *t, void *user)
{
    (void)user;
    fg_end(t, false);
}

static void
fg_exception(struct dsjob_task *t, const char *text, size_t len, void *user)
{
    (void)text;
    (void)len;
    (void)user;
    fg_end(t, false);
}

/*
 * Runs ts until every task has ended, in slices, failing when nothing
 * ended for LG_IO_TIMEOUT_MS. *ended is advanced by the callbacks.
 */
static int
run_set(struct dsjob_taskset *ts, const uint64_t *ended, char *err, size_t errlen)
{
    uint64_t seen = *ended;
    double last = lg_now();
    int r;

    for (;;) {
        r = dsjob_taskset_run(ts, LG_RUN_SLICE_MS);
        if (r == DSJOB_OK)
            return 0;
        if (r != DSJOB_ERR_TIMEOUT) {
            struct dsjob_task *t = dsjob_taskset_failed(ts, 0);

            snprintf(err, errlen, "task set run: %s (%s)", dsjob_strerror(r),
                     t != NULL ? dsjob_task_errmsg(t) : "no failed task");
            return -1;
        }
        if (*ended != seen) {
            seen = *ended;
            last = lg_now();
        } else if (lg_now() - last > LG_IO_TIMEOUT_MS / 1000.0) {
            snprintf(err, errlen, "task set run: no progress for %d ms", LG_IO_TIMEOUT_MS);
            return -1;
        }
    }
}

static int
lg_fg_client(struct lg_fg_args *a, char *err, size_t errlen)
{
    static const struct dsjob_task_callbacks cb = {
        .complete = fg_complete,
        .fail = fg_fail,
        .exception = fg_exception,
    };
    struct fg_state s = {.a = a};
    struct dsjob_client *c = client_new(a->port, err, errlen);
    int rc = 0;

    if (c == NULL)
        return -1;
    s.start = calloc((size_t)a->inflight, sizeof(*s.start));
    if (s.start == NULL) {
        snprintf(err, errlen, "out of memory");
        dsjob_client_free(c);
        return -1;
    }
    cur_fg = &s;
    /* One set per generation; the callbacks keep `inflight` tasks going. */
    while (rc == 0 && !atomic_load(&a->sh->stop)) {
        s.ts = dsjob_taskset_new(c, &cb);
        if (s.ts == NULL) {
            snprintf(err, errlen, "dsjob_taskset_new failed");
            rc = -1;
            break;
        }
        s.added = 0;
        for (uintptr_t i = 0; i < (uintptr_t)a->inflight; i++)
            fg_add(&s, i);
        if (s.add_failed) {
            snprintf(err, errlen, "dsjob_taskset_add failed");
            rc = -1;
        } else if (run_set(s.ts, &s.ended, err, errlen) != 0) {
            atomic_fetch_add(&a->sh->errors, 1);
            rc = -1;
        } else if (s.add_failed) {
            snprintf(err, errlen, "dsjob_taskset_add failed");
            rc = -1;
        }
        dsjob_taskset_free(s.ts);
        s.ts = NULL;
    }
    cur_fg = NULL;
    free(s.start);
    dsjob_client_free(c);
    return rc;
}

static void
bg_created(struct dsjob_task *t, const char *handle, void *user)
{
    uint64_t *n = user;

    (void)t;
    (void)handle;
    (*n)++;
}

static int
lg_bg_client(struct lg_bg_args *a, char *err, size_t errlen)
{
    static const struct dsjob_task_callbacks cb = {.created = bg_created};
    struct dsjob_client *c = client_new(a->port, err, errlen);
    struct dsjob_taskset *ts = NULL;
    uint64_t created = 0, in_set = 0;
    char unique[64];
    double t0 = lg_now();
    int rc = 0;

    if (c == NULL)
        return -1;
    a->done = 0;
    while (a->done < a->n && !atomic_load(&a->sh->stop)) {
        uint64_t b = a->n - a->done;

        lg_pace(a, t0, a->done);
        if (b > (uint64_t)a->batch)
            b = (uint64_t)a->batch;
        if (ts != NULL && in_set + b > LG_DSJOB_GENERATION) {
            dsjob_taskset_free(ts);
            ts = NULL;
        }
        if (ts == NULL) {
            ts = dsjob_taskset_new(c, &cb);
            in_set = 0;
            if (ts == NULL) {
                snprintf(err, errlen, "dsjob_taskset_new failed");
                rc = -1;
                break;
            }
        }
        for (uint64_t i = 0; i < b; i++) {
            lg_unique(unique, sizeof(unique), a->id, a->done + i);
            if (dsjob_taskset_add(ts, a->function, unique, a->payload, a->len, DSJOB_PRIO_NORMAL,
                                  DSJOB_TASK_BACKGROUND, &created, NULL) != DSJOB_OK) {
                snprintf(err, errlen, "dsjob_taskset_add failed");
                rc = -1;
                goto out;
            }
        }
        in_set += b;
        created = 0;
        if (run_set(ts, &created, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (created != b) {
            snprintf(err, errlen, "%llu of %llu submits acknowledged", (unsigned long long)created,
                     (unsigned long long)b);
            rc = -1;
            break;
        }
        a->done += b;
        atomic_fetch_add(&a->sh->acked, b);
    }
out:
    dsjob_taskset_free(ts);
    dsjob_client_free(c);
    return rc;
}

static int
echo_fn(struct dsjob_job *job, void *user)
{
    struct lg_worker_args *a = user;
    size_t n = 0;
    const void *p = dsjob_job_payload(job, &n);

    if (dsjob_job_set_result(job, p, n) != DSJOB_OK)
        return DSJOB_WORK_FAIL;
    lg_mark_unique(a->sh, dsjob_job_unique(job));
    atomic_fetch_add(&a->sh->worked, 1);
    return DSJOB_WORK_COMPLETE;
}

/* What a worker's stopper thread watches and whom it stops. */
struct stopper {
    struct lg_shared *sh;   /* stop_workers is the signal */
    struct dsjob_worker *w; /* stopped with dsjob_worker_stop */
    atomic_bool done;       /* run has returned by itself: stop watching */
};

static void *
stopper_main(void *arg)
{
    struct stopper *s = arg;
    struct timespec ts = {0, LG_WORKER_POLL_MS * 1000000L / 10};

    while (!atomic_load(&s->sh->stop_workers) && !atomic_load(&s->done))
        nanosleep(&ts, NULL);
    dsjob_worker_stop(s->w);
    return NULL;
}

static int
lg_worker(struct lg_worker_args *a, char *err, size_t errlen)
{
    struct dsjob_worker *w = dsjob_worker_new();
    char addr[64];
    int r, rc = 0, added = 0;

    for (int i = 0; w != NULL && i < a->nports; i++) {
        snprintf(addr, sizeof(addr), "%s:%u", LG_HOST, (unsigned)a->ports[i]);
        if (dsjob_worker_add_server(w, addr) != DSJOB_OK)
            break;
        added++;
    }
    if (w == NULL || added < a->nports ||
        (lg_tls_ca != NULL && dsjob_worker_set_tls(w, lg_tls_ca, NULL, NULL, 0) != DSJOB_OK) ||
        dsjob_worker_register(w, a->function, echo_fn, a, 0) != DSJOB_OK) {
        snprintf(err, errlen, "worker setup: %s", w ? dsjob_worker_errmsg(w) : "out of memory");
        dsjob_worker_free(w);
        atomic_fetch_add(a->ready, 1);
        return -1;
    }
    dsjob_worker_set_timeout(w, LG_IO_TIMEOUT_MS, LG_IO_TIMEOUT_MS);
    /* The first call connects and sends CAN_DO ahead of its GRAB_JOB_UNIQ. */
    r = dsjob_worker_work(w, 1);
    atomic_fetch_add(a->ready, 1);
    if (r == DSJOB_OK || r == DSJOB_ERR_TIMEOUT) {
        struct stopper s = {.sh = a->sh, .w = w};
        pthread_t t;

        atomic_init(&s.done, false);
        if (pthread_create(&t, NULL, stopper_main, &s) != 0) {
            snprintf(err, errlen, "cannot start the worker's stopper thread");
            dsjob_worker_free(w);
            return -1;
        }
        r = dsjob_worker_run(w);
        atomic_store(&s.done, true);
        pthread_join(t, NULL);
    }
    if (r != DSJOB_OK && r != DSJOB_ERR_TIMEOUT) {
        snprintf(err, errlen, "work: %s (%s)", dsjob_strerror(r), dsjob_worker_errmsg(w));
        atomic_fetch_add(&a->sh->errors, 1);
        rc = -1;
    }
    dsjob_worker_free(w);
    return rc;
}

static int
lg_one_job(in_port_t port, const char *function, const void *payload, size_t len, double *us,
           char *err, size_t errlen)
{
    struct dsjob_client *c = client_new(port, err, errlen);
    void *r = NULL;
    size_t rlen = 0;
    double t0;
    int e;

    if (c == NULL)
        return -1;
    t0 = lg_now();
    e = dsjob_client_submit(c, function, NULL, payload, len, DSJOB_PRIO_NORMAL, &r, &rlen);
    *us = (lg_now() - t0) * 1e6;
    if (e != DSJOB_OK || rlen != len || (len > 0 && memcmp(r, payload, len) != 0)) {
        snprintf(err, errlen, "submit: %s: %s (%zu bytes back)", dsjob_strerror(e),
                 dsjob_client_errmsg(c), rlen);
        dsjob_free(r);
        dsjob_client_free(c);
        return -1;
    }
    dsjob_free(r);
    dsjob_client_free(c);
    return 0;
}

const struct lg_backend lg_dsjob_backend = {
    .name = "dsjob",
    .fg_client = lg_fg_client,
    .bg_client = lg_bg_client,
    .worker = lg_worker,
    .one_job = lg_one_job,
};
