/*
 * Counting. The hot paths only add to plain integers (bytes in conn.c, job
 * ends in lifecycle.c, refusals where they happen); the two per-job times
 * come from the loop's cached clock (no system call), read once when a job
 * is queued, once when it is grabbed and once when its attempt ends, kept
 * in the job's 4-byte stamp. Everything else is computed here, when a
 * listing is asked for: gauges from the queue and the connection list,
 * histograms made cumulative. The renderer writes Prometheus text samples,
 * which the admin "stats" command and HTTP /metrics both serve, so the two
 * never disagree on a name.
 */
#include "config.h"
#include "stats.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "conn.h"
#include "deps.h"
#include "flow.h"
#include "flow_ctl.h"
#include "job.h"
#include "queue.h"
#include "schedule.h"
#include "srv.h"

/* Upper bounds of the time buckets, ms: 1 ms to 10 minutes, then +Inf. */
static const uint32_t time_bounds[STATS_NBOUNDS] = {
    1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 60000, 600000,
};

/* Upper bounds of the batch-size buckets, operations: powers of two to 8192. */
static const uint32_t ops_bounds[STATS_NBOUNDS] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
};

uint32_t
stats_clock(const struct srv *srv)
{
    return clock_loop_ms(srv->base);
}

void
stats_observe(struct stats_hist *h, bool times, uint64_t v)
{
    const uint32_t *b = times ? time_bounds : ops_bounds;
    unsigned i = 0;

    while (i < STATS_NBOUNDS && v > b[i])
        i++;
    h->n[i]++;
    h->sum += v;
}

void
stats_queued(struct srv *srv, struct job *j)
{
    j->stamp = stats_clock(srv);
}

void
stats_grabbed(struct srv *srv, struct job *j)
{
    uint32_t now = stats_clock(srv);

    stats_observe(&j->func->stats.wait, true, (uint32_t)(now - j->stamp));
    j->stamp = now;
}

void
stats_ran(struct srv *srv, struct job *j)
{
    stats_observe(&j->func->stats.run, true, (uint32_t)(stats_clock(srv) - j->stamp));
}

const char *
stats_pg_waiting_next(const struct srv *srv, struct stats_walk *it, uint64_t *n)
{
    const char *name = it->at == NULL ? srv->storage.waiting : it->at;

    /* The list: name NUL count NUL, nwaiting times. */
    if (name == NULL || it->i >= srv->storage.nwaiting)
        return NULL;
    *n = strtoull(name + strlen(name) + 1, NULL, 10);
    it->at = name + strlen(name) + 1;
    it->at += strlen(it->at) + 1;
    it->i++;
    return name;
}

uint64_t
stats_pg_waiting(const struct srv *srv, const char *name, size_t len)
{
    struct stats_walk it = {NULL, 0};
    const char *w;
    uint64_t n = 0;

    while ((w = stats_pg_waiting_next(srv, &it, &n)) != NULL)
        if (strlen(w) == len && memcmp(w, name, len) == 0)
            return n;
    return 0;
}

uint64_t
stats_oldest_ms(const struct srv *srv, const struct func *f)
{
    uint32_t now = stats_clock(srv), oldest = 0;
    int p;

    /* A job run again goes back to the head with a new stamp: compare the heads. */
    for (p = 0; p < JOB_NPRIO; p++) {
        const struct job *j = TAILQ_FIRST(&f->jobs[p]);

        if (j != NULL && (uint32_t)(now - j->stamp) > oldest)
            oldest = now - j->stamp;
    }
    return oldest;
}

void
stats_conns(const struct srv *srv, unsigned counts[3])
{
    const struct conn *c;

    counts[0] = counts[1] = counts[2] = 0;
    TAILQ_FOREACH (c, &srv->conns, link) {
        if (c->admin_seen)
            counts[2]++;
        else if (c->worker.nabilities > 0 || c->worker.nheld > 0)
            counts[1]++;
        else
            counts[0]++;
    }
}

