/*
 * dataset-embedded: the job server inside the program that needs it, as
 * tf.data service's DispatchServer is. It starts libdsjobserver in a thread
 * of its own on an ephemeral loopback port, keeping its state (the SQLite
 * store of background jobs) in a work dir, reads back the address, points
 * producer threads (libdsjobworker) and the consumer (libdsjobclient) at
 * it, and stops and joins it at the end. Nothing listens beyond loopback
 * and nothing outlives the program but the work dir.
 *
 *   dataset-embedded --work-dir DIR --queue [-n SHARDS] [-r ROWS] [--seed S]
 *       queues a background dataset.save job for every shard and stops the
 *       server before any producer runs: the jobs are only in DIR's store
 *       (their specs also go to DIR/queued, for the next run to check).
 *   dataset-embedded --work-dir DIR [-n SHARDS] [-r ROWS] [--seed S] [-c N] [-q]
 *       starts the server on DIR again, whose store gives back every job
 *       queued before, starts N producer threads, reads the dataset through
 *       the consumer (checked as dataset-consumer checks it), then waits for
 *       the background jobs of DIR/queued to have saved their shards under
 *       DIR/shards and checks each file against the dataset.
 * Exit status 0 when everything checked out, 1 otherwise, 2 for usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/client.h>
#include <dsjob/server.h>
#include <dsjob/worker.h>

#include "consumer.h"
#include "producer.h"

#define SAVE_WAIT_MS 60000 /* how long a background save may take to show up */
#define SAVE_POLL_MS 20

struct options {
    const char *work_dir;
    int queue;                   /* --queue: queue the saves and stop */
    int concurrency;             /* producer threads */
    int quiet;                   /* -q: no rows on stdout */
    struct dataset_spec dataset; /* shard not used */
};

static void
usage(FILE *f)
{
    fputs("usage: dataset-embedded --work-dir DIR --queue [-n SHARDS] [-r ROWS] [--seed S]\n"
          "       dataset-embedded --work-dir DIR [-n SHARDS] [-r ROWS] [--seed S] [-c N] [-q]\n",
          f);
}

static uint32_t
number(const char *opt, const char *arg, unsigned long lo, unsigned long hi)
{
    char *end;
    unsigned long v = strtoul(arg, &end, 10);

    if (end == arg || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "dataset-embedded: '%s' wants a number from %lu to %lu, not '%s'\n", opt,
                lo, hi, arg);
        exit(2);
    }
    return (uint32_t)v;
}

