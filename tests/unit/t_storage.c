/*
 * server/storage.c against a fake backend: group commit (one flush for a
 * loop turn's background submits), the order of one connection's answers
 * (JOB_CREATED only after the commit; later requests wait, other
 * connections do not), refusals queued behind owed answers, refused adds
 * and failed commits, deletions, replay, and the drain at a stop. The
 * fake store_ops runs on storage's real writer thread; it can hold a flush
 * until the test lets it go, fail a flush or one add, and records what was
 * committed. An allocation seam fails storage.c's allocations by name. The
 * server is real (dsjob_server_new on its own event_base) and its clients
 * are socketpairs speaking the binary protocol.
 *
 * Also: replay of every state a stored job can be in (queued, scheduled,
 * retrying, dead, kept, function settings) and of bad rows (unknown
 * states and priorities, ids out of order); a backend that cannot be
 * opened or read; --store none; rewrites, their failed commits and the
 * memory they need; the drain at a stop, bounded, and a store failing at
 * close. The server logs to a
 * file, and each case runs three times: at debug level (logged() finds
 * the line), at --verbose FATAL (it must not), and with no log at all.
 */
#include "config.h"

#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include <dsjob/server.h>

#include "lib/peer.h"
#include "server/conn.h"
#include "server/durable.h"
#include "server/srv.h"
#include "server/storage.h"
#include "server/store.h"
#include "tap.h"

/*
 * hdl gives the handle the server makes for job n: "H:t:" and n
 * zero-padded to 20 digits. Eight buffers in turn, so that one expression
 * may hold several.
 */
static const char *
hdl(unsigned n)
{
    static char buf[8][32];
    static unsigned next;
    char *b = buf[next++ % 8];

    snprintf(b, sizeof(buf[0]), "H:t:%020u", n);
    return b;
}

#define FAKE_MAX 64
#define WAIT_MS 5000
/*
 * The storage seam's retry_ms in the cases that wait for a failed commit's
 * retry (the server's 1 s): they pump until it came, and assert nothing
 * that its coming early could change. Cases that count flushes across a
 * stop keep the server's second.
 */
#define RETRY_MS 20

/* --- the fake backend ---------------------------------------------------- */

struct store {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* Set by the test (under lock once the server runs). */
    bool hold;            /* a flush waits until this is false */
    int fail_flushes;     /* so many flushes fail */
    uint64_t fail_add_id; /* the add of this id fails; 0: none */
    struct store_job replay[8];
    unsigned nreplay;
    struct store_func funcs[2]; /* function settings to replay */
    unsigned nfuncs;
    bool replay_fails, replay_funcs_fails; /* the replay reports a read error */
    bool open_fails;                       /* open reports an error */
    unsigned set_funcs;                    /* function settings committed */
    /* Seen by the test. */
    bool holding;                  /* a flush waits in hold */
    unsigned flushes;              /* flush calls */
    unsigned batch_adds[FAKE_MAX]; /* adds seen by each flush */
    unsigned adds;                 /* adds since the last flush */
    uint64_t open_add[FAKE_MAX];   /* the open batch's adds */
    unsigned nopen_add;
    uint64_t open_rm[FAKE_MAX]; /* its removes, kept when a flush fails */
    unsigned nopen_rm;
    uint64_t stored[FAKE_MAX]; /* committed ids */
    unsigned nstored;
    unsigned removes; /* removes committed */
    bool closed;      /* close was called */
    /* Version 2: rewrites (update), kept as the last committed state of each id. */
    struct store_job open_upd[FAKE_MAX]; /* the open batch's updates (pointers dropped) */
    unsigned nopen_upd;
    struct store_job updated[FAKE_MAX]; /* committed: the last update of each id */
    unsigned nupdated;
    /* A shared store: the row the first lease op takes (its strings the test's). */
    struct store_job lease_job;
    struct store_lease *ls; /* the open batch's lease op, filled at flush */
    bool leased;            /* lease_job was taken */
};

static struct store fake;

static void
fake_reset(void)
{
    pthread_mutex_destroy(&fake.lock);
    pthread_cond_destroy(&fake.cond);
    memset(&fake, 0, sizeof(fake));
    pthread_mutex_init(&fake.lock, NULL);
    pthread_cond_init(&fake.cond, NULL);
}

static int
fake_open(struct store **out, const struct store_config *cfg, char *err)
{
    (void)cfg;
    if (fake.open_fails)
        return store_say(err, DSJOB_ERR_STORE, "fake: cannot open");
    *out = &fake;
    return DSJOB_OK;
}

