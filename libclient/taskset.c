/*
 * The asynchronous half of libdsjobclient: a task set pipelines many
 * submits on one connection per server and drives every task from one
 * poll() loop. Each server's connection keeps a FIFO of the tasks whose
 * JOB_CREATED is still due (the server answers submits in order, so the
 * next JOB_CREATED or ERROR belongs to the FIFO's head) and the running
 * tasks sit in a hash table keyed by (server, handle), where results are
 * looked up. A connection that fails hands its unfinished tasks to the
 * next server; a task that every server has failed ends in error. Every
 * task that ends without completing goes on the failed list.
 */
#include "config.h"
#include "libclient/client_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>

/*
 * A task is one allocation: its function name, unique key and payload
 * follow the struct, and a handle as long as gearmand's (63 bytes) or
 * dsjobd's lives in hbuf, so a background submit costs one malloc.
 */
#define TASK_HANDLE_INLINE 64

struct dsjob_task {
    struct dsjob_taskset *ts;      /* the set that owns the task */
    void *user;                    /* given to the callbacks */
    char *func;                    /* function name (in mem) */
    char *unique;                  /* unique key, "" for none (in mem) */
    unsigned char *data;           /* payload (in mem) */
    size_t len;                    /* payload bytes */
    bool background;               /* done at JOB_CREATED */
    uint32_t type;                 /* the SUBMIT packet type */
    size_t server;                 /* index of the server it was last sent to */
    size_t tries;                  /* servers that have failed it */
    bool running;                  /* JOB_CREATED seen on the current server */
    bool done;                     /* ended */
    char *handle;                  /* "" or the job handle: hbuf, or owned when longer */
    int err;                       /* enum dsjob_err it ended with */
    char *errmsg;                  /* detail of err, NULL for none (owned) */
    unsigned char *result;         /* WORK_COMPLETE bytes (owned) */
    size_t result_len;             /* their length */
    uint32_t hash;                 /* hash of (server, handle) while in the table */
    struct dsjob_task *hnext;      /* next in the hash bucket */
    struct dsjob_task *qnext;      /* next in its server's JOB_CREATED FIFO */
    char hbuf[TASK_HANDLE_INLINE]; /* a handle that fits, without an allocation */
    unsigned char mem[];           /* func, unique and data, each NUL-terminated */
};

struct ts_link {
    struct link l;            /* the connection */
    struct dsjob_task *qhead; /* oldest task waiting for JOB_CREATED */
    struct dsjob_task *qtail; /* newest */
    size_t running;           /* tasks of this server in the hash table */
};

struct dsjob_taskset {
    struct dsjob_client *c;         /* servers, ring, timeouts (borrowed) */
    struct dsjob_task_callbacks cb; /* the callbacks */
    struct ts_link *links;          /* one per server of c (owned) */
    size_t nlinks;                  /* c->nlinks when the set was made */
    struct dsjob_task **tasks;      /* every task, in the order added (owned) */
    size_t ntasks;                  /* tasks added */
    size_t tasks_cap;               /* allocated */
    size_t pending;                 /* tasks not done */
    struct dsjob_task **failed;     /* tasks that ended without completing (borrowed) */
    size_t nfailed;                 /* how many */
    struct dsjob_task **buckets;    /* hash table of running tasks */
    size_t nbuckets;                /* a power of two */
    size_t nhashed;                 /* tasks in the table */
};

/* The table key of a running task: its handle's hash, told apart by server. */
static uint32_t
task_key(size_t server, const void *handle, size_t len)
{
    return client_hash(handle, len) ^ (uint32_t)(server * 0x9e3779b1u);
}

