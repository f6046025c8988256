/*
 * loadgen: drives one Gearman job server on 127.0.0.1 through a back end
 * (libgearman, or our libdsjobclient/libdsjobworker) and prints one result
 * line of key=value pairs per measurement, for bench/run to collect.
 * Scenarios: fg and fg1 (foreground echo jobs, K or 1 in flight per
 * client), bg-submit (pipelined background submits, no workers; also the
 * server's RSS per queued job), bg-drain and durable (submit N, then W
 * workers drain them, and check that every acknowledged job ran), mixed
 * (foreground latency without and then with a background flood) and
 * connections (many idle connections, then a job round trip). With --pid it
 * reads the server's CPU time and RSS from /proc at the edges of the
 * measured window, so the figures do not include start-up or the load
 * generator's own cost. Every run is bounded by job counts, a time limit
 * and an alarm() watchdog.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep; built without config.h */

#include "loadgen.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/tcp.h>

#define FUNCTION "bench_echo"
#define FLOOD_FUNCTION "bench_flood" /* mixed: background jobs no worker takes */
#define MAX_CLIENTS 1024
#define MAX_WORKERS 256
#define MAX_INFLIGHT 4096
#define MAX_JOBS 10000000ULL
#define MAX_CONNS 60000
#define MAX_PAYLOAD (1024 * 1024)
#define MAX_SECS 600.0
#define CONN_BATCH 32 /* connections opened at once, below a 32 backlog */
#define CONN_TRIPS 11 /* round trips with the connections held; the median is reported */

/*
 * The back ends a run can choose with -b. lg_dsjob.c is compiled in when
 * bench/run finds the built libdsjobclient and libdsjobworker
 * (-DLG_HAVE_DSJOB).
 */
static const struct lg_backend *const backends[] = {
    &lg_gearman_backend,
#ifdef LG_HAVE_DSJOB
    &lg_dsjob_backend,
#endif
};

struct opts {
    const char *scenario;
    const char *label; /* server name printed in the result line */
    const struct lg_backend *be;
    in_port_t port;                  /* ports[0] */
    in_port_t ports[LG_MAX_SERVERS]; /* -p PORT[,PORT]...: the servers */
    int nports;
    int clients;
    int inflight;
    int workers;
    uint64_t jobs;
    double secs;     /* fg: measured seconds */
    double warmup;   /* fg: seconds before the window opens */
    double max_secs; /* bg: stop submitting or draining after this */
    double settle;   /* bg-drain, durable: seconds the servers get to show none held */
    size_t payload;
    int batch;
    int conns;
    int flood;                  /* mixed: background flood connections */
    double flood_rate;          /* mixed: their submits/s in all, 0: no limit */
    pid_t pid;                  /* server process for /proc, 0: none (pids[0]) */
    pid_t pids[LG_MAX_SERVERS]; /* --pid PID[,PID]...: CPU and RSS are their sums */
    int npids;
    const char *between; /* bg-drain, durable: a shell command run after the submits */
};

static struct opts o = {
    .label = "server",
    .be = &lg_gearman_backend,
    .clients = -1,
    .inflight = -1,
    .workers = -1,
    .jobs = 0, /* 0: the scenario's default */
    .secs = 3.0,
    .warmup = 0.5,
    .max_secs = 120.0,
    .settle = 2.0,
    .payload = 64,
    .batch = 500,
    .conns = 10000,
    .flood = 2,
};

static struct lg_shared sh;
const char *lg_tls_ca;
static atomic_uint_fast64_t distinct;    /* jobs of sh.seen that ran at least once */
static uint64_t acked_upto[MAX_CLIENTS]; /* per submitter: jobs 0..n-1 acknowledged */
static unsigned char *payload;

double
lg_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
lg_lat_add(struct lg_lat *l, double us)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4096;
        uint32_t *v = realloc(l->v, cap * sizeof(*v));

        if (v == NULL)
            return; /* drop the sample rather than the run */
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = us < 0 ? 0 : us > 4e9 ? 4000000000u : (uint32_t)us;
}

void
lg_unique(char *buf, size_t cap, unsigned id, uint64_t index)
{
    snprintf(buf, cap, "%08x-0000-4000-8000-%012llx", id, (unsigned long long)index);
}

void
lg_mark_unique(struct lg_shared *s, const char *unique)
{
    unsigned long id;
    unsigned long long index;
    char *end;

    if (s->seen == NULL)
        return;
    if (unique == NULL || strlen(unique) != 36 || unique[8] != '-')
        goto unknown;
    id = strtoul(unique, &end, 16);
    if (end != unique + 8)
        goto unknown;
    index = strtoull(unique + 24, &end, 16);
    if (*end != '\0' || id >= s->seen_ids || index >= s->seen_per)
        goto unknown;
    if (atomic_fetch_add(&s->seen[id * s->seen_per + index], 1) == 0)
        atomic_fetch_add(&distinct, 1);
    return;
unknown:
    atomic_fetch_add(&s->unknown, 1);
}

static void sleep_s(double s);

void
lg_pace(const struct lg_bg_args *a, double t0, uint64_t sent)
{
    double wait;

    if (a->rate <= 0)
        return;
    wait = t0 + (double)sent / a->rate - lg_now();
    /* in slices, so that a stop request is not kept waiting */
    while (wait > 0 && !atomic_load(&a->sh->stop)) {
        sleep_s(wait < 0.05 ? wait : 0.05);
        wait -= 0.05;
    }
}