static int
fake_add(struct store *st, const struct store_job *sj, char *err)
{
    int rc = DSJOB_OK;

    pthread_mutex_lock(&st->lock);
    if (sj->id == st->fail_add_id)
        rc = store_say(err, DSJOB_ERR_STORE, "fake: add of %llu refused",
                       (unsigned long long)sj->id);
    else if (st->nopen_add < FAKE_MAX)
        st->open_add[st->nopen_add++] = sj->id;
    st->adds++;
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int
fake_remove(struct store *st, uint64_t id, char *err)
{
    (void)err;
    pthread_mutex_lock(&st->lock);
    if (st->nopen_rm < FAKE_MAX)
        st->open_rm[st->nopen_rm++] = id;
    pthread_mutex_unlock(&st->lock);
    return DSJOB_OK;
}

static void
commit_locked(struct store *st)
{
    unsigned i, k;

    for (i = 0; i < st->nopen_add && st->nstored < FAKE_MAX; i++)
        st->stored[st->nstored++] = st->open_add[i];
    for (i = 0; i < st->nopen_rm; i++) {
        for (k = 0; k < st->nstored; k++)
            if (st->stored[k] == st->open_rm[i]) {
                st->stored[k] = st->stored[--st->nstored];
                break;
            }
        st->removes++;
    }
    for (i = 0; i < st->nopen_upd; i++) {
        for (k = 0; k < st->nupdated && st->updated[k].id != st->open_upd[i].id; k++)
            ;
        if (k < FAKE_MAX) {
            st->updated[k] = st->open_upd[i];
            if (k == st->nupdated)
                st->nupdated++;
        }
    }
    st->nopen_add = st->nopen_rm = st->nopen_upd = 0;
}

static int
fake_flush(struct store *st, char *err)
{
    int rc = DSJOB_OK;

    pthread_mutex_lock(&st->lock);
    st->holding = st->hold;
    pthread_cond_broadcast(&st->cond);
    while (st->hold)
        pthread_cond_wait(&st->cond, &st->lock);
    st->holding = false;
    if (st->flushes < FAKE_MAX)
        st->batch_adds[st->flushes] = st->adds;
    st->flushes++;
    st->adds = 0;
    if (st->fail_flushes > 0) {
        st->fail_flushes--;
        st->nopen_add = 0; /* the adds are lost, the removes stay pending */
        st->nopen_upd = 0; /* and so are the updates */
        rc = store_say(err, DSJOB_ERR_STORE, "fake: disk full");
    } else {
        commit_locked(st);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int
fake_replay(struct store *st, store_replay_fn *fn, void *arg, char *err)
{
    unsigned i;

    if (st->replay_fails)
        return store_say(err, DSJOB_ERR_STORE, "fake: cannot read the jobs");
    for (i = 0; i < st->nreplay; i++)
        if (fn(&st->replay[i], arg) != 0)
            break;
    return DSJOB_OK;
}

static void
fake_close(struct store *st)
{
    pthread_mutex_lock(&st->lock);
    commit_locked(st);
    st->closed = true;
    pthread_mutex_unlock(&st->lock);
}

static int
fake_update(struct store *st, const struct store_job *sj, char *err)
{
    (void)err;
    pthread_mutex_lock(&st->lock);
    if (st->nopen_upd < FAKE_MAX) {
        st->open_upd[st->nopen_upd] = *sj;
        st->open_upd[st->nopen_upd].result = NULL; /* borrowed for the call only */
        st->nopen_upd++;
    }
    pthread_mutex_unlock(&st->lock);
    return DSJOB_OK;
}

static int
fake_set_func(struct store *st, const struct store_func *sf, char *err)
{
    (void)sf, (void)err;
    pthread_mutex_lock(&st->lock);
    st->set_funcs++; /* counted when set; a failed flush is seen through flushes */
    pthread_mutex_unlock(&st->lock);
    return DSJOB_OK;
}

static int
fake_replay_funcs(struct store *st, store_func_fn *fn, void *arg, char *err)
{
    unsigned i;

    if (st->replay_funcs_fails)
        return store_say(err, DSJOB_ERR_STORE, "fake: cannot read the functions");
    for (i = 0; i < st->nfuncs; i++)
        if (fn(&st->funcs[i], arg) != 0)
            break;
    return DSJOB_OK;
}

/* The last committed update of id, copied out (under the lock); false if none. */
static bool
fake_updated(uint64_t id, struct store_job *out)
{
    bool found = false;
    unsigned i;

    pthread_mutex_lock(&fake.lock);
    for (i = 0; i < fake.nupdated; i++)
        if (fake.updated[i].id == id) {
            *out = fake.updated[i];
            found = true;
        }
    pthread_mutex_unlock(&fake.lock);
    return found;
}

/* A batch's row (batch.c): taken, nothing kept. */
static int
fake_batch(struct store *st, int what, const struct store_batch *sb, char *err)
{
    (void)st;
    (void)what;
    (void)sb;
    (void)err;
    return DSJOB_OK;
}

static const struct store_ops fake_ops = {
    .name = "fake",
    .batch = fake_batch,
    .open = fake_open,
    .add = fake_add,
    .remove = fake_remove,
    .flush = fake_flush,
    .replay = fake_replay,
    .close = fake_close,
    .update = fake_update,
    .set_func = fake_set_func,
    .replay_funcs = fake_replay_funcs,
};

/*
 * A store several servers share, in the little a lease needs: the first
 * lease op that asks for jobs takes lease_job; the notifier waits for its
 * stop.
 */
static int
fake_remove_job(struct store *st, const struct store_job *sj, char *err)
{
    return fake_remove(st, sj->id, err);
}

static int
fake_lease(struct store *st, struct store_lease *ls, char *err)
{
    (void)err;
    pthread_mutex_lock(&st->lock);
    st->ls = ls;
    pthread_mutex_unlock(&st->lock);
    return DSJOB_OK;
}

static int
fake_shared_flush(struct store *st, char *err)
{
    int rc = fake_flush(st, err);
    struct store_lease *ls;

    pthread_mutex_lock(&st->lock);
    ls = st->ls;
    st->ls = NULL;
    if (rc == DSJOB_OK && ls != NULL) {
        ls->expiry_ms = ls->due_ms = -1;
        if (ls->nfuncs > 0 && !st->leased && (ls->jobs = malloc(sizeof(*ls->jobs))) != NULL) {
            ls->jobs[0] = st->lease_job;
            ls->njobs = 1;
            st->leased = true;
        }
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int
fake_wait_notify(struct store *st, int stop_fd, char *err)
{
    struct pollfd pfd = {stop_fd, POLLIN, 0};

    (void)st;
    (void)err;
    while (poll(&pfd, 1, -1) < 0)
        ;
    return 0;
}

static const struct store_ops fake_shared_ops = {
    .name = "fake-shared",
    .open = fake_open,
    .add = fake_add,
    .remove = fake_remove,
    .flush = fake_shared_flush,
    .replay = fake_replay,
    .close = fake_close,
    .update = fake_update,
    .set_func = fake_set_func,
    .replay_funcs = fake_replay_funcs,
    .remove_job = fake_remove_job,
    .lease = fake_lease,
    .wait_notify = fake_wait_notify,
};

/*
 * A shared store's batch admin op (postgres'), which commits on its own:
 * it finds its row, and when fail_after_admin is set the flush after it
 * fails (a statement the database refuses after the early flush committed).
 */
static bool fail_after_admin;

static int
fake_batch_admin(struct store *st, int what, const struct store_batch *sb, store_batch_fn *fn,
                 void *arg, char *err)
{
    (void)what;
    (void)err;
    pthread_mutex_lock(&st->lock);
    if (fail_after_admin)
        st->fail_flushes = 1;
    pthread_mutex_unlock(&st->lock);
    return fn(sb, arg) == 0 ? DSJOB_OK : DSJOB_ERR_NOMEM;
}

/* fake_ops with a batch admin op of its own (test_admin_early_commit sets it up). */
static struct store_ops fake_admin_ops;

static void
fake_set_hold(bool hold)
{
    pthread_mutex_lock(&fake.lock);
    fake.hold = hold;
    pthread_cond_broadcast(&fake.cond);
    pthread_mutex_unlock(&fake.lock);
}

static unsigned
fake_get(const unsigned *field)
{
    unsigned v;

    pthread_mutex_lock(&fake.lock);
    v = *field;
    pthread_mutex_unlock(&fake.lock);
    return v;
}

static bool
fake_holding(void)
{
    bool v;

    pthread_mutex_lock(&fake.lock);
    v = fake.holding;
    pthread_mutex_unlock(&fake.lock);
    return v;
}

static bool
fake_stored(uint64_t id)
{
    bool found = false;
    unsigned i;

    pthread_mutex_lock(&fake.lock);
    for (i = 0; i < fake.nstored; i++)
        found = found || fake.stored[i] == id;
    pthread_mutex_unlock(&fake.lock);
    return found;
}

/* --- the allocation seam ------------------------------------------------- */

static const char *fail_what; /* storage.c's allocation to fail */
static int fail_skip;         /* after letting so many of them through */
static int fail_count;        /* so many times */
static int failed;            /* allocations failed so far */

static bool
alloc_fails(const char *what, void *arg)
{
    (void)arg;
    if (fail_what == NULL || fail_count == 0 || strcmp(what, fail_what) != 0)
        return false;
    if (fail_skip > 0) {
        fail_skip--;
        return false;
    }
    fail_count--;
    failed++;
    return true;
}

static void
fail_alloc(const char *what, int count)
{
    fail_what = what;
    fail_count = count;
    fail_skip = 0;
    failed = 0;
}

/* --- a server and its clients -------------------------------------------- */

/* Lifecycle settings of the next rig_start (zero: the defaults). */
static struct {
    unsigned max_dead, retry_on, job_retries, keep_results;
    const struct store_ops *ops; /* instead of fake_ops; NULL: fake_ops */
    const char *store;           /* --store, with no backend seam; NULL: the fake */
    unsigned interval_ms;        /* --store-commit-interval */
    unsigned lazy_ms;            /* the storage seam's lazy_ms (0: 10 ms) */
    unsigned retry_ms;           /* the storage seam's retry_ms (0: 1 s) */
} rig_extra;

/*
 * The cases run three times: logging at debug, where logged() checks that
 * a line is there; at --verbose FATAL, where it checks that the line is
 * not (store errors are logged at ERROR and below); and with the log
 * "none", where it checks that no log file was made.
 */
static bool log_quiet, log_none;

struct rig {
    struct event_base *base;
    struct dsjob_server *ds;
    struct srv *srv;
    char dir[64];
    char sock[128];
    char log[128]; /* the server's log, at debug level */
    char db[128];  /* the sqlite store's file, with rig_extra.store "sqlite" */
};

/* Make and attach a server; its attach's result (the rig is to be stopped either way). */
static int
rig_try_start(struct rig *r, unsigned max_jobs, unsigned batch)
{
    struct dsjob_server_config cfg;
    char err[256];

    snprintf(r->dir, sizeof(r->dir), "/tmp/t_storage.XXXXXX");
    if (mkdtemp(r->dir) == NULL)
        tap_bail("mkdtemp failed");
    snprintf(r->sock, sizeof(r->sock), "%s/sock", r->dir);
    snprintf(r->log, sizeof(r->log), "%s/log", r->dir);
    dsjob_server_config_init(&cfg);
    cfg.port = -1;
    cfg.unix_socket = r->sock;
    cfg.log_file = log_none ? "none" : r->log;
    cfg.verbose = log_quiet ? DSJOB_LOG_FATAL : DSJOB_LOG_DEBUG;
    cfg.store_commit_interval_ms = rig_extra.interval_ms;
    cfg.job_handle_prefix = "H:t";
    cfg.max_jobs = max_jobs;
    if (batch)
        cfg.store_batch = batch;
    cfg.max_dead = rig_extra.max_dead;
    if (rig_extra.retry_on)
        cfg.retry_on = rig_extra.retry_on;
    cfg.job_retries = rig_extra.job_retries;
    cfg.keep_results = rig_extra.keep_results;
    cfg.store = rig_extra.store;
    r->db[0] = '\0';
    if (rig_extra.store != NULL && strcmp(rig_extra.store, "sqlite") == 0) {
        snprintf(r->db, sizeof(r->db), "%s/db", r->dir);
        cfg.store_db = r->db;
    }
    r->base = event_base_new();
    r->ds = dsjob_server_new(&cfg, err, sizeof(err));
    if (r->base == NULL || r->ds == NULL)
        tap_bail("cannot make a server: %s", err);
    r->srv = (struct srv *)r->ds; /* struct dsjob_server wraps struct srv first */
    if (rig_extra.store == NULL)
        r->srv->storage.seam.ops = rig_extra.ops != NULL ? rig_extra.ops : &fake_ops;
    r->srv->storage.seam.alloc_fails = alloc_fails;
    r->srv->storage.seam.lazy_ms = rig_extra.lazy_ms;
    r->srv->storage.seam.retry_ms = rig_extra.retry_ms;
    return dsjob_server_attach(r->ds, r->base);
}

static void
rig_start(struct rig *r, unsigned max_jobs, unsigned batch)
{
    if (rig_try_start(r, max_jobs, batch) != DSJOB_OK)
        tap_bail("cannot start the server: %s", r->srv->errmsg);
}

static void
rig_stop(struct rig *r)
{
    dsjob_server_free(r->ds);
    event_base_free(r->base);
    unlink(r->sock);
    unlink(r->log);
    if (r->db[0] != '\0') {
        char wal[160];

        unlink(r->db);
        snprintf(wal, sizeof(wal), "%s-wal", r->db);
        unlink(wal);
        snprintf(wal, sizeof(wal), "%s-shm", r->db);
        unlink(wal);
    }
    rmdir(r->dir);
    fail_alloc(NULL, 0);
}

/* Whether the server's log has a line with text in it. */
static bool
logged(struct rig *r, const char *text)
{
    char line[1024];
    bool found = false;
    FILE *fp = fopen(r->log, "r");

    if (log_none) {
        if (fp != NULL)
            fclose(fp);
        return fp == NULL;
    }
    while (fp != NULL && !found && fgets(line, sizeof(line), fp) != NULL)
        found = strstr(line, text) != NULL;
    if (fp != NULL)
        fclose(fp);
    if (found == log_quiet)
        tap_diag("%s the log: %s", log_quiet ? "in" : "not in", text);
    return found != log_quiet;
}

/* A client: the test's end of a socketpair whose other end is a conn. */
static int
rig_client(struct rig *r)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int pair[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) < 0)
        tap_bail("socketpair failed");
    if (conn_new(r->srv, pair[0], (struct sockaddr *)&sun, sizeof(sun)) == NULL)
        tap_bail("conn_new failed");
    return pair[1];
}

static void
turn(struct rig *r)
{
    event_base_loop(r->base, EVLOOP_NONBLOCK);
}

/* Run the loop until cond holds, for WAIT_MS at most. */
#define PUMP_UNTIL(r, cond)                                                                        \
    do {                                                                                           \
        int ms_;                                                                                   \
        for (ms_ = 0; ms_ < WAIT_MS && !(cond); ms_++) {                                           \
            turn(r);                                                                               \
            usleep(1000);                                                                          \
        }                                                                                          \
    } while (0)

static bool
readable(int fd)
{
    struct pollfd pfd = {fd, POLLIN, 0};

    return poll(&pfd, 1, 0) > 0;
}

/* The next packet for fd; its type, or 0 if none came within WAIT_MS. */
static int
next(struct rig *r, int fd, struct peer_pkt *p)
{
    memset(p, 0, sizeof(*p));
    PUMP_UNTIL(r, readable(fd));
    if (!readable(fd))
        return 0;
    return peer_recv(fd, p, 1000);
}

/* Whether fd gets nothing while the loop runs for a while. */
static bool
quiet(struct rig *r, int fd)
{
    int i;

    for (i = 0; i < 50; i++) {
        turn(r);
        usleep(1000);
    }
    return !readable(fd);
}

/* Receive one packet and check its type and (if want_arg) its first argument. */
static bool __attribute__((format(printf, 5, 6)))
expect(struct rig *r, int fd, int type, const char *want_arg, const char *fmt, ...)
{
    struct peer_pkt p;
    char what[256];
    va_list ap;
    int got = next(r, fd, &p);
    bool ok =
        got == type && (want_arg == NULL || (p.nargs > 0 && p.arg_len[0] == strlen(want_arg) &&
                                             memcmp(p.arg[0], want_arg, p.arg_len[0]) == 0));

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (!tap_ok(ok, "%s", what))
        tap_diag("got %s (%d) \"%.*s\", want %s \"%s\"", packet_name((uint32_t)got), got,
                 p.nargs > 0 ? (int)p.arg_len[0] : 0, p.nargs > 0 ? (const char *)p.arg[0] : "",
                 packet_name((uint32_t)type), want_arg ? want_arg : "");
    peer_pkt_release(&p);
    return ok;
}

static void
submit_bg(int fd, const char *unique, const char *data)
{
    if (peer_send(fd, PACKET_SUBMIT_JOB_BG, 3, "f", unique, data) < 0)
        tap_bail("cannot send a submit");
}

static struct job *
find(struct rig *r, const char *handle)
{
    return queue_find_job(&r->srv->queue, handle, strlen(handle));
}

static bool
queued(struct rig *r, const char *handle)
{
    struct job *j = find(r, handle);

    return j != NULL && j->state == JOB_QUEUED;
}

/* --- the cases ------------------------------------------------------------ */

static void
test_group_commit(void)
{
    struct rig r;
    int c;

    fake_reset();
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    submit_bg(c, "", "a");
    submit_bg(c, "", "b");
    submit_bg(c, "", "c");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "group commit: first JOB_CREATED names H:t:1");
    expect(&r, c, PACKET_JOB_CREATED, hdl(2), "group commit: second names H:t:2");
    expect(&r, c, PACKET_JOB_CREATED, hdl(3), "group commit: third names H:t:3");
    tap_is_int(fake_get(&fake.flushes), 1, "group commit: one flush for a turn's three submits");
    tap_is_int(fake.batch_adds[0], 3, "group commit: that flush carried three adds");
    tap_ok(fake_stored(1) && fake_stored(2) && fake_stored(3), "group commit: all three stored");
    tap_ok(queued(&r, hdl(1)) && queued(&r, hdl(2)) && queued(&r, hdl(3)),
           "group commit: committed jobs are queued for workers");
    tap_is_int((long long)r.srv->storage.commits, 1, "group commit: storage counts one commit");
    close(c);
    rig_stop(&r);
}

/* A waiter of test_hold's: counts its continuation. */
static unsigned hold_done_n;

static void
hold_done(struct srv *srv, struct storage_wait *w, bool ok, const char *why)
{
    (void)srv, (void)w, (void)ok, (void)why;
    hold_done_n++;
}

/*
 * storage_hold keeps a full open batch from being handed over until
 * storage_release (dispatch.c: a job's add and its dependency edges share
 * a commit): with --store-batch 1 the first waiter would be flushed alone.
 */
static void
test_hold(void)
{
    struct storage_wait w1 = {hold_done, NULL, NULL, {NULL, NULL}}, w2 = w1, w3 = w1;
    struct rig r;

    fake_reset();
    rig_start(&r, 0, 1);
    hold_done_n = 0;
    storage_hold(r.srv);
    storage_wait(r.srv, &w1);
    tap_ok(r.srv->storage.inflight == NULL, "hold: a full batch is not handed over while held");
    storage_wait(r.srv, &w2);
    tap_is_int(r.srv->storage.open.nacks, 2, "hold: the second waiter joins the same batch");
    storage_release(r.srv);
    tap_ok(r.srv->storage.inflight != NULL && r.srv->storage.open.nacks == 0,
           "hold: released, the full batch goes at once");
    PUMP_UNTIL(&r, hold_done_n == 2);
    tap_is_int(hold_done_n, 2, "hold: both waiters answered");
    tap_is_int(fake_get(&fake.flushes), 1, "hold: in one flush");
    storage_wait(r.srv, &w3);
    PUMP_UNTIL(&r, hold_done_n == 3);
    tap_is_int(fake_get(&fake.flushes), 2, "hold: unheld, a full batch goes alone as before");
    rig_stop(&r);
}

static void
test_answer_order(void)
{
    struct rig r;
    int a, b, c;

    fake_reset();
    fake.hold = true;
    rig_start(&r, 0, 0);
    a = rig_client(&r);
    b = rig_client(&r);
    c = rig_client(&r);
    submit_bg(a, "", "x");
    peer_send(a, PACKET_ECHO_REQ, 1, "after x");
    PUMP_UNTIL(&r, fake_holding());
    tap_ok(fake.holding, "order: the writer holds the first batch's flush");
    tap_ok(find(&r, hdl(1)) != NULL && find(&r, hdl(1))->state == JOB_PENDING,
           "order: the job waits for its commit, not yet queued");
    peer_send(b, PACKET_ECHO_REQ, 1, "b");
    expect(&r, b, PACKET_ECHO_RES, "b", "order: another connection is answered meanwhile");
    tap_ok(quiet(&r, a), "order: no JOB_CREATED before the commit, and the echo waits behind it");
    submit_bg(c, "", "z");
    PUMP_UNTIL(&r, find(&r, hdl(2)) != NULL);
    tap_ok(find(&r, hdl(2)) != NULL, "order: a submit while a batch is in flight is taken");
    tap_ok(quiet(&r, c), "order: and waits for its own commit");
    fake_set_hold(false);
    expect(&r, a, PACKET_JOB_CREATED, hdl(1), "order: JOB_CREATED comes after the commit");
    expect(&r, a, PACKET_ECHO_RES, "after x", "order: then the request that waited behind it");
    expect(&r, c, PACKET_JOB_CREATED, hdl(2), "order: the next batch is committed after it");
    tap_is_int(fake_get(&fake.flushes), 2, "order: two batches, two flushes");
    close(a), close(b), close(c);
    rig_stop(&r);
}

static void
test_commit_fails(void)
{
    struct rig r;
    struct peer_pkt p;
    int c, t;

    fake_reset();
    fake.fail_flushes = 1;
    rig_extra.retry_ms = RETRY_MS;
    rig_start(&r, 0, 0);
    rig_extra.retry_ms = 0;
    c = rig_client(&r);
    submit_bg(c, "", "x");
    submit_bg(c, "", "y");
    t = next(&r, c, &p);
    tap_ok(t == PACKET_ERROR && p.nargs == 2 && strcmp((char *)p.arg[0], "STORE_ERROR") == 0,
           "failed commit: the first submitter gets ERROR STORE_ERROR");
    tap_ok(p.nargs == 2 && strstr((const char *)p.arg[1], "fake: disk full") != NULL,
           "failed commit: the error says why");
    peer_pkt_release(&p);
    expect(&r, c, PACKET_ERROR, "STORE_ERROR", "failed commit: so does the second");
    tap_ok(find(&r, hdl(1)) == NULL && find(&r, hdl(2)) == NULL,
           "failed commit: its jobs are dropped");
    tap_is_int((long long)r.srv->queue.njobs, 0, "failed commit: the queue holds nothing");
    tap_is_int((long long)r.srv->storage.failures, 1, "failed commit: storage counts a failure");
    tap_ok(logged(&r, "store: commit of 2 jobs failed: fake: disk full"),
           "failed commit: the log says how many and why");
    PUMP_UNTIL(&r, fake_get(&fake.flushes) >= 2);
    tap_is_int(fake_get(&fake.flushes), 2, "failed commit: flushed again with nothing new");
    submit_bg(c, "", "z");
    expect(&r, c, PACKET_JOB_CREATED, hdl(3), "failed commit: the store works again after");
    tap_ok(fake_stored(3) && !fake_stored(1), "failed commit: only the later job is stored");
    close(c);
    rig_stop(&r);
}

static void
test_add_refused(void)
{
    struct rig r;
    int c;

    fake_reset();
    fake.fail_add_id = 2;
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    submit_bg(c, "", "a");
    submit_bg(c, "", "b");
    submit_bg(c, "", "c");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "refused add: the job before it is created");
    expect(&r, c, PACKET_ERROR, "STORE_ERROR", "refused add: its submitter gets ERROR");
    expect(&r, c, PACKET_JOB_CREATED, hdl(3), "refused add: the job after it is created");
    tap_ok(find(&r, hdl(2)) == NULL, "refused add: the refused job is dropped");
    tap_is_int((long long)r.srv->queue.njobs, 2, "refused add: the others are queued");
    tap_ok(logged(&r, "store: job H:t:00000000000000000002 refused: fake: add of 2 refused"),
           "refused add: the log names the job and says why");
    close(c);
    rig_stop(&r);
}

static void
test_coalesce(bool fail)
{
    const char *how = fail ? "coalesced, failed" : "coalesced";
    struct rig r;
    int a, b;

    fake_reset();
    fake.fail_flushes = fail ? 1 : 0;
    rig_start(&r, 0, 0);
    a = rig_client(&r);
    b = rig_client(&r);
    submit_bg(a, "u", "a");
    submit_bg(b, "u", "b");
    if (fail) {
        expect(&r, a, PACKET_ERROR, "STORE_ERROR", "coalesced, failed: the first submitter hears");
        expect(&r, b, PACKET_ERROR, "STORE_ERROR", "coalesced, failed: so does the one on it");
    } else {
        expect(&r, a, PACKET_JOB_CREATED, hdl(1), "coalesced: the first submitter gets H:t:1");
        expect(&r, b, PACKET_JOB_CREATED, hdl(1), "coalesced: the same unique gets it too");
    }
    tap_is_int(fake.batch_adds[0], 1, "%s: one add for both", how);
    tap_is_int((long long)r.srv->queue.njobs, fail ? 0 : 1, "%s: jobs in the queue", how);
    tap_ok(quiet(&r, a) && quiet(&r, b), "%s: one answer each", how);
    close(a), close(b);
    rig_stop(&r);
}

static void
test_refusals(void)
{
    struct rig r;
    int a, b;

    fake_reset();
    fake.hold = true;
    rig_start(&r, 1, 0);
    a = rig_client(&r);
    b = rig_client(&r);
    submit_bg(a, "", "x");
    submit_bg(a, "", "y");
    PUMP_UNTIL(&r, fake_holding());
    submit_bg(b, "", "w");
    expect(&r, b, PACKET_ERROR, "QUEUE_ERROR",
           "refusal: a client owed nothing is refused at once (--max-jobs)");
    tap_ok(quiet(&r, a), "refusal: one owed an answer hears nothing before the commit");
    fake_set_hold(false);
    expect(&r, a, PACKET_JOB_CREATED, hdl(1), "refusal: first the answer it was owed");
    expect(&r, a, PACKET_ERROR, "QUEUE_ERROR", "refusal: then its refusal, in order");
    tap_ok(quiet(&r, a), "refusal: and nothing else");
    tap_is_int(fake.batch_adds[0], 1, "refusal: the refused job is not stored");
    close(a), close(b);
    rig_stop(&r);
}

/*
 * Out of memory for a refusal's text: the client gets one ERROR and no
 * JOB_CREATED. (A half-made answer, no job and no error, once stayed
 * queued: the client got its ERROR at once, then JOB_CREATED of a NULL job
 * (a crash), or, when the commit failed, a second ERROR.)
 */
static void
test_refuse_nomem(bool commit_fails)
{
    const char *how =
        commit_fails ? "refusal without memory, failed commit" : "refusal without memory";
    struct rig r;
    struct peer_pkt p;
    int c, t, created = 0, errors = 0, others = 0, i;

    fake_reset();
    fake.hold = true;
    fake.fail_flushes = commit_fails ? 1 : 0;
    rig_start(&r, 1, 0);
    c = rig_client(&r);
    submit_bg(c, "", "x");
    PUMP_UNTIL(&r, fake_holding());
    fail_alloc("error", 1);
    submit_bg(c, "", "y"); /* over --max-jobs: refused behind x's answer */
    PUMP_UNTIL(&r, failed == 1);
    tap_is_int(failed, 1, "%s: the seam failed the allocation", how);
    fake_set_hold(false);
    for (i = 0; i < 2; i++) {
        t = next(&r, c, &p);
        if (t == PACKET_JOB_CREATED && p.nargs == 1 && p.arg_len[0] == strlen(hdl(1)) &&
            memcmp(p.arg[0], hdl(1), p.arg_len[0]) == 0)
            created++;
        else if (t == PACKET_ERROR)
            errors++;
        else
            others++;
        peer_pkt_release(&p);
    }
    tap_is_int(created, commit_fails ? 0 : 1, "%s: JOB_CREATED for x", how);
    tap_is_int(errors, commit_fails ? 2 : 1, "%s: errors: the refusal (and x's)", how);
    tap_is_int(others, 0, "%s: nothing else in the first two answers", how);
    /* A failed commit is retried after a second: wait for what it brings. */
    PUMP_UNTIL(&r, r.srv->storage.open.nacks == 0 && r.srv->storage.inflight == NULL);
    tap_is_int(r.srv->storage.open.nacks, 0, "%s: no answer left owed", how);
    tap_ok(quiet(&r, c), "%s: and no further answer", how);
    close(c);
    rig_stop(&r);
}

/*
 * Out of memory for a new job's answer: the job is not stored, as its
 * client is told. (The job was once in the batch already: it was stored,
 * would run after a restart and stayed pending for good, while its client
 * was told "out of memory".)
 */
static void
test_submit_nomem(const char *what)
{
    struct rig r;
    int a, b;

    fake_reset();
    rig_start(&r, 0, 0);
    a = rig_client(&r);
    b = rig_client(&r);
    fail_alloc(what, 1);
    submit_bg(a, "", "x");
    expect(&r, a, PACKET_ERROR, "MEMORY_ALLOCATION_FAILURE",
           "submit without memory for the %s: the client is told", what);
    submit_bg(b, "", "y");
    PUMP_UNTIL(&r, readable(b));
    expect(&r, b, PACKET_JOB_CREATED, NULL, "submit without memory for the %s: the next one works",
           what);
    tap_is_int(fake_get(&fake.nstored), 1,
               "submit without memory for the %s: only the next job is stored", what);
    tap_is_int((long long)r.srv->queue.njobs, 1,
               "submit without memory for the %s: no job is left pending", what);
    tap_is_int(queue_func(&r.srv->queue, "f", 1, false)->npending, 0,
               "submit without memory for the %s: the function has no pending job", what);
    close(a), close(b);
    rig_stop(&r);
}

/*
 * The batch cannot be allocated with --store-batch answers waiting.
 * Before the fix storage_flush called schedule(), which past
 * --store-batch calls storage_flush again: a recursion as deep as the
 * allocation keeps failing.
 */
static void
test_batch_nomem(void)
{
    struct rig r;
    int c;

    fake_reset();
    rig_start(&r, 0, 1);
    c = rig_client(&r);
    fail_alloc("batch", 100000);
    submit_bg(c, "", "x");
    PUMP_UNTIL(&r, failed > 0);
    tap_ok(failed > 0, "batch without memory: the hand-over failed");
    tap_ok(quiet(&r, c), "batch without memory: no answer yet");
    tap_ok(failed < 1000, "batch without memory: retried on a timer, not in a loop (%d tries)",
           failed);
    fail_alloc(NULL, 0);
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "batch without memory: committed once there is");
    tap_ok(logged(&r, "store: out of memory for a batch; trying again"),
           "batch without memory: the log says so");
    close(c);
    rig_stop(&r);
}