static int
hash_grow(struct dsjob_taskset *ts)
{
    size_t n = ts->nbuckets ? ts->nbuckets * 2 : 1024, i;
    struct dsjob_task **b = dsjob_malloc(n * sizeof(*b));

    if (b == NULL)
        return DSJOB_ERR_NOMEM;
    memset(b, 0, n * sizeof(*b));
    for (i = 0; i < ts->nbuckets; i++) {
        struct dsjob_task *t = ts->buckets[i], *next;

        for (; t != NULL; t = next) {
            next = t->hnext;
            t->hnext = b[t->hash & (n - 1)];
            b[t->hash & (n - 1)] = t;
        }
    }
    dsjob_free(ts->buckets);
    ts->buckets = b;
    ts->nbuckets = n;
    return DSJOB_OK;
}

static void
hash_remove(struct dsjob_taskset *ts, struct dsjob_task *t)
{
    struct dsjob_task **pp;

    if (!t->running)
        return;
    for (pp = &ts->buckets[t->hash & (ts->nbuckets - 1)]; *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == t) {
            *pp = t->hnext;
            break;
        }
    }
    t->hnext = NULL;
    t->running = false;
    ts->nhashed--;
    ts->links[t->server].running--;
}

/* Ends t with err (DSJOB_OK: completed); msg (borrowed, may be NULL) is its detail. */
static void
task_finish(struct dsjob_taskset *ts, struct dsjob_task *t, int err, const char *msg, size_t mlen)
{
    hash_remove(ts, t);
    t->done = true;
    t->err = err;
    if (msg != NULL)
        t->errmsg = client_dup(msg, mlen);
    ts->pending--;
    if (err != DSJOB_OK)
        ts->failed[ts->nfailed++] = t;
}

/* Queues t's submit on server i, behind what is queued there already. */
static int
task_send(struct dsjob_taskset *ts, struct dsjob_task *t, size_t i)
{
    struct ts_link *tl = &ts->links[i];
    const void *args[3] = {t->func, t->unique, t->data};
    size_t lens[3] = {strlen(t->func), strlen(t->unique), t->len};

    if (client_prepare_hello(&tl->l) != DSJOB_OK)
        return DSJOB_ERR_NOMEM;
    if (link_queue(&tl->l, t->type, 3, args, lens) != DSJOB_OK)
        return DSJOB_ERR_NOMEM;
    t->server = i;
    t->qnext = NULL;
    if (tl->qtail != NULL)
        tl->qtail->qnext = t;
    else
        tl->qhead = t;
    tl->qtail = t;
    return DSJOB_OK;
}

struct dsjob_taskset *
dsjob_taskset_new(struct dsjob_client *c, const struct dsjob_task_callbacks *cb)
{
    struct dsjob_taskset *ts;
    size_t i;

    if (c == NULL || c->nlinks == 0)
        return NULL;
    ts = dsjob_malloc(sizeof(*ts));
    if (ts == NULL)
        return NULL;
    memset(ts, 0, sizeof(*ts));
    ts->c = c;
    if (cb != NULL)
        ts->cb = *cb;
    ts->links = dsjob_malloc(c->nlinks * sizeof(*ts->links));
    if (ts->links == NULL || hash_grow(ts) != DSJOB_OK)
        goto out_free;
    memset(ts->links, 0, c->nlinks * sizeof(*ts->links));
    for (i = 0; i < c->nlinks; i++) {
        if (link_init(&ts->links[i].l, c->links[i].addr) != DSJOB_OK)
            goto out_free;
        link_set_tls(&ts->links[i].l, c->tls, c->tls_flags);
        ts->links[i].l.expire_set = c->expire_set;
        ts->links[i].l.expire_ms = c->expire_ms;
        ts->links[i].l.batch_set = c->batch_set;
        memcpy(ts->links[i].l.batch, c->batch, sizeof(c->batch));
        ts->nlinks++;
    }
    return ts;
out_free:
    dsjob_taskset_free(ts);
    return NULL;
}

/* Frees a handle too long for hbuf. */
static void
task_handle_free(struct dsjob_task *t)
{
    if (t->handle != t->hbuf)
        dsjob_free(t->handle);
}

