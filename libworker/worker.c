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
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/worker.h>

#include "libclient/link.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000
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
};

struct wfunc {
    char *name;         /* function name (owned) */
    dsjob_worker_fn fn; /* its callback */
    void *user;         /* the callback's pointer */
    int timeout_ms;     /* > 0: CAN_DO_TIMEOUT */
};

struct dsjob_worker {
    struct wlink *links;         /* one per server (owned) */
    size_t nlinks;               /* servers */
    struct wfunc *funcs;         /* registered functions (owned) */
    size_t nfuncs;               /* how many */
    char *id;                    /* SET_CLIENT_ID, NULL for none (owned) */
    int connect_ms;              /* connect timeout */
    int io_ms;                   /* I/O timeout for reports and results */
    int stop_pipe[2];            /* self-pipe written by dsjob_worker_stop */
    volatile sig_atomic_t stop;  /* set by dsjob_worker_stop */
    char errmsg[WORKER_ERR_LEN]; /* detail of the last failure */
};

struct dsjob_job {
    struct dsjob_worker *w; /* the worker running it */
    struct wlink *wl;       /* the connection it came on */
    char *handle;           /* into mem */
    char *func;             /* into mem */
    char *unique;           /* into mem */
    char *payload;          /* into mem, NUL after it */
    size_t len;             /* payload bytes */
    char *mem;              /* one allocation holding the four strings (owned) */
    unsigned char *result;  /* result or exception text (owned) */
    size_t result_len;      /* its length */
    int err;                /* first report that failed */
};

static int worker_err(struct dsjob_worker *w, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
worker_err(struct dsjob_worker *w, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w->errmsg, sizeof(w->errmsg), fmt, ap);
    va_end(ap);
    return err;
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
    w->connect_ms = 5000;
    w->io_ms = 30000;
    return w;
}

void
dsjob_worker_free(struct dsjob_worker *w)
{
    size_t i;

    if (w == NULL)
        return;
    for (i = 0; i < w->nlinks; i++)
        link_release(&w->links[i].l);
    for (i = 0; i < w->nfuncs; i++)
        dsjob_free(w->funcs[i].name);
    dsjob_free(w->links);
    dsjob_free(w->funcs);
    dsjob_free(w->id);
    close(w->stop_pipe[0]);
    close(w->stop_pipe[1]);
    dsjob_free(w);
}

int
dsjob_worker_add_server(struct dsjob_worker *w, const char *addr)
{
    struct wlink *nl;
    int err;

    w->errmsg[0] = '\0';
    nl = dsjob_malloc((w->nlinks + 1) * sizeof(*nl));
    if (nl == NULL)
        return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
    memset(&nl[w->nlinks], 0, sizeof(*nl));
    err = link_init(&nl[w->nlinks].l, addr);
    if (err != DSJOB_OK) {
        dsjob_free(nl);
        return worker_err(w, err, "bad server address '%s'", addr ? addr : "(null)");
    }
    if (w->nlinks > 0)
        memcpy(nl, w->links, w->nlinks * sizeof(*nl));
    nl[w->nlinks].state = WLINK_DOWN;
    nl[w->nlinks].backoff_ms = BACKOFF_MIN_MS;
    dsjob_free(w->links);
    w->links = nl;
    w->nlinks++;
    return DSJOB_OK;
}

void
dsjob_worker_set_timeout(struct dsjob_worker *w, int connect_ms, int io_ms)
{
    w->connect_ms = connect_ms;
    w->io_ms = io_ms;
}

const char *
dsjob_worker_errmsg(const struct dsjob_worker *w)
{
    return w->errmsg;
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
        return worker_err(w, DSJOB_ERR_ARG, "NULL id");
    copy = dup_str(id);
    if (copy == NULL)
        return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
    dsjob_free(w->id);
    w->id = copy;
    for (i = 0; i < w->nlinks; i++) {
        const void *args[1] = {w->id};
        size_t lens[1] = {strlen(w->id)};

        if (w->links[i].state != WLINK_DOWN &&
            link_queue(&w->links[i].l, PACKET_SET_CLIENT_ID, 1, args, lens) != DSJOB_OK)
            return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
    }
    return DSJOB_OK;
}

