/*
 * The load generator's back-end interface. A back end is the client and
 * worker library that drives the server: the scenarios in loadgen.c only
 * start threads, keep time and count, and each thread calls one of these
 * operations with its own connection. Two back ends exist: libgearman
 * (lg_gearman.c, so that the harness cannot favour dsjobd) and our own
 * libdsjobclient/libdsjobworker (lg_dsjob.c, without libgearman's
 * client-side cost). Every operation is bounded: it returns once its job
 * count is reached or *stop becomes true, and uses I/O timeouts.
 */
#ifndef DSJOB_BENCH_LOADGEN_H
#define DSJOB_BENCH_LOADGEN_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LG_HOST "127.0.0.1"    /* the only address the harness talks to */
#define LG_IO_TIMEOUT_MS 10000 /* per-call timeout inside a back end */
#define LG_WORKER_POLL_MS 100  /* how often an idle worker checks *stop */
#define LG_MAX_SERVERS 16      /* -p PORT,PORT,...: servers a worker connects to */

/* Latency samples of one thread, in microseconds. */
struct lg_lat {
    uint32_t *v; /* samples */
    size_t n;    /* used */
    size_t cap;  /* allocated */
};

/* Shared counters and flags of one scenario run. */
struct lg_shared {
    atomic_bool stop;               /* clients stop adding work */
    atomic_bool stop_workers;       /* workers exit (after the clients drained) */
    atomic_bool measuring;          /* inside the measured window: record samples */
    atomic_uint_fast64_t completed; /* foreground jobs completed at clients */
    atomic_uint_fast64_t worked;    /* jobs done by workers */
    atomic_uint_fast64_t acked;     /* background submits acknowledged */
    atomic_uint_fast64_t errors;    /* failed jobs or calls */
    atomic_uint *seen;              /* NULL, or runs per job: [id * seen_per + index] */
    unsigned seen_ids;              /* submitter ids covered by seen */
    uint64_t seen_per;              /* job indexes covered per id */
    atomic_uint_fast64_t unknown;   /* jobs run whose unique key is not in seen */
};

/* One foreground client connection keeping `inflight` jobs outstanding. */
struct lg_fg_args {
    in_port_t port;       /* server port on LG_HOST */
    const char *function; /* function the workers registered */
    const void *payload;  /* borrowed, `len` bytes */
    size_t len;
    int inflight;         /* jobs kept outstanding */
    struct lg_shared *sh; /* counters; stop ends the loop */
    struct lg_lat lat;    /* filled while sh->measuring */
};

/* One background client connection submitting `n` jobs in batches. */
struct lg_bg_args {
    in_port_t port;
    const char *function;
    const void *payload;
    size_t len;
    uint64_t n;           /* jobs to submit */
    int batch;            /* submits written before reading the replies */
    unsigned id;          /* makes the unique keys distinct per client */
    struct lg_shared *sh; /* acked counts acknowledged submits */
    double rate;          /* submits per second at most, 0: no limit */
    uint64_t done;        /* out: jobs 0..done-1 were acknowledged */
};

/*
 * One worker (a connection to each of its servers); echoes the payload
 * back until sh->stop_workers.
 */
struct lg_worker_args {
    in_port_t port;         /* ports[0] */
    const in_port_t *ports; /* every server on LG_HOST, borrowed */
    int nports;             /* at least 1 */
    const char *function;
    struct lg_shared *sh; /* worked counts jobs done */
    atomic_int *ready;    /* incremented once the function is registered */
};

struct lg_backend {
    const char *name;
    /* each returns 0, or -1 with a message in err */
    int (*fg_client)(struct lg_fg_args *a, char *err, size_t errlen);
    int (*bg_client)(struct lg_bg_args *a, char *err, size_t errlen);
    int (*worker)(struct lg_worker_args *a, char *err, size_t errlen);
    /* one foreground job, blocking; its round trip in *us */
    int (*one_job)(in_port_t port, const char *function, const void *payload, size_t len,
                   double *us, char *err, size_t errlen);
};

/*
 * lg_tls_ca is --tls-ca: NULL for plain TCP, else the CA file (borrowed
 * from argv) the dsjob back end checks a TLS server's certificate with.
 */
extern const char *lg_tls_ca;

extern const struct lg_backend lg_gearman_backend;
extern const struct lg_backend lg_dsjob_backend;

/* Shared helpers from loadgen.c. */
double lg_now(void);                          /* monotonic seconds */
void lg_lat_add(struct lg_lat *l, double us); /* appends, grows */

/*
 * lg_unique writes the unique key of background job `index` of submitter
 * `id`: 36 characters, the size of the UUID libgearman would make.
 */
void lg_unique(char *buf, size_t cap, unsigned id, uint64_t index);

/*
 * lg_mark_unique counts one run of the job with that unique key (borrowed;
 * NULL or one not made by lg_unique counts as unknown), so a drain can check
 * that every acknowledged job ran. Thread-safe; no-op while sh->seen is NULL.
 */
void lg_mark_unique(struct lg_shared *sh, const char *unique);

/*
 * lg_pace sleeps until a submitter that started at t0 (lg_now()) may send
 * job number `sent`, so that it keeps to a->rate; no-op when a->rate is 0.
 */
void lg_pace(const struct lg_bg_args *a, double t0, uint64_t sent);

#endif
