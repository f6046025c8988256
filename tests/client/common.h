/*
 * Helpers shared by the library tests: gearmand started on a free
 * loopback port (it has no port file), our worker forked into a child
 * with a fixed set of test functions, and a port where nothing listens.
 */
#ifndef DSJOB_TESTS_CLIENT_COMMON_H
#define DSJOB_TESTS_CLIENT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A gearmand child started by gearmand_start. */
struct gearmand {
    pid_t pid;     /* the child, 0 if none */
    int port;      /* its port */
    char dir[256]; /* its log and pid files */
};

/*
 * gearmand_start runs $GEARMAND (or /usr/sbin/gearmand) on a free
 * 127.0.0.1 port and waits (at most 5 s) until it accepts. Returns false
 * when gearmand is not installed or did not come up.
 */
bool gearmand_start(struct gearmand *g);

/* gearmand_stop sends SIGTERM to the child we started and reaps it (at most 5 s). */
void gearmand_stop(struct gearmand *g);

/* free_port returns a loopback port that was free a moment ago (nothing listens on it). */
int free_port(void);

/*
 * worker_fork starts a child running our worker on the servers (a
 * NULL-terminated list of "host:port"), with the test functions:
 *   rev       the payload reversed
 *   echo      the payload as is
 *   fail      WORK_FAIL
 *   exc       WORK_EXCEPTION "boom:" + payload
 *   progress  status 1/2, data "chunk", warning "warn", status 2/2, result "done"
 *   sometimes payload as is, but fails when it is a multiple of 7 and raises
 *             an exception when it is a multiple of 11
 *   slow      sleeps the payload's milliseconds, then returns "slept"
 *   hang      registered with a 1000 ms timeout; sleeps 3 s
 * The child stops gracefully on SIGTERM (dsjob_worker_stop from the
 * handler) and exits 0. Returns the child's pid.
 */
pid_t worker_fork(const char *const *servers);

/* worker_reap sends SIGTERM to pid and waits at most 10 s; returns its exit status or -1. */
int worker_reap(pid_t pid);

/* addr_of formats "127.0.0.1:port" into a static buffer (one of four in turn). */
const char *addr_of(int port);

/*
 * count_malloc and count_free, for dsjob_set_alloc_funcs: malloc and free
 * that count their calls in count_mallocs and count_frees.
 */
extern long count_mallocs;
extern long count_frees;
void *count_malloc(size_t n);
void count_free(void *p);

/* sleep_ms sleeps ms milliseconds. */
void sleep_ms(int ms);

#endif
