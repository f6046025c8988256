/*
 * The load generator's back-end interface. A back end is the client and
 * worker library that drives the server: the scenarios in loadgen.c only
 * start threads, keep time and count, and each thread calls one of these
 * operations with its own connection. Two back ends are meant to exist:
 * libgearman (lg_gearman.c, so that the harness cannot favour dsjobd) and
 * our own libdsjobclient/libdsjobworker (not written yet; see the marked
 * place in loadgen.c). Every operation is bounded: it returns once its job
 * count is reached or *stop becomes true, and uses I/O timeouts.
 */
#ifndef DSJOB_BENCH_LOADGEN_H
#define DSJOB_BENCH_LOADGEN_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LG_HOST "127.0.0.1"   /* the only address the harness talks to */
#define LG_IO_TIMEOUT_MS 10000 /* per-call timeout inside a back end */
#define LG_WORKER_POLL_MS 100  /* how often an idle worker checks *stop */

/* Latency samples of one thread, in microseconds. */
struct lg_lat {
    uint32_t *v;  /* samples */
    size_t n;     /* used */
    size_t cap;   /* allocated */
};

/* Shared counters and flags of one scenario run. */
struct lg_shared {
    atomic_bool stop;       /* clients stop adding work */
    atomic_bool stop_workers; /* workers exit (after the clients drained) */
    atomic_bool measuring;  /* inside the measured window: record samples */
    atomic_uint_fast64_t completed; /* foreground jobs completed at clients */
    atomic_uint_fast64_t worked;    /* jobs done by workers */
    atomic_uint_fast64_t acked;     /* background submits acknowledged */
    atomic_uint_fast64_t errors;    /* failed jobs or calls */
};

/* One foreground client connection keeping `inflight` jobs outstanding. */
struct lg_fg_args {
    in_port_t port;        /* server port on LG_HOST */
    const char *function;  /* function the workers registered */
    const void *payload;   /* borrowed, `len` bytes */
    size_t len;
    int inflight;          /* jobs kept outstanding */
    struct lg_shared *sh;  /* counters; stop ends the loop */
    struct lg_lat lat;     /* filled while sh->measuring */
};

/* One background client connection submitting `n` jobs in batches. */
struct lg_bg_args {
    in_port_t port;
    const char *function;
    const void *payload;
    size_t len;
    uint64_t n;            /* jobs to submit */
    int batch;             /* submits written before reading the replies */
    unsigned id;           /* makes the unique keys distinct per client */
    struct lg_shared *sh;  /* acked counts acknowledged submits */
};

/* One worker connection; echoes the payload back until sh->stop_workers. */
struct lg_worker_args {
    in_port_t port;
    const char *function;
    struct lg_shared *sh;  /* worked counts jobs done */
    atomic_int *ready;     /* incremented once the function is registered */
};

struct lg_backend {
    const char *name;
    /* each returns 0, or -1 with a message in err */
    int (*fg_client)(struct lg_fg_args *a, char *err, size_t errlen);
    int (*bg_client)(struct lg_bg_args *a, char *err, size_t errlen);
    int (*worker)(struct lg_worker_args *a, char *err, size_t errlen);
    /* one foreground job, blocking; its round trip in *us */
    int (*one_job)(in_port_t port, const char *function, const void *payload,
                   size_t len, double *us, char *err, size_t errlen);
};

extern const struct lg_backend lg_gearman_backend;

/* Shared helpers from loadgen.c. */
double lg_now(void);                             /* monotonic seconds */
void lg_lat_add(struct lg_lat *l, double us);    /* appends, grows */

#endif
