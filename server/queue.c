/*
 * Queue state. Every operation on the job path is O(1) in the number of
 * queued jobs: lists are intrusive TAILQs, lookups go through hash tables
 * that grow, and the only walk is over one worker's abilities (a handful).
 * A worker's sleep is recorded once per function it can do, so waking the
 * right sleeper for a new job pops a list head rather than scanning every
 * connection, and each new job wakes one sleeper, not all of them.
 */
#include "config.h"
#include "queue.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"

static bool
time_less(const void *a, const void *b)
{
    const struct job *x = a;
    const struct job *y = b;

    /* Only SCHEDULED jobs are in the heap, and each has its job_ext. */
    return x->ext->when < y->ext->when || (x->ext->when == y->ext->when && x->seq < y->seq);
}

static void
set_heap_pos(void *elem, size_t pos)
{
    ((struct job *)elem)->ext->heap_pos = pos;
}

static bool
deadline_less(const void *a, const void *b)
{
    const struct job *x = a;
    const struct job *y = b;

    /* Only jobs with a deadline are in it, and each has its job_ext. */
    return x->ext->deadline_ms < y->ext->deadline_ms ||
           (x->ext->deadline_ms == y->ext->deadline_ms && x->seq < y->seq);
}

static void
set_expire_pos(void *elem, size_t pos)
{
    ((struct job *)elem)->ext->expire_pos = pos;
}

/*
 * A job that waits with a deadline is in queue.expiring, from the moment
 * it waits (queued or scheduled) until a worker takes it or it leaves.
 * Out of memory for the heap's room, it is not: it then never expires.
 */
static void
expiring_add(struct queue *q, struct job *j)
{
    if (j->ext == NULL || j->ext->deadline_ms == 0 || j->ext->expiring)
        return;
    j->ext->expiring = heap_insert(&q->expiring, j) == 0;
}

static void
expiring_del(struct queue *q, struct job *j)
{
    if (j->ext == NULL || !j->ext->expiring)
        return;
    heap_remove(&q->expiring, j->ext->expire_pos);
    j->ext->expiring = false;
}

/* The key functions of the three kinds of index. */
static const void *
func_key(const struct hnode *n)
{
    return ((const struct func *)n)->name;
}

static const void *
handle_key(const struct hnode *n)
{
    return job_handle((const struct job *)((const char *)n - offsetof(struct job, by_handle)));
}

static const void *
unique_key(const struct hnode *n)
{
    return job_unique((const struct job *)((const char *)n - offsetof(struct job, by_unique)));
}

static const void *
payload_key(const struct hnode *n)
{
    return job_data((const struct job *)((const char *)n - offsetof(struct job, by_unique)));
}

/*
 * Where j's by_unique node goes: unique "-" coalesces on the payload, in a
 * key space of its own, so that an explicit key that happens to equal a
 * payload is another job (as in gearmand).
 */
static struct hmap *
unique_index(struct func *f, const struct job *j)
{
    return j->unique_is_data ? &f->payloads : &f->uniques;
}

void
queue_init(struct queue *q, bool round_robin)
{
    hmap_init(&q->funcs, func_key);
    hmap_init(&q->jobs, handle_key);
    TAILQ_INIT(&q->func_order);
    heap_init(&q->scheduled, time_less, set_heap_pos);
    heap_init(&q->expiring, deadline_less, set_expire_pos);
    TAILQ_INIT(&q->kept);
    TAILQ_INIT(&q->flows);
    q->now_ms = NULL;
    q->flow_freed = NULL;
    q->flow_arg = NULL;
    q->round_robin = round_robin;
    q->njobs = 0;
    q->nended = 0;
    q->nkept = 0;
    q->global = false;
    q->turns = false;
    q->ranked = false;
    q->aging = 0;
    q->ages.head = 0;
    q->ages.n = 0;
    q->ages.floor = 0;
    q->ages.gran = 1;
}

void
queue_set_order(struct queue *q, enum queue_order order, unsigned aging, int64_t now)
{
    q->global = order == QUEUE_ORDER_GLOBAL;
    q->turns = order == QUEUE_ORDER_TURNS;
    q->aging = aging;
    q->ranked = order != QUEUE_ORDER_FUNCTION || aging > 0;
    q->ages.head = 0;
    q->ages.n = 0;
    q->ages.floor = now;
    /* Two levels of aging span 2 * aging seconds: 128 periods at most, well within the ring. */
    q->ages.gran = aging / 64 > 1 ? aging / 64 : 1;
}

