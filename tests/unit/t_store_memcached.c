/*
 * The memcached store against a real memcached that this test starts on
 * a free loopback port (MEMCACHED_BIN, or /usr/bin/memcached; skipped if
 * there is none): jobs come back byte-exact and in seq order, removes
 * stick, a batch splits over chunks and the index is compacted, a record
 * too large for an item is refused at add, bad options and dead servers
 * fail open with the option or server named, and a memcached killed,
 * stopped or restarted under the store makes flush fail (naming it)
 * without losing the removes, and work again afterwards. Each case uses
 * its own key prefix.
 */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <fcntl.h>

#include <libmemcached/memcached.h>

#include <dsjob/common.h>

#include "server/store.h"
#include "tap.h"

/* In server/store_memcached.c: the backend (store.h may not declare it), and a test seam. */
extern const struct store_ops store_memcached_ops;
extern int store_memcached_test_chunk_ids(struct store *st, size_t n);

#define MAX_COPIES 8
#define START_WAIT_MS 5000
#define RETRY_WAIT_MS 2200 /* past the store's 1 s retry timeout, whole seconds rounded */

static const struct store_ops *ops = &store_memcached_ops;

static const char *mc_bin;  /* the memcached binary */
static pid_t mc_pid = -1;   /* the memcached this test runs, or -1 */
static int mc_port;         /* its port */
static char mc_servers[64]; /* "127.0.0.1:port" */

/* A job to add, with the storage its pointers refer to. */
struct tjob {
    struct store_job sj; /* what add sees */
    char handle[64];     /* sj.handle points here */
};

/* A job as replay gave it, copied out of the callback. */
struct copy {
    struct store_job sj; /* pointers into the copies below */
    void *mem[5];        /* handle, func, unique, reducer, data */
};

/* What a replay saw. */
struct seen {
    size_t n;                       /* jobs seen */
    size_t stop_after;              /* return 1 after this many; 0 never */
    bool seq_sorted;                /* every seq >= the one before */
    uint64_t last_seq;              /* of the previous job */
    uint64_t ids[MAX_COPIES];       /* of the first jobs */
    struct copy copies[MAX_COPIES]; /* of the first jobs */
};

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* free_port asks the kernel for a loopback port nobody is using right now. */
static int
free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd, port = -1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        tap_bail("socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    if (port < 0)
        tap_bail("cannot find a free port: %s", strerror(errno));
    return port;
}

static bool
can_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void
mcd_stop(void)
{
    if (mc_pid <= 0)
        return;
    kill(mc_pid, SIGCONT); /* in case a case left it stopped */
    kill(mc_pid, SIGKILL);
    waitpid(mc_pid, NULL, 0);
    mc_pid = -1;
}

/* mcd_start runs memcached on port; false if it exits or does not listen in time. */
static bool
mcd_start(int port)
{
    char portstr[16];
    int waited, status, fd;
    pid_t pid;

    snprintf(portstr, sizeof(portstr), "%d", port);
    pid = fork();
    if (pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (pid == 0) {
        fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 0), dup2(fd, 1), dup2(fd, 2);
            close(fd);
        }
        execl(mc_bin, mc_bin, "-l", "127.0.0.1", "-p", portstr, "-U", "0", "-m", "64", "-M", "-t",
              "2", "-u", "root", (char *)NULL);
        _exit(127);
    }
    mc_pid = pid;
    for (waited = 0; waited < START_WAIT_MS; waited += 20) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            mc_pid = -1;
            return false;
        }
        if (can_connect(port))
            return true;
        sleep_ms(20);
    }
    mcd_stop();
    return false;
}

/* mcd_start_any starts memcached on some free port and sets mc_servers. */
static void
mcd_start_any(void)
{
    int tries;

    for (tries = 0; tries < 10; tries++) {
        mc_port = free_port();
        if (mcd_start(mc_port)) {
            snprintf(mc_servers, sizeof(mc_servers), "127.0.0.1:%d", mc_port);
            return;
        }
    }
    tap_bail("cannot start '%s' on a loopback port", mc_bin);
}