static void
test_replay_and_remove(void)
{
    struct rig r;
    struct store_job *sj;
    int w, i;

    fake_reset();
    for (i = 0; i < 2; i++) {
        static char handles[2][16];

        snprintf(handles[i], sizeof(handles[i]), "H:t:%d", 7 + 2 * i);
        sj = &fake.replay[i];
        sj->id = (uint64_t)(7 + 2 * i);
        sj->seq = (uint64_t)(3 + i);
        sj->handle = handles[i];
        sj->handle_len = strlen(handles[i]);
        sj->func = "f";
        sj->func_len = 1;
        sj->unique = "";
        sj->data = "d";
        sj->data_len = 1;
        sj->prio = 1;
        fake.stored[fake.nstored++] = sj->id;
    }
    fake.nreplay = 2;
    rig_start(&r, 0, 0);
    tap_ok(queued(&r, "H:t:7") && queued(&r, "H:t:9"), "replay: stored jobs are queued at open");
    tap_is_int((long long)r.srv->next_job_id, 10, "replay: new handles follow the highest id");
    tap_is_int((long long)r.srv->next_seq, 5, "replay: and new jobs the highest seq");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, "H:t:7", "replay: the first replayed job runs first");
    peer_send(w, PACKET_WORK_COMPLETE, 2, "H:t:7", "done");
    PUMP_UNTIL(&r, fake_get(&fake.removes) >= 1);
    tap_ok(!fake_stored(7) && fake_stored(9), "remove: a finished job is deleted from the store");
    fail_alloc("remove", 1);
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, "H:t:9", "remove: the second job runs");
    peer_send(w, PACKET_WORK_COMPLETE, 2, "H:t:9", "done");
    PUMP_UNTIL(&r, find(&r, "H:t:9") == NULL);
    tap_ok(quiet(&r, w) && failed == 1 && fake_stored(9),
           "remove without memory: the job stays stored (it runs again after a restart)");
    tap_is_int(fake_get(&fake.removes), 1, "remove without memory: no remove reached the store");
    tap_ok(
        logged(&r, "store: out of memory to remove job H:t:9: it will run again after a restart"),
        "remove without memory: the log says what it means");
    close(w);
    rig_stop(&r);
}