static const struct queue_age_sample *
age_sample(const struct queue_ages *a, unsigned i)
{
    return &a->s[(a->head + i) % QUEUE_AGE_SAMPLES];
}

/* Drop the oldest sample: its seqs, and all before them, now map to floor. */
static void
age_drop(struct queue_ages *a)
{
    a->floor = age_sample(a, 0)->t;
    a->head = (a->head + 1) % QUEUE_AGE_SAMPLES;
    a->n--;
}

/*
 * Note that seq was added at now. Only a seq past every sample and a new
 * period make a sample, so samples grow in both seq and time (a clock set
 * back makes none until it passes the last again). Samples past the oldest
 * age that still matters (two levels) go first.
 */
static void
age_note(struct queue *q, uint64_t seq, int64_t now)
{
    struct queue_ages *a = &q->ages;
    struct queue_age_sample *s;

    if (a->n > 0) {
        const struct queue_age_sample *last = age_sample(a, a->n - 1);

        if (seq <= last->seq || now < last->t + a->gran)
            return;
    }
    while (a->n > 0 && now - age_sample(a, 0)->t >= 2 * (int64_t)q->aging + a->gran)
        age_drop(a);
    if (a->n == QUEUE_AGE_SAMPLES)
        age_drop(a); /* not reached with gran as set; older jobs would only seem younger */
    s = &a->s[(a->head + a->n) % QUEUE_AGE_SAMPLES];
    s->seq = seq;
    s->t = now;
    a->n++;
}

/*
 * The latest second j can have started waiting at: the end of the period
 * its seq was added in, or its epoch time if later (a scheduled job waits
 * from then).
 */
static int64_t
age_since(const struct queue *q, const struct job *j)
{
    const struct queue_ages *a = &q->ages;
    unsigned lo = 0, hi = a->n;
    int64_t t;

    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;

        if (age_sample(a, mid)->seq <= j->seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    t = (lo > 0 ? age_sample(a, lo - 1)->t : a->floor) + a->gran - 1;
    return job_when(j) > t ? job_when(j) : t;
}

enum job_prio
queue_rank(const struct queue *q, const struct job *j, int64_t now)
{
    unsigned p = j->prio;
    int64_t waited;

    if (q->aging == 0 || p == JOB_PRIO_HIGH)
        return (enum job_prio)p;
    /*
     * Whole seconds on both sides: more than aging of them apart is more
     * than aging seconds of real time, so a job never ages early (it may
     * age up to a second, or a period, late).
     */
    waited = now - age_since(q, j);
    while (p > JOB_PRIO_HIGH && waited > (int64_t)q->aging) {
        p--;
        waited -= q->aging;
    }
    return (enum job_prio)p;
}

static void
func_free(struct queue *q, struct func *f)
{
    if (f->flow != NULL) {
        TAILQ_REMOVE(&q->flows, f->flow, all);
        flow_free(f->flow);
    }
    hmap_release(&f->uniques);
    hmap_release(&f->payloads);
    hmap_release(&f->settling);
    hmap_release(&f->kept);
    free(f);
}

void
queue_release(struct queue *q)
{
    struct hnode *n;
    size_t bucket = 0;
    struct func *f;

    /*
     * Jobs first: queue_remove needs their functions. Each pass takes the
     * head of the current bucket, so the scan goes on from that bucket:
     * starting again at bucket 0 for every job would make freeing a deep
     * queue at shutdown quadratic in its length.
     */
    while ((n = hmap_next(&q->jobs, NULL, &bucket)) != NULL) {
        struct job *j = (struct job *)((char *)n - offsetof(struct job, by_handle));
        struct waiter *w;

        while (j->ext != NULL && (w = TAILQ_FIRST(&j->ext->waiters)) != NULL)
            TAILQ_REMOVE(&j->ext->waiters, w, by_job); /* waiters belong to their conns */
        queue_remove(q, j);
    }
    while ((f = TAILQ_FIRST(&q->func_order)) != NULL) {
        TAILQ_REMOVE(&q->func_order, f, order);
        func_free(q, f);
    }
    hmap_release(&q->funcs);
    hmap_release(&q->jobs);
    heap_release(&q->scheduled);
    heap_release(&q->expiring);
}

ptrdiff_t
queue_name_bad_byte(const char *name, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] == 0x7f)
            return (ptrdiff_t)i;
    return -1;
}

