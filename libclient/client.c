/*
 * The blocking half of libdsjobclient: the client handle, its servers and
 * their hash ring, and the calls that submit one job (or ask one question)
 * and wait for the answer on one connection. Each call picks a first
 * server, and on a connection failure closes it and goes on to the next,
 * so a call fails only when every server failed. Packets that belong to
 * nothing the call waits for (OPTION_RES, stray results) are skipped.
 */
#include "config.h"
#include "libclient/client_int.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>

#include "proto/decimal.h"

uint32_t
client_hash(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t h = 2166136261u;
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static int
ring_cmp(const void *a, const void *b)
{
    const struct ring_point *x = a, *y = b;

    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return x->server < y->server ? -1 : x->server > y->server;
}

/* Rebuilds the ring for the current servers; the old ring stays on failure. */
static int
ring_build(struct dsjob_client *c)
{
    struct ring_point *r = dsjob_malloc(c->nlinks * RING_POINTS * sizeof(*r));
    size_t i, k;

    if (r == NULL)
        return DSJOB_ERR_NOMEM;
    for (i = 0; i < c->nlinks; i++) {
        for (k = 0; k < RING_POINTS; k++) {
            char key[300];
            int n = snprintf(key, sizeof(key), "%s-%zu", c->links[i].addr, k);

            r[i * RING_POINTS + k].hash = client_hash(key, (size_t)n);
            r[i * RING_POINTS + k].server = i;
        }
    }
    qsort(r, c->nlinks * RING_POINTS, sizeof(*r), ring_cmp);
    dsjob_free(c->ring);
    c->ring = r;
    return DSJOB_OK;
}

size_t
client_pick(struct dsjob_client *c, const char *unique)
{
    size_t lo = 0, hi, n = c->nlinks * RING_POINTS;
    uint32_t h;

    if (c->nlinks <= 1)
        return 0;
    if (unique == NULL || *unique == '\0') {
        size_t i = c->rr;

        c->rr = (c->rr + 1) % c->nlinks;
        return i;
    }
    h = client_hash(unique, strlen(unique));
    hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (c->ring[mid].hash < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return c->ring[lo == n ? 0 : lo].server;
}

int
client_prepare_hello(struct link *l)
{
    static const char opt[] = "exceptions";
    const void *args[1] = {opt};
    size_t lens[1] = {sizeof(opt) - 1};
    char expire[48];
    int err;

    if (l->hello)
        return DSJOB_OK;
    err = link_queue(l, PACKET_OPTION_REQ, 1, args, lens);
    if (err == DSJOB_OK && l->expire_set) {
        /* dsjobd's; gearmand answers ERROR, which is read as the answer and ignored. */
        lens[0] =
            (size_t)snprintf(expire, sizeof(expire), "expire-in=%lld.%03lld",
                             (long long)(l->expire_ms / 1000), (long long)(l->expire_ms % 1000));
        args[0] = expire;
        err = link_queue(l, PACKET_OPTION_REQ, 1, args, lens);
        if (err == DSJOB_OK)
            l->hello_wait++;
    }
    if (err == DSJOB_OK && l->batch_set) {
        /* dsjobd's (batch=ID, or batch= to clear); gearmand's ERROR is read and ignored. */
        char opt_batch[80];

        lens[0] = (size_t)snprintf(opt_batch, sizeof(opt_batch), "batch=%s", l->batch);
        args[0] = opt_batch;
        err = link_queue(l, PACKET_OPTION_REQ, 1, args, lens);
        if (err == DSJOB_OK)
            l->hello_wait++;
    }
    if (err == DSJOB_OK) {
        l->hello = true;
        l->hello_wait++;
    }
    return err;
}

bool
client_hello_answer(struct link *l, const struct packet *p)
{
    if (l->hello_wait == 0 || (p->type != PACKET_OPTION_RES && p->type != PACKET_ERROR))
        return false;
    l->hello_wait--;
    return true;
}

void *
client_dup(const void *src, size_t len)
{
    unsigned char *b = dsjob_malloc(len + 1);

    if (b == NULL)
        return NULL;
    if (len > 0)
        memcpy(b, src, len);
    b[len] = '\0';
    return b;
}

uint32_t
client_submit_type(bool background, enum dsjob_priority prio)
{
    switch (prio) {
    case DSJOB_PRIO_HIGH: return background ? PACKET_SUBMIT_JOB_HIGH_BG : PACKET_SUBMIT_JOB_HIGH;
    case DSJOB_PRIO_LOW: return background ? PACKET_SUBMIT_JOB_LOW_BG : PACKET_SUBMIT_JOB_LOW;
    case DSJOB_PRIO_NORMAL: break;
    }
    return background ? PACKET_SUBMIT_JOB_BG : PACKET_SUBMIT_JOB;
}

bool
client_job_fits(const char *func, const char *unique, size_t len)
{
    /* Room for the function, the unique key, SUBMIT_JOB_EPOCH's time, and the NULs between. */
    size_t room = (size_t)UINT32_MAX - 32;
    size_t fixed = strlen(func) + (unique != NULL ? strlen(unique) : 0);

    return fixed <= room && len <= room - fixed;
}

bool
client_failover(int err)
{
    return err == DSJOB_ERR_SYS || err == DSJOB_ERR_CLOSED || err == DSJOB_ERR_NOTFOUND ||
           err == DSJOB_ERR_PROTO;
}

struct dsjob_client *
dsjob_client_new(void)
{
    struct dsjob_client *c = dsjob_malloc(sizeof(*c));

    if (c == NULL)
        return NULL;
    memset(c, 0, sizeof(*c));
    c->connect_ms = 5000;
    c->io_ms = 0;
    return c;
}

void
dsjob_client_free(struct dsjob_client *c)
{
    size_t i;

    if (c == NULL)
        return;
    for (i = 0; i < c->nlinks; i++)
        link_release(&c->links[i]);
    link_tls_free(c->tls);
    dsjob_free(c->after);
    dsjob_free(c->links);
    dsjob_free(c->ring);
    dsjob_free(c);
}

/* Sets c->errmsg and returns err, for return client_err(...). */
static int client_err(struct dsjob_client *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
client_err(struct dsjob_client *c, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
    va_end(ap);
    return err;
}

int
dsjob_client_add_server(struct dsjob_client *c, const char *addr)
{
    struct link l;
    int err;

    c->errmsg[0] = '\0';
    err = link_init(&l, addr);
    if (err != DSJOB_OK)
        return client_err(c, err, "bad server address '%s'", addr ? addr : "(null)");
    link_set_tls(&l, c->tls, c->tls_flags);
    if (c->nlinks == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 4;
        struct link *nl = dsjob_malloc(ncap * sizeof(*nl));

        if (nl == NULL) {
            link_release(&l);
            return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
        }
        if (c->nlinks > 0)
            memcpy(nl, c->links, c->nlinks * sizeof(*nl));
        dsjob_free(c->links);
        c->links = nl;
        c->cap = ncap;
    }
    l.expire_set = c->expire_set;
    l.expire_ms = c->expire_ms;
    l.batch_set = c->batch_set;
    memcpy(l.batch, c->batch, sizeof(l.batch));
    c->links[c->nlinks++] = l;
    if (ring_build(c) != DSJOB_OK) {
        link_release(&c->links[--c->nlinks]);
        return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
    }
    return DSJOB_OK;
}

int
dsjob_client_set_tls(struct dsjob_client *c, const char *ca_file, const char *cert_file,
                     const char *key_file, unsigned flags)
{
    char why[CLIENT_ERR_LEN - 16];
    struct ssl_ctx_st *ctx;
    size_t i;

    c->errmsg[0] = '\0';
    ctx = link_tls_new(ca_file, cert_file, key_file, flags, why, sizeof(why));
    if (ctx == NULL)
        return client_err(c, DSJOB_ERR_ARG, "tls: %s", why);
    for (i = 0; i < c->nlinks; i++) {
        link_close(&c->links[i]); /* the next call connects again, with TLS */
        link_set_tls(&c->links[i], ctx, flags);
    }
    link_tls_free(c->tls);
    c->tls = ctx;
    c->tls_flags = flags;
    return DSJOB_OK;
}

void
dsjob_client_set_timeout(struct dsjob_client *c, int connect_ms, int io_ms)
{
    c->connect_ms = connect_ms;
    c->io_ms = io_ms;
}

void
dsjob_client_set_callbacks(struct dsjob_client *c, const struct dsjob_client_callbacks *cb,
                           void *user)
{
    if (cb != NULL)
        c->cb = *cb;
    else
        memset(&c->cb, 0, sizeof(c->cb));
    c->cb_user = user;
}

const char *
dsjob_client_errmsg(const struct dsjob_client *c)
{
    return c->errmsg;
}

unsigned
client_arg_uint(const unsigned char *p, size_t len)
{
    return (unsigned)decimal_atoi(p, len, UINT_MAX);
}

static bool
arg_is(const struct packet *p, unsigned i, const char *s, size_t len)
{
    return p->nargs > i && p->arg_len[i] == len && memcmp(p->arg[i], s, len) == 0;
}

/* Records an ERROR packet's code and text in errmsg; returns DSJOB_ERR_SERVER. */
static int
client_server_error(struct dsjob_client *c, struct link *l, const struct packet *p)
{
    return client_err(
        c, DSJOB_ERR_SERVER, "%s: %.*s: %.*s", l->addr, (int)(p->nargs > 0 ? p->arg_len[0] : 0),
        p->nargs > 0 ? (const char *)p->arg[0] : "", (int)(p->nargs > 1 ? p->arg_len[1] : 0),
        p->nargs > 1 ? (const char *)p->arg[1] : "");
}

/*
 * Connects l and flushes what is queued; closes it on failure. A server
 * that closed while we wrote may have said why first (PACKET_TOO_LARGE):
 * that is DSJOB_ERR_SERVER with its text, not a connection failure.
 */
static int
client_send(struct dsjob_client *c, struct link *l)
{
    int err = link_connect(l, c->connect_ms);
    struct packet p;

    if (err == DSJOB_OK)
        err = link_flush(l, link_deadline(c->io_ms));
    if (err == DSJOB_OK)
        return DSJOB_OK;
    client_err(c, err, "%s", l->err);
    while (err == DSJOB_ERR_CLOSED && link_next(l, &p) > 0) {
        if (!client_hello_answer(l, &p) && p.type == PACKET_ERROR) {
            err = client_server_error(c, l, &p);
            break;
        }
    }
    link_close(l);
    return err;
}

/*
 * Waits on l for the next packet that is not the preamble's answer.
 * Returns DSJOB_OK with *p, DSJOB_ERR_SERVER for an ERROR packet, or an I/O
 * error (l is then closed); errmsg says why. job is the handle of the job
 * being followed, so that a timeout blames the job and not the server, or
 * NULL while an answer of the server itself is awaited.
 */
static int
client_next(struct dsjob_client *c, struct link *l, struct packet *p, const char *job)
{
    int err;

    for (;;) {
        err = link_recv(l, p, link_deadline(c->io_ms));
        if (err == DSJOB_ERR_TIMEOUT && job != NULL)
            /* The server answered (JOB_CREATED): it is the job that did not end. */
            client_err(c, err, "job '%s' did not end in time (no word from '%s' for %d ms)", job,
                       l->addr, c->io_ms);
        else if (err != DSJOB_OK)
            client_err(c, err, "%s", l->err);
        if (err != DSJOB_OK) {
            link_close(l);
            return err;
        }
        if (client_hello_answer(l, p))
            continue;
        if (p->type == PACKET_ERROR)
            return client_server_error(c, l, p);
        return DSJOB_OK;
    }
}

/*
 * Waits on l for the JOB_CREATED that answers our submit, copying the
 * handle into handle (DSJOB_HANDLE_MAX bytes). Returns DSJOB_OK,
 * DSJOB_ERR_SERVER, or an I/O error (l is then closed). A handle too long
 * for the buffer is DSJOB_ERR_PROTO with *created set: the server has the
 * job, so it must not go to another server too.
 */
static int
client_wait_created(struct dsjob_client *c, struct link *l, char *handle, bool *created)
{
    struct packet p;
    int err;

    for (;;) {
        err = client_next(c, l, &p, NULL);
        if (err != DSJOB_OK)
            return err;
        if (p.type == PACKET_JOB_CREATED) {
            if (p.arg_len[0] >= DSJOB_HANDLE_MAX) {
                *created = true;
                link_close(l);
                return client_err(c, DSJOB_ERR_PROTO,
                                  "%s: job handle of %zu bytes, longer than DSJOB_HANDLE_MAX - 1 "
                                  "(the job was submitted)",
                                  l->addr, p.arg_len[0]);
            }
            memcpy(handle, p.arg[0], p.arg_len[0]);
            handle[p.arg_len[0]] = '\0';
            return DSJOB_OK;
        }
    }
}

/*
 * Follows a created foreground job on l to its end, calling the progress
 * callbacks. Returns DSJOB_OK with the result, JOB_FAILED, JOB_EXCEPTION,
 * or an I/O error (l is then closed).
 */
static int
client_wait_end(struct dsjob_client *c, struct link *l, const char *handle, void **result,
                size_t *result_len)
{
    size_t hlen = strlen(handle);
    struct packet p;
    int err;

    for (;;) {
        err = client_next(c, l, &p, handle);
        if (err != DSJOB_OK)
            return err;
        /* gearmand's WORK_FAIL after an exception has a stray NUL after the handle. */
        if (p.type == PACKET_WORK_FAIL && p.arg_len[0] == hlen + 1 && p.arg[0][hlen] == '\0')
            p.arg_len[0] = hlen;
        if (!arg_is(&p, 0, handle, hlen))
            continue;
        switch (p.type) {
        case PACKET_WORK_STATUS:
            if (c->cb.status != NULL)
                c->cb.status(client_arg_uint(p.arg[1], p.arg_len[1]),
                             client_arg_uint(p.arg[2], p.arg_len[2]), c->cb_user);
            break;
        case PACKET_WORK_DATA:
            if (c->cb.data != NULL)
                c->cb.data(p.arg[1], p.arg_len[1], c->cb_user);
            break;
        case PACKET_WORK_WARNING:
            if (c->cb.warning != NULL)
                c->cb.warning(p.arg[1], p.arg_len[1], c->cb_user);
            break;
        case PACKET_WORK_COMPLETE:
            if (result != NULL) {
                *result = client_dup(p.arg[1], p.arg_len[1]);
                if (*result == NULL)
                    return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
            }
            if (result_len != NULL)
                *result_len = p.arg_len[1];
            return DSJOB_OK;
        case PACKET_WORK_FAIL: return client_err(c, DSJOB_ERR_JOB_FAILED, "job %s failed", handle);
        case PACKET_WORK_EXCEPTION:
            return client_err(c, DSJOB_ERR_JOB_EXCEPTION, "%.*s", (int)p.arg_len[1],
                              (const char *)p.arg[1]);
        default: break;
        }
    }
}

static int
check_job_args(struct dsjob_client *c, const char *func, const char *unique, const void *data,
               size_t len)
{
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    if (func == NULL || *func == '\0')
        return client_err(c, DSJOB_ERR_ARG, "empty function name");
    if (data == NULL && len > 0)
        return client_err(c, DSJOB_ERR_ARG, "NULL data with a length");
    if (unique != NULL && strlen(unique) > CLIENT_MAX_UNIQUE)
        return client_err(c, DSJOB_ERR_ARG, "unique key longer than %d bytes", CLIENT_MAX_UNIQUE);
    if (!client_job_fits(func, unique, len))
        return client_err(c, DSJOB_ERR_ARG,
                          "a payload of %zu bytes is over the %" PRIu32
                          " bytes a Gearman packet can hold",
                          len, UINT32_MAX);
    return DSJOB_OK;
}

/*
 * The options of a dependent submit (dsjob_client_set_after), sent and
 * answered before the submit itself, so that a server that does not know
 * them (gearmand: ERROR) never gets a job that would run at once.
 */
static int
client_send_after(struct dsjob_client *c, struct link *l)
{
    static const char *const names[] = {"fail", "cancel", "run"};
    char fail[32];
    const void *args[1] = {c->after};
    size_t lens[1] = {c->after_len};
    struct packet p;
    int err, i;

    err = link_queue(l, PACKET_OPTION_REQ, 1, args, lens);
    args[0] = fail;
    lens[0] = (size_t)snprintf(fail, sizeof(fail), "after-fail=%s", names[c->after_fail]);
    if (err == DSJOB_OK)
        err = link_queue(l, PACKET_OPTION_REQ, 1, args, lens);
    if (err != DSJOB_OK)
        return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
    err = client_send(c, l);
    for (i = 0; i < 2 && err == DSJOB_OK; i++) {
        err = client_next(c, l, &p, NULL);
        if (err == DSJOB_OK && p.type != PACKET_OPTION_RES)
            err = client_err(c, DSJOB_ERR_PROTO, "%s: unexpected answer to OPTION_REQ after",
                             l->addr);
    }
    if (err == DSJOB_ERR_SERVER)
        link_close(l); /* the submit was not sent: nothing of it to read */
    return err;
}

/* A dependent submit a server refused because it does not know a parent: try the next. */
static bool
client_after_elsewhere(const struct dsjob_client *c, int err)
{
    return c->after != NULL && err == DSJOB_ERR_SERVER && strstr(c->errmsg, "DEPENDENCY") &&
           strstr(c->errmsg, "no job ") != NULL;
}

/* dsjob_client_set_after's options are for one submit call, whatever becomes of it. */
static int
client_after_spent(struct dsjob_client *c, int err)
{
    dsjob_free(c->after);
    c->after = NULL;
    c->after_len = 0;
    return err;
}

/*
 * Submits one job of the given packet type (args already laid out) to the
 * servers in turn from the picked one, and follows it: to JOB_CREATED for a
 * background job, to its end for a foreground one. A dependent submit
 * (c->after) sends its options first, and goes on to the next server when
 * one does not know a parent.
 */
static int
client_run(struct dsjob_client *c, uint32_t type, const char *unique, unsigned nargs,
           const void *const *args, const size_t *lens, bool background, void **result,
           size_t *result_len, char *handle_buf, size_t handle_cap)
{
    size_t first = client_pick(c, unique), k;
    char handle[DSJOB_HANDLE_MAX];
    bool created = false;
    int err = DSJOB_ERR_NOTFOUND;

    /* Before anything is sent, so that this error means no job was submitted. */
    if (handle_buf != NULL && handle_cap < DSJOB_HANDLE_MAX)
        return client_after_spent(
            c, client_err(c, DSJOB_ERR_ARG,
                          "handle buffer of %zu bytes, smaller than DSJOB_HANDLE_MAX (%d)",
                          handle_cap, DSJOB_HANDLE_MAX));

    for (k = 0; k < c->nlinks; k++) {
        struct link *l = &c->links[(first + k) % c->nlinks];

        if (client_prepare_hello(l) != DSJOB_OK ||
            (c->after == NULL && link_queue(l, type, nargs, args, lens) != DSJOB_OK)) {
            link_close(l);
            return client_after_spent(c, client_err(c, DSJOB_ERR_NOMEM, "out of memory"));
        }
        err = link_connect(l, c->connect_ms);
        if (err != DSJOB_OK) {
            /* Nothing reached this server: always worth trying the next. */
            client_err(c, err, "%s", l->err);
            link_close(l);
            continue;
        }
        if (c->after != NULL) {
            err = client_send_after(c, l);
            if (err == DSJOB_OK && link_queue(l, type, nargs, args, lens) != DSJOB_OK)
                err = client_err(c, DSJOB_ERR_NOMEM, "out of memory");
            if (err != DSJOB_OK && !client_failover(err))
                break;
            if (err != DSJOB_OK)
                continue;
        }
        err = client_send(c, l);
        if (err == DSJOB_OK)
            err = client_wait_created(c, l, handle, &created);
        if (err == DSJOB_OK && !background)
            err = client_wait_end(c, l, handle, result, result_len);
        if (client_after_elsewhere(c, err) && k + 1 < c->nlinks) {
            link_close(l);
            continue;
        }
        if (err == DSJOB_OK || created || !client_failover(err))
            break;
    }
    client_after_spent(c, DSJOB_OK);
    if ((err == DSJOB_ERR_TIMEOUT || err == DSJOB_ERR_SERVER) && k < c->nlinks) {
        /*
         * The stream's state is unknown, or the server refused the job and
         * may be closing (PACKET_TOO_LARGE): start afresh next time.
         */
        link_close(&c->links[(first + k) % c->nlinks]);
    }
    if (err != DSJOB_OK)
        return err;
    if (handle_buf != NULL)
        memcpy(handle_buf, handle, strlen(handle) + 1);
    return DSJOB_OK;
}

int
dsjob_client_submit(struct dsjob_client *c, const char *func, const char *unique, const void *data,
                    size_t len, enum dsjob_priority prio, void **result, size_t *result_len)
{
    const void *args[3] = {func, unique ? unique : "", data ? data : ""};
    size_t lens[3];
    int err;

    c->errmsg[0] = '\0';
    if (result != NULL)
        *result = NULL;
    if (result_len != NULL)
        *result_len = 0;
    err = check_job_args(c, func, unique, data, len);
    if (err != DSJOB_OK)
        return client_after_spent(c, err);
    lens[0] = strlen(func);
    lens[1] = unique ? strlen(unique) : 0;
    lens[2] = len;
    return client_run(c, client_submit_type(false, prio), unique, 3, args, lens, false, result,
                      result_len, NULL, 0);
}

int
dsjob_client_submit_bg(struct dsjob_client *c, const char *func, const char *unique,
                       const void *data, size_t len, enum dsjob_priority prio, char *handle_buf,
                       size_t handle_cap)
{
    const void *args[3] = {func, unique ? unique : "", data ? data : ""};
    size_t lens[3];
    int err;

    c->errmsg[0] = '\0';
    err = check_job_args(c, func, unique, data, len);
    if (err != DSJOB_OK)
        return client_after_spent(c, err);
    lens[0] = strlen(func);
    lens[1] = unique ? strlen(unique) : 0;
    lens[2] = len;
    return client_run(c, client_submit_type(true, prio), unique, 3, args, lens, true, NULL, NULL,
                      handle_buf, handle_cap);
}

int
dsjob_client_submit_epoch(struct dsjob_client *c, const char *func, const char *unique,
                          const void *data, size_t len, int64_t epoch, char *handle_buf,
                          size_t handle_cap)
{
    char when[32];
    const void *args[4] = {func, unique ? unique : "", when, data ? data : ""};
    size_t lens[4];
    int err;

    c->errmsg[0] = '\0';
    err = check_job_args(c, func, unique, data, len);
    if (err != DSJOB_OK)
        return client_after_spent(c, err);
    if (epoch < 0)
        return client_after_spent(c, client_err(c, DSJOB_ERR_ARG, "negative epoch time"));
    lens[0] = strlen(func);
    lens[1] = unique ? strlen(unique) : 0;
    lens[2] = (size_t)snprintf(when, sizeof(when), "%lld", (long long)epoch);
    lens[3] = len;
    return client_run(c, PACKET_SUBMIT_JOB_EPOCH, unique, 4, args, lens, true, NULL, NULL,
                      handle_buf, handle_cap);
}

/*
 * Sends one request to server i and waits for a packet of type want,
 * skipping others. Returns DSJOB_OK with *p, DSJOB_ERR_SERVER, or an I/O
 * error (the link is then closed).
 */
static int
client_ask(struct dsjob_client *c, size_t i, uint32_t type, const void *arg, size_t len,
           uint32_t want, struct packet *p)
{
    struct link *l = &c->links[i];
    const void *args[1] = {arg};
    size_t lens[1] = {len};
    int err;

    if (client_prepare_hello(l) != DSJOB_OK || link_queue(l, type, 1, args, lens) != DSJOB_OK) {
        link_close(l);
        return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
    }
    err = client_send(c, l);
    while (err == DSJOB_OK) {
        err = client_next(c, l, p, NULL);
        if (err == DSJOB_OK && p->type == want)
            return DSJOB_OK;
    }
    return err;
}

/* Asks the servers in turn from first; fills st from the first that knows the job. */
static int
client_status_any(struct dsjob_client *c, size_t first, uint32_t type, const char *key,
                  struct dsjob_status *st)
{
    uint32_t want = type == PACKET_GET_STATUS ? PACKET_STATUS_RES : PACKET_STATUS_RES_UNIQUE;
    int err = DSJOB_ERR_NOTFOUND, answered = 0;
    size_t k;

    memset(st, 0, sizeof(*st));
    c->errmsg[0] = '\0';
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    if (key == NULL)
        return client_err(c, DSJOB_ERR_ARG, "NULL key");
    for (k = 0; k < c->nlinks; k++) {
        struct packet p;
        size_t klen = strlen(key);

        err = client_ask(c, (first + k) % c->nlinks, type, key, klen, want, &p);
        if (err != DSJOB_OK)
            continue;
        answered = 1;
        if (p.nargs < 5 || !arg_is(&p, 0, key, klen))
            continue;
        if (client_arg_uint(p.arg[1], p.arg_len[1]) == 0)
            continue;
        st->known = 1;
        st->running = client_arg_uint(p.arg[2], p.arg_len[2]) != 0;
        st->numerator = client_arg_uint(p.arg[3], p.arg_len[3]);
        st->denominator = client_arg_uint(p.arg[4], p.arg_len[4]);
        if (want == PACKET_STATUS_RES_UNIQUE && p.nargs > 5)
            st->waiting = client_arg_uint(p.arg[5], p.arg_len[5]);
        c->errmsg[0] = '\0';
        return DSJOB_OK;
    }
    if (answered) {
        c->errmsg[0] = '\0';
        return DSJOB_OK;
    }
    return err;
}

int
dsjob_client_status(struct dsjob_client *c, const char *handle, struct dsjob_status *st)
{
    return client_status_any(c, 0, PACKET_GET_STATUS, handle, st);
}

int
dsjob_client_status_unique(struct dsjob_client *c, const char *unique, struct dsjob_status *st)
{
    size_t first = 0;

    if (c->nlinks > 1 && unique != NULL && *unique != '\0') {
        size_t saved = c->rr;

        first = client_pick(c, unique);
        c->rr = saved;
    }
    return client_status_any(c, first, PACKET_GET_STATUS_UNIQUE, unique, st);
}

int
dsjob_client_echo(struct dsjob_client *c, const void *data, size_t len)
{
    size_t i;
    int err;

    c->errmsg[0] = '\0';
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    if (data == NULL && len > 0)
        return client_err(c, DSJOB_ERR_ARG, "NULL data with a length");
    for (i = 0; i < c->nlinks; i++) {
        struct packet p;

        err = client_ask(c, i, PACKET_ECHO_REQ, data ? data : "", len, PACKET_ECHO_RES, &p);
        if (err != DSJOB_OK)
            return err;
        if (p.arg_len[0] != len || (len > 0 && memcmp(p.arg[0], data, len) != 0))
            return client_err(c, DSJOB_ERR_PROTO, "%s: echo differs", c->links[i].addr);
    }
    return DSJOB_OK;
}

/*
 * Flow control over the admin text protocol: one line to every server, on
 * a connection of its own (the admin protocol's answer has no packet
 * framing), its answer read to its end: a line, or with show a listing
 * ending in ".". Only the first server's listing is kept.
 */
static int
client_admin(struct dsjob_client *c, const char *line, bool show, bool keep, size_t nservers,
             char **out)
{
    int64_t deadline = link_deadline(c->io_ms > 0 ? c->io_ms : -1);
    size_t i;
    int err = DSJOB_OK;

    for (i = 0; i < c->nlinks && i < nservers && err == DSJOB_OK; i++) {
        struct link l;
        char *buf = NULL;
        size_t len = 0;

        if (link_init(&l, c->links[i].addr) != DSJOB_OK)
            return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
        if (c->tls != NULL)
            link_set_tls(&l, c->tls, c->tls_flags);
        err = link_connect(&l, c->connect_ms);
        if (err == DSJOB_OK && link_queue_raw(&l, line, strlen(line)) != DSJOB_OK)
            err = link_set_err(&l, DSJOB_ERR_NOMEM, "out of memory");
        while (err == DSJOB_OK) {
            size_t n;
            char *nb;

            err = link_recv_some(&l, deadline);
            if (err != DSJOB_OK)
                break;
            n = l.in_len - l.in_off;
            if (len + n > (1u << 24) || (nb = realloc(buf, len + n + 1)) == NULL) {
                err = link_set_err(&l, DSJOB_ERR_NOMEM, "reply too long or out of memory");
                break;
            }
            buf = nb;
            memcpy(buf + len, l.in + l.in_off, n);
            l.in_off += n;
            len += n;
            buf[len] = '\0';
            if (strncmp(buf, "ERR ", 4) == 0 && strchr(buf, '\n') != NULL)
                break;
            if (!show && strchr(buf, '\n') != NULL)
                break;
            if (show &&
                (strcmp(buf, ".\n") == 0 || (len >= 3 && strcmp(buf + len - 3, "\n.\n") == 0)))
                break;
        }
        if (err != DSJOB_OK) {
            client_err(c, err, "%s: %s", c->links[i].addr, l.err);
        } else if (strncmp(buf, "ERR ", 4) == 0) {
            char *p;

            buf[strcspn(buf, "\r\n")] = '\0';
            for (p = buf; *p != '\0'; p++)
                if (*p == '+')
                    *p = ' ';
            err = client_err(c, DSJOB_ERR_SERVER, "%s: %s", c->links[i].addr, buf + 4);
        } else if ((show || keep) && out != NULL && *out == NULL) {
            *out = client_dup(buf, show ? len - 2 : strcspn(buf, "\r\n")); /* without "." */
            if (*out == NULL)
                err = client_err(c, DSJOB_ERR_NOMEM, "out of memory");
        }
        free(buf);
        link_release(&l);
    }
    return err;
}

/* A function name or settings fit for one admin line: no control bytes. */
static bool
client_line_ok(const char *s, bool spaces)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || (!spaces && *s == ' '))
            return false;
    return true;
}

int
dsjob_client_limit(struct dsjob_client *c, const char *func, const char *settings, char **out)
{
    char *line;
    size_t n;
    int err;

    c->errmsg[0] = '\0';
    if (out != NULL)
        *out = NULL;
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    if (func == NULL || func[0] == '\0' || !client_line_ok(func, false) ||
        (settings != NULL && !client_line_ok(settings, true)))
        return client_err(c, DSJOB_ERR_ARG, "bad function name or settings");
    n = strlen(func) + (settings ? strlen(settings) : 0) + 16;
    line = malloc(n);
    if (line == NULL)
        return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
    snprintf(line, n, "limit %s%s%s\n", func, settings ? " " : "", settings ? settings : "");
    err = client_admin(c, line, settings == NULL, false, c->nlinks, out);
    free(line);
    return err;
}

int
dsjob_client_pause(struct dsjob_client *c, const char *func)
{
    return dsjob_client_limit(c, func, "paused", NULL);
}

int
dsjob_client_resume(struct dsjob_client *c, const char *func)
{
    return dsjob_client_limit(c, func, "resumed", NULL);
}

#define CLIENT_SCHED_NAME_MAX 64 /* longest schedule name dsjobd takes */

/* A word of a schedule line in quotes it does not hold, into *out (malloc'd). */
static int
client_sched_quote(struct dsjob_client *c, const char *what, const char *w, char **out)
{
    char q = strchr(w, '\'') == NULL ? '\'' : '"';
    size_t n = strlen(w);

    if (strchr(w, q) != NULL || !client_line_ok(w, true))
        return client_err(c, DSJOB_ERR_ARG, "%s holds both quote characters or a control byte",
                          what);
    if ((*out = malloc(n + 3)) == NULL)
        return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
    (*out)[0] = q;
    memcpy(*out + 1, w, n);
    (*out)[n + 1] = q;
    (*out)[n + 2] = '\0';
    return DSJOB_OK;
}

int
dsjob_client_schedule_add(struct dsjob_client *c, const char *name, const char *cron,
                          const char *func, const char *payload, const char *options)
{
    char *qcron = NULL, *qpay = NULL, *line = NULL;
    size_t n;
    int err;

    c->errmsg[0] = '\0';
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    if (name == NULL || name[0] == '\0' || !client_line_ok(name, false) || cron == NULL ||
        func == NULL || func[0] == '\0' || !client_line_ok(func, false) ||
        (options != NULL && !client_line_ok(options, true)))
        return client_err(c, DSJOB_ERR_ARG, "bad schedule name, function or options");
    if ((err = client_sched_quote(c, "the cron expression", cron, &qcron)) != DSJOB_OK ||
        (payload != NULL &&
         (err = client_sched_quote(c, "the payload", payload, &qpay)) != DSJOB_OK)) {
        free(qcron);
        return err;
    }
    n = strlen(name) + strlen(qcron) + strlen(func) + (qpay ? strlen(qpay) : 0) +
        (options ? strlen(options) : 0) + 32;
    if ((line = malloc(n)) == NULL) {
        err = client_err(c, DSJOB_ERR_NOMEM, "out of memory");
    } else {
        snprintf(line, n, "schedule add %s %s %s%s%s%s%s\n", name, qcron, func, qpay ? " " : "",
                 qpay ? qpay : "", options ? " " : "", options ? options : "");
        err = client_admin(c, line, false, false, c->nlinks, NULL);
    }
    free(line);
    free(qcron);
    free(qpay);
    return err;
}

int
dsjob_client_schedule(struct dsjob_client *c, const char *verb, const char *name)
{
    char line[CLIENT_SCHED_NAME_MAX + 32];

    c->errmsg[0] = '\0';
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    if (verb == NULL ||
        (strcmp(verb, "pause") != 0 && strcmp(verb, "resume") != 0 && strcmp(verb, "rm") != 0))
        return client_err(c, DSJOB_ERR_ARG, "unknown schedule verb '%s' (want pause, resume, rm)",
                          verb ? verb : "(null)");
    if (name == NULL || name[0] == '\0' || strlen(name) > CLIENT_SCHED_NAME_MAX ||
        !client_line_ok(name, false))
        return client_err(c, DSJOB_ERR_ARG, "bad schedule name");
    snprintf(line, sizeof(line), "schedule %s %s\n", verb, name);
    return client_admin(c, line, false, false, c->nlinks, NULL);
}

int
dsjob_client_schedule_list(struct dsjob_client *c, char **out)
{
    c->errmsg[0] = '\0';
    if (out == NULL)
        return client_err(c, DSJOB_ERR_ARG, "out is NULL");
    *out = NULL;
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    return client_admin(c, "schedule list\n", true, false, c->nlinks, out);
}

int
dsjob_client_set_after(struct dsjob_client *c, const char *const *handles, size_t n,
                       enum dsjob_after_fail policy)
{
    size_t i, len = 6;
    char *s, *at;

    c->errmsg[0] = '\0';
    if ((int)policy < DSJOB_AFTER_FAIL || policy > DSJOB_AFTER_RUN)
        return client_err(c, DSJOB_ERR_ARG, "unknown after-fail policy %d", (int)policy);
    for (i = 0; i < n; i++) {
        if (handles[i] == NULL || handles[i][0] == '\0' || strchr(handles[i], ',') != NULL)
            return client_err(c, DSJOB_ERR_ARG, "after: handle %zu is empty or has a comma", i);
        len += strlen(handles[i]) + 1;
    }
    s = NULL;
    if (n > 0) {
        s = dsjob_malloc(len);
        if (s == NULL)
            return client_err(c, DSJOB_ERR_NOMEM, "out of memory");
        memcpy(s, "after=", 6);
        at = s + 6;
        for (i = 0; i < n; i++) {
            size_t hl = strlen(handles[i]);

            if (i > 0)
                *at++ = ',';
            memcpy(at, handles[i], hl);
            at += hl;
        }
        *at = '\0';
        len = (size_t)(at - s);
    }
    dsjob_free(c->after);
    c->after = s;
    c->after_len = s != NULL ? len : 0;
    c->after_fail = policy;
    return DSJOB_OK;
}

/* A batch id as dsjobd takes it: 1 to 64 of [A-Za-z0-9_.:-]. */
static bool
client_batch_id_ok(const char *id)
{
    size_t n = 0;

    if (id == NULL)
        return false;
    for (; id[n] != '\0'; n++)
        if (!((id[n] >= 'a' && id[n] <= 'z') || (id[n] >= 'A' && id[n] <= 'Z') ||
              (id[n] >= '0' && id[n] <= '9') || strchr("_.:-", id[n]) != NULL))
            return false;
    return n > 0 && n <= 64;
}

/* One batch line to the first server, its answer line kept in *out if asked. */
static int
client_batch_line(struct dsjob_client *c, const char *line, char **out)
{
    if (c->nlinks == 0)
        return client_err(c, DSJOB_ERR_ARG, "no server added");
    return client_admin(c, line, false, out != NULL, 1, out);
}

int
dsjob_client_batch_open(struct dsjob_client *c, const char *id, const char *on_complete,
                        const char *on_success)
{
    char line[64 + 2 * 540];

    c->errmsg[0] = '\0';
    if (!client_batch_id_ok(id))
        return client_err(c, DSJOB_ERR_ARG, "bad batch id (1 to 64 of A-Z a-z 0-9 _ . : -)");
    if ((on_complete != NULL &&
         (!client_line_ok(on_complete, false) || strlen(on_complete) > 512)) ||
        (on_success != NULL && (!client_line_ok(on_success, false) || strlen(on_success) > 512)))
        return client_err(c, DSJOB_ERR_ARG, "bad callback function name");
    snprintf(line, sizeof(line), "batch open %s%s%s%s%s\n", id,
             on_complete && *on_complete ? " on-complete=" : "",
             on_complete && *on_complete ? on_complete : "",
             on_success && *on_success ? " on-success=" : "",
             on_success && *on_success ? on_success : "");
    return client_batch_line(c, line, NULL);
}

int
dsjob_client_batch_close(struct dsjob_client *c, const char *id)
{
    char line[96];

    c->errmsg[0] = '\0';
    if (!client_batch_id_ok(id))
        return client_err(c, DSJOB_ERR_ARG, "bad batch id (1 to 64 of A-Z a-z 0-9 _ . : -)");
    snprintf(line, sizeof(line), "batch close %s\n", id);
    return client_batch_line(c, line, NULL);
}

int
dsjob_client_batch_status(struct dsjob_client *c, const char *id, char **out)
{
    char line[96];

    c->errmsg[0] = '\0';
    if (out != NULL)
        *out = NULL;
    if (!client_batch_id_ok(id))
        return client_err(c, DSJOB_ERR_ARG, "bad batch id (1 to 64 of A-Z a-z 0-9 _ . : -)");
    snprintf(line, sizeof(line), "batch status %s\n", id);
    return client_batch_line(c, line, out);
}

int
dsjob_client_set_batch(struct dsjob_client *c, const char *id)
{
    size_t i;

    c->errmsg[0] = '\0';
    if (id != NULL && *id != '\0' && !client_batch_id_ok(id))
        return client_err(c, DSJOB_ERR_ARG, "bad batch id (1 to 64 of A-Z a-z 0-9 _ . : -)");
    /* "" tells the servers to forget it (batch=); NULL too, once it was set. */
    snprintf(c->batch, sizeof(c->batch), "%s", id != NULL ? id : "");
    c->batch_set = true;
    /* Said again, before the next request on each connection. */
    for (i = 0; i < c->nlinks; i++) {
        memcpy(c->links[i].batch, c->batch, sizeof(c->batch));
        c->links[i].batch_set = true;
        c->links[i].hello = false;
    }
    return DSJOB_OK;
}

int
dsjob_client_set_expire_in(struct dsjob_client *c, int64_t ms)
{
    size_t i;

    if (ms < 0)
        return client_err(c, DSJOB_ERR_ARG, "expire-in of %lld ms is negative", (long long)ms);
    c->expire_ms = ms;
    c->expire_set = true;
    /* Said again, before the next request on each connection. */
    for (i = 0; i < c->nlinks; i++) {
        c->links[i].expire_set = true;
        c->links[i].expire_ms = ms;
        c->links[i].hello = false;
    }
    return DSJOB_OK;
}
