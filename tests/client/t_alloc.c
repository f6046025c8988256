/*
 * One allocator for both libraries: set once, it serves a job that goes
 * from libdsjobclient through dsjobd to libdsjobworker in this process.
 * Then allocation failure, in the spirit of jansson's test_chaos: through
 * dsjob_set_alloc_funcs, fail the Nth allocation of a whole blocking
 * submit, of a task set run and of a worker's job, for every N until the
 * call needs no more; each must fail cleanly (an error, no crash, and
 * under the sanitizer build no leak) or succeed. Then one handle per
 * thread, four threads at once: the libraries keep no shared state.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

#include "common.h"
#include "lib/peer.h"
#include "tap.h"

static long alloc_left = -1; /* allocations before one fails; -1: never */
static long alloc_count;     /* allocations made */

static void *
chaos_malloc(size_t n)
{
    alloc_count++;
    if (alloc_left == 0)
        return NULL;
    if (alloc_left > 0)
        alloc_left--;
    return malloc(n);
}

static char addr[32]; /* the daemon's host:port, written before any thread starts */

static int
fn_upper(struct dsjob_job *job, void *user)
{
    size_t len, i;
    const char *p = dsjob_job_payload(job, &len);
    char out[16];

    (void)user;
    for (i = 0; i < len && i < sizeof(out); i++)
        out[i] = (char)(p[i] >= 'a' && p[i] <= 'z' ? p[i] - 'a' + 'A' : p[i]);
    return dsjob_job_set_result(job, out, i) == DSJOB_OK ? DSJOB_WORK_COMPLETE : DSJOB_WORK_FAIL;
}

/*
 * dsjob_set_alloc_funcs once, then a background job submitted with
 * libdsjobclient and done by libdsjobworker, both in this process: each
 * library's calls allocate through the counting allocator, and every
 * allocation goes back through its free.
 */
static void
suite_one_allocator(void)
{
    struct dsjob_client *c;
    struct dsjob_worker *w;
    struct dsjob_status st;
    char handle[DSJOB_HANDLE_MAX];
    long m0;
    int err;

    dsjob_set_alloc_funcs(count_malloc, count_free);
    c = dsjob_client_new();
    err = c == NULL ? DSJOB_ERR_NOMEM : dsjob_client_add_server(c, addr);
    if (err == DSJOB_OK)
        err = dsjob_client_submit_bg(c, "alloc_one", NULL, "abc", 3, DSJOB_PRIO_NORMAL, handle,
                                     sizeof(handle));
    tap_ok(err == DSJOB_OK && count_mallocs > 0,
           "after one dsjob_set_alloc_funcs, libdsjobclient's submit allocates through it (%ld)",
           count_mallocs);
    m0 = count_mallocs;
    w = dsjob_worker_new();
    err = w == NULL ? DSJOB_ERR_NOMEM : dsjob_worker_add_server(w, addr);
    if (err == DSJOB_OK)
        err = dsjob_worker_register(w, "alloc_one", fn_upper, NULL, 0);
    if (err == DSJOB_OK)
        err = dsjob_worker_work(w, 5000);
    tap_ok(err == DSJOB_OK && count_mallocs - m0 > 0,
           "libdsjobworker's calls, doing that job, allocate through the same allocator (%ld)",
           count_mallocs - m0);
    dsjob_worker_free(w);
    err = dsjob_client_status(c, handle, &st);
    tap_ok(err == DSJOB_OK && st.known == 0, "the job is done: dsjobd no longer knows it");
    dsjob_client_free(c);
    tap_is_int(count_frees, count_mallocs,
               "each of the %ld allocations of both libraries went back through its free",
               count_mallocs);
    dsjob_set_alloc_funcs(NULL, NULL);
}

/* One whole foreground submit; returns its result code (or NOMEM for a NULL handle). */
static int
one_submit(void)
{
    struct dsjob_client *c = dsjob_client_new();
    void *res = NULL;
    size_t len;
    int err;

    if (c == NULL)
        return DSJOB_ERR_NOMEM;
    err = dsjob_client_add_server(c, addr);
    dsjob_client_set_timeout(c, 2000, 5000);
    if (err == DSJOB_OK)
        err = dsjob_client_submit(c, "rev", "chaos", "abc", 3, DSJOB_PRIO_NORMAL, &res, &len);
    if (err == DSJOB_OK && (len != 3 || memcmp(res, "cba", 3) != 0))
        err = DSJOB_ERR_PROTO;
    dsjob_free(res);
    dsjob_client_free(c);
    return err;
}