struct func *
queue_func(struct queue *q, const char *name, size_t len, bool create)
{
    struct hnode *n = hmap_find(&q->funcs, name, len);
    struct func *f;
    int p;

    if (n != NULL)
        return (struct func *)n;
    if (!create)
        return NULL;
    f = calloc(1, sizeof(*f) + len + 1);
    if (f == NULL)
        return NULL;
    memcpy(f->name, name, len);
    f->name[len] = '\0';
    f->name_len = len;
    for (p = 0; p < JOB_NPRIO; p++) {
        TAILQ_INIT(&f->jobs[p]);
        f->max_queue[p] = q->default_max_queue;
    }
    hmap_init(&f->uniques, unique_key);
    hmap_init(&f->payloads, payload_key);
    hmap_init(&f->settling, unique_key);
    hmap_init(&f->kept, unique_key);
    TAILQ_INIT(&f->dead);
    TAILQ_INIT(&f->workers);
    TAILQ_INIT(&f->sleepers);
    if (hmap_insert(&q->funcs, &f->node, f->name, len) < 0) {
        func_free(q, f);
        return NULL;
    }
    TAILQ_INSERT_TAIL(&q->func_order, f, order);
    return f;
}

void
queue_drop_func(struct queue *q, struct func *f)
{
    assert(f->nworkers == 0 && queue_total(f) == 0 && f->ndead == 0 && f->nkept == 0);
    hmap_remove(&q->funcs, &f->node);
    TAILQ_REMOVE(&q->func_order, f, order);
    func_free(q, f);
}

struct job *
queue_first_idle(const struct queue *q, const struct func *f)
{
    size_t i;
    int p;

    for (p = 0; p < JOB_NPRIO; p++)
        if (!TAILQ_EMPTY(&f->jobs[p]))
            return TAILQ_FIRST(&f->jobs[p]);
    for (i = 0; i < q->scheduled.len; i++) {
        struct job *j = q->scheduled.elems[i];

        if (j->func == f)
            return j;
    }
    return NULL;
}

struct job *
queue_find_job(const struct queue *q, const char *handle, size_t len)
{
    struct hnode *n = hmap_find(&q->jobs, handle, len);

    return n ? (struct job *)((char *)n - offsetof(struct job, by_handle)) : NULL;
}

struct job *
queue_find_unique(const struct func *f, const void *unique, size_t len)
{
    struct hnode *n = hmap_find(&f->uniques, unique, len);

    return n ? (struct job *)((char *)n - offsetof(struct job, by_unique)) : NULL;
}

struct job *
queue_find_payload(const struct func *f, const void *data, size_t len)
{
    struct hnode *n = hmap_find(&f->payloads, data, len);

    return n ? (struct job *)((char *)n - offsetof(struct job, by_unique)) : NULL;
}

unsigned
queue_total(const struct func *f)
{
    return f->nqueued[JOB_PRIO_HIGH] + f->nqueued[JOB_PRIO_NORMAL] + f->nqueued[JOB_PRIO_LOW] +
           f->nscheduled + f->npending + f->nrunning + f->nsettling;
}

bool
queue_full(const struct func *f, enum job_prio prio)
{
    /* As in gearmand, each priority's limit bounds the function's whole total. */
    return f->max_queue[prio] > 0 && queue_total(f) >= f->max_queue[prio];
}

static void
queue_push(struct queue *q, struct func *f, struct job *j, bool head)
{
    if (head)
        TAILQ_INSERT_HEAD(&f->jobs[j->prio], j, link);
    else
        TAILQ_INSERT_TAIL(&f->jobs[j->prio], j, link);
    f->nqueued[j->prio]++;
    job_set_state(j, JOB_QUEUED);
    if (f->flow != NULL)
        flow_queued(f, j, head);
    expiring_add(q, j);
}

/* Now, for flow's rates: the server's monotonic clock, or 0 without one. */
static int64_t
flow_now(const struct queue *q)
{
    return q->now_ms != NULL ? q->now_ms() : 0;
}

/* A running job of f stopped: its flow slot frees, and the server may wake a worker. */
static void
flow_stop(struct queue *q, struct func *f, struct job *j)
{
    flow_stopped(f, j);
    if (q->flow_freed != NULL)
        q->flow_freed(f, q->flow_arg);
}

