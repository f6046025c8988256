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
#include <unistd.h>

#include <event2/event.h>

#include <dsjob/server.h>

#include "lib/peer.h"
#include "server/conn.h"
#include "server/srv.h"
#include "server/storage.h"
#include "server/store.h"
#include "tap.h"

#define FAKE_MAX 64
#define WAIT_MS 5000

/* --- the fake backend ---------------------------------------------------- */

struct store {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* Set by the test (under lock once the server runs). */
    bool hold;            /* a flush waits until this is false */
    int fail_flushes;     /* so many flushes fail */
    uint64_t fail_add_id; /* the add of this id fails; 0: none */
    struct store_job replay[4];
    unsigned nreplay;
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
    (void)cfg, (void)err;
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

    (void)err;
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
    (void)st, (void)sf, (void)err;
    return DSJOB_OK;
}

static int
fake_replay_funcs(struct store *st, store_func_fn *fn, void *arg, char *err)
{
    (void)st, (void)fn, (void)arg, (void)err;
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

static const struct store_ops fake_ops = {
    .version = STORE_OPS_VERSION,
    .name = "fake",
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
static int fail_count;        /* so many times */
static int failed;            /* allocations failed so far */

static bool
alloc_fails(const char *what, void *arg)
{
    (void)arg;
    if (fail_what == NULL || fail_count == 0 || strcmp(what, fail_what) != 0)
        return false;
    fail_count--;
    failed++;
    return true;
}

static void
fail_alloc(const char *what, int count)
{
    fail_what = what;
    fail_count = count;
    failed = 0;
}

/* --- a server and its clients -------------------------------------------- */

/* Lifecycle settings of the next rig_start (zero: the defaults). */
static struct {
    unsigned max_dead, retry_on, job_retries;
} rig_extra;

struct rig {
    struct event_base *base;
    struct dsjob_server *ds;
    struct srv *srv;
    char dir[64];
    char sock[128];
};

static void
rig_start(struct rig *r, unsigned max_jobs, unsigned batch)
{
    struct dsjob_server_config cfg;
    char err[256];

    snprintf(r->dir, sizeof(r->dir), "/tmp/t_storage.XXXXXX");
    if (mkdtemp(r->dir) == NULL)
        tap_bail("mkdtemp failed");
    snprintf(r->sock, sizeof(r->sock), "%s/sock", r->dir);
    dsjob_server_config_init(&cfg);
    cfg.port = -1;
    cfg.unix_socket = r->sock;
    cfg.log_file = "none";
    cfg.job_handle_prefix = "H:t";
    cfg.max_jobs = max_jobs;
    if (batch)
        cfg.store_batch = batch;
    cfg.max_dead = rig_extra.max_dead;
    if (rig_extra.retry_on)
        cfg.retry_on = rig_extra.retry_on;
    cfg.job_retries = rig_extra.job_retries;
    r->base = event_base_new();
    r->ds = dsjob_server_new(&cfg, err, sizeof(err));
    if (r->base == NULL || r->ds == NULL)
        tap_bail("cannot make a server: %s", err);
    r->srv = (struct srv *)r->ds; /* struct dsjob_server wraps struct srv first */
    r->srv->storage.seam.ops = &fake_ops;
    r->srv->storage.seam.alloc_fails = alloc_fails;
    if (dsjob_server_attach(r->ds, r->base) != DSJOB_OK)
        tap_bail("cannot start the server: %s", r->srv->errmsg);
}

static void
rig_stop(struct rig *r)
{
    dsjob_server_free(r->ds);
    event_base_free(r->base);
    unlink(r->sock);
    rmdir(r->dir);
    fail_alloc(NULL, 0);
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
    expect(&r, c, PACKET_JOB_CREATED, "H:t:1", "group commit: first JOB_CREATED names H:t:1");
    expect(&r, c, PACKET_JOB_CREATED, "H:t:2", "group commit: second names H:t:2");
    expect(&r, c, PACKET_JOB_CREATED, "H:t:3", "group commit: third names H:t:3");
    tap_is_int(fake_get(&fake.flushes), 1, "group commit: one flush for a turn's three submits");
    tap_is_int(fake.batch_adds[0], 3, "group commit: that flush carried three adds");
    tap_ok(fake_stored(1) && fake_stored(2) && fake_stored(3), "group commit: all three stored");
    tap_ok(queued(&r, "H:t:1") && queued(&r, "H:t:2") && queued(&r, "H:t:3"),
           "group commit: committed jobs are queued for workers");
    tap_is_int((long long)r.srv->storage.commits, 1, "group commit: storage counts one commit");
    close(c);
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
    tap_ok(find(&r, "H:t:1") != NULL && find(&r, "H:t:1")->state == JOB_PENDING,
           "order: the job waits for its commit, not yet queued");
    peer_send(b, PACKET_ECHO_REQ, 1, "b");
    expect(&r, b, PACKET_ECHO_RES, "b", "order: another connection is answered meanwhile");
    tap_ok(quiet(&r, a), "order: no JOB_CREATED before the commit, and the echo waits behind it");
    submit_bg(c, "", "z");
    PUMP_UNTIL(&r, find(&r, "H:t:2") != NULL);
    tap_ok(find(&r, "H:t:2") != NULL, "order: a submit while a batch is in flight is taken");
    tap_ok(quiet(&r, c), "order: and waits for its own commit");
    fake_set_hold(false);
    expect(&r, a, PACKET_JOB_CREATED, "H:t:1", "order: JOB_CREATED comes after the commit");
    expect(&r, a, PACKET_ECHO_RES, "after x", "order: then the request that waited behind it");
    expect(&r, c, PACKET_JOB_CREATED, "H:t:2", "order: the next batch is committed after it");
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
    rig_start(&r, 0, 0);
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
    tap_ok(find(&r, "H:t:1") == NULL && find(&r, "H:t:2") == NULL,
           "failed commit: its jobs are dropped");
    tap_is_int((long long)r.srv->queue.njobs, 0, "failed commit: the queue holds nothing");
    tap_is_int((long long)r.srv->storage.failures, 1, "failed commit: storage counts a failure");
    PUMP_UNTIL(&r, fake_get(&fake.flushes) >= 2);
    tap_is_int(fake_get(&fake.flushes), 2, "failed commit: flushed again with nothing new");
    submit_bg(c, "", "z");
    expect(&r, c, PACKET_JOB_CREATED, "H:t:3", "failed commit: the store works again after");
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
    expect(&r, c, PACKET_JOB_CREATED, "H:t:1", "refused add: the job before it is created");
    expect(&r, c, PACKET_ERROR, "STORE_ERROR", "refused add: its submitter gets ERROR");
    expect(&r, c, PACKET_JOB_CREATED, "H:t:3", "refused add: the job after it is created");
    tap_ok(find(&r, "H:t:2") == NULL, "refused add: the refused job is dropped");
    tap_is_int((long long)r.srv->queue.njobs, 2, "refused add: the others are queued");
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
        expect(&r, a, PACKET_JOB_CREATED, "H:t:1", "coalesced: the first submitter gets H:t:1");
        expect(&r, b, PACKET_JOB_CREATED, "H:t:1", "coalesced: the same unique gets it too");
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
    expect(&r, a, PACKET_JOB_CREATED, "H:t:1", "refusal: first the answer it was owed");
    expect(&r, a, PACKET_ERROR, "QUEUE_ERROR", "refusal: then its refusal, in order");
    tap_ok(quiet(&r, a), "refusal: and nothing else");
    tap_is_int(fake.batch_adds[0], 1, "refusal: the refused job is not stored");
    close(a), close(b);
    rig_stop(&r);
}

/*
 * Issue 10 item 7b: the refusal's text cannot be allocated. Before the fix
 * a half-made answer (no job, no error) stayed queued: the client got its
 * ERROR at once, then JOB_CREATED of a NULL job (a crash), or, when the
 * commit failed, a second ERROR.
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
        if (t == PACKET_JOB_CREATED && p.nargs == 1 && p.arg_len[0] == 5 &&
            memcmp(p.arg[0], "H:t:1", 5) == 0)
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
 * Issue 10 item 7c: the answer for a new job cannot be allocated. Before
 * the fix the job was in the batch already: it was stored (and would run
 * after a restart) and stayed pending for good, while its client was told
 * "out of memory". Now nothing is stored, as the client was told.
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
    expect(&r, c, PACKET_JOB_CREATED, "H:t:1", "batch without memory: committed once there is");
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
    rig_start(&r, 0, 0);
    rig_extra.max_dead = rig_extra.retry_on = rig_extra.job_retries = 0;
    c = rig_client(&r);
    submit_bg(c, "u", "x");
    expect(&r, c, PACKET_JOB_CREATED, "H:t:1", "dead rewrite: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, "H:t:1", "dead rewrite: assigned");
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 1;
    pthread_mutex_unlock(&fake.lock);
    peer_send(w, PACKET_WORK_FAIL, 1, "H:t:1");
    PUMP_UNTIL(&r, fake_get(&fake.flushes) >= 2 && find(&r, "H:t:1") != NULL &&
                       find(&r, "H:t:1")->state == JOB_SETTLING);
    j = find(&r, "H:t:1");
    tap_ok(j != NULL && j->state == JOB_SETTLING && !fake_updated(1, &got),
           "dead rewrite: after a failed commit the job is still settling, nothing stored");
    PUMP_UNTIL(&r, fake_updated(1, &got));
    tap_ok(fake_updated(1, &got) && got.state == STORE_DEAD && got.attempts == 1,
           "dead rewrite: the next commit stores it dead, with its one attempt");
    tap_ok(fake_stored(1) && fake_get(&fake.removes) == 0, "dead rewrite: not deleted");
    PUMP_UNTIL(&r, (j = find(&r, "H:t:1")) != NULL && j->state == JOB_DEAD);
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
    PUMP_UNTIL(&r, queued(&r, "H:t:1"));
    tap_ok(queued(&r, "H:t:1") && fake_stored(1), "forget: its job still commits and is queued");
    b = rig_client(&r);
    fake_set_hold(true);
    submit_bg(b, "", "y");
    PUMP_UNTIL(&r, fake_holding());
    submit_bg(b, "", "z"); /* gathers behind the batch in flight */
    PUMP_UNTIL(&r, find(&r, "H:t:3") != NULL);
    fake_set_hold(false);
    srv_stop(r.srv, false); /* storage_drain: the batch in flight, then the open one */
    tap_ok(fake_stored(2) && fake_stored(3),
           "drain: what was handed in before a stop is committed");
    expect(&r, b, PACKET_JOB_CREATED, "H:t:2", "drain: and answered before the client is closed");
    expect(&r, b, PACKET_JOB_CREATED, "H:t:3", "drain: both batches");
    rig_stop(&r);
    tap_ok(fake.closed, "drain: the store is closed with the server");
    close(b);
}

static void
test_must_wait(void)
{
    struct conn c;

    memset(&c, 0, sizeof(c));
    tap_ok(!storage_must_wait(&c, PACKET_ECHO_REQ), "must_wait: nothing owed, nothing waits");
    c.nacks = 1;
    tap_ok(storage_must_wait(&c, PACKET_ECHO_REQ), "must_wait: owed, an echo waits");
    tap_ok(storage_must_wait(&c, PACKET_SUBMIT_JOB), "must_wait: and a foreground submit");
    tap_ok(storage_must_wait(&c, 0), "must_wait: and an admin line");
    tap_ok(!storage_must_wait(&c, PACKET_SUBMIT_JOB_BG) &&
               !storage_must_wait(&c, PACKET_SUBMIT_JOB_HIGH_BG) &&
               !storage_must_wait(&c, PACKET_SUBMIT_JOB_LOW_BG) &&
               !storage_must_wait(&c, PACKET_SUBMIT_JOB_EPOCH) &&
               !storage_must_wait(&c, PACKET_SUBMIT_REDUCE_JOB_BACKGROUND),
           "must_wait: background submits do not (they share the batch)");
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
    expect(&r, c, PACKET_JOB_CREATED, "H:t:1", "inflight: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, "H:t:1", "inflight: assigned");
    fake_set_hold(true);
    peer_send(w, PACKET_WORK_FAIL, 1, "H:t:1"); /* retried at once: storage_update */
    PUMP_UNTIL(&r, fake_holding());
    tap_ok(fake_holding(), "inflight: the batch holding the retry's update is in flight");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, "H:t:1", "inflight: the retry is assigned again");
    peer_send(w, PACKET_WORK_COMPLETE, 2, "H:t:1", "done");
    PUMP_UNTIL(&r, (j = find(&r, "H:t:1")) != NULL && j->state == JOB_SETTLING);
    tap_ok(find(&r, "H:t:1") && find(&r, "H:t:1")->state == JOB_SETTLING,
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
    j = find(&r, "H:t:1");
    tap_ok(j != NULL, "inflight: so the job must still be found (got %s)",
           j ? "found" : "NOT FOUND: settled by the update's commit");
    s = rig_client(&r);
    peer_send(s, PACKET_GET_STATUS, 1, "H:t:1");
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
    expect(&r, c, PACKET_JOB_CREATED, "H:t:1", "stale: submitted");
    w = rig_client(&r);
    peer_send(w, PACKET_CAN_DO, 1, "f");
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, "H:t:1", "stale: assigned");
    fake_set_hold(true);
    peer_send(w, PACKET_WORK_FAIL, 1, "H:t:1"); /* attempt 1 failed: retried, storage_update */
    PUMP_UNTIL(&r, fake_holding());
    peer_send(w, PACKET_GRAB_JOB, 0);
    expect(&r, w, PACKET_JOB_ASSIGN, "H:t:1", "stale: assigned again");
    peer_send(w, PACKET_WORK_FAIL, 1, "H:t:1"); /* attempt 2 failed: dead, rewrite in open batch */
    PUMP_UNTIL(&r, (j = find(&r, "H:t:1")) != NULL && j->state == JOB_SETTLING);
    pthread_mutex_lock(&fake.lock);
    fake.fail_flushes = 1; /* the batch holding the retry's update fails */
    pthread_mutex_unlock(&fake.lock);
    fake_set_hold(false);
    PUMP_UNTIL(&r, (j = find(&r, "H:t:1")) != NULL && j->state == JOB_DEAD &&
                       fake_get(&fake.flushes) >= 2);
    j = find(&r, "H:t:1");
    tap_ok(j != NULL && j->state == JOB_DEAD, "stale: in memory the job is dead");
    tap_ok(fake_updated(1, &got), "stale: its row was rewritten");
    tap_ok(got.state == STORE_DEAD, "stale: and the row says dead too (got state %d, attempts %u)",
           got.state, (unsigned)got.attempts);
    close(w);
    close(c);
    rig_stop(&r);
}

int
main(void)
{
    test_must_wait();
    test_group_commit();
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
    test_update_inflight();
    test_stale_update();
    pthread_mutex_destroy(&fake.lock);
    pthread_cond_destroy(&fake.cond);
    return tap_done();
}
