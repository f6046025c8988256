/*
 * Flow control without a loop (server/flow.c through queue_grab): the
 * settings line read and written back, a concurrency limit (a requeued or
 * ended job gives its slot back, and the queue says so), a token bucket
 * with a burst on a clock the test moves, keys served round robin (a key
 * with ten thousand queued jobs does not delay another key's job by more
 * than one grab), key limits, pause, and keys made for jobs already
 * queued when keys are turned on. Sequences: a key's jobs one at a time
 * in submission order whatever their priority, a retry first again, a
 * failed job holding its key through its backoff and (hold) in the dead
 * set until retried or dropped, or (skip) not there, and held again when
 * replayed.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "server/flow.h"
#include "server/queue.h"
#include "tap.h"

static int handle_n;
static int64_t fake_now = 1000;
static int freed_n;

static int64_t
fake_clock(void)
{
    return fake_now;
}

static void
freed(struct func *f, void *arg)
{
    (void)f;
    (void)arg;
    freed_n++;
}

static struct job *
mkjob(struct queue *q, struct func *f, const char *unique)
{
    char handle[32];
    struct job *j;

    snprintf(handle, sizeof(handle), "H:t:%d", ++handle_n);
    j = job_new(handle, strlen(handle), unique, strlen(unique), NULL, 0, handle, strlen(handle));
    j->prio = JOB_PRIO_NORMAL;
    j->seq = (uint64_t)handle_n;
    if (queue_add(q, f, j, 0) < 0)
        tap_bail("queue_add failed");
    return j;
}

static void
setup(struct queue *q, struct func **f, const char *settings)
{
    struct flow_conf c;
    char err[128];

    queue_init(q, false);
    q->now_ms = fake_clock;
    q->flow_freed = freed;
    *f = queue_func(q, "f", 1, true);
    flow_conf_init(&c);
    if (flow_conf_parse(&c, settings, err, sizeof(err)) < 0)
        tap_bail("settings: %s", err);
    if (flow_new(*f) == NULL || flow_set((*f)->flow, &c, fake_now) < 0)
        tap_bail("flow_set failed");
    TAILQ_INSERT_TAIL(&q->flows, (*f)->flow, all);
}

static void
test_conf(void)
{
    struct flow_conf c;
    char err[128], line[FLOW_SPEC_MAX];

    flow_conf_init(&c);
    tap_ok(!flow_conf_any(&c), "no settings at first");
    tap_ok(flow_conf_parse(&c, "concurrency 4 rate 100/s burst 10 key-concurrency 2 key-rate 10/m",
                           err, sizeof(err)) == 0,
           "a settings line parses");
    flow_format(&c, line, sizeof(line));
    tap_is_str(line, "concurrency 4 rate 100/s burst 10 key-concurrency 2 key-rate 10/m",
               "and is written back the same");
    tap_ok(flow_conf_parse(&c, "rate 5/h paused key-separator |", err, sizeof(err)) == 0,
           "per hour, paused, a separator");
    tap_is_int(c.period_ms, 3600000, "an hour is 3600000 ms");
    tap_ok(c.concurrency == 4 && c.paused, "earlier settings stay");
    tap_ok(flow_conf_parse(&c, "concurrency x", err, sizeof(err)) < 0 && c.concurrency == 4,
           "a bad value is refused, nothing changes");
    tap_ok(strstr(err, "concurrency") != NULL, "the error names the setting");
    tap_ok(flow_conf_parse(&c, "speed 3", err, sizeof(err)) < 0, "an unknown setting is refused");
    tap_ok(flow_conf_parse(&c, "rate 3/fortnight", err, sizeof(err)) < 0, "so is a bad period");
    tap_ok(flow_conf_parse(&c, "off", err, sizeof(err)) == 0 && c.concurrency == 0 && c.rate == 0 &&
               c.key_concurrency == 0 && c.paused,
           "off clears the limits, not the pause");
    tap_ok(flow_conf_parse(&c, "resumed", err, sizeof(err)) == 0 && !flow_conf_any(&c),
           "resumed: nothing left");
    tap_ok(flow_conf_parse(&c, "rate 7/1500ms", err, sizeof(err)) == 0 && c.period_ms == 1500,
           "a period in ms");
    flow_format(&c, line, sizeof(line));
    tap_is_str(line, "rate 7/1500ms", "written back in ms");
    tap_ok(flow_conf_parse(&c, "off sequence hold", err, sizeof(err)) == 0 &&
               c.sequence == FLOW_SEQ_HOLD && flow_conf_any(&c),
           "sequence hold");
    flow_format(&c, line, sizeof(line));
    tap_is_str(line, "sequence hold", "written back");
    tap_ok(flow_conf_parse(&c, "sequence skip", err, sizeof(err)) == 0 &&
               c.sequence == FLOW_SEQ_SKIP,
           "sequence skip");
    tap_ok(flow_conf_parse(&c, "sequence maybe", err, sizeof(err)) < 0 && strstr(err, "sequence"),
           "a bad policy is refused, naming the setting");
    tap_ok(flow_conf_parse(&c, "off", err, sizeof(err)) == 0 && c.sequence == FLOW_SEQ_OFF,
           "off ends the sequence");
}

static void
test_concurrency(void)
{
    struct queue q;
    struct qworker w[4];
    struct func *f;
    struct job *a, *b;
    int i;

    setup(&q, &f, "concurrency 2");
    for (i = 0; i < 4; i++) {
        queue_worker_init(&w[i]);
        queue_can_do(&q, &w[i], f, 0);
    }
    for (i = 0; i < 5; i++)
        mkjob(&q, f, "");
    a = queue_grab(&q, &w[0], 0);
    b = queue_grab(&q, &w[1], 0);
    tap_ok(a != NULL && b != NULL, "two start");
    tap_ok(queue_grab(&q, &w[2], 0) == NULL, "the third is held back");
    tap_ok(f->flow->why == FLOW_CONCURRENCY, "by the concurrency limit");
    tap_ok(!queue_has_work(&q, &w[2]), "so a worker has no work and may sleep");
    freed_n = 0;
    queue_requeue(&q, a);
    tap_is_int(freed_n, 1, "a requeued job frees its slot, and the queue says so");
    tap_ok(queue_has_work(&q, &w[2]), "now there is work");
    tap_ok(queue_grab(&q, &w[2], 0) == a, "the requeued job starts again first");
    tap_ok(queue_grab(&q, &w[3], 0) == NULL, "and the limit holds");
    queue_remove(&q, b);
    tap_is_int(freed_n, 2, "an ended job frees its slot");
    tap_ok(queue_grab(&q, &w[3], 0) != NULL, "and another starts");
    tap_is_int(f->nrunning, 2, "two running");
    for (i = 0; i < 4; i++)
        queue_reset_abilities(&q, &w[i]); /* the abilities go with their worker */
    queue_release(&q);
}

