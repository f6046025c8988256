/*
 * The dataset's consumer (see consumer.h). One task set carries every
 * shard; it is run in slices of RUN_SLICE_MS so that a shard that failed can
 * be added to it again between slices (the set takes new tasks between
 * runs) while the others keep streaming. The rows of a shard must arrive in
 * order, from row `shard` on, one stride apart: a first row seen again
 * means the server gave the shard to another producer after the first one
 * died, so the rows of the dead attempt are dropped; any other gap or
 * repeat is bad data.
 */
#define _POSIX_C_SOURCE 200809L

#include "consumer.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RUN_SLICE_MS 100
#define PROGRESS_EVERY_MS 100
#define PROGRESS_BAR 24

enum shard_state {
    SHARD_RUNNING = 0, /* a task is submitted */
    SHARD_RESUBMIT,    /* failed; to be submitted again after this slice */
    SHARD_OK,          /* completed and matched */
    SHARD_BAD,         /* mismatched, raised an exception, or out of attempts */
};

struct consumer;

struct shard {
    struct consumer *cs;      /* back to the whole run */
    struct dataset_spec spec; /* this shard's spec */
    char payload[DATASET_SPEC_MAX];
    char unique[DATASET_NAME_MAX + 48];
    enum shard_state state;
    unsigned attempt;               /* submits so far */
    uint64_t expected;              /* rows a whole shard has */
    uint64_t got;                   /* rows of the current attempt */
    uint32_t adler;                 /* Adler-32 of those rows */
    bool disorder;                  /* a row came out of order in this attempt */
    unsigned num;                   /* the last WORK_STATUS numerator of this attempt */
    char tail[DATASET_SUMMARY_MAX]; /* a summary that came as WORK_DATA (produce.sh) */
    size_t tail_len;                /* its bytes; 0: none */
};

struct consumer {
    const struct consumer_opts *o;
    struct consumer_result *res;
    struct shard *shards;
    FILE *mark;        /* where marker lines go: o->out, or stderr */
    bool progress;     /* draw the progress line */
    bool drawn;        /* a progress line is on the terminal */
    int64_t last_draw; /* when, in ms */
    uint64_t total;    /* rows of the whole dataset */
};

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
erase_progress(struct consumer *cs)
{
    if (cs->drawn) {
        fputs("\r\033[K", stderr);
        cs->drawn = false;
    }
}

static void
draw_progress(struct consumer *cs, bool force)
{
    uint64_t done = 0;
    uint32_t i, finished = 0, n = cs->o->dataset.shards;
    int64_t t = now_ms();
    int fill;

    if (!cs->progress || (!force && t - cs->last_draw < PROGRESS_EVERY_MS))
        return;
    cs->last_draw = t;
    for (i = 0; i < n; i++) {
        const struct shard *s = &cs->shards[i];

        if (s->state == SHARD_OK || s->state == SHARD_BAD) {
            finished++;
            done += s->expected;
        } else {
            done += s->num;
        }
    }
    fill = cs->total > 0 ? (int)(done * PROGRESS_BAR / cs->total) : PROGRESS_BAR;
    fprintf(stderr,
            "\r\033[K[%.*s%*s] %" PRIu32 "/%" PRIu32 " shards, %" PRIu64 "/%" PRIu64 " rows", fill,
            "########################", PROGRESS_BAR - fill, "", finished, n, done, cs->total);
    fflush(stderr);
    cs->drawn = true;
}

/* Writes a marker line about shard s, after erasing the progress line. */
static void
mark(struct shard *s, const char *fmt, ...)
{
    struct consumer *cs = s->cs;
    va_list ap;

    if (cs->mark == stderr)
        erase_progress(cs);
    fprintf(cs->mark, "# shard %" PRIu32 " ", s->spec.shard);
    va_start(ap, fmt);
    vfprintf(cs->mark, fmt, ap);
    va_end(ap);
    fputc('\n', cs->mark);
}

