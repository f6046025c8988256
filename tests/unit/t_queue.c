/*
 * Queue rules without a loop or a socket: priorities and FIFO, grab order
 * across functions (registration order and round-robin), unique index,
 * requeue at the head, epoch heap order, that a new job wakes exactly
 * one of the workers sleeping on its function, global priority order,
 * aging (with the time given, so nothing here waits), and moving a job to
 * another priority.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "server/queue.h"
#include "tap.h"

static int handle_n;

/* mkjob_at adds a job at time now (wall-clock seconds), with seq in submission order. */
static struct job *
mkjob_at(struct queue *q, struct func *f, enum job_prio prio, int64_t when, int64_t now)
{
    char handle[32];
    struct job *j;

    snprintf(handle, sizeof(handle), "H:t:%d", ++handle_n);
    j = job_new(handle, strlen(handle), "", 0, NULL, 0, handle, strlen(handle));
    j->prio = (uint8_t)prio;
    if (job_set_when(j, when) < 0)
        tap_bail("job_set_when failed");
    j->seq = (uint64_t)handle_n;
    if (queue_add(q, f, j, now) < 0)
        tap_bail("queue_add failed");
    return j;
}

static struct job *
mkjob(struct queue *q, struct func *f, enum job_prio prio, const char *unique, int64_t when)
{
    char handle[32];
    struct job *j;

    snprintf(handle, sizeof(handle), "H:t:%d", ++handle_n);
    j = job_new(handle, strlen(handle), unique, strlen(unique), NULL, 0, handle, strlen(handle));
    j->prio = (uint8_t)prio;
    if (job_set_when(j, when) < 0)
        tap_bail("job_set_when failed");
    j->seq = (uint64_t)handle_n;
    if (queue_add(q, f, j, 1000) < 0)
        tap_bail("queue_add failed");
    return j;
}

static void
test_priority_fifo(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *low, *n1, *n2, *high;
    struct job *got[4];
    int i;

    queue_init(&q, false);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    tap_ok(f != NULL && queue_func(&q, "f", 1, false) == f, "function made once, found again");
    low = mkjob(&q, f, JOB_PRIO_LOW, "", 0);
    n1 = mkjob(&q, f, JOB_PRIO_NORMAL, "", 0);
    n2 = mkjob(&q, f, JOB_PRIO_NORMAL, "", 0);
    high = mkjob(&q, f, JOB_PRIO_HIGH, "", 0);
    tap_is_int(queue_total(f), 4, "four queued");
    tap_ok(queue_grab(&q, &w, 0) == NULL, "a worker with no abilities gets nothing");
    queue_can_do(&q, &w, f, 0);
    tap_is_int(f->nworkers, 1, "one worker registered");
    for (i = 0; i < 4; i++)
        got[i] = queue_grab(&q, &w, 0);
    tap_ok(got[0] == high && got[1] == n1 && got[2] == n2 && got[3] == low,
           "high, then normal in FIFO order, then low");
    tap_ok(queue_grab(&q, &w, 0) == NULL, "then nothing");
    tap_is_int(f->nrunning, 4, "four running");
    tap_is_int(w.nheld, 4, "held by the worker");
    queue_requeue(&q, n2);
    tap_is_int(job_attempts(n2), 1, "requeue counts an attempt");
    tap_ok(queue_grab(&q, &w, 0) == n2, "a requeued job goes first");
    for (i = 0; i < 4; i++)
        queue_remove(&q, got[i]);
    tap_is_int(queue_total(f), 0, "removed jobs are gone");
    tap_ok(queue_find_job(&q, "H:t:1", 5) == NULL, "and unindexed");
    queue_reset_abilities(&q, &w);
    tap_is_int(f->nworkers, 0, "reset abilities");
    queue_release(&q);
}