static void
test_rate(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    int i, got = 0;

    fake_now = 1000;
    setup(&q, &f, "rate 10/s burst 2");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    for (i = 0; i < 50; i++)
        mkjob(&q, f, "");
    tap_ok(queue_grab(&q, &w, 0) != NULL && queue_grab(&q, &w, 0) != NULL, "a burst of two");
    tap_ok(queue_grab(&q, &w, 0) == NULL && f->flow->why == FLOW_RATE, "then the bucket is empty");
    tap_is_int(flow_next_ms(f, fake_now), 1100, "the next token comes 100 ms later");
    fake_now = 1099;
    tap_ok(queue_grab(&q, &w, 0) == NULL, "not before");
    fake_now = 1100;
    tap_ok(queue_grab(&q, &w, 0) != NULL, "then one starts");
    /* A second of grabs every 10 ms: ten more starts, no more. */
    for (i = 0; i < 100; i++) {
        fake_now += 10;
        while (queue_grab(&q, &w, 0) != NULL)
            got++;
    }
    tap_is_int(got, 10, "ten starts in the next second at 10/s");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

static void
test_keys(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *j, *b;
    int i;

    setup(&q, &f, "keyed");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    for (i = 0; i < 10000; i++) {
        char u[32];

        snprintf(u, sizeof(u), "flood:%d", i);
        mkjob(&q, f, u);
    }
    b = mkjob(&q, f, "other:1");
    j = queue_grab(&q, &w, 0);
    tap_ok(j != NULL && strncmp(job_unique(j), "flood:", 6) == 0, "the flood's key goes first");
    tap_ok(queue_grab(&q, &w, 0) == b, "then the other key's job, not the flood's next");
    j = queue_grab(&q, &w, 0);
    tap_ok(j != NULL && strcmp(job_unique(j), "flood:1") == 0, "then the flood again, in order");
    tap_is_int(f->flow->nkeys, 2, "two keys");
    queue_reset_abilities(&q, &w);
    queue_release(&q);

    setup(&q, &f, "key-concurrency 1");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    mkjob(&q, f, "a:1");
    mkjob(&q, f, "a:2");
    mkjob(&q, f, "b:1");
    mkjob(&q, f, "nokey");
    j = queue_grab(&q, &w, 0);
    tap_is_str(job_unique(j), "a:1", "key a starts one");
    j = queue_grab(&q, &w, 0);
    tap_is_str(job_unique(j), "b:1", "a is at its limit: b");
    j = queue_grab(&q, &w, 0);
    tap_is_str(job_unique(j), "nokey", "a unique key without the separator has the key \"\"");
    tap_ok(queue_grab(&q, &w, 0) == NULL && f->flow->why == FLOW_KEY_CONCURRENCY,
           "a:2 waits for a:1");
    queue_remove(&q, TAILQ_FIRST(&w.held));
    j = queue_grab(&q, &w, 0);
    tap_ok(j != NULL && strcmp(job_unique(j), "a:2") == 0, "a:1 ended: a:2 starts");
    queue_reset_abilities(&q, &w);
    queue_release(&q);

    /* Keys turned on with jobs queued and running: they are counted. */
    setup(&q, &f, "");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    mkjob(&q, f, "a:1");
    mkjob(&q, f, "a:2");
    mkjob(&q, f, "b:1");
    j = queue_grab(&q, &w, 0);
    {
        struct flow_conf c = f->flow->conf;
        char err[64];

        flow_conf_parse(&c, "key-concurrency 1", err, sizeof(err));
        tap_ok(flow_set(f->flow, &c, fake_now) == 0, "keys turned on");
    }
    j = queue_grab(&q, &w, 0);
    tap_ok(j != NULL && strcmp(job_unique(j), "b:1") == 0, "a:1 running counts against a");
    {
        struct flow_conf c = f->flow->conf;
        char err[64];

        flow_conf_parse(&c, "off", err, sizeof(err));
        flow_set(f->flow, &c, fake_now);
    }
    tap_is_int(f->flow->nkeys, 0, "keys off: no keys left");
    j = queue_grab(&q, &w, 0);
    tap_ok(j != NULL && strcmp(job_unique(j), "a:2") == 0, "and a:2 starts");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

static void
test_pause(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct flow_conf c;
    char err[64];

    setup(&q, &f, "paused");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    mkjob(&q, f, "");
    tap_ok(queue_grab(&q, &w, 0) == NULL && f->flow->why == FLOW_PAUSED, "paused: nothing starts");
    tap_ok(!queue_has_work(&q, &w), "no work");
    tap_is_int(queue_total(f), 1, "the job stays queued");
    c = f->flow->conf;
    flow_conf_parse(&c, "resumed", err, sizeof(err));
    flow_set(f->flow, &c, fake_now);
    tap_ok(queue_grab(&q, &w, 0) != NULL, "resumed: it starts");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

/*
 * A worker that said CANT_DO while it runs a keyed job, then keys turned
 * off: the job's key outlives the flow's keys until the job ends (it was
 * freed under it; ASan caught the use after free at WORK_COMPLETE).
 */
static void
test_key_outlives_cant_do(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *j;
    struct flow_conf c;
    char err[64];

    setup(&q, &f, "key-concurrency 1");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    mkjob(&q, f, "a:1");
    mkjob(&q, f, "a:2");
    j = queue_grab(&q, &w, 0);
    tap_ok(j != NULL && j->ext->key != NULL, "a keyed job runs");
    queue_cant_do(&q, &w, f);
    c = f->flow->conf;
    flow_conf_parse(&c, "key-concurrency off", err, sizeof(err));
    tap_ok(flow_set(f->flow, &c, fake_now) == 0 && f->flow->nkeys == 0, "keys turned off");
    tap_ok(j->ext->key != NULL && j->ext->key->orphan && j->ext->key->nrunning == 1,
           "the running job's key is kept for it");
    job_ref(j);
    queue_remove(&q, j);
    tap_ok(j->ext == NULL || j->ext->key == NULL, "it ends: its key goes");
    job_unref(j);
    c = f->flow->conf;
    flow_conf_parse(&c, "key-concurrency 1", err, sizeof(err));
    tap_ok(flow_set(f->flow, &c, fake_now) == 0, "keys on again");
    queue_can_do(&q, &w, f, 0);
    j = queue_grab(&q, &w, 0);
    tap_ok(j != NULL && strcmp(job_unique(j), "a:2") == 0, "and a:2 starts");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

static struct job *
mkjob_prio(struct queue *q, struct func *f, const char *unique, enum job_prio prio)
{
    struct job *j = mkjob(q, f, unique);

    if (prio != JOB_PRIO_NORMAL && queue_set_prio(q, j, prio) < 0)
        tap_bail("queue_set_prio failed");
    return j;
}

/* The unique key of what w grabs next, or "-" for nothing. */
static const char *
next_of(struct queue *q, struct qworker *w)
{
    struct job *j = queue_grab(q, w, 0);

    return j != NULL ? job_unique(j) : "-";
}

static void
set_conf(struct func *f, const char *words)
{
    struct flow_conf c = f->flow->conf;
    char err[64];

    if (flow_conf_parse(&c, words, err, sizeof(err)) < 0 || flow_set(f->flow, &c, fake_now) < 0)
        tap_bail("settings '%s' not set", words);
}

/* One at a time per key, in submission order, whatever the priorities; keys in parallel. */
static void
test_sequence_order(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *a1;

    setup(&q, &f, "sequence hold");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    mkjob(&q, f, "a:1");
    mkjob(&q, f, "a:2");
    mkjob(&q, f, "b:1");
    mkjob_prio(&q, f, "a:3", JOB_PRIO_HIGH);
    mkjob_prio(&q, f, "b:2", JOB_PRIO_LOW);
    tap_is_str(next_of(&q, &w), "a:1", "a's first starts");
    a1 = TAILQ_LAST(&w.held, job_list);
    tap_is_str(next_of(&q, &w), "b:1", "then b's first, in parallel");
    tap_is_str(next_of(&q, &w), "-", "a:3 is high but waits for a:1 and a:2");
    tap_ok(f->flow->why == FLOW_SEQUENCE, "held back by the sequence");
    tap_ok(!queue_has_work(&q, &w), "no work while both keys run");
    queue_requeue(&q, a1);
    tap_is_str(next_of(&q, &w), "a:1", "a:1 given back: it is first again");
    queue_remove(&q, a1);
    tap_is_str(next_of(&q, &w), "a:2", "a:1 ended: a:2");
    queue_remove(&q, TAILQ_LAST(&w.held, job_list));
    tap_is_str(next_of(&q, &w), "a:3", "then a:3 (high)");
    while (!TAILQ_EMPTY(&w.held))
        queue_remove(&q, TAILQ_FIRST(&w.held));
    tap_is_str(next_of(&q, &w), "b:2", "b:2 (low) after b:1");
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

/* A failed job of a key: held through its backoff; in the dead set as the policy says. */
static void
test_sequence_hold(const char *policy)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *a1;
    bool hold = strcmp(policy, "sequence hold") == 0;

    setup(&q, &f, policy);
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    mkjob(&q, f, "a:1");
    mkjob(&q, f, "a:2");
    mkjob(&q, f, "b:1");
    mkjob(&q, f, "b:2");
    tap_is_str(next_of(&q, &w), "a:1", "a:1 starts");
    a1 = TAILQ_FIRST(&w.held);
    freed_n = 0;
    tap_ok(queue_backoff(&q, a1, 100) == 0, "a:1 fails: it waits for its retry");
    tap_is_int(f->flow->nkeys_held, 1, "its key is held");
    tap_is_str(next_of(&q, &w), "b:1", "b goes on");
    queue_remove(&q, TAILQ_FIRST(&w.held));
    tap_is_str(next_of(&q, &w), "b:2", "and on");
    queue_remove(&q, TAILQ_FIRST(&w.held));
    tap_is_str(next_of(&q, &w), "-", "a:2 waits for a:1's retry");
    queue_due(&q, 100, NULL, NULL);
    tap_is_int(f->flow->nkeys_held, 0, "a:1 due: it holds its key by being first");
    tap_is_str(next_of(&q, &w), "a:1", "a:1 runs again, before a:2");
    /* Its last attempt fails: the dead set, through a store's commit (SETTLING). */
    a1->ext->attempts++;
    a1->ext->settle_to = JOB_SETTLE_DEAD;
    queue_settle(&q, a1);
    tap_is_str(next_of(&q, &w), hold ? "-" : "a:2",
               hold ? "a:2 waits while a:1's end commits" : "skip: a:2 runs once a:1 is dead");
    a1->ext->settle_to = JOB_SETTLE_GONE;
    queue_bury(&q, a1);
    tap_is_int(f->flow->nkeys_held, hold ? 1 : 0,
               hold ? "dead, a:1 holds its key" : "dead, a:1 lets go (skip)");
    if (hold) {
        tap_is_str(next_of(&q, &w), "-", "a:2 waits for a:1 (hold)");
        a1->ext->attempts = 0; /* as lifecycle_revive does */
        a1->ext->when = 0;
        tap_ok(queue_revive(&q, a1, 0) == 0, "a:1 retried from the dead set");
        tap_is_str(next_of(&q, &w), "a:1", "it runs first");
        a1->ext->attempts++;
        queue_bury(&q, a1);
        tap_is_str(next_of(&q, &w), "-", "dead again: a:2 waits");
        freed_n = 0;
        job_ref(a1);
        queue_remove(&q, a1);
        tap_ok(freed_n == 1 && f->flow->nkeys_held == 0, "a:1 dropped: its key is free, and said");
        job_unref(a1);
        tap_is_str(next_of(&q, &w), "a:2", "a:2 runs");
    }
    while (!TAILQ_EMPTY(&w.held))
        queue_remove(&q, TAILQ_FIRST(&w.held));
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

/* After a restart: a job replayed in its backoff or dead (hold) holds its key again. */
static void
test_sequence_replay(void)
{
    struct queue q;
    struct qworker w;
    struct func *f;
    struct job *j;

    setup(&q, &f, "sequence hold");
    queue_worker_init(&w);
    queue_can_do(&q, &w, f, 0);
    /* As durable_replay does: in seq order, a dead one pending, then buried. */
    j = job_new("H:t:d", 5, "a:0", 3, NULL, 0, "x", 1);
    j->seq = 1;
    job_ext(j)->attempts = 3;
    j->ext->outcome = JOB_OUTCOME_DEAD;
    tap_ok(queue_add_as(&q, f, j, 0, true) == 0, "a dead job replayed");
    queue_bury(&q, j);
    j = job_new("H:t:r", 5, "b:0", 3, NULL, 0, "x", 1);
    j->seq = 2;
    job_ext(j)->attempts = 1;
    j->ext->when = 500;
    tap_ok(queue_add(&q, f, j, 0) == 0 && j->state == JOB_SCHEDULED, "a job in its backoff");
    handle_n = 10;
    mkjob(&q, f, "a:1");
    mkjob(&q, f, "b:1");
    mkjob(&q, f, "c:1");
    tap_is_int(f->flow->nkeys_held, 2, "both hold their keys");
    tap_is_str(next_of(&q, &w), "c:1", "only c runs");
    tap_is_str(next_of(&q, &w), "-", "a and b wait");
    queue_due(&q, 500, NULL, NULL);
    tap_is_str(next_of(&q, &w), "b:0", "b:0's backoff over: it runs first");
    set_conf(f, "sequence skip");
    tap_is_int(f->flow->nkeys_held, 0, "hold to skip: the dead job lets go");
    tap_is_str(next_of(&q, &w), "a:1", "a:1 runs");
    while (!TAILQ_EMPTY(&w.held))
        queue_remove(&q, TAILQ_FIRST(&w.held));
    set_conf(f, "sequence off");
    tap_is_int(f->flow->nkeys, 0, "sequence off: no keys");
    tap_is_str(next_of(&q, &w), "b:1", "the rest run as a plain queue");
    while (!TAILQ_EMPTY(&w.held))
        queue_remove(&q, TAILQ_FIRST(&w.held));
    queue_reset_abilities(&q, &w);
    queue_release(&q);
}

int
main(void)
{
    test_conf();
    test_concurrency();
    test_rate();
    test_keys();
    test_pause();
    test_key_outlives_cant_do();
    test_sequence_order();
    test_sequence_hold("sequence hold");
    test_sequence_hold("sequence skip");
    test_sequence_replay();
    return tap_done();
}