static struct store *
open_prefix(const char *prefix, char *err)
{
    struct store_config cfg = {.servers = mc_servers, .prefix = prefix};
    struct store *st = NULL;
    int rc;

    rc = ops->open(&st, &cfg, err);
    if (rc != DSJOB_OK) {
        tap_diag("open '%s' prefix '%s': %s", mc_servers, prefix, err);
        return NULL;
    }
    return st;
}

static void
tjob_init(struct tjob *tj, uint64_t id, uint64_t seq, const void *data, size_t len)
{
    memset(tj, 0, sizeof(*tj));
    snprintf(tj->handle, sizeof(tj->handle), "H:test:%llu", (unsigned long long)id);
    tj->sj.id = id;
    tj->sj.seq = seq;
    tj->sj.handle = tj->handle;
    tj->sj.handle_len = strlen(tj->handle);
    tj->sj.func = "reverse";
    tj->sj.func_len = 7;
    tj->sj.unique = "";
    tj->sj.reducer = "";
    tj->sj.data = data;
    tj->sj.data_len = len;
    tj->sj.prio = 1;
}

static int
add_job(struct store *st, uint64_t id, uint64_t seq, const char *data, char *err)
{
    struct tjob tj;

    tjob_init(&tj, id, seq, data, strlen(data));
    return ops->add(st, &tj.sj, err);
}

static void *
dup_mem(const void *p, size_t len)
{
    void *q = malloc(len + 1);

    if (q == NULL)
        tap_bail("out of memory");
    memcpy(q, p, len);
    return q;
}

static void
copy_job(struct copy *c, const struct store_job *sj)
{
    c->sj = *sj;
    c->sj.handle = c->mem[0] = dup_mem(sj->handle, sj->handle_len);
    c->sj.func = c->mem[1] = dup_mem(sj->func, sj->func_len);
    c->sj.unique = c->mem[2] = dup_mem(sj->unique, sj->unique_len);
    c->sj.reducer = c->mem[3] = dup_mem(sj->reducer, sj->reducer_len);
    c->sj.data = c->mem[4] = dup_mem(sj->data, sj->data_len);
}

static int
collect(const struct store_job *sj, void *arg)
{
    struct seen *s = arg;

    if (s->n > 0 && sj->seq < s->last_seq)
        s->seq_sorted = false;
    s->last_seq = sj->seq;
    if (s->n < MAX_COPIES) {
        s->ids[s->n] = sj->id;
        copy_job(&s->copies[s->n], sj);
    }
    s->n++;
    return s->stop_after != 0 && s->n >= s->stop_after;
}

static void
seen_release(struct seen *s)
{
    size_t i, k;

    for (i = 0; i < s->n && i < MAX_COPIES; i++)
        for (k = 0; k < 5; k++)
            free(s->copies[i].mem[k]);
    memset(s, 0, sizeof(*s));
}

/* replay_all replays st into s; false (and a diag) if replay failed. */
static bool
replay_all(struct store *st, struct seen *s)
{
    char err[STORE_ERRLEN] = "";
    int rc;

    seen_release(s);
    s->seq_sorted = true;
    rc = ops->replay(st, collect, s, err);
    if (rc != DSJOB_OK)
        tap_diag("replay: %s", err);
    return rc == DSJOB_OK;
}

static bool
has(const char *err, const char *part)
{
    return strstr(err, part) != NULL;
}

/* ---- a second client, to look at and meddle with the keys the store wrote ---- */

static memcached_st *
raw_client(void)
{
    memcached_st *mc = memcached_create(NULL);

    if (mc == NULL ||
        memcached_server_add(mc, "127.0.0.1", (in_port_t)mc_port) != MEMCACHED_SUCCESS)
        tap_bail("cannot make a libmemcached client");
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_KETAMA, 1);
    return mc;
}

/* raw_exists says whether prefix:what is in memcached. */
static bool
raw_exists(const char *prefix, const char *what)
{
    memcached_st *mc = raw_client();
    char key[256];
    memcached_return_t rc;
    size_t len;
    uint32_t flags;
    char *v;

    snprintf(key, sizeof(key), "%s:%s", prefix, what);
    v = memcached_get(mc, key, strlen(key), &len, &flags, &rc);
    free(v);
    memcached_free(mc);
    return rc == MEMCACHED_SUCCESS;
}

