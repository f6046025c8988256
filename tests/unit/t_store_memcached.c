/*
 * What only the memcached store has (the contract every backend keeps is
 * in t_store_contract), against a real memcached that this test starts
 * (tests/unit/backend_memcached.c; skipped if there is none): a batch is
 * one index chunk, or splits over chunks, and the index is compacted at
 * open and on the way; a record too large for an item is refused at add;
 * bad options and dead servers fail open with the option or server named;
 * keys that are not ours are refused; and a memcached killed and
 * restarted empty under the store makes flush fail (naming it) and work
 * again afterwards. The version 2 ops too: update, set_func and
 * replay_funcs round trips, updates in a failed flush, records of the
 * old format, and kept results cut to fit an item. Each case uses its
 * own key prefix.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <libmemcached/memcached.h>

#include <dsjob/common.h>

#include "server/store.h"
#include "store_backends.h"
#include "tap.h"

/* In server/store_memcached.c: the backend (store.h may not declare it), and a test seam. */
extern const struct store_ops store_memcached_ops;
extern int store_memcached_test_chunk_ids(struct store *st, size_t n);

#define ONE_CHUNK_JOBS 10000

static const struct store_ops *ops = &store_memcached_ops;

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

/* One batch, however large, is one index chunk. */
static void
test_one_chunk(void)
{
    const char *prefix = prefix_for("onechunk");
    char err[STORE_ERRLEN] = "", data[32];
    struct store *st;
    int i, fails = 0;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "one chunk: open"))
        return;
    for (i = 0; i < ONE_CHUNK_JOBS; i++) {
        snprintf(data, sizeof(data), "job %d", i);
        fails += add_job(ops, st, (uint64_t)i + 1, (uint64_t)i + 1, data, err) != DSJOB_OK;
    }
    tap_is_int(fails, 0, "one chunk: %d adds in one batch", ONE_CHUNK_JOBS);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "one chunk: one flush");
    tap_is_int(head_chunks(prefix), 1, "one chunk: the batch is one index chunk");
    ops->close(st);
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
        add_job(ops, st, i, 100 - i, data, err);
    }
    tap_is_int(ops->flush(st, err), DSJOB_OK, "chunks: flush 10 adds");
    tap_is_int(head_chunks(prefix), 4, "chunks: 10 ids at 3 a chunk are 4 chunks");
    ops->remove(st, 2, err);
    ops->remove(st, 4, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "chunks: flush 2 removes");
    ops->remove(st, 6, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "chunks: flush 1 remove");
    tap_is_int(head_chunks(prefix), 6, "chunks: 6 chunks live");
    tap_ok(replay_all(ops, st, &s) && s.n == 7 && s.seq_sorted && s.ids[0] == 10,
           "chunks: 7 jobs, in seq order");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL, "chunks: reopen");
    if (st == NULL)
        goto done;
    tap_is_int(head_chunks(prefix), 1, "chunks: open compacted the index to one chunk");
    tap_ok(!raw_exists(prefix, "batch:1") && !raw_exists(prefix, "batch:6"),
           "chunks: the old chunks are deleted");
    tap_ok(replay_all(ops, st, &s) && s.n == 7 && s.seq_sorted && s.ids[0] == 10 && s.ids[6] == 1,
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
        fails += add_job(ops, st, i, i, "x", err) != DSJOB_OK;
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
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 300, "compact: only job 300 is left");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 300,
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
    tap_is_int(add_job(ops, st, 1, 1, "one", err), DSJOB_OK, "large: add a small job");
    tjob_init(&big, 2, 2, p, HUGE);
    tap_is_int(ops->add(st, &big.sj, err), DSJOB_ERR_STORE, "large: a 1 MiB add fails");
    tap_ok(has(err, "larger than memcached's item size") && has(err, mc_servers),
           "large: it says why and names the server (%s)", err);
    tap_is_int(add_job(ops, st, 3, 3, "three", err), DSJOB_OK, "large: the batch goes on");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "large: flush the rest");
    tap_ok(replay_all(ops, st, &s) && s.n == 2 && s.ids[0] == 1 && s.ids[1] == 3,
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
    add_job(ops, st, 1, 1, "one", err);
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

/* ---- version 2: update, set_func, replay_funcs ---- */

#define MAX_GOT 8

/* A replay copied out of its callback, every field of struct store_job. */
struct got {
    size_t n;                     /* jobs seen */
    struct store_job sj[MAX_GOT]; /* pointers into mem */
    void *mem[MAX_GOT][6];        /* handle, func, unique, reducer, data, result */
};

static void *
dup_bytes(const void *p, size_t len)
{
    void *q = malloc(len + 1);

    if (q == NULL)
        tap_bail("out of memory");
    if (len > 0)
        memcpy(q, p, len);
    return q;
}

static int
collect_all(const struct store_job *sj, void *arg)
{
    struct got *g = arg;
    struct store_job *c;

    if (g->n < MAX_GOT) {
        c = &g->sj[g->n];
        *c = *sj;
        c->handle = g->mem[g->n][0] = dup_bytes(sj->handle, sj->handle_len);
        c->func = g->mem[g->n][1] = dup_bytes(sj->func, sj->func_len);
        c->unique = g->mem[g->n][2] = dup_bytes(sj->unique, sj->unique_len);
        c->reducer = g->mem[g->n][3] = dup_bytes(sj->reducer, sj->reducer_len);
        c->data = g->mem[g->n][4] = dup_bytes(sj->data, sj->data_len);
        c->result = g->mem[g->n][5] = dup_bytes(sj->result, sj->result_len);
    }
    g->n++;
    return 0;
}

static void
got_release(struct got *g)
{
    size_t i, k;

    for (i = 0; i < g->n && i < MAX_GOT; i++)
        for (k = 0; k < 6; k++)
            free(g->mem[i][k]);
    memset(g, 0, sizeof(*g));
}

static bool
replay_got(struct store *st, struct got *g)
{
    char err[STORE_ERRLEN] = "";

    got_release(g);
    if (ops->replay(st, collect_all, g, err) == DSJOB_OK)
        return true;
    tap_diag("replay: %s", err);
    return false;
}

/* check_v2 compares every field, the version 2 ones included. */
static void
check_v2(const struct store_job *got, const struct store_job *want, const char *what)
{
    check_same_job(got, want, what);
    tap_is_int(got->state, want->state, "%s: state", what);
    tap_is_int(got->attempts, want->attempts, "%s: attempts", what);
    tap_is_int(got->first_fail, want->first_fail, "%s: first_fail", what);
    tap_is_int(got->last_fail, want->last_fail, "%s: last_fail", what);
    tap_is_mem(got->result, got->result_len, want->result, want->result_len, "%s: result", what);
    tap_is_int(got->numerator, want->numerator, "%s: numerator", what);
    tap_is_int(got->denominator, want->denominator, "%s: denominator", what);
}

/* lifecycle sets the version 2 fields of tj. */
static void
lifecycle(struct tjob *tj, int state, uint32_t attempts, const void *result, size_t len)
{
    tj->sj.state = state;
    tj->sj.attempts = attempts;
    tj->sj.first_fail = attempts > 0 ? 4102444800 : 0; /* past 2038 */
    tj->sj.last_fail = attempts > 0 ? 4102444800 + attempts : 0;
    tj->sj.result = result;
    tj->sj.result_len = len;
    tj->sj.numerator = state >= STORE_DONE_COMPLETE ? 7 : 0;
    tj->sj.denominator = state >= STORE_DONE_COMPLETE ? 9 : 0;
}

/*
 * Every state round trips byte-exact, from the same handle and after a
 * reopen: a retry's run-at, attempts and failure times, results with NULs,
 * status numbers. An update of a job added in the same batch, two updates
 * of one job in a batch, and an update of an id not stored (nothing is
 * written); a batch of updates alone writes no index chunk.
 */
static void
test_update(void)
{
    static const char dead_text[] = "boom\0with a NUL";
    static const char ex_text[] = "ex\0";
    enum { BIG = 3000, N = 6 };
    const char *prefix = prefix_for("update");
    char err[STORE_ERRLEN] = "", what[64], pay[N][16];
    struct tjob tj[N], extra;
    struct got g = {0};
    struct store *st;
    long long chunks;
    char *big = payload(BIG);
    int i, pass;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "update: open"))
        goto done;
    for (i = 0; i < N; i++) {
        snprintf(pay[i], sizeof(pay[i]), "pay-load %d", i);
        pay[i][3] = '\0'; /* a NUL in the payload */
        tjob_init(&tj[i], (uint64_t)i + 1, (uint64_t)i + 1, pay[i], 10);
    }
    for (i = 0; i < 5; i++)
        ops->add(st, &tj[i].sj, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "update: flush 5 adds");
    lifecycle(&tj[0], STORE_LIVE, 2, NULL, 0);
    tj[0].sj.when = 4102444900; /* a retry's backoff */
    tj[0].sj.prio = 2;
    lifecycle(&tj[1], STORE_DEAD, 3, dead_text, sizeof(dead_text) - 1);
    lifecycle(&tj[2], STORE_DONE_COMPLETE, 0, big, BIG);
    tj[2].sj.last_fail = 1700000000; /* when it ended */
    lifecycle(&tj[3], STORE_DONE_FAIL, 1, NULL, 0);
    lifecycle(&tj[4], STORE_DONE_EXCEPTION, 4, ex_text, sizeof(ex_text) - 1);
    /* Job 1 is first rewritten as dead, then as retrying: the last one counts. */
    extra = tj[0];
    lifecycle(&extra, STORE_DEAD, 9, "first", 5);
    tap_is_int(ops->update(st, &extra.sj, err), DSJOB_OK, "update: rewrite job 1 once");
    chunks = head_chunks(prefix);
    for (i = 0; i < 5; i++)
        if (!tap_is_int(ops->update(st, &tj[i].sj, err), DSJOB_OK, "update: job %d", i + 1))
            tap_diag("%s", err);
    tjob_init(&extra, 999, 999, "x", 1);
    lifecycle(&extra, STORE_DEAD, 1, "y", 1);
    tap_is_int(ops->update(st, &extra.sj, err), DSJOB_OK, "update: an id not stored is fine");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "update: flush the updates");
    tap_is_int(head_chunks(prefix), chunks, "update: a batch of updates alone writes no chunk");
    tap_ok(!raw_exists(prefix, "job:999"), "update: nothing is written for an id not stored");
    /* A job that ends in the batch that added it. */
    ops->add(st, &tj[5].sj, err);
    lifecycle(&tj[5], STORE_DEAD, 1, "soon", 4);
    tap_is_int(ops->update(st, &tj[5].sj, err), DSJOB_OK, "update: job 6 in its add's batch");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "update: flush the add and its update");
    for (pass = 0; pass < 2; pass++) {
        const char *when = pass == 0 ? "" : " after reopen";

        tap_ok(replay_got(st, &g) && g.n == N, "update: %d jobs%s", N, when);
        for (i = 0; i < N && g.n == N; i++) {
            snprintf(what, sizeof(what), "update: job %d%s", i + 1, when);
            check_v2(&g.sj[i], &tj[i].sj, what);
        }
        ops->close(st);
        st = pass == 0 ? open_prefix(prefix, err) : NULL;
        if (pass == 0 && !tap_ok(st != NULL, "update: reopen"))
            break;
    }