/* Ends shard s unsuccessfully, keeping the first reason for the result. */
static void
give_up(struct shard *s, const char *why)
{
    struct consumer_result *res = s->cs->res;

    s->state = SHARD_BAD;
    res->bad++;
    if (res->why[0] == '\0')
        snprintf(res->why, sizeof(res->why), "shard %" PRIu32 ": %s", s->spec.shard, why);
    mark(s, "bad: %s", why);
}

/* Forgets the current attempt's rows, saying so on the marker stream. */
static void
drop_attempt(struct shard *s, const char *why)
{
    mark(s, "drop %" PRIu64 ": %s", s->got, why);
    s->got = 0;
    s->adler = DATASET_ADLER_INIT;
    s->disorder = false;
    s->num = 0;
    s->tail_len = 0;
}

static void
on_data(struct dsjob_task *t, const void *data, size_t len, void *user)
{
    struct shard *s = user;
    const struct consumer_opts *o = s->cs->o;
    int64_t g = dataset_row_id(data, len);
    uint64_t want = s->got * o->dataset.shards + s->spec.shard;

    (void)t;
    if (g < 0 && len > 0 && len < sizeof(s->tail) && *(const char *)data == '{') {
        /* A producer that can only write lines, such as produce.sh under
         * dsjob worker --stream, sends its summary as the last WORK_DATA
         * and completes with nothing: keep it for on_complete. */
        memcpy(s->tail, data, len);
        s->tail_len = len;
        return;
    }
    if (g == (int64_t)s->spec.shard && s->got > 0) {
        s->cs->res->restarts++;
        drop_attempt(s, "the server restarted the shard (its producer went away)");
        want = s->spec.shard;
    }
    if (g != (int64_t)want)
        s->disorder = true;
    s->adler = dataset_adler32(s->adler, data, len);
    s->got++;
    if (o->out != NULL) {
        fprintf(o->out, "%" PRIu32 "\t%.*s", s->spec.shard, (int)len, (const char *)data);
        if (len == 0 || ((const char *)data)[len - 1] != '\n')
            fputc('\n', o->out);
    }
}

static void
on_status(struct dsjob_task *t, unsigned num, unsigned den, void *user)
{
    struct shard *s = user;

    (void)t;
    s->num = num;
    if (s->cs->o->statuses)
        mark(s, "status %u/%u", num, den);
}

static void
on_complete(struct dsjob_task *t, const void *result, size_t len, void *user)
{
    struct shard *s = user;
    struct dataset_summary sum;
    char err[DATASET_ERR_MAX], why[2 * DATASET_ERR_MAX];

    (void)t;
    if (len == 0 && s->tail_len > 0) {
        result = s->tail;
        len = s->tail_len;
    }
    if (dataset_summary_parse(&sum, result, len, err) < 0) {
        snprintf(why, sizeof(why), "the summary is unreadable: %s", err);
        give_up(s, why);
    } else if (strcmp(sum.name, s->spec.name) != 0 || sum.shard != s->spec.shard ||
               sum.shards != s->spec.shards) {
        give_up(s, "the summary is about another shard");
    } else if (sum.count != s->got || sum.adler32 != s->adler) {
        snprintf(why, sizeof(why),
                 "got %" PRIu64 " rows with adler32 %08" PRIx32 ", the producer says %" PRIu64
                 " with %08" PRIx32,
                 s->got, s->adler, sum.count, sum.adler32);
        give_up(s, why);
    } else if (s->disorder || s->got != s->expected) {
        snprintf(why, sizeof(why), "%" PRIu64 " rows%s, the shard has %" PRIu64, s->got,
                 s->disorder ? " out of order" : "", s->expected);
        give_up(s, why);
    } else {
        s->state = SHARD_OK;
        s->cs->res->ok++;
        s->cs->res->rows += s->got;
        mark(s, "ok %" PRIu64 " %08" PRIx32, s->got, s->adler);
    }
}

