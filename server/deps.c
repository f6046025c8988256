/*
 * Dependencies: a child job waits, held, until its parents have
 * succeeded. The graph is two hash tables: children by handle (each with
 * the parents it still waits for and its policy) and parents by handle
 * (each with the children waiting for it). A parent's end is written to
 * the store (STORE_DEP_ENDED) in the batch of the parent's own end, and
 * its children move only in that op's continuation, so no child starts
 * before the end that releases it is durable, and a crash between the two
 * finds the edge's new state at replay. Without a store the children move
 * at once. A child's edges go (STORE_DEP_FORGET) when it is released or
 * ends. Jobs are named by handle only, so a parent may be any job, on
 * this server, live or kept (--keep-results).
 */
#include "config.h"
#include "deps.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "conn.h"
#include "durable.h"
#include "hmap.h"
#include "lifecycle.h"
#include "queue.h"
#include "srv.h"
#include "storage.h"

/* One parent a child waits for. */
struct deps_link {
    char *handle;  /* owned, NUL-terminated */
    size_t len;    /* bytes of handle */
    uint8_t state; /* enum store_dep_state: WAITING until its end (committed) */
};

struct deps_child {
    struct hnode node;       /* in deps.children, by handle */
    struct job *job;         /* referenced; NULL while a replay has not found it */
    char *handle;            /* owned: the child's handle (a replayed edge's, before its job) */
    size_t handle_len;       /* bytes of handle */
    int policy;              /* enum deps_policy */
    bool committed;          /* its add committed (or it is not stored): release queues it */
    bool stored;             /* its edges are in the store */
    unsigned waiting;        /* links still waiting */
    unsigned nlinks;         /* entries in links */
    unsigned cap;            /* room in links */
    struct deps_link *links; /* owned: the parents */
};

struct deps_parent {
    struct hnode node; /* in deps.parents, by handle */
    struct job **kids; /* owned array of referenced jobs waiting for it */
    unsigned nkids;    /* entries in kids */
    unsigned cap;      /* room in kids */
    bool ending;       /* its end is committing */
    bool ok;           /* ...and it succeeded */
    size_t len;        /* bytes of handle */
    char handle[];     /* NUL-terminated */
};

struct deps {
    struct hmap children; /* struct deps_child by handle */
    struct hmap parents;  /* struct deps_parent by handle */
};

static const char *const policy_names[] = {"fail", "cancel", "run"};

const char *
deps_policy_name(int policy)
{
    return policy >= DEPS_FAIL && policy <= DEPS_RUN ? policy_names[policy] : "fail";
}

int
deps_policy_named(const char *name, size_t len)
{
    int p;

    for (p = DEPS_FAIL; p <= DEPS_RUN; p++)
        if (len == strlen(policy_names[p]) && memcmp(name, policy_names[p], len) == 0)
            return p;
    return -1;
}

static const void *
child_key(const struct hnode *n)
{
    return ((const struct deps_child *)n)->handle;
}

static const void *
parent_key(const struct hnode *n)
{
    return ((const struct deps_parent *)n)->handle;
}

/* srv's graph, made the first time; NULL if out of memory. */
static struct deps *
graph(struct srv *srv)
{
    if (srv->deps == NULL) {
        srv->deps = calloc(1, sizeof(*srv->deps));
        if (srv->deps == NULL)
            return NULL;
        hmap_init(&srv->deps->children, child_key);
        hmap_init(&srv->deps->parents, parent_key);
    }
    return srv->deps;
}

static struct deps_child *
find_child(const struct srv *srv, const char *handle, size_t len)
{
    return srv->deps ? (struct deps_child *)hmap_find(&srv->deps->children, handle, len) : NULL;
}

static struct deps_parent *
find_parent(const struct srv *srv, const char *handle, size_t len)
{
    return srv->deps ? (struct deps_parent *)hmap_find(&srv->deps->parents, handle, len) : NULL;
}