done:
    got_release(&g);
    free(big);
}

/* check_funcs_in: replay_funcs gives exactly want (n entries), in any order. */
struct funcs_seen {
    size_t n;               /* settings seen */
    struct store_func f[8]; /* names copied into names */
    char names[8][64];      /* their names */
};

static int
collect_func(const struct store_func *sf, void *arg)
{
    struct funcs_seen *fs = arg;

    if (fs->n < 8 && sf->name_len <= sizeof(fs->names[0])) {
        fs->f[fs->n] = *sf;
        memcpy(fs->names[fs->n], sf->name, sf->name_len);
        fs->f[fs->n].name = fs->names[fs->n];
    }
    fs->n++;
    return 0;
}

static const struct store_func *
find_func(const struct funcs_seen *fs, const char *name, size_t len)
{
    size_t i;

    for (i = 0; i < fs->n && i < 8; i++)
        if (fs->f[i].name_len == len && memcmp(fs->f[i].name, name, len) == 0)
            return &fs->f[i];
    return NULL;
}

static bool
same_func(const struct store_func *got, uint32_t retries, uint32_t base, uint32_t max)
{
    return got != NULL && got->retries == retries && got->backoff_base_ms == base &&
           got->backoff_max_ms == max;
}

static struct store *
reopen_funcs(struct store *st, const char *prefix, struct funcs_seen *fs)
{
    char err[STORE_ERRLEN] = "";

    ops->close(st);
    st = open_prefix(prefix, err);
    memset(fs, 0, sizeof(*fs));
    if (st != NULL && ops->replay_funcs(st, collect_func, fs, err) != DSJOB_OK)
        tap_diag("replay_funcs: %s", err);
    return st;
}

