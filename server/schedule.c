/*
 * Periodic schedules (see schedule.h). One timer on the loop is set for
 * the earliest next tick of all schedules; when it fires, each schedule
 * due submits its tick's job (the latest tick due, once, if the loop was
 * late) and moves on to its first tick after now. A job is made as a
 * background submit makes it (dispatch.c's submit): the same unique-key
 * coalescing, limits and durable_submit, with no client to answer.
 *
 * With a store that keeps schedules, a tick is claimed in the store
 * (last_tick moves forward only) in the same transaction that stores its
 * job, and the job is queued when that commits; a claim another server
 * won stores and queues nothing. At start the
 * stored schedules are read before any fires; a schedule with missed=once
 * whose last tick is older than a tick due since runs that latest tick
 * once, the others skip what was missed. With postgres the table is read
 * again every --schedule-refresh seconds, so schedules added, paused or removed
 * on another server reach this one.
 */
#include "config.h"
#include "schedule.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "clock.h"
#include "conn.h"
#include "cron.h"
#include "durable.h"
#include "job.h"
#include "lifecycle.h"
#include "queue.h"
#include "srv.h"
#include "storage.h"

#define SCHEDULE_KEY_MAX (6 + SCHEDULE_NAME_MAX + 1 + 24) /* "sched:NAME:TICK" */
#define SCHEDULE_FUNC_MAX 512                             /* bytes of a schedule's function name */

struct sched {
    TAILQ_ENTRY(sched) link;          /* in struct schedules' list, by name */
    char name[SCHEDULE_NAME_MAX + 1]; /* [A-Za-z0-9_.-], NUL-terminated */
    char *cron_text;                  /* the expression as given */
    struct cron cron;                 /* ... parsed */
    struct cron_tz *tz;               /* its zone */
    char *func;                       /* the function of its jobs */
    size_t func_len;                  /* its bytes */
    char *data;                       /* their payload */
    size_t data_len;                  /* its bytes */
    int prio;                         /* their priority (enum job_prio) */
    bool catch_up;                    /* missed=once: run once for ticks missed while down */
    bool paused;                      /* fires nothing until resumed */
    bool from_config;                 /* given by --schedule */
    bool seen;                        /* in the store's last read (refresh) */
    int64_t last_tick;                /* the last tick fired, by this server or another */
    int64_t next_tick;                /* the next tick to fire, or -1 for none */
    int64_t fired_tick;               /* the tick this server last tried, 0 none */
    char key[SCHEDULE_KEY_MAX + 1];   /* the unique key of that tick's job */
    char outcome[80];                 /* what became of it */
    uint64_t fires;                   /* jobs this server submitted for it */
};
TAILQ_HEAD(sched_list, sched);

struct schedules {
    struct sched_list list; /* by name */
    unsigned n;             /* entries in list */
    struct event *timer;    /* the earliest next tick, or a refresh */
    bool keeps;             /* the store keeps schedules */
    bool loaded;            /* the stored ones were read: firing may start */
    bool listing;           /* a read of the store is in flight */
    bool stopped;           /* the server is stopping */
    uint64_t changes;       /* changes made here, so a read older than one is not applied */
    uint64_t list_changes;  /* changes when the read in flight was asked for */
    int64_t refresh_at;     /* when to read a shared store again (epoch seconds) */
};

static void arm(struct srv *srv);
static void schedule_read(struct srv *srv);

static int64_t
now_s(void)
{
    return clock_now_ms() / 1000;
}

static void
sched_free(struct sched *s)
{
    if (s == NULL)
        return;
    free(s->cron_text);
    cron_tz_free(s->tz);
    free(s->func);
    free(s->data);
    free(s);
}

static struct sched *
sched_find(struct srv *srv, const char *name, size_t len)
{
    struct sched *s;

    if (srv->schedules == NULL)
        return NULL;
    TAILQ_FOREACH (s, &srv->schedules->list, link)
        if (strlen(s->name) == len && memcmp(s->name, name, len) == 0)
            return s;
    return NULL;
}

/* Insert s in name order (a listing reads in order, as the store's does). */
static void
sched_insert(struct schedules *ss, struct sched *s)
{
    struct sched *at;

    TAILQ_FOREACH (at, &ss->list, link) {
        if (strcmp(s->name, at->name) < 0) {
            TAILQ_INSERT_BEFORE(at, s, link);
            ss->n++;
            return;
        }
    }
    TAILQ_INSERT_TAIL(&ss->list, s, link);
    ss->n++;
}

static void
sched_remove(struct schedules *ss, struct sched *s)
{
    TAILQ_REMOVE(&ss->list, s, link);
    ss->n--;
    sched_free(s);
}

static bool
name_ok(const char *name, size_t len)
{
    size_t i;

    if (len == 0 || len > SCHEDULE_NAME_MAX)
        return false;
    for (i = 0; i < len; i++) {
        char ch = name[i];

        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return false;
    }
    return true;
}

static char *
dup_bytes(const void *p, size_t len)
{
    char *d = malloc(len + 1);

    if (d != NULL) {
        if (len > 0)
            memcpy(d, p, len);
        d[len] = '\0';
    }
    return d;
}