static void
raw_set(const char *prefix, const char *what, const void *val, size_t len)
{
    memcached_st *mc = raw_client();
    char key[256];

    snprintf(key, sizeof(key), "%s:%s", prefix, what);
    if (memcached_set(mc, key, strlen(key), val, len, 0, 0) != MEMCACHED_SUCCESS)
        tap_bail("cannot set '%s'", key);
    memcached_free(mc);
}

static uint64_t
le64(const unsigned char *p)
{
    uint64_t v = 0;
    int i;

    for (i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* head_chunks gives next - first from prefix:head ("dsj", version 1, first, next), or -1. */
static long long
head_chunks(const char *prefix)
{
    memcached_st *mc = raw_client();
    char key[256];
    memcached_return_t rc;
    size_t len;
    uint32_t flags;
    unsigned char *v;
    long long n = -1;

    snprintf(key, sizeof(key), "%s:head", prefix);
    v = (unsigned char *)memcached_get(mc, key, strlen(key), &len, &flags, &rc);
    if (rc == MEMCACHED_SUCCESS && len == 20 && memcmp(v, "dsj\1", 4) == 0)
        n = (long long)(le64(v + 12) - le64(v + 4));
    free(v);
    memcached_free(mc);
    return n;
}

static void
check_same_job(const struct store_job *got, const struct store_job *want, const char *what)
{
    tap_is_int((long long)got->id, (long long)want->id, "%s: id", what);
    tap_is_int((long long)got->seq, (long long)want->seq, "%s: seq", what);
    tap_is_mem(got->handle, got->handle_len, want->handle, want->handle_len, "%s: handle", what);
    tap_is_mem(got->func, got->func_len, want->func, want->func_len, "%s: func", what);
    tap_is_mem(got->unique, got->unique_len, want->unique, want->unique_len, "%s: unique", what);
    tap_is_int(got->unique_is_data, want->unique_is_data, "%s: unique_is_data", what);
    tap_is_mem(got->reducer, got->reducer_len, want->reducer, want->reducer_len, "%s: reducer",
               what);
    tap_is_int(got->prio, want->prio, "%s: prio", what);
    tap_is_int(got->when, want->when, "%s: when", what);
    tap_is_mem(got->data, got->data_len, want->data, want->data_len, "%s: data", what);
}

static char *
payload(size_t len)
{
    char *p = malloc(len);
    size_t i;

    if (p == NULL)
        tap_bail("out of memory");
    for (i = 0; i < len; i++)
        p[i] = (char)(i % 251); /* a NUL every 251 bytes */
    return p;
}

/* A prefix of its own for each case, so that cases (and runs) do not see each other's keys. */
static const char *
prefix_for(const char *name)
{
    static char buf[96];

    snprintf(buf, sizeof(buf), "t%ld-%s", (long)getpid(), name);
    return buf;
}

static void
test_roundtrip(void)
{
    static const char data[] = "pay\0lo\0ad";
    static const char unique[] = "u\0niq";
    enum { BIG = 1000 * 1000 }; /* just under memcached's 1 MiB item */
    const char *prefix = prefix_for("roundtrip");
    char err[STORE_ERRLEN] = "";
    struct tjob a, b, c;
    struct seen s = {0};
    struct store *st;
    char *big = payload(BIG);

    st = open_prefix(prefix, err);
    tap_ok(st != NULL, "roundtrip: open a fresh prefix");
    if (st == NULL)
        goto done;
    tap_ok(replay_all(st, &s) && s.n == 0, "roundtrip: a fresh prefix replays nothing");
    tjob_init(&a, 7, 1, data, sizeof(data) - 1);
    a.sj.unique = unique;
    a.sj.unique_len = sizeof(unique) - 1;
    a.sj.reducer = "red\0x";
    a.sj.reducer_len = 5;
    a.sj.prio = 0;
    a.sj.when = 4102444800; /* 2100-01-01, past 2038 */
    tjob_init(&b, 8, 2, big, BIG);
    tjob_init(&c, 9, 3, "x", 1);
    c.sj.unique = "-";
    c.sj.unique_len = 1;
    c.sj.unique_is_data = true;
    c.sj.prio = 2;
    c.sj.when = -1;   /* negative survives too */
    c.sj.data = NULL; /* empty payload */
    c.sj.data_len = 0;
    tap_is_int(ops->add(st, &a.sj, err), DSJOB_OK, "roundtrip: add a small job");
    if (!tap_is_int(ops->add(st, &b.sj, err), DSJOB_OK, "roundtrip: add a 1,000,000-byte job"))
        tap_diag("%s", err);
    tap_is_int(ops->add(st, &c.sj, err), DSJOB_OK, "roundtrip: add an empty job");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "roundtrip: flush");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "roundtrip: flush with nothing open");
    tap_ok(replay_all(st, &s) && s.n == 3, "roundtrip: replay gives 3 jobs");
    if (s.n == 3) {
        check_same_job(&s.copies[0].sj, &a.sj, "small job");
        check_same_job(&s.copies[1].sj, &b.sj, "big job");
        check_same_job(&s.copies[2].sj, &c.sj, "empty job");
    }
    ops->close(st);

    st = open_prefix(prefix, err);
    tap_ok(st != NULL, "roundtrip: reopen");
    if (st == NULL)
        goto done;
    tap_ok(replay_all(st, &s) && s.n == 3, "roundtrip: after reopen, 3 jobs");
    if (s.n == 3) {
        check_same_job(&s.copies[0].sj, &a.sj, "small job after reopen");
        tap_is_mem(s.copies[1].sj.data, s.copies[1].sj.data_len, big, BIG,
                   "big payload after reopen");
        check_same_job(&s.copies[2].sj, &c.sj, "empty job after reopen");
    }
    ops->close(st);
done:
    seen_release(&s);
    free(big);
}