int
dsjob_worker_register(struct dsjob_worker *w, const char *name, dsjob_worker_fn fn, void *user,
                      int timeout_ms)
{
    struct wfunc *nf;
    size_t i;

    w->errmsg[0] = '\0';
    if (name == NULL || *name == '\0' || fn == NULL)
        return worker_err(w, DSJOB_ERR_ARG, "empty function name or NULL callback");
    for (i = 0; i < w->nfuncs; i++)
        if (strcmp(w->funcs[i].name, name) == 0)
            return worker_err(w, DSJOB_ERR_ARG, "function '%s' already registered", name);
    nf = dsjob_malloc((w->nfuncs + 1) * sizeof(*nf));
    if (nf == NULL)
        return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
    if (w->nfuncs > 0)
        memcpy(nf, w->funcs, w->nfuncs * sizeof(*nf));
    nf[w->nfuncs].name = dup_str(name);
    if (nf[w->nfuncs].name == NULL) {
        dsjob_free(nf);
        return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
    }
    nf[w->nfuncs].fn = fn;
    nf[w->nfuncs].user = user;
    nf[w->nfuncs].timeout_ms = timeout_ms;
    dsjob_free(w->funcs);
    w->funcs = nf;
    w->nfuncs++;
    for (i = 0; i < w->nlinks; i++) {
        struct wlink *wl = &w->links[i];

        if (wl->state == WLINK_DOWN)
            continue;
        if (queue_can_do(wl, &w->funcs[w->nfuncs - 1]) != DSJOB_OK)
            return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
        if (wl->state == WLINK_SLEEPING)
            wl->state = WLINK_IDLE; /* a job of the new function may be waiting */
    }
    return DSJOB_OK;
}

/* Takes a link down after a failure and schedules the next attempt. */
static void
wlink_down(struct dsjob_worker *w, struct wlink *wl, int err)
{
    worker_err(w, err, "%s", wl->l.err);
    link_close(&wl->l);
    wl->state = WLINK_DOWN;
    wl->next_try = link_now_ms() + wl->backoff_ms;
    wl->backoff_ms = wl->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : wl->backoff_ms * 2;
}