void
dsjob_taskset_free(struct dsjob_taskset *ts)
{
    size_t i;

    if (ts == NULL)
        return;
    for (i = 0; i < ts->nlinks; i++)
        link_release(&ts->links[i].l);
    for (i = 0; i < ts->ntasks; i++) {
        struct dsjob_task *t = ts->tasks[i];

        task_handle_free(t);
        dsjob_free(t->errmsg);
        dsjob_free(t->result);
        dsjob_free(t);
    }
    dsjob_free(ts->tasks);
    dsjob_free(ts->failed);
    dsjob_free(ts->buckets);
    dsjob_free(ts->links);
    dsjob_free(ts);
}

/* Makes room for one more task in ts->tasks and ts->failed. */
static int
tasks_reserve(struct dsjob_taskset *ts)
{
    struct dsjob_task **nt, **nf;
    size_t ncap;

    if (ts->ntasks < ts->tasks_cap)
        return DSJOB_OK;
    ncap = ts->tasks_cap ? ts->tasks_cap * 2 : 64;
    nt = dsjob_malloc(ncap * sizeof(*nt));
    nf = dsjob_malloc(ncap * sizeof(*nf));
    if (nt == NULL || nf == NULL) {
        dsjob_free(nt);
        dsjob_free(nf);
        return DSJOB_ERR_NOMEM;
    }
    if (ts->ntasks > 0)
        memcpy(nt, ts->tasks, ts->ntasks * sizeof(*nt));
    if (ts->nfailed > 0)
        memcpy(nf, ts->failed, ts->nfailed * sizeof(*nf));
    dsjob_free(ts->tasks);
    dsjob_free(ts->failed);
    ts->tasks = nt;
    ts->failed = nf;
    ts->tasks_cap = ncap;
    return DSJOB_OK;
}

int
dsjob_taskset_add(struct dsjob_taskset *ts, const char *func, const char *unique, const void *data,
                  size_t len, enum dsjob_priority prio, unsigned flags, void *user,
                  struct dsjob_task **task)
{
    struct dsjob_task *t;
    size_t ulen = unique ? strlen(unique) : 0, flen;

    if (task != NULL)
        *task = NULL;
    if (func == NULL || *func == '\0' || (data == NULL && len > 0) || ulen > CLIENT_MAX_UNIQUE ||
        !client_job_fits(func, unique, len))
        return DSJOB_ERR_ARG;
    if (tasks_reserve(ts) != DSJOB_OK)
        return DSJOB_ERR_NOMEM;
    flen = strlen(func);
    t = dsjob_malloc(sizeof(*t) + flen + ulen + len + 3);
    if (t == NULL)
        return DSJOB_ERR_NOMEM;
    memset(t, 0, sizeof(*t));
    t->ts = ts;
    t->user = user;
    t->func = (char *)t->mem;
    t->unique = t->func + flen + 1;
    t->data = (unsigned char *)t->unique + ulen + 1;
    memcpy(t->func, func, flen + 1);
    if (ulen > 0)
        memcpy(t->unique, unique, ulen);
    t->unique[ulen] = '\0';
    if (len > 0)
        memcpy(t->data, data, len);
    t->data[len] = '\0';
    t->handle = t->hbuf;
    t->len = len;
    t->background = (flags & DSJOB_TASK_BACKGROUND) != 0;
    t->type = client_submit_type(t->background, prio);
    if (task_send(ts, t, client_pick(ts->c, t->unique)) != DSJOB_OK) {
        dsjob_free(t);
        return DSJOB_ERR_NOMEM;
    }
    ts->tasks[ts->ntasks++] = t;
    ts->pending++;
    if (task != NULL)
        *task = t;
    return DSJOB_OK;
}

/*
 * Server i failed with err (its link's message): close it and send each of
 * its unfinished tasks to the next server, or end them in error when every
 * server has failed them.
 */