static void
test_remove(void)
{
    const char *prefix = prefix_for("remove");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "remove: open"))
        goto done;
    add_job(st, 1, 1, "one", err);
    add_job(st, 2, 2, "two", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "remove: flush two adds");
    tap_ok(raw_exists(prefix, "job:1"), "remove: job 1 has its key");
    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "remove: remove job 1");
    tap_is_int(ops->remove(st, 12345, err), DSJOB_OK, "remove: an id not stored is fine");
    tap_ok(replay_all(st, &s) && s.n == 1 && s.ids[0] == 2,
           "remove: a pending remove already hides job 1 from replay");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "remove: flush");
    tap_ok(replay_all(st, &s) && s.n == 1 && s.ids[0] == 2, "remove: only job 2 is replayed");
    tap_ok(!raw_exists(prefix, "job:1"), "remove: job 1's key is deleted");
    add_job(st, 3, 3, "three", err);
    tap_is_int(ops->remove(st, 3, err), DSJOB_OK, "remove: remove a job of the open batch");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "remove: flush the add and its remove");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_all(st, &s) && s.n == 1 && s.ids[0] == 2,
           "remove: still only job 2 after reopen");
    ops->close(st);
    ops->close(NULL);
    tap_ok(true, "close(NULL) is a no-op");
done:
    seen_release(&s);
}

static void
test_order(void)
{
    const char *prefix = prefix_for("order");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "order: open"))
        goto done;
    /* ids, insertion order and batches all disagree with seq */
    add_job(st, 10, 30, "c", err);
    add_job(st, 20, 10, "a", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "order: flush one batch");
    add_job(st, 5, 20, "b", err);
    add_job(st, 1, 40, "d", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "order: flush another");
    tap_ok(replay_all(st, &s) && s.n == 4, "order: 4 jobs");
    tap_ok(s.ids[0] == 20 && s.ids[1] == 5 && s.ids[2] == 10 && s.ids[3] == 1,
           "order: replay is in seq order");
    seen_release(&s);
    s.stop_after = 2;
    tap_is_int(ops->replay(st, collect, &s, err), DSJOB_OK, "order: fn stopping replay is ok");
    tap_is_int((long long)s.n, 2, "order: replay stopped after 2");
    ops->close(st);