/* What a schedule is made of, borrowed: from a line, or a stored row. */
struct sched_def {
    const char *name, *cron, *tz, *func, *data;
    size_t name_len, cron_len, tz_len, func_len, data_len;
    int prio;
    bool catch_up;
};

/* A schedule of def, checked; NULL with err (CRON_ERRLEN bytes) saying what is wrong. */
static struct sched *
sched_make(const struct sched_def *d, char *err)
{
    char tzname[64];
    struct sched *s;
    struct cron c;
    struct cron_tz *tz;

    if (!name_ok(d->name, d->name_len)) {
        snprintf(err, CRON_ERRLEN, "'%.*s' is not a schedule name (1-%d of A-Z a-z 0-9 _ - .)",
                 (int)(d->name_len > 80 ? 80 : d->name_len), d->name, SCHEDULE_NAME_MAX);
        return NULL;
    }
    if (d->func_len == 0 || d->func_len > SCHEDULE_FUNC_MAX ||
        queue_name_bad_byte(d->func, d->func_len) >= 0) {
        snprintf(err, CRON_ERRLEN,
                 "schedule %.*s: the function name is empty, too long or has a "
                 "control byte",
                 (int)d->name_len, d->name);
        return NULL;
    }
    if (cron_parse(&c, d->cron, d->cron_len, err) < 0)
        return NULL;
    if (d->tz_len >= sizeof(tzname)) {
        snprintf(err, CRON_ERRLEN, "schedule %.*s: the zone name is too long", (int)d->name_len,
                 d->name);
        return NULL;
    }
    memcpy(tzname, d->tz, d->tz_len);
    tzname[d->tz_len] = '\0';
    if ((tz = cron_tz_load(tzname, err)) == NULL)
        return NULL;
    if (cron_next(&c, tz, now_s()) < 0) {
        snprintf(err, CRON_ERRLEN, "schedule %.*s: '%.*s' never fires", (int)d->name_len, d->name,
                 (int)(d->cron_len > 60 ? 60 : d->cron_len), d->cron);
        cron_tz_free(tz);
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL || (s->cron_text = dup_bytes(d->cron, d->cron_len)) == NULL ||
        (s->func = dup_bytes(d->func, d->func_len)) == NULL ||
        (s->data = dup_bytes(d->data, d->data_len)) == NULL) {
        snprintf(err, CRON_ERRLEN, "out of memory");
        if (s != NULL)
            s->tz = tz;
        else
            cron_tz_free(tz);
        sched_free(s);
        return NULL;
    }
    memcpy(s->name, d->name, d->name_len);
    s->cron = c;
    s->tz = tz;
    s->func_len = d->func_len;
    s->data_len = d->data_len;
    s->prio = d->prio;
    s->catch_up = d->catch_up;
    s->next_tick = -1;
    snprintf(s->outcome, sizeof(s->outcome), "-");
    return s;
}

/* Whether s is what def says (the store's row of it, say). */
static bool
sched_is(const struct sched *s, const struct sched_def *d)
{
    return strlen(s->cron_text) == d->cron_len && memcmp(s->cron_text, d->cron, d->cron_len) == 0 &&
           strlen(cron_tz_name(s->tz)) == d->tz_len &&
           memcmp(cron_tz_name(s->tz), d->tz, d->tz_len) == 0 && s->func_len == d->func_len &&
           memcmp(s->func, d->func, d->func_len) == 0 && s->data_len == d->data_len &&
           (d->data_len == 0 || memcmp(s->data, d->data, d->data_len) == 0) && s->prio == d->prio &&
           s->catch_up == d->catch_up;
}

/* Give s's settings to from's (same name), keeping its history. */
static void
sched_take(struct sched *s, struct sched *from)
{
    struct sched keep = *s;

    *s = *from;
    s->link = keep.link;
    s->from_config = keep.from_config;
    s->paused = keep.paused;
    s->last_tick = keep.last_tick;
    s->fired_tick = keep.fired_tick;
    s->fires = keep.fires;
    memcpy(s->key, keep.key, sizeof(s->key));
    memcpy(s->outcome, keep.outcome, sizeof(s->outcome));
    free(keep.cron_text);
    cron_tz_free(keep.tz);
    free(keep.func);
    free(keep.data);
    free(from);
}

/* --- the line: NAME 'CRON' FUNCTION [PAYLOAD] [tz=ZONE] [priority=P] [missed=skip|once] --- */

#define LINE_MAX_TOKENS 12 /* "schedule add" and the seven words of a schedule, and room */

struct token {
    const char *p; /* its bytes, quotes taken off */
    size_t len;    /* their number */
    bool quoted;   /* it was in quotes (then never an option) */
};

