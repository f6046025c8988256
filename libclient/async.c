/*
 * The non-blocking client (include/dsjob/async.h): one link to one server,
 * driven by the caller's event loop. Submits are queued on the link and
 * written as the socket takes them; a FIFO holds the jobs waiting for their
 * JOB_CREATED (or ERROR), which the server sends in the order of the
 * submits, and a table by handle holds the foreground jobs that run. A
 * second table by id finds a job for dsjob_async_forget. Callbacks may
 * submit and forget: while step runs, the tables do not grow and a
 * forgotten running job is only marked, and freed at the end of the step.
 */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/async.h>

#include "client_int.h"
#include "link/link.h"

#define ASYNC_ERR_LEN 512
#define ASYNC_MIN_BUCKETS 64

struct ajob {
    uint64_t id;
    char *handle;       /* after JOB_CREATED (owned); NULL before */
    uint32_t hhash;     /* client_hash of handle */
    bool background;    /* ends at JOB_CREATED */
    bool forgotten;     /* no callback names it any more */
    struct ajob *qnext; /* FIFO of jobs waiting for JOB_CREATED */
    struct ajob *hnext; /* chain in the table by handle */
    struct ajob *inext; /* chain in the table by id */
    struct ajob *gnext; /* forgotten during a step, freed at its end */
};

struct dsjob_async {
    struct link l;
    struct dsjob_async_callbacks cb;
    void *user;
    struct ssl_ctx_st *tls;
    struct ajob *qhead, *qtail; /* waiting for JOB_CREATED or ERROR */
    struct ajob **hbuckets;     /* running foreground jobs by handle */
    struct ajob **ibuckets;     /* every job by id */
    size_t nbuckets;            /* of both tables, a power of two */
    size_t njobs;               /* jobs held (in the id table) */
    size_t npending;            /* of those, not forgotten */
    struct ajob *graveyard;     /* forgotten during this step */
    uint64_t next_id;
    bool in_step;
    char errmsg[ASYNC_ERR_LEN];
};

static int
async_err(struct dsjob_async *a, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(a->errmsg, sizeof(a->errmsg), fmt, ap);
    va_end(ap);
    return err;
}

static size_t
id_slot(const struct dsjob_async *a, uint64_t id)
{
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & (a->nbuckets - 1);
}

static int
tables_grow(struct dsjob_async *a)
{
    size_t n = a->nbuckets ? a->nbuckets * 2 : ASYNC_MIN_BUCKETS, i;
    struct ajob **hb = calloc(n, sizeof(*hb)), **ib = calloc(n, sizeof(*ib));
    size_t old = a->nbuckets;
    struct ajob **ohb = a->hbuckets, **oib = a->ibuckets;

    if (hb == NULL || ib == NULL) {
        free(hb);
        free(ib);
        return DSJOB_ERR_NOMEM;
    }
    a->hbuckets = hb;
    a->ibuckets = ib;
    a->nbuckets = n;
    for (i = 0; i < old; i++) {
        struct ajob *j, *next;

        for (j = ohb[i]; j != NULL; j = next) {
            next = j->hnext;
            j->hnext = hb[j->hhash & (n - 1)];
            hb[j->hhash & (n - 1)] = j;
        }
        for (j = oib[i]; j != NULL; j = next) {
            next = j->inext;
            j->inext = ib[id_slot(a, j->id)];
            ib[id_slot(a, j->id)] = j;
        }
    }
    free(ohb);
    free(oib);
    return DSJOB_OK;
}

static struct ajob *
find_id(const struct dsjob_async *a, uint64_t id)
{
    struct ajob *j;

    if (a->nbuckets == 0)
        return NULL;
    for (j = a->ibuckets[id_slot(a, id)]; j != NULL; j = j->inext)
        if (j->id == id)
            return j;
    return NULL;
}

static void
unlink_id(struct dsjob_async *a, struct ajob *job)
{
    struct ajob **pp = &a->ibuckets[id_slot(a, job->id)];

    while (*pp != NULL && *pp != job)
        pp = &(*pp)->inext;
    if (*pp != NULL)
        *pp = job->inext;
}

static void
unlink_handle(struct dsjob_async *a, struct ajob *job)
{
    struct ajob **pp = &a->hbuckets[job->hhash & (a->nbuckets - 1)];

    while (*pp != NULL && *pp != job)
        pp = &(*pp)->hnext;
    if (*pp != NULL)
        *pp = job->hnext;
}

/* Drops job from the id table (and the handle table if it runs) and frees it. */
static void
job_free(struct dsjob_async *a, struct ajob *job, bool running)
{
    if (running)
        unlink_handle(a, job);
    unlink_id(a, job);
    a->njobs--;
    if (!job->forgotten)
        a->npending--;
    free(job->handle);
    free(job);
}