static int
link_failed(struct dsjob_taskset *ts, size_t i, int err)
{
    struct ts_link *tl = &ts->links[i];
    char msg[LINK_ERR_LEN];
    size_t k;
    int r = DSJOB_OK;

    snprintf(msg, sizeof(msg), "%s", tl->l.err);
    link_close(&tl->l);
    tl->qhead = tl->qtail = NULL;
    for (k = 0; k < ts->ntasks; k++) {
        struct dsjob_task *t = ts->tasks[k];

        if (t->done || t->server != i)
            continue;
        hash_remove(ts, t);
        t->handle[0] = '\0';
        if (++t->tries >= ts->nlinks) {
            task_finish(ts, t, err, msg, strlen(msg));
            if (ts->cb.fail != NULL)
                ts->cb.fail(t, t->user);
            continue;
        }
        if (task_send(ts, t, (i + 1) % ts->nlinks) != DSJOB_OK)
            r = DSJOB_ERR_NOMEM;
    }
    return r;
}

/* Pops the task that the next JOB_CREATED or ERROR on tl answers. */
static struct dsjob_task *
fifo_pop(struct ts_link *tl)
{
    struct dsjob_task *t = tl->qhead;

    if (t != NULL) {
        tl->qhead = t->qnext;
        if (tl->qhead == NULL)
            tl->qtail = NULL;
        t->qnext = NULL;
    }
    return t;
}

static int
on_created(struct dsjob_taskset *ts, size_t i, const struct packet *p)
{
    struct dsjob_task *t = fifo_pop(&ts->links[i]);
    char *h = t != NULL ? t->hbuf : NULL;

    if (t == NULL)
        return DSJOB_OK;
    if (p->arg_len[0] >= sizeof(t->hbuf) && (h = dsjob_malloc(p->arg_len[0] + 1)) == NULL)
        return DSJOB_ERR_NOMEM;
    memcpy(h, p->arg[0], p->arg_len[0]);
    h[p->arg_len[0]] = '\0';
    task_handle_free(t);
    t->handle = h;
    if (ts->cb.created != NULL)
        ts->cb.created(t, t->handle, t->user);
    if (t->background) {
        task_finish(ts, t, DSJOB_OK, NULL, 0);
        return DSJOB_OK;
    }
    if (ts->nhashed >= ts->nbuckets && hash_grow(ts) != DSJOB_OK)
        return DSJOB_ERR_NOMEM;
    t->hash = task_key(i, p->arg[0], p->arg_len[0]);
    t->hnext = ts->buckets[t->hash & (ts->nbuckets - 1)];
    ts->buckets[t->hash & (ts->nbuckets - 1)] = t;
    t->running = true;
    ts->nhashed++;
    ts->links[i].running++;
    return DSJOB_OK;
}

static void
on_error(struct dsjob_taskset *ts, size_t i, const struct packet *p)
{
    struct ts_link *tl = &ts->links[i];
    struct dsjob_task *t;
    char msg[CLIENT_ERR_LEN];
    int n;

    t = fifo_pop(tl);
    if (t == NULL)
        return;
    n = snprintf(msg, sizeof(msg), "%.*s: %.*s", (int)p->arg_len[0], (const char *)p->arg[0],
                 (int)p->arg_len[1], (const char *)p->arg[1]);
    task_finish(ts, t, DSJOB_ERR_SERVER, msg, n < 0 ? 0 : strlen(msg));
    if (ts->cb.fail != NULL)
        ts->cb.fail(t, t->user);
}