done:
    seen_release(&s);
}

static void
test_many(void)
{
    enum { N = 10000 };
    const char *prefix = prefix_for("many");
    char err[STORE_ERRLEN] = "", data[32];
    struct seen s = {0};
    struct timespec t0, t1;
    struct store *st;
    int i, fails = 0;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "many: open"))
        goto done;
    for (i = 0; i < N; i++) {
        snprintf(data, sizeof(data), "job %d", i);
        fails += add_job(st, (uint64_t)i + 1, (uint64_t)(N - i), data, err) != DSJOB_OK;
    }
    tap_is_int(fails, 0, "many: %d adds in one batch", N);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "many: one flush");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    tap_diag("many: flush of %d jobs took %.0f ms", N,
             (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    tap_is_int(head_chunks(prefix), 1, "many: the batch is one index chunk");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_all(st, &s), "many: reopen and replay");
    tap_is_int((long long)s.n, N, "many: replay counts %d jobs", N);
    tap_ok(s.seq_sorted, "many: in seq order");
    tap_is_int((long long)s.ids[0], N, "many: lowest seq first");
    ops->close(st);
done:
    seen_release(&s);
}

/* A batch split over chunks, removes spread over batches, and the compaction at open. */
static void
test_chunks(void)
{
    const char *prefix = prefix_for("chunks");
    char err[STORE_ERRLEN] = "", data[32];
    struct seen s = {0};
    struct store *st;
    uint64_t i;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "chunks: open"))
        goto done;
    store_memcached_test_chunk_ids(st, 3);
    for (i = 1; i <= 10; i++) {
        snprintf(data, sizeof(data), "job %d", (int)i);
        add_job(st, i, 100 - i, data, err);
    }
    tap_is_int(ops->flush(st, err), DSJOB_OK, "chunks: flush 10 adds");
    tap_is_int(head_chunks(prefix), 4, "chunks: 10 ids at 3 a chunk are 4 chunks");
    ops->remove(st, 2, err);
    ops->remove(st, 4, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "chunks: flush 2 removes");
    ops->remove(st, 6, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "chunks: flush 1 remove");
    tap_is_int(head_chunks(prefix), 6, "chunks: 6 chunks live");
    tap_ok(replay_all(st, &s) && s.n == 7 && s.seq_sorted && s.ids[0] == 10,
           "chunks: 7 jobs, in seq order");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL, "chunks: reopen");
    if (st == NULL)
        goto done;
    tap_is_int(head_chunks(prefix), 1, "chunks: open compacted the index to one chunk");
    tap_ok(!raw_exists(prefix, "batch:1") && !raw_exists(prefix, "batch:6"),
           "chunks: the old chunks are deleted");
    tap_ok(replay_all(st, &s) && s.n == 7 && s.seq_sorted && s.ids[0] == 10 && s.ids[6] == 1,
           "chunks: the same 7 jobs after compaction");
    ops->close(st);
done:
    seen_release(&s);
}

/* Many small flushes: the live chunks stay bounded, as compaction runs on the way. */
static void
test_compact(void)
{
    const char *prefix = prefix_for("compact");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;
    long long most = 0, now;
    uint64_t i;
    int fails = 0;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "compact: open"))
        goto done;
    for (i = 1; i <= 300; i++) {
        fails += add_job(st, i, i, "x", err) != DSJOB_OK;
        if (i > 1)
            ops->remove(st, i - 1, err);
        fails += ops->flush(st, err) != DSJOB_OK;
        now = head_chunks(prefix);
        if (now > most)
            most = now;
    }
    tap_is_int(fails, 0, "compact: 300 flushes of one add and one remove");
    tap_ok(most > 0 && most <= 64, "compact: at most 64 chunks were ever live (%lld)", most);
    tap_ok(!raw_exists(prefix, "batch:1"), "compact: the first chunk is gone");
    tap_ok(replay_all(st, &s) && s.n == 1 && s.ids[0] == 300, "compact: only job 300 is left");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_all(st, &s) && s.n == 1 && s.ids[0] == 300,
           "compact: the same after reopen");
    ops->close(st);