struct dsjob_async *
dsjob_async_new(const char *addr, const struct dsjob_async_callbacks *cb, void *user)
{
    struct dsjob_async *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    if (link_init(&a->l, addr) != DSJOB_OK || tables_grow(a) != DSJOB_OK) {
        link_release(&a->l);
        free(a->hbuckets);
        free(a->ibuckets);
        free(a);
        return NULL;
    }
    if (cb != NULL)
        a->cb = *cb;
    a->user = user;
    a->next_id = 1;
    return a;
}

/* Frees every job without a callback. */
static void
free_all(struct dsjob_async *a)
{
    size_t i;

    for (i = 0; i < a->nbuckets; i++) {
        struct ajob *j, *next;

        for (j = a->ibuckets[i]; j != NULL; j = next) {
            next = j->inext;
            free(j->handle);
            free(j);
        }
        a->ibuckets[i] = a->hbuckets[i] = NULL;
    }
    a->qhead = a->qtail = NULL;
    a->graveyard = NULL;
    a->njobs = a->npending = 0;
}

void
dsjob_async_free(struct dsjob_async *a)
{
    if (a == NULL)
        return;
    free_all(a);
    link_release(&a->l);
    link_tls_free(a->tls);
    free(a->hbuckets);
    free(a->ibuckets);
    free(a);
}

int
dsjob_async_set_tls(struct dsjob_async *a, const char *ca_file, const char *cert_file,
                    const char *key_file, unsigned flags)
{
    char err[LINK_ERR_LEN];
    struct ssl_ctx_st *ctx = link_tls_new(ca_file, cert_file, key_file, flags, err, sizeof(err));

    if (ctx == NULL)
        return async_err(a, DSJOB_ERR_ARG, "%s", err);
    link_set_tls(&a->l, ctx, flags);
    link_tls_free(a->tls);
    a->tls = ctx;
    return DSJOB_OK;
}

int
dsjob_async_connect(struct dsjob_async *a, int timeout_ms)
{
    int err;

    if (a->l.fd >= 0)
        return DSJOB_OK;
    a->l.hello = false;
    a->l.hello_wait = 0;
    err = link_connect(&a->l, timeout_ms);
    if (err == DSJOB_OK)
        err = client_prepare_hello(&a->l);
    if (err != DSJOB_OK) {
        async_err(a, err, "%s", a->l.err);
        link_close(&a->l);
        return err;
    }
    a->errmsg[0] = '\0';
    return DSJOB_OK;
}

int
dsjob_async_fd(const struct dsjob_async *a)
{
    return a->l.fd;
}

int
dsjob_async_want_write(const struct dsjob_async *a)
{
    return a->l.fd >= 0 && link_want_write(&a->l);
}

size_t
dsjob_async_pending(const struct dsjob_async *a)
{
    return a->npending;
}

const char *
dsjob_async_errmsg(const struct dsjob_async *a)
{
    return a->errmsg;
}

/*
 * The connection failed with err: closes it and fails every job in flight.
 * The jobs are taken off a first, so that callbacks that submit or forget
 * see an empty, closed handle.
 */
static int
fail_all(struct dsjob_async *a, int err)
{
    struct ajob **ib = a->ibuckets, *list = NULL, *j, *next;
    char text[ASYNC_ERR_LEN];
    size_t i, n = a->nbuckets;
    bool was = a->in_step;

    if (a->l.err[0] != '\0')
        async_err(a, err, "%s", a->l.err);
    else if (a->errmsg[0] == '\0')
        async_err(a, err, "%s", dsjob_strerror(err));
    snprintf(text, sizeof(text), "%s", a->errmsg);
    link_close(&a->l);
    for (i = 0; i < n; i++) {
        for (j = ib[i]; j != NULL; j = next) {
            next = j->inext;
            j->gnext = list;
            list = j;
        }
        ib[i] = a->hbuckets[i] = NULL;
    }
    a->qhead = a->qtail = NULL;
    a->graveyard = NULL;
    a->njobs = a->npending = 0;
    a->in_step = true;
    for (j = list; j != NULL; j = next) {
        next = j->gnext;
        if (!j->forgotten && a->cb.fail != NULL)
            a->cb.fail(a, j->id, err, text, strlen(text), a->user);
        free(j->handle);
        free(j);
    }
    a->in_step = was;
    return err;
}