/* Delivers one WORK_* packet to t; returns true when it ended the task. */
static int
deliver(struct dsjob_taskset *ts, struct dsjob_task *t, const struct packet *p)
{
    switch (p->type) {
    case PACKET_WORK_STATUS:
        if (ts->cb.status != NULL)
            ts->cb.status(t, client_arg_uint(p->arg[1], p->arg_len[1]),
                          client_arg_uint(p->arg[2], p->arg_len[2]), t->user);
        return DSJOB_OK;
    case PACKET_WORK_DATA:
        if (ts->cb.data != NULL)
            ts->cb.data(t, p->arg[1], p->arg_len[1], t->user);
        return DSJOB_OK;
    case PACKET_WORK_WARNING:
        if (ts->cb.warning != NULL)
            ts->cb.warning(t, p->arg[1], p->arg_len[1], t->user);
        return DSJOB_OK;
    case PACKET_WORK_COMPLETE:
        t->result = (unsigned char *)client_dup(p->arg[1], p->arg_len[1]);
        if (t->result == NULL)
            return DSJOB_ERR_NOMEM;
        t->result_len = p->arg_len[1];
        task_finish(ts, t, DSJOB_OK, NULL, 0);
        if (ts->cb.complete != NULL)
            ts->cb.complete(t, t->result, t->result_len, t->user);
        return DSJOB_OK;
    case PACKET_WORK_FAIL:
        task_finish(ts, t, DSJOB_ERR_JOB_FAILED, "job failed", 10);
        if (ts->cb.fail != NULL)
            ts->cb.fail(t, t->user);
        return DSJOB_OK;
    case PACKET_WORK_EXCEPTION:
        task_finish(ts, t, DSJOB_ERR_JOB_EXCEPTION, (const char *)p->arg[1], p->arg_len[1]);
        if (ts->cb.exception != NULL)
            ts->cb.exception(t, t->errmsg ? t->errmsg : "", p->arg_len[1], t->user);
        return DSJOB_OK;
    default: return DSJOB_OK;
    }
}

/* Hands a WORK_* packet from server i to every running task with its handle. */
static int
on_work(struct dsjob_taskset *ts, size_t i, const struct packet *p)
{
    uint32_t h = task_key(i, p->arg[0], p->arg_len[0]);
    struct dsjob_task *t, *next;
    int err = DSJOB_OK;

    for (t = ts->buckets[h & (ts->nbuckets - 1)]; t != NULL; t = next) {
        next = t->hnext;
        if (t->hash != h || t->server != i || strlen(t->handle) != p->arg_len[0] ||
            memcmp(t->handle, p->arg[0], p->arg_len[0]) != 0)
            continue;
        if (deliver(ts, t, p) != DSJOB_OK)
            err = DSJOB_ERR_NOMEM;
    }
    return err;
}

/* Processes every whole packet read on server i. */
static int
link_process(struct dsjob_taskset *ts, size_t i)
{
    struct link *l = &ts->links[i].l;
    struct packet p;
    int r;

    while ((r = link_next(l, &p)) > 0) {
        if (client_hello_answer(l, &p))
            continue;
        switch (p.type) {
        case PACKET_OPTION_RES: break;
        case PACKET_JOB_CREATED:
            if (on_created(ts, i, &p) != DSJOB_OK)
                return DSJOB_ERR_NOMEM;
            break;
        case PACKET_ERROR: on_error(ts, i, &p); break;
        case PACKET_WORK_STATUS:
        case PACKET_WORK_DATA:
        case PACKET_WORK_WARNING:
        case PACKET_WORK_COMPLETE:
        case PACKET_WORK_FAIL:
        case PACKET_WORK_EXCEPTION:
            /* gearmand's WORK_FAIL after an exception has a stray NUL after the handle. */
            if (p.type == PACKET_WORK_FAIL && p.arg_len[0] > 0 &&
                p.arg[0][p.arg_len[0] - 1] == '\0')
                p.arg_len[0]--;
            if (on_work(ts, i, &p) != DSJOB_OK)
                return DSJOB_ERR_NOMEM;
            break;
        default: break;
        }
    }
    if (r < 0)
        return link_failed(ts, i, -r);
    return DSJOB_OK;
}

static bool
link_busy(const struct ts_link *tl)
{
    return tl->qhead != NULL || tl->running > 0 || link_want_write(&tl->l);
}