done:
    seen_release(&s);
}

static void
test_too_large(void)
{
    enum { HUGE = 1024 * 1024 };
    const char *prefix = prefix_for("large");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct tjob big;
    struct store *st;
    char *p = payload(HUGE);

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "large: open"))
        goto done;
    tap_is_int(add_job(st, 1, 1, "one", err), DSJOB_OK, "large: add a small job");
    tjob_init(&big, 2, 2, p, HUGE);
    tap_is_int(ops->add(st, &big.sj, err), DSJOB_ERR_STORE, "large: a 1 MiB add fails");
    tap_ok(has(err, "larger than memcached's item size") && has(err, mc_servers),
           "large: it says why and names the server (%s)", err);
    tap_is_int(add_job(st, 3, 3, "three", err), DSJOB_OK, "large: the batch goes on");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "large: flush the rest");
    tap_ok(replay_all(st, &s) && s.n == 2 && s.ids[0] == 1 && s.ids[1] == 3,
           "large: jobs 1 and 3 are stored, job 2 is not");
    ops->close(st);
done:
    seen_release(&s);
    free(p);
}

static void
test_bad_config(void)
{
    static const char *const bad[] = {
        "",       "127.0.0.1:",   "127.0.0.1:abc", "127.0.0.1:70000", "127.0.0.1:0",
        ":11211", "127.0.0.1:1,", "[::1",          "[::1]x",
    };
    struct store_config cfg = {0};
    char err[STORE_ERRLEN] = "", servers[160];
    struct store *st = NULL;
    size_t i;
    int port = free_port();

    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_ARG, "config: no servers is refused");
    tap_ok(has(err, "--memcached-servers"), "config: and names the option (%s)", err);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.servers = bad[i];
        tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_ARG, "config: '%s' is refused", bad[i]);
        tap_ok(has(err, "--memcached-servers") && has(err, bad[i]), "config: and named (%s)", err);
    }
    cfg.servers = mc_servers;
    cfg.prefix = "two words";
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_ARG, "config: a prefix with a space");
    tap_ok(has(err, "--memcached-prefix"), "config: names the option (%s)", err);

    cfg.prefix = NULL;
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", port);
    cfg.servers = servers;
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE, "config: a server not running");
    tap_ok(has(err, servers) && has(err, "does not answer"), "config: names it (%s)", err);
    snprintf(servers, sizeof(servers), "%s, 127.0.0.1:%d", mc_servers, port);
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE, "config: one good and one dead server");
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", port);
    tap_ok(has(err, servers) && !has(err, mc_servers), "config: names the dead one (%s)", err);
}

/* Keys that are not ours (or from a newer dsjobd) are refused, not overwritten. */
static void
test_foreign(void)
{
    const char *prefix = prefix_for("foreign");
    unsigned char newer[20] = {'d', 's', 'j', 9};
    char err[STORE_ERRLEN] = "", want[128];
    struct seen s = {0};
    struct store *st;

    raw_set(prefix, "head", "hello", 5);
    tap_ok(open_prefix(prefix, err) == NULL && has(err, "not a dsjob index") &&
               has(err, mc_servers) && has(err, ":head"),
           "foreign: a head that is not ours is refused (%s)", err);
    raw_set(prefix, "head", newer, sizeof(newer));
    tap_ok(open_prefix(prefix, err) == NULL && has(err, "format version 9") &&
               has(err, "newer than this dsjobd's 1"),
           "foreign: a newer head is refused (%s)", err);

    prefix = prefix_for("foreign2");
    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "foreign: open a fresh prefix"))
        goto done;
    add_job(st, 1, 1, "one", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "foreign: flush");
    raw_set(prefix, "job:1", "junk", 4);
    snprintf(want, sizeof(want), "%s:job:1", prefix);
    tap_is_int(ops->replay(st, collect, &s, err), DSJOB_ERR_STORE,
               "foreign: a junk job record fails replay");
    tap_ok(has(err, want) && has(err, "not a dsjob job record"), "foreign: names the key (%s)",
           err);
    ops->close(st);