int
deps_option(struct conn *c, const char *opt, size_t len)
{
    int policy;

    if (len >= 6 && memcmp(opt, "after=", 6) == 0) {
        char *list = NULL;

        if (len > 6) {
            list = malloc(len - 6 + 1);
            if (list == NULL)
                return -1;
            memcpy(list, opt + 6, len - 6);
            list[len - 6] = '\0';
        }
        free(c->after);
        c->after = list;
        c->after_len = len > 6 ? len - 6 : 0;
        return 1;
    }
    if (len >= 11 && memcmp(opt, "after-fail=", 11) == 0) {
        policy = deps_policy_named(opt + 11, len - 11);
        if (policy < 0)
            return -1;
        c->after_fail = (uint8_t)policy;
        return 1;
    }
    return 0;
}

static struct deps_link *
add_link(struct deps_child *d, const char *handle, size_t len, int state)
{
    struct deps_link *l;
    unsigned i;

    for (i = 0; i < d->nlinks; i++)
        if (d->links[i].len == len && memcmp(d->links[i].handle, handle, len) == 0)
            return &d->links[i]; /* named twice: one edge */
    if (d->nlinks == d->cap) {
        unsigned cap = d->cap ? d->cap * 2 : 4;
        struct deps_link *links = realloc(d->links, cap * sizeof(*links));

        if (links == NULL)
            return NULL;
        d->links = links;
        d->cap = cap;
    }
    l = &d->links[d->nlinks];
    l->handle = malloc(len + 1);
    if (l->handle == NULL)
        return NULL;
    memcpy(l->handle, handle, len);
    l->handle[len] = '\0';
    l->len = len;
    l->state = (uint8_t)state;
    d->nlinks++;
    if (state == STORE_DEP_WAITING)
        d->waiting++;
    return l;
}

void
deps_discard(struct deps_child *d)
{
    unsigned i;

    if (d == NULL)
        return;
    for (i = 0; i < d->nlinks; i++)
        free(d->links[i].handle);
    free(d->links);
    free(d->handle);
    job_unref(d->job);
    free(d);
}

/*
 * How a named parent stands at a child's submit: 1 waiting (live), 0
 * succeeded, -1 failed for good, -2 unknown (why says which).
 */
static int
parent_state(struct srv *srv, const char *h, size_t len)
{
    struct deps_parent *pe = find_parent(srv, h, len);
    struct job *p = queue_find_job(&srv->queue, h, len);

    /*
     * An end that is committing counts by its outcome: that end is in a
     * batch before the child's add, so a crash cannot keep the child and
     * lose the end.
     */
    if (pe != NULL && pe->ending)
        return pe->ok ? 0 : -1;
    if (p == NULL)
        return -2;
    switch ((enum job_state)p->state) {
    case JOB_DONE: return p->ext->outcome == JOB_OUTCOME_COMPLETE && !p->cancelled ? 0 : -1;
    case JOB_DEAD: return -1;
    case JOB_SETTLING:
        if (p->ext != NULL && p->ext->settle_to != JOB_SETTLE_GONE)
            return p->ext->outcome == JOB_OUTCOME_COMPLETE && !p->cancelled ? 0 : -1;
        return -2; /* its outcome is not kept */
    default: return 1;
    }
}

static int
hexval(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* Decode n bytes of %XX escapes from in to out (room for n); its length, or -1 if malformed. */
static ptrdiff_t
unescape(const char *in, size_t n, char *out)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        if (in[i] != '%') {
            out[o++] = in[i];
            continue;
        }
        if (i + 2 >= n || hexval(in[i + 1]) < 0 || hexval(in[i + 2]) < 0)
            return -1;
        out[o++] = (char)(hexval(in[i + 1]) * 16 + hexval(in[i + 2]));
        i += 2;
    }
    return (ptrdiff_t)o;
}

/*
 * An after= entry "unique:FUNCTION:UNIQUE" (%XX escapes in both): the
 * handle of the job of that function and unique key, live, settling or
 * kept; NULL (why says so) if there is none. On a shared store a job this
 * server does not hold is looked up in the store, in the commit of the
 * child's add: the entry itself is given back, for the store to resolve.
 */
