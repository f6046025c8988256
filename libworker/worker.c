/*
 * libdsjobworker: a worker keeps one connection per server, each in one of
 * four states: down (waiting for its next connect attempt), idle (must ask
 * for a job), grabbing (GRAB_JOB_UNIQ sent, answer due) or sleeping
 * (PRE_SLEEP sent, NOOP awaited). dsjob_worker_work polls every connection
 * and the stop pipe at once, advances the states on each packet, and runs
 * the first job assigned; packets read but not yet handled stay in the
 * connection's buffer for the next call. A connection that fails goes
 * down and is retried with exponential backoff; on reconnect every
 * function is announced again.
 *
 * The connections live in a struct wctx. The worker's own one serves
 * dsjob_worker_work; dsjob_worker_run with a concurrency of N adds N - 1
 * threads with a wctx each, made and freed by that call, so that the
 * threads share nothing writable but the stop and halt flags. The stop
 * pipe is never drained once stopped: it stays readable and so wakes
 * every thread's poll, however many there are.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/worker.h>

#include "link/link.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000
#define GIVEBACK_MIN_MS 1000 /* the first pause after a job given back */
#define WORKER_ERR_LEN 512

enum wlink_state {
    WLINK_DOWN,     /* not connected; retry at next_try */
    WLINK_IDLE,     /* connected, must send GRAB_JOB_UNIQ */
    WLINK_GRABBING, /* GRAB_JOB_UNIQ sent */
    WLINK_SLEEPING, /* PRE_SLEEP sent, waiting for NOOP */
};

struct wlink {
    struct link l;          /* the connection */
    enum wlink_state state; /* see enum wlink_state */
    int64_t next_try;       /* link_now_ms() of the next connect attempt */
    int backoff_ms;         /* delay before the attempt after a failure */
    int giveback_ms;        /* pause after the last job given back; 0: none in a row */
};

struct wfunc {
    char *name;         /* function name (owned) */
    dsjob_worker_fn fn; /* its callback */
    void *user;         /* the callback's pointer */
    int timeout_ms;     /* > 0: CAN_DO_TIMEOUT */
};

/* One thread's connections: one per server. */
struct wctx {
    struct dsjob_worker *w;      /* the worker it belongs to */
    struct wlink *links;         /* one per server (owned) */
    size_t nlinks;               /* servers */
    char errmsg[WORKER_ERR_LEN]; /* detail of this context's last failure */
    bool looping;                /* in run(): ask for the next job along with each result */
};

struct dsjob_worker {
    struct wctx main;       /* connections of work(), and of run()'s first thread */
    struct wfunc *funcs;    /* registered functions (owned) */
    size_t nfuncs;          /* how many */
    char *id;               /* SET_CLIENT_ID, NULL for none (owned) */
    int connect_ms;         /* connect timeout */
    int io_ms;              /* I/O timeout for reports and results */
    int concurrency;        /* threads of dsjob_worker_run, >= 1 */
    int stop_pipe[2];       /* self-pipe written by dsjob_worker_stop and halt_all */
    atomic_int stop;        /* set by dsjob_worker_stop, for good (lock-free: signal-safe) */
    atomic_int halt;        /* a thread of run failed: the others end too */
    atomic_int failed;      /* 1 + index of the first thread of run that failed, 0 none */
    struct ssl_ctx_st *tls; /* TLS context of dsjob_worker_set_tls (owned), or NULL */
    unsigned tls_flags;     /* its DSJOB_TLS_* flags */
};

/* A thread of dsjob_worker_run beyond the caller's own. */
struct wthread {
    struct wctx x; /* its connections */
    pthread_t tid; /* the thread */
    int index;     /* 1 + its place in run's array: 0 is the caller's context */
    int err;       /* what its loop returned */
};