/*
 * Function settings: set, changed, forgotten (all zero), a name with a
 * space and a NUL, each seen by replay_funcs after a reopen; settings that
 * no longer fit in an item are refused naming the limit; a newer or
 * foreign settings key fails open, naming it.
 */
static void
test_funcs(void)
{
    enum { LONG_NAME = 200 * 1000 };
    static const char odd[] = "be ta\0x";
    const char *prefix = prefix_for("funcs");
    unsigned char newer[8] = {'d', 's', 'j', 2, 0, 0, 0, 0};
    struct store_func sf = {0};
    struct funcs_seen fs = {0};
    char err[STORE_ERRLEN] = "", want[128];
    struct store *st;
    char *name = payload(LONG_NAME);
    int i, refused = -1;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "funcs: open"))
        goto done;
    tap_ok(ops->replay_funcs(st, collect_func, &fs, err) == DSJOB_OK && fs.n == 0,
           "funcs: a fresh store has no settings");
    sf = (struct store_func){.name = "alpha", .name_len = 5, 3, 100, 1000};
    tap_is_int(ops->set_func(st, &sf, err), DSJOB_OK, "funcs: set alpha");
    sf = (struct store_func){.name = odd, .name_len = sizeof(odd) - 1, 5, 0, 0};
    tap_is_int(ops->set_func(st, &sf, err), DSJOB_OK, "funcs: set a name with a space and a NUL");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "funcs: a flush of settings alone");
    st = reopen_funcs(st, prefix, &fs);
    tap_ok(st != NULL && fs.n == 2, "funcs: 2 settings after reopen (%zu)", fs.n);
    tap_ok(same_func(find_func(&fs, "alpha", 5), 3, 100, 1000), "funcs: alpha's, exact");
    tap_ok(same_func(find_func(&fs, odd, sizeof(odd) - 1), 5, 0, 0), "funcs: the odd name's");
    if (st == NULL)
        goto done;
    sf = (struct store_func){.name = "alpha", .name_len = 5};
    tap_is_int(ops->set_func(st, &sf, err), DSJOB_OK, "funcs: forget alpha (all zero)");
    sf = (struct store_func){.name = "gamma", .name_len = 5, 1, 2, 3};
    ops->set_func(st, &sf, err);
    sf = (struct store_func){.name = odd, .name_len = sizeof(odd) - 1, 6, 7, 8};
    ops->set_func(st, &sf, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "funcs: flush the changes");
    st = reopen_funcs(st, prefix, &fs);
    tap_ok(st != NULL && fs.n == 2 && find_func(&fs, "alpha", 5) == NULL,
           "funcs: alpha is forgotten after reopen");
    tap_ok(same_func(find_func(&fs, "gamma", 5), 1, 2, 3), "funcs: gamma is there");
    tap_ok(same_func(find_func(&fs, odd, sizeof(odd) - 1), 6, 7, 8), "funcs: the odd name changed");
    if (st == NULL)
        goto done;
    for (i = 0; i < 8 && refused < 0; i++) {
        name[0] = (char)('a' + i);
        sf = (struct store_func){.name = name, .name_len = LONG_NAME, 1, 0, 0};
        if (ops->set_func(st, &sf, err) != DSJOB_OK)
            refused = i;
    }
    tap_is_int(refused, 5, "funcs: the sixth 200 kB name no longer fits in a 1 MiB item");
    tap_ok(has(err, "memcached's item size") && has(err, "memcached -I") && has(err, mc_servers),
           "funcs: refused naming the limit and the server (%.120s)", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "funcs: the five that fit are flushed");
    st = reopen_funcs(st, prefix, &fs);
    tap_ok(st != NULL && fs.n == 7, "funcs: 7 settings after reopen (%zu)", fs.n);
    ops->close(st);

    raw_set(prefix, "funcs", newer, sizeof(newer));
    snprintf(want, sizeof(want), "%s:funcs", prefix);
    tap_ok(open_prefix(prefix, err) == NULL && has(err, want) && has(err, "format version 2") &&
               has(err, "newer than this dsjobd's 1"),
           "funcs: a newer settings key fails open (%s)", err);
    raw_set(prefix, "funcs", "junk", 4);
    tap_ok(open_prefix(prefix, err) == NULL && has(err, want) &&
               has(err, "not a dsjob function settings record"),
           "funcs: a foreign one too (%s)", err);