/*
 * The writer: lines are gathered in a block of its own and handed to the
 * evbuffer a block at a time, since a render is hundreds of thousands of
 * short pieces and one evbuffer_add each would cost more than the rest.
 */
struct out {
    struct evbuffer *buf; /* where lines go (borrowed) */
    bool comments;        /* # HELP and # TYPE lines too */
    bool failed;          /* an append failed: out of memory */
    size_t len;           /* bytes used in block */
    char block[16384];    /* the lines not yet in buf */
};

static void
flush_out(struct out *o)
{
    if (o->len > 0 && evbuffer_add(o->buf, o->block, o->len) != 0)
        o->failed = true;
    o->len = 0;
}

static void
put(struct out *o, const char *s, size_t len)
{
    if (o->len + len > sizeof(o->block)) {
        flush_out(o);
        if (len > sizeof(o->block)) {
            if (evbuffer_add(o->buf, s, len) != 0)
                o->failed = true;
            return;
        }
    }
    memcpy(o->block + o->len, s, len);
    o->len += len;
}

static void
puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void
put_u64(struct out *o, uint64_t v)
{
    char tmp[24], *p = tmp + sizeof(tmp);

    do
        *--p = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    put(o, p, (size_t)(tmp + sizeof(tmp) - p));
}

/* ms as seconds, exactly: "1.234". */
static void
put_ms(struct out *o, uint64_t ms)
{
    char tmp[8];

    put_u64(o, ms / 1000);
    if (ms % 1000 != 0) {
        snprintf(tmp, sizeof(tmp), ".%03u", (unsigned)(ms % 1000));
        put(o, tmp, strlen(tmp));
    }
}

/* us as seconds, exactly: "0.001234". */
static void
put_us(struct out *o, uint64_t us)
{
    char tmp[12];

    put_u64(o, us / 1000000);
    snprintf(tmp, sizeof(tmp), ".%06u", (unsigned)(us % 1000000));
    put(o, tmp, strlen(tmp));
}

/* A label value, escaped as the exposition format says (backslash, quote, newline). */
static void
put_label(struct out *o, const char *s, size_t len)
{
    size_t i, run = 0;

    for (i = 0; i < len; i++) {
        const char *esc = s[i] == '\\' ? "\\\\" : s[i] == '"' ? "\\\"" : s[i] == '\n' ? "\\n" : 0;

        if (esc == NULL)
            continue;
        put(o, s + run, i - run);
        puts_(o, esc);
        run = i + 1;
    }
    put(o, s + run, len - run);
}

static void
family(struct out *o, const char *name, const char *type, const char *help)
{
    if (!o->comments)
        return;
    puts_(o, "# HELP dsjob_");
    puts_(o, name);
    put(o, " ", 1);
    puts_(o, help);
    puts_(o, "\n# TYPE dsjob_");
    puts_(o, name);
    put(o, " ", 1);
    puts_(o, type);
    put(o, "\n", 1);
}

/*
 * A sample's name and labels, up to the value: dsjob_NAME{function="F",
 * KEY="VAL"} (either label may be absent).
 */
static void
sample(struct out *o, const char *name, const struct func *f, const char *key, const char *val)
{
    puts_(o, "dsjob_");
    puts_(o, name);
    if (f == NULL && key == NULL) {
        put(o, " ", 1);
        return;
    }
    put(o, "{", 1);
    if (f != NULL) {
        puts_(o, "function=\"");
        put_label(o, f->name, f->name_len);
        put(o, "\"", 1);
    }
    if (key != NULL) {
        if (f != NULL)
            put(o, ",", 1);
        puts_(o, key);
        puts_(o, "=\"");
        puts_(o, val);
        put(o, "\"", 1);
    }
    put(o, "} ", 2);
}

static void
value(struct out *o, const char *name, const struct func *f, uint64_t v)
{
    sample(o, name, f, NULL, NULL);
    put_u64(o, v);
    put(o, "\n", 1);
}

