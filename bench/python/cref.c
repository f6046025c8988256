/*
 * cref: the C side of bench/python/run, the reference figures the Python
 * package is measured against, one shape per mode, each printing
 * "SECONDS CPU" (wall time of the measured part, and the CPU time the
 * process spent in it, user and system) on stdout:
 *
 *   cref bg SERVER N            N background submits pipelined on one task set
 *   cref fg SERVER N            N foreground round trips, one at a time
 *   cref inflight SERVER N K    N foreground jobs, K in flight at once (task sets of K)
 *   cref worker SERVER C        a no-op worker for "noop" with C threads, until SIGTERM
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

static double
clock_s(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double
now(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

static struct dsjob_worker *volatile the_worker;

static void
on_term(int sig)
{
    (void)sig;
    if (the_worker != NULL)
        dsjob_worker_stop(the_worker);
}

static int
noop(struct dsjob_job *job, void *user)
{
    (void)job;
    (void)user;
    return DSJOB_WORK_COMPLETE;
}

static int
run_tasks(struct dsjob_client *c, long n, long k, unsigned flags)
{
    long done = 0;

    while (done < n) {
        struct dsjob_taskset *ts = dsjob_taskset_new(c, NULL);
        long i, m = n - done < k ? n - done : k;
        int err;

        if (ts == NULL)
            return 1;
        for (i = 0; i < m; i++)
            if (dsjob_taskset_add(ts, "noop", NULL, "x", 1, DSJOB_PRIO_NORMAL, flags, NULL, NULL) !=
                DSJOB_OK)
                return 1;
        err = dsjob_taskset_run(ts, 0);
        dsjob_taskset_free(ts);
        if (err != DSJOB_OK) {
            fprintf(stderr, "cref: %s\n", dsjob_strerror(err));
            return 1;
        }
        done += m;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct dsjob_client *c;
    double t0, cpu0;
    long n, i;

    if (argc < 4) {
        fputs("usage: cref bg|fg|inflight|worker SERVER N [K]\n", stderr);
        return 2;
    }
    n = atol(argv[3]);
    if (strcmp(argv[1], "worker") == 0) {
        struct dsjob_worker *w = dsjob_worker_new();
        struct sigaction sa;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
        if (w == NULL || dsjob_worker_add_server(w, argv[2]) != DSJOB_OK ||
            dsjob_worker_register(w, "noop", noop, NULL, 0) != DSJOB_OK ||
            dsjob_worker_set_concurrency(w, (int)n) != DSJOB_OK)
            return 1;
        the_worker = w;
        i = dsjob_worker_run(w);
        dsjob_worker_free(w);
        return i == DSJOB_OK ? 0 : 1;
    }
    c = dsjob_client_new();
    if (c == NULL || dsjob_client_add_server(c, argv[2]) != DSJOB_OK)
        return 1;
    t0 = now();
    cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (strcmp(argv[1], "bg") == 0) {
        if (run_tasks(c, n, n, DSJOB_TASK_BACKGROUND) != 0)
            return 1;
    } else if (strcmp(argv[1], "fg") == 0) {
        for (i = 0; i < n; i++)
            if (dsjob_client_submit(c, "noop", NULL, "x", 1, DSJOB_PRIO_NORMAL, NULL, NULL) !=
                DSJOB_OK) {
                fprintf(stderr, "cref: %s\n", dsjob_client_errmsg(c));
                return 1;
            }
    } else if (strcmp(argv[1], "inflight") == 0 && argc > 4) {
        if (run_tasks(c, n, atol(argv[4]), 0) != 0)
            return 1;
    } else {
        fputs("usage: cref bg|fg|inflight|worker SERVER N [K]\n", stderr);
        return 2;
    }
    printf("%.6f %.6f\n", now() - t0, clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0);
    dsjob_client_free(c);
    return 0;
}