done:
    free(name);
}

/*
 * An update and a setting in a flush that fails (memcached stopped): the
 * flush fails naming the server; once memcached is back a bare flush lands
 * the setting, and the update, made again as the server does, lands with
 * the next flush.
 */
static void
test_update_failed_flush(void)
{
    const char *prefix = prefix_for("updfail");
    struct store_func sf = {.name = "f", .name_len = 1, .retries = 4};
    char err[STORE_ERRLEN] = "";
    struct funcs_seen fs = {0};
    struct tjob a, b;
    struct got g = {0};
    struct store *st;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "failed update: open"))
        goto done;
    tjob_init(&a, 1, 1, "one", 3);
    tjob_init(&b, 2, 2, "two", 3);
    ops->add(st, &a.sj, err);
    ops->add(st, &b.sj, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "failed update: flush jobs 1 and 2");
    lifecycle(&a, STORE_DEAD, 3, "it\0failed", 9);
    kill(mc_pid, SIGSTOP);
    tap_is_int(ops->update(st, &a.sj, err), DSJOB_OK, "failed update: update job 1");
    tap_is_int(ops->set_func(st, &sf, err), DSJOB_OK, "failed update: set f's retries");
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "failed update: the flush fails");
    tap_ok(has(err, mc_servers), "failed update: naming the server (%s)", err);
    kill(mc_pid, SIGCONT);
    if (!tap_is_int(mc_flush_again(ops, st, err), DSJOB_OK,
                    "failed update: a bare flush works again"))
        tap_diag("%s", err);
    tap_is_int(ops->update(st, &a.sj, err), DSJOB_OK, "failed update: the update made again");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "failed update: and flushed");
    st = reopen_funcs(st, prefix, &fs);
    tap_ok(st != NULL && fs.n == 1 && same_func(find_func(&fs, "f", 1), 4, 0, 0),
           "failed update: f's setting is stored");
    tap_ok(st != NULL && replay_got(st, &g) && g.n == 2, "failed update: 2 jobs after reopen");
    if (g.n == 2) {
        check_v2(&g.sj[0], &a.sj, "failed update: job 1");
        check_v2(&g.sj[1], &b.sj, "failed update: job 2");
    }
    ops->close(st);