static uint64_t
hist_count(const struct stats_hist *h)
{
    uint64_t n = 0;
    unsigned i;

    for (i = 0; i <= STATS_NBOUNDS; i++)
        n += h->n[i];
    return n;
}

/* A histogram's _bucket, _sum and _count samples; times in ms are written as seconds. */
static void
hist(struct out *o, const char *name, const struct func *f, const struct stats_hist *h, bool times)
{
    const uint32_t *b = times ? time_bounds : ops_bounds;
    char bucket[64], le[24];
    uint64_t total = 0;
    unsigned i;

    snprintf(bucket, sizeof(bucket), "%s_bucket", name);
    for (i = 0; i <= STATS_NBOUNDS; i++) {
        total += h->n[i];
        if (i == STATS_NBOUNDS)
            snprintf(le, sizeof(le), "+Inf");
        else if (times)
            snprintf(le, sizeof(le), "%g", b[i] / 1000.0);
        else
            snprintf(le, sizeof(le), "%" PRIu32, b[i]);
        sample(o, bucket, f, "le", le);
        put_u64(o, total);
        put(o, "\n", 1);
    }
    snprintf(bucket, sizeof(bucket), "%s_sum", name);
    sample(o, bucket, f, NULL, NULL);
    if (times)
        put_ms(o, h->sum);
    else
        put_u64(o, h->sum);
    put(o, "\n", 1);
    snprintf(bucket, sizeof(bucket), "%s_count", name);
    value(o, bucket, f, total);
}

static const char *const limit_names[STATS_NLIMITS] = {
    [STATS_LIMIT_MAX_CONNECTIONS] = "max_connections",
    [STATS_LIMIT_MAX_JOBS] = "max_jobs",
    [STATS_LIMIT_MAX_QUEUE] = "max_queue",
    [STATS_LIMIT_MAX_PACKET_SIZE] = "max_packet_size",
    [STATS_LIMIT_MAX_OUTPUT_BUFFER] = "max_output_buffer",
    [STATS_LIMIT_IDLE_TIMEOUT] = "idle_timeout",
    [STATS_LIMIT_REJECT_NO_WORKER] = "reject_no_worker",
    [STATS_LIMIT_MAX_DEAD] = "max_dead",
    [STATS_LIMIT_DEAD_MAX_AGE] = "dead_max_age",
    [STATS_LIMIT_MAX_KEPT] = "max_kept",
};

const char *
stats_limit_name(enum stats_limit limit)
{
    return (unsigned)limit < STATS_NLIMITS ? limit_names[limit] : "unknown";
}