/* A running job of f stops to wait for a retry or in the dead set: a sequence holds its key. */
static void
flow_stop_as(struct queue *q, struct func *f, struct job *j, enum flow_stop how)
{
    flow_hold(f, j, how);
    if (q->flow_freed != NULL)
        q->flow_freed(f, q->flow_arg);
}

/* j, which may hold its sequence's key, lets go of it (its key's next job may start). */
static void
flow_release(struct queue *q, struct func *f, struct job *j)
{
    if (flow_released(f, j) && q->flow_freed != NULL)
        q->flow_freed(f, q->flow_arg);
}

/* Put an indexed job where it waits: the epoch heap, or the tail of its list. */
static int
queue_place(struct queue *q, struct func *f, struct job *j, int64_t now)
{
    if (job_when(j) > now) {
        if (heap_insert(&q->scheduled, j) < 0)
            return -1;
        job_set_state(j, JOB_SCHEDULED);
        f->nscheduled++;
        expiring_add(q, j);
        if (f->flow != NULL)
            flow_hold(f, j, FLOW_STOP_RETRY); /* replayed in its backoff: holds a sequence */
    } else {
        queue_push(q, f, j, false);
    }
    return 0;
}

int
queue_commit(struct queue *q, struct job *j, int64_t now)
{
    assert(j->state == JOB_PENDING);
    if (queue_place(q, j->func, j, now) < 0)
        return -1;
    j->func->npending--;
    return 0;
}

int
queue_add(struct queue *q, struct func *f, struct job *j, int64_t now)
{
    return queue_add_as(q, f, j, now, false);
}

int
queue_add_as(struct queue *q, struct func *f, struct job *j, int64_t now, bool pending)
{
    assert(j->state == JOB_NEW);
    j->func = f;
    if (q->aging > 0)
        age_note(q, j->seq, now);
    if (hmap_insert(&q->jobs, &j->by_handle, job_handle(j), j->handle_len) < 0)
        return -1;
    if (j->unique_len > 0 &&
        hmap_insert(unique_index(f, j), &j->by_unique,
                    j->unique_is_data ? (const void *)job_data(j) : (const void *)job_unique(j),
                    j->unique_is_data ? j->data_len : j->unique_len) < 0)
        goto out_unindex_handle;
    if (pending) {
        job_set_state(j, JOB_PENDING);
        f->npending++;
    } else if (queue_place(q, f, j, now) < 0) {
        goto out_unindex_unique;
    }
    q->njobs++;
    return 0;

out_unindex_unique:
    if (j->unique_len > 0)
        hmap_remove(unique_index(f, j), &j->by_unique);
out_unindex_handle:
    hmap_remove(&q->jobs, &j->by_handle);
    return -1;
}

/*
 * Take j out of its list, heap or worker (not out of any index). dying: it
 * goes to the dead set, where a sequence's failed job may hold its key.
 */
static void
queue_unplace(struct queue *q, struct func *f, struct job *j, bool dying)
{
    expiring_del(q, j);
    switch ((enum job_state)j->state) {
    case JOB_QUEUED:
        TAILQ_REMOVE(&f->jobs[j->prio], j, link);
        f->nqueued[j->prio]--;
        if (f->flow != NULL)
            flow_unqueued(f, j);
        break;
    case JOB_RUNNING:
        TAILQ_REMOVE(&j->ext->worker->held, j, link);
        j->ext->worker->nheld--;
        j->ext->worker = NULL;
        f->nrunning--;
        if (f->flow != NULL && dying)
            flow_stop_as(q, f, j, FLOW_STOP_DEAD);
        else if (f->flow != NULL)
            flow_stop(q, f, j);
        break;
    case JOB_SCHEDULED:
        heap_remove(&q->scheduled, j->ext->heap_pos);
        f->nscheduled--;
        if (f->flow != NULL)
            flow_release(q, f, j);
        break;
    case JOB_PENDING: f->npending--; break;
    case JOB_SETTLING:
        f->nsettling--;
        if (f->flow != NULL && !dying)
            flow_release(q, f, j);
        break;
    case JOB_DEAD:
        TAILQ_REMOVE(&f->dead, j, link);
        f->ndead--;
        q->nended--;
        if (f->flow != NULL)
            flow_release(q, f, j);
        break;
    case JOB_DONE:
        TAILQ_REMOVE(&q->kept, j, link);
        f->nkept--;
        q->nended--;
        q->nkept--;
        break;
    case JOB_NEW: break;
    }
}