/*
 * A stored job that goes to the dead set is rewritten, not deleted, and
 * stays SETTLING (counted as running) until that rewrite commits; a failed
 * commit takes the rewrite again with the next one.
 */
static void
test_dead_rewrite(void)
{
    struct store_job got;
    struct rig r;
    struct job *j;
    int c, w;

    fake_reset();
    rig_extra.max_dead = 5;
    rig_extra.retry_on = DSJOB_RETRY_FAIL;
    rig_extra.job_retries = 1;
    rig_extra.retry_ms = RETRY_MS;
    rig_start(&r, 0, 0);
    rig_extra.max_dead = rig_extra.retry_on = rig_extra.job_retries = rig_extra.retry_ms = 0;
    c = rig_client(&r);
    submit_bg(c, "u", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "dead rewrite: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "dead rewrite: assigned");
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 1;
    pthread_mutex_unlock(&fake.lock);
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1));
    PUMP_UNTIL(&r, fake_get(&fake.flushes) >= 2 && find(&r, hdl(1)) != NULL &&
                       find(&r, hdl(1))->state == JOB_SETTLING);
    j = find(&r, hdl(1));
    tap_ok(j != NULL && j->state == JOB_SETTLING && !fake_updated(1, &got),
           "dead rewrite: after a failed commit the job is still settling, nothing stored");
    PUMP_UNTIL(&r, fake_updated(1, &got));
    tap_ok(fake_updated(1, &got) && got.state == STORE_DEAD && got.attempts == 1,
           "dead rewrite: the next commit stores it dead, with its one attempt");
    tap_ok(fake_stored(1) && fake_get(&fake.removes) == 0, "dead rewrite: not deleted");
    PUMP_UNTIL(&r, (j = find(&r, hdl(1))) != NULL && j->state == JOB_DEAD);
    tap_ok(j != NULL && j->state == JOB_DEAD && r.srv->queue.kept.tqh_first == NULL &&
               j->func->ndead == 1,
           "dead rewrite: then it is in the dead set");
    close(w);
    close(c);
    rig_stop(&r);
}

static void
test_forget_and_drain(void)
{
    struct rig r;
    int a, b;

    fake_reset();
    fake.hold = true;
    rig_start(&r, 0, 0);
    a = rig_client(&r);
    submit_bg(a, "", "x");
    PUMP_UNTIL(&r, fake_holding());
    close(a);
    PUMP_UNTIL(&r, r.srv->nconns == 0);
    tap_is_int(r.srv->nconns, 0, "forget: the client that went is closed");
    fake_set_hold(false);
    PUMP_UNTIL(&r, queued(&r, hdl(1)));
    tap_ok(queued(&r, hdl(1)) && fake_stored(1), "forget: its job still commits and is queued");
    b = rig_client(&r);
    fake_set_hold(true);
    submit_bg(b, "", "y");
    PUMP_UNTIL(&r, fake_holding());
    submit_bg(b, "", "z"); /* gathers behind the batch in flight */
    PUMP_UNTIL(&r, find(&r, hdl(3)) != NULL);
    fake_set_hold(false);
    srv_stop(r.srv, false); /* storage_drain: the batch in flight, then the open one */
    tap_ok(fake_stored(2) && fake_stored(3),
           "drain: what was handed in before a stop is committed");
    expect(&r, b, PACKET_JOB_CREATED, hdl(2), "drain: and answered before the client is closed");
    expect(&r, b, PACKET_JOB_CREATED, hdl(3), "drain: both batches");
    rig_stop(&r);
    tap_ok(fake.closed, "drain: the store is closed with the server");
    close(b);
}

static void
test_must_wait(void)
{
    struct conn c;

    memset(&c, 0, sizeof(c));
    tap_ok(!durable_must_wait(&c, PACKET_ECHO_REQ), "must_wait: nothing owed, nothing waits");
    c.nacks = 1;
    tap_ok(durable_must_wait(&c, PACKET_ECHO_REQ), "must_wait: owed, an echo waits");
    tap_ok(durable_must_wait(&c, PACKET_SUBMIT_JOB), "must_wait: and a foreground submit");
    tap_ok(durable_must_wait(&c, 0), "must_wait: and an admin line");
    tap_ok(!durable_must_wait(&c, PACKET_SUBMIT_JOB_BG) &&
               !durable_must_wait(&c, PACKET_SUBMIT_JOB_HIGH_BG) &&
               !durable_must_wait(&c, PACKET_SUBMIT_JOB_LOW_BG) &&
               !durable_must_wait(&c, PACKET_SUBMIT_JOB_EPOCH) &&
               !durable_must_wait(&c, PACKET_SUBMIT_REDUCE_JOB_BACKGROUND),
           "must_wait: background submits do not (they share the batch)");
}

/* Send an admin line on fd; whether the answer's first line starts with want. */
static bool
admin_says(struct rig *r, int fd, const char *line, const char *want)
{
    char buf[512];
    size_t n = 0;
    int ms;

    if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
        tap_bail("cannot send an admin line");
    for (ms = 0; ms < WAIT_MS && memchr(buf, '\n', n) == NULL && n < sizeof(buf) - 1; ms++) {
        ssize_t k;

        turn(r);
        k = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (k > 0)
            n += (size_t)k;
        else
            usleep(1000);
    }
    buf[n] = '\0';
    if (strncmp(buf, want, strlen(want)) != 0) {
        tap_diag("%s: got \"%s\", want \"%s...\"", line, buf, want);
        return false;
    }
    return true;
}

static void
replay_row(unsigned i, uint64_t id, const char *func, int state, int64_t when, const char *result)
{
    static char handles[8][16];
    struct store_job *sj = &fake.replay[i];

    snprintf(handles[i], sizeof(handles[i]), "H:t:%llu", (unsigned long long)id);
    memset(sj, 0, sizeof(*sj));
    sj->id = id;
    sj->seq = i + 1;
    sj->handle = handles[i];
    sj->handle_len = strlen(handles[i]);
    sj->func = func;
    sj->func_len = strlen(func);
    sj->unique = "";
    sj->data = "d";
    sj->data_len = 1;
    sj->prio = JOB_PRIO_NORMAL;
    sj->state = state;
    sj->when = when;
    sj->result = result;
    sj->result_len = result ? strlen(result) : 0;
    fake.stored[fake.nstored++] = id;
    if (i + 1 > fake.nreplay)
        fake.nreplay = i + 1;
}

/*
 * Every state a stored job can be in comes back as it was: queued,
 * scheduled (an epoch job), retrying with its attempts, run-at and last
 * failure's text, dead with its reason, kept with its result; and the
 * functions' settings. A
 * row with an unknown state runs again (logged), one with an impossible
 * priority runs at normal. With --keep-results 0 a kept row is dropped,
 * and its deletion reaches the store.
 */