static void
server_wide(struct srv *srv, struct out *o)
{
    static const char *const kinds[3] = {"client", "worker", "admin"};
    const struct stats *st = &srv->stats;
    unsigned counts[3], i;

    family(o, "uptime_seconds", "gauge", "Seconds since the server started.");
    value(o, "uptime_seconds", NULL, (uint64_t)(clock_uptime() - srv->stats.started));
    family(o, "connections", "gauge", "Open connections by kind (admin: sent an admin line).");
    stats_conns(srv, counts);
    for (i = 0; i < 3; i++) {
        sample(o, "connections", NULL, "kind", kinds[i]);
        put_u64(o, counts[i]);
        put(o, "\n", 1);
    }
    family(o, "connections_accepted_total", "counter", "Connections accepted.");
    value(o, "connections_accepted_total", NULL, st->accepted);
    family(o, "received_bytes_total", "counter", "Bytes read from peers.");
    value(o, "received_bytes_total", NULL, st->bytes_in);
    family(o, "sent_bytes_total", "counter", "Bytes written to peers.");
    value(o, "sent_bytes_total", NULL, st->bytes_out);
    family(o, "jobs", "gauge", "Jobs held: queued, scheduled, running, dead and kept.");
    value(o, "jobs", NULL, srv->queue.njobs);
    family(o, "max_dead", "gauge",
           "--max-dead: dead jobs kept per function (0: none is kept, as in gearmand).");
    value(o, "max_dead", NULL, srv->cfg.max_dead);
    family(o, "keep_results_seconds", "gauge",
           "--keep-results: seconds a background job's result is kept (0: none is kept).");
    value(o, "keep_results_seconds", NULL, srv->cfg.keep_results);
    family(o, "max_kept", "gauge", "--max-kept: kept results held at most, over all functions.");
    value(o, "max_kept", NULL, srv->cfg.max_kept);
    family(o, "dead_max_age_seconds", "gauge",
           "--dead-max-age: seconds a dead job is kept at most (0: no age limit).");
    value(o, "dead_max_age_seconds", NULL, srv->cfg.dead_max_age);
    family(o, "jobs_held", "gauge", "Jobs that wait for other jobs to succeed (OPTION_REQ after).");
    value(o, "jobs_held", NULL, deps_held_count(srv));
    family(o, "jobs_replayed_total", "counter", "Jobs replayed from the store at start.");
    value(o, "jobs_replayed_total", NULL, st->replayed);
    family(o, "schedules", "gauge", "Periodic schedules known to this server, paused ones too.");
    value(o, "schedules", NULL, schedule_count(srv));
    family(o, "schedule_fires_total", "counter",
           "Jobs submitted by periodic schedules (a tick another server fired is not counted).");
    value(o, "schedule_fires_total", NULL, st->sched_fires);
    if (srv->storage.shared) {
        family(o, "pg_claimed_total", "counter",
               "Jobs this server took by lease from the shared store.");
        value(o, "pg_claimed_total", NULL, st->pg_claimed);
        family(o, "pg_lease_lost_total", "counter",
               "Results and rewrites discarded because another server had taken the job.");
        value(o, "pg_lease_lost_total", NULL, st->pg_lease_lost);
        family(o, "pg_dropped_total", "counter",
               "Queued jobs dropped here because another server had taken them.");
        value(o, "pg_dropped_total", NULL, st->pg_dropped);
        family(o, "pg_released_total", "counter",
               "Leases given up on jobs this server had lost track of (a batch's answer lost "
               "with its connection).");
        value(o, "pg_released_total", NULL, st->pg_released);
        family(o, "pg_jobs_waiting", "gauge",
               "Jobs ready in the shared PostgreSQL table under no server's lease, by function "
               "(counted at each lease renewal).");
        {
            struct stats_walk it = {NULL, 0};
            const char *w;
            char num[24];
            uint64_t n;

            while ((w = stats_pg_waiting_next(srv, &it, &n)) != NULL) {
                puts_(o, "dsjob_pg_jobs_waiting{function=\"");
                put_label(o, w, strlen(w));
                snprintf(num, sizeof(num), "\"} %" PRIu64 "\n", n);
                puts_(o, num);
            }
        }
    }
    family(o, "limit_hits_total", "counter", "Refusals and drops, by the limit that made them.");
    for (i = 0; i < STATS_NLIMITS; i++) {
        sample(o, "limit_hits_total", NULL, "limit", stats_limit_name((enum stats_limit)i));
        put_u64(o, st->limits[i]);
        put(o, "\n", 1);
    }
    family(o, "metrics_render_seconds", "gauge",
           "Seconds the previous rendering of these samples took (0 before the first).");
    sample(o, "metrics_render_seconds", NULL, NULL, NULL);
    put_us(o, st->render_us);
    put(o, "\n", 1);
    family(o, "store_commits_total", "counter", "Store batches committed.");
    value(o, "store_commits_total", NULL, st->commits);
    family(o, "store_commit_errors_total", "counter", "Store batches whose commit failed.");
    value(o, "store_commit_errors_total", NULL, st->commit_errors);
    family(o, "store_batch_operations", "histogram",
           "Operations (adds, updates, removes) per batch.");
    hist(o, "store_batch_operations", NULL, &st->batch_ops, false);
    family(o, "store_commit_seconds", "histogram",
           "Seconds from a batch's hand-off to the writer to its answer on the loop.");
    hist(o, "store_commit_seconds", NULL, &st->commit_ms, true);
}