static const char *
by_unique(struct srv *srv, const char *e, size_t el, size_t *hl, char *why, size_t len)
{
    const char *colon = memchr(e + 7, ':', el - 7);
    char *buf = malloc(el);
    ptrdiff_t fl, ul;
    struct func *f;
    struct job *j = NULL;

    if (buf == NULL) {
        snprintf(why, len, "after: out of memory");
        return NULL;
    }
    if (colon == NULL || (fl = unescape(e + 7, (size_t)(colon - e - 7), buf)) <= 0 ||
        (ul = unescape(colon + 1, (size_t)(e + el - colon - 1), buf + fl)) <= 0) {
        free(buf);
        snprintf(why, len, "after: '%.*s' is not unique:FUNCTION:UNIQUE",
                 (int)(el > 100 ? 100 : el), e);
        return NULL;
    }
    f = queue_func(&srv->queue, buf, (size_t)fl, false);
    if (f != NULL && (j = queue_find_unique(f, buf + fl, (size_t)ul)) == NULL &&
        (j = queue_find_settling(f, buf + fl, (size_t)ul)) == NULL)
        j = queue_find_kept(f, buf + fl, (size_t)ul);
    free(buf);
    if (j == NULL && storage_deps_shared(srv))
        return e; /* *hl is el: the store finds it (pg's flush_deps) */
    if (j == NULL) {
        snprintf(why, len,
                 "after: no job %.*s here (not live, and no outcome kept: see --keep-results)",
                 (int)(el > 100 ? 100 : el), e);
        return NULL;
    }
    *hl = j->handle_len;
    return job_handle(j);
}

int
deps_prepare(struct srv *srv, struct conn *c, struct deps_child **out, char *why, size_t len)
{
    char *list = c->after, *h, *next;
    int policy = c->after_fail;
    struct deps_child *d = NULL;
    unsigned n = 0;
    int rc = -1;

    *out = NULL;
    c->after = NULL; /* for this submit only, accepted or not */
    c->after_len = 0;
    c->after_fail = DEPS_FAIL;
    if (list == NULL)
        return 0;
    if (srv->storage.durable && !storage_keeps_deps(srv)) {
        snprintf(why, len, "after: store %s keeps no dependencies", srv->storage.ops->name);
        goto out;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        snprintf(why, len, "after: out of memory");
        goto out;
    }
    d->policy = policy;
    for (h = list; h != NULL; h = next) {
        const char *ph = h; /* the parent's handle */
        size_t hl;
        bool by_key;
        int st;

        next = strchr(h, ',');
        hl = next ? (size_t)(next - h) : strlen(h);
        if (next != NULL)
            next++;
        by_key = hl > 7 && memcmp(h, "unique:", 7) == 0;
        if (by_key && (ph = by_unique(srv, h, hl, &hl, why, len)) == NULL)
            goto out;
        /* An entry by_unique gave back (ph == h) is a key for the store, not a handle. */
        if (hl == 0 || (hl > JOB_HANDLE_MAX && !(by_key && ph == h))) {
            snprintf(why, len, "after: an empty or overlong handle in the list");
            goto out;
        }
        if (++n > srv->cfg.max_after) {
            snprintf(why, len, "after: more than --max-after (%u) jobs", srv->cfg.max_after);
            goto out;
        }
        /* On a shared store the parents are looked up in the commit of the child's add. */
        st = storage_deps_shared(srv) ? 1 : parent_state(srv, ph, hl);
        if (st == -2) {
            snprintf(why, len,
                     "after: no job %.*s here (not live, and no outcome kept: see --keep-results)",
                     (int)(hl > 100 ? 100 : hl), ph);
            goto out;
        }
        if (st == -1 && policy != DEPS_RUN) {
            snprintf(why, len, "after: job %.*s failed (after-fail=%s)", (int)(hl > 100 ? 100 : hl),
                     ph, deps_policy_name(policy));
            goto out;
        }
        if (st == 1 && add_link(d, ph, hl, STORE_DEP_WAITING) == NULL) {
            snprintf(why, len, "after: out of memory");
            goto out;
        }
    }
    if (d->waiting > 0) {
        *out = d;
        d = NULL;
    }
    rc = 0;
out:
    deps_discard(d);
    free(list);
    return rc;
}