static int
one_taskset(void)
{
    struct dsjob_client *c = dsjob_client_new();
    struct dsjob_taskset *ts;
    int err = DSJOB_OK, i;

    if (c == NULL)
        return DSJOB_ERR_NOMEM;
    if (dsjob_client_add_server(c, addr) != DSJOB_OK) {
        dsjob_client_free(c);
        return DSJOB_ERR_NOMEM;
    }
    ts = dsjob_taskset_new(c, NULL);
    if (ts == NULL) {
        dsjob_client_free(c);
        return DSJOB_ERR_NOMEM;
    }
    for (i = 0; i < 20 && err == DSJOB_OK; i++)
        err = dsjob_taskset_add(ts, "rev", NULL, "xy", 2, DSJOB_PRIO_NORMAL, 0, NULL, NULL);
    if (err == DSJOB_OK)
        err = dsjob_taskset_run(ts, 5000);
    dsjob_taskset_free(ts);
    dsjob_client_free(c);
    return err;
}

static int
fn_copy(struct dsjob_job *job, void *user)
{
    size_t len;
    const void *p = dsjob_job_payload(job, &len);

    (void)user;
    return dsjob_job_set_result(job, p, len) == DSJOB_OK ? DSJOB_WORK_COMPLETE : DSJOB_WORK_FAIL;
}

/*
 * Runs fn with the Nth allocation failing for N = 0, 1, ...; returns the N
 * where it needed no more. strict: a failed allocation must show as an
 * error (a task set or a worker may absorb one in a task's or job's result).
 */
static long
chaos(int (*fn)(void), const char *what, bool strict, int *bad)
{
    long n;

    for (n = 0; n < 2000; n++) {
        int err;

        alloc_count = 0;
        alloc_left = n;
        err = fn();
        alloc_left = -1;
        if (alloc_count <= n) {
            if (err != DSJOB_OK)
                (*bad)++;
            return n;
        }
        /* An allocation failed: the call must say so, not succeed by accident or hang. */
        if (err == DSJOB_OK && strict)
            (*bad)++;
    }
    tap_diag("%s: still allocating after 2000", what);
    (*bad)++;
    return n;
}

static int
worker_chaos(void)
{
    struct dsjob_worker *w;
    int err;

    long saved = alloc_left, count = alloc_count;
    struct dsjob_client *c;

    /* A job for it to do, submitted with the allocator working. */
    alloc_left = -1;
    c = dsjob_client_new();
    dsjob_client_add_server(c, addr);
    dsjob_client_submit_bg(c, "chaos_w", NULL, "p", 1, DSJOB_PRIO_NORMAL, NULL, 0);
    dsjob_client_free(c);
    alloc_left = saved;
    alloc_count = count;
    w = dsjob_worker_new();
    if (w == NULL)
        return DSJOB_ERR_NOMEM;
    err = dsjob_worker_add_server(w, addr);
    if (err == DSJOB_OK)
        err = dsjob_worker_register(w, "chaos_w", fn_copy, NULL, 0);
    if (err == DSJOB_OK)
        err = dsjob_worker_work(w, 300);
    dsjob_worker_free(w);
    return err == DSJOB_ERR_TIMEOUT ? DSJOB_OK : err;
}

static void *
thread_main(void *arg)
{
    int *fails = arg, i;

    for (i = 0; i < 50; i++) {
        int err = one_submit();

        if (err != DSJOB_OK) {
            if ((*fails)++ == 0)
                tap_diag("job %d of a thread: %s", i, dsjob_strerror(err));
        }
    }
    return NULL;
}

int
main(void)
{
    struct daemon d;
    pid_t w;
    int bad = 0, fails[4] = {0, 0, 0, 0}, i;
    long n;
    pthread_t th[4];
    const char *servers[2] = {NULL, NULL};

    alarm(200);
    signal(SIGPIPE, SIG_IGN);
    daemon_start(&d, NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", d.port);
    servers[0] = addr;
    suite_one_allocator();
    w = worker_fork(servers);
    dsjob_set_alloc_funcs(chaos_malloc, free);

    n = chaos(one_submit, "submit", true, &bad);
    tap_ok(bad == 0,
           "submit: each of its %ld allocations failing gives an error, and then it works", n);
    bad = 0;
    n = chaos(one_taskset, "taskset", false, &bad);
    tap_ok(bad == 0, "task set of 20: each of its %ld allocations may fail without a crash", n);
    bad = 0;
    n = chaos(worker_chaos, "worker", false, &bad);
    tap_ok(bad == 0, "worker: each of its %ld allocations may fail without a crash", n);

    dsjob_set_alloc_funcs(NULL, NULL);
    for (i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, thread_main, &fails[i]);
    for (i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    tap_ok(fails[0] + fails[1] + fails[2] + fails[3] == 0,
           "4 threads, one client each, 200 jobs: all complete");

    worker_reap(w);
    daemon_stop(&d);
    return tap_done();
}