/* Take j out of the index its state keeps it in: unique, settling or kept. */
static void
queue_unindex(struct func *f, struct job *j)
{
    if (j->state == JOB_SETTLING || j->state == JOB_DONE) {
        if (j->settle_indexed)
            hmap_remove(j->state == JOB_DONE ? &f->kept : &f->settling, &j->by_unique);
        j->settle_indexed = false;
    } else if (j->state != JOB_DEAD && j->unique_len > 0) {
        hmap_remove(unique_index(f, j), &j->by_unique);
    }
}

void
queue_remove(struct queue *q, struct job *j)
{
    struct func *f = j->func;

    assert(!job_has_waiters(j));
    if (j->state == JOB_NEW)
        return;
    queue_unindex(f, j);
    queue_unplace(q, f, j, false);
    hmap_remove(&q->jobs, &j->by_handle);
    q->njobs--;
    job_set_state(j, JOB_NEW);
    job_unref(j);
}

void
queue_settle(struct queue *q, struct job *j)
{
    struct func *f = j->func;

    assert(!job_has_waiters(j) && j->state != JOB_NEW && j->state != JOB_SETTLING);
    queue_unindex(f, j);
    queue_unplace(q, f, j, j->ext != NULL && j->ext->settle_to == JOB_SETTLE_DEAD);
    /*
     * Only a key that is not already settling: two jobs of one key can end
     * within one commit, and the index holds a key once (the later one is
     * then found by handle only, as is one there was no memory to index).
     */
    j->settle_indexed = j->unique_len > 0 && !j->unique_is_data &&
                        queue_find_settling(f, job_unique(j), j->unique_len) == NULL &&
                        hmap_insert(&f->settling, &j->by_unique, job_unique(j), j->unique_len) == 0;
    job_set_state(j, JOB_SETTLING);
    f->nsettling++;
}

struct job *
queue_find_settling(const struct func *f, const void *unique, size_t len)
{
    struct hnode *n = hmap_find(&f->settling, unique, len);

    return n ? (struct job *)((char *)n - offsetof(struct job, by_unique)) : NULL;
}

/* When j ended (its last failure, or its end for a kept result): 0 if unknown. */
static int64_t
ended_at(const struct job *j)
{
    return j->ext != NULL ? j->ext->last_fail : 0;
}

/*
 * Put j into list l, which is ordered by end time, oldest first: a job
 * that ends now goes at the tail at once; one replayed from the store
 * (which gives them in submission order) walks back to its place.
 */
static void
insert_by_end(struct job_list *l, struct job *j)
{
    struct job *at = TAILQ_LAST(l, job_list);

    while (at != NULL && ended_at(at) > ended_at(j))
        at = TAILQ_PREV(at, job_list, link);
    if (at == NULL)
        TAILQ_INSERT_HEAD(l, j, link);
    else
        TAILQ_INSERT_AFTER(l, at, j, link);
}

void
queue_bury(struct queue *q, struct job *j)
{
    struct func *f = j->func;
    bool replayed = j->state == JOB_PENDING;

    assert(!job_has_waiters(j) && j->state != JOB_NEW && j->state != JOB_DEAD);
    queue_unindex(f, j);
    queue_unplace(q, f, j, true);
    if (f->flow != NULL && replayed)
        flow_hold(f, j, FLOW_STOP_DEAD); /* a dead job replayed: holds a sequence with hold */
    insert_by_end(&f->dead, j);
    f->ndead++;
    q->nended++;
    job_set_state(j, JOB_DEAD);
}

void
queue_keep(struct queue *q, struct job *j)
{
    struct func *f = j->func;

    assert(!job_has_waiters(j) && j->state != JOB_NEW && j->state != JOB_DONE);
    queue_unindex(f, j);
    queue_unplace(q, f, j, false);
    /*
     * The index holds the newest of a key only: a table's chain order is
     * not kept when it grows, and one chain must not grow with every
     * repeat of a key. An older one is then found by handle only.
     */
    j->settle_indexed = false;
    if (j->unique_len > 0 && !j->unique_is_data) {
        struct job *old = queue_find_kept(f, job_unique(j), j->unique_len);

        if (old != NULL) {
            hmap_remove(&f->kept, &old->by_unique);
            old->settle_indexed = false;
        }
        j->settle_indexed = hmap_insert(&f->kept, &j->by_unique, job_unique(j), j->unique_len) == 0;
    }
    insert_by_end(&q->kept, j);
    f->nkept++;
    q->nended++;
    q->nkept++;
    job_set_state(j, JOB_DONE);
}