/* Put the ends of d's edges to j's store (an op of what): log what cannot be. */
static void
store_edge(struct srv *srv, struct deps_child *d, int what, const struct deps_link *l)
{
    struct store_dep sd = {d->handle,
                           d->handle_len,
                           l ? l->handle : "",
                           l ? l->len : 0,
                           d->policy,
                           STORE_DEP_WAITING,
                           NULL,
                           0,
                           NULL};

    if (storage_dep(srv, what, &sd, NULL) < 0)
        log_err(&srv->log, "store: out of memory to write a dependency of job %s", d->handle);
}

/* Note j (referenced) among the children of parent h; false if out of memory. */
static bool
kid_add(struct deps *g, const char *h, size_t len, struct job *j)
{
    struct deps_parent *pe = (struct deps_parent *)hmap_find(&g->parents, h, len);

    if (pe == NULL) {
        pe = calloc(1, sizeof(*pe) + len + 1);
        if (pe == NULL)
            return false;
        memcpy(pe->handle, h, len);
        pe->len = len;
        if (hmap_insert(&g->parents, &pe->node, pe->handle, len) < 0) {
            free(pe);
            return false;
        }
    }
    if (pe->nkids == pe->cap) {
        unsigned cap = pe->cap ? pe->cap * 2 : 4;
        struct job **kids = realloc(pe->kids, cap * sizeof(*kids));

        if (kids == NULL)
            return false;
        pe->kids = kids;
        pe->cap = cap;
    }
    pe->kids[pe->nkids++] = job_ref(j);
    return true;
}

static void
parent_free(struct deps *g, struct deps_parent *pe)
{
    unsigned i;

    hmap_remove(&g->parents, &pe->node);
    for (i = 0; i < pe->nkids; i++)
        job_unref(pe->kids[i]);
    free(pe->kids);
    free(pe);
}

/* Take j off parent h's list of children. */
static void
kid_remove(struct deps *g, const char *h, size_t len, const struct job *j)
{
    struct deps_parent *pe = (struct deps_parent *)hmap_find(&g->parents, h, len);
    unsigned i;

    if (pe == NULL)
        return;
    for (i = 0; i < pe->nkids; i++)
        if (pe->kids[i] == j) {
            job_unref(pe->kids[i]);
            pe->kids[i] = pe->kids[--pe->nkids];
            break;
        }
    if (pe->nkids == 0 && !pe->ending)
        parent_free(g, pe);
}

/* Link d (its job set) into the graph under its handle, and under each parent it waits for. */
static void
link_child(struct srv *srv, struct deps_child *d)
{
    struct deps *g = srv->deps;
    unsigned i;

    for (i = 0; i < d->nlinks; i++) {
        struct deps_link *l = &d->links[i];

        if (l->state == STORE_DEP_WAITING && !kid_add(g, l->handle, l->len, d->job)) {
            log_err(&srv->log, "out of memory: job %s does not wait for job %s", d->handle,
                    l->handle);
            l->state = STORE_DEP_OK;
            d->waiting--;
        }
    }
}

void
deps_attach(struct srv *srv, struct deps_child *d, struct job *j)
{
    struct deps *g = graph(srv);
    unsigned i;

    d->handle = malloc((size_t)j->handle_len + 1);
    if (g == NULL || d->handle == NULL) {
        log_err(&srv->log, "out of memory: job %s waits for nothing", job_handle(j));
        deps_discard(d);
        return;
    }
    memcpy(d->handle, job_handle(j), (size_t)j->handle_len + 1);
    d->handle_len = j->handle_len;
    if (storage_deps_shared(srv)) {
        /* Its edges, after its add: the store holds it and moves it (dsjob.ended). */
        for (i = 0; j->stored && i < d->nlinks; i++)
            store_edge(srv, d, STORE_DEP_ADD, &d->links[i]);
        j->held = false; /* its add's commit hands it to the store */
        deps_discard(d);
        return;
    }
    if (hmap_insert(&g->children, &d->node, d->handle, d->handle_len) < 0) {
        log_err(&srv->log, "out of memory: job %s waits for nothing", job_handle(j));
        deps_discard(d);
        return;
    }
    d->job = job_ref(j);
    d->committed = !j->stored;
    d->stored = j->stored && storage_keeps_deps(srv);
    j->held = true;
    queue_hold_deadline(&srv->queue, j); /* it expires held, if it has a deadline */
    link_child(srv, d);
    if (d->stored)
        for (i = 0; i < d->nlinks; i++)
            store_edge(srv, d, STORE_DEP_ADD, &d->links[i]);
}