static void
test_replay_states(unsigned keep, bool nomem)
{
    const char *how = keep    ? "replay states"
                      : nomem ? "replay states, no keep, no memory"
                              : "replay states, no keep";
    int64_t now = (int64_t)time(NULL);
    struct rig r;
    struct job *j;
    struct func *f;

    fake_reset();
    replay_row(0, 1, "f", STORE_LIVE, 0, NULL);
    fake.replay[0].first_fail = now - 30; /* a failure, but no attempt counted: still queued */
    replay_row(1, 2, "f", STORE_LIVE, now + 3600, NULL);
    replay_row(2, 3, "f", STORE_LIVE, now + 3600, "why it failed");
    fake.replay[2].attempts = 2;
    fake.replay[2].first_fail = now - 20;
    fake.replay[2].last_fail = now - 10;
    replay_row(3, 4, "f", STORE_DEAD, 0, "why it died");
    fake.replay[3].attempts = 3;
    replay_row(4, 5, "f", STORE_DONE_COMPLETE, 0, "the result");
    replay_row(5, 6, "f", 99, 0, NULL);
    fake.replay[5].prio = 9;
    replay_row(6, 12, "g", STORE_LIVE, 0, NULL);
    replay_row(7, 8, "f", -1, 0, NULL); /* a lower id, the same seq as the one before */
    fake.replay[7].seq = 7;
    fake.replay[7].prio = -1;
    fake.funcs[0] = (struct store_func){
        .name = "f", .name_len = 1, .retries = 4, .backoff_base_ms = 1000, .backoff_max_ms = 8000};
    fake.funcs[1] = (struct store_func){.name = "h", .name_len = 1, .retries = 2};
    fake.nfuncs = 2;
    rig_extra.keep_results = keep;
    rig_extra.max_dead = 5;
    if (nomem)
        fail_alloc("remove", 1);
    rig_start(&r, 0, 0);
    rig_extra.keep_results = rig_extra.max_dead = 0;
    tap_ok(queued(&r, "H:t:1"), "%s: a queued job is queued", how);
    j = find(&r, "H:t:2");
    tap_ok(j != NULL && j->state == JOB_SCHEDULED && job_when(j) == now + 3600,
           "%s: an epoch job is scheduled for its time", how);
    j = find(&r, "H:t:3");
    tap_ok(j != NULL && j->state == JOB_SCHEDULED && job_attempts(j) == 2 &&
               j->ext->first_fail == now - 20 && j->ext->last_fail == now - 10,
           "%s: a retrying job waits for its run-at, with its attempts and failures", how);
    tap_ok(j != NULL && j->ext->error_len == 13 && memcmp(j->ext->error, "why it failed", 13) == 0,
           "%s: and with the text of its last failure, which show job prints", how);
    j = find(&r, "H:t:4");
    tap_ok(j != NULL && j->state == JOB_DEAD && job_attempts(j) == 3 && j->ext->error_len == 11 &&
               memcmp(j->ext->error, "why it died", 11) == 0 && j->func->ndead == 1,
           "%s: a dead job is in the dead set, with why", how);
    j = find(&r, "H:t:5");
    if (keep)
        tap_ok(j != NULL && j->state == JOB_DONE && j->ext->result_len == 10 &&
                   memcmp(j->ext->result, "the result", 10) == 0 && j->func->nkept == 1,
               "%s: a kept result is kept", how);
    else
        tap_ok(j == NULL, "%s: a kept result is dropped", how);
    j = find(&r, "H:t:6");
    tap_ok(j != NULL && j->state == JOB_QUEUED && j->prio == JOB_PRIO_NORMAL,
           "%s: a row of unknown state is queued to run, at normal priority", how);
    tap_ok(logged(&r, "store: job H:t:6 has an unknown state 99: it is queued to run again"),
           "%s: and the log says so", how);
    j = find(&r, "H:t:8");
    tap_ok(j != NULL && j->state == JOB_QUEUED && j->prio == JOB_PRIO_NORMAL &&
               logged(&r, "store: job H:t:8 has an unknown state -1"),
           "%s: so is one of a negative state and priority", how);
    tap_ok(queued(&r, "H:t:12") &&
               find(&r, "H:t:12")->func == queue_func(&r.srv->queue, "g", 1, false),
           "%s: a job of another function is queued in it", how);
    f = queue_func(&r.srv->queue, "f", 1, false);
    tap_ok(f != NULL && f->retries == 4 && f->backoff_base_ms == 1000 && f->backoff_max_ms == 8000,
           "%s: a function's settings come back", how);
    f = queue_func(&r.srv->queue, "h", 1, false);
    tap_ok(f != NULL && f->retries == 2, "%s: also of a function with no job", how);
    tap_is_int((long long)r.srv->next_job_id, 13, "%s: new handles follow the highest id", how);
    tap_is_int((long long)r.srv->next_seq, 8, "%s: new jobs follow the highest seq", how);
    tap_ok(logged(&r, keep ? "store fake: replayed 8 jobs" : "store fake: replayed 7 jobs"),
           "%s: the log counts them", how);
    if (!keep && !nomem) {
        PUMP_UNTIL(&r, fake_get(&fake.removes) >= 1);
        tap_ok(!fake_stored(5) && fake_stored(4), "%s: the dropped result is deleted", how);
    } else if (nomem) {
        tap_ok(failed == 1 && fake_stored(5) &&
                   logged(&r, "store: out of memory to remove job H:t:5: it comes back after a "
                              "restart"),
               "%s: without memory the dropped result stays stored, and the log says so", how);
    }
    rig_stop(&r);
}

/*
 * A store that cannot be opened or read stops the start, saying why;
 * nothing half-replayed runs.
 */
static void
test_replay_fails(int what)
{
    static const char *const hows[] = {"unopenable store", "unreadable jobs",
                                       "unreadable settings"};
    static const char *const says[] = {"fake: cannot open",
                                       "replaying the store: fake: cannot read the jobs",
                                       "replaying the store: fake: cannot read the functions"};
    struct rig r;

    fake_reset();
    fake.open_fails = what == 0;
    fake.replay_fails = what == 1;
    fake.replay_funcs_fails = what == 2;
    tap_ok(rig_try_start(&r, 0, 0) != DSJOB_OK, "%s: the server does not start", hows[what]);
    tap_ok(strstr(r.srv->errmsg, says[what]) != NULL, "%s: it says why (%s)", hows[what],
           r.srv->errmsg);
    rig_stop(&r);
}

/* --store none, with no seam: nothing is kept, no writer runs, submits are answered at once. */
static void
test_store_none(void)
{
    struct rig r;
    int c;

    fake_reset();
    rig_extra.store = "none";
    rig_start(&r, 0, 0);
    rig_extra.store = NULL;
    tap_ok(!r.srv->storage.durable && !r.srv->storage.writer_running,
           "store none: none is not durable and has no writer");
    c = rig_client(&r);
    submit_bg(c, "", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "store none: none answers at once");
    tap_ok(admin_says(&r, c, "retry f 2\n", "OK"), "store none: a function's settings are taken");
    tap_is_int(fake_get(&fake.flushes), 0, "store none: the fake backend was not used");
    srv_stop(r.srv, false); /* nothing to drain */
    close(c);
    rig_stop(&r);
}

/*
 * A batch's open and close are answered OK only once their row is in the
 * store: without memory for it the admin is told, and nothing changed.
 */
static void
test_batch_admin_nomem(void)
{
    struct rig r;
    int c;

    fake_reset();
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    fail_alloc("op", 1);
    tap_ok(admin_says(&r, c, "batch open b1\n", "ERR MEMORY_ALLOCATION_FAILURE"),
           "batch: without memory to store an open, the admin is told");
    tap_ok(admin_says(&r, c, "batch status b1\n", "ERR UNKNOWN_BATCH"),
           "batch: and the batch is not open");
    tap_ok(admin_says(&r, c, "batch open b1\n", "OK"), "batch: with memory it opens");
    fail_alloc("op", 1);
    tap_ok(admin_says(&r, c, "batch close b1\n", "ERR MEMORY_ALLOCATION_FAILURE"),
           "batch: without memory to store a close, the admin is told");
    tap_ok(admin_says(&r, c, "batch status b1\n",
                      "OK id=b1 total=0 pending=0 done=0 failed=0 "
                      "dead=0 closed=no"),
           "batch: and the batch is still open");
    tap_ok(admin_says(&r, c, "batch close b1\n", "OK"), "batch: with memory it closes");
    close(c);
    rig_stop(&r);
}

/*
 * A batch callback whose job finds no memory when it is due (here at the
 * close of an empty batch: no end comes after it) is tried again on a
 * timer, and submitted once; with the sqlite store.
 */
static void
test_batch_callback_nomem(void)
{
    struct rig r;
    struct func *f;
    int c;

    fake_reset();
    rig_extra.store = "sqlite";
    rig_extra.retry_ms = RETRY_MS;
    rig_start(&r, 0, 0);
    rig_extra.store = NULL;
    rig_extra.retry_ms = 0;
    c = rig_client(&r);
    tap_ok(admin_says(&r, c, "batch open b1 on-complete=cb\n", "OK"), "callback: batch b1 opened");
    fail_alloc("callback", 1);
    tap_ok(admin_says(&r, c, "batch close b1\n", "OK"), "callback: b1 closed empty");
    PUMP_UNTIL(&r, failed == 1);
    tap_is_int(failed, 1, "callback: its job found no memory");
    f = queue_func(&r.srv->queue, "cb", 2, false);
    PUMP_UNTIL(&r, (f = queue_func(&r.srv->queue, "cb", 2, false)) != NULL &&
                       queue_find_unique(f, "batch:b1:complete", 17) != NULL);
    tap_ok(f != NULL && queue_find_unique(f, "batch:b1:complete", 17) != NULL,
           "callback: tried again, its job is queued");
    tap_ok(logged(&r, "out of memory for its on_complete job"), "callback: the log says why");
    tap_ok(quiet(&r, c) && f != NULL && f->stats.submitted == 1, "callback: submitted once");
    tap_ok(admin_says(&r, c, "batch status b1\n",
                      "OK id=b1 total=0 pending=0 done=0 failed=0 "
                      "dead=0 closed=yes on-complete=cb on-success=- "
                      "fired-complete=yes"),
           "callback: b1 says it fired");
    close(c);
    rig_stop(&r);
}

/*
 * A retry rewrites the job's row (its attempts). Without memory for that
 * rewrite the log says the store keeps the job as it was, and the job
 * still runs again; a rewrite whose commit fails is made again from the
 * job, so the store gets its latest state. A function's settings go
 * through the writer too, again after a failed commit; without memory
 * for them the admin is told.
 */