/* Connects every server that has work and no connection; failures move the work on. */
static int
connect_busy(struct dsjob_taskset *ts)
{
    size_t i;
    int err;

    for (i = 0; i < ts->nlinks; i++) {
        struct ts_link *tl = &ts->links[i];

        while (link_busy(tl) && tl->l.fd < 0) {
            err = link_connect(&tl->l, ts->c->connect_ms);
            if (err == DSJOB_OK)
                break;
            /* link_failed drops the queued bytes; keep them by re-sending from the tasks. */
            if (link_failed(ts, i, err) != DSJOB_OK)
                return DSJOB_ERR_NOMEM;
        }
    }
    return DSJOB_OK;
}

int
dsjob_taskset_run(struct dsjob_taskset *ts, int timeout_ms)
{
    int64_t deadline = link_deadline(timeout_ms);
    struct pollfd *pfd;
    size_t *which;
    int err = DSJOB_OK;

    pfd = dsjob_malloc(ts->nlinks * sizeof(*pfd));
    which = dsjob_malloc(ts->nlinks * sizeof(*which));
    if (pfd == NULL || which == NULL) {
        err = DSJOB_ERR_NOMEM;
        goto out;
    }
    while (ts->pending > 0) {
        size_t n = 0, i, k;
        int r;

        err = connect_busy(ts);
        if (err != DSJOB_OK)
            goto out;
        for (i = 0; i < ts->nlinks; i++) {
            struct ts_link *tl = &ts->links[i];

            if (tl->l.fd < 0 || !link_busy(tl))
                continue;
            pfd[n].fd = tl->l.fd;
            pfd[n].events = POLLIN | (link_want_write(&tl->l) ? POLLOUT : 0);
            pfd[n].revents = 0;
            which[n++] = i;
        }
        if (n == 0)
            continue; /* every task moved or ended: the loop condition decides */
        r = poll(pfd, (nfds_t)n, link_wait_ms(deadline));
        if (r < 0 && errno != EINTR) {
            err = DSJOB_ERR_SYS;
            goto out;
        }
        if (r == 0) {
            err = DSJOB_ERR_TIMEOUT;
            goto out;
        }
        for (k = 0; r > 0 && k < n; k++) {
            struct link *l = &ts->links[which[k]].l;
            int e = DSJOB_OK;

            if (pfd[k].revents & POLLOUT)
                e = link_write_some(l);
            if (e == DSJOB_OK && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
                e = link_read_some(l);
            /* Packets read before a failure still count. */
            if (link_process(ts, which[k]) != DSJOB_OK) {
                err = DSJOB_ERR_NOMEM;
                goto out;
            }
            if (e != DSJOB_OK && l->fd >= 0 && link_failed(ts, which[k], e) != DSJOB_OK) {
                err = DSJOB_ERR_NOMEM;
                goto out;
            }
        }
    }
    err = ts->nfailed > 0 ? DSJOB_ERR_JOB_FAILED : DSJOB_OK;
out:
    dsjob_free(pfd);
    dsjob_free(which);
    return err;
}

size_t
dsjob_taskset_count(const struct dsjob_taskset *ts)
{
    return ts->ntasks;
}

size_t
dsjob_taskset_nfailed(const struct dsjob_taskset *ts)
{
    return ts->nfailed;
}

struct dsjob_task *
dsjob_taskset_failed(const struct dsjob_taskset *ts, size_t i)
{
    return i < ts->nfailed ? ts->failed[i] : NULL;
}

void *
dsjob_task_user(const struct dsjob_task *t)
{
    return t->user;
}

const char *
dsjob_task_handle(const struct dsjob_task *t)
{
    return t->handle;
}

const char *
dsjob_task_unique(const struct dsjob_task *t)
{
    return t->unique;
}

int
dsjob_task_done(const struct dsjob_task *t)
{
    return t->done;
}

int
dsjob_task_error(const struct dsjob_task *t)
{
    return t->err;
}

const char *
dsjob_task_errmsg(const struct dsjob_task *t)
{
    return t->errmsg ? t->errmsg : "";
}

const void *
dsjob_task_result(const struct dsjob_task *t, size_t *len)
{
    if (len != NULL)
        *len = t->result_len;
    return t->result;
}