int
dsjob_async_submit(struct dsjob_async *a, const char *func, const char *unique, const void *data,
                   size_t len, enum dsjob_priority prio, unsigned flags, uint64_t *id)
{
    bool background = (flags & DSJOB_TASK_BACKGROUND) != 0;
    const void *args[3] = {func, unique ? unique : "", data ? data : ""};
    size_t lens[3];
    struct ajob *job;
    int err;

    if (func == NULL || *func == '\0')
        return async_err(a, DSJOB_ERR_ARG, "empty function name");
    if (data == NULL && len > 0)
        return async_err(a, DSJOB_ERR_ARG, "NULL data with a length");
    if (unique != NULL && strlen(unique) > CLIENT_MAX_UNIQUE)
        return async_err(a, DSJOB_ERR_ARG, "unique key longer than %d bytes", CLIENT_MAX_UNIQUE);
    if (a->l.fd < 0)
        return async_err(a, DSJOB_ERR_STATE, "not connected to '%s'", a->l.addr);
    if (!a->in_step && a->njobs >= a->nbuckets && tables_grow(a) != DSJOB_OK)
        return async_err(a, DSJOB_ERR_NOMEM, "out of memory");
    job = calloc(1, sizeof(*job));
    if (job == NULL)
        return async_err(a, DSJOB_ERR_NOMEM, "out of memory");
    lens[0] = strlen(func);
    lens[1] = unique ? strlen(unique) : 0;
    lens[2] = len;
    if (link_queue(&a->l, client_submit_type(background, prio), 3, args, lens) != DSJOB_OK) {
        free(job);
        return async_err(a, DSJOB_ERR_NOMEM, "out of memory");
    }
    job->id = a->next_id++;
    job->background = background;
    job->inext = a->ibuckets[id_slot(a, job->id)];
    a->ibuckets[id_slot(a, job->id)] = job;
    if (a->qtail != NULL)
        a->qtail->qnext = job;
    else
        a->qhead = job;
    a->qtail = job;
    a->njobs++;
    a->npending++;
    if (id != NULL)
        *id = job->id;
    if (!a->in_step && !(flags & DSJOB_ASYNC_NO_WRITE)) {
        err = link_write_some(&a->l);
        if (err != DSJOB_OK)
            return fail_all(a, err);
    }
    return DSJOB_OK;
}

/* The head of the FIFO, off it. */
static struct ajob *
fifo_pop(struct dsjob_async *a)
{
    struct ajob *job = a->qhead;

    if (job != NULL) {
        a->qhead = job->qnext;
        if (a->qhead == NULL)
            a->qtail = NULL;
        job->qnext = NULL;
    }
    return job;
}

static int
on_created(struct dsjob_async *a, const struct packet *p)
{
    struct ajob *job = fifo_pop(a);
    size_t n = p->arg_len[0];

    if (job == NULL)
        return link_set_err(&a->l, DSJOB_ERR_PROTO, "'%s' sent a JOB_CREATED for no submit",
                            a->l.addr);
    if (job->background || job->forgotten) {
        if (!job->forgotten && a->cb.created != NULL) {
            char handle[DSJOB_HANDLE_MAX];

            snprintf(handle, sizeof(handle), "%.*s", (int)n, (const char *)p->arg[0]);
            a->cb.created(a, job->id, handle, a->user);
        }
        job_free(a, job, false);
        return DSJOB_OK;
    }
    job->handle = client_dup(p->arg[0], n);
    if (job->handle == NULL)
        return link_set_err(&a->l, DSJOB_ERR_NOMEM, "out of memory");
    job->hhash = client_hash(p->arg[0], n);
    job->hnext = a->hbuckets[job->hhash & (a->nbuckets - 1)];
    a->hbuckets[job->hhash & (a->nbuckets - 1)] = job;
    if (a->cb.created != NULL)
        a->cb.created(a, job->id, job->handle, a->user);
    return DSJOB_OK;
}

/* An ERROR answers the oldest submit (or the preamble, handled before). */
static int
on_error(struct dsjob_async *a, const struct packet *p)
{
    struct ajob *job = fifo_pop(a);
    char text[ASYNC_ERR_LEN];
    int n;

    if (job == NULL)
        return link_set_err(&a->l, DSJOB_ERR_SERVER, "'%s' sent ERROR %.*s: %.*s", a->l.addr,
                            (int)p->arg_len[0], (const char *)p->arg[0], (int)p->arg_len[1],
                            (const char *)p->arg[1]);
    n = snprintf(text, sizeof(text), "%.*s: %.*s", (int)p->arg_len[0], (const char *)p->arg[0],
                 (int)p->arg_len[1], (const char *)p->arg[1]);
    if (!job->forgotten && a->cb.fail != NULL)
        a->cb.fail(a, job->id, DSJOB_ERR_SERVER, text,
                   n < 0                      ? 0
                   : (size_t)n < sizeof(text) ? (size_t)n
                                              : sizeof(text) - 1,
                   a->user);
    job_free(a, job, false);
    return DSJOB_OK;
}