static void
test_rewrites(void)
{
    struct store_job got;
    struct rig r;
    int c, w;

    fake_reset();
    rig_extra.retry_on = DSJOB_RETRY_FAIL;
    rig_extra.job_retries = 5;
    rig_extra.retry_ms = RETRY_MS;
    rig_start(&r, 0, 0);
    rig_extra.retry_on = rig_extra.job_retries = rig_extra.retry_ms = 0;
    c = rig_client(&r);
    submit_bg(c, "u", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "rewrites: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "rewrites: assigned");
    fail_alloc("op", 1);
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1));
    PUMP_UNTIL(&r, queued(&r, hdl(1)));
    tap_ok(queued(&r, hdl(1)) && failed == 1, "rewrites: without memory the job still retries");
    tap_ok(logged(&r, "store: out of memory to update job H:t:00000000000000000001: the store "
                      "keeps it as it was"),
           "rewrites: and the log says the store keeps it as it was");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "rewrites: assigned again");
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 1;
    pthread_mutex_unlock(&fake.lock);
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1));
    PUMP_UNTIL(&r, fake_updated(1, &got));
    tap_ok(fake_updated(1, &got) && got.attempts == 2 && fake_get(&fake.flushes) >= 2,
           "rewrites: after a failed commit the rewrite is stored with the next (attempts 2)");
    fail_alloc("op", 1);
    tap_ok(admin_says(&r, c, "retry f 3\n", "ERR MEMORY_ALLOCATION_FAILURE"),
           "rewrites: without memory for a function's settings the admin is told");
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 1;
    pthread_mutex_unlock(&fake.lock);
    tap_ok(admin_says(&r, c, "retry f 9\n", "OK"), "rewrites: with memory, OK");
    PUMP_UNTIL(&r, fake_get(&fake.set_funcs) >= 2);
    tap_is_int(fake_get(&fake.set_funcs), 2,
               "rewrites: the setting whose commit failed is written again");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "rewrites: assigned a third time");
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 1;
    pthread_mutex_unlock(&fake.lock);
    fail_alloc("op", 1);
    fail_skip = 1; /* the rewrite is made; making it again after the failed commit is not */
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1));
    PUMP_UNTIL(&r, failed == 1);
    tap_ok(failed == 1 &&
               logged(&r, "store: out of memory to update job H:t:00000000000000000001 again"),
           "rewrites: without memory to make it again, the log says so");
    tap_ok(queued(&r, hdl(1)) && job_attempts(find(&r, hdl(1))) == 3,
           "rewrites: and the job runs again all the same");
    close(w), close(c);
    rig_stop(&r);
}

/*
 * Without memory for the answer that holds a worker until its job's
 * deletion commits, the deletion still commits (on the deletions' timer)
 * and the worker is served.
 */
static void
test_settle_nomem(void)
{
    struct rig r;
    int c, w;

    fake_reset();
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    submit_bg(c, "", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "settle without memory: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "settle without memory: assigned");
    fail_alloc("ack", 1);
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(1), "done");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_NO_JOB, NULL, "settle without memory: the worker is served");
    submit_bg(c, "", "y"); /* while the deletion waits for its timer: no waiting behind it */
    expect(&r, c, PACKET_JOB_CREATED, hdl(2), "settle without memory: a submit meanwhile");
    PUMP_UNTIL(&r, fake_get(&fake.removes) >= 1 && find(&r, hdl(1)) == NULL);
    tap_ok(failed == 1 && !fake_stored(1) && find(&r, hdl(1)) == NULL,
           "settle without memory: the job is deleted all the same");
    close(w), close(c);
    rig_stop(&r);
}

/*
 * Without memory for the rewrite that ends a stored job in the dead set,
 * the job still goes there; the store keeps its row as it was (it runs
 * again after a restart), and the log says so.
 */
static void
test_end_nomem(void)
{
    struct store_job got;
    struct rig r;
    int c, w;

    fake_reset();
    rig_extra.max_dead = 5;
    rig_extra.retry_on = DSJOB_RETRY_FAIL;
    rig_extra.job_retries = 1;
    rig_start(&r, 0, 0);
    rig_extra.max_dead = rig_extra.retry_on = rig_extra.job_retries = 0;
    c = rig_client(&r);
    submit_bg(c, "", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "end without memory: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "end without memory: assigned");
    fail_alloc("op", 1);
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1));
    PUMP_UNTIL(&r, find(&r, hdl(1)) != NULL && find(&r, hdl(1))->state == JOB_DEAD);
    tap_ok(find(&r, hdl(1)) != NULL && find(&r, hdl(1))->state == JOB_DEAD,
           "end without memory: the job is in the dead set");
    tap_ok(fake_stored(1) && !fake_updated(1, &got),
           "end without memory: the store keeps its live row");
    tap_ok(logged(&r, "store: out of memory to end job H:t:00000000000000000001: it will run again "
                      "after a restart"),
           "end without memory: the log says what that means");
    close(w), close(c);
    rig_stop(&r);
}

/* --store-commit-interval: the batch waits that long, then commits as one. */
static void
test_interval(void)
{
    struct rig r;
    int c;

    fake_reset();
    rig_extra.interval_ms = 20;
    rig_start(&r, 0, 0);
    rig_extra.interval_ms = 0;
    c = rig_client(&r);
    submit_bg(c, "", "a");
    turn(&r);
    submit_bg(c, "", "b");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "commit interval: the first is created");
    expect(&r, c, PACKET_JOB_CREATED, hdl(2), "commit interval: then the second");
    tap_ok(fake_stored(1) && fake_stored(2), "commit interval: both stored");
    close(c);
    rig_stop(&r);
}

/*
 * A stop waits for three batches (the one in flight, the one behind it,
 * and the one that answering those let in); the close after it closes
 * the connections first, so what they let in last is committed, and
 * nothing more comes in. The client here keeps a submit waiting behind
 * each answer (an echo between submits, but for one pair): of seven,
 * five are stored.
 */
static void
test_drain_rounds(void)
{
    struct rig r;
    int c, i;

    fake_reset();
    fake.hold = true;
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    for (i = 0; i < 7; i++) {
        submit_bg(c, "", "x");
        if (i != 3) /* the fourth and fifth go together */
            peer_send(c, PACKET_ECHO_REQ, 1, "e");
    }
    PUMP_UNTIL(&r, fake_holding());
    for (i = 0; i < 50; i++)
        turn(&r); /* everything read: the rest waits behind the first answer */
    fake_set_hold(false);
    srv_stop(r.srv, false);
    tap_ok(fake_stored(1) && fake_stored(2) && fake_stored(3) && !fake_stored(4),
           "drain rounds: a stop commits three batches");
    rig_stop(&r);
    tap_ok(fake_stored(4) && fake_stored(5) && !fake_stored(6),
           "drain rounds: the close one more (two jobs), and no other");
    close(c);
}

/*
 * A store that fails every commit at a stop: the drain tries three times
 * and gives up; what it still holds (a function's settings) is freed
 * with the close, and the backend is closed all the same.
 */
static void
test_close_failing(void)
{
    struct rig r;
    int c;

    fake_reset();
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 100;
    pthread_mutex_unlock(&fake.lock);
    tap_ok(admin_says(&r, c, "retry f 2\n", "OK"), "close failing: a function's settings set");
    PUMP_UNTIL(&r, fake_get(&fake.flushes) >= 1 && r.srv->storage.inflight == NULL);
    close(c);
    rig_stop(&r);
    tap_ok(fake.closed && fake.flushes == 4 && fake.set_funcs == 4,
           "close failing: its write was tried once and three times at the close (%u flushes)",
           fake.flushes);
}

/* An epoch job is scheduled once its commit is in, not queued. */
static void
test_epoch(void)
{
    char when[32];
    struct rig r;
    struct job *j;
    int c;

    fake_reset();
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    snprintf(when, sizeof(when), "%lld", (long long)time(NULL) + 3600);
    peer_send(c, PACKET_SUBMIT_JOB_EPOCH, 4, "f", "", when, "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "epoch: created after its commit");
    j = find(&r, hdl(1));
    tap_ok(j != NULL && j->state == JOB_SCHEDULED && fake_stored(1),
           "epoch: stored and scheduled for its time");
    close(c);
    rig_stop(&r);
}

/* A foreground job is never written to the store, also not when it fails. */
static void
test_foreground(void)
{
    struct rig r;
    int c, w;

    fake_reset();
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    peer_send(c, PACKET_SUBMIT_JOB, 3, "f", "", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "foreground: created at once");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "foreground: assigned");
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1));
    expect(&r, c, PACKET_WORK_FAIL, hdl(1), "foreground: its client hears the failure");
    tap_ok(fake_get(&fake.flushes) == 0 && fake_get(&fake.nupdated) == 0,
           "foreground: the store never saw it");
    close(w), close(c);
    rig_stop(&r);
}

/* An admin cancel of a stored job deletes it from the store (nobody's answer waits on it). */
static void
test_cancel_stored(void)
{
    struct rig r;
    int c;

    fake_reset();
    rig_start(&r, 0, 0);
    c = rig_client(&r);
    submit_bg(c, "", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "cancel: stored");
    tap_ok(admin_says(&r, c, "cancel job H:t:00000000000000000001\n", "OK"),
           "cancel: the admin cancels it");
    PUMP_UNTIL(&r, fake_get(&fake.removes) >= 1 && find(&r, hdl(1)) == NULL);
    tap_ok(!fake_stored(1) && find(&r, hdl(1)) == NULL, "cancel: it is deleted from the store");
    close(c);
    rig_stop(&r);
}

/*
 * A submit that coalesces onto a stored job but whose answer cannot be
 * allocated is told out of memory; the job it joined is not touched.
 */
static void
test_coalesce_nomem(void)
{
    struct rig r;
    int a, b;

    fake_reset();
    fake.hold = true;
    rig_start(&r, 0, 0);
    a = rig_client(&r);
    b = rig_client(&r);
    submit_bg(a, "u", "a");
    PUMP_UNTIL(&r, fake_holding());
    fail_alloc("ack", 1);
    submit_bg(b, "u", "b");
    expect(&r, b, PACKET_ERROR, "MEMORY_ALLOCATION_FAILURE", "coalesce without memory: told");
    fake_set_hold(false);
    expect(&r, a, PACKET_JOB_CREATED, hdl(1), "coalesce without memory: the first is created");
    tap_ok(queued(&r, hdl(1)) && fake_stored(1), "coalesce without memory: and queued, stored");
    close(a), close(b);
    rig_stop(&r);
}

static void test_leased_job(void);

static void
run_cases(void)
{
    test_must_wait();
    test_group_commit();
    test_hold();
    test_answer_order();
    test_commit_fails();
    test_add_refused();
    test_coalesce(false);
    test_coalesce(true);
    test_refusals();
    test_replay_and_remove();
    test_dead_rewrite();
    test_forget_and_drain();
    test_submit_nomem("op");
    test_submit_nomem("ack");
    test_batch_nomem();
    test_refuse_nomem(false);
    test_refuse_nomem(true);
    test_replay_states(60, false);
    test_replay_states(0, false);
    test_replay_states(0, true);
    test_replay_fails(0);
    test_replay_fails(1);
    test_replay_fails(2);
    test_store_none();
    test_foreground();
    test_cancel_stored();
    test_coalesce_nomem();
    test_rewrites();
    test_batch_admin_nomem();
    test_batch_callback_nomem();
    test_end_nomem();
    test_settle_nomem();
    test_interval();
    test_drain_rounds();
    test_close_failing();
    test_epoch();
    test_leased_job();
}

/*
 * A job taken by lease from a shared store is made of its row as a
 * replayed one is (job_from_store): priority, attempts, failures and its
 * last WORK_STATUS all come with it; only its id and order are this
 * server's.
 */