/* Split on blanks; '...' and "..." hold blanks. -1 with err if a quote is open or too many. */
static int
tokenize(const char *s, size_t len, struct token *t, size_t *n, char *err)
{
    size_t i = 0;

    *n = 0;
    while (i < len) {
        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
            i++;
        if (i == len)
            break;
        if (*n == LINE_MAX_TOKENS) {
            snprintf(err, CRON_ERRLEN, "too many words (quote the cron expression and payload)");
            return -1;
        }
        if (s[i] == '\'' || s[i] == '"') {
            const char *end = memchr(s + i + 1, s[i], len - i - 1);

            if (end == NULL) {
                snprintf(err, CRON_ERRLEN, "a quote is not closed");
                return -1;
            }
            t[*n].p = s + i + 1;
            t[*n].len = (size_t)(end - (s + i + 1));
            t[*n].quoted = true;
            i = (size_t)(end - s) + 1;
        } else {
            t[*n].p = s + i;
            while (i < len && s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
                i++;
            t[*n].len = (size_t)(s + i - t[*n].p);
            t[*n].quoted = false;
        }
        (*n)++;
    }
    return 0;
}

static bool
opt_is(const struct token *t, const char *name, const char **val, size_t *vlen)
{
    size_t n = strlen(name);

    if (t->quoted || t->len <= n || strncasecmp(t->p, name, n) != 0)
        return false;
    *val = t->p + n;
    *vlen = t->len - n;
    return true;
}

/* Read a schedule's line (len bytes) into d, borrowing from it. -1 with err. */
static int
line_parse(const char *line, size_t len, struct sched_def *d, char *err)
{
    struct token t[LINE_MAX_TOKENS];
    size_t n, i;
    bool payload = false;

    memset(d, 0, sizeof(*d));
    d->prio = JOB_PRIO_NORMAL;
    d->tz = "UTC";
    d->tz_len = 3;
    d->data = "";
    if (tokenize(line, len, t, &n, err) < 0)
        return -1;
    if (n < 3) {
        snprintf(err, CRON_ERRLEN,
                 "expected NAME 'CRON' FUNCTION [PAYLOAD] [tz=ZONE] [priority=high|normal|low] "
                 "[missed=skip|once]");
        return -1;
    }
    d->name = t[0].p;
    d->name_len = t[0].len;
    d->cron = t[1].p;
    d->cron_len = t[1].len;
    d->func = t[2].p;
    d->func_len = t[2].len;
    for (i = 3; i < n; i++) {
        const char *v;
        size_t vl;

        if (opt_is(&t[i], "tz=", &v, &vl)) {
            d->tz = v;
            d->tz_len = vl;
        } else if (opt_is(&t[i], "priority=", &v, &vl)) {
            if ((d->prio = job_prio_named(v, vl)) < 0) {
                snprintf(err, CRON_ERRLEN, "priority is high, normal or low");
                return -1;
            }
        } else if (opt_is(&t[i], "missed=", &v, &vl)) {
            if (vl == 4 && strncasecmp(v, "once", 4) == 0)
                d->catch_up = true;
            else if (vl == 4 && strncasecmp(v, "skip", 4) == 0)
                d->catch_up = false;
            else {
                snprintf(err, CRON_ERRLEN, "missed is skip or once");
                return -1;
            }
        } else if (!payload) {
            d->data = t[i].p;
            d->data_len = t[i].len;
            payload = true;
        } else {
            snprintf(err, CRON_ERRLEN, "'%.*s': one payload only (quote it if it has blanks)",
                     (int)(t[i].len > 40 ? 40 : t[i].len), t[i].p);
            return -1;
        }
    }
    return 0;
}

/* --- the store -------------------------------------------------------------------- */

static void
to_store(const struct sched *s, struct store_sched *ss)
{
    memset(ss, 0, sizeof(*ss));
    ss->name = s->name;
    ss->name_len = strlen(s->name);
    ss->cron = s->cron_text;
    ss->cron_len = strlen(s->cron_text);
    ss->tz = cron_tz_name(s->tz);
    ss->tz_len = strlen(ss->tz);
    ss->func = s->func;
    ss->func_len = s->func_len;
    ss->data = s->data;
    ss->data_len = s->data_len;
    ss->prio = s->prio;
    ss->catch_up = s->catch_up;
    ss->paused = s->paused;
    ss->last_tick = s->last_tick;
}

static void
changed_done(struct srv *srv, struct store_op *op, bool ok)
{
    if (!ok)
        log_err(&srv->log, "schedule %s: the store did not keep its change: %s", op->ss.name,
                op->why[0] != '\0' ? op->why : "its commit failed");
}

/* Store what changed in s (or its deletion). -1: out of memory. */
static int
store_change(struct srv *srv, const struct sched *s, int what)
{
    struct store_sched ss;

    srv->schedules->changes++;
    if (!srv->schedules->keeps)
        return 0;
    to_store(s, &ss);
    return storage_sched(srv, what, &ss, changed_done);
}

/* --- firing -------------------------------------------------------------------------- */

static void __attribute__((format(printf, 2, 3))) say(struct sched *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(s->outcome, sizeof(s->outcome), fmt, ap);
    va_end(ap);
}

/*
 * The job of s's tick, as dispatch.c's submit makes a background job, or
 * NULL (s's outcome says why): a live job of the function with the tick's
 * key already, a full queue, no memory.
 */
static struct job *
tick_job(struct srv *srv, struct sched *s, int64_t tick)
{
    char iso[32], handle[JOB_HANDLE_MAX + 24];
    size_t klen;
    struct func *f;
    struct job *j;
    int n;

    klen = (size_t)snprintf(s->key, sizeof(s->key), "sched:%s:%s", s->name,
                            cron_format_utc(tick, iso, sizeof(iso)));
    s->fired_tick = tick;
    if (klen > srv->cfg.max_unique_size) {
        say(s, "refused: its unique key is over --max-unique-size");
        return NULL;
    }
    f = queue_func(&srv->queue, s->func, s->func_len, true);
    if (f == NULL) {
        say(s, "refused: out of memory");
        return NULL;
    }
    if (queue_find_unique(f, s->key, klen) != NULL) {
        say(s, "coalesced");
        return NULL;
    }
    if (queue_full(f, (enum job_prio)s->prio) ||
        (srv->cfg.max_jobs > 0 && queue_live(&srv->queue) >= srv->cfg.max_jobs)) {
        srv->stats.limits[queue_full(f, (enum job_prio)s->prio) ? STATS_LIMIT_MAX_QUEUE
                                                                : STATS_LIMIT_MAX_JOBS]++;
        say(s, "refused: the queue is full");
        log_warn(&srv->log, "schedule %s: tick %s not submitted: the queue is full", s->name, iso);
        return NULL;
    }
    n = job_handle_format(handle, sizeof(handle), srv->handle_prefix, srv->next_job_id);
    j = job_new(handle, (size_t)n, s->key, klen, NULL, 0, s->data, s->data_len);
    if (j == NULL || job_set_when(j, 0) < 0) {
        job_unref(j);
        say(s, "refused: out of memory");
        return NULL;
    }
    j->prio = (uint8_t)s->prio;
    j->background = true;
    j->id = srv->next_job_id;
    j->seq = srv->next_seq++;
    j->func = f;
    return j;
}

/* j, the job of s's tick, is submitted: counted, and run when a worker asks. */
static void
submitted(struct srv *srv, struct sched *s, struct job *j)
{
    j->func->stats.submitted++;
    stats_queued(srv, j);
    srv->stats.sched_fires++;
    if (s != NULL) {
        s->fires++;
        say(s, "submitted");
    }
}

/* Submit tick's job of s, with a store that keeps no schedules (or none). */
static void
submit(struct srv *srv, struct sched *s, int64_t tick)
{
    struct job *j = tick_job(srv, s, tick);

    if (j == NULL)
        return;
    submitted(srv, s, j);
    if (srv->storage.durable) {
        durable_submit(srv, NULL, j, false);
        return;
    }
    if (queue_add(&srv->queue, j->func, j, clock_now()) < 0) {
        job_unref(j);
        say(s, "refused: out of memory");
        return;
    }
    srv->next_job_id++;
    LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", "schedule", j, NULL);
    lifecycle_wake(j);
}

/* A tick's job that is not to run here (not stored, or stored for any server): it goes. */
static void
tick_job_drop(struct srv *srv, struct job *j)
{
    j->stored = false; /* not in the store, or not this server's row */
    if (job_has_waiters(j))
        lifecycle_fail(srv, j); /* a foreground submit coalesced onto it meanwhile */
    else
        queue_remove(&srv->queue, j);
}

/* The tick's job j leaves: from the queue, or (a shared store's, never queued) from nowhere. */
static void
tick_job_gone(struct srv *srv, struct job *j)
{
    if (j->state == JOB_NEW)
        j->stored = false; /* the op holds the last reference */
    else
        tick_job_drop(srv, j);
}

/*
 * A tick's answer (storage_sched_fire): the claim and its job committed
 * together, or another server's claim won, or the store failed (neither
 * committed). The job in op->job waited in the queue, pending, meanwhile
 * (a shared store's, left to any server, waited in no queue: JOB_NEW).
 */
static void
fired_done(struct srv *srv, struct store_op *op, bool ok)
{
    struct sched *s = sched_find(srv, op->ss.name, op->ss.name_len);
    struct job *j = op->job;
    char iso[32];

    if (s != NULL && srv->schedules->stopped)
        s = NULL; /* the server is stopping: the job still goes where it belongs */
    if (j->state != JOB_PENDING && j->state != JOB_NEW) {
        /* Cancelled while its commit was in flight: its end took it (and its row). */
        if (s != NULL && ok && op->ss.last_tick > s->last_tick)
            s->last_tick = op->ss.last_tick;
        if (s != NULL)
            say(s, ok && op->claimed ? "cancelled" : "not fired");
        return;
    }
    if (!ok) {
        tick_job_gone(srv, j);
        if (s == NULL)
            return;
        s->fired_tick = op->ss.last_tick;
        say(s, "not fired: the store failed");
        log_err(&srv->log, "schedule %s: tick %s not fired: the store failed: %s", s->name,
                cron_format_utc(op->ss.last_tick, iso, sizeof(iso)),
                op->why[0] != '\0' ? op->why : "its commit failed");
        return;
    }
    if (s != NULL && op->ss.last_tick > s->last_tick)
        s->last_tick = op->ss.last_tick;
    if (!op->claimed) {
        tick_job_gone(srv, j);
        if (s != NULL && s->fired_tick <= op->ss.last_tick) {
            s->fired_tick = op->ss.last_tick;
            say(s, "fired by another server");
        }
        return;
    }
    submitted(srv, s, j);
    if (srv->storage.shared) {
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", "schedule", j, "left to any server");
        tick_job_gone(srv, j);
    } else if (queue_commit(&srv->queue, j, clock_now()) == 0) {
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", "schedule", j, NULL);
        lifecycle_wake(j);
    } else {
        /* Stored: it runs after a restart. */
        log_err(&srv->log, "schedule %s: tick's job %s stored but not queued: out of memory",
                op->ss.name, job_handle(j));
        tick_job_drop(srv, j);
    }
}

/*
 * Fire s's tick. With a store that keeps schedules, the claim of the tick
 * and its job go in one transaction (storage_sched_fire): a tick claimed
 * has its job stored, even if this server dies before it hears so.
 */
static void
fire(struct srv *srv, struct sched *s, int64_t tick)
{
    struct store_sched ss;
    struct job *j;

    if (!srv->schedules->keeps) {
        s->last_tick = tick;
        submit(srv, s, tick);
        return;
    }
    if ((j = tick_job(srv, s, tick)) == NULL)
        return;
    to_store(s, &ss);
    ss.last_tick = tick;
    if (srv->storage.shared) {
        /*
         * Left to any server, it never runs from this queue: it waits in
         * none while it commits, so a foreground submit of its key here
         * makes a job of its own (coalesced onto this one, it would be
         * told WORK_FAIL as it left).
         */
        j->stored = true;
        if (storage_sched_fire(srv, &ss, j, fired_done) < 0) {
            job_unref(j);
            say(s, "not fired: out of memory");
            return;
        }
        job_unref(j); /* the op holds its own */
        srv->next_job_id++;
        say(s, "claiming");
        return;
    }
    if (queue_add_as(&srv->queue, j->func, j, clock_now(), true) < 0) {
        job_unref(j);
        say(s, "not fired: out of memory");
        return;
    }
    j->stored = true;
    if (storage_sched_fire(srv, &ss, j, fired_done) < 0) {
        j->stored = false;
        queue_remove(&srv->queue, j);
        say(s, "not fired: out of memory");
        return;
    }
    srv->next_job_id++;
    say(s, "claiming");
}

/*
 * The latest tick of s from t (a tick) up to now. Searched back from now
 * in doubling steps, so a schedule of every second after a long downtime
 * walks only the ticks near now.
 */
static int64_t
latest_due(const struct sched *s, int64_t t, int64_t now)
{
    int64_t k = 1, from, cur, next;

    for (;;) {
        from = now - k;
        if (from <= t) {
            from = t;
            break;
        }
        next = cron_next(&s->cron, s->tz, from);
        if (next >= 0 && next <= now)
            break;
        k *= 2;
    }
    cur = from == t ? t : cron_next(&s->cron, s->tz, from);
    while ((next = cron_next(&s->cron, s->tz, cur)) >= 0 && next <= now)
        cur = next;
    return cur;
}

/*
 * s starts (at the server's start, or when made or resumed): its next
 * tick is the first after now. At the server's start a schedule with
 * missed=once whose last tick is older than one due since fires that
 * latest tick now, once.
 */
static void
sched_start(struct srv *srv, struct sched *s, int64_t now, bool boot)
{
    s->next_tick = cron_next(&s->cron, s->tz, now);
    if (boot && s->catch_up && !s->paused && s->last_tick > 0) {
        int64_t missed = cron_next(&s->cron, s->tz, s->last_tick);

        if (missed >= 0 && missed <= now) {
            char iso[32];
            int64_t t = latest_due(s, missed, now);

            log_notice(&srv->log, "schedule %s: ticks missed while down; running %s once", s->name,
                       cron_format_utc(t, iso, sizeof(iso)));
            fire(srv, s, t);
        }
    }
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    struct schedules *ss = srv->schedules;
    int64_t now = now_s();
    struct sched *s;

    (void)fd;
    (void)what;
    if (ss->stopped)
        return;
    if (ss->loaded) {
        TAILQ_FOREACH (s, &ss->list, link) {
            if (s->paused || s->next_tick < 0 || s->next_tick > now)
                continue;
            fire(srv, s, latest_due(s, s->next_tick, now));
            s->next_tick = cron_next(&s->cron, s->tz, now);
        }
    }
    if (ss->keeps && !ss->listing && now >= ss->refresh_at && (srv->storage.shared || !ss->loaded))
        schedule_read(srv);
    arm(srv);
}

static void
arm(struct srv *srv)
{
    struct schedules *ss = srv->schedules;
    int64_t first = -1, ms;
    struct timeval tv;
    struct sched *s;

    if (ss->stopped)
        return;
    if (ss->loaded) {
        TAILQ_FOREACH (s, &ss->list, link)
            if (!s->paused && s->next_tick >= 0 && (first < 0 || s->next_tick < first))
                first = s->next_tick;
    }
    if (ss->keeps && srv->storage.shared && !ss->listing && (first < 0 || ss->refresh_at < first))
        first = ss->refresh_at;
    if (!ss->loaded && ss->keeps && !ss->listing)
        first = ss->refresh_at; /* the first read failed: again */
    if (first < 0) {
        evtimer_del(ss->timer);
        return;
    }
    ms = first * 1000 - clock_now_ms();
    if (ms < 1)
        ms = 1;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    evtimer_add(ss->timer, &tv);
}

/* --- reading the store ------------------------------------------------------------- */

static void
def_of_row(const struct store_sched *r, struct sched_def *d)
{
    d->name = r->name;
    d->name_len = r->name_len;
    d->cron = r->cron;
    d->cron_len = r->cron_len;
    d->tz = r->tz;
    d->tz_len = r->tz_len;
    d->func = r->func;
    d->func_len = r->func_len;
    d->data = r->data;
    d->data_len = r->data_len;
    d->prio = r->prio >= 0 && r->prio < JOB_NPRIO ? r->prio : JOB_PRIO_NORMAL;
    d->catch_up = r->catch_up;
}

/* One stored row, at the first read (boot) or a later one. */
static void
apply_row(struct srv *srv, const struct store_sched *r, int64_t now, bool boot)
{
    struct sched *s = sched_find(srv, r->name, r->name_len), *made;
    struct sched_def d;
    char err[CRON_ERRLEN];

    def_of_row(r, &d);
    if (s == NULL) {
        made = sched_make(&d, err);
        if (made == NULL) {
            log_warn(&srv->log, "store: schedule %.*s is not run here: %s", (int)r->name_len,
                     r->name, err);
            return;
        }
        made->paused = r->paused;
        made->last_tick = r->last_tick;
        made->seen = true;
        sched_insert(srv->schedules, made);
        sched_start(srv, made, now, boot);
        return;
    }
    s->seen = true;
    if (r->last_tick > s->last_tick)
        s->last_tick = r->last_tick;
    if (boot) {
        /*
         * A --schedule line's settings win, and the store keeps whether it
         * is paused; one an admin made before this read wins whole (the
         * store has it with the next commit).
         */
        if (s->from_config) {
            s->paused = r->paused;
            if (!sched_is(s, &d))
                (void)store_change(srv, s, STORE_SCHED_SET);
        }
        sched_start(srv, s, now, boot);
        return;
    }
    if (!sched_is(s, &d) && (made = sched_make(&d, err)) != NULL) {
        sched_take(s, made);
        s->next_tick = cron_next(&s->cron, s->tz, now);
    }
    if (s->paused && !r->paused)
        s->next_tick = cron_next(&s->cron, s->tz, now);
    s->paused = r->paused;
}

static void
listed_done(struct srv *srv, struct store_op *op, bool ok)
{
    struct schedules *ss = srv->schedules;
    struct storage_sched_row *rows = op->rows, *r;
    struct sched *s, *next;
    int64_t now = now_s();
    bool boot;

    op->rows = NULL;
    if (ss == NULL || ss->stopped) {
        storage_sched_rows_free(rows);
        return;
    }
    ss->listing = false;
    boot = !ss->loaded;
    if (!ok) {
        log_err(&srv->log, "store: cannot read the schedules: %s",
                op->why[0] != '\0' ? op->why : "its commit failed");
        ss->refresh_at = now + 1;
        storage_sched_rows_free(rows);
        arm(srv);
        return;
    }
    if (!boot && ss->changes != ss->list_changes) {
        /* Changed here since it was asked for: the read may miss that. Read again soon. */
        ss->refresh_at = now;
        storage_sched_rows_free(rows);
        arm(srv);
        return;
    }
    TAILQ_FOREACH (s, &ss->list, link)
        s->seen = false;
    for (r = rows; r != NULL; r = r->next)
        apply_row(srv, &r->ss, now, boot);
    storage_sched_rows_free(rows);
    for (s = TAILQ_FIRST(&ss->list); s != NULL; s = next) {
        next = TAILQ_NEXT(s, link);
        if (s->seen)
            continue;
        if (boot) {
            /* Given here (config, or an admin before the read): the store learns it. */
            (void)store_change(srv, s, STORE_SCHED_SET);
            sched_start(srv, s, now, false);
        } else {
            log_notice(&srv->log, "schedule %s was removed (by another server)", s->name);
            sched_remove(ss, s);
        }
    }
    if (boot)
        log_notice(&srv->log, "schedules: %u", ss->n);
    ss->loaded = true;
    ss->refresh_at = now + (int64_t)srv->cfg.schedule_refresh;
    arm(srv);
}

/* Ask the store for its schedules; listed_done applies them. */
static void
schedule_read(struct srv *srv)
{
    struct schedules *ss = srv->schedules;

    if (storage_sched_list(srv, listed_done) < 0) {
        ss->refresh_at = now_s() + 1;
        return;
    }
    ss->listing = true;
    ss->list_changes = ss->changes;
}

/* --- life ------------------------------------------------------------------------------ */

int
schedule_open(struct srv *srv)
{
    struct schedules *ss = calloc(1, sizeof(*ss));
    int64_t now = now_s();
    struct sched *s;
    int i;

    if (ss == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "out of memory");
        return -1;
    }
    TAILQ_INIT(&ss->list);
    srv->schedules = ss;
    ss->keeps = storage_keeps_schedules(srv);
    for (i = 0; i < srv->cfg.nschedule; i++) {
        const char *line = srv->cfg.schedule[i];
        struct sched_def d;
        char err[CRON_ERRLEN];

        if (line_parse(line, strlen(line), &d, err) < 0 || (s = sched_make(&d, err)) == NULL) {
            snprintf(srv->errmsg, sizeof(srv->errmsg), "--schedule '%.200s': %s", line, err);
            return -1;
        }
        if (sched_find(srv, s->name, strlen(s->name)) != NULL) {
            snprintf(srv->errmsg, sizeof(srv->errmsg), "--schedule: %s is given twice", s->name);
            sched_free(s);
            return -1;
        }
        s->from_config = true;
        sched_insert(ss, s);
    }
    ss->timer = evtimer_new(srv->base, timer_cb, srv);
    if (ss->timer == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the schedules' timer");
        return -1;
    }
    if (ss->keeps) {
        schedule_read(srv); /* firing starts once it is read */
        arm(srv);
        return 0;
    }
    if (srv->storage.durable && ss->n > 0)
        log_notice(&srv->log, "store %s keeps no schedules: --schedule ones only, in memory",
                   srv->storage.ops->name);
    ss->loaded = true;
    TAILQ_FOREACH (s, &ss->list, link)
        sched_start(srv, s, now, false);
    arm(srv);
    return 0;
}