done:
    got_release(&g);
}

/*
 * A record of format version 1 (no lifecycle fields, no result) replays as
 * a live job that never failed, and an update rewrites it in the new
 * format; a record of a newer format fails replay, naming the key.
 */
static void
test_old_format(void)
{
    static const unsigned char v1[] = {
        'd', 's', 'j', 1,                                    /* magic, version 1 */
        1,   0,   0,   0, 0,   0,   0,   0,                  /* id 1 */
        5,   0,   0,   0, 0,   0,   0,   0,                  /* seq 5 */
        77,  0,   0,   0, 0,   0,   0,   0,                  /* when 77 */
        2,   0,   0,   0,                                    /* prio low */
        1,                                                   /* unique_is_data */
        7,   0,   0,   0, 'H', ':', 'o', 'l', 'd', ':', '1', /* handle */
        4,   0,   0,   0, 'o', 'l', 'd', 'f',                /* func */
        1,   0,   0,   0, '-',                               /* unique */
        0,   0,   0,   0,                                    /* reducer */
        5,   0,   0,   0, 'd', 0,   'a', 't', 'a',           /* data */
    };
    unsigned char v3[sizeof(v1)];
    const char *prefix = prefix_for("oldformat");
    char err[STORE_ERRLEN] = "", want[128];
    struct tjob old, b;
    struct got g = {0};
    struct store *st;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "old format: open"))
        goto done;
    tjob_init(&old, 1, 5, "d\0ata", 5);
    old.sj.handle = "H:old:1", old.sj.handle_len = 7;
    old.sj.func = "oldf", old.sj.func_len = 4;
    old.sj.unique = "-", old.sj.unique_len = 1, old.sj.unique_is_data = true;
    old.sj.when = 77, old.sj.prio = 2;
    tjob_init(&b, 2, 6, "two", 3);
    ops->add(st, &old.sj, err);
    ops->add(st, &b.sj, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "old format: flush jobs 1 and 2");
    ops->close(st);
    raw_set(prefix, "job:1", v1, sizeof(v1)); /* as a dsjobd before version 2 wrote it */
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_got(st, &g) && g.n == 2, "old format: 2 jobs replay");
    if (g.n == 2)
        check_v2(&g.sj[0], &old.sj, "old format: the version 1 record, live, no attempts");
    if (st == NULL)
        goto done;
    lifecycle(&old, STORE_DEAD, 2, "gone", 4);
    tap_is_int(ops->update(st, &old.sj, err), DSJOB_OK, "old format: update it");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "old format: flush");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_got(st, &g) && g.n == 2, "old format: reopen");
    if (g.n == 2)
        check_v2(&g.sj[0], &old.sj, "old format: rewritten dead");
    memcpy(v3, v1, sizeof(v1));
    v3[3] = 3;
    raw_set(prefix, "job:1", v3, sizeof(v3));
    snprintf(want, sizeof(want), "%s:job:1", prefix);
    if (st != NULL) {
        tap_is_int(ops->replay(st, collect_all, &g, err), DSJOB_ERR_STORE,
                   "old format: a version 3 record fails replay");
        tap_ok(has(err, want) && has(err, mc_servers) && has(err, "format version 3") &&
                   has(err, "newer than this dsjobd's 2"),
               "old format: naming the key and the versions (%s)", err);
        ops->close(st);
    }