/* The per-function counters, in the order they are printed. */
static const struct {
    const char *name; /* the family, after dsjob_ */
    const char *help; /* its # HELP text */
    size_t off;       /* offsetof in struct stats_func */
} func_counters[] = {
    {"jobs_submitted_total", "Jobs submitted (not coalesced).",
     offsetof(struct stats_func, submitted)},
    {"jobs_completed_total", "Jobs that ended with WORK_COMPLETE.",
     offsetof(struct stats_func, completed)},
    {"jobs_failed_total", "Jobs that ended failed.", offsetof(struct stats_func, failed)},
    {"jobs_exceptions_total", "Jobs that ended with WORK_EXCEPTION.",
     offsetof(struct stats_func, exceptions)},
    {"jobs_retried_total", "Failed attempts run again.", offsetof(struct stats_func, retried)},
    {"jobs_cancelled_total", "Jobs cancelled by an administrator.",
     offsetof(struct stats_func, cancelled)},
    {"jobs_expired_total", "Jobs not started by their deadline (expire-in, --max-queue-age).",
     offsetof(struct stats_func, expired)},
};

static void
per_function(struct srv *srv, struct out *o)
{
    const struct func_list *fl = &srv->queue.func_order;
    const struct func *f;
    size_t i;
    int p;

    for (i = 0; i < sizeof(func_counters) / sizeof(func_counters[0]); i++) {
        family(o, func_counters[i].name, "counter", func_counters[i].help);
        TAILQ_FOREACH (f, fl, order)
            value(
                o, func_counters[i].name, f,
                *(const uint64_t *)(const void *)((const char *)&f->stats + func_counters[i].off));
    }
    family(o, "jobs_queued", "gauge", "Jobs waiting for a worker, by priority.");
    TAILQ_FOREACH (f, fl, order) {
        for (p = 0; p < JOB_NPRIO; p++) {
            sample(o, "jobs_queued", f, "priority", job_prio_name((unsigned)p));
            put_u64(o, f->nqueued[p]);
            put(o, "\n", 1);
        }
    }
    family(o, "jobs_scheduled", "gauge", "Jobs waiting for their time (epoch or retry backoff).");
    TAILQ_FOREACH (f, fl, order)
        value(o, "jobs_scheduled", f, f->nscheduled);
    family(o, "jobs_running", "gauge", "Jobs held by workers.");
    TAILQ_FOREACH (f, fl, order)
        value(o, "jobs_running", f, f->nrunning + f->nsettling);
    family(o, "jobs_dead", "gauge", "Jobs in the dead set (--max-dead).");
    TAILQ_FOREACH (f, fl, order)
        value(o, "jobs_dead", f, f->ndead);
    family(o, "jobs_kept", "gauge", "Ended jobs kept (--keep-results, --unique-for).");
    TAILQ_FOREACH (f, fl, order)
        value(o, "jobs_kept", f, f->nkept);
    family(o, "workers", "gauge", "Workers that can do the function.");
    TAILQ_FOREACH (f, fl, order)
        value(o, "workers", f, f->nworkers);
    family(o, "oldest_queued_job_age_seconds", "gauge", "Age of the oldest queued job.");
    TAILQ_FOREACH (f, fl, order) {
        sample(o, "oldest_queued_job_age_seconds", f, NULL, NULL);
        put_ms(o, stats_oldest_ms(srv, f));
        put(o, "\n", 1);
    }
    /* A function that never had a job grabbed has no histogram series: 34 lines saved. */
    family(o, "job_queue_wait_seconds", "histogram", "Seconds from queued to grabbed.");
    TAILQ_FOREACH (f, fl, order)
        if (hist_count(&f->stats.wait) > 0)
            hist(o, "job_queue_wait_seconds", f, &f->stats.wait, true);
    family(o, "job_run_seconds", "histogram", "Seconds from grabbed to the attempt's end.");
    TAILQ_FOREACH (f, fl, order)
        if (hist_count(&f->stats.run) > 0)
            hist(o, "job_run_seconds", f, &f->stats.run, true);
}