done:
    seen_release(&s);
}

/*
 * SIGSTOP: the flush times out and fails, the data in memcached survives,
 * and after SIGCONT a bare flush lands the failed batch's remove.
 */
static void
test_stopped(void)
{
    const char *prefix = prefix_for("stopped");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "stopped: open"))
        goto done;
    add_job(st, 1, 1, "one", err);
    add_job(st, 2, 2, "two", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "stopped: flush jobs 1 and 2");
    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "stopped: remove job 1");
    tap_is_int(add_job(st, 3, 3, "three", err), DSJOB_OK, "stopped: add job 3");
    kill(mc_pid, SIGSTOP);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "stopped: flush fails");
    tap_ok(has(err, mc_servers), "stopped: and names the server (%s)", err);
    kill(mc_pid, SIGCONT);
    sleep_ms(RETRY_WAIT_MS);
    if (!tap_is_int(ops->flush(st, err), DSJOB_OK, "stopped: a bare flush works again"))
        tap_diag("%s", err);
    tap_ok(replay_all(st, &s) && s.n == 1 && s.ids[0] == 2,
           "stopped: only job 2: job 3 was refused, job 1's remove was applied");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_all(st, &s) && s.n == 1 && s.ids[0] == 2,
           "stopped: the same after reopen");
    ops->close(st);
done:
    seen_release(&s);
}

/*
 * SIGKILL: flush fails naming the server, again and again, without a
 * crash; memcached restarted on the same port is empty (documented), and
 * the next flush works.
 */
static void
test_killed(void)
{
    const char *prefix = prefix_for("killed");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "killed: open"))
        goto done;
    add_job(st, 1, 1, "one", err);
    add_job(st, 5, 5, "five", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "killed: flush jobs 1 and 5");
    add_job(st, 2, 2, "two", err);
    ops->remove(st, 1, err);
    kill(mc_pid, SIGKILL);
    waitpid(mc_pid, NULL, 0);
    mc_pid = -1;
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "killed: flush fails");
    tap_ok(has(err, mc_servers), "killed: and names the server (%s)", err);
    tap_is_int(add_job(st, 3, 3, "three", err), DSJOB_OK, "killed: add still takes a job");
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "killed: the next flush fails too");
    tap_ok(has(err, mc_servers), "killed: naming the server (%s)", err);
    tap_ok(!replay_all(st, &s) && s.n == 0, "killed: replay fails, does not crash");

    if (!tap_ok(mcd_start(mc_port), "killed: memcached restarts on port %d", mc_port))
        tap_bail("cannot restart memcached on port %d", mc_port);
    sleep_ms(RETRY_WAIT_MS);
    tap_is_int(add_job(st, 4, 4, "four", err), DSJOB_OK, "killed: add job 4");
    if (!tap_is_int(ops->flush(st, err), DSJOB_OK, "killed: the next flush works"))
        tap_diag("%s", err);
    tap_ok(replay_all(st, &s) && s.n == 1 && s.ids[0] == 4,
           "killed: only job 4 (1 and 5 went with memcached, 2 and 3 were refused)");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_all(st, &s) && s.n == 1 && s.ids[0] == 4,
           "killed: the same after reopen");
    ops->close(st);
done:
    seen_release(&s);
}

int
main(void)
{
    mc_bin = getenv("MEMCACHED_BIN");
    if (mc_bin == NULL || mc_bin[0] == '\0')
        mc_bin = "/usr/bin/memcached";
    if (access(mc_bin, X_OK) != 0)
        tap_skip_all("no memcached at '%s' (set MEMCACHED_BIN)", mc_bin);
    atexit(mcd_stop);
    mcd_start_any();
    tap_diag("memcached pid %ld on %s", (long)mc_pid, mc_servers);
    test_roundtrip();
    test_remove();
    test_order();
    test_many();
    test_chunks();
    test_compact();
    test_too_large();
    test_bad_config();
    test_foreign();
    test_stopped();
    test_killed(); /* last: it restarts memcached empty */
    return tap_done();
}
