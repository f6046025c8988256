/*
 * What each binary packet does. The handler table is indexed by packet type;
 * dispatch_packet checks the magic and that the type is one the server
 * takes, so handlers see only well-formed requests (the codec has already
 * split the arguments). Handlers read their arguments, change the queue and
 * write the replies to their own connection; whatever moves or ends a job
 * and must be told to other connections (results to waiting clients, NOOPs
 * to sleeping workers) is lifecycle.c's.
 */
#include "config.h"
#include "dispatch.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "conn.h"
#include "deps.h"
#include "durable.h"
#include "flow_ctl.h"
#include "job.h"
#include "lifecycle.h"
#include "proto/decimal.h"
#include "queue.h"
#include "srv.h"
#include "storage.h"
#include "storage_lease.h"

typedef void dispatch_fn(struct conn *c, const struct packet *p);

struct dispatch_entry {
    dispatch_fn *fn; /* handler, or NULL for types the server does not take */
};

#define ARG(p, i) ((const char *)(p)->arg[i])

/* --- worker abilities and sleep ----------------------------------------- */

/*
 * Refuses a function name with a control byte (queue_name_bad_byte) with an
 * ERROR, through the store's answer order when durable; true if it is fine.
 */
static bool
name_ok(struct conn *c, const struct packet *p, bool durable)
{
    ptrdiff_t at = queue_name_bad_byte(ARG(p, 0), p->arg_len[0]);
    char text[160];

    if (at < 0)
        return true;
    snprintf(text, sizeof(text), "%s: function name has a control byte (0x%02x at offset %td)",
             packet_name(p->type), p->arg[0][at], at);
    log_notice(&c->srv->log, "%s: %s", c->peer, text);
    if (durable)
        durable_refuse(c->srv, c, "INVALID_ARGUMENT", text);
    else
        conn_send_error(c, "INVALID_ARGUMENT", "%s", text);
    return false;
}