/* WORK_FAIL, a server that gave up on the job, or no server: try again if allowed. */
static void
on_fail(struct dsjob_task *t, void *user)
{
    struct shard *s = user;
    const char *detail = dsjob_task_errmsg(t);
    char why[DATASET_ERR_MAX + 64];

    snprintf(why, sizeof(why), "attempt %u failed%s%s", s->attempt, *detail ? ": " : "", detail);
    if (s->attempt >= s->cs->o->attempts) {
        give_up(s, why);
        return;
    }
    drop_attempt(s, why);
    s->state = SHARD_RESUBMIT;
}

/* An exception is the producer refusing the spec: submitting again would not help. */
static void
on_exception(struct dsjob_task *t, const char *text, size_t len, void *user)
{
    struct shard *s = user;
    char why[DATASET_ERR_MAX];

    (void)t;
    snprintf(why, sizeof(why), "exception: %.*s", (int)len, text);
    give_up(s, why);
}

static int
submit(struct dsjob_taskset *ts, struct shard *s)
{
    s->attempt++;
    s->state = SHARD_RUNNING;
    return dsjob_taskset_add(ts, "dataset.shard", s->unique, s->payload, strlen(s->payload),
                             s->cs->o->prio, 0, s, NULL);
}

int
consumer_run(struct dsjob_client *c, const struct consumer_opts *o, struct consumer_result *res)
{
    static const struct dsjob_task_callbacks cb = {
        .status = on_status,
        .data = on_data,
        .complete = on_complete,
        .fail = on_fail,
        .exception = on_exception,
    };
    struct consumer cs;
    struct dsjob_taskset *ts;
    uint32_t i, n = o->dataset.shards;
    int rc = -1;

    memset(res, 0, sizeof(*res));
    memset(&cs, 0, sizeof(cs));
    cs.o = o;
    cs.res = res;
    cs.mark = o->out != NULL ? o->out : stderr;
    cs.progress = o->progress == CONSUMER_PROGRESS_FORCE ||
                  (o->progress == CONSUMER_PROGRESS_AUTO && isatty(STDERR_FILENO));
    cs.shards = calloc(n, sizeof(*cs.shards));
    ts = dsjob_taskset_new(c, &cb);
    if (cs.shards == NULL || ts == NULL)
        goto out;
    for (i = 0; i < n; i++) {
        struct shard *s = &cs.shards[i];

        s->cs = &cs;
        s->spec = o->dataset;
        s->spec.shard = i;
        s->expected = dataset_shard_count(&s->spec);
        s->adler = DATASET_ADLER_INIT;
        cs.total += s->expected;
        dataset_spec_format(&s->spec, s->payload, sizeof(s->payload));
        /* The unique key makes consumers of the same shard share one run of it. */
        snprintf(s->unique, sizeof(s->unique), "%s/%" PRIu32 "/%" PRIu32 "/%" PRIu32 "of%" PRIu32,
                 s->spec.name, s->spec.seed, s->spec.rows, i, n);
        if (submit(ts, s) != DSJOB_OK)
            goto out;
    }
    for (;;) {
        uint32_t open = 0;
        int err = dsjob_taskset_run(ts, RUN_SLICE_MS);

        if (err == DSJOB_ERR_NOMEM || err == DSJOB_ERR_SYS)
            goto out;
        for (i = 0; i < n; i++) {
            struct shard *s = &cs.shards[i];

            if (s->state == SHARD_RESUBMIT) {
                res->resubmits++;
                if (submit(ts, s) != DSJOB_OK)
                    goto out;
            }
            if (s->state == SHARD_RUNNING)
                open++;
        }
        draw_progress(&cs, open == 0);
        if (open == 0)
            break;
    }
    if (cs.drawn)
        fputc('\n', stderr);
    rc = res->bad > 0 ? 1 : 0;
out:
    if (o->out != NULL)
        fflush(o->out);
    dsjob_taskset_free(ts);
    free(cs.shards);
    return rc;
}