bool
deps_committed(struct srv *srv, struct job *j)
{
    struct deps_child *d;

    if (!j->held)
        return false;
    d = find_child(srv, job_handle(j), j->handle_len);
    if (d == NULL)
        return false;
    d->committed = true;
    return true;
}

/* d's job leaves the graph (released, or ended); its stored edges go; d is freed. */
static void
child_forget(struct srv *srv, struct deps_child *d)
{
    unsigned i;

    for (i = 0; i < d->nlinks; i++)
        if (d->links[i].state == STORE_DEP_WAITING)
            kid_remove(srv->deps, d->links[i].handle, d->links[i].len, d->job);
    if (d->stored)
        store_edge(srv, d, STORE_DEP_FORGET, NULL);
    hmap_remove(&srv->deps->children, &d->node);
    if (d->job != NULL)
        d->job->held = false;
    deps_discard(d);
}

/* Every parent of d has succeeded (or did not count): its job runs. */
static void
release(struct srv *srv, struct deps_child *d)
{
    struct job *j = job_ref(d->job);
    bool committed = d->committed, all_ok = true;
    unsigned i;

    for (i = 0; i < d->nlinks; i++)
        if (d->links[i].state == STORE_DEP_FAILED)
            all_ok = false;
    child_forget(srv, d);
    if (!committed)
        return; /* its add's commit queues it */
    if (queue_commit(&srv->queue, j, clock_now()) < 0) {
        log_err(&srv->log, "out of memory to queue job %s", job_handle(j));
        lifecycle_fail(srv, j);
    } else {
        LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "released", NULL, j,
                      all_ok ? "its parents succeeded" : "its parents ended (after-fail=run)");
        if (j->state == JOB_SCHEDULED)
            srv_epoch_arm(srv);
        else
            lifecycle_wake(j);
    }
    job_unref(j);
}

/* Parent h failed for good: d's job fails, is cancelled, or stops waiting for it. */
static void
parent_failed(struct srv *srv, struct deps_child *d, const char *h)
{
    char why[JOB_HANDLE_MAX + 40];
    struct job *j = d->job;

    if (d->policy == DEPS_RUN) {
        if (--d->waiting == 0)
            release(srv, d);
        return;
    }
    snprintf(why, sizeof(why), "parent %s failed", h);
    LIFECYCLE_LOG(srv, DSJOB_LOG_NOTICE, d->policy == DEPS_CANCEL ? "cancelled" : "failed", NULL, j,
                  why);
    /* Its end (deps_ended) takes it out of the graph, and passes the failure down. */
    if (d->policy == DEPS_CANCEL)
        lifecycle_cancel(srv, j);
    else
        lifecycle_fail_as(srv, j, why);
}

/* Parent pe's end is durable (or there is no store): move its children; pe is freed. */
static void
parent_apply(struct srv *srv, struct deps_parent *pe)
{
    struct deps *g = srv->deps;
    struct job **kids = pe->kids;
    unsigned i, n = pe->nkids;
    bool ok = pe->ok;
    char *h = pe->handle;

    /* Out of the table first: the moves below may end jobs, which look for their parents. */
    hmap_remove(&g->parents, &pe->node);
    for (i = 0; i < n; i++) {
        struct job *j = kids[i];
        struct deps_child *d = j->held ? find_child(srv, job_handle(j), j->handle_len) : NULL;
        unsigned k;

        /* An earlier child's failure may have ended this one already (it had both parents). */
        for (k = 0; d != NULL && k < d->nlinks; k++) {
            struct deps_link *l = &d->links[k];

            if (l->state != STORE_DEP_WAITING || l->len != pe->len ||
                memcmp(l->handle, h, pe->len) != 0)
                continue;
            l->state = ok ? STORE_DEP_OK : STORE_DEP_FAILED;
            if (!ok)
                parent_failed(srv, d, h);
            else if (--d->waiting == 0)
                release(srv, d);
            break;
        }
        job_unref(j);
    }
    free(kids);
    free(pe);
}