done:
    got_release(&g);
}

/*
 * A kept result larger than an item holds beside its job: the update
 * keeps the result's first bytes, says so naming the limit and the server,
 * and the record is stored; a result that fits says nothing.
 */
static void
test_big_result(void)
{
    enum { HUGE = 1100 * 1000 };
    const char *prefix = prefix_for("bigresult");
    char err[STORE_ERRLEN] = "";
    struct tjob tj;
    struct got g = {0};
    struct store *st;
    char *p = payload(HUGE);

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "big result: open"))
        goto done;
    tjob_init(&tj, 1, 1, "one", 3);
    ops->add(st, &tj.sj, err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "big result: flush job 1");
    lifecycle(&tj, STORE_DONE_COMPLETE, 0, p, 1000);
    err[0] = '\0';
    tap_is_int(ops->update(st, &tj.sj, err), DSJOB_OK, "big result: a 1000-byte result");
    tap_is_str(err, "", "big result: fits, nothing said");
    lifecycle(&tj, STORE_DONE_COMPLETE, 0, p, HUGE);
    tap_is_int(ops->update(st, &tj.sj, err), DSJOB_OK, "big result: a 1.1 MB result is taken");
    tap_ok(has(err, "memcached -I") && has(err, "--max-result-size") && has(err, mc_servers),
           "big result: it says it is cut, naming the limits and the server (%s)", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "big result: flush");
    tap_ok(replay_got(st, &g) && g.n == 1, "big result: replay");
    if (g.n == 1) {
        tap_ok(g.sj[0].result_len > 1000 * 1000 && g.sj[0].result_len < 1024 * 1024,
               "big result: most of a MiB is kept (%zu bytes)", g.sj[0].result_len);
        tap_ok(memcmp(g.sj[0].result, p, g.sj[0].result_len) == 0,
               "big result: the result's first bytes, byte-exact");
        tap_is_int(g.sj[0].state, STORE_DONE_COMPLETE, "big result: complete");
    }
    ops->close(st);
