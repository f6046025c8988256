/*
 * Flow control, as plain data. A function's token bucket is brought up to
 * date when it is read (tokens = held + elapsed * rate / period, at most
 * the burst), so no timer runs for it; flow_next_ms tells the server when
 * a waiting job's token arrives. With keys, each queued job of the
 * function is also in its key's list (job_ext.by_key), and the keys with
 * queued jobs form a ring: flow_head takes the first key in the ring that
 * may start a job, and flow_took moves that key to the back, so a key with
 * ten thousand queued jobs is served once per round like any other. Keys
 * live while they have jobs, and after that until their bucket is full
 * again (flow_sweep), so that a key's rate holds across quiet moments.
 *
 * A sequence keeps each key's queued jobs in one list by seq (submission
 * order, kept across restarts), so a retry at the head, a job whose
 * backoff is over, a dead job retried and a job replayed all go back to
 * their place. Its key is in the ring only while none of its jobs runs or
 * holds it: a job that failed holds it from its end until it runs again
 * (flow_queued) or leaves (flow_released), in the key's holding list.
 */
#include "config.h"
#include "flow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "queue.h"

static const void *
key_key(const struct hnode *n)
{
    return ((const struct flow_key *)n)->name;
}

void
flow_conf_init(struct flow_conf *c)
{
    memset(c, 0, sizeof(*c));
    strcpy(c->sep, FLOW_DEFAULT_SEP);
}

bool
flow_conf_any(const struct flow_conf *c)
{
    struct flow_conf none;

    flow_conf_init(&none);
    return c->concurrency != 0 || c->rate != 0 || c->key_concurrency != 0 || c->key_rate != 0 ||
           c->keyed || c->sequence != FLOW_SEQ_OFF || c->paused || strcmp(c->sep, none.sep) != 0;
}