static void
test_function_order(void)
{
    struct queue q;
    struct qworker w;
    struct func *a, *b;
    struct job *a1, *a2, *b1, *b2;
    int pass;

    for (pass = 0; pass < 2; pass++) {
        bool rr = pass == 1;
        struct job *g1, *g2, *g3, *g4;

        queue_init(&q, rr);
        queue_worker_init(&w);
        a = queue_func(&q, "a", 1, true);
        b = queue_func(&q, "b", 1, true);
        a1 = mkjob(&q, a, JOB_PRIO_NORMAL, "", 0);
        a2 = mkjob(&q, a, JOB_PRIO_NORMAL, "", 0);
        b1 = mkjob(&q, b, JOB_PRIO_HIGH, "", 0);
        b2 = mkjob(&q, b, JOB_PRIO_NORMAL, "", 0);
        queue_can_do(&q, &w, a, 0);
        queue_can_do(&q, &w, b, 0);
        g1 = queue_grab(&q, &w, 0);
        g2 = queue_grab(&q, &w, 0);
        g3 = queue_grab(&q, &w, 0);
        g4 = queue_grab(&q, &w, 0);
        if (!rr)
            tap_ok(g1 == b1 && g2 == b2 && g3 == a1 && g4 == a2,
                   "default: every job of the function registered last first (as gearmand)");
        else
            tap_ok(g1 == b1 && g2 == a1 && g3 == b2 && g4 == a2,
                   "round-robin: functions take turns");
        queue_reset_abilities(&q, &w);
        queue_release(&q);
    }
}