/* One WORK_* packet: to every job of the handle (two submits may coalesce). */
static void
on_work(struct dsjob_async *a, const struct packet *p)
{
    uint32_t h = client_hash(p->arg[0], p->arg_len[0]);
    struct ajob *j, *next;

    for (j = a->hbuckets[h & (a->nbuckets - 1)]; j != NULL; j = next) {
        const unsigned char *d = p->nargs > 1 ? p->arg[p->nargs - 1] : NULL;
        size_t dl = p->nargs > 1 ? p->arg_len[p->nargs - 1] : 0;
        bool end = false;

        next = j->hnext;
        if (j->hhash != h || j->forgotten || strlen(j->handle) != p->arg_len[0] ||
            memcmp(j->handle, p->arg[0], p->arg_len[0]) != 0)
            continue;
        switch (p->type) {
        case PACKET_WORK_STATUS:
            if (a->cb.status != NULL)
                a->cb.status(a, j->id, client_arg_uint(p->arg[1], p->arg_len[1]),
                             client_arg_uint(p->arg[2], p->arg_len[2]), a->user);
            break;
        case PACKET_WORK_DATA:
            if (a->cb.data != NULL)
                a->cb.data(a, j->id, d, dl, a->user);
            break;
        case PACKET_WORK_WARNING:
            if (a->cb.warning != NULL)
                a->cb.warning(a, j->id, d, dl, a->user);
            break;
        case PACKET_WORK_COMPLETE:
            if (a->cb.complete != NULL)
                a->cb.complete(a, j->id, d, dl, a->user);
            end = true;
            break;
        case PACKET_WORK_FAIL:
            if (a->cb.fail != NULL)
                a->cb.fail(a, j->id, DSJOB_ERR_JOB_FAILED, "", 0, a->user);
            end = true;
            break;
        case PACKET_WORK_EXCEPTION:
            if (a->cb.fail != NULL)
                a->cb.fail(a, j->id, DSJOB_ERR_JOB_EXCEPTION, (const char *)d, dl, a->user);
            end = true;
            break;
        default: break;
        }
        /* A callback that forgot the job has put it on the graveyard already. */
        if (end && !j->forgotten)
            job_free(a, j, true);
    }
}

int
dsjob_async_step(struct dsjob_async *a)
{
    struct packet p;
    int err = DSJOB_OK, rerr = DSJOB_OK, r;

    if (a->l.fd < 0)
        return async_err(a, DSJOB_ERR_STATE, "not connected to '%s'", a->l.addr);
    a->in_step = true;
    if (link_want_write(&a->l))
        err = link_write_some(&a->l);
    /* Packets read before the server closed are still delivered. */
    if (err == DSJOB_OK)
        rerr = link_read_some(&a->l);
    while (err == DSJOB_OK && (r = link_next(&a->l, &p)) != 0) {
        if (r < 0) {
            err = -r;
            break;
        }
        if (client_hello_answer(&a->l, &p))
            continue;
        switch (p.type) {
        case PACKET_JOB_CREATED: err = on_created(a, &p); break;
        case PACKET_ERROR: err = on_error(a, &p); break;
        case PACKET_WORK_FAIL:
            /* gearmand's WORK_FAIL after an exception has a stray NUL after the handle. */
            if (p.arg_len[0] > 0 && p.arg[0][p.arg_len[0] - 1] == '\0')
                p.arg_len[0]--;
            /* fall through */
        case PACKET_WORK_STATUS:
        case PACKET_WORK_DATA:
        case PACKET_WORK_WARNING:
        case PACKET_WORK_COMPLETE:
        case PACKET_WORK_EXCEPTION: on_work(a, &p); break;
        default: break;
        }
    }
    if (err == DSJOB_OK)
        err = rerr;
    /* What callbacks submitted goes out now. */
    if (err == DSJOB_OK && link_want_write(&a->l))
        err = link_write_some(&a->l);
    while (a->graveyard != NULL) {
        struct ajob *j = a->graveyard;

        a->graveyard = j->gnext;
        a->npending++; /* job_free counts a forgotten job as not pending */
        j->forgotten = false;
        job_free(a, j, true);
    }
    a->in_step = false;
    if (err != DSJOB_OK)
        return fail_all(a, err);
    if (a->njobs >= a->nbuckets)
        tables_grow(a); /* a failure only leaves chains longer */
    return DSJOB_OK;
}

int
dsjob_async_forget(struct dsjob_async *a, uint64_t id)
{
    struct ajob *job = find_id(a, id);

    if (job == NULL || job->forgotten)
        return DSJOB_ERR_NOTFOUND;
    job->forgotten = true;
    a->npending--;
    if (job->handle == NULL)
        return DSJOB_OK; /* freed when its JOB_CREATED or ERROR comes */
    if (a->in_step) {
        job->gnext = a->graveyard;
        a->graveyard = job;
        return DSJOB_OK;
    }
    a->npending++;
    job->forgotten = false;
    job_free(a, job, true);
    return DSJOB_OK;
}