static void
test_leased_job(void)
{
    static const char handle[] = "H:other.7:00000000000000000042";
    struct rig r;
    struct job *j;
    int w;

    fake_reset();
    fake.lease_job = (struct store_job){
        .id = 42,
        .seq = 42,
        .handle = handle,
        .handle_len = sizeof(handle) - 1,
        .func = "f",
        .func_len = 1,
        .unique = "",
        .data = "leased",
        .data_len = 6,
        .prio = JOB_PRIO_LOW,
        .state = STORE_LIVE,
        .attempts = 2,
        .first_fail = 1000,
        .last_fail = 2000,
        .numerator = 3,
        .denominator = 7,
        .leased = true,
    };
    rig_extra.ops = &fake_shared_ops;
    rig_start(&r, 0, 0);
    rig_extra.ops = NULL;
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f"); /* a worker here: the lease op asks for f's jobs */
    PUMP_UNTIL(&r, find(&r, handle) != NULL);
    j = find(&r, handle);
    tap_ok(j != NULL && j->state == JOB_QUEUED, "leased: the job taken is queued");
    if (j == NULL)
        tap_bail("leased: no job");
    tap_ok(j->background && j->stored && j->prio == JOB_PRIO_LOW && j->data_len == 6 &&
               memcmp(job_data(j), "leased", 6) == 0,
           "leased: its bytes and priority are the row's");
    tap_ok(j->id != 42, "leased: its id is this server's");
    tap_ok(j->ext != NULL && j->ext->attempts == 2 && j->ext->first_fail == 1000 &&
               j->ext->last_fail == 2000,
           "leased: its attempts and failures are the row's");
    tap_ok(j->ext != NULL && j->ext->numerator == 3 && j->ext->denominator == 7,
           "leased: its status (3/7) is the row's");
    close(w);
    rig_stop(&r);
}

/*
 * A plain update (a retry's rewrite) still committing when the job
 * settles: its commit must not settle the job; the remove's commit does.
 */
static void
test_update_inflight(void)
{
    struct rig r;
    struct job *j;
    struct peer_pkt pk;
    unsigned f0;
    int c, w, s, t;

    fake_reset();
    rig_extra.retry_on = DSJOB_RETRY_FAIL;
    rig_start(&r, 0, 0);
    rig_extra.retry_on = 0;
    c = rig_client(&r);
    submit_bg(c, "u", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "inflight: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "inflight: assigned");
    fake_set_hold(true);
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1)); /* retried at once: storage_update */
    PUMP_UNTIL(&r, fake_holding());
    tap_ok(fake_holding(), "inflight: the batch holding the retry's update is in flight");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "inflight: the retry is assigned again");
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(1), "done");
    PUMP_UNTIL(&r, (j = find(&r, hdl(1))) != NULL && j->state == JOB_SETTLING);
    tap_ok(find(&r, hdl(1)) && find(&r, hdl(1))->state == JOB_SETTLING,
           "inflight: completed, settling (its remove is in the open batch)");
    /* Let the update's batch commit, but hold the next one (the remove). */
    f0 = fake_get(&fake.flushes);
    fake_set_hold(false);
    while (fake_get(&fake.flushes) == f0)
        usleep(100);
    fake_set_hold(true);
    PUMP_UNTIL(&r, fake_holding());
    tap_ok(fake_holding() && fake_stored(1) && fake_get(&fake.removes) == 0,
           "inflight: the remove is in flight, not committed; the row is still stored");
    j = find(&r, hdl(1));
    tap_ok(j != NULL, "inflight: so the job must still be found (got %s)",
           j ? "found" : "NOT FOUND: settled by the update's commit");
    s = rig_client(&r);
    peer_send(s, PACKET_GET_STATUS, 1, hdl(1));
    t = next(&r, s, &pk);
    tap_ok(t == PACKET_STATUS_RES && pk.nargs > 1 && pk.arg[1][0] == '1',
           "inflight: GET_STATUS says known (got known=%c) while the remove is uncommitted",
           pk.nargs > 1 ? pk.arg[1][0] : '?');
    peer_pkt_release(&pk);
    fake_set_hold(false);
    PUMP_UNTIL(&r, fake_get(&fake.removes) >= 1);
    close(s);
    close(w);
    close(c);
    rig_stop(&r);
}

/*
 * A failed batch's plain update (attempt 1, live) must not be written
 * again after the dead rewrite that settles the job: the row says dead.
 */
static void
test_stale_update(void)
{
    struct store_job got;
    struct rig r;
    struct job *j;
    int c, w;

    fake_reset();
    rig_extra.max_dead = 5;
    rig_extra.retry_on = DSJOB_RETRY_FAIL;
    rig_extra.job_retries = 2;
    rig_start(&r, 0, 0);
    rig_extra.max_dead = rig_extra.retry_on = rig_extra.job_retries = 0;
    c = rig_client(&r);
    submit_bg(c, "u", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "stale: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "stale: assigned");
    fake_set_hold(true);
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1)); /* attempt 1 failed: retried, storage_update */
    PUMP_UNTIL(&r, fake_holding());
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "stale: assigned again");
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1)); /* attempt 2 failed: dead, rewrite in open batch */
    PUMP_UNTIL(&r, (j = find(&r, hdl(1))) != NULL && j->state == JOB_SETTLING);
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 1; /* the batch holding the retry's update fails */
    pthread_mutex_unlock(&fake.lock);
    fake_set_hold(false);
    PUMP_UNTIL(&r, (j = find(&r, hdl(1))) != NULL && j->state == JOB_DEAD &&
                       fake_get(&fake.flushes) >= 2);
    j = find(&r, hdl(1));
    tap_ok(j != NULL && j->state == JOB_DEAD, "stale: in memory the job is dead");
    tap_ok(fake_updated(1, &got), "stale: its row was rewritten");
    tap_ok(got.state == STORE_DEAD, "stale: and the row says dead too (got state %d, attempts %u)",
           got.state, (unsigned)got.attempts);
    close(w);
    close(c);
    rig_stop(&r);
}

/* Send an admin line on fd; its answer into buf, read until it holds end (WAIT_MS at most). */
static void
admin_reply(struct rig *r, int fd, const char *line, const char *end, char *buf, size_t size)
{
    size_t n = 0;
    int ms;

    if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
        tap_bail("cannot send an admin line");
    buf[0] = '\0';
    for (ms = 0; ms < WAIT_MS && strstr(buf, end) == NULL && n < size - 1; ms++) {
        ssize_t k;

        turn(r);
        k = read(fd, buf + n, size - 1 - n);
        if (k > 0)
            n += (size_t)k;
        else
            usleep(1000);
        buf[n] = '\0';
    }
}

/*
 * A retried job that completes with --keep-results settles until its
 * commit: meanwhile "show job" gives the error of its failed attempt, not
 * its result as if it were the error; once kept, "show result" gives the
 * result.
 */
static void
test_settling_error(void)
{
    char line[128], buf[1024];
    struct rig r;
    struct job *j;
    int c, w, s;

    fake_reset();
    rig_extra.retry_on = DSJOB_RETRY_FAIL;
    rig_extra.keep_results = 60;
    rig_start(&r, 0, 0);
    rig_extra.retry_on = rig_extra.keep_results = 0;
    c = rig_client(&r);
    submit_bg(c, "u", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "settling error: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "settling error: assigned");
    peer_send(w, PACKET_WORK_FAIL, 1, hdl(1)); /* retried at once */
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "settling error: the retry is assigned");
    fake_set_hold(true);
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(1), "the result");
    PUMP_UNTIL(&r, (j = find(&r, hdl(1))) != NULL && j->state == JOB_SETTLING);
    tap_ok(find(&r, hdl(1)) && find(&r, hdl(1))->state == JOB_SETTLING,
           "settling error: completed, settling until its commit");
    s = rig_client(&r);
    snprintf(line, sizeof(line), "show job %s\n", hdl(1));
    admin_reply(&r, s, line, "\n.\n", buf, sizeof(buf));
    if (!tap_ok(strstr(buf, "\nerror WORK_FAIL\n") != NULL && strstr(buf, "the result") == NULL,
                "settling error: show job gives the failed attempt's error, not the result"))
        tap_diag("got:\n%s", buf);
    fake_set_hold(false);
    PUMP_UNTIL(&r, (j = find(&r, hdl(1))) != NULL && j->state == JOB_DONE);
    snprintf(line, sizeof(line), "show result %s\n", hdl(1));
    admin_reply(&r, s, line, "the result\n", buf, sizeof(buf));
    if (!tap_ok(strcmp(buf, "OK complete 10 0 0 10\nthe result\n") == 0,
                "settling error: once kept, show result gives the result"))
        tap_diag("got:\n%s", buf);
    close(s);
    close(w);
    close(c);
    rig_stop(&r);
}

/* The connection with an end not yet durable, or NULL. */
static struct conn *
ending(struct rig *r)
{
    struct conn *c;

    TAILQ_FOREACH (c, &r->srv->conns, link)
        if (c->nends > 0)
            return c;
    return NULL;
}

/* Whether GET_STATUS of handle on fd answers known and running as given. */
static bool
status_is(struct rig *r, int fd, const char *handle, char known, char running)
{
    struct peer_pkt pk;
    int t;
    bool ok;

    peer_send(fd, PACKET_GET_STATUS, 1, handle);
    t = next(r, fd, &pk);
    ok = t == PACKET_STATUS_RES && pk.nargs > 2 && pk.arg[1][0] == known && pk.arg[2][0] == running;
    if (!ok)
        tap_diag("GET_STATUS %s: got %s known %c running %c", handle, packet_name((uint32_t)t),
                 pk.nargs > 1 ? pk.arg[1][0] : '?', pk.nargs > 2 ? pk.arg[2][0] : '?');
    peer_pkt_release(&pk);
    return ok;
}

/*
 * Pipelined ends: while a worker's end commits, its next
 * job is assigned; a second end before the first has committed holds the
 * worker until the first has, so it never runs a job with an end not yet
 * durable but its last; and nothing shows an end before its commit:
 * GET_STATUS says running, "show result" of the kept result says not done.
 * A held worker's GRAB_JOB waits --store-grab-wait for the commit, here
 * held longer, then gets NO_JOB, as gearmand answers every GRAB_JOB at once
 * (a libgearman worker with a timeout sends another when one waits past
 * it, and then spins); later ones at once; asleep, it is not woken while
 * held, though job 3 waits; after the commit a NOOP wakes it and job 3 is
 * assigned.
 */