static void
die(const char *fmt, const char *arg)
{
    fprintf(stderr, "loadgen: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static void
sleep_s(double s)
{
    struct timespec ts;

    if (s <= 0)
        return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* One server's user+system CPU seconds, or -1. */
static double
proc_cpu_one(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long ut, st;
    FILE *f;
    char *p;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* fields after the command name, which may hold spaces: state is 3 */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 2,
                            "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                            "%*u %llu %llu",
                            &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The servers' user+system CPU seconds in all, or -1 without --pid. */
static double
proc_cpu(void)
{
    double sum = 0;

    if (o.npids == 0)
        return -1;
    for (int i = 0; i < o.npids; i++) {
        double c = proc_cpu_one(o.pids[i]);

        if (c < 0)
            return -1;
        sum += c;
    }
    return sum;
}

/* One server's resident set in kB, or -1. */
static long
proc_rss_kb_one(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* The servers' resident sets in kB in all, or -1 without --pid. */
static long
proc_rss_kb(void)
{
    long sum = 0;

    if (o.npids == 0)
        return -1;
    for (int i = 0; i < o.npids; i++) {
        long kb = proc_rss_kb_one(o.pids[i]);

        if (kb < 0)
            return -1;
        sum += kb;
    }
    return sum;
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Prints the start of a result line: scenario, server and parameters. */
static void
print_head(const char *scenario)
{
    printf("scenario=%s server=%s backend=%s payload=%zu", scenario, o.label, o.be->name,
           o.payload);
}

/* The load generator's own CPU seconds, all threads. */
static double
self_cpu(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Prints the server's CPU (cpu, -1: unknown) and the client's (self) per job. */
static void
print_cpu(double cpu, uint64_t jobs, double self)
{
    if (cpu >= 0 && jobs > 0)
        printf(" server_cpu_s=%.2f server_cpu_us_per_job=%.2f", cpu, cpu * 1e6 / (double)jobs);
    if (jobs > 0)
        printf(" client_cpu_us_per_job=%.2f", self * 1e6 / (double)jobs);
}

/* Threads ------------------------------------------------------------- */

static char thread_err[256];
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;

static void
keep_err(const char *e)
{
    pthread_mutex_lock(&err_lock);
    if (thread_err[0] == '\0')
        snprintf(thread_err, sizeof(thread_err), "%s", e);
    pthread_mutex_unlock(&err_lock);
    atomic_fetch_add(&sh.errors, 1);
}

static void *
fg_thread(void *p)
{
    char err[256];

    if (o.be->fg_client(p, err, sizeof(err)) != 0)
        keep_err(err);
    return NULL;
}

static void *
bg_thread(void *p)
{
    char err[256];

    if (o.be->bg_client(p, err, sizeof(err)) != 0)
        keep_err(err);
    return NULL;
}

static void *
worker_thread(void *p)
{
    char err[256];

    if (o.be->worker(p, err, sizeof(err)) != 0)
        keep_err(err);
    return NULL;
}

static atomic_int workers_ready;
static struct lg_worker_args *wargs;
static pthread_t *wtid;

static void
workers_start(int n)
{
    double deadline = lg_now() + 10;

    atomic_store(&workers_ready, 0);
    atomic_store(&sh.stop_workers, false);
    wargs = calloc((size_t)n, sizeof(*wargs));
    wtid = calloc((size_t)n, sizeof(*wtid));
    if (wargs == NULL || wtid == NULL)
        die("%s", "out of memory");
    for (int i = 0; i < n; i++) {
        wargs[i] = (struct lg_worker_args){.port = o.port,
                                           .ports = o.ports,
                                           .nports = o.nports,
                                           .function = FUNCTION,
                                           .sh = &sh,
                                           .ready = &workers_ready};
        if (pthread_create(&wtid[i], NULL, worker_thread, &wargs[i]) != 0)
            die("%s", "pthread_create failed");
    }
    while (atomic_load(&workers_ready) < n && lg_now() < deadline)
        sleep_s(0.005);
}

static void
workers_join(int n)
{
    atomic_store(&sh.stop_workers, true);
    for (int i = 0; i < n; i++)
        pthread_join(wtid[i], NULL);
    free(wargs);
    free(wtid);
}

/*
 * Starts the workers and o.clients foreground clients (a and tid have
 * o.clients entries), then lets them warm up: fg and mixed share this.
 */
static void
fg_start(struct lg_fg_args *a, pthread_t *tid)
{
    workers_start(o.workers);
    for (int i = 0; i < o.clients; i++) {
        a[i] = (struct lg_fg_args){.port = o.ports[i % o.nports],
                                   .function = FUNCTION,
                                   .payload = payload,
                                   .len = o.payload,
                                   .inflight = o.inflight,
                                   .sh = &sh};
        if (pthread_create(&tid[i], NULL, fg_thread, &a[i]) != 0)
            die("%s", "pthread_create failed");
    }
    sleep_s(o.warmup);
}

/* Scenarios ------------------------------------------------------------ */

static int
run_fg(const char *name)
{
    struct lg_fg_args *a = calloc((size_t)o.clients, sizeof(*a));
    pthread_t *tid = calloc((size_t)o.clients, sizeof(*tid));
    uint64_t c0, c1, nlat = 0;
    double t0, t1, cpu0, cpu1, self0, self1;
    uint32_t *all;

    if (a == NULL || tid == NULL)
        die("%s", "out of memory");
    fg_start(a, tid);
    /* The window: completions, CPU and samples between t0 and t1. */
    cpu0 = proc_cpu();
    self0 = self_cpu();
    t0 = lg_now();
    c0 = atomic_load(&sh.completed);
    atomic_store(&sh.measuring, true);
    sleep_s(o.secs);
    atomic_store(&sh.measuring, false);
    c1 = atomic_load(&sh.completed);
    t1 = lg_now();
    cpu1 = proc_cpu();
    self1 = self_cpu();
    atomic_store(&sh.stop, true);
    for (int i = 0; i < o.clients; i++)
        pthread_join(tid[i], NULL);
    workers_join(o.workers);

    for (int i = 0; i < o.clients; i++)
        nlat += a[i].lat.n;
    all = malloc((nlat ? nlat : 1) * sizeof(*all));
    if (all == NULL)
        die("%s", "out of memory");
    nlat = 0;
    for (int i = 0; i < o.clients; i++) {
        memcpy(all + nlat, a[i].lat.v, a[i].lat.n * sizeof(*all));
        nlat += a[i].lat.n;
        free(a[i].lat.v);
    }
    qsort(all, nlat, sizeof(*all), cmp_u32);

    print_head(name);
    printf(" clients=%d inflight=%d workers=%d jobs=%llu secs=%.3f "
           "jobs_per_s=%.0f",
           o.clients, o.inflight, o.workers, (unsigned long long)(c1 - c0), t1 - t0,
           (double)(c1 - c0) / (t1 - t0));
    if (nlat > 0)
        printf(" p50_us=%u p99_us=%u", all[nlat / 2], all[(size_t)((double)nlat * 0.99)]);
    print_cpu(cpu1 >= 0 && cpu0 >= 0 ? cpu1 - cpu0 : -1, c1 - c0, self1 - self0);
    printf(" rss_kb=%ld errors=%llu\n", proc_rss_kb(), (unsigned long long)atomic_load(&sh.errors));

    free(all);
    free(a);
    free(tid);
    return atomic_load(&sh.errors) ? 1 : 0;
}

/*
 * Submits o.jobs background jobs from o.clients connections and prints the
 * bg-submit line (rate overall and over the last tenth, server CPU, RSS
 * growth per queued job). Returns the number acknowledged.
 */
static uint64_t
submit_phase(const char *name)
{
    struct lg_bg_args *a = calloc((size_t)o.clients, sizeof(*a));
    pthread_t *tid = calloc((size_t)o.clients, sizeof(*tid));
    uint64_t per = o.jobs / (uint64_t)o.clients, acked, mark;
    double t0, t1, t90 = -1, a90 = 0, cpu0, cpu1, self0 = self_cpu();
    long rss0, rss1;

    if (a == NULL || tid == NULL)
        die("%s", "out of memory");
    rss0 = proc_rss_kb();
    cpu0 = proc_cpu();
    t0 = lg_now();
    for (int i = 0; i < o.clients; i++) {
        a[i] = (struct lg_bg_args){.port = o.ports[i % o.nports],
                                   .function = FUNCTION,
                                   .payload = payload,
                                   .len = o.payload,
                                   .n = per + (i == 0 ? o.jobs % per : 0),
                                   .batch = o.batch,
                                   .id = (unsigned)i,
                                   .sh = &sh};
        if (pthread_create(&tid[i], NULL, bg_thread, &a[i]) != 0)
            die("%s", "pthread_create failed");
    }
    /* Watch progress to time the last tenth, and enforce max_secs. */
    mark = o.jobs - o.jobs / 10;
    for (;;) {
        acked = atomic_load(&sh.acked);
        if (t90 < 0 && acked >= mark) {
            t90 = lg_now();
            a90 = (double)acked;
        }
        if (acked >= o.jobs || atomic_load(&sh.errors) > 0)
            break;
        if (lg_now() - t0 > o.max_secs) {
            atomic_store(&sh.stop, true);
            break;
        }
        sleep_s(0.002);
    }
    for (int i = 0; i < o.clients; i++) {
        pthread_join(tid[i], NULL);
        acked_upto[i] = a[i].done;
    }
    t1 = lg_now();
    cpu1 = proc_cpu();
    rss1 = proc_rss_kb();
    acked = atomic_load(&sh.acked);

    print_head(name);
    printf(" clients=%d batch=%d jobs=%llu secs=%.3f jobs_per_s=%.0f", o.clients, o.batch,
           (unsigned long long)acked, t1 - t0, (double)acked / (t1 - t0));
    if (t90 > 0 && t1 > t90 && acked > a90)
        printf(" last10_jobs_per_s=%.0f", ((double)acked - a90) / (t1 - t90));
    print_cpu(cpu1 >= 0 && cpu0 >= 0 ? cpu1 - cpu0 : -1, acked, self_cpu() - self0);
    if (rss0 >= 0 && acked > 0)
        printf(" rss_before_kb=%ld rss_after_kb=%ld bytes_per_job=%.0f", rss0, rss1,
               (double)(rss1 - rss0) * 1024.0 / (double)acked);
    printf(" timed_out=%d errors=%llu\n", atomic_load(&sh.stop) ? 1 : 0,
           (unsigned long long)atomic_load(&sh.errors));
    fflush(stdout);
    free(a);
    free(tid);
    return acked;
}

static int
run_bg_submit(void)
{
    submit_phase("bg-submit");
    return atomic_load(&sh.errors) || atomic_load(&sh.stop) ? 1 : 0;
}

/* A loopback TCP connection to the server on port, or -1. */
static int
tcp_connect(in_port_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    inet_pton(AF_INET, LG_HOST, &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * Asks the server's text admin protocol ("status") how many jobs of
 * `function` it still holds, queued or running: 0 when the function is not
 * listed, -1 when the answer did not come within 5 s.
 */
static long
admin_held_one(in_port_t port, const char *function)
{
    char buf[65536], *line;
    size_t got = 0, flen = strlen(function);
    double deadline = lg_now() + 5;
    int fd = tcp_connect(port);
    long held = 0;

    if (fd < 0 || write(fd, "status\n", 7) != 7)
        goto fail;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = (int)((deadline - lg_now()) * 1000);
        ssize_t r;

        if (ms <= 0 || poll(&p, 1, ms) != 1)
            goto fail;
        r = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (r <= 0)
            goto fail;
        got += (size_t)r;
        buf[got] = '\0';
        if (strcmp(buf, ".\n") == 0 || (got >= 3 && strcmp(buf + got - 3, "\n.\n") == 0))
            break;
        if (got == sizeof(buf) - 1)
            goto fail;
    }
    close(fd);
    /* lines of "function\ttotal\trunning\tavailable_workers" */
    for (line = buf; *line != '\0' && *line != '.'; line = strchr(line, '\n') + 1) {
        if (strncmp(line, function, flen) == 0 && line[flen] == '\t')
            held = strtol(line + flen + 1, NULL, 10);
        if (strchr(line, '\n') == NULL)
            break;
    }
    return held;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

/* admin_held summed over every server: -1 when one did not answer. */
static long
admin_held(const char *function)
{
    long sum = 0;

    for (int i = 0; i < o.nports; i++) {
        long h = admin_held_one(o.ports[i], function);

        if (h < 0)
            return -1;
        sum += h;
    }
    return sum;
}

/*
 * bg-drain and durable: submits o.jobs background jobs (the SUB line), then
 * o.workers workers drain them (the DRAIN line). The workers count every
 * run by unique key, so the drain line can say whether every acknowledged
 * job ran (lost=0), how many ran twice, and whether the server still holds
 * any. A drain that loses an acknowledged job fails the run.
 */
static int
run_drain(const char *sub, const char *drain)
{
    uint64_t queued, done, last = 0, lost = 0, dups = 0, unacked = 0;
    uint64_t per = o.jobs / (uint64_t)o.clients;
    double t0, t1, t_prog, cpu0, cpu1, self0, self1, settle0, settle;
    int timed_out = 0, verified;
    long held;

    sh.seen_ids = (unsigned)o.clients;
    sh.seen_per = per + o.jobs % per;
    sh.seen = calloc((size_t)(sh.seen_ids * sh.seen_per), sizeof(*sh.seen));
    if (sh.seen == NULL)
        die("%s", "out of memory");
    queued = submit_phase(sub);
    if (atomic_load(&sh.errors) || queued == 0)
        return 1;
    if (o.between != NULL) {
        int st = system(o.between);

        if (st != 0) {
            fprintf(stderr, "loadgen: --between command exited with status %d\n", st);
            return 1;
        }
    }
    atomic_store(&sh.stop, false);
    atomic_store(&sh.worked, 0);
    cpu0 = proc_cpu();
    self0 = self_cpu();
    t0 = lg_now();
    workers_start(o.workers);
    /*
     * Until every acknowledged job has run once (duplicates do not count),
     * or the server holds none of them any more while some never ran.
     */
    t_prog = t0;
    while ((done = atomic_load(&distinct)) < queued) {
        if (lg_now() - t0 > o.max_secs || atomic_load(&sh.errors)) {
            timed_out = 1;
            break;
        }
        if (done != last) {
            last = done;
            t_prog = lg_now();
        } else if (lg_now() - t_prog > 1 && admin_held(FUNCTION) == 0) {
            break;
        } else if (lg_now() - t_prog > 1) {
            t_prog = lg_now();
        }
        sleep_s(0.002);
    }
    t1 = lg_now();
    cpu1 = proc_cpu();
    self1 = self_cpu();
    atomic_store(&sh.stop, true);
    workers_join(o.workers);
    done = atomic_load(&sh.worked);

    for (unsigned id = 0; id < sh.seen_ids; id++) {
        for (uint64_t i = 0; i < sh.seen_per; i++) {
            unsigned v = atomic_load(&sh.seen[id * sh.seen_per + i]);

            if (i < acked_upto[id] && v == 0)
                lost++;
            else if (i >= acked_upto[id] && v > 0)
                unacked++;
            if (v > 1)
                dups += v - 1;
        }
    }
    /*
     * A job whose deletion is still being committed is listed as running
     * (dsjobd's settling jobs), and the postgres store's count of jobs
     * waiting in its table is as old as its last lease renewal: give the
     * servers up to --settle seconds (2 by default) to show none, and
     * report how long it took.
     */
    settle0 = lg_now();
    while ((held = admin_held(FUNCTION)) > 0 && lg_now() - settle0 < o.settle)
        sleep_s(0.005);
    settle = lg_now() - settle0;
    verified = !timed_out && lost == 0 && held == 0 && atomic_load(&sh.unknown) == 0;

    print_head(drain);
    printf(" workers=%d jobs=%llu secs=%.3f jobs_per_s=%.0f", o.workers, (unsigned long long)done,
           t1 - t0, (double)done / (t1 - t0));
    print_cpu(cpu1 >= 0 && cpu0 >= 0 ? cpu1 - cpu0 : -1, done, self1 - self0);
    /* a drain cut short by --max-secs has not lost what it did not reach */
    printf(" acked=%llu %s=%llu duplicates=%llu unacked_ran=%llu unknown=%llu "
           "held_after=%ld settle_ms=%.0f verified=%s timed_out=%d errors=%llu\n",
           (unsigned long long)queued, timed_out ? "undrained" : "lost", (unsigned long long)lost,
           (unsigned long long)dups, (unsigned long long)unacked,
           (unsigned long long)atomic_load(&sh.unknown), held, settle * 1e3,
           verified ? "yes" : "no", timed_out, (unsigned long long)atomic_load(&sh.errors));
    if (!timed_out && !verified)
        fprintf(stderr,
                "loadgen: %s: %s: %llu acknowledged jobs did not run, the server "
                "holds %ld\n",
                o.label, drain, (unsigned long long)lost, held);
    free(sh.seen);
    sh.seen = NULL;
    return timed_out || !verified || atomic_load(&sh.errors) ? 1 : 0;
}

/* Copies the samples of a[i] from index from[i] on (to[i] if not NULL: up
 * to) into one sorted array. */
static uint32_t *
lat_collect(struct lg_fg_args *a, const size_t *from, const size_t *to, size_t *n)
{
    size_t total = 0, k = 0;
    uint32_t *all;

    for (int i = 0; i < o.clients; i++)
        total += (to ? to[i] : a[i].lat.n) - (from ? from[i] : 0);
    all = malloc((total ? total : 1) * sizeof(*all));
    if (all == NULL)
        die("%s", "out of memory");
    for (int i = 0; i < o.clients; i++) {
        size_t f = from ? from[i] : 0, t = to ? to[i] : a[i].lat.n;

        memcpy(all + k, a[i].lat.v + f, (t - f) * sizeof(*all));
        k += t - f;
    }
    qsort(all, total, sizeof(*all), cmp_u32);
    *n = total;
    return all;
}

/* One measured window of the mixed scenario. */
struct window {
    uint64_t jobs;  /* foreground jobs completed */
    double secs;    /* its length */
    double cpu;     /* server CPU seconds, -1 unknown */
    double self;    /* load generator CPU seconds */
    uint64_t flood; /* background submits acknowledged in it */
    double stall;   /* longest time without a new acknowledgement, seconds */
};

static void
window_run(struct window *w, struct lg_shared *flood)
{
    double t0, cpu0;
    uint64_t c0, f0;

    cpu0 = proc_cpu();
    w->self = self_cpu();
    t0 = lg_now();
    c0 = atomic_load(&sh.completed);
    f0 = atomic_load(&flood->acked);
    atomic_store(&sh.measuring, true);
    /* watch the flood's acknowledgements for gaps (a stalled commit) */
    w->stall = 0;
    w->flood = 0;
    for (double t = t0, last = t0, end = t0 + o.secs; t < end; t = lg_now()) {
        uint64_t f = atomic_load(&flood->acked);

        if (f != f0 + w->flood) {
            w->flood = f - f0;
            last = t;
        }
        if (t - last > w->stall)
            w->stall = t - last;
        sleep_s(0.001);
    }
    atomic_store(&sh.measuring, false);
    w->jobs = atomic_load(&sh.completed) - c0;
    w->flood = atomic_load(&flood->acked) - f0;
    w->secs = lg_now() - t0;
    w->cpu = proc_cpu();
    w->cpu = w->cpu >= 0 && cpu0 >= 0 ? w->cpu - cpu0 : -1;
    w->self = self_cpu() - w->self;
}

/*
 * mixed: o.clients foreground clients (o.inflight each, o.workers workers)
 * run throughout; the first window has no other traffic, the second runs
 * while o.flood connections submit background jobs of another function
 * (no worker takes them, so they pile up in the store) as fast as the
 * server acknowledges them. Prints both windows' latency and the ratios.
 */
static int
run_mixed(void)
{
    struct lg_fg_args *a = calloc((size_t)o.clients, sizeof(*a));
    pthread_t *tid = calloc((size_t)o.clients, sizeof(*tid));
    struct lg_bg_args *fa = calloc((size_t)o.flood, sizeof(*fa));
    pthread_t *ftid = calloc((size_t)o.flood, sizeof(*ftid));
    size_t *mark1 = calloc((size_t)o.clients, sizeof(*mark1));
    size_t *mark2 = calloc((size_t)o.clients, sizeof(*mark2));
    static struct lg_shared fsh; /* the flood's counters and stop flag */
    struct window quiet, busy;
    uint32_t *lq, *lb;
    size_t nq, nb;
    int rc;

    if (a == NULL || tid == NULL || fa == NULL || ftid == NULL || mark1 == NULL || mark2 == NULL)
        die("%s", "out of memory");
    fg_start(a, tid);
    window_run(&quiet, &fsh);
    for (int i = 0; i < o.clients; i++)
        mark1[i] = a[i].lat.n;
    for (int i = 0; i < o.flood; i++) {
        fa[i] = (struct lg_bg_args){.port = o.ports[i % o.nports],
                                    .function = FLOOD_FUNCTION,
                                    .payload = payload,
                                    .len = o.payload,
                                    .n = o.jobs / (uint64_t)o.flood,
                                    .batch = o.batch,
                                    .id = (unsigned)i,
                                    .sh = &fsh,
                                    .rate = o.flood_rate / o.flood};
        if (pthread_create(&ftid[i], NULL, bg_thread, &fa[i]) != 0)
            die("%s", "pthread_create failed");
    }
    sleep_s(o.warmup); /* the flood reaches its pace, the store its first commits */
    for (int i = 0; i < o.clients; i++)
        mark2[i] = a[i].lat.n;
    window_run(&busy, &fsh);
    atomic_store(&fsh.stop, true);
    for (int i = 0; i < o.flood; i++)
        pthread_join(ftid[i], NULL);
    atomic_store(&sh.stop, true);
    for (int i = 0; i < o.clients; i++)
        pthread_join(tid[i], NULL);
    workers_join(o.workers);

    lq = lat_collect(a, NULL, mark1, &nq);
    lb = lat_collect(a, mark2, NULL, &nb);
    print_head("mixed");
    printf(" clients=%d inflight=%d workers=%d flood_clients=%d flood_batch=%d "
           "flood_rate=%.0f secs=%.3f",
           o.clients, o.inflight, o.workers, o.flood, o.batch, o.flood_rate, quiet.secs);
    printf(" jobs_per_s=%.0f", (double)quiet.jobs / quiet.secs);
    if (nq > 0)
        printf(" p50_us=%u p99_us=%u", lq[nq / 2], lq[(size_t)((double)nq * 0.99)]);
    print_cpu(quiet.cpu, quiet.jobs, quiet.self);
    printf(" flood_jobs_per_s=%.0f flood_submits_per_s=%.0f flood_stall_ms=%.0f",
           (double)busy.jobs / busy.secs, (double)busy.flood / busy.secs, busy.stall * 1e3);
    if (nb > 0)
        printf(" flood_p50_us=%u flood_p99_us=%u", lb[nb / 2], lb[(size_t)((double)nb * 0.99)]);
    if (busy.cpu >= 0)
        printf(" flood_server_cpu_s=%.2f", busy.cpu);
    if (nq > 0 && nb > 0)
        printf(" p50_ratio=%.2f p99_ratio=%.2f", (double)lb[nb / 2] / (double)lq[nq / 2],
               (double)lb[(size_t)((double)nb * 0.99)] / (double)lq[(size_t)((double)nq * 0.99)]);
    printf(" flood_errors=%llu rss_kb=%ld errors=%llu\n",
           (unsigned long long)atomic_load(&fsh.errors), proc_rss_kb(),
           (unsigned long long)atomic_load(&sh.errors));
    rc = atomic_load(&sh.errors) || atomic_load(&fsh.errors) || atomic_load(&fsh.acked) == 0;
    if (atomic_load(&fsh.acked) == 0)
        fprintf(stderr, "loadgen: %s: mixed: no background submit was acknowledged\n", o.label);
    for (int i = 0; i < o.clients; i++)
        free(a[i].lat.v);
    free(lq);
    free(lb);
    free(a);
    free(tid);
    free(fa);
    free(ftid);
    free(mark1);
    free(mark2);
    return rc;
}

/* connections: raw sockets, so the held connections cost the load
 * generator one descriptor each and nothing else. */

static const unsigned char echo_req[] = {0, 'R', 'E', 'Q', 0, 0, 0, 16, 0, 0, 0, 1, 'x'};
#define ECHO_RES_LEN 13 /* header 12 + 1 byte of data */

static int
conn_open(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(o.port)};
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0)
        return -1;
    inet_pton(AF_INET, LG_HOST, &sa.sin_addr);
    /* closed with a reset, so 10,000 sockets leave no TIME_WAIT behind */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        write(fd, echo_req, sizeof(echo_req)) != (ssize_t)sizeof(echo_req)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads one ECHO_RES from each of fds[0..n), at most 10 s in all. */
static int
conns_answered(const int *fds, int n)
{
    double deadline = lg_now() + 10;

    for (int i = 0; i < n; i++) {
        unsigned char buf[ECHO_RES_LEN];
        size_t got = 0;

        while (got < sizeof(buf)) {
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            int ms = (int)((deadline - lg_now()) * 1000);
            ssize_t r;

            if (ms <= 0 || poll(&p, 1, ms) != 1)
                return -1;
            r = read(fds[i], buf + got, sizeof(buf) - got);
            if (r <= 0)
                return -1;
            got += (size_t)r;
        }
        if (memcmp(buf, "\0RES", 4) != 0 || buf[7] != 17)
            return -1;
    }
    return 0;
}

static int
run_connections(void)
{
    int *fds = calloc((size_t)o.conns, sizeof(*fds)), n = 0, rc = 0;
    struct rlimit rl;
    double t0, t1, us = 0, trips[CONN_TRIPS] = {0};
    long rss0, rss1;
    char err[256] = "";

    if (fds == NULL)
        die("%s", "out of memory");
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)o.conns + 64) {
        fprintf(stderr,
                "loadgen: fd limit %llu is below %d connections; "
                "raise it with ulimit -n\n",
                (unsigned long long)rl.rlim_cur, o.conns);
        return 2;
    }
    workers_start(1);
    /* a first job, so the server's job path is warm before the baseline */
    if (o.be->one_job(o.port, FUNCTION, payload, o.payload, &us, err, sizeof(err)) != 0) {
        fprintf(stderr, "loadgen: first round trip: %s\n", err);
        rc = 1;
        goto out;
    }
    rss0 = proc_rss_kb();
    t0 = lg_now();
    while (n < o.conns) {
        int b = o.conns - n < CONN_BATCH ? o.conns - n : CONN_BATCH, k;

        for (k = 0; k < b; k++) {
            fds[n + k] = conn_open();
            if (fds[n + k] < 0)
                break;
        }
        if (k < b || conns_answered(fds + n, b) != 0) {
            fprintf(stderr, "loadgen: connection %d: %s\n", n + k, strerror(errno));
            n += k;
            rc = 1;
            break;
        }
        n += b;
        if (lg_now() - t0 > o.max_secs) {
            rc = 1;
            break;
        }
    }
    t1 = lg_now();
    sleep_s(0.2); /* let the server settle after the last accept */
    rss1 = proc_rss_kb();
    /* One round trip is one sample of a noisy machine: take the median of several. */
    for (int i = 0; i < CONN_TRIPS; i++) {
        if (o.be->one_job(o.port, FUNCTION, payload, o.payload, &trips[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "loadgen: round trip with %d held: %s\n", n, err);
            rc = 1;
            break;
        }
    }
    qsort(trips, CONN_TRIPS, sizeof(trips[0]), cmp_double);
    us = trips[CONN_TRIPS / 2];
    print_head("connections");
    printf(" conns=%d open_secs=%.3f round_trip=%s round_trip_us=%.0f", n, t1 - t0,
           rc == 0 ? "ok" : "failed", us);
    if (rss0 >= 0 && n > 0)
        printf(" rss_before_kb=%ld rss_after_kb=%ld bytes_per_conn=%.0f", rss0, rss1,
               (double)(rss1 - rss0) * 1024.0 / (double)n);
    printf("\n");
    for (int i = 0; i < n; i++)
        close(fds[i]);
out:
    atomic_store(&sh.stop, true);
    workers_join(1);
    free(fds);
    return rc;
}

/* Options -------------------------------------------------------------- */

static void
usage(FILE *f)
{
    fprintf(f, "usage: loadgen SCENARIO -p PORT [OPTION]...\n"
               "       loadgen free-port | wait-port PORT\n"
               "Drives a Gearman job server on " LG_HOST " and prints key=value "
               "result lines.\n\n"
               "Scenarios: fg, fg1, bg-submit, bg-drain, memory (= bg-submit), "
               "durable (= bg-drain,\nnamed for a server with a store), mixed, "
               "connections\n\n"
               "  -p, --port PORT[,PORT]...  server port on " LG_HOST " (required); with\n"
               "                       several, client i uses PORT number i modulo their\n"
               "                       count and every worker connects to all of them\n"
               "  -b, --backend NAME   client library: gearman (default)"
#ifdef LG_HAVE_DSJOB
               " or dsjob"
#endif
               "\n"
               "  -c, --clients N      client connections (fg 16, mixed 8, bg 2)\n"
               "  -k, --inflight K     jobs in flight per fg client (fg 32, fg1 and mixed 1)\n"
               "  -w, --workers W      worker connections (fg and mixed 4, drains 8)\n"
               "  -n, --jobs N         background jobs (default 200000; mixed: the\n"
               "                       flood's limit, default 1000000)\n"
               "  -t, --secs S         fg measured seconds, mixed: per window (default 3)\n"
               "      --warmup S       fg seconds before measuring (default 0.5)\n"
               "      --flood C        mixed: background flood connections (default 2)\n"
               "      --flood-rate R   mixed: the flood's submits/s in all (default 0: as\n"
               "                       fast as the server acknowledges them)\n"
               "      --max-secs S     bg phase time limit (default 120)\n"
               "      --settle S       bg-drain, durable: seconds the servers get to hold no\n"
               "                       job after the drain (default 2)\n"
               "  -s, --size BYTES     payload size (default 64)\n"
               "      --batch B        bg submits per pipelined batch (default 500)\n"
               "      --conns N        connections to hold (default 10000)\n"
               "      --pid PID[,PID]...  server processes, for CPU and RSS from /proc\n"
               "                       (summed over them)\n"
               "      --between CMD    bg-drain, durable: run the shell command CMD after\n"
               "                       the submits, before the workers start; a non-zero\n"
               "                       exit fails the run\n"
               "      --label NAME     server name in the result lines\n"
               "      --tls-ca FILE    dsjob back end: TLS to a dsjobd --ssl, checking its\n"
               "                       certificate with the CAs of FILE\n");
}

/* Prints a loopback port that was free a moment ago (gearmand has no
 * --port-file, so bench/run must choose its port). */
static int
free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    inet_pton(AF_INET, LG_HOST, &sa.sin_addr);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        perror("loadgen: free-port");
        return 1;
    }
    printf("%d\n", ntohs(sa.sin_port));
    close(fd);
    return 0;
}

/* Waits until something accepts on LG_HOST:port, at most 5 s. */
static int
wait_port(const char *arg)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((in_port_t)atoi(arg))};
    double deadline = lg_now() + 5;

    inet_pton(AF_INET, LG_HOST, &sa.sin_addr);
    while (lg_now() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            close(fd);
            return 0;
        }
        if (fd >= 0)
            close(fd);
        sleep_s(0.05);
    }
    return 1;
}

static double
num(const char *s, double lo, double hi, const char *what)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || v < lo || v > hi)
        die("bad value for %s", what);
    return v;
}