struct job *
queue_find_kept(const struct func *f, const void *unique, size_t len)
{
    struct hnode *n = hmap_find(&f->kept, unique, len);

    return n ? (struct job *)((char *)n - offsetof(struct job, by_unique)) : NULL;
}

int
queue_revive(struct queue *q, struct job *j, int64_t now)
{
    struct func *f = j->func;
    const void *key = j->unique_is_data ? (const void *)job_data(j) : (const void *)job_unique(j);
    size_t klen = j->unique_is_data ? j->data_len : j->unique_len;

    assert(j->state == JOB_DEAD);
    if (j->unique_len > 0) {
        if (hmap_find(unique_index(f, j), key, klen) != NULL)
            return -2;
        if (hmap_insert(unique_index(f, j), &j->by_unique, key, klen) < 0)
            return -1;
    }
    TAILQ_REMOVE(&f->dead, j, link);
    f->ndead--;
    q->nended--;
    if (queue_place(q, f, j, now) < 0) {
        if (j->unique_len > 0)
            hmap_remove(unique_index(f, j), &j->by_unique);
        insert_by_end(&f->dead, j);
        f->ndead++;
        q->nended++;
        return -1;
    }
    return 0;
}

int
queue_backoff(struct queue *q, struct job *j, int64_t when)
{
    struct func *f = j->func;

    assert(j->state == JOB_RUNNING);
    j->ext->when = when;
    if (heap_insert(&q->scheduled, j) < 0) {
        j->ext->when = 0;
        queue_requeue(q, j);
        return -1;
    }
    TAILQ_REMOVE(&j->ext->worker->held, j, link);
    j->ext->worker->nheld--;
    j->ext->worker = NULL;
    f->nrunning--;
    j->ext->attempts++; /* before flow_hold, which holds a sequence for a failed job only */
    if (f->flow != NULL)
        flow_stop_as(q, f, j, FLOW_STOP_RETRY);
    j->ext->numerator = 0;
    j->ext->denominator = 0;
    job_set_state(j, JOB_SCHEDULED);
    f->nscheduled++;
    expiring_add(q, j);
    return 0;
}

struct ability *
queue_ability_of(const struct qworker *w, const struct func *f)
{
    struct ability *a;

    TAILQ_FOREACH (a, &w->abilities, by_worker)
        if (a->func == f)
            return a;
    return NULL;
}

/* Hand j, first in its list, to w (a is w's ability for j's function). */
static inline struct job *
grab_take(struct queue *q, struct qworker *w, struct ability *a, struct job *j)
{
    struct func *f = j->func;

    /* Out of memory for its job_ext: it stays first in line for the next grab. */
    if (job_ext(j) == NULL)
        return NULL;
    if (f->flow != NULL)
        flow_took(f, j, flow_now(q));
    TAILQ_REMOVE(&f->jobs[j->prio], j, link);
    f->nqueued[j->prio]--;
    f->nrunning++;
    job_set_state(j, JOB_RUNNING);
    expiring_del(q, j);
    /* A deadline is for starting: a retry of it does not expire, nor does its row (dispatch.c). */
    j->ext->deadline_started = j->ext->deadline_started || j->ext->deadline_ms != 0;
    j->ext->deadline_ms = 0;
    j->ext->worker = w;
    TAILQ_INSERT_TAIL(&w->held, j, link);
    w->nheld++;
    if ((q->turns || (q->round_robin && !q->global)) && TAILQ_NEXT(a, by_worker) != NULL) {
        TAILQ_REMOVE(&w->abilities, a, by_worker);
        TAILQ_INSERT_TAIL(&w->abilities, a, by_worker);
    }
    return j;
}

/*
 * The first job of f's list p that is not stored and may start now, or
 * NULL. Under flow control, the head flow_head gives only: a function
 * whose jobs flow holds in order is not reordered around a stored one.
 */
static struct job *
unstored_head(struct queue *q, struct func *f, int p)
{
    struct job *j;

    if (f->flow != NULL) {
        j = flow_head(f, p, flow_now(q));
        return j != NULL && !j->stored ? j : NULL;
    }
    TAILQ_FOREACH (j, &f->jobs[p], link)
        if (!j->stored)
            return j;
    return NULL;
}