static void
parse_args(int argc, char **argv, struct options *o)
{
    enum { OPT_WORK_DIR = 256, OPT_QUEUE, OPT_SEED };
    static const struct option longopts[] = {
        {"work-dir", required_argument, NULL, OPT_WORK_DIR},
        {"queue", no_argument, NULL, OPT_QUEUE},
        {"shards", required_argument, NULL, 'n'},
        {"rows", required_argument, NULL, 'r'},
        {"seed", required_argument, NULL, OPT_SEED},
        {"concurrency", required_argument, NULL, 'c'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;

    memset(o, 0, sizeof(*o));
    strcpy(o->dataset.name, "demo");
    o->dataset.shards = 8;
    o->dataset.rows = 2000;
    o->dataset.seed = 42;
    o->concurrency = 4;
    while ((opt = getopt_long(argc, argv, "n:r:c:qh", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_WORK_DIR: o->work_dir = optarg; break;
        case OPT_QUEUE: o->queue = 1; break;
        case 'n': o->dataset.shards = number("-n", optarg, 1, DATASET_SHARDS_MAX); break;
        case 'r': o->dataset.rows = number("-r", optarg, 0, DATASET_ROWS_MAX); break;
        case OPT_SEED: o->dataset.seed = number("--seed", optarg, 0, DATASET_SEED_MAX); break;
        case 'c': o->concurrency = (int)number("-c", optarg, 1, 64); break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind != argc || o->work_dir == NULL) {
        usage(stderr);
        exit(2);
    }
}

/* Starts the server on the work dir, in its own thread; its address goes in addr. */
static struct dsjob_server *
server_start(const char *work_dir, char *addr, size_t cap)
{
    struct dsjob_server_config cfg;
    struct dsjob_server *srv;
    char err[256], log[4096];

    dsjob_server_config_init(&cfg);
    cfg.port = 0; /* any free port: the address is read back below */
    cfg.store = "sqlite";
    cfg.work_dir = work_dir;
    snprintf(log, sizeof(log), "%s/dsjobd.log", work_dir);
    cfg.log_file = log;
    srv = dsjob_server_new(&cfg, err, sizeof(err));
    if (srv == NULL) {
        fprintf(stderr, "dataset-embedded: %s\n", err);
        return NULL;
    }
    if (dsjob_server_start(srv) != DSJOB_OK || dsjob_server_address(srv, addr, cap) != DSJOB_OK) {
        fprintf(stderr, "dataset-embedded: cannot start the server: %s\n",
                dsjob_server_errmsg(srv));
        dsjob_server_free(srv);
        return NULL;
    }
    fprintf(stderr, "dataset-embedded: server on %s, state in %s\n", addr, work_dir);
    return srv;
}

static int
server_finish(struct dsjob_server *srv)
{
    int err;

    dsjob_server_stop(srv, true); /* graceful: running jobs finish first */
    err = dsjob_server_join(srv);
    dsjob_server_free(srv);
    return err == DSJOB_OK ? 0 : 1;
}

static void
path_in(const struct options *o, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", o->work_dir, name);
}

/* --queue: a durable background save per shard, then stop with none run. */
static int
queue_saves(const struct options *o, const char *addr)
{
    struct dsjob_client *c = dsjob_client_new();
    char path[4096], spec[DATASET_SPEC_MAX], unique[DATASET_NAME_MAX + 48];
    char handle[DSJOB_HANDLE_MAX];
    struct dataset_spec s = o->dataset;
    FILE *list;
    int rc = 1;

    path_in(o, "queued", path, sizeof(path));
    list = fopen(path, "a");
    if (c == NULL || list == NULL || dsjob_client_add_server(c, addr) != DSJOB_OK) {
        fprintf(stderr, "dataset-embedded: cannot set up the client or %s\n", path);
        goto out;
    }
    for (s.shard = 0; s.shard < s.shards; s.shard++) {
        int err;

        dataset_spec_format(&s, spec, sizeof(spec));
        snprintf(unique, sizeof(unique), "save/%s/%" PRIu32 "/%" PRIu32 "/%" PRIu32 "of%" PRIu32,
                 s.name, s.seed, s.rows, s.shard, s.shards);
        /* Acknowledged only once the server's store has committed it. */
        err = dsjob_client_submit_bg(c, "dataset.save", unique, spec, strlen(spec),
                                     DSJOB_PRIO_NORMAL, handle, sizeof(handle));
        if (err != DSJOB_OK) {
            fprintf(stderr, "dataset-embedded: queueing shard %" PRIu32 ": %s: %s\n", s.shard,
                    dsjob_strerror(err), dsjob_client_errmsg(c));
            goto out;
        }
        fprintf(list, "%s\n", spec);
        printf("queued dataset.save %s as %s\n", spec, handle);
    }
    rc = 0;
out:
    if (list != NULL && fclose(list) != 0)
        rc = 1;
    dsjob_client_free(c);
    return rc;
}

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};

    nanosleep(&ts, NULL);
}

/* Waits for the saved file of spec and checks it against the dataset. */
static int
check_saved(const char *save_dir, const struct dataset_spec *spec)
{
    struct dataset_summary want;
    char path[4096], line[DATASET_ROW_MAX + 2];
    uint64_t count = 0;
    uint32_t adler = DATASET_ADLER_INIT;
    unsigned waited = 0;
    FILE *f;

    producer_save_path(save_dir, spec, path, sizeof(path));
    while ((f = fopen(path, "r")) == NULL && errno == ENOENT && waited < SAVE_WAIT_MS) {
        sleep_ms(SAVE_POLL_MS);
        waited += SAVE_POLL_MS;
    }
    if (f == NULL) {
        fprintf(stderr, "dataset-embedded: %s: %s\n", path, strerror(errno));
        return 1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        adler = dataset_adler32(adler, line, strlen(line));
        count++;
    }
    fclose(f);
    dataset_expect(spec, &want);
    if (count != want.count || adler != want.adler32) {
        fprintf(stderr,
                "dataset-embedded: %s: %" PRIu64 " rows, adler32 %08" PRIx32
                "; the shard has %" PRIu64 ", %08" PRIx32 "\n",
                path, count, adler, want.count, want.adler32);
        return 1;
    }
    printf("# saved %s: %" PRIu64 " rows, adler32 %08" PRIx32 ", ok\n", path, count, adler);
    return 0;
}

/* Checks every save that an earlier --queue run left in DIR/queued, then forgets them. */
static int
check_queued(const struct options *o, const char *save_dir)
{
    char path[4096], line[DATASET_SPEC_MAX + 2], err[DATASET_ERR_MAX];
    struct dataset_spec spec;
    FILE *list;
    int bad = 0, n = 0;

    path_in(o, "queued", path, sizeof(path));
    list = fopen(path, "r");
    if (list == NULL)
        return 0; /* nothing was queued */
    while (fgets(line, sizeof(line), list) != NULL) {
        if (dataset_spec_parse(&spec, line, strlen(line), err) < 0) {
            fprintf(stderr, "dataset-embedded: %s: %s\n", path, err);
            bad = 1;
            continue;
        }
        bad |= check_saved(save_dir, &spec);
        n++;
    }
    fclose(list);
    if (!bad)
        unlink(path);
    fprintf(stderr, "dataset-embedded: %d background shards queued before the restart: %s\n", n,
            bad ? "NOT all saved" : "all saved");
    return bad;
}

static void *
producers_main(void *arg)
{
    struct dsjob_worker *w = arg;
    int err = dsjob_worker_run(w);

    if (err != DSJOB_OK)
        fprintf(stderr, "dataset-embedded: producers: %s: %s\n", dsjob_strerror(err),
                dsjob_worker_errmsg(w));
    return NULL;
}

/* The producers in threads, the consumer here, then the background saves. */
static int
serve(const struct options *o, const char *addr)
{
    struct producer_opts po;
    struct consumer_opts co;
    struct consumer_result res;
    struct dsjob_worker *w = dsjob_worker_new();
    struct dsjob_client *c = dsjob_client_new();
    char save_dir[4096];
    pthread_t producers;
    int rc = 1, started = 0;

    path_in(o, "shards", save_dir, sizeof(save_dir));
    if (mkdir(save_dir, 0777) < 0 && errno != EEXIST) {
        fprintf(stderr, "dataset-embedded: %s: %s\n", save_dir, strerror(errno));
        goto out;
    }
    memset(&po, 0, sizeof(po));
    po.save_dir = save_dir;
    if (w == NULL || c == NULL || dsjob_worker_add_server(w, addr) != DSJOB_OK ||
        dsjob_worker_set_concurrency(w, o->concurrency) != DSJOB_OK ||
        producer_register(w, &po) != DSJOB_OK || dsjob_client_add_server(c, addr) != DSJOB_OK)
        goto out;
    if (pthread_create(&producers, NULL, producers_main, w) != 0)
        goto out;
    started = 1;

    memset(&co, 0, sizeof(co));
    co.dataset = o->dataset;
    co.attempts = 3;
    co.out = o->quiet ? NULL : stdout;
    rc = consumer_run(c, &co, &res) == 0 ? 0 : 1;
    if (rc == 0)
        fprintf(stderr,
                "dataset-embedded: %s: %" PRIu32 " shards, %" PRIu64
                " rows, every summary matched\n",
                co.dataset.name, res.ok, res.rows);
    else
        fprintf(stderr, "dataset-embedded: %s: %s\n", co.dataset.name, res.why);
    rc |= check_queued(o, save_dir);
out:
    if (started) {
        dsjob_worker_stop(w);
        pthread_join(producers, NULL);
    }
    dsjob_worker_free(w);
    dsjob_client_free(c);
    return rc;
}

int
main(int argc, char **argv)
{
    struct options o;
    struct dsjob_server *srv;
    char addr[128];
    int rc;

    parse_args(argc, argv, &o);
    srv = server_start(o.work_dir, addr, sizeof(addr));
    if (srv == NULL)
        return 1;
    rc = o.queue ? queue_saves(&o, addr) : serve(&o, addr);
    fflush(stdout);
    rc |= server_finish(srv);
    return rc;
}