/* Fills out[] (LG_MAX_SERVERS) from a comma-separated list; returns the count. */
#define list(arg, out, lo, hi, what) list_((arg), (out), sizeof(*(out)), (lo), (hi), (what))
static int
list_(const char *arg, void *out, size_t size, double lo, double hi, const char *what)
{
    char buf[512], *save = NULL, *tok;
    int n = 0;

    if (strlen(arg) >= sizeof(buf))
        die("bad value for %s", what);
    strcpy(buf, arg);
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        double v = num(tok, lo, hi, what);

        if (n == LG_MAX_SERVERS)
            die("too many values for %s", what);
        if (size == sizeof(in_port_t))
            ((in_port_t *)out)[n++] = (in_port_t)v;
        else
            ((pid_t *)out)[n++] = (pid_t)v;
    }
    if (n == 0)
        die("bad value for %s", what);
    return n;
}

static void
parse(int argc, char **argv)
{
    static const struct option lo[] = {
        {"port", required_argument, NULL, 'p'},
        {"backend", required_argument, NULL, 'b'},
        {"clients", required_argument, NULL, 'c'},
        {"inflight", required_argument, NULL, 'k'},
        {"workers", required_argument, NULL, 'w'},
        {"jobs", required_argument, NULL, 'n'},
        {"secs", required_argument, NULL, 't'},
        {"size", required_argument, NULL, 's'},
        {"warmup", required_argument, NULL, 1},
        {"max-secs", required_argument, NULL, 2},
        {"batch", required_argument, NULL, 3},
        {"conns", required_argument, NULL, 4},
        {"pid", required_argument, NULL, 5},
        {"label", required_argument, NULL, 6},
        {"flood", required_argument, NULL, 7},
        {"flood-rate", required_argument, NULL, 8},
        {"tls-ca", required_argument, NULL, 9},
        {"between", required_argument, NULL, 10},
        {"settle", required_argument, NULL, 11},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "p:b:c:k:w:n:t:s:h", lo, NULL)) != -1) {
        switch (c) {
        case 'p':
            o.nports = list(optarg, o.ports, 1, 65535, "--port");
            o.port = o.ports[0];
            break;
        case 'b':
            o.be = NULL;
            for (size_t i = 0; i < sizeof(backends) / sizeof(*backends); i++)
                if (strcmp(backends[i]->name, optarg) == 0)
                    o.be = backends[i];
            if (o.be == NULL)
                die("back end '%s' is not built in (see loadgen --help)", optarg);
            break;
        case 'c': o.clients = (int)num(optarg, 1, MAX_CLIENTS, "--clients"); break;
        case 'k': o.inflight = (int)num(optarg, 1, MAX_INFLIGHT, "--inflight"); break;
        case 'w': o.workers = (int)num(optarg, 1, MAX_WORKERS, "--workers"); break;
        case 'n': o.jobs = (uint64_t)num(optarg, 1, MAX_JOBS, "--jobs"); break;
        case 't': o.secs = num(optarg, 0.1, MAX_SECS, "--secs"); break;
        case 's': o.payload = (size_t)num(optarg, 0, MAX_PAYLOAD, "--size"); break;
        case 1: o.warmup = num(optarg, 0, MAX_SECS, "--warmup"); break;
        case 2: o.max_secs = num(optarg, 1, MAX_SECS, "--max-secs"); break;
        case 11: o.settle = num(optarg, 0, MAX_SECS, "--settle"); break;
        case 3: o.batch = (int)num(optarg, 1, 100000, "--batch"); break;
        case 4: o.conns = (int)num(optarg, 1, MAX_CONNS, "--conns"); break;
        case 5:
            o.npids = list(optarg, o.pids, 1, 1 << 30, "--pid");
            o.pid = o.pids[0];
            break;
        case 6: o.label = optarg; break;
        case 7: o.flood = (int)num(optarg, 1, MAX_CLIENTS, "--flood"); break;
        case 8: o.flood_rate = num(optarg, 0, 1e8, "--flood-rate"); break;
        case 9: lg_tls_ca = optarg; break;
        case 10: o.between = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind != argc - 1 || o.port == 0) {
        usage(stderr);
        exit(2);
    }
    o.scenario = argv[optind];
    if (lg_tls_ca != NULL && strcmp(o.be->name, "dsjob") != 0)
        die("--tls-ca: back end '%s' has no TLS (use -b dsjob)", o.be->name);
}