/* Flow control's gauges: only functions with settings, only when there are any. */
static void
per_flow(struct srv *srv, struct out *o)
{
    const struct flow_list *fls = &srv->queue.flows;
    int64_t now = flow_ctl_now_ms();
    struct flow *fl;
    char num[48];

    if (TAILQ_EMPTY(fls))
        return;
    family(o, "flow_concurrency_limit", "gauge",
           "Most jobs of the function running at once (limit; 0: none).");
    TAILQ_FOREACH (fl, fls, all)
        value(o, "flow_concurrency_limit", fl->func, fl->conf.concurrency);
    family(o, "flow_running", "gauge", "Jobs of the function running, as its limit counts them.");
    TAILQ_FOREACH (fl, fls, all)
        value(o, "flow_running", fl->func, fl->func->nrunning);
    family(o, "flow_rate_limit_per_second", "gauge",
           "Most starts of the function per second (limit rate; 0: none).");
    TAILQ_FOREACH (fl, fls, all) {
        sample(o, "flow_rate_limit_per_second", fl->func, NULL, NULL);
        snprintf(num, sizeof(num), "%g\n",
                 fl->conf.rate ? fl->conf.rate * 1000.0 / fl->conf.period_ms : 0.0);
        puts_(o, num);
    }
    family(o, "flow_tokens", "gauge", "Starts the function's rate allows now (its bucket).");
    TAILQ_FOREACH (fl, fls, all) {
        double t = flow_tokens(fl, now);

        if (t < 0)
            continue;
        sample(o, "flow_tokens", fl->func, NULL, NULL);
        snprintf(num, sizeof(num), "%.3f\n", t);
        puts_(o, num);
    }
    family(o, "flow_paused", "gauge", "1 while the function is paused.");
    TAILQ_FOREACH (fl, fls, all)
        value(o, "flow_paused", fl->func, fl->conf.paused);
    family(o, "flow_jobs_held", "gauge",
           "Queued jobs of the function none of which may start now (held back by a limit or "
           "a pause).");
    TAILQ_FOREACH (fl, fls, all) {
        struct func *f = fl->func;
        unsigned n = f->nqueued[0] + f->nqueued[1] + f->nqueued[2];

        value(o, "flow_jobs_held", f, n > 0 && !flow_ready(f, now) ? n : 0);
    }
    family(o, "flow_held_total", "counter",
           "Times a worker got no job of the function because of a limit or a pause.");
    TAILQ_FOREACH (fl, fls, all)
        value(o, "flow_held_total", fl->func, fl->held);
    family(o, "flow_keys", "gauge", "Partition keys the function holds (limit key-...).");
    TAILQ_FOREACH (fl, fls, all)
        value(o, "flow_keys", fl->func, fl->nkeys);
    family(o, "flow_sequences_held", "gauge",
           "Sequence keys of the function a failed job holds (in its retry backoff, or dead "
           "with sequence hold).");
    TAILQ_FOREACH (fl, fls, all)
        value(o, "flow_sequences_held", fl->func, fl->nkeys_held);
}

int
stats_render(struct srv *srv, struct evbuffer *out, bool comments)
{
    struct out *o = malloc(sizeof(*o));
    struct timespec t0, t1;
    int rc;

    if (o == NULL)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    o->buf = out;
    o->comments = comments;
    o->failed = false;
    o->len = 0;
    server_wide(srv, o);
    per_function(srv, o);
    per_flow(srv, o);
    flush_out(o);
    rc = o->failed ? -1 : 0;
    free(o);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    srv->stats.render_us =
        (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000);
    return rc;
}