done:
    got_release(&g);
    free(p);
}

/*
 * memcached out of memory (it runs with -M, so it refuses rather than
 * evicts): the flush's job sets, pipelined without replies, are read back,
 * and the one memcached did not keep fails the flush, naming the job and
 * the server, and nothing of the batch is stored. Fills memcached: run it
 * just before test_killed, which restarts it empty.
 */
static void
test_out_of_memory(void)
{
    enum { BIG = 1000 * 1000, N = 90 }; /* 90 MB into a 64 MB memcached */
    const char *prefix = prefix_for("oom");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct tjob tj;
    struct store *st;
    char *p = payload(BIG);
    int i, fails = 0;

    st = open_prefix(prefix, err);
    if (!tap_ok(st != NULL, "out of memory: open"))
        goto done;
    for (i = 0; i < N; i++) {
        tjob_init(&tj, (uint64_t)i + 1, (uint64_t)i + 1, p, BIG);
        fails += ops->add(st, &tj.sj, err) != DSJOB_OK;
    }
    tap_is_int(fails, 0, "out of memory: %d adds of %d bytes", N, BIG);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "out of memory: the flush fails");
    tap_ok(has(err, "cannot write job ") && has(err, mc_servers),
           "out of memory: it names the job and the server (%s)", err);
    tap_ok(replay_all(ops, st, &s) && s.n == 0, "out of memory: nothing of the batch is stored");
    ops->close(st);
done:
    seen_release(&s);
    free(p);
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
    add_job(ops, st, 1, 1, "one", err);
    add_job(ops, st, 5, 5, "five", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "killed: flush jobs 1 and 5");
    add_job(ops, st, 2, 2, "two", err);
    ops->remove(st, 1, err);
    kill(mc_pid, SIGKILL);
    waitpid(mc_pid, NULL, 0);
    mc_pid = -1;
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "killed: flush fails");
    tap_ok(has(err, mc_servers), "killed: and names the server (%s)", err);
    tap_is_int(add_job(ops, st, 3, 3, "three", err), DSJOB_OK, "killed: add still takes a job");
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "killed: the next flush fails too");
    tap_ok(has(err, mc_servers), "killed: naming the server (%s)", err);
    tap_ok(!replay_all(ops, st, &s) && s.n == 0, "killed: replay fails, does not crash");

    if (!tap_ok(mcd_start(mc_port), "killed: memcached restarts on port %d", mc_port))
        tap_bail("cannot restart memcached on port %d", mc_port);
    /* A bare flush, until the store tries the server again: the pending removes, of gone keys. */
    if (mc_flush_again(ops, st, err) != DSJOB_OK)
        tap_diag("the store did not take memcached back: %s", err);
    tap_is_int(add_job(ops, st, 4, 4, "four", err), DSJOB_OK, "killed: add job 4");
    if (!tap_is_int(ops->flush(st, err), DSJOB_OK, "killed: the next flush works"))
        tap_diag("%s", err);
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 4,
           "killed: only job 4 (1 and 5 went with memcached, 2 and 3 were refused)");
    ops->close(st);
    st = open_prefix(prefix, err);
    tap_ok(st != NULL && replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 4,
           "killed: the same after reopen");
    ops->close(st);
done:
    seen_release(&s);
}

int
main(void)
{
    char why[256];

    if (!mcd_setup(why, sizeof(why)))
        tap_skip_all("%s", why);
    test_one_chunk();
    test_chunks();
    test_compact();
    test_too_large();
    test_bad_config();
    test_foreign();
    test_update();
    test_funcs();
    test_update_failed_flush();
    test_old_format();
    test_big_result();
    test_out_of_memory();
    test_killed(); /* last: it restarts memcached empty */
    return tap_done();
}
