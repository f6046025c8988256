/*
 * What only the memcached store has (the contract every backend keeps is
 * in t_store_contract), against a real memcached that this test starts
 * (tests/unit/backend_memcached.c; skipped if there is none): a batch is
 * one index chunk, or splits over chunks, and the index is compacted at
 * open and on the way; a record too large for an item is refused at add;
 * bad options and dead servers fail open with the option or server named;
 * keys that are not ours are refused; and a memcached killed and
 * restarted empty under the store makes flush fail (naming it) and work
 * again afterwards. Each case uses its own key prefix.
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
    sleep_ms(RETRY_WAIT_MS);
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
    test_out_of_memory();
    test_killed(); /* last: it restarts memcached empty */
    return tap_done();
}