static struct func *
func_arg(struct conn *c, const struct packet *p)
{
    struct func *f = queue_func(&c->srv->queue, ARG(p, 0), p->arg_len[0], true);

    if (f == NULL)
        conn_send_error(c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
    return f;
}

static void
can_do(struct conn *c, struct func *f, uint32_t timeout_ms)
{
    if (queue_can_do(&c->srv->queue, &c->worker, f, timeout_ms) < 0) {
        conn_send_error(c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    /* A sleeping worker that learns a new function may have work right away. */
    if (c->worker.asleep && queue_has_work(&c->srv->queue, &c->worker)) {
        queue_awake(&c->worker);
        conn_send(c, PACKET_NOOP, 0, NULL, NULL);
    }
    storage_want_lease(c->srv); /* a shared store may hold its jobs */
}

static void
h_can_do(struct conn *c, const struct packet *p)
{
    struct func *f;

    if (!name_ok(c, p, false))
        return;
    f = func_arg(c, p);
    if (f != NULL)
        can_do(c, f, 0);
}

static void
h_can_do_timeout(struct conn *c, const struct packet *p)
{
    struct func *f;
    uint64_t ms;

    if (decimal_parse(p->arg[1], p->arg_len[1], UINT32_MAX, &ms) < 0) {
        conn_send_error(c, "INVALID_ARGUMENT", "CAN_DO_TIMEOUT: bad timeout '%.*s'",
                        (int)(p->arg_len[1] > 32 ? 32 : p->arg_len[1]), ARG(p, 1));
        return;
    }
    /* gearmand 1.1.20 reads milliseconds and raises 1-999 to a second. */
    if (ms > 0 && ms < 1000)
        ms = 1000;
    if (!name_ok(c, p, false))
        return;
    f = func_arg(c, p);
    if (f != NULL)
        can_do(c, f, (uint32_t)ms);
}

static void
h_cant_do(struct conn *c, const struct packet *p)
{
    struct func *f = queue_func(&c->srv->queue, ARG(p, 0), p->arg_len[0], false);

    if (f == NULL)
        return;
    queue_cant_do(&c->srv->queue, &c->worker, f);
    lifecycle_give_back(c, f, "its worker sent CANT_DO");
}

static void
h_reset_abilities(struct conn *c, const struct packet *p)
{
    (void)p;
    queue_reset_abilities(&c->srv->queue, &c->worker);
    lifecycle_give_back(c, NULL, "its worker sent RESET_ABILITIES");
}

static void
h_pre_sleep(struct conn *c, const struct packet *p)
{
    (void)p;
    /* Held (durable_held): out of reach of wake-ups until its last end commits, then asleep. */
    if (durable_held(c)) {
        c->hold_slept = true;
        return;
    }
    lifecycle_pre_sleep(c);
}

static void
grab(struct conn *c, enum packet_type assign)
{
    struct srv *srv = c->srv;
    struct ability *a;
    struct job *j;

    queue_awake(&c->worker);
    c->hold_slept = false;
    /*
     * Its last end is not durable yet: no job until it is, but an answer
     * now, as gearmand answers at once (durable_held); a NOOP follows at the
     * commit if it sleeps then and there is work.
     */
    if (durable_held(c)) {
        conn_send(c, PACKET_NO_JOB, 0, NULL, NULL);
        return;
    }
    /* A job past its deadline is never handed out, even before the tick ends it. */
    if (srv->queue.expiring.len > 0)
        lifecycle_expire_jobs(srv, clock_now_ms());
    /* No stored job from a queue whose leases may have run out (another server may have run it). */
    j = srv->draining ? NULL
                      : storage_lease_grab(srv, &c->worker, srv->queue.aging ? clock_now() : 0);
    if (srv->storage.shared)
        storage_want_lease(srv); /* refill what it took, or find some */
    if (j == NULL) {
        if (!TAILQ_EMPTY(&srv->queue.flows))
            flow_ctl_held(srv, &c->worker);
        conn_send(c, PACKET_NO_JOB, 0, NULL, NULL);
        return;
    }
    stats_grabbed(srv, j);
    if (j->ext->deadline_started) {
        /* Its row's deadline goes with the next commit: a crash then runs it again. */
        j->ext->deadline_started = false;
        storage_update(srv, j);
    }
    a = queue_ability_of(&c->worker, j->func);
    if (a != NULL && a->timeout_ms > 0)
        lifecycle_arm_timeout(srv, j, a->timeout_ms); /* queue_grab gave j its job_ext */
    else if (srv->cfg.job_timeout > 0)
        lifecycle_arm_silence(srv, j);
    /* GRAB_JOB_ALL sends the reducer only for a job that has one, as gearmand does. */
    if (assign == PACKET_JOB_ASSIGN_ALL && j->reducer_len == 0)
        assign = PACKET_JOB_ASSIGN_UNIQ;
    {
        const void *args[5];
        size_t lens[5];
        unsigned n = 0;

        args[n] = job_handle(j), lens[n++] = j->handle_len;
        args[n] = j->func->name, lens[n++] = j->func->name_len;
        if (assign != PACKET_JOB_ASSIGN)
            args[n] = job_unique(j), lens[n++] = j->unique_len;
        if (assign == PACKET_JOB_ASSIGN_ALL)
            args[n] = job_reducer(j), lens[n++] = j->reducer_len;
        args[n] = job_data(j), lens[n++] = j->data_len;
        conn_send(c, assign, n, args, lens);
    }
    LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "assigned", c->peer, j, NULL);
}

static void
h_grab_job(struct conn *c, const struct packet *p)
{
    (void)p;
    grab(c, PACKET_JOB_ASSIGN);
}

static void
h_grab_job_uniq(struct conn *c, const struct packet *p)
{
    (void)p;
    grab(c, PACKET_JOB_ASSIGN_UNIQ);
}

static void
h_grab_job_all(struct conn *c, const struct packet *p)
{
    (void)p;
    grab(c, PACKET_JOB_ASSIGN_ALL);
}

/* --- submitting ----------------------------------------------------------- */

struct submit {
    enum job_prio prio;  /* priority */
    bool background;     /* no client waits */
    int64_t when;        /* epoch seconds, 0 for now */
    const char *reducer; /* SUBMIT_REDUCE_JOB reducer, or NULL */
    size_t reducer_len;  /* its length */
};

/*
 * refuse answers the submit p with an ERROR of code, and logs a refused
 * job event. A durable submitter may be owed JOB_CREATEDs still waiting
 * for their commit: the ERROR goes behind them (durable_refuse), so the
 * client can tell which submit it answers.
 */
static void __attribute__((format(printf, 5, 6)))
refuse(struct conn *c, const struct packet *p, bool durable, const char *code, const char *fmt, ...)
{
    char text[300];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (LOG_ON(&c->srv->log, DSJOB_LOG_NOTICE)) {
        char why[340];

        snprintf(why, sizeof(why), "%s: %s", code, text);
        log_job(&c->srv->log, DSJOB_LOG_NOTICE, "refused", c->peer, NULL, ARG(p, 0), p->arg_len[0],
                why);
    }
    if (durable)
        durable_refuse(c->srv, c, code, text);
    else
        conn_send_error(c, code, "%s", text);
}

/*
 * The time a new job j of f must start by, in epoch ms: the earlier of
 * its submitter's (OPTION_REQ expire-in or deadline) and its function's
 * maximum queue age (admin "maxage", else --max-queue-age), counted from
 * its run-at time if that is later. 0, or -1 if out of memory.
 */
static int
set_deadline(const struct conn *c, const struct func *f, struct job *j)
{
    uint32_t max_age = f->max_age ? f->max_age : c->srv->cfg.max_queue_age;
    int64_t now_ms, dl = c->deadline_ms;

    if (dl == 0 && c->expire_in_ms == 0 && max_age == 0)
        return 0;
    now_ms = clock_now_ms();
    if (dl == 0 && c->expire_in_ms > 0)
        dl = now_ms + c->expire_in_ms;
    if (max_age > 0) {
        int64_t from = job_when(j) * 1000 > now_ms ? job_when(j) * 1000 : now_ms;
        int64_t by = from + (int64_t)max_age * 1000;

        if (dl == 0 || by < dl)
            dl = by;
    }
    if (job_ext(j) == NULL)
        return -1;
    j->ext->deadline_ms = dl;
    return 0;
}

/*
 * The job of f with this unique key that ended (kept, or settling to be
 * kept) less than its key's window ago (--unique-for), or NULL.
 */
static struct job *
ended_in_window(struct srv *srv, struct func *f, const char *unique, size_t len)
{
    struct job *j = queue_find_settling(f, unique, len);
    uint32_t window;

    if (j == NULL || j->ext == NULL || j->ext->settle_to != JOB_SETTLE_DONE)
        j = queue_find_kept(f, unique, len);
    if (j == NULL || (window = lifecycle_unique_window(srv, j)) == 0)
        return NULL;
    return j->ext->last_fail + (int64_t)window > clock_now() ? j : NULL;
}

/*
 * A submit within the window of an ended job j's unique key gets j's
 * handle, and a foreground one its outcome as if it had waited: the
 * result, or WORK_FAIL (WORK_EXCEPTION if it asked for exceptions).
 */
static void
answer_ended(struct conn *c, struct job *j, const struct submit *s, bool durable)
{
    const void *args[2] = {job_handle(j), j->ext->result};
    size_t lens[2] = {j->handle_len, j->ext->result_len};

    LIFECYCLE_LOG(c->srv, DSJOB_LOG_INFO, "coalesced", c->peer, j,
                  "its unique key is held after its end (--unique-for)");
    if (durable) {
        durable_submit(c->srv, c, j, true); /* answered in order, after the commit */
        return;
    }
    conn_send_raw(c, PACKET_JOB_CREATED, job_handle(j), j->handle_len);
    if (s->background)
        return;
    switch ((enum job_outcome)j->ext->outcome) {
    case JOB_OUTCOME_COMPLETE: conn_send(c, PACKET_WORK_COMPLETE, 2, args, lens); break;
    case JOB_OUTCOME_EXCEPTION:
        if (c->exceptions) {
            conn_send(c, PACKET_WORK_EXCEPTION, 2, args, lens);
            break;
        }
        /* fall through */
    default: conn_send(c, PACKET_WORK_FAIL, 1, args, lens); break;
    }
}

static void
submit_one(struct conn *c, const struct packet *p, const struct submit *s)
{
    struct srv *srv = c->srv;
    const char *unique = ARG(p, 1);
    size_t unique_len = p->arg_len[1];
    bool by_data = unique_len == 1 && unique[0] == '-';
    const unsigned char *data = p->arg[p->nargs - 1];
    size_t data_len = p->arg_len[p->nargs - 1];
    char handle[JOB_HANDLE_MAX + 24];
    struct deps_child *after = NULL;
    struct func *f;
    struct job *j;
    bool durable;
    int n;

    durable = s->background && srv->storage.durable;
    if (p->arg_len[0] == 0) {
        refuse(c, p, durable, "INVALID_ARGUMENT", "%s: empty function name", packet_name(p->type));
        return;
    }
    if (!name_ok(c, p, durable))
        return;
    if (unique_len > srv->cfg.max_unique_size) {
        refuse(c, p, durable, "ARGUMENT_TOO_LARGE",
               "%s: a unique key of %zu bytes is over --max-unique-size (%zu)",
               packet_name(p->type), unique_len, srv->cfg.max_unique_size);
        return;
    }
    /*
     * --reject-no-worker or OPTION_REQ reject-no-worker: nobody could do it,
     * so say so now rather than let the client wait. Before the unique key
     * coalesces (the job it would join has nobody to do it either) and
     * before anything is stored; the function is not made for it.
     */
    if (c->reject_no_worker) {
        f = queue_func(&srv->queue, ARG(p, 0), p->arg_len[0], false);
        if (f == NULL || f->nworkers == 0) {
            srv->stats.limits[STATS_LIMIT_REJECT_NO_WORKER]++;
            refuse(c, p, durable, "NO_WORKER", "no worker can do %.*s",
                   (int)(p->arg_len[0] > 200 ? 200 : p->arg_len[0]), ARG(p, 0));
            return;
        }
    }
    f = func_arg(c, p);
    if (f == NULL)
        return;
    /*
     * gearmand's rule: unique "-" means "coalesce on the payload". The job
     * keeps "-" as its unique (workers see "-"); the index uses the payload,
     * in a key space apart from explicit keys.
     */
    if (unique_len > 0 && (j = by_data ? queue_find_payload(f, data, data_len)
                                       : queue_find_unique(f, unique, unique_len)) != NULL) {
        /*
         * A background submit onto a live foreground job: the job becomes
         * background, so that it runs even if its foreground clients all
         * leave, and on a durable store it is stored before the answer.
         * (gearmand 1.1.20 acknowledges it and drops it with its clients.)
         */
        if (s->background && !j->background &&
            (j->state == JOB_QUEUED || j->state == JOB_RUNNING || j->state == JOB_SCHEDULED)) {
            if (durable) {
                durable_adopt(srv, c, j);
                return;
            }
            j->background = true;
        }
        if (durable) {
            durable_submit(srv, c, j, true); /* answered in order, after the commit */
            return;
        }
        if (!s->background && lifecycle_attach(c, j) < 0) {
            conn_send_error(c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
            return;
        }
        conn_send_raw(c, PACKET_JOB_CREATED, job_handle(j), j->handle_len);
        return;
    }
    if (unique_len > 0 && !by_data && (j = ended_in_window(srv, f, unique, unique_len)) != NULL) {
        answer_ended(c, j, s, durable);
        return;
    }
    /* OPTION_REQ after=: the jobs this one waits for (a submit that coalesced waits for none). */
    if (c->after != NULL) {
        char why[300];

        if (deps_prepare(srv, c, &after, why, sizeof(why)) < 0) {
            refuse(c, p, durable, "DEPENDENCY", "%s", why);
            return;
        }
        if (after != NULL && !s->background && storage_deps_shared(srv)) {
            deps_discard(after);
            refuse(c, p, durable, "DEPENDENCY",
                   "after: on store %s only a background job can wait for others",
                   srv->storage.ops->name);
            return;
        }
    }
    if (queue_full(f, s->prio)) {
        srv->stats.limits[STATS_LIMIT_MAX_QUEUE]++;
        deps_discard(after);
        refuse(c, p, durable, "QUEUE_ERROR",
               "Job queue is full: function '%s' is at its maxqueue limit of %u jobs", f->name,
               f->max_queue[s->prio]);
        return;
    }
    if (srv->cfg.max_jobs > 0 && queue_live(&srv->queue) >= srv->cfg.max_jobs) {
        srv->stats.limits[STATS_LIMIT_MAX_JOBS]++;
        deps_discard(after);
        refuse(c, p, durable, "QUEUE_ERROR",
               "Server is full: it holds %zu jobs, its --max-jobs limit", queue_live(&srv->queue));
        return;
    }
    /*
     * A store that keeps no deadline (memcached) would lose it at a
     * restart: a stored job with its submitter's deadline is refused,
     * naming the option (a foreground job, never stored, keeps it).
     */
    if (durable && (c->deadline_ms != 0 || c->expire_in_ms != 0) &&
        strcmp(srv->storage.ops->name, "memcached") == 0) {
        refuse(c, p, durable, "INVALID_ARGUMENT", "option '%s': the %s store keeps no deadline",
               c->deadline_ms != 0 ? "deadline" : "expire-in", srv->storage.ops->name);
        return;
    }
    n = job_handle_format(handle, sizeof(handle), srv->handle_prefix, srv->next_job_id);
    j = job_new(handle, (size_t)n, unique, unique_len, s->reducer, s->reducer_len, data, data_len);
    if (j == NULL) {
        deps_discard(after);
        refuse(c, p, durable, "MEMORY_ALLOCATION_FAILURE", "out of memory for a job of %zu bytes",
               data_len);
        return;
    }
    j->prio = (uint8_t)s->prio;
    j->unique_is_data = by_data;
    j->background = s->background;
    if (job_set_when(j, s->when) < 0) {
        job_unref(j);
        deps_discard(after);
        refuse(c, p, durable, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    if (set_deadline(c, f, j) < 0) {
        job_unref(j);
        deps_discard(after);
        refuse(c, p, durable, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    if (s->background && c->batch != NULL) {
        const char *code;
        char why[200];

        /* Before the job's add: the batch's row and the member go in one commit. */
        if (batch_join(srv, c->batch, strlen(c->batch), j, &code, why, sizeof(why)) < 0) {
            job_unref(j);
            deps_discard(after);
            refuse(c, p, durable, code, "%s", why);
            return;
        }
    }
    j->id = srv->next_job_id;
    j->seq = srv->next_seq++;
    j->func = f;
    f->stats.submitted++;
    stats_queued(srv, j);
    if (durable) {
        job_ref(j);
        /*
         * Its edges go in the batch after its add, and in the same commit:
         * a full batch handed over between the two would store a child
         * that, after a crash, waits for nothing. A refused one waits for
         * nothing.
         */
        storage_hold(srv);
        if (after != NULL && storage_deps_shared(srv))
            j->held = true; /* not leased here: the store holds it for every server */
        durable_submit(srv, c, j, false);
        if (after != NULL && j->state == JOB_PENDING)
            deps_attach(srv, after, j);
        else
            deps_discard(after);
        storage_release(srv);
        job_unref(j);
        return;
    }
    if (queue_add_as(&srv->queue, f, j, clock_now(), after != NULL) < 0) {
        deps_discard(after);
        job_unref(j);
        conn_send_error(c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    if (after != NULL)
        deps_attach(srv, after, j);
    srv->next_job_id++;
    if (!s->background && lifecycle_attach(c, j) < 0) {
        deps_ended(srv, j, JOB_OUTCOME_NONE); /* out of the graph, if it was held */
        queue_remove(&srv->queue, j);
        conn_send_error(c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    conn_send_raw(c, PACKET_JOB_CREATED, job_handle(j), j->handle_len);
    LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", c->peer, j,
                  j->held ? "held: it waits for other jobs" : NULL);
    if (j->held)
        return;
    if (j->state == JOB_SCHEDULED)
        srv_epoch_arm(srv);
    else
        lifecycle_wake(j);
}

/*
 * A submit. OPTION_REQ after= and after-fail= are for the next submit
 * alone, whatever becomes of it (refused, coalesced, made).
 */
static void
submit(struct conn *c, const struct packet *p, const struct submit *s)
{
    submit_one(c, p, s);
    free(c->after);
    c->after = NULL;
    c->after_len = 0;
    c->after_fail = DEPS_FAIL;
}

static void
h_submit(struct conn *c, const struct packet *p)
{
    struct submit s = {JOB_PRIO_NORMAL, false, 0, NULL, 0};

    switch (p->type) {
    case PACKET_SUBMIT_JOB_HIGH_BG: s.background = true; /* fall through */
    case PACKET_SUBMIT_JOB_HIGH: s.prio = JOB_PRIO_HIGH; break;
    case PACKET_SUBMIT_JOB_LOW_BG: s.background = true; /* fall through */
    case PACKET_SUBMIT_JOB_LOW: s.prio = JOB_PRIO_LOW; break;
    case PACKET_SUBMIT_JOB_BG: s.background = true; break;
    default: break;
    }
    submit(c, p, &s);
}

static void
h_submit_epoch(struct conn *c, const struct packet *p)
{
    struct submit s = {JOB_PRIO_NORMAL, true, 0, NULL, 0};
    uint64_t when;

    if (decimal_parse(p->arg[2], p->arg_len[2], INT64_MAX, &when) < 0) {
        conn_send_error(c, "INVALID_ARGUMENT", "SUBMIT_JOB_EPOCH: bad epoch time '%.*s'",
                        (int)(p->arg_len[2] > 32 ? 32 : p->arg_len[2]), ARG(p, 2));
        return;
    }
    s.when = (int64_t)when;
    submit(c, p, &s);
}

static void
h_submit_reduce(struct conn *c, const struct packet *p)
{
    struct submit s = {JOB_PRIO_NORMAL, p->type == PACKET_SUBMIT_REDUCE_JOB_BACKGROUND, 0,
                       ARG(p, 2), p->arg_len[2]};

    submit(c, p, &s);
}

static void
h_submit_sched(struct conn *c, const struct packet *p)
{
    (void)p;
    conn_send_error(c, "INVALID_COMMAND",
                    "Command not expected: SUBMIT_JOB_SCHED is not supported");
}

/* --- reports from workers ------------------------------------------------- */

/* The job named by the first argument, if c is running it; else an ERROR. */
static struct job *
held_job(struct conn *c, const struct packet *p)
{
    struct job *j = queue_find_job(&c->srv->queue, ARG(p, 0), p->arg_len[0]);
    const char *text;

    if (j != NULL && j->state == JOB_RUNNING && j->ext->worker == &c->worker) {
        lifecycle_heard(c->srv, j);
        return j;
    }
    log_notice(&c->srv->log, "%s: %s for a job it does not hold: %.*s", c->peer,
               packet_name(p->type), (int)(p->arg_len[0] > 64 ? 64 : p->arg_len[0]), ARG(p, 0));
    /* gearmand's texts, which clients may show or match. */
    switch (p->type) {
    case PACKET_WORK_DATA:
    case PACKET_WORK_WARNING: text = "Job does not exist on server"; break;
    case PACKET_WORK_EXCEPTION:
        text = "An exception was received for a job that does not exist";
        break;
    default: text = "Job given in work result not found"; break;
    }
    conn_send_error(c, "JOB_NOT_FOUND", "%s", text);
    return NULL;
}

static void
forward(struct job *j, const struct packet *p)
{
    const void *args[PACKET_MAX_ARGS];
    unsigned i;

    for (i = 0; i < p->nargs; i++)
        args[i] = p->arg[i];
    lifecycle_tell(j, (enum packet_type)p->type, p->nargs, args, p->arg_len);
}

static void
h_work_status(struct conn *c, const struct packet *p)
{
    struct job *j = held_job(c, p);

    if (j == NULL)
        return;
    /* Forwarded verbatim; GET_STATUS reports them as gearmand's atoi reads them. */
    j->ext->numerator = (uint32_t)decimal_atoi(p->arg[1], p->arg_len[1], UINT32_MAX);
    j->ext->denominator = (uint32_t)decimal_atoi(p->arg[2], p->arg_len[2], UINT32_MAX);
    forward(j, p);
}

static void
h_work_data(struct conn *c, const struct packet *p)
{
    struct job *j = held_job(c, p);

    if (j == NULL)
        return;
    forward(j, p);
    if (p->type == PACKET_WORK_WARNING)
        lifecycle_warned(c->srv, j, p->arg[1], p->arg_len[1]);
}

static void
h_work_done(struct conn *c, const struct packet *p)
{
    struct job *j = held_job(c, p);

    if (j == NULL)
        return;
    lifecycle_work_done(c->srv, j, (enum packet_type)p->type, p->nargs > 1 ? p->arg[1] : NULL,
                        p->nargs > 1 ? p->arg_len[1] : 0);
}

static void
h_work_exception(struct conn *c, const struct packet *p)
{
    struct job *j = held_job(c, p);

    if (j != NULL)
        lifecycle_exception(c->srv, j, p->arg[1], p->arg_len[1]);
}

/* --- status and odds and ends --------------------------------------------- */

static void
h_get_status(struct conn *c, const struct packet *p)
{
    struct job *j = queue_find_job(&c->srv->queue, ARG(p, 0), p->arg_len[0]);
    char num[16], den[16];
    const void *args[5];
    size_t lens[5];
    bool known = j != NULL;
    /* A SETTLING job is done but not yet durably gone: still running, as far as anyone can tell. */
    bool running = known && (j->state == JOB_RUNNING || j->state == JOB_SETTLING);

    snprintf(num, sizeof(num), "%" PRIu32, known && j->ext ? j->ext->numerator : 0);
    snprintf(den, sizeof(den), "%" PRIu32, known && j->ext ? j->ext->denominator : 0);
    args[0] = p->arg[0], lens[0] = p->arg_len[0];
    args[1] = known ? "1" : "0", lens[1] = 1;
    args[2] = running ? "1" : "0", lens[2] = 1;
    args[3] = num, lens[3] = strlen(num);
    args[4] = den, lens[4] = strlen(den);
    conn_send(c, PACKET_STATUS_RES, 5, args, lens);
}

static void
h_get_status_unique(struct conn *c, const struct packet *p)
{
    struct job *j = NULL;
    struct func *f;
    char num[16], den[16], waiting[16];
    const void *args[6];
    size_t lens[6];
    bool running;

    TAILQ_FOREACH (f, &c->srv->queue.func_order, order)
        if ((j = queue_find_unique(f, p->arg[0], p->arg_len[0])) != NULL ||
            (j = queue_find_settling(f, p->arg[0], p->arg_len[0])) != NULL ||
            (j = queue_find_kept(f, p->arg[0], p->arg_len[0])) != NULL) /* --keep-results */
            break;
    running = j != NULL && (j->state == JOB_RUNNING || j->state == JOB_SETTLING);
    snprintf(num, sizeof(num), "%" PRIu32, j && j->ext ? j->ext->numerator : 0);
    snprintf(den, sizeof(den), "%" PRIu32, j && j->ext ? j->ext->denominator : 0);
    snprintf(waiting, sizeof(waiting), "%u", j ? job_nwaiters(j) : 0);
    args[0] = p->arg[0], lens[0] = p->arg_len[0];
    args[1] = j ? "1" : "0", lens[1] = 1;
    args[2] = running ? "1" : "0", lens[2] = 1;
    args[3] = num, lens[3] = strlen(num);
    args[4] = den, lens[4] = strlen(den);
    args[5] = waiting, lens[5] = strlen(waiting);
    conn_send(c, PACKET_STATUS_RES_UNIQUE, 6, args, lens);
}

static void
h_echo(struct conn *c, const struct packet *p)
{
    conn_send_raw(c, PACKET_ECHO_RES, p->arg[0], p->arg_len[0]);
}

static void
h_set_client_id(struct conn *c, const struct packet *p)
{
    char *id = malloc(p->arg_len[0] + 1);
    size_t i;

    if (id == NULL) {
        conn_send_error(c, "MEMORY_ALLOCATION_FAILURE", "out of memory");
        return;
    }
    /* Keep the id printable: it is shown one per line by the workers command. */
    for (i = 0; i < p->arg_len[0]; i++)
        id[i] = (p->arg[0][i] < 0x21 || p->arg[0][i] > 0x7e) ? '_' : (char)p->arg[0][i];
    id[p->arg_len[0]] = '\0';
    free(c->client_id);
    c->client_id = id;
}

static bool
option_is(const struct packet *p, const char *name)
{
    return p->arg_len[0] == strlen(name) && memcmp(p->arg[0], name, p->arg_len[0]) == 0;
}

/*
 * An OPTION_REQ of the form NAME=VALUE: true, with VALUE (seconds with up
 * to three decimals, at most max seconds) in *ms, if p is one for name.
 */
static bool
option_ms(const struct packet *p, const char *name, uint64_t max, int64_t *ms)
{
    size_t n = strlen(name), i, dot;
    const char *v = ARG(p, 0) + n + 1;
    size_t len = p->arg_len[0] > n ? p->arg_len[0] - n - 1 : 0;
    uint64_t whole, frac = 0, scale = 1000;

    if (p->arg_len[0] <= n + 1 || memcmp(p->arg[0], name, n) != 0 || p->arg[0][n] != '=')
        return false;
    dot = 0;
    while (dot < len && v[dot] != '.')
        dot++;
    if (decimal_parse(v, dot, max, &whole) != 0)
        return false;
    for (i = dot + 1; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        if (scale > 1)
            frac += (uint64_t)(v[i] - '0') * (scale /= 10);
    }
    *ms = (int64_t)(whole * 1000 + frac);
    return true;
}

/*
 * OPTION_REQ: gearmand's exceptions; reject-no-worker; expire-in=SECONDS
 * and deadline=EPOCH (0 clears), which give the connection's later
 * submits a time to start by; after=H1,H2,... and after-fail=POLICY, for
 * its next submit (deps.c); batch=ID (empty clears), which makes its later
 * background submits of new jobs join that open batch (batch.c). Any other
 * name, or a bad after-fail, gets ERROR, as gearmand's.
 */
static void
h_option_req(struct conn *c, const struct packet *p)
{
    bool known = true;
    int64_t ms;
    int rc;

    if (option_is(p, "exceptions"))
        c->exceptions = true;
    else if (option_is(p, "reject-no-worker"))
        c->reject_no_worker = true;
    else if (option_ms(p, "expire-in", 86400u * 3650, &ms))
        c->expire_in_ms = ms, c->deadline_ms = 0;
    else if (option_ms(p, "deadline", INT64_MAX / 1000 - 1, &ms))
        c->deadline_ms = ms, c->expire_in_ms = 0;
    else if ((rc = deps_option(c, ARG(p, 0), p->arg_len[0])) != 0)
        known = rc > 0;
    else if (p->arg_len[0] >= 6 && memcmp(p->arg[0], "batch=", 6) == 0) {
        char why[200];

        if (batch_option(c, ARG(p, 0) + 6, p->arg_len[0] - 6, why, sizeof(why)) < 0) {
            conn_send_error(c, "INVALID_ARGUMENT", "%s", why);
            return;
        }
    } else
        known = false;
    if (known) {
        conn_send_raw(c, PACKET_OPTION_RES, p->arg[0], p->arg_len[0]);
        return;
    }
    conn_send_error(c, "UNKNOWN_OPTION", "Server does not recognize given option '%.*s'",
                    (int)(p->arg_len[0] > 64 ? 64 : p->arg_len[0]), ARG(p, 0));
}

static void
h_ignore(struct conn *c, const struct packet *p)
{
    (void)c;
    (void)p;
}

static const struct dispatch_entry dispatch_table[PACKET_TYPE_COUNT] = {
    [PACKET_CAN_DO] = {h_can_do},
    [PACKET_CANT_DO] = {h_cant_do},
    [PACKET_RESET_ABILITIES] = {h_reset_abilities},
    [PACKET_PRE_SLEEP] = {h_pre_sleep},
    [PACKET_SUBMIT_JOB] = {h_submit},
    [PACKET_GRAB_JOB] = {h_grab_job},
    [PACKET_WORK_STATUS] = {h_work_status},
    [PACKET_WORK_COMPLETE] = {h_work_done},
    [PACKET_WORK_FAIL] = {h_work_done},
    [PACKET_GET_STATUS] = {h_get_status},
    [PACKET_ECHO_REQ] = {h_echo},
    [PACKET_SUBMIT_JOB_BG] = {h_submit},
    [PACKET_SUBMIT_JOB_HIGH] = {h_submit},
    [PACKET_SET_CLIENT_ID] = {h_set_client_id},
    [PACKET_CAN_DO_TIMEOUT] = {h_can_do_timeout},
    [PACKET_ALL_YOURS] = {h_ignore},
    [PACKET_WORK_EXCEPTION] = {h_work_exception},
    [PACKET_OPTION_REQ] = {h_option_req},
    [PACKET_WORK_DATA] = {h_work_data},
    [PACKET_WORK_WARNING] = {h_work_data},
    [PACKET_GRAB_JOB_UNIQ] = {h_grab_job_uniq},
    [PACKET_SUBMIT_JOB_HIGH_BG] = {h_submit},
    [PACKET_SUBMIT_JOB_LOW] = {h_submit},
    [PACKET_SUBMIT_JOB_LOW_BG] = {h_submit},
    [PACKET_SUBMIT_JOB_SCHED] = {h_submit_sched},
    [PACKET_SUBMIT_JOB_EPOCH] = {h_submit_epoch},
    [PACKET_SUBMIT_REDUCE_JOB] = {h_submit_reduce},
    [PACKET_SUBMIT_REDUCE_JOB_BACKGROUND] = {h_submit_reduce},
    [PACKET_GRAB_JOB_ALL] = {h_grab_job_all},
    [PACKET_GET_STATUS_UNIQUE] = {h_get_status_unique},
};

void
dispatch_packet(struct conn *c, const struct packet *p)
{
    const struct dispatch_entry *e = p->type < PACKET_TYPE_COUNT ? &dispatch_table[p->type] : NULL;

    if (p->magic != PACKET_REQ) {
        log_notice(&c->srv->log, "%s: %s packet with response magic", c->peer,
                   packet_name(p->type));
        conn_send_error(c, "INVALID_MAGIC", "Request magic expected");
        return;
    }
    if (e == NULL || e->fn == NULL) {
        log_notice(&c->srv->log, "%s: unexpected packet type %" PRIu32 " (%s)", c->peer, p->type,
                   packet_name(p->type));
        conn_send_error(c, "INVALID_COMMAND",
                        "Command not expected: packet type %" PRIu32 " (%s) is not a request",
                        p->type, packet_name(p->type));
        return;
    }
    e->fn(c, p);
}