/* Connects a down link whose time has come and announces every function. */
static int
wlink_up(struct dsjob_worker *w, struct wlink *wl)
{
    int err = link_connect(&wl->l, w->connect_ms);
    size_t i;

    if (err != DSJOB_OK) {
        wlink_down(w, wl, err);
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

/* Sends one packet for the job now (handle first) and waits until it is written. */
static int
job_send(struct dsjob_job *job, uint32_t type, unsigned nargs, const void *a1, size_t l1,
         const void *a2, size_t l2)
{
    const void *args[3] = {job->handle, a1, a2};
    size_t lens[3] = {strlen(job->handle), l1, l2};
    int err;

    if (job->wl->state == WLINK_DOWN)
        return job->err ? job->err : DSJOB_ERR_CLOSED;
    err = link_queue(&job->wl->l, type, nargs, args, lens);
    if (err == DSJOB_OK)
        err = link_flush(&job->wl->l, link_deadline(job->w->io_ms));
    if (err != DSJOB_OK) {
        job->err = err;
        wlink_down(job->w, job->wl, err);
    }
    return err;
}

/*
 * Runs the job of a JOB_ASSIGN_UNIQ (unique true) or JOB_ASSIGN packet
 * on wl and sends its result. Returns DSJOB_OK or DSJOB_ERR_NOMEM.
 */
static int
run_job(struct dsjob_worker *w, struct wlink *wl, const struct packet *p, bool unique)
{
    struct dsjob_job job;
    const struct wfunc *f = find_func(w, p->arg[1], p->arg_len[1]);
    size_t hl = p->arg_len[0], fl = p->arg_len[1];
    size_t ul = unique ? p->arg_len[2] : 0;
    unsigned di = unique ? 3 : 2;
    size_t dl = p->arg_len[di];
    char *m;
    int r;

    memset(&job, 0, sizeof(job));
    job.w = w;
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
        job_send(&job, PACKET_WORK_COMPLETE, 2, job.result ? (const void *)job.result : "",
                 job.result_len, NULL, 0);
    else if (r == DSJOB_WORK_EXCEPTION)
        job_send(&job, PACKET_WORK_EXCEPTION, 2, job.result ? (const void *)job.result : "",
                 job.result_len, NULL, 0);
    else
        job_send(&job, PACKET_WORK_FAIL, 1, NULL, 0, NULL, 0);
    dsjob_free(job.result);
    dsjob_free(job.mem);
    return DSJOB_OK;
}

/*
 * Handles the packets already read on wl. Sets *ran when a job ran (and
 * stops there, leaving later packets for the next call).
 */
static int
wlink_process(struct dsjob_worker *w, struct wlink *wl, bool *ran)
{
    struct packet p;
    int r;

    while (wl->state != WLINK_DOWN && (r = link_next(&wl->l, &p)) != 0) {
        if (r < 0) {
            wlink_down(w, wl, -r);
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
            if (w->stop) {
                /* Give the job back: the server requeues it when we close. */
                link_close(&wl->l);
                wl->state = WLINK_DOWN;
                wl->next_try = link_now_ms();
                return DSJOB_OK;
            }
            *ran = true;
            return run_job(w, wl, &p, p.type == PACKET_JOB_ASSIGN_UNIQ);
        case PACKET_ERROR:
            worker_err(w, DSJOB_ERR_SERVER, "%s: %.*s: %.*s", wl->l.addr, (int)p.arg_len[0],
                       (const char *)p.arg[0], (int)p.arg_len[1], (const char *)p.arg[1]);
            break;
        default: break;
        }
    }
    return DSJOB_OK;
}

int
dsjob_worker_work(struct dsjob_worker *w, int timeout_ms)
{
    int64_t deadline = link_deadline(timeout_ms);
    struct pollfd *pfd;
    int err = DSJOB_OK;

    w->errmsg[0] = '\0';
    if (w->nlinks == 0 || w->nfuncs == 0)
        return worker_err(w, DSJOB_ERR_STATE, "no server or no function");
    pfd = dsjob_malloc((w->nlinks + 1) * sizeof(*pfd));
    if (pfd == NULL)
        return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
    for (;;) {
        int64_t now = link_now_ms(), wake = deadline;
        bool ran = false;
        size_t i;
        int wait, r;

        if (w->stop) {
            err = DSJOB_ERR_STATE;
            break;
        }
        for (i = 0; i < w->nlinks && !ran; i++) {
            struct wlink *wl = &w->links[i];

            if (wl->state == WLINK_DOWN && now >= wl->next_try && wlink_up(w, wl) != DSJOB_OK)
                goto out_nomem;
            if (wl->state == WLINK_DOWN)
                continue;
            if (wlink_process(w, wl, &ran) != DSJOB_OK)
                goto out_nomem;
            if (wl->state == WLINK_IDLE && !ran && !w->stop &&
                wlink_send0(wl, PACKET_GRAB_JOB_UNIQ, WLINK_GRABBING) != DSJOB_OK)
                goto out_nomem;
        }
        if (ran)
            break;
        pfd[0].fd = w->stop_pipe[0];
        pfd[0].events = POLLIN;
        pfd[0].revents = 0;
        for (i = 0; i < w->nlinks; i++) {
            struct wlink *wl = &w->links[i];

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
        r = poll(pfd, (nfds_t)(w->nlinks + 1), wait);
        if (r < 0 && errno != EINTR) {
            err = worker_err(w, DSJOB_ERR_SYS, "poll: %s", strerror(errno));
            break;
        }
        if (r <= 0)
            continue;
        if (pfd[0].revents & POLLIN) {
            char buf[64];

            while (read(w->stop_pipe[0], buf, sizeof(buf)) > 0)
                ;
        }
        for (i = 0; i < w->nlinks; i++) {
            struct wlink *wl = &w->links[i];
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
                wlink_down(w, wl, e);
        }
    }
    dsjob_free(pfd);
    return err;
out_nomem:
    dsjob_free(pfd);
    return worker_err(w, DSJOB_ERR_NOMEM, "out of memory");
}

int
dsjob_worker_run(struct dsjob_worker *w)
{
    int err;

    for (;;) {
        err = dsjob_worker_work(w, 0);
        if (err == DSJOB_ERR_STATE && w->stop)
            return DSJOB_OK;
        if (err != DSJOB_OK && err != DSJOB_ERR_TIMEOUT)
            return err;
    }
}

void
dsjob_worker_stop(struct dsjob_worker *w)
{
    int saved = errno;
    ssize_t n;

    w->stop = 1;
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

    return job_send(job, PACKET_WORK_STATUS, 3, n, (size_t)nl, d, (size_t)dl);
}

int
dsjob_job_data(struct dsjob_job *job, const void *data, size_t len)
{
    if (data == NULL && len > 0)
        return DSJOB_ERR_ARG;
    return job_send(job, PACKET_WORK_DATA, 2, data ? data : "", len, NULL, 0);
}

int
dsjob_job_warning(struct dsjob_job *job, const void *data, size_t len)
{
    if (data == NULL && len > 0)
        return DSJOB_ERR_ARG;
    return job_send(job, PACKET_WORK_WARNING, 2, data ? data : "", len, NULL, 0);
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