/* The job of f's list p that may start now, or NULL; with unstored, among those not stored. */
static struct job *
list_head(struct queue *q, struct func *f, int p, bool unstored)
{
    if (unstored)
        return unstored_head(q, f, p);
    return f->flow == NULL ? TAILQ_FIRST(&f->jobs[p]) : flow_head(f, p, flow_now(q));
}

/*
 * Global order or aging: compare the heads of the lists (three per
 * function) by rank, then seq. Lists are FIFO, so a head is the oldest of
 * its list and the only job of it that can win: O(abilities), whatever
 * the number of jobs. Function order stops at the first function with
 * work, as the plain loop does. Turns (gearmand 2.0's
 * gearman_server_job_take: for each priority, the first worker function
 * with a job of it) breaks a tie of rank by ability order, not by seq:
 * the ability first in w's list wins, and grab_take moves it to the back.
 */
static struct job *
grab_ranked(struct queue *q, struct qworker *w, int64_t now, bool unstored)
{
    struct ability *a, *best_a = NULL;
    struct job *best = NULL;
    unsigned best_rank = JOB_NPRIO;
    int p;

    TAILQ_FOREACH (a, &w->abilities, by_worker) {
        for (p = 0; p < JOB_NPRIO; p++) {
            struct job *j = list_head(q, a->func, p, unstored);
            unsigned rank;

            if (j == NULL)
                continue;
            rank = q->aging > 0 ? (unsigned)queue_rank(q, j, now) : (unsigned)p;
            if (rank < best_rank ||
                (rank == best_rank && (!q->turns || a == best_a) && j->seq < best->seq)) {
                best = j;
                best_rank = rank;
                best_a = a;
            }
            if (q->aging == 0)
                break; /* without aging, a function's first list with a job holds its best */
        }
        if (!q->global && !q->turns && best != NULL)
            break;
    }
    return best != NULL ? grab_take(q, w, best_a, best) : NULL;
}

/* queue_grab, or with unstored queue_grab_unstored. */
static struct job *
grab(struct queue *q, struct qworker *w, int64_t now, bool unstored)
{
    struct ability *a;
    int p;

    if (q->ranked)
        return grab_ranked(q, w, now, unstored);
    TAILQ_FOREACH (a, &w->abilities, by_worker) {
        for (p = 0; p < JOB_NPRIO; p++) {
            struct job *j = list_head(q, a->func, p, unstored);

            if (j != NULL)
                return grab_take(q, w, a, j);
        }
    }
    return NULL;
}

struct job *
queue_grab(struct queue *q, struct qworker *w, int64_t now)
{
    return grab(q, w, now, false);
}

struct job *
queue_grab_unstored(struct queue *q, struct qworker *w, int64_t now)
{
    return grab(q, w, now, true);
}

bool
queue_has_unstored_work(struct queue *q, const struct qworker *w)
{
    const struct ability *a;
    int p;

    TAILQ_FOREACH (a, &w->abilities, by_worker)
        for (p = 0; p < JOB_NPRIO; p++)
            if (unstored_head(q, a->func, p) != NULL)
                return true;
    return false;
}

int
queue_set_prio(struct queue *q, struct job *j, enum job_prio prio)
{
    struct func *f = j->func;

    (void)q;
    switch ((enum job_state)j->state) {
    case JOB_QUEUED:
        if (j->prio == (unsigned)prio)
            return 0;
        TAILQ_REMOVE(&f->jobs[j->prio], j, link);
        f->nqueued[j->prio]--;
        if (f->flow != NULL)
            flow_unqueued(f, j);
        j->prio = (uint8_t)prio;
        queue_push(q, f, j, false);
        return 0;
    case JOB_SCHEDULED:
    case JOB_PENDING: j->prio = (uint8_t)prio; return 0;
    case JOB_NEW:
    case JOB_RUNNING:
    case JOB_SETTLING:
    case JOB_DEAD:
    case JOB_DONE: break;
    }
    return -1;
}

void
queue_requeue(struct queue *q, struct job *j)
{
    struct func *f = j->func;

    assert(j->state == JOB_RUNNING);
    TAILQ_REMOVE(&j->ext->worker->held, j, link);
    j->ext->worker->nheld--;
    j->ext->worker = NULL;
    f->nrunning--;
    if (f->flow != NULL)
        flow_stop(q, f, j);
    j->ext->attempts++;
    j->ext->numerator = 0;
    j->ext->denominator = 0;
    queue_push(q, f, j, true);
}