void
schedule_stop(struct srv *srv)
{
    if (srv->schedules == NULL)
        return;
    srv->schedules->stopped = true;
    if (srv->schedules->timer != NULL)
        evtimer_del(srv->schedules->timer);
}

void
schedule_close(struct srv *srv)
{
    struct schedules *ss = srv->schedules;
    struct sched *s;

    if (ss == NULL)
        return;
    while ((s = TAILQ_FIRST(&ss->list)) != NULL)
        sched_remove(ss, s);
    if (ss->timer != NULL)
        event_free(ss->timer);
    free(ss);
    srv->schedules = NULL;
}

unsigned
schedule_count(const struct srv *srv)
{
    return srv->schedules != NULL ? srv->schedules->n : 0;
}

void
schedule_ended(struct srv *srv, const struct job *j, unsigned outcome)
{
    struct sched *s;

    if (srv->schedules == NULL)
        return;
    TAILQ_FOREACH (s, &srv->schedules->list, link) {
        if (strlen(s->key) == j->unique_len && memcmp(s->key, job_unique(j), j->unique_len) == 0) {
            say(s, "%s", job_outcome_name(outcome));
            return;
        }
    }
}

/* What became of s's last tick here: its job's state while it lives, else the outcome. */
static const char *
outcome_now(struct srv *srv, const struct sched *s)
{
    struct func *f;
    struct job *j;

    if (strcmp(s->outcome, "submitted") != 0)
        return s->outcome;
    f = queue_func(&srv->queue, s->func, s->func_len, false);
    if (f != NULL && (j = queue_find_unique(f, s->key, strlen(s->key))) != NULL)
        return job_state_name(j);
    return s->outcome;
}