/* Parse a count: decimal, at most UINT32_MAX; "off" is 0. */
static int
parse_count(const char *s, uint32_t *out)
{
    char *end;
    unsigned long long v;

    if (strcmp(s, "off") == 0) {
        *out = 0;
        return 0;
    }
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Parse N/PERIOD: /s, /m, /h, /ms, /Ks, /Kms; "off" or 0 is no limit. */
static int
parse_rate(const char *s, uint32_t *rate, uint32_t *period_ms)
{
    char num[16];
    const char *slash = strchr(s, '/');
    uint64_t k = 1, unit;
    char *end;

    if (strcmp(s, "off") == 0 || strcmp(s, "0") == 0) {
        *rate = 0;
        *period_ms = 0;
        return 0;
    }
    if (slash == NULL || (size_t)(slash - s) >= sizeof(num))
        return -1;
    memcpy(num, s, (size_t)(slash - s));
    num[slash - s] = '\0';
    if (parse_count(num, rate) < 0 || *rate == 0)
        return -1;
    s = slash + 1;
    if (*s >= '0' && *s <= '9') {
        errno = 0;
        k = strtoull(s, &end, 10);
        if (errno != 0 || k == 0 || k > 86400000)
            return -1;
        s = end;
    }
    if (strcmp(s, "ms") == 0)
        unit = 1;
    else if (strcmp(s, "s") == 0)
        unit = 1000;
    else if (strcmp(s, "m") == 0)
        unit = 60000;
    else if (strcmp(s, "h") == 0)
        unit = 3600000;
    else
        return -1;
    if (k * unit > 86400000ULL * 7) /* a week at most */
        return -1;
    *period_ms = (uint32_t)(k * unit);
    return 0;
}

int
flow_conf_parse(struct flow_conf *c, const char *words, char *err, size_t errlen)
{
    struct flow_conf n = *c;
    char buf[FLOW_SPEC_MAX * 2], *save = NULL, *w;

    if (strlen(words) >= sizeof(buf)) {
        snprintf(err, errlen, "settings too long");
        return -1;
    }
    strcpy(buf, words);
    for (w = strtok_r(buf, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
        char *v = NULL;
        int bad = 0;

        if (strcmp(w, "off") == 0) {
            bool paused = n.paused;

            flow_conf_init(&n);
            n.paused = paused;
            continue;
        }
        if (strcmp(w, "paused") == 0 || strcmp(w, "resumed") == 0) {
            n.paused = w[0] == 'p';
            continue;
        }
        if (strcmp(w, "keyed") == 0) {
            n.keyed = true;
            continue;
        }
        v = strtok_r(NULL, " \t", &save);
        if (v == NULL) {
            snprintf(err, errlen, "'%s' needs a value", w);
            return -1;
        }
        if (strcmp(w, "concurrency") == 0)
            bad = parse_count(v, &n.concurrency);
        else if (strcmp(w, "rate") == 0)
            bad = parse_rate(v, &n.rate, &n.period_ms);
        else if (strcmp(w, "burst") == 0)
            bad = parse_count(v, &n.burst);
        else if (strcmp(w, "key-concurrency") == 0)
            bad = parse_count(v, &n.key_concurrency);
        else if (strcmp(w, "key-rate") == 0)
            bad = parse_rate(v, &n.key_rate, &n.key_period_ms);
        else if (strcmp(w, "key-burst") == 0)
            bad = parse_count(v, &n.key_burst);
        else if (strcmp(w, "sequence") == 0) {
            if (strcmp(v, "hold") == 0)
                n.sequence = FLOW_SEQ_HOLD;
            else if (strcmp(v, "skip") == 0)
                n.sequence = FLOW_SEQ_SKIP;
            else if (strcmp(v, "off") == 0)
                n.sequence = FLOW_SEQ_OFF;
            else
                bad = -1;
        } else if (strcmp(w, "key-separator") == 0) {
            if (strlen(v) == 0 || strlen(v) >= sizeof(n.sep))
                bad = -1;
            else
                strcpy(n.sep, v);
        } else {
            snprintf(err, errlen, "unknown setting '%.40s'", w);
            return -1;
        }
        if (bad < 0) {
            snprintf(err, errlen, "bad value '%.40s' for '%s'", v, w);
            return -1;
        }
    }
    *c = n;
    return 0;
}

void
flow_rate_format(uint32_t rate, uint32_t period_ms, char *buf, size_t len)
{
    if (rate == 0)
        snprintf(buf, len, "off");
    else if (period_ms == 1000)
        snprintf(buf, len, "%u/s", rate);
    else if (period_ms == 60000)
        snprintf(buf, len, "%u/m", rate);
    else if (period_ms == 3600000)
        snprintf(buf, len, "%u/h", rate);
    else if (period_ms % 1000 == 0)
        snprintf(buf, len, "%u/%us", rate, period_ms / 1000);
    else
        snprintf(buf, len, "%u/%ums", rate, period_ms);
}

void
flow_format(const struct flow_conf *c, char *buf, size_t len)
{
    char r[32];
    size_t n = 0;

#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < len)                                                                               \
            n += (size_t)snprintf(buf + n, len - n, __VA_ARGS__);                                  \
    } while (0)
    buf[0] = '\0';
    if (c->concurrency)
        PUT("%sconcurrency %u", n ? " " : "", c->concurrency);
    if (c->rate) {
        flow_rate_format(c->rate, c->period_ms, r, sizeof(r));
        PUT("%srate %s", n ? " " : "", r);
        if (c->burst)
            PUT(" burst %u", c->burst);
    }
    if (c->key_concurrency)
        PUT("%skey-concurrency %u", n ? " " : "", c->key_concurrency);
    if (c->key_rate) {
        flow_rate_format(c->key_rate, c->key_period_ms, r, sizeof(r));
        PUT("%skey-rate %s", n ? " " : "", r);
        if (c->key_burst)
            PUT(" key-burst %u", c->key_burst);
    }
    if (c->keyed)
        PUT("%skeyed", n ? " " : "");
    if (c->sequence != FLOW_SEQ_OFF)
        PUT("%ssequence %s", n ? " " : "", c->sequence == FLOW_SEQ_HOLD ? "hold" : "skip");
    if (strcmp(c->sep, FLOW_DEFAULT_SEP) != 0)
        PUT("%skey-separator %s", n ? " " : "", c->sep);
    if (c->paused)
        PUT("%spaused", n ? " " : "");
#undef PUT
}

static bool
keyed(const struct flow_conf *c)
{
    return c->keyed || c->key_concurrency != 0 || c->key_rate != 0 || c->sequence != FLOW_SEQ_OFF;
}

static bool
seq(const struct flow *fl)
{
    return fl->conf.sequence != FLOW_SEQ_OFF;
}

/* The list of k that queued j is in: by priority, or a sequence's one list. */
static struct job_list *
klist(const struct flow *fl, struct flow_key *k, const struct job *j)
{
    return &k->jobs[seq(fl) ? 0 : j->prio];
}

/* Whether k may serve a job: one is queued, and in a sequence none runs or holds it. */
static bool
key_open(const struct flow *fl, const struct flow_key *k)
{
    return k->nqueued > 0 && !(seq(fl) && (k->nrunning > 0 || k->nholding > 0));
}

/* Put k in the ring (at the back) or take it out, as key_open says. */
static void
ring_fix(struct flow *fl, struct flow_key *k)
{
    bool want = !k->orphan && key_open(fl, k);

    if (want && !k->in_ring) {
        TAILQ_INSERT_TAIL(&fl->ring, k, ring);
        k->in_ring = true;
    } else if (!want && k->in_ring) {
        TAILQ_REMOVE(&fl->ring, k, ring);
        k->in_ring = false;
    }
}

/* The tokens b holds at now (rate per period, at most burst, or rate). */
static double
level(const struct flow_bucket *b, uint32_t rate, uint32_t period_ms, uint32_t burst, int64_t now)
{
    double cap = burst ? burst : rate, t;

    if (b->at_ms == 0 || now < b->at_ms)
        return b->at_ms == 0 ? cap : (b->tokens > cap ? cap : b->tokens);
    t = b->tokens + (double)(now - b->at_ms) * rate / period_ms;
    return t > cap ? cap : t;
}

static void
take(struct flow_bucket *b, uint32_t rate, uint32_t period_ms, uint32_t burst, int64_t now)
{
    b->tokens = level(b, rate, period_ms, burst, now) - 1;
    b->at_ms = now > b->at_ms ? now : b->at_ms;
}

/* When b holds one token again (now if it does). */
static int64_t
next_token(const struct flow_bucket *b, uint32_t rate, uint32_t period_ms, uint32_t burst,
           int64_t now)
{
    double have = level(b, rate, period_ms, burst, now);

    if (have >= 1)
        return now;
    {
        double wait = (1 - have) * period_ms / rate;
        int64_t ms = (int64_t)wait;

        return now + ms + ((double)ms < wait);
    }
}

const char *
flow_key_of(const struct flow_conf *c, const char *unique, size_t len, size_t *klen)
{
    size_t sl = strlen(c->sep), i;

    for (i = 0; sl > 0 && i + sl <= len; i++)
        if (memcmp(unique + i, c->sep, sl) == 0) {
            *klen = i;
            return unique;
        }
    *klen = 0;
    return "";
}

static struct flow_key *
key_get(struct flow *fl, const char *name, size_t len)
{
    struct hnode *n = hmap_find(&fl->keys, name, len);
    struct flow_key *k;
    int p;

    if (n != NULL)
        return (struct flow_key *)n;
    k = calloc(1, sizeof(*k) + len + 1);
    if (k == NULL)
        return NULL;
    memcpy(k->name, name, len);
    k->name_len = len;
    for (p = 0; p < JOB_NPRIO; p++)
        TAILQ_INIT(&k->jobs[p]);
    TAILQ_INIT(&k->holding);
    if (hmap_insert(&fl->keys, &k->node, k->name, len) < 0) {
        free(k);
        return NULL;
    }
    fl->nkeys++;
    return k;
}

/* Take held j out of its key's holding list: its key then holds nothing for it. */
static void
unhold(struct flow *fl, struct job *j)
{
    struct flow_key *k = j->ext->key;

    TAILQ_REMOVE(&k->holding, j, ext->by_key);
    j->ext->key_held = false;
    j->ext->key = NULL;
    if (--k->nholding == 0)
        fl->nkeys_held--;
    ring_fix(fl, k);
}

static void
key_free(struct flow *fl, struct flow_key *k)
{
    struct job *j;

    while ((j = TAILQ_FIRST(&k->holding)) != NULL)
        unhold(fl, j);
    if (k->in_ring)
        TAILQ_REMOVE(&fl->ring, k, ring);
    k->in_ring = false;
    hmap_remove(&fl->keys, &k->node);
    fl->nkeys--;
    /*
     * A running job rekey could not reach (its worker said CANT_DO since)
     * still points at k: k outlives the flow's keys until that job stops.
     */
    if (k->nrunning > 0)
        k->orphan = true;
    else
        free(k);
}

/* Put queued j in its key's list: 0, or -1 out of memory. */
static int
key_join(struct flow *fl, struct job *j, bool head)
{
    struct job_ext *x;
    const char *name;
    size_t len;
    struct flow_key *k;
    struct job_list *l;

    if (j->ext != NULL && j->ext->key_held)
        unhold(fl, j); /* a failed job runs again: it holds its key by running now */
    if ((x = job_ext(j)) == NULL)
        return -1;
    name = flow_key_of(&fl->conf, job_unique(j), j->unique_len, &len);
    k = key_get(fl, name, len);
    if (k == NULL)
        return -1;
    l = klist(fl, k, j);
    if (seq(fl)) {
        /* By seq: the tail for a new job, the head for a retry, a walk back for the rest. */
        struct job *at = TAILQ_LAST(l, job_list), *first = TAILQ_FIRST(l);

        if (first == NULL || j->seq < first->seq) {
            TAILQ_INSERT_HEAD(l, j, ext->by_key);
        } else {
            while (at->seq > j->seq)
                at = TAILQ_PREV(at, job_list, ext->by_key);
            TAILQ_INSERT_AFTER(l, at, j, ext->by_key);
        }
    } else if (head) {
        TAILQ_INSERT_HEAD(l, j, ext->by_key);
    } else {
        TAILQ_INSERT_TAIL(l, j, ext->by_key);
    }
    k->nqueued++;
    x->key = k;
    x->key_queued = true;
    ring_fix(fl, k);
    return 0;
}

/* Take queued j out of its key's list (its key stays set). */
static void
key_leave(struct flow *fl, struct job *j)
{
    struct flow_key *k = j->ext->key;

    TAILQ_REMOVE(klist(fl, k, j), j, ext->by_key);
    j->ext->key_queued = false;
    k->nqueued--;
    ring_fix(fl, k);
}

struct flow *
flow_new(struct func *f)
{
    struct flow *fl;

    if (f->flow != NULL)
        return f->flow;
    fl = calloc(1, sizeof(*fl));
    if (fl == NULL)
        return NULL;
    flow_conf_init(&fl->conf);
    fl->func = f;
    hmap_init(&fl->keys, key_key);
    TAILQ_INIT(&fl->ring);
    f->flow = fl;
    return fl;
}

void
flow_free(struct flow *fl)
{
    struct hnode *n;
    size_t bucket = 0;

    if (fl == NULL)
        return;
    while ((n = hmap_next(&fl->keys, NULL, &bucket)) != NULL)
        key_free(fl, (struct flow_key *)n);
    hmap_release(&fl->keys);
    free(fl);
}

/* Give every queued and running job of f its key (on), or take them away (off). */
static int
rekey(struct flow *fl, bool on)
{
    struct func *f = fl->func;
    struct ability *a;
    struct job *j;
    int p;

    for (p = 0; p < JOB_NPRIO; p++)
        TAILQ_FOREACH (j, &f->jobs[p], link) {
            if (on && key_join(fl, j, false) < 0)
                return -1;
            if (!on && j->ext != NULL && j->ext->key != NULL) {
                key_leave(fl, j);
                j->ext->key = NULL;
            }
        }
    TAILQ_FOREACH (a, &f->workers, by_func)
        TAILQ_FOREACH (j, &a->worker->held, link) {
            if (j->func != f)
                continue;
            if (on) {
                struct flow_key *k;
                const char *name;
                size_t len;

                if (j->ext == NULL || j->ext->key != NULL)
                    continue;
                name = flow_key_of(&fl->conf, job_unique(j), j->unique_len, &len);
                if ((k = key_get(fl, name, len)) == NULL)
                    return -1;
                k->nrunning++;
                j->ext->key = k;
            } else {
                flow_stopped(f, j); /* its key's running count goes with it */
            }
        }
    return 0;
}

int
flow_set(struct flow *fl, const struct flow_conf *conf, int64_t now_ms)
{
    bool was = keyed(&fl->conf), now = keyed(conf);
    bool resep = was && now &&
                 (strcmp(fl->conf.sep, conf->sep) != 0 ||
                  (fl->conf.sequence != FLOW_SEQ_OFF) != (conf->sequence != FLOW_SEQ_OFF));
    bool unbury = fl->conf.sequence == FLOW_SEQ_HOLD && conf->sequence == FLOW_SEQ_SKIP;
    struct hnode *n;
    size_t bucket;

    /* Bring the buckets up to date under the old rates, then keep what they hold. */
    if (fl->conf.rate && fl->bucket.at_ms != 0) {
        fl->bucket.tokens =
            level(&fl->bucket, fl->conf.rate, fl->conf.period_ms, fl->conf.burst, now_ms);
        fl->bucket.at_ms = now_ms;
    }
    if (conf->rate == 0)
        fl->bucket.at_ms = 0;
    if (resep || (was && !now)) {
        rekey(fl, false);
        bucket = 0;
        while ((n = hmap_next(&fl->keys, NULL, &bucket)) != NULL)
            key_free(fl, (struct flow_key *)n);
    }
    if (now && (resep || !was)) {
        struct flow_conf old = fl->conf;

        fl->conf = *conf;
        if (rekey(fl, true) < 0) {
            rekey(fl, false);
            bucket = 0;
            while ((n = hmap_next(&fl->keys, NULL, &bucket)) != NULL)
                key_free(fl, (struct flow_key *)n);
            fl->conf = old;
            if (keyed(&old))
                rekey(fl, true);
            return -1;
        }
    }
    fl->conf = *conf;
    if (unbury) {
        /* skip: a dead job no longer holds its key, one waiting for its retry still does. */
        bucket = 0;
        for (n = hmap_next(&fl->keys, NULL, &bucket); n != NULL;
             n = hmap_next(&fl->keys, n, &bucket)) {
            struct flow_key *k = (struct flow_key *)n;
            struct job *j, *next;

            for (j = TAILQ_FIRST(&k->holding); j != NULL; j = next) {
                next = TAILQ_NEXT(j, ext->by_key);
                if (j->state == JOB_DEAD || j->state == JOB_SETTLING)
                    unhold(fl, j);
            }
        }
    }
    return 0;
}

struct job *
flow_head(struct func *f, int prio, int64_t now_ms)
{
    struct flow *fl = f->flow;
    const struct flow_conf *c = &fl->conf;
    struct flow_key *k;
    struct job *j = TAILQ_FIRST(&f->jobs[prio]);
    enum flow_why why = FLOW_GO;
    bool sq = seq(fl);

    if (j == NULL)
        return NULL;
    if (c->paused)
        why = FLOW_PAUSED;
    else if (c->concurrency && f->nrunning >= c->concurrency)
        why = FLOW_CONCURRENCY;
    else if (c->rate && level(&fl->bucket, c->rate, c->period_ms, c->burst, now_ms) < 1)
        why = FLOW_RATE;
    if (why != FLOW_GO) {
        fl->why = why;
        return NULL;
    }
    if (!keyed(c))
        return j;
    /* A sequence's keys in the ring run none of their jobs: each may start its first. */
    why = sq ? FLOW_SEQUENCE : FLOW_GO;
    TAILQ_FOREACH (k, &fl->ring, ring) {
        struct job *kj = TAILQ_FIRST(&k->jobs[sq ? 0 : prio]);

        if (kj == NULL || kj->prio != (unsigned)prio)
            continue;
        if (c->key_concurrency && k->nrunning >= c->key_concurrency) {
            why = FLOW_KEY_CONCURRENCY;
            continue;
        }
        if (c->key_rate &&
            level(&k->bucket, c->key_rate, c->key_period_ms, c->key_burst, now_ms) < 1) {
            why = why == FLOW_GO || why == FLOW_SEQUENCE ? FLOW_KEY_RATE : why;
            continue;
        }
        return kj;
    }
    /* A job that got no key (no memory when it was queued) runs when it is first in line. */
    if (j->ext == NULL || j->ext->key == NULL)
        return j;
    fl->why = why;
    return NULL;
}

void
flow_took(struct func *f, struct job *j, int64_t now_ms)
{
    struct flow *fl = f->flow;
    const struct flow_conf *c = &fl->conf;
    struct flow_key *k = j->ext != NULL ? j->ext->key : NULL;

    fl->started++;
    if (c->rate)
        take(&fl->bucket, c->rate, c->period_ms, c->burst, now_ms);
    if (k == NULL)
        return;
    if (j->ext->key_queued)
        key_leave(fl, j);
    k->nrunning++;
    if (c->key_rate)
        take(&k->bucket, c->key_rate, c->key_period_ms, c->key_burst, now_ms);
    if (seq(fl))
        ring_fix(fl, k); /* out of the ring while it runs; back at the end after */
    else if (k->in_ring && TAILQ_NEXT(k, ring) != NULL) {
        TAILQ_REMOVE(&fl->ring, k, ring);
        TAILQ_INSERT_TAIL(&fl->ring, k, ring);
    }
}

void
flow_queued(struct func *f, struct job *j, bool head)
{
    struct flow *fl = f->flow;

    if (!keyed(&fl->conf))
        return;
    if (j->ext != NULL && j->ext->key != NULL && j->ext->key_queued)
        key_leave(fl, j); /* cannot happen, but a job is in one key list at most */
    (void)key_join(fl, j, head);
}

void
flow_unqueued(struct func *f, struct job *j)
{
    if (j->ext == NULL || j->ext->key == NULL)
        return;
    if (j->ext->key_queued)
        key_leave(f->flow, j);
    j->ext->key = NULL;
}

void
flow_stopped(struct func *f, struct job *j)
{
    struct flow_key *k;

    if (j->ext == NULL || (k = j->ext->key) == NULL || j->ext->key_held)
        return;
    k->nrunning--;
    j->ext->key = NULL;
    if (k->orphan) {
        if (k->nrunning == 0)
            free(k);
        return;
    }
    ring_fix(f->flow, k);
}

void
flow_hold(struct func *f, struct job *j, enum flow_stop how)
{
    struct flow *fl = f->flow;
    struct job_ext *x = j->ext;
    bool running = j->state == JOB_RUNNING && x != NULL && x->key != NULL && !x->key_queued;
    bool holds = seq(fl) && job_attempts(j) > 0 &&
                 (how == FLOW_STOP_RETRY || fl->conf.sequence == FLOW_SEQ_HOLD);
    struct flow_key *k;

    if (x != NULL && x->key_held)
        return; /* it holds already (settling to the dead set) */
    if (!holds || (running && x->key->orphan)) {
        if (running)
            flow_stopped(f, j);
        return;
    }
    if (running) {
        k = x->key;
        k->nrunning--;
    } else {
        const char *name;
        size_t len;

        if (x->key_queued) /* cannot happen: a queued job leaves its key first */
            key_leave(fl, j);
        name = flow_key_of(&fl->conf, job_unique(j), j->unique_len, &len);
        if ((k = key_get(fl, name, len)) == NULL) {
            x->key = NULL;
            return; /* out of memory: it holds nothing */
        }
        x->key = k;
    }
    TAILQ_INSERT_TAIL(&k->holding, j, ext->by_key);
    x->key_held = true;
    if (k->nholding++ == 0)
        fl->nkeys_held++;
    ring_fix(fl, k);
}

bool
flow_released(struct func *f, struct job *j)
{
    struct flow_key *k;

    if (j->ext == NULL || !j->ext->key_held)
        return false;
    k = j->ext->key;
    unhold(f->flow, j);
    return key_open(f->flow, k);
}

bool
flow_ready(struct func *f, int64_t now_ms)
{
    int p;

    for (p = 0; p < JOB_NPRIO; p++)
        if (flow_head(f, p, now_ms) != NULL)
            return true;
    return false;
}

int64_t
flow_next_ms(struct func *f, int64_t now_ms)
{
    struct flow *fl = f->flow;
    const struct flow_conf *c = &fl->conf;
    int64_t best = -1;
    struct flow_key *k;

    if (c->paused || (c->concurrency && f->nrunning >= c->concurrency))
        return -1;
    if (c->rate) {
        int64_t t = next_token(&fl->bucket, c->rate, c->period_ms, c->burst, now_ms);

        if (t > now_ms)
            return t;
    }
    if (!c->key_rate)
        return -1;
    TAILQ_FOREACH (k, &fl->ring, ring) {
        int64_t t;

        if (c->key_concurrency && k->nrunning >= c->key_concurrency)
            continue;
        t = next_token(&k->bucket, c->key_rate, c->key_period_ms, c->key_burst, now_ms);
        if (best < 0 || t < best)
            best = t;
    }
    return best > now_ms ? best : -1;
}

double
flow_tokens(struct flow *fl, int64_t now_ms)
{
    const struct flow_conf *c = &fl->conf;

    if (c->rate == 0)
        return -1;
    return level(&fl->bucket, c->rate, c->period_ms, c->burst, now_ms);
}

const char *
flow_why_name(enum flow_why why)
{
    switch (why) {
    case FLOW_GO: return "none";
    case FLOW_PAUSED: return "paused";
    case FLOW_CONCURRENCY: return "concurrency";
    case FLOW_RATE: return "rate";
    case FLOW_KEY_CONCURRENCY: return "key-concurrency";
    case FLOW_KEY_RATE: return "key-rate";
    case FLOW_SEQUENCE: return "sequence";
    }
    return "?";
}

void
flow_sweep(struct flow *fl, int64_t now_ms)
{
    const struct flow_conf *c = &fl->conf;
    struct hnode *n, *next;
    size_t bucket = 0, nb;

    n = hmap_next(&fl->keys, NULL, &bucket);
    while (n != NULL) {
        struct flow_key *k = (struct flow_key *)n;
        double cap = c->key_burst ? c->key_burst : c->key_rate;

        nb = bucket;
        next = hmap_next(&fl->keys, n, &nb);
        if (k->nqueued == 0 && k->nrunning == 0 && k->nholding == 0 &&
            (c->key_rate == 0 ||
             level(&k->bucket, c->key_rate, c->key_period_ms, c->key_burst, now_ms) >= cap))
            key_free(fl, k);
        n = next;
        bucket = nb;
    }
}