static void
test_pipelined_ends(void)
{
    char buf[512];
    struct rig r;
    struct conn *wc;
    int c, w, s, i;

    fake_reset();
    rig_extra.keep_results = 60;
    rig_start(&r, 0, 0);
    rig_extra.keep_results = 0;
    c = rig_client(&r);
    for (i = 1; i <= 3; i++) {
        submit_bg(c, "", "x");
        expect(&r, c, PACKET_JOB_CREATED, hdl((unsigned)i), "pipelined: submitted %d", i);
    }
    w = rig_client(&r);
    s = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "pipelined: the first job is assigned");
    fake_set_hold(true);
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(1), "one");
    peer_send(w, PACKET_GRAB_JOB, 0);
    PUMP_UNTIL(&r, fake_holding());
    tap_ok(fake_holding() && fake_stored(1), "pipelined: the first end's commit is in flight");
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(2),
           "pipelined: the next job is assigned while the last end commits");
    tap_ok(status_is(&r, s, hdl(1), '1', '1'),
           "pipelined: GET_STATUS of the first job says running until its end commits");
    snprintf(buf, sizeof(buf), "show result %s\r\n", hdl(1));
    tap_ok(admin_says(&r, s, buf, "ERR NOT_DONE"),
           "pipelined: its kept result is not shown before the commit");
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(2), "two");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_NO_JOB, NULL, "pipelined: held past --store-grab-wait, NO_JOB");
    wc = ending(&r);
    tap_ok(wc != NULL && durable_held(wc) && wc->nends == 2 && wc->nacks == 1 &&
               find(&r, hdl(2)) != NULL && find(&r, hdl(2))->state == JOB_SETTLING,
           "pipelined: a second end before the first commits holds the worker until it has");
    tap_ok(status_is(&r, s, hdl(2), '1', '1'), "pipelined: the second job is still running");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_NO_JOB, NULL, "pipelined: each GRAB_JOB while held gets NO_JOB");
    peer_send(w, PACKET_PRE_SLEEP, 0);
    tap_ok(quiet(&r, w), "pipelined: asleep while held, no NOOP though job 3 waits");
    tap_ok(wc->hold_slept && !wc->worker.asleep, "pipelined: no wake-up is spent on it");
    fake_set_hold(false);
    expect(&r, w, PACKET_NOOP, NULL, "pipelined: after the first commit, a NOOP wakes it");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(3), "pipelined: and the third job is assigned");
    PUMP_UNTIL(&r, find(&r, hdl(1)) != NULL && find(&r, hdl(1))->state == JOB_DONE);
    tap_ok(status_is(&r, s, hdl(1), '1', '0'), "pipelined: the first job is kept, not running");
    tap_ok(admin_says(&r, s, buf, "OK complete 3"), "pipelined: its kept result is shown");
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(3), "three");
    PUMP_UNTIL(&r, ending(&r) == NULL);
    tap_ok(ending(&r) == NULL, "pipelined: every end committed, none owed");
    close(s);
    close(w);
    close(c);
    rig_stop(&r);
}

/*
 * An end that holds no worker does not hurry its commit: a worker's two
 * ends share one (the second holds the worker and sends the batch at
 * once). Deletions and lazy ends wait a minute here, so that the first
 * end cannot commit alone however slow the machine; before ends were
 * lazy it went alone at the end of its turn (two commits).
 */
static void
test_lazy_ends(void)
{
    struct rig r;
    struct conn *wc;
    unsigned handed;
    int c, w, i;

    fake_reset();
    rig_extra.lazy_ms = 60000;
    rig_start(&r, 0, 0);
    rig_extra.lazy_ms = 0;
    r.srv->cfg.store_grab_wait_ms = 60000; /* its GRAB_JOB waits for the commit, however slow */
    c = rig_client(&r);
    for (i = 1; i <= 3; i++) {
        submit_bg(c, "", "x");
        expect(&r, c, PACKET_JOB_CREATED, hdl((unsigned)i), "lazy ends: submitted %d", i);
    }
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "lazy ends: the first job is assigned");
    handed = r.srv->storage.handovers;
    /*
     * Lazy only after a quick commit: the submits' commit may have taken
     * more than STORAGE_LAZY_COMMIT_MS on a busy machine.
     */
    r.srv->storage.last_commit_ms = 0;
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(1), "one");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(2), "lazy ends: the worker goes on after its end");
    tap_ok(r.srv->storage.handovers == handed && r.srv->storage.inflight == NULL,
           "lazy ends: the first end alone is not handed over");
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(2), "two");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(3), "lazy ends: the second end commits both, then job 3");
    PUMP_UNTIL(&r, (wc = ending(&r)) == NULL || wc->nends == 0);
    tap_ok(ending(&r) == NULL && find(&r, hdl(1)) == NULL && find(&r, hdl(2)) == NULL,
           "lazy ends: both ends committed");
    tap_is_int((int)(r.srv->storage.handovers - handed), 1, "lazy ends: in one commit");
    close(w);
    close(c);
    rig_stop(&r);
}

/*
 * A foreground client of a job that a background submit made durable hears
 * WORK_COMPLETE only once the job's end has committed (pipelined ends): a
 * crash before then runs the job again, so the client must not have been
 * told it was done.
 */
static void
test_foreground_told_after_commit(void)
{
    struct rig r;
    struct job *j;
    uint64_t id;
    int fg, bg, w;

    fake_reset();
    rig_start(&r, 0, 0);
    fg = rig_client(&r);
    bg = rig_client(&r);
    w = rig_client(&r);
    peer_send(fg, PACKET_SUBMIT_JOB, 3, "f", "k", "x");
    expect(&r, fg, PACKET_JOB_CREATED, hdl(1), "told after commit: the foreground submit");
    submit_bg(bg, "k", "x");
    expect(&r, bg, PACKET_JOB_CREATED, hdl(1), "told after commit: a background submit adopts it");
    j = find(&r, hdl(1));
    id = j != NULL ? j->id : 0;
    tap_ok(j != NULL && fake_stored(id), "told after commit: the job is stored");
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "told after commit: assigned");
    fake_set_hold(true);
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(1), "done");
    PUMP_UNTIL(&r, fake_holding() && (j = find(&r, hdl(1))) != NULL && j->state == JOB_SETTLING);
    tap_ok(fake_holding() && fake_stored(id), "told after commit: the end's commit is in flight");
    tap_ok(quiet(&r, fg), "told after commit: the client hears nothing while the end commits");
    fake_set_hold(false);
    expect(&r, fg, PACKET_WORK_COMPLETE, hdl(1), "told after commit: then WORK_COMPLETE");
    tap_ok(!fake_stored(id), "told after commit: by then the row is gone");
    close(w);
    close(bg);
    close(fg);
    rig_stop(&r);
}

/* The ops in the open batch. */
static unsigned
open_ops(struct rig *r)
{
    const struct store_op *op;
    unsigned n = 0;

    for (op = r->srv->storage.open.ops; op != NULL; op = op->next)
        n++;
    return n;
}

/*
 * A batch admin op flushes the adds gathered ahead of it in its batch
 * (writer_before_admin), which commits them; when the batch's last flush
 * then fails, those adds are still committed: their submitters hear
 * JOB_CREATED, not a refusal (a resubmit would run the job twice). So
 * is the admin op, which committed on its own.
 */
static void
test_admin_early_commit(void)
{
    struct rig r;
    struct job *j;
    uint64_t id;
    int c, c2, a;

    fake_reset();
    fake_admin_ops = fake_ops;
    fake_admin_ops.name = "fake-admin";
    fake_admin_ops.batch_admin = fake_batch_admin;
    rig_extra.ops = &fake_admin_ops;
    rig_start(&r, 0, 0);
    rig_extra.ops = NULL;
    c = rig_client(&r);
    c2 = rig_client(&r);
    a = rig_client(&r);
    fake_set_hold(true);
    submit_bg(c, "", "z");
    PUMP_UNTIL(&r, fake_holding());
    tap_ok(fake_holding(), "early commit: a first batch is held in flight");
    submit_bg(c2, "", "a");
    if (write(a, "batch open k\n", 13) != 13)
        tap_bail("cannot send an admin line");
    PUMP_UNTIL(&r, open_ops(&r) == 2);
    tap_is_int((int)open_ops(&r), 2, "early commit: an add, then a batch open, gather behind it");
    fail_after_admin = true;
    fake_set_hold(false);
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "early commit: the first batch commits");
    expect(&r, c2, PACKET_JOB_CREATED, hdl(2),
           "early commit: the add the early flush committed is answered JOB_CREATED");
    fail_after_admin = false;
    tap_ok(admin_says(&r, a, "", "OK"), "early commit: the batch open, committed, says OK");
    j = find(&r, hdl(2));
    id = j != NULL ? j->id : 0;
    tap_ok(j != NULL && fake_stored(id), "early commit: the add is stored and queued");
    tap_is_int(fake_get(&fake.flushes), 3, "early commit: three flushes, the last failed");
    close(a);
    close(c2);
    close(c);
    rig_stop(&r);
}

/*
 * An end that holds only a waiter (no op of its own) behind ops that a
 * batch admin op's early flush committed: answered when that batch is
 * done, though the batch's last flush failed, not at the retry, which is
 * a minute off here (before, the end waited for it: the worker owed it).
 */
static void
test_end_early_commit(void)
{
    struct rig r;
    int c, c2, w, a;

    fake_reset();
    fake_admin_ops = fake_ops;
    fake_admin_ops.name = "fake-admin";
    fake_admin_ops.batch_admin = fake_batch_admin;
    rig_extra.ops = &fake_admin_ops;
    rig_extra.retry_ms = 60000;
    rig_start(&r, 0, 0);
    rig_extra.ops = NULL;
    rig_extra.retry_ms = 0;
    c = rig_client(&r);
    c2 = rig_client(&r);
    w = rig_client(&r);
    a = rig_client(&r);
    submit_bg(c, "", "x");
    expect(&r, c, PACKET_JOB_CREATED, hdl(1), "end early commit: a job submitted");
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, hdl(1), "end early commit: and assigned");
    fake_set_hold(true);
    submit_bg(c2, "", "z");
    PUMP_UNTIL(&r, fake_holding());
    tap_ok(fake_holding(), "end early commit: a batch is held in flight");
    peer_send(w, PACKET_WORK_COMPLETE, 2, hdl(1), "one");
    PUMP_UNTIL(&r, ending(&r) != NULL && open_ops(&r) == 1);
    if (write(a, "batch open k\n", 13) != 13)
        tap_bail("cannot send an admin line");
    PUMP_UNTIL(&r, open_ops(&r) == 2);
    tap_is_int((int)open_ops(&r), 2, "end early commit: the end's remove, then a batch open");
    fail_after_admin = true;
    fake_set_hold(false);
    expect(&r, c2, PACKET_JOB_CREATED, hdl(2), "end early commit: the held batch commits");
    PUMP_UNTIL(&r, fake_get(&fake.flushes) == 4 && r.srv->storage.inflight == NULL);
    fail_after_admin = false;
    tap_is_int(fake_get(&fake.flushes), 4, "end early commit: four flushes, the last failed");
    tap_ok(ending(&r) == NULL && find(&r, hdl(1)) == NULL,
           "end early commit: the end is answered with its batch, not at the retry");
    tap_ok(admin_says(&r, a, "", "OK"), "end early commit: the batch open says OK");
    close(a);
    close(w);
    close(c2);
    close(c);
    rig_stop(&r);
}

int
main(void)
{
    run_cases();
    tap_diag("again at --verbose FATAL: each log check is now that the line is not there");
    log_quiet = true;
    run_cases();
    tap_diag("again with the log none: each log check is now that there is no log file");
    log_none = true;
    run_cases();
    test_update_inflight();
    test_stale_update();
    test_settling_error();
    test_pipelined_ends();
    test_lazy_ends();
    test_foreground_told_after_commit();
    test_admin_early_commit();
    test_end_early_commit();
    pthread_mutex_destroy(&fake.lock);
    pthread_cond_destroy(&fake.cond);
    return tap_done();
}