static void
test_unique(void)
{
    struct queue q;
    struct qworker w;
    struct func *f, *g;
    struct job *j;

    queue_init(&q, false);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    g = queue_func(&q, "g", 1, true);
    j = mkjob(&q, f, JOB_PRIO_NORMAL, "k1", 0);
    tap_ok(queue_find_unique(f, "k1", 2) == j, "found by unique");
    tap_ok(queue_find_unique(g, "k1", 2) == NULL, "unique keys are per function");
    queue_can_do(&q, &w, f, 0);
    tap_ok(queue_grab(&q, &w, 0) == j, "grabbed");
    tap_ok(queue_find_unique(f, "k1", 2) == j, "a running job still coalesces");
    queue_remove(&q, j);
    tap_ok(queue_find_unique(f, "k1", 2) == NULL, "a finished job does not");
    mkjob(&q, f, JOB_PRIO_NORMAL, "", 0);
    tap_is_int((long long)f->uniques.count, 0, "an empty unique is not indexed");
    /* Unique "-" coalesces on the payload, apart from explicit keys. */
    {
        struct job *d = job_new("H:t:d", 5, "-", 1, NULL, 0, "k2", 2);
        struct job *k;

        d->unique_is_data = true;
        if (queue_add(&q, f, d, 1000) < 0)
            tap_bail("queue_add failed");
        k = mkjob(&q, f, JOB_PRIO_NORMAL, "k2", 0);
        tap_ok(queue_find_payload(f, "k2", 2) == d, "a \"-\" job is found by its payload");
        tap_ok(queue_find_unique(f, "k2", 2) == k, "an explicit key equal to it is another job");
        queue_remove(&q, d);
        tap_ok(queue_find_payload(f, "k2", 2) == NULL && queue_find_unique(f, "k2", 2) == k,
               "removing the \"-\" job leaves the explicit one indexed");
    }
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

static void
test_epoch(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *late, *soon, *now;
    int64_t next;

    queue_init(&q, false);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    late = mkjob(&q, f, JOB_PRIO_NORMAL, "", 3000);
    soon = mkjob(&q, f, JOB_PRIO_NORMAL, "", 2000);
    now = mkjob(&q, f, JOB_PRIO_NORMAL, "", 500);
    tap_is_int(late->state, JOB_SCHEDULED, "a future job is scheduled");
    tap_is_int(now->state, JOB_QUEUED, "a past time is queued at once");
    tap_is_int(queue_next_due(&q), 2000, "next due is the earliest");
    queue_can_do(&q, &w, f, 0);
    tap_ok(queue_grab(&q, &w, 0) == now, "only the due job can be grabbed");
    tap_ok(queue_grab(&q, &w, 0) == NULL, "scheduled jobs wait");
    next = queue_due(&q, 2500, NULL, NULL);
    tap_is_int(next, 3000, "after 2500 the next is 3000");
    tap_ok(queue_grab(&q, &w, 0) == soon, "the job due at 2000 runs");
    next = queue_due(&q, 3000, NULL, NULL);
    tap_is_int(next, 0, "nothing left scheduled");
    tap_ok(queue_grab(&q, &w, 0) == late, "then the one at 3000");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

/* mkjob_by adds a job that must start by deadline_ms (epoch ms), to run at when. */
static struct job *
mkjob_by(struct queue *q, struct func *f, int64_t when, int64_t deadline_ms)
{
    char handle[32];
    struct job *j;

    snprintf(handle, sizeof(handle), "H:t:%d", ++handle_n);
    j = job_new(handle, strlen(handle), "", 0, NULL, 0, handle, strlen(handle));
    if (job_set_when(j, when) < 0 || job_ext(j) == NULL)
        tap_bail("job_ext failed");
    j->ext->deadline_ms = deadline_ms;
    j->seq = (uint64_t)handle_n;
    if (queue_add(q, f, j, 1000) < 0)
        tap_bail("queue_add failed");
    return j;
}

/*
 * Deadlines: a waiting job with one is in queue.expiring, earliest first;
 * a grab takes it out for good (a started job does not expire while it
 * runs), a requeue for a retry puts it back, and a scheduled one is in it
 * while it waits for its time.
 */
static void
test_expiring(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *a, *b, *c, *s, *plain;

    queue_init(&q, false);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    a = mkjob_by(&q, f, 0, 5000);
    b = mkjob_by(&q, f, 0, 3000);
    c = mkjob_by(&q, f, 0, 9000);
    s = mkjob_by(&q, f, 2000, 4000);
    plain = mkjob(&q, f, JOB_PRIO_NORMAL, "", 0);
    tap_is_int((long long)q.expiring.len, 4,
               "four waiting jobs have a deadline, the plain one not");
    tap_ok(queue_expired(&q, 2999) == NULL, "none is due before the earliest deadline");
    tap_ok(queue_expired(&q, 3000) == b, "at 3000 the job due then is");
    tap_is_int(b->state, JOB_QUEUED, "and stays where it waits for the caller to end it");
    tap_ok(queue_expired(&q, 3000) == NULL, "it is taken out of the heap");
    queue_remove(&q, b);
    queue_can_do(&q, &w, f, 0);
    tap_ok(queue_grab(&q, &w, 0) == a, "the first queued job is grabbed");
    tap_is_int((long long)q.expiring.len, 2, "a grabbed job leaves the heap");
    tap_ok(queue_expired(&q, 4000) == s, "a scheduled job expires while it waits for its time");
    queue_remove(&q, s);
    tap_ok(queue_expired(&q, 6000) == NULL, "a running job does not expire");
    queue_requeue(&q, a);
    tap_ok(queue_expired(&q, 6000) == NULL && a->ext->deadline_ms == 0,
           "once started, a job requeued for a retry has no deadline: it does not expire");
    tap_ok(queue_grab(&q, &w, 0) == a, "(the caller has not ended it: still first in line)");
    queue_remove(&q, a);
    queue_remove(&q, c);
    tap_is_int((long long)q.expiring.len, 0, "a removed job leaves the heap");
    tap_ok(queue_grab(&q, &w, 0) == plain, "a job without a deadline is untouched");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

static void
test_wake(void)
{
    struct queue q;
    struct qworker w1, w2, w3;
    struct func *f, *g;

    queue_init(&q, false);
    queue_worker_init(&w1);
    queue_worker_init(&w2);
    queue_worker_init(&w3);
    f = queue_func(&q, "f", 1, true);
    g = queue_func(&q, "g", 1, true);
    queue_can_do(&q, &w1, f, 0);
    queue_can_do(&q, &w2, g, 0);
    queue_can_do(&q, &w2, f, 0);
    queue_can_do(&q, &w3, g, 0);
    tap_ok(queue_wake_one(f) == NULL, "nobody sleeps yet");
    queue_sleep(&w1);
    queue_sleep(&w2);
    queue_sleep(&w3);
    tap_ok(queue_wake_one(f) == &w1, "the longest sleeper of f wakes first");
    tap_ok(!w1.asleep && w2.asleep && w3.asleep, "and only it");
    tap_ok(queue_wake_one(f) == &w2, "a second job wakes the next");
    tap_ok(queue_wake_one(f) == NULL, "no sleeper of f is left");
    tap_ok(queue_wake_one(g) == &w3, "w2 woke for f, so g wakes w3");
    tap_ok(queue_wake_one(g) == NULL, "w2 is not woken twice");
    queue_sleep(&w2);
    queue_cant_do(&q, &w2, g);
    tap_ok(queue_wake_one(g) == NULL, "CANT_DO takes a sleeper off that function");
    tap_ok(queue_wake_one(f) == &w2, "but not off the others");
    tap_ok(!queue_has_work(&q, &w1), "no work for w1");
    mkjob(&q, f, JOB_PRIO_LOW, "", 0);
    tap_ok(queue_has_work(&q, &w1), "a queued job is work");
    queue_reset_abilities(&q, &w1);
    queue_reset_abilities(&q, &w2);
    queue_reset_abilities(&q, &w3);
    queue_release(&q);
}

static void
test_many(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    int i, n = 100000, ok = 1;

    queue_init(&q, false);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    handle_n = 0;
    for (i = 0; i < n; i++)
        mkjob(&q, f, JOB_PRIO_NORMAL, "", 0);
    tap_is_int((long long)q.njobs, n, "100000 jobs queued");
    tap_ok(queue_find_job(&q, "H:t:77777", 9) != NULL, "any one found by handle");
    queue_can_do(&q, &w, f, 0);
    for (i = 0; i < n; i++) {
        struct job *j = queue_grab(&q, &w, 0);
        char want[32];

        snprintf(want, sizeof(want), "H:t:%d", i + 1);
        if (j == NULL || strcmp(job_handle(j), want) != 0)
            ok = 0;
        if (j != NULL)
            queue_remove(&q, j);
    }
    tap_ok(ok, "drained in submission order");
    tap_is_int((long long)q.njobs, 0, "empty");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

/* Grab one job and let it finish; returns it (freed: compare the pointer only). */
static struct job *
grab_done(struct queue *q, struct qworker *w, int64_t now)
{
    struct job *j = queue_grab(q, w, now);

    if (j != NULL)
        queue_remove(q, j);
    return j;
}

/*
 * --priority global: a worker of two functions takes the highest priority
 * over both, first submitted first within one, wherever it is; the
 * default order (as gearmand) drains the newest function first.
 */
static void
test_global_order(void)
{
    struct queue q;
    struct qworker w;
    struct func *a, *b;
    struct job *an, *bl, *ah, *bh, *bn, *g[5];
    int pass, i;

    for (pass = 0; pass < 3; pass++) {
        queue_init(&q, pass == 2);
        queue_set_order(&q, pass > 0, 0, 1000);
        queue_worker_init(&w);
        a = queue_func(&q, "a", 1, true);
        b = queue_func(&q, "b", 1, true);
        an = mkjob(&q, a, JOB_PRIO_NORMAL, "", 0);
        bl = mkjob(&q, b, JOB_PRIO_LOW, "", 0);
        ah = mkjob(&q, a, JOB_PRIO_HIGH, "", 0);
        bh = mkjob(&q, b, JOB_PRIO_HIGH, "", 0);
        bn = mkjob(&q, b, JOB_PRIO_NORMAL, "", 0);
        queue_can_do(&q, &w, a, 0);
        queue_can_do(&q, &w, b, 0);
        for (i = 0; i < 5; i++)
            g[i] = queue_grab(&q, &w, 0);
        if (pass == 0)
            tap_ok(g[0] == bh && g[1] == bn && g[2] == bl && g[3] == ah && g[4] == an,
                   "function order: all of the newest function, by priority, then the other");
        else
            tap_ok(g[0] == ah && g[1] == bh && g[2] == an && g[3] == bn && g[4] == bl,
                   "global order%s: high of both, oldest first, then normal, then low",
                   pass == 2 ? " (round-robin changes nothing)" : "");
        tap_ok(queue_grab(&q, &w, 0) == NULL, "then nothing");
        queue_requeue(&q, bn);
        queue_requeue(&q, an);
        if (pass == 0)
            tap_ok(queue_grab(&q, &w, 0) == bn, "requeued: the newest function's first");
        else
            tap_ok(queue_grab(&q, &w, 0) == an, "requeued jobs of equal priority: the older first");
        for (i = 0; i < 5; i++)
            queue_remove(&q, g[i]);
        queue_reset_abilities(&q, &w);
        queue_release(&q);
    }
}

/*
 * --priority-aging 10: a low job counts normal once it has waited more
 * than 10 s and high after more than 20 s; under a flood of a new high job
 * every second it runs at 21 s, and without aging it never does. A
 * scheduled job ages from its time, not its submission.
 */
static void
test_aging(void)
{
    struct queue q;
    struct qworker w;
    struct func *f, *g;
    struct job *low, *n, *e, *old;
    int64_t t, ran_at;
    int pass, i;
    bool ok;

    queue_init(&q, false);
    queue_set_order(&q, false, 10, 1000);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    low = mkjob_at(&q, f, JOB_PRIO_LOW, 0, 1000);
    tap_is_int(queue_rank(&q, low, 1010), JOB_PRIO_LOW, "aging 10: low after 10 s");
    tap_is_int(queue_rank(&q, low, 1011), JOB_PRIO_NORMAL, "normal after 11 s (more than 10)");
    tap_is_int(queue_rank(&q, low, 1020), JOB_PRIO_NORMAL, "still normal after 20 s");
    tap_is_int(queue_rank(&q, low, 1021), JOB_PRIO_HIGH, "high after 21 s: it keeps aging");
    tap_is_int(queue_rank(&q, low, 999), JOB_PRIO_LOW, "a clock set back ages nothing");
    n = mkjob_at(&q, f, JOB_PRIO_NORMAL, 0, 1011);
    queue_can_do(&q, &w, f, 0);
    tap_ok(queue_grab(&q, &w, 1015) == low,
           "function order with aging: the aged low job ties with normal and is older");
    tap_ok(grab_done(&q, &w, 1015) == n, "then the normal one");
    queue_remove(&q, low);
    e = mkjob_at(&q, f, JOB_PRIO_LOW, 1100, 1000);
    queue_due(&q, 1100, NULL, NULL);
    tap_is_int(queue_rank(&q, e, 1105), JOB_PRIO_LOW, "an epoch job does not age while scheduled");
    tap_is_int(queue_rank(&q, e, 1111), JOB_PRIO_NORMAL, "it ages from its time");
    queue_reset_abilities(&q, &w);
    queue_release(&q);

    for (pass = 0; pass < 2; pass++) {
        unsigned aging = pass == 0 ? 10 : 0;

        queue_init(&q, false);
        queue_set_order(&q, true, aging, 1000);
        queue_worker_init(&w);
        f = queue_func(&q, "f", 1, true);
        g = queue_func(&q, "g", 1, true);
        low = mkjob_at(&q, f, JOB_PRIO_LOW, 0, 1000);
        queue_can_do(&q, &w, f, 0);
        queue_can_do(&q, &w, g, 0);
        ran_at = 0;
        ok = true;
        /* A flood: one new high job of g a second, and one grab a second. */
        for (t = 1000; t < 1060 && ran_at == 0; t++) {
            struct job *got;

            mkjob_at(&q, g, JOB_PRIO_HIGH, 0, t);
            got = queue_grab(&q, &w, t);
            if (got == low)
                ran_at = t;
            else if (got == NULL || got->func != g)
                ok = false;
            if (got != NULL)
                queue_remove(&q, got);
        }
        if (aging > 0)
            tap_ok(ok && ran_at == 1021,
                   "aging 10, a flood of high jobs: the low job runs at 21 s (at %lld)",
                   (long long)(ran_at ? ran_at - 1000 : -1));
        else
            tap_ok(ok && ran_at == 0 && low->state == JOB_QUEUED,
                   "without aging it starves for all 60 s of the flood");
        while (grab_done(&q, &w, t) != NULL)
            ;
        queue_reset_abilities(&q, &w);
        queue_release(&q);
    }

    /* Long runs keep the index small, and old jobs stay old. */
    queue_init(&q, false);
    queue_set_order(&q, true, 10, 1000);
    f = queue_func(&q, "f", 1, true);
    old = mkjob_at(&q, f, JOB_PRIO_LOW, 0, 1000);
    ok = true;
    for (i = 1; i <= 5000; i++) {
        struct job *j = mkjob_at(&q, f, JOB_PRIO_LOW, 0, 1000 + i);

        if (q.ages.n > QUEUE_AGE_SAMPLES)
            ok = false;
        queue_remove(&q, j);
    }
    tap_ok(ok && q.ages.n <= 2 * 10 + 2, "5000 s of submits keep %u samples", q.ages.n);
    tap_is_int(queue_rank(&q, old, 6000), JOB_PRIO_HIGH, "and the first job is still high");
    queue_release(&q);

    /* A long aging counts in periods of aging / 64 s, and still never early. */
    queue_init(&q, false);
    queue_set_order(&q, false, 6400, 1000);
    f = queue_func(&q, "f", 1, true);
    low = mkjob_at(&q, f, JOB_PRIO_LOW, 0, 1000);
    mkjob_at(&q, f, JOB_PRIO_LOW, 0, 1050);
    tap_is_int(queue_rank(&q, low, 1000 + 6400), JOB_PRIO_LOW, "aging 6400: not at 6400 s");
    tap_is_int(queue_rank(&q, low, 1000 + 6400 + 100), JOB_PRIO_NORMAL,
               "but by one period (100 s) later");
    queue_release(&q);
}

/* queue_set_prio: a queued job moves to the tail of its new list; a running one does not move. */
static void
test_set_prio(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *l1, *l2, *h, *s;

    queue_init(&q, false);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    l1 = mkjob(&q, f, JOB_PRIO_LOW, "", 0);
    l2 = mkjob(&q, f, JOB_PRIO_LOW, "", 0);
    h = mkjob(&q, f, JOB_PRIO_HIGH, "", 0);
    s = mkjob(&q, f, JOB_PRIO_LOW, "", 5000);
    tap_is_int(queue_set_prio(&q, l2, JOB_PRIO_HIGH), 0, "a queued low job moves to high");
    tap_ok(f->nqueued[JOB_PRIO_HIGH] == 2 && f->nqueued[JOB_PRIO_LOW] == 1,
           "the counts follow (prioritystatus)");
    tap_is_int(queue_set_prio(&q, l1, JOB_PRIO_LOW), 0, "to its own priority: nothing moves");
    tap_is_int(queue_set_prio(&q, s, JOB_PRIO_HIGH), 0, "a scheduled job takes a priority too");
    queue_can_do(&q, &w, f, 0);
    tap_ok(queue_grab(&q, &w, 0) == h, "the high job first: the moved one is behind it");
    tap_ok(queue_grab(&q, &w, 0) == l2, "then the moved one");
    tap_is_int(queue_set_prio(&q, l2, JOB_PRIO_LOW), -1, "a running job does not move");
    tap_is_int(l2->prio, JOB_PRIO_HIGH, "and keeps its priority");
    mkjob(&q, f, JOB_PRIO_NORMAL, "", 0);
    queue_due(&q, 5000, NULL, NULL);
    tap_ok(queue_grab(&q, &w, 0) == s, "the scheduled job, due, comes in at high");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

/* Backoff, the dead set and kept results: where each state keeps a job and its key. */
static void
test_ended(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *a, *b, *c;

    queue_init(&q, false);
    queue_worker_init(&w);
    f = queue_func(&q, "f", 1, true);
    queue_can_do(&q, &w, f, 0);
    a = mkjob(&q, f, JOB_PRIO_NORMAL, "ka", 0);
    b = mkjob(&q, f, JOB_PRIO_NORMAL, "kb", 0);
    c = mkjob(&q, f, JOB_PRIO_NORMAL, "kc", 0);

    tap_ok(queue_grab(&q, &w, 0) == a, "ended: a is grabbed");
    tap_is_int(queue_backoff(&q, a, 5000), 0, "ended: a backs off");
    tap_ok(a->state == JOB_SCHEDULED && job_when(a) == 5000 && job_attempts(a) == 1,
           "ended: scheduled at its time, one attempt counted");
    tap_ok(w.nheld == 0 && f->nrunning == 0 && f->nscheduled == 1, "ended: off the worker");
    tap_ok(queue_find_unique(f, "ka", 2) == a, "ended: a backing-off job keeps its key");
    tap_is_int(queue_total(f), 3, "ended: and counts");
    tap_is_int((int)queue_due(&q, 5000, NULL, NULL), 0, "ended: due at its time");
    tap_ok(a->state == JOB_QUEUED, "ended: then queued");

    tap_ok(queue_grab(&q, &w, 0) == b, "ended: b is grabbed");
    queue_bury(&q, b);
    tap_ok(b->state == JOB_DEAD && f->ndead == 1 && TAILQ_FIRST(&f->dead) == b,
           "ended: b is in the dead set");
    tap_ok(queue_find_job(&q, job_handle(b), b->handle_len) == b, "ended: b is found by handle");
    tap_ok(queue_find_unique(f, "kb", 2) == NULL, "ended: b's key is free");
    tap_is_int(queue_total(f), 2, "ended: a dead job is not counted");

    tap_ok(queue_grab(&q, &w, 0) == c, "ended: c is grabbed");
    job_ext(c)->last_fail = 100;
    queue_keep(&q, c);
    tap_ok(c->state == JOB_DONE && f->nkept == 1 && TAILQ_FIRST(&q.kept) == c, "ended: c is kept");
    tap_ok(queue_find_kept(f, "kc", 2) == c && queue_find_unique(f, "kc", 2) == NULL,
           "ended: found by its key among the kept, not the live");

    /* A new job with b's key, then b revived: the key is taken. */
    {
        struct job *b2 = mkjob(&q, f, JOB_PRIO_NORMAL, "kb", 0);

        tap_is_int(queue_revive(&q, b, 1000), -2, "ended: b cannot come back while kb is live");
        tap_ok(b->state == JOB_DEAD && f->ndead == 1, "ended: and stays dead");
        queue_remove(&q, b2);
    }
    tap_is_int(queue_revive(&q, b, 1000), 0, "ended: once kb is free b comes back");
    tap_ok(b->state == JOB_QUEUED && f->ndead == 0 && queue_find_unique(f, "kb", 2) == b,
           "ended: queued and indexed again");

    queue_remove(&q, c);
    tap_ok(f->nkept == 0 && TAILQ_EMPTY(&q.kept) && queue_find_kept(f, "kc", 2) == NULL,
           "ended: a kept job removed leaves nothing behind");
    queue_cant_do(&q, &w, f);
    queue_release(&q);
}

/*
 * --priority gearmand-2.0 against a model of gearmand 2.0.0's
 * gearman_server_job_take (libgearman-server/gearmand_con.cc), transcribed:
 * for each priority from high to low, walk the worker's function list
 * (CAN_DO adds at its head, GEARMAND_LIST_ADD); the first function with a
 * job of that priority is moved to the list's end (round robin, always on
 * in 2.0) and its first such job is taken. Random submissions, CAN_DOs and
 * grabs, interleaved; every grab must give the model's job.
 */
#define M_FUNCS 4
struct model {
    int jobs[M_FUNCS][JOB_NPRIO][64]; /* seqs, FIFO */
    int njobs[M_FUNCS][JOB_NPRIO];
    int list[M_FUNCS]; /* the worker's functions, gearmand's list order */
    int nlist;
};

static int
model_take(struct model *m)
{
    int p, i, k, f, seq;

    for (p = 0; p < JOB_NPRIO; p++)
        for (i = 0; i < m->nlist; i++) {
            f = m->list[i];
            if (m->njobs[f][p] == 0)
                continue;
            for (k = i; k + 1 < m->nlist; k++) /* to the end of the list */
                m->list[k] = m->list[k + 1];
            m->list[m->nlist - 1] = f;
            seq = m->jobs[f][p][0];
            memmove(m->jobs[f][p], m->jobs[f][p] + 1, (size_t)--m->njobs[f][p] * sizeof(int));
            return seq;
        }
    return 0;
}

static void
test_gearmand2_order(void)
{
    static const char *const names[M_FUNCS] = {"f0", "f1", "f2", "f3"};
    unsigned seed = 12345;
    int round, bad = 0, grabs = 0;

    for (round = 0; round < 200 && !bad; round++) {
        struct queue q;
        struct qworker w;
        struct func *fs[M_FUNCS];
        struct model m;
        bool can[M_FUNCS] = {false};
        int step, i;

        memset(&m, 0, sizeof(m));
        queue_init(&q, round % 2 == 0); /* -R changes nothing: 2.0 always rotates */
        queue_set_order(&q, QUEUE_ORDER_TURNS, 0, 1000);
        queue_worker_init(&w);
        for (i = 0; i < M_FUNCS; i++)
            fs[i] = queue_func(&q, names[i], 2, true);
        for (step = 0; step < 60 && !bad; step++) {
            unsigned r = (seed = seed * 1103515245u + 12345u) >> 8;
            int f = (int)(r % M_FUNCS), p = (int)((r >> 4) % JOB_NPRIO);

            if (r % 7 == 0 && !can[f]) { /* CAN_DO: the head of gearmand's list */
                can[f] = true;
                queue_can_do(&q, &w, fs[f], 0);
                memmove(m.list + 1, m.list, (size_t)m.nlist++ * sizeof(int));
                m.list[0] = f;
            } else if (r % 3 == 0 && m.njobs[f][p] < 64) {
                struct job *j = mkjob(&q, fs[f], (enum job_prio)p, "", 0);

                m.jobs[f][p][m.njobs[f][p]++] = (int)j->seq;
            } else {
                struct job *j = queue_grab(&q, &w, 0);
                int want = model_take(&m);

                grabs++;
                if ((j == NULL ? 0 : (int)j->seq) != want) {
                    tap_diag("round %d step %d: dsjobd gave %d, gearmand 2.0 %d", round, step,
                             j ? (int)j->seq : 0, want);
                    bad = 1;
                }
                if (j != NULL)
                    queue_remove(&q, j);
            }
        }
        queue_reset_abilities(&q, &w);
        queue_release(&q);
    }
    tap_ok(!bad, "gearmand-2.0 order: %d grabs over 200 random runs give gearmand 2.0's job",
           grabs);
}

/*
 * queue_grab_unstored: a server whose stored jobs may not run now (a
 * shared store's lease past two thirds) still hands out the others, in
 * order, each stored one staying first in line; with global order too.
 */
static void
test_grab_unstored(void)
{
    struct queue q;
    struct qworker w;
    struct func *a, *b;
    struct job *s1, *s2, *f1, *sh, *f2, *bf;
    int pass;

    for (pass = 0; pass < 2; pass++) {
        queue_init(&q, false);
        queue_set_order(&q, pass == 1 ? QUEUE_ORDER_GLOBAL : QUEUE_ORDER_FUNCTION, 0, 1000);
        queue_worker_init(&w);
        a = queue_func(&q, "a", 1, true);
        b = queue_func(&q, "b", 1, true);
        s1 = mkjob(&q, a, JOB_PRIO_NORMAL, "", 0);
        s2 = mkjob(&q, a, JOB_PRIO_NORMAL, "", 0);
        f1 = mkjob(&q, a, JOB_PRIO_NORMAL, "", 0);
        sh = mkjob(&q, a, JOB_PRIO_HIGH, "", 0);
        f2 = mkjob(&q, a, JOB_PRIO_NORMAL, "", 0);
        bf = mkjob(&q, b, JOB_PRIO_LOW, "", 0);
        s1->stored = s2->stored = sh->stored = true;
        queue_can_do(&q, &w, b, 0);
        queue_can_do(&q, &w, a, 0);
        tap_ok(queue_has_unstored_work(&q, &w), "jobs not stored are work");
        tap_ok(queue_grab_unstored(&q, &w, 0) == f1 && queue_grab_unstored(&q, &w, 0) == f2 &&
                   queue_grab_unstored(&q, &w, 0) == bf,
               pass == 0 ? "function order: the jobs not stored, past the stored ones"
                         : "global order: the jobs not stored, past the stored ones");
        tap_ok(queue_grab_unstored(&q, &w, 0) == NULL && !queue_has_unstored_work(&q, &w),
               "then nothing, though stored jobs wait");
        tap_ok(queue_grab(&q, &w, 0) == sh && queue_grab(&q, &w, 0) == s1 &&
                   queue_grab(&q, &w, 0) == s2,
               "the stored ones kept their places");
        queue_remove(&q, s1);
        queue_remove(&q, s2);
        queue_remove(&q, f1);
        queue_remove(&q, sh);
        queue_remove(&q, f2);
        queue_remove(&q, bf);
        queue_reset_abilities(&q, &w);
        queue_release(&q);
    }
}

int
main(void)
{
    test_priority_fifo();
    test_function_order();
    test_unique();
    test_epoch();
    test_expiring();
    test_wake();
    test_many();
    test_global_order();
    test_gearmand2_order();
    test_aging();
    test_set_prio();
    test_ended();
    test_grab_unstored();
    return tap_done();
}