/* --- admin and JSON -------------------------------------------------------------------- */

static const char *
iso_or(int64_t t, char *buf, size_t len)
{
    return t > 0 ? cron_format_utc(t, buf, len) : "-";
}

bool
schedule_admin_changes(const char *line, size_t len)
{
    struct token t[LINE_MAX_TOKENS];
    char err[CRON_ERRLEN];
    size_t n;

    if (tokenize(line, len, t, &n, err) < 0 || n < 2)
        return true; /* refused either way; the privilege first */
    return !(t[1].len == 4 && strncasecmp(t[1].p, "list", 4) == 0);
}

static void
admin_list(struct conn *c)
{
    struct srv *srv = c->srv;
    char next[32], last[32];
    struct sched *s;

    if (srv->schedules != NULL) {
        TAILQ_FOREACH (s, &srv->schedules->list, link) {
            int64_t last_t = s->fired_tick > s->last_tick ? s->fired_tick : s->last_tick;

            conn_printf(c, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%" PRIu64 "\n", s->name,
                        s->cron_text, cron_tz_name(s->tz), s->func,
                        job_prio_name((unsigned)s->prio), s->catch_up ? "once" : "skip",
                        s->paused ? "paused" : "active",
                        s->paused ? "-" : iso_or(s->next_tick, next, sizeof(next)),
                        iso_or(last_t, last, sizeof(last)), outcome_now(srv, s), s->fires);
        }
    }
    conn_write(c, ".\n", 2);
}