/* Fills in the defaults that depend on the scenario. */
static void
defaults(void)
{
    bool fg = strcmp(o.scenario, "fg") == 0, fg1 = strcmp(o.scenario, "fg1") == 0;
    bool mixed = strcmp(o.scenario, "mixed") == 0;

    if (o.jobs == 0)
        o.jobs = mixed ? 1000000 : 200000;
    if (o.clients < 0)
        o.clients = fg || fg1 ? 16 : mixed ? 8 : 2;
    if (o.inflight < 0)
        o.inflight = fg1 || mixed ? 1 : 32;
    if (o.workers < 0)
        o.workers = fg || fg1 || mixed ? 4 : 8;
    if ((uint64_t)o.flood > o.jobs)
        o.flood = (int)o.jobs;
    if ((uint64_t)o.clients > o.jobs)
        o.clients = (int)o.jobs;
}

int
main(int argc, char **argv)
{
    double limit;
    int rc = 2;

    if (argc == 2 && strcmp(argv[1], "free-port") == 0)
        return free_port();
    if (argc == 3 && strcmp(argv[1], "wait-port") == 0)
        return wait_port(argv[2]);
    parse(argc, argv);
    defaults();
    setvbuf(stdout, NULL, _IOLBF, 0);
    payload = malloc(o.payload ? o.payload : 1);
    if (payload == NULL)
        die("%s", "out of memory");
    for (size_t i = 0; i < o.payload; i++)
        payload[i] = (unsigned char)('a' + i % 26);

    /* The watchdog: no scenario outlives its own limits by much. */
    limit = 2 * (o.warmup + o.secs) + 2 * o.max_secs + 60;
    alarm((unsigned)limit);

    if (strcmp(o.scenario, "fg") == 0 || strcmp(o.scenario, "fg1") == 0)
        rc = run_fg(o.scenario);
    else if (strcmp(o.scenario, "bg-submit") == 0 || strcmp(o.scenario, "memory") == 0)
        rc = run_bg_submit();
    else if (strcmp(o.scenario, "bg-drain") == 0)
        rc = run_drain("bg-submit", "bg-drain");
    else if (strcmp(o.scenario, "durable") == 0)
        rc = run_drain("durable-submit", "durable-drain");
    else if (strcmp(o.scenario, "mixed") == 0)
        rc = run_mixed();
    else if (strcmp(o.scenario, "connections") == 0)
        rc = run_connections();
    else
        die("unknown scenario '%s'", o.scenario);
    if (thread_err[0] != '\0')
        fprintf(stderr, "loadgen: %s: %s\n", o.label, thread_err);
    free(payload);
    return rc;
}
