/*
 * Times the memcached store's flush of one batch of N jobs (default
 * 10,000) against a memcached this program starts, R times (default 7),
 * each on a fresh prefix, then the flush of a batch that updates those N
 * jobs (each made dead, with a 100-byte failure text), and prints every
 * time and the medians. Not a test (make check builds it, never runs it):
 * run it by hand, as
 *   tests/unit/time_mc_flush [N [R]]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dsjob/common.h>

#include "store_backends.h"
#include "tap.h"

static double
ms_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static int
by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    const struct store_ops *ops = store_backend_memcached.ops;
    int n = argc > 1 ? atoi(argv[1]) : 10000, runs = argc > 2 ? atoi(argv[2]) : 7, r, i;
    char err[STORE_ERRLEN], why[256], name[32], data[32], text[100];
    double *ms, *ums;

    if (n <= 0 || runs <= 0 || (ms = calloc((size_t)runs, sizeof(*ms))) == NULL ||
        (ums = calloc((size_t)runs, sizeof(*ums))) == NULL)
        return 2;
    memset(text, 'x', sizeof(text));
    if (!mcd_setup(why, sizeof(why))) {
        fprintf(stderr, "%s\n", why);
        return 77;
    }
    for (r = 0; r < runs; r++) {
        struct store *st = NULL;
        struct timespec t0;
        struct tjob tj;

        snprintf(name, sizeof(name), "time%d", r);
        if (ops->open(&st, store_backend_memcached.begin(name), err) != DSJOB_OK) {
            fprintf(stderr, "open: %s\n", err);
            return 1;
        }
        for (i = 0; i < n; i++) {
            snprintf(data, sizeof(data), "job %d", i);
            if (add_job(ops, st, (uint64_t)i + 1, (uint64_t)i + 1, data, err) != DSJOB_OK) {
                fprintf(stderr, "add: %s\n", err);
                return 1;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (ops->flush(st, err) != DSJOB_OK) {
            fprintf(stderr, "flush: %s\n", err);
            return 1;
        }
        ms[r] = ms_since(&t0);
        for (i = 0; i < n; i++) {
            snprintf(data, sizeof(data), "job %d", i);
            tjob_init(&tj, (uint64_t)i + 1, (uint64_t)i + 1, data, strlen(data));
            tj.sj.state = STORE_DEAD;
            tj.sj.attempts = 3;
            tj.sj.result = text;
            tj.sj.result_len = sizeof(text);
            if (ops->update(st, &tj.sj, err) != DSJOB_OK) {
                fprintf(stderr, "update: %s\n", err);
                return 1;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (ops->flush(st, err) != DSJOB_OK) {
            fprintf(stderr, "flush: %s\n", err);
            return 1;
        }
        ums[r] = ms_since(&t0);
        printf("run %d: flush of %d jobs: %.1f ms, of %d updates: %.1f ms\n", r + 1, n, ms[r], n,
               ums[r]);
        ops->close(st);
        store_backend_memcached.end();
    }
    qsort(ms, (size_t)runs, sizeof(*ms), by_double);
    qsort(ums, (size_t)runs, sizeof(*ums), by_double);
    printf("median of %d runs: %.1f ms (adds), %.1f ms (updates)\n", runs, ms[runs / 2],
           ums[runs / 2]);
    free(ms);
    free(ums);
    return 0;
}