static void
admin_add(struct conn *c, const char *args, size_t len)
{
    struct srv *srv = c->srv;
    struct sched *s, *old;
    struct sched_def d;
    char err[CRON_ERRLEN], next[32];

    if (line_parse(args, len, &d, err) < 0 || (s = sched_make(&d, err)) == NULL) {
        char *p;

        for (p = err; *p != '\0'; p++)
            if (*p == ' ')
                *p = '+'; /* an ERR line's text has no blanks */
        conn_printf(c, "ERR INVALID_ARGUMENTS %s\r\n", err);
        return;
    }
    old = sched_find(srv, s->name, strlen(s->name));
    if (old != NULL) {
        old->paused = false;
        sched_take(old, s);
        s = old;
    } else {
        sched_insert(srv->schedules, s);
    }
    if (srv->schedules->loaded)
        sched_start(srv, s, now_s(), false);
    if (store_change(srv, s, STORE_SCHED_SET) < 0) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
        return;
    }
    log_notice(&srv->log, "%s: schedule %s '%s' %s added", c->peer, s->name, s->cron_text, s->func);
    arm(srv);
    conn_printf(c, "OK %s\n", iso_or(s->next_tick, next, sizeof(next)));
}

void
schedule_admin(struct conn *c, const char *line, size_t len)
{
    struct srv *srv = c->srv;
    struct token t[LINE_MAX_TOKENS];
    char err[CRON_ERRLEN];
    struct sched *s;
    size_t n;

    if (srv->schedules == NULL) {
        conn_printf(c, "ERR UNKNOWN_COMMAND schedules+are+not+running\r\n");
        return;
    }
    if (tokenize(line, len, t, &n, err) < 0 || n < 2) {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+schedule+add|list|pause|resume|rm\r\n");
        return;
    }
#define VERB(w) (t[1].len == strlen(w) && strncasecmp(t[1].p, w, t[1].len) == 0)
    if (VERB("list")) {
        admin_list(c);
        return;
    }
    if (VERB("add")) {
        const char *args = n > 2 ? t[2].p - (t[2].quoted ? 1 : 0) : line + len;

        admin_add(c, args, (size_t)(line + len - args));
        return;
    }
    if (!(VERB("pause") || VERB("resume") || VERB("rm")) || n != 3) {
        conn_printf(c, "ERR INVALID_ARGUMENTS usage:+schedule+add|list|pause|resume|rm+NAME\r\n");
        return;
    }
    s = sched_find(srv, t[2].p, t[2].len);
    if (s == NULL) {
        conn_printf(c, "ERR UNKNOWN_SCHEDULE no+schedule+%.*s\r\n",
                    (int)(t[2].len > 64 ? 64 : t[2].len), t[2].p);
        return;
    }
    if (VERB("rm")) {
        log_notice(&srv->log, "%s: schedule %s removed", c->peer, s->name);
        if (store_change(srv, s, STORE_SCHED_DELETE) < 0) {
            conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
            return;
        }
        sched_remove(srv->schedules, s);
    } else {
        bool pause = VERB("pause");

        if (pause != s->paused) {
            s->paused = pause;
            if (!pause)
                s->next_tick = cron_next(&s->cron, s->tz, now_s()); /* the paused ones skipped */
            if (store_change(srv, s, STORE_SCHED_SET) < 0) {
                conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
                return;
            }
            log_notice(&srv->log, "%s: schedule %s %s", c->peer, s->name,
                       pause ? "paused" : "resumed");
        }
    }
#undef VERB
    arm(srv);
    conn_printf(c, "OK\r\n");
}