/* The continuation of a parent's STORE_DEP_ENDED: it committed with the parent's end. */
static void
parent_committed(struct srv *srv, struct store_op *op, bool ok)
{
    struct deps_parent *pe = find_parent(srv, op->sd.parent, op->sd.parent_len);

    (void)ok; /* always: a failed one is tried again */
    if (pe != NULL && pe->ending)
        parent_apply(srv, pe);
}

void
deps_ended(struct srv *srv, struct job *j, enum job_outcome outcome)
{
    struct deps_child *d;
    struct deps_parent *pe;
    struct store_dep sd;

    if (srv->deps == NULL)
        return;
    if (j->held && (d = find_child(srv, job_handle(j), j->handle_len)) != NULL)
        child_forget(srv, d);
    pe = find_parent(srv, job_handle(j), j->handle_len);
    if (pe == NULL || pe->ending)
        return;
    pe->ending = true;
    pe->ok = outcome == JOB_OUTCOME_COMPLETE && !j->cancelled;
    if (!storage_keeps_deps(srv)) {
        parent_apply(srv, pe);
        return;
    }
    memset(&sd, 0, sizeof(sd));
    sd.parent = pe->handle;
    sd.parent_len = pe->len;
    sd.state = pe->ok ? STORE_DEP_OK : STORE_DEP_FAILED;
    if (storage_dep(srv, STORE_DEP_ENDED, &sd, parent_committed) < 0) {
        log_err(&srv->log, "store: out of memory to write the end of job %s for its children",
                pe->handle);
        parent_apply(srv, pe);
    }
}

void
deps_show(struct conn *c, const struct job *j)
{
    struct deps_child *d;
    unsigned i;
    bool first = true;

    if (!j->held || (d = find_child(c->srv, job_handle(j), j->handle_len)) == NULL)
        return;
    conn_printf(c, "after ");
    for (i = 0; i < d->nlinks; i++) {
        if (d->links[i].state != STORE_DEP_WAITING)
            continue;
        conn_printf(c, "%s%s", first ? "" : ",", d->links[i].handle);
        first = false;
    }
    conn_printf(c, "\nafter_fail %s\n", deps_policy_name(d->policy));
}

#define DEPS_SHOW_ROOM 8192 /* bytes of a held child's "show job" lines from a shared store */