struct dsjob_job {
    struct wctx *x;        /* the connections of the thread running it */
    struct wlink *wl;      /* the connection it came on */
    char *handle;          /* into mem */
    char *func;            /* into mem */
    char *unique;          /* into mem */
    char *payload;         /* into mem, NUL after it */
    size_t len;            /* payload bytes */
    char *mem;             /* one allocation holding the four strings (owned) */
    unsigned char *result; /* result or exception text (owned) */
    size_t result_len;     /* its length */
    int err;               /* first report that failed */
};

static int ctx_err(struct wctx *x, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
ctx_err(struct wctx *x, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(x->errmsg, sizeof(x->errmsg), fmt, ap);
    va_end(ap);
    return err;
}

/* The loops of work and run end: stopped for good, or another thread failed. */
static bool
quitting(struct dsjob_worker *w)
{
    return atomic_load(&w->stop) || atomic_load(&w->halt);
}

static char *
dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = dsjob_malloc(n + 1);

    if (p != NULL)
        memcpy(p, s, n + 1);
    return p;
}

struct dsjob_worker *
dsjob_worker_new(void)
{
    struct dsjob_worker *w = dsjob_malloc(sizeof(*w));

    if (w == NULL)
        return NULL;
    memset(w, 0, sizeof(*w));
    if (pipe2(w->stop_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        dsjob_free(w);
        return NULL;
    }
    w->main.w = w;
    w->connect_ms = 5000;
    w->io_ms = 30000;
    w->concurrency = 1;
    atomic_init(&w->stop, 0);
    atomic_init(&w->halt, 0);
    atomic_init(&w->failed, 0);
    return w;
}

void
dsjob_worker_free(struct dsjob_worker *w)
{
    size_t i;

    if (w == NULL)
        return;
    for (i = 0; i < w->main.nlinks; i++)
        link_release(&w->main.links[i].l);
    for (i = 0; i < w->nfuncs; i++)
        dsjob_free(w->funcs[i].name);
    link_tls_free(w->tls);
    dsjob_free(w->main.links);
    dsjob_free(w->funcs);
    dsjob_free(w->id);
    close(w->stop_pipe[0]);
    close(w->stop_pipe[1]);
    dsjob_free(w);
}

int
dsjob_worker_add_server(struct dsjob_worker *w, const char *addr)
{
    struct wctx *x = &w->main;
    struct wlink *nl;
    int err;

    x->errmsg[0] = '\0';
    nl = dsjob_malloc((x->nlinks + 1) * sizeof(*nl));
    if (nl == NULL)
        return ctx_err(x, DSJOB_ERR_NOMEM, "out of memory");
    memset(&nl[x->nlinks], 0, sizeof(*nl));
    err = link_init(&nl[x->nlinks].l, addr);
    if (err != DSJOB_OK) {
        dsjob_free(nl);
        return ctx_err(x, err, "bad server address '%s'", addr ? addr : "(null)");
    }
    link_set_tls(&nl[x->nlinks].l, w->tls, w->tls_flags);
    if (x->nlinks > 0)
        memcpy(nl, x->links, x->nlinks * sizeof(*nl));
    nl[x->nlinks].state = WLINK_DOWN;
    nl[x->nlinks].backoff_ms = BACKOFF_MIN_MS;
    dsjob_free(x->links);
    x->links = nl;
    x->nlinks++;
    return DSJOB_OK;
}

int
dsjob_worker_set_tls(struct dsjob_worker *w, const char *ca_file, const char *cert_file,
                     const char *key_file, unsigned flags)
{
    char why[WORKER_ERR_LEN - 16];
    struct ssl_ctx_st *ctx;
    size_t i;

    w->main.errmsg[0] = '\0';
    ctx = link_tls_new(ca_file, cert_file, key_file, flags, why, sizeof(why));
    if (ctx == NULL)
        return ctx_err(&w->main, DSJOB_ERR_ARG, "tls: %s", why);
    for (i = 0; i < w->main.nlinks; i++) {
        struct wlink *wl = &w->main.links[i];

        if (wl->state != WLINK_DOWN) {
            /* Connect again, now with TLS (a job assigned and not run is requeued). */
            link_close(&wl->l);
            wl->state = WLINK_DOWN;
            wl->next_try = link_now_ms();
        }
        link_set_tls(&wl->l, ctx, flags);
    }
    link_tls_free(w->tls);
    w->tls = ctx;
    w->tls_flags = flags;
    return DSJOB_OK;
}

void
dsjob_worker_set_timeout(struct dsjob_worker *w, int connect_ms, int io_ms)
{
    w->connect_ms = connect_ms;
    w->io_ms = io_ms;
}

int
dsjob_worker_set_concurrency(struct dsjob_worker *w, int n)
{
    if (n < 1)
        return ctx_err(&w->main, DSJOB_ERR_ARG, "concurrency %d is not a positive number", n);
    w->concurrency = n;
    return DSJOB_OK;
}

const char *
dsjob_worker_errmsg(const struct dsjob_worker *w)
{
    return w->main.errmsg;
}

/* Queues the announcement of one function on a connected link. */
static int
queue_can_do(struct wlink *wl, const struct wfunc *f)
{
    char tmo[16];
    const void *args[2] = {f->name, tmo};
    size_t lens[2] = {strlen(f->name), 0};

    if (f->timeout_ms <= 0)
        return link_queue(&wl->l, PACKET_CAN_DO, 1, args, lens);
    lens[1] = (size_t)snprintf(tmo, sizeof(tmo), "%d", f->timeout_ms);
    return link_queue(&wl->l, PACKET_CAN_DO_TIMEOUT, 2, args, lens);
}

int
dsjob_worker_set_id(struct dsjob_worker *w, const char *id)
{
    char *copy;
    size_t i;

    if (id == NULL)
        return ctx_err(&w->main, DSJOB_ERR_ARG, "NULL id");
    copy = dup_str(id);
    if (copy == NULL)
        return ctx_err(&w->main, DSJOB_ERR_NOMEM, "out of memory");
    dsjob_free(w->id);
    w->id = copy;
    for (i = 0; i < w->main.nlinks; i++) {
        const void *args[1] = {w->id};
        size_t lens[1] = {strlen(w->id)};

        if (w->main.links[i].state != WLINK_DOWN &&
            link_queue(&w->main.links[i].l, PACKET_SET_CLIENT_ID, 1, args, lens) != DSJOB_OK)
            return ctx_err(&w->main, DSJOB_ERR_NOMEM, "out of memory");
    }
    return DSJOB_OK;
}

int
dsjob_worker_register(struct dsjob_worker *w, const char *name, dsjob_worker_fn fn, void *user,
                      int timeout_ms)
{
    struct wfunc *nf;
    size_t i;

    w->main.errmsg[0] = '\0';
    if (name == NULL || *name == '\0' || fn == NULL)
        return ctx_err(&w->main, DSJOB_ERR_ARG, "empty function name or NULL callback");
    for (i = 0; i < w->nfuncs; i++)
        if (strcmp(w->funcs[i].name, name) == 0)
            return ctx_err(&w->main, DSJOB_ERR_ARG, "function '%s' already registered", name);
    nf = dsjob_malloc((w->nfuncs + 1) * sizeof(*nf));
    if (nf == NULL)
        return ctx_err(&w->main, DSJOB_ERR_NOMEM, "out of memory");
    if (w->nfuncs > 0)
        memcpy(nf, w->funcs, w->nfuncs * sizeof(*nf));
    nf[w->nfuncs].name = dup_str(name);
    if (nf[w->nfuncs].name == NULL) {
        dsjob_free(nf);
        return ctx_err(&w->main, DSJOB_ERR_NOMEM, "out of memory");
    }
    nf[w->nfuncs].fn = fn;
    nf[w->nfuncs].user = user;
    nf[w->nfuncs].timeout_ms = timeout_ms;
    dsjob_free(w->funcs);
    w->funcs = nf;
    w->nfuncs++;
    for (i = 0; i < w->main.nlinks; i++) {
        struct wlink *wl = &w->main.links[i];

        if (wl->state == WLINK_DOWN)
            continue;
        if (queue_can_do(wl, &w->funcs[w->nfuncs - 1]) != DSJOB_OK)
            return ctx_err(&w->main, DSJOB_ERR_NOMEM, "out of memory");
        if (wl->state == WLINK_SLEEPING)
            wl->state = WLINK_IDLE; /* a job of the new function may be waiting */
    }
    return DSJOB_OK;
}

/* Takes a link down after a failure and schedules the next attempt. */
static void
wlink_down(struct wctx *x, struct wlink *wl, int err)
{
    ctx_err(x, err, "%s", wl->l.err);
    link_close(&wl->l);
    wl->state = WLINK_DOWN;
    wl->next_try = link_now_ms() + wl->backoff_ms;
    wl->backoff_ms = wl->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : wl->backoff_ms * 2;
}

/* Connects a down link whose time has come and announces every function. */
static int
wlink_up(struct wctx *x, struct wlink *wl)
{
    const struct dsjob_worker *w = x->w;
    int err = link_connect(&wl->l, w->connect_ms);
    size_t i;

    if (err != DSJOB_OK) {
        wlink_down(x, wl, err);
        return DSJOB_OK;
    }
    if (w->id != NULL) {
        const void *args[1] = {w->id};
        size_t lens[1] = {strlen(w->id)};

        if (link_queue(&wl->l, PACKET_SET_CLIENT_ID, 1, args, lens) != DSJOB_OK)
            return DSJOB_ERR_NOMEM;
    }
    for (i = 0; i < w->nfuncs; i++)
        if (queue_can_do(wl, &w->funcs[i]) != DSJOB_OK)
            return DSJOB_ERR_NOMEM;
    wl->state = WLINK_IDLE;
    return DSJOB_OK;
}

static int
wlink_send0(struct wlink *wl, uint32_t type, enum wlink_state next)
{
    if (link_queue(&wl->l, type, 0, NULL, NULL) != DSJOB_OK)
        return DSJOB_ERR_NOMEM;
    wl->state = next;
    return DSJOB_OK;
}

static const struct wfunc *
find_func(const struct dsjob_worker *w, const unsigned char *name, size_t len)
{
    size_t i;

    for (i = 0; i < w->nfuncs; i++)
        if (strlen(w->funcs[i].name) == len && memcmp(w->funcs[i].name, name, len) == 0)
            return &w->funcs[i];
    return NULL;
}

/*
 * Sends one packet for the job now (handle first) and waits until it is
 * written. For the job's last packet (its result) inside dsjob_worker_run,
 * which will take another job anyway, GRAB_JOB_UNIQ goes in the same
 * write: the server can read both at once and answer with the next job a
 * round trip sooner. dsjob_worker_work does not ask ahead, since its
 * caller may not call again (a job it was given would wait until the
 * connection closed).
 */
static int
job_send(struct dsjob_job *job, bool last, uint32_t type, unsigned nargs, const void *a1, size_t l1,
         const void *a2, size_t l2)
{
    const void *args[3] = {job->handle, a1, a2};
    size_t lens[3] = {strlen(job->handle), l1, l2};
    struct wlink *wl = job->wl;
    int err;

    if (wl->state == WLINK_DOWN)
        return job->err ? job->err : DSJOB_ERR_CLOSED;
    err = link_queue(&wl->l, type, nargs, args, lens);
    if (err == DSJOB_OK && last && job->x->looping && !quitting(job->x->w))
        err = wlink_send0(wl, PACKET_GRAB_JOB_UNIQ, WLINK_GRABBING);
    if (err == DSJOB_OK)
        err = link_flush(&wl->l, link_deadline(job->x->w->io_ms));
    if (err != DSJOB_OK) {
        job->err = err;
        wlink_down(job->x, wl, err);
    }
    return err;
}

/*
 * Runs the job of a JOB_ASSIGN_UNIQ (unique true) or JOB_ASSIGN packet
 * on wl and sends its result. Returns DSJOB_OK or DSJOB_ERR_NOMEM.
 */
static int
run_job(struct wctx *x, struct wlink *wl, const struct packet *p, bool unique)
{
    struct dsjob_job job;
    const struct wfunc *f = find_func(x->w, p->arg[1], p->arg_len[1]);
    size_t hl = p->arg_len[0], fl = p->arg_len[1];
    size_t ul = unique ? p->arg_len[2] : 0;
    unsigned di = unique ? 3 : 2;
    size_t dl = p->arg_len[di];
    char *m;
    int r;

    memset(&job, 0, sizeof(job));
    job.x = x;
    job.wl = wl;
    job.mem = m = dsjob_malloc(hl + fl + ul + dl + 4);
    if (m == NULL)
        return DSJOB_ERR_NOMEM;
    job.handle = m;
    memcpy(m, p->arg[0], hl);
    m[hl] = '\0';
    job.func = m += hl + 1;
    memcpy(m, p->arg[1], fl);
    m[fl] = '\0';
    job.unique = m += fl + 1;
    if (ul > 0)
        memcpy(m, p->arg[2], ul);
    m[ul] = '\0';
    job.payload = m += ul + 1;
    if (dl > 0)
        memcpy(m, p->arg[di], dl);
    m[dl] = '\0';
    job.len = dl;
    wl->state = WLINK_IDLE;
    r = f != NULL ? f->fn(&job, f->user) : DSJOB_WORK_FAIL;
    if (r == DSJOB_WORK_COMPLETE)
        job_send(&job, true, PACKET_WORK_COMPLETE, 2, job.result ? (const void *)job.result : "",
                 job.result_len, NULL, 0);
    else if (r == DSJOB_WORK_EXCEPTION)
        job_send(&job, true, PACKET_WORK_EXCEPTION, 2, job.result ? (const void *)job.result : "",
                 job.result_len, NULL, 0);
    else if (r != DSJOB_WORK_GIVE_BACK)
        job_send(&job, true, PACKET_WORK_FAIL, 1, NULL, 0, NULL, 0);
    if (r == DSJOB_WORK_GIVE_BACK) {
        /* No packet hands a job back: a closed connection makes the server requeue it. */
        wl->giveback_ms = wl->giveback_ms == 0                   ? GIVEBACK_MIN_MS
                          : wl->giveback_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                                 : wl->giveback_ms * 2;
        link_close(&wl->l);
        wl->state = WLINK_DOWN;
        wl->next_try = link_now_ms() + wl->giveback_ms;
    } else {
        wl->giveback_ms = 0;
    }
    dsjob_free(job.result);
    dsjob_free(job.mem);
    return DSJOB_OK;
}

/*
 * Handles the packets already read on wl. Sets *ran when a job ran (and
 * stops there, leaving later packets for the next call).
 */
static int
wlink_process(struct wctx *x, struct wlink *wl, bool *ran)
{
    struct packet p;
    int r;

    while (wl->state != WLINK_DOWN && (r = link_next(&wl->l, &p)) != 0) {
        if (r < 0) {
            wlink_down(x, wl, -r);
            return DSJOB_OK;
        }
        wl->backoff_ms = BACKOFF_MIN_MS;
        switch (p.type) {
        case PACKET_NOOP:
            if (wl->state == WLINK_SLEEPING)
                wl->state = WLINK_IDLE;
            break;
        case PACKET_NO_JOB:
            if (wlink_send0(wl, PACKET_PRE_SLEEP, WLINK_SLEEPING) != DSJOB_OK)
                return DSJOB_ERR_NOMEM;
            break;
        case PACKET_JOB_ASSIGN_UNIQ:
        case PACKET_JOB_ASSIGN:
            if (quitting(x->w)) {
                /* Give the job back: the server requeues it when we close. */
                link_close(&wl->l);
                wl->state = WLINK_DOWN;
                wl->next_try = link_now_ms();
                return DSJOB_OK;
            }
            *ran = true;
            return run_job(x, wl, &p, p.type == PACKET_JOB_ASSIGN_UNIQ);
        case PACKET_ERROR:
            ctx_err(x, DSJOB_ERR_SERVER, "%s: %.*s: %.*s", wl->l.addr, (int)p.arg_len[0],
                    (const char *)p.arg[0], (int)p.arg_len[1], (const char *)p.arg[1]);
            break;
        default: break;
        }
    }
    return DSJOB_OK;
}

/* Closes every connection: a server requeues what it assigned and we did not run. */
static void
ctx_close(struct wctx *x)
{
    size_t i;

    for (i = 0; i < x->nlinks; i++) {
        link_close(&x->links[i].l);
        x->links[i].state = WLINK_DOWN;
        x->links[i].next_try = link_now_ms();
    }
}

/*
 * The body of dsjob_worker_work on one context: waits up to timeout_ms for
 * a job on x's connections and runs it.
 */
static int
ctx_work(struct wctx *x, int timeout_ms)
{
    struct dsjob_worker *w = x->w;
    int64_t deadline = link_deadline(timeout_ms);
    struct pollfd *pfd;
    int err = DSJOB_OK;

    x->errmsg[0] = '\0';
    if (x->nlinks == 0 || w->nfuncs == 0)
        return ctx_err(x, DSJOB_ERR_STATE, "no server or no function");
    pfd = dsjob_malloc((x->nlinks + 1) * sizeof(*pfd));
    if (pfd == NULL)
        return ctx_err(x, DSJOB_ERR_NOMEM, "out of memory");
    for (;;) {
        int64_t now = link_now_ms(), wake = deadline;
        bool ran = false;
        size_t i;
        int wait, r;

        if (quitting(w)) {
            /* Stopped for good: nothing more will be grabbed on these. */
            if (atomic_load(&w->stop))
                ctx_close(x);
            err = DSJOB_ERR_STATE;
            break;
        }
        for (i = 0; i < x->nlinks && !ran; i++) {
            struct wlink *wl = &x->links[i];

            if (wl->state == WLINK_DOWN && now >= wl->next_try && wlink_up(x, wl) != DSJOB_OK)
                goto out_nomem;
            if (wl->state == WLINK_DOWN)
                continue;
            if (wlink_process(x, wl, &ran) != DSJOB_OK)
                goto out_nomem;
            if (wl->state == WLINK_IDLE && !ran && !quitting(w) &&
                wlink_send0(wl, PACKET_GRAB_JOB_UNIQ, WLINK_GRABBING) != DSJOB_OK)
                goto out_nomem;
        }
        if (ran)
            break;
        /*
         * The stop pipe is never drained: once written it wakes every
         * thread's poll, and quitting() above ends the loop.
         */
        pfd[0].fd = w->stop_pipe[0];
        pfd[0].events = POLLIN;
        pfd[0].revents = 0;
        for (i = 0; i < x->nlinks; i++) {
            struct wlink *wl = &x->links[i];

            pfd[i + 1].fd = wl->state == WLINK_DOWN ? -1 : wl->l.fd;
            pfd[i + 1].events = POLLIN | (link_want_write(&wl->l) ? POLLOUT : 0);
            pfd[i + 1].revents = 0;
            if (wl->state == WLINK_DOWN && (wake < 0 || wl->next_try < wake))
                wake = wl->next_try;
        }
        wait = link_wait_ms(wake);
        if (deadline >= 0 && link_now_ms() >= deadline) {
            err = DSJOB_ERR_TIMEOUT;
            break;
        }
        r = poll(pfd, (nfds_t)(x->nlinks + 1), wait);
        if (r < 0 && errno != EINTR) {
            err = ctx_err(x, DSJOB_ERR_SYS, "poll: %s", strerror(errno));
            break;
        }
        if (r <= 0)
            continue;
        for (i = 0; i < x->nlinks; i++) {
            struct wlink *wl = &x->links[i];
            int e = DSJOB_OK;

            if (pfd[i + 1].fd < 0 || pfd[i + 1].revents == 0)
                continue;
            if (pfd[i + 1].revents & POLLOUT)
                e = link_write_some(&wl->l);
            if (e == DSJOB_OK && (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                e = link_read_some(&wl->l);
            /*
             * Whatever was read before a failure is dropped with the
             * connection: the server requeues a job we did not finish.
             */
            if (e != DSJOB_OK)
                wlink_down(x, wl, e);
        }
    }
    dsjob_free(pfd);
    return err;
out_nomem:
    dsjob_free(pfd);
    return ctx_err(x, DSJOB_ERR_NOMEM, "out of memory");
}

int
dsjob_worker_work(struct dsjob_worker *w, int timeout_ms)
{
    return ctx_work(&w->main, timeout_ms);
}

/* Wakes every thread of run and makes them end, leaving w->stop alone. */
static void
halt_all(struct dsjob_worker *w)
{
    ssize_t n;

    atomic_store(&w->halt, 1);
    n = write(w->stop_pipe[1], "h", 1);
    (void)n;
}

/* One thread's loop of run: jobs until stopped or halted (DSJOB_OK), or the first error. */
static int
run_loop(struct wctx *x)
{
    int err;

    x->looping = true;
    for (;;) {
        err = ctx_work(x, 0);
        if (err == DSJOB_ERR_STATE && quitting(x->w)) {
            err = DSJOB_OK;
            break;
        }
        if (err != DSJOB_OK && err != DSJOB_ERR_TIMEOUT)
            break;
    }
    x->looping = false;
    return err;
}

/*
 * A thread of run failed: the first to get here records index + 1 (0 is
 * the caller's context) in w->failed, and every thread is made to end.
 */
static void
run_failed(struct dsjob_worker *w, int index)
{
    int none = 0;

    atomic_compare_exchange_strong(&w->failed, &none, index + 1);
    halt_all(w);
}

static void *
thread_main(void *arg)
{
    struct wthread *t = arg;

    t->err = run_loop(&t->x);
    if (t->err != DSJOB_OK)
        run_failed(t->x.w, t->index);
    return NULL;
}

/* Gives each thread its own unconnected links to the worker's servers. */
static int
threads_init(struct dsjob_worker *w, struct wthread *t, size_t n)
{
    size_t i, j;

    for (i = 0; i < n; i++) {
        t[i].x.w = w;
        t[i].index = (int)i + 1;
        t[i].x.links = dsjob_malloc(w->main.nlinks * sizeof(struct wlink));
        if (t[i].x.links == NULL)
            return DSJOB_ERR_NOMEM;
        memset(t[i].x.links, 0, w->main.nlinks * sizeof(struct wlink));
        for (j = 0; j < w->main.nlinks; j++) {
            struct wlink *wl = &t[i].x.links[j];

            if (link_init(&wl->l, w->main.links[j].l.addr) != DSJOB_OK) {
                t[i].x.nlinks = j;
                return DSJOB_ERR_NOMEM;
            }
            link_set_tls(&wl->l, w->tls, w->tls_flags);
            wl->state = WLINK_DOWN;
            wl->backoff_ms = BACKOFF_MIN_MS;
        }
        t[i].x.nlinks = w->main.nlinks;
    }
    return DSJOB_OK;
}

static void
threads_release(struct wthread *t, size_t n)
{
    size_t i, j;

    for (i = 0; i < n; i++) {
        for (j = 0; j < t[i].x.nlinks; j++)
            link_release(&t[i].x.links[j].l);
        dsjob_free(t[i].x.links);
    }
    dsjob_free(t);
}

/*
 * Runs concurrency - 1 threads of their own and the caller's context in
 * this thread; returns when all have ended. Signals are blocked in the
 * threads made here, so that a program's handlers keep running in its own
 * threads.
 */
static int
run_threads(struct dsjob_worker *w)
{
    size_t n = (size_t)w->concurrency - 1, started = 0, i;
    struct wthread *t = n < SIZE_MAX / sizeof(*t) ? dsjob_malloc(n * sizeof(*t)) : NULL;
    sigset_t all, old;
    int err = DSJOB_OK, failed, rc = 0;
    char buf[64];

    if (t == NULL)
        return ctx_err(&w->main, DSJOB_ERR_NOMEM, "out of memory");
    memset(t, 0, n * sizeof(*t));
    if (threads_init(w, t, n) != DSJOB_OK) {
        threads_release(t, n);
        return ctx_err(&w->main, DSJOB_ERR_NOMEM, "out of memory");
    }
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (; started < n; started++) {
        rc = pthread_create(&t[started].tid, NULL, thread_main, &t[started]);
        if (rc != 0)
            break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        halt_all(w);
        err = ctx_err(&w->main, DSJOB_ERR_SYS, "pthread_create: %s", strerror(rc));
    } else if ((err = run_loop(&w->main)) != DSJOB_OK) {
        run_failed(w, 0);
    }
    for (i = 0; i < started; i++)
        pthread_join(t[i].tid, NULL);
    failed = atomic_load(&w->failed);
    if (rc == 0 && failed > 0) {
        struct wctx *fx = failed == 1 ? &w->main : &t[failed - 2].x;

        err = failed == 1 ? err : t[failed - 2].err;
        if (fx != &w->main)
            memcpy(w->main.errmsg, fx->errmsg, sizeof(w->main.errmsg));
    }
    threads_release(t, n);
    /* Every thread has ended: the halt may be undone for the next run. */
    atomic_store(&w->failed, 0);
    if (atomic_load(&w->halt)) {
        atomic_store(&w->halt, 0);
        if (!atomic_load(&w->stop))
            while (read(w->stop_pipe[0], buf, sizeof(buf)) > 0)
                ;
    }
    return err;
}

int
dsjob_worker_run(struct dsjob_worker *w)
{
    if (w->concurrency > 1 && w->main.nlinks > 0 && w->nfuncs > 0)
        return run_threads(w);
    return run_loop(&w->main);
}

void
dsjob_worker_stop(struct dsjob_worker *w)
{
    int saved = errno;
    ssize_t n;

    atomic_store(&w->stop, 1);
    n = write(w->stop_pipe[1], "s", 1);
    (void)n;
    errno = saved;
}

const char *
dsjob_job_function(const struct dsjob_job *job)
{
    return job->func;
}

const char *
dsjob_job_handle(const struct dsjob_job *job)
{
    return job->handle;
}

const char *
dsjob_job_unique(const struct dsjob_job *job)
{
    return job->unique;
}

const void *
dsjob_job_payload(const struct dsjob_job *job, size_t *len)
{
    if (len != NULL)
        *len = job->len;
    return job->payload;
}

int
dsjob_job_status(struct dsjob_job *job, unsigned numerator, unsigned denominator)
{
    char n[16], d[16];
    int nl = snprintf(n, sizeof(n), "%u", numerator);
    int dl = snprintf(d, sizeof(d), "%u", denominator);

    return job_send(job, false, PACKET_WORK_STATUS, 3, n, (size_t)nl, d, (size_t)dl);
}

int
dsjob_job_data(struct dsjob_job *job, const void *data, size_t len)
{
    if (data == NULL && len > 0)
        return DSJOB_ERR_ARG;
    return job_send(job, false, PACKET_WORK_DATA, 2, data ? data : "", len, NULL, 0);
}

int
dsjob_job_warning(struct dsjob_job *job, const void *data, size_t len)
{
    if (data == NULL && len > 0)
        return DSJOB_ERR_ARG;
    return job_send(job, false, PACKET_WORK_WARNING, 2, data ? data : "", len, NULL, 0);
}

int
dsjob_job_set_result(struct dsjob_job *job, const void *data, size_t len)
{
    unsigned char *b;

    if (data == NULL && len > 0)
        return DSJOB_ERR_ARG;
    b = dsjob_malloc(len + 1);
    if (b == NULL)
        return DSJOB_ERR_NOMEM;
    if (len > 0)
        memcpy(b, data, len);
    b[len] = '\0';
    dsjob_free(job->result);
    job->result = b;
    job->result_len = len;
    return DSJOB_OK;
}