json_t *
schedule_json(struct srv *srv)
{
    json_t *arr = json_array();
    char next[32], last[32];
    struct sched *s;

    if (arr == NULL || srv->schedules == NULL)
        return arr;
    TAILQ_FOREACH (s, &srv->schedules->list, link) {
        int64_t last_t = s->fired_tick > s->last_tick ? s->fired_tick : s->last_tick;
        bool next_ok = !s->paused && s->next_tick >= 0;
        json_t *o = json_pack(
            "{s:s,s:s,s:s,s:o,s:s,s:s,s:b,s:o,s:o,s:s,s:I,s:s}", "name", s->name, "cron",
            s->cron_text, "tz", cron_tz_name(s->tz), "function", json_stringn(s->func, s->func_len),
            "priority", job_prio_name((unsigned)s->prio), "missed", s->catch_up ? "once" : "skip",
            "paused", s->paused, "next_run",
            next_ok ? json_string(cron_format_utc(s->next_tick, next, sizeof(next))) : json_null(),
            "last_run",
            last_t > 0 ? json_string(cron_format_utc(last_t, last, sizeof(last))) : json_null(),
            "last_outcome", outcome_now(srv, s), "fires", (json_int_t)s->fires, "source",
            s->from_config ? "config" : "admin");

        if (o == NULL || json_array_append_new(arr, o) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}