void
deps_show_stored(struct conn *c, const char *func, size_t func_len, const char *handle, size_t len)
{
    struct store_op *op = storage_dep_show(c->srv, func, func_len, handle, len, DEPS_SHOW_ROOM);

    if (op == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    durable_reply_op(c->srv, c, op, "ERR UNKNOWN_JOB\r\n", "");
}

int
deps_replay_edge(const struct store_dep *sd, void *arg)
{
    struct srv *srv = arg;
    struct deps *g = graph(srv);
    struct deps_child *d;
    int state = sd->state >= STORE_DEP_WAITING && sd->state <= STORE_DEP_FAILED ? sd->state
                                                                                : STORE_DEP_WAITING;

    if (g == NULL)
        return -1;
    d = find_child(srv, sd->child, sd->child_len);
    if (d == NULL) {
        d = calloc(1, sizeof(*d));
        if (d == NULL)
            return -1;
        d->handle = malloc(sd->child_len + 1);
        if (d->handle == NULL) {
            free(d);
            return -1;
        }
        memcpy(d->handle, sd->child, sd->child_len);
        d->handle[sd->child_len] = '\0';
        d->handle_len = sd->child_len;
        if (hmap_insert(&g->children, &d->node, d->handle, d->handle_len) < 0) {
            deps_discard(d);
            return -1;
        }
        d->policy = sd->policy >= DEPS_FAIL && sd->policy <= DEPS_RUN ? sd->policy : DEPS_FAIL;
        d->committed = d->stored = true;
    }
    return add_link(d, sd->parent, sd->parent_len, state) != NULL ? 0 : -1;
}

bool
deps_replay_held(struct srv *srv, struct job *j)
{
    struct deps_child *d = find_child(srv, job_handle(j), j->handle_len);

    if (d == NULL || d->job != NULL)
        return false;
    d->job = job_ref(j);
    j->held = true;
    return true;
}

/*
 * A replayed child: each waiting edge looks at its parent as a submit
 * would (live: it waits; kept: by its outcome; gone: lost in the restart,
 * a failure), then the child waits, runs, or fails as its policy says.
 */
static void
replayed_child(struct srv *srv, struct deps_child *d)
{
    const char *failed = NULL;
    bool lost = false;
    unsigned i;

    for (i = 0; i < d->nlinks; i++) {
        struct deps_link *l = &d->links[i];
        int st;

        if (l->state == STORE_DEP_FAILED && failed == NULL)
            failed = l->handle;
        if (l->state != STORE_DEP_WAITING)
            continue;
        st = parent_state(srv, l->handle, l->len);
        if (st == 1 && kid_add(srv->deps, l->handle, l->len, d->job))
            continue;
        l->state = st >= 0 ? STORE_DEP_OK : STORE_DEP_FAILED;
        d->waiting--;
        if (st < 0 && failed == NULL) {
            failed = l->handle;
            lost = st == -2;
        }
    }
    if (failed != NULL && d->policy != DEPS_RUN) {
        char why[JOB_HANDLE_MAX + 40];

        snprintf(why, sizeof(why), lost ? "parent %s was lost in a restart" : "parent %s failed",
                 failed);
        LIFECYCLE_LOG(srv, DSJOB_LOG_NOTICE, d->policy == DEPS_CANCEL ? "cancelled" : "failed",
                      NULL, d->job, why);
        if (d->policy == DEPS_CANCEL)
            lifecycle_cancel(srv, d->job);
        else
            lifecycle_fail_as(srv, d->job, why);
    } else if (d->waiting == 0) {
        release(srv, d);
    }
}

void
deps_replayed(struct srv *srv)
{
    struct deps *g = srv->deps;
    struct job **jobs;
    struct hnode *n;
    size_t b = 0, nj = 0, i;

    if (g == NULL || g->children.count == 0)
        return;
    jobs = calloc(g->children.count, sizeof(*jobs));
    if (jobs == NULL) {
        log_err(&srv->log, "out of memory to replay the dependencies: held jobs wait");
        return;
    }
    for (n = hmap_next(&g->children, NULL, &b); n != NULL;) {
        struct deps_child *d = (struct deps_child *)n;

        n = hmap_next(&g->children, n, &b);
        if (d->job == NULL || d->job->state != JOB_PENDING)
            continue;
        jobs[nj++] = job_ref(d->job);
    }
    /* Edges whose child is gone or not live go (next taken before a node is freed). */
    for (b = 0, n = hmap_next(&g->children, NULL, &b); n != NULL;) {
        struct deps_child *d = (struct deps_child *)n;

        n = hmap_next(&g->children, n, &b);
        if (d->job == NULL || d->job->state != JOB_PENDING)
            child_forget(srv, d);
    }
    for (i = 0; i < nj; i++) {
        struct job *j = jobs[i];
        struct deps_child *d = j->held ? find_child(srv, job_handle(j), j->handle_len) : NULL;

        if (d != NULL)
            replayed_child(srv, d);
        job_unref(j);
    }
    free(jobs);
}

unsigned
deps_held_count(const struct srv *srv)
{
    return srv->deps ? (unsigned)srv->deps->children.count : 0;
}

void
deps_close(struct srv *srv)
{
    struct deps *g = srv->deps;
    struct hnode *n, *next;
    size_t b = 0;

    if (g == NULL)
        return;
    for (n = hmap_next(&g->children, NULL, &b); n != NULL; n = next) {
        struct deps_child *d = (struct deps_child *)n;

        next = hmap_next(&g->children, n, &b);
        if (d->job != NULL)
            d->job->held = false;
        deps_discard(d);
    }
    b = 0;
    for (n = hmap_next(&g->parents, NULL, &b); n != NULL; n = next) {
        struct deps_parent *pe = (struct deps_parent *)n;
        unsigned i;

        next = hmap_next(&g->parents, n, &b);
        for (i = 0; i < pe->nkids; i++)
            job_unref(pe->kids[i]);
        free(pe->kids);
        free(pe);
    }
    hmap_release(&g->children);
    hmap_release(&g->parents);
    free(g);
    srv->deps = NULL;
}