void
queue_hold_deadline(struct queue *q, struct job *j)
{
    expiring_add(q, j);
}

struct job *
queue_expired(struct queue *q, int64_t now_ms)
{
    struct job *j = heap_peek(&q->expiring);

    if (j == NULL || j->ext->deadline_ms > now_ms)
        return NULL;
    expiring_del(q, j);
    return j;
}

int64_t
queue_next_due(const struct queue *q)
{
    const struct job *j = heap_peek(&q->scheduled);

    return j ? j->ext->when : 0;
}

int64_t
queue_due(struct queue *q, int64_t now, void (*due)(struct job *, void *), void *arg)
{
    struct job *j;

    while ((j = heap_peek(&q->scheduled)) != NULL && j->ext->when <= now) {
        heap_remove(&q->scheduled, 0);
        j->func->nscheduled--;
        queue_push(q, j->func, j, false);
        if (due)
            due(j, arg);
    }
    return queue_next_due(q);
}

void
queue_worker_init(struct qworker *w)
{
    TAILQ_INIT(&w->abilities);
    TAILQ_INIT(&w->held);
    w->nabilities = 0;
    w->nheld = 0;
    w->asleep = false;
}

int
queue_can_do(struct queue *q, struct qworker *w, struct func *f, uint32_t timeout_ms)
{
    struct ability *a = queue_ability_of(w, f);

    (void)q;
    if (a != NULL) {
        a->timeout_ms = timeout_ms;
        return 0;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -1;
    a->worker = w;
    a->func = f;
    a->timeout_ms = timeout_ms;
    /* Newest first: gearmand 1.1.20 drains the function registered last first. */
    TAILQ_INSERT_HEAD(&w->abilities, a, by_worker);
    TAILQ_INSERT_TAIL(&f->workers, a, by_func);
    w->nabilities++;
    f->nworkers++;
    if (w->asleep)
        TAILQ_INSERT_TAIL(&f->sleepers, a, sleeping);
    return 0;
}

static void
ability_free(struct qworker *w, struct ability *a)
{
    struct func *f = a->func;

    if (w->asleep)
        TAILQ_REMOVE(&f->sleepers, a, sleeping);
    TAILQ_REMOVE(&w->abilities, a, by_worker);
    TAILQ_REMOVE(&f->workers, a, by_func);
    w->nabilities--;
    f->nworkers--;
    free(a);
}

void
queue_cant_do(struct queue *q, struct qworker *w, struct func *f)
{
    struct ability *a = queue_ability_of(w, f);

    (void)q;
    if (a != NULL)
        ability_free(w, a);
}

void
queue_reset_abilities(struct queue *q, struct qworker *w)
{
    struct ability *a;

    (void)q;
    while ((a = TAILQ_FIRST(&w->abilities)) != NULL)
        ability_free(w, a);
}

bool
queue_has_work(const struct queue *q, const struct qworker *w)
{
    const struct ability *a;

    TAILQ_FOREACH (a, &w->abilities, by_worker) {
        struct func *f = a->func;

        if (f->flow != NULL) {
            if (flow_ready(f, flow_now(q)))
                return true;
            continue;
        }
        if (f->nqueued[JOB_PRIO_HIGH] || f->nqueued[JOB_PRIO_NORMAL] || f->nqueued[JOB_PRIO_LOW])
            return true;
    }
    return false;
}

void
queue_sleep(struct qworker *w)
{
    struct ability *a;

    if (w->asleep)
        return;
    TAILQ_FOREACH (a, &w->abilities, by_worker)
        TAILQ_INSERT_TAIL(&a->func->sleepers, a, sleeping);
    w->asleep = true;
}

void
queue_awake(struct qworker *w)
{
    struct ability *a;

    if (!w->asleep)
        return;
    TAILQ_FOREACH (a, &w->abilities, by_worker)
        TAILQ_REMOVE(&a->func->sleepers, a, sleeping);
    w->asleep = false;
}

struct qworker *
queue_wake_one(struct func *f)
{
    struct ability *a = TAILQ_FIRST(&f->sleepers);

    if (a == NULL)
        return NULL;
    queue_awake(a->worker);
    return a->worker;
}
