/*
 * The store contract (server/store.h) as cases any backend must pass: jobs
 * come back byte-exact and in seq order, from the same handle and after a
 * reopen; removes stick, also of a job still in the open batch, and a
 * pending remove already hides its job from replay; one batch takes many
 * jobs; a failed flush refuses its batch's adds but keeps its removes, and
 * the store works again once the cause is gone. Also the helpers that the
 * backend-only tests share with it.
 */
#include "config.h"
#include "store_contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/common.h>

#include "tap.h"

void
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

int
add_job(const struct store_ops *ops, struct store *st, uint64_t id, uint64_t seq, const char *data,
        char *err)
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
    if (len > 0)
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

int
collect(const struct store_job *sj, void *arg)
{
    struct seen *s = arg;

    if (s->n > 0 && sj->seq < s->last_seq)
        s->seq_sorted = false;
    s->last_seq = sj->seq;
    if (s->n < CONTRACT_MAX_COPIES) {
        s->ids[s->n] = sj->id;
        copy_job(&s->copies[s->n], sj);
    }
    s->n++;
    return s->stop_after != 0 && s->n >= s->stop_after;
}

void
seen_release(struct seen *s)
{
    size_t i, k;

    for (i = 0; i < s->n && i < CONTRACT_MAX_COPIES; i++)
        for (k = 0; k < 5; k++)
            free(s->copies[i].mem[k]);
    memset(s, 0, sizeof(*s));
}

bool
replay_all(const struct store_ops *ops, struct store *st, struct seen *s)
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

void
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

char *
payload(size_t len)
{
    char *p = malloc(len ? len : 1);
    size_t i;

    if (p == NULL)
        tap_bail("out of memory");
    for (i = 0; i < len; i++)
        p[i] = (char)(i % 251); /* a NUL every 251 bytes */
    return p;
}

bool
has(const char *err, const char *part)
{
    return strstr(err, part) != NULL;
}

/* --- the cases ------------------------------------------------------------ */

static struct store *
open_case(const struct store_backend *b, const struct store_config *cfg, char *err)
{
    struct store *st = NULL;

    if (b->ops->open(&st, cfg, err) != DSJOB_OK) {
        tap_diag("%s: open: %s", b->name, err);
        return NULL;
    }
    return st;
}

static void
test_roundtrip(const struct store_backend *b)
{
    static const char data[] = "pay\0lo\0ad";
    static const char unique[] = "u\0niq";
    const struct store_ops *ops = b->ops;
    const struct store_config *cfg = b->begin("roundtrip");
    const char *n = b->name;
    char err[STORE_ERRLEN] = "", what[64];
    struct tjob a, big, c;
    struct seen s = {0};
    struct store *st;
    char *bigdata = payload(b->big);

    st = open_case(b, cfg, err);
    if (!tap_ok(st != NULL, "%s: roundtrip: open a fresh store", n))
        goto done;
    tap_ok(replay_all(ops, st, &s) && s.n == 0, "%s: roundtrip: a fresh store replays nothing", n);
    tjob_init(&a, 7, 1, data, sizeof(data) - 1);
    a.sj.unique = unique;
    a.sj.unique_len = sizeof(unique) - 1;
    a.sj.reducer = "red\0x";
    a.sj.reducer_len = 5;
    a.sj.prio = 0;
    a.sj.when = 4102444800; /* 2100-01-01, past 2038 */
    tjob_init(&big, 8, 2, bigdata, b->big);
    tjob_init(&c, 9, 3, "x", 1);
    c.sj.unique = "-";
    c.sj.unique_len = 1;
    c.sj.unique_is_data = true;
    c.sj.prio = 2;
    c.sj.when = -1;   /* negative survives too */
    c.sj.data = NULL; /* empty payload */
    c.sj.data_len = 0;
    tap_is_int(ops->add(st, &a.sj, err), DSJOB_OK, "%s: roundtrip: add a small job", n);
    if (!tap_is_int(ops->add(st, &big.sj, err), DSJOB_OK, "%s: roundtrip: add a %zu-byte job", n,
                    b->big))
        tap_diag("%s", err);
    tap_is_int(ops->add(st, &c.sj, err), DSJOB_OK, "%s: roundtrip: add an empty job", n);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: roundtrip: flush", n);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: roundtrip: flush with nothing open", n);
    tap_ok(replay_all(ops, st, &s) && s.n == 3, "%s: roundtrip: replay gives 3 jobs", n);
    if (s.n == 3) {
        snprintf(what, sizeof(what), "%s: small job", n);
        check_same_job(&s.copies[0].sj, &a.sj, what);
        snprintf(what, sizeof(what), "%s: big job", n);
        check_same_job(&s.copies[1].sj, &big.sj, what);
        snprintf(what, sizeof(what), "%s: empty job", n);
        check_same_job(&s.copies[2].sj, &c.sj, what);
    }
    ops->close(st);

    st = open_case(b, cfg, err);
    if (!tap_ok(st != NULL, "%s: roundtrip: reopen", n))
        goto done;
    tap_ok(replay_all(ops, st, &s) && s.n == 3, "%s: roundtrip: after reopen, 3 jobs", n);
    if (s.n == 3) {
        snprintf(what, sizeof(what), "%s: small job after reopen", n);
        check_same_job(&s.copies[0].sj, &a.sj, what);
        snprintf(what, sizeof(what), "%s: big job after reopen", n);
        check_same_job(&s.copies[1].sj, &big.sj, what);
        snprintf(what, sizeof(what), "%s: empty job after reopen", n);
        check_same_job(&s.copies[2].sj, &c.sj, what);
    }
    ops->close(st);
done:
    seen_release(&s);
    free(bigdata);
    b->end();
}

/* close(NULL) must return: run it in a child, which would die if it did not. */
static bool
close_null_returns(const struct store_ops *ops)
{
    int status;
    pid_t pid = fork();

    if (pid < 0)
        tap_bail("fork failed");
    if (pid == 0) {
        ops->close(NULL);
        _exit(0);
    }
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void
test_remove(const struct store_backend *b)
{
    const struct store_ops *ops = b->ops;
    const struct store_config *cfg = b->begin("remove");
    const char *n = b->name;
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;

    st = open_case(b, cfg, err);
    if (!tap_ok(st != NULL, "%s: remove: open", n))
        goto done;
    add_job(ops, st, 1, 1, "one", err);
    add_job(ops, st, 2, 2, "two", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: remove: flush two adds", n);
    tap_is_int(b->outside(1), 1, "%s: remove: job 1 is stored, seen from outside", n);
    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "%s: remove: remove job 1", n);
    tap_is_int(ops->remove(st, 12345, err), DSJOB_OK, "%s: remove: an id not stored is fine", n);
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 2,
           "%s: remove: a pending remove already hides job 1 from replay", n);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: remove: flush", n);
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 2,
           "%s: remove: only job 2 is replayed", n);
    tap_is_int(b->outside(1), 0, "%s: remove: job 1 is gone, seen from outside", n);
    add_job(ops, st, 3, 3, "three", err);
    tap_is_int(ops->remove(st, 3, err), DSJOB_OK, "%s: remove: remove a job of the open batch", n);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: remove: flush the add and its remove", n);
    tap_is_int(b->outside(3), 0, "%s: remove: that job is not stored", n);
    ops->close(st);
    st = open_case(b, cfg, err);
    tap_ok(st != NULL && replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 2,
           "%s: remove: still only job 2 after reopen", n);
    ops->close(st);
    tap_ok(close_null_returns(ops), "%s: close(NULL) is a no-op that returns", n);
done:
    seen_release(&s);
    b->end();
}

static void
test_order(const struct store_backend *b)
{
    const struct store_ops *ops = b->ops;
    const char *n = b->name;
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;

    st = open_case(b, b->begin("order"), err);
    if (!tap_ok(st != NULL, "%s: order: open", n))
        goto done;
    /* ids, insertion order and batches all disagree with seq */
    add_job(ops, st, 10, 30, "c", err);
    add_job(ops, st, 20, 10, "a", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: order: flush one batch", n);
    add_job(ops, st, 5, 20, "b", err);
    add_job(ops, st, 1, 40, "d", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: order: flush another", n);
    tap_ok(replay_all(ops, st, &s) && s.n == 4, "%s: order: 4 jobs", n);
    tap_ok(s.ids[0] == 20 && s.ids[1] == 5 && s.ids[2] == 10 && s.ids[3] == 1,
           "%s: order: replay is in seq order", n);
    seen_release(&s);
    s.stop_after = 2;
    tap_is_int(ops->replay(st, collect, &s, err), DSJOB_OK, "%s: order: fn stopping replay is ok",
               n);
    tap_is_int((long long)s.n, 2, "%s: order: replay stopped after 2", n);
    ops->close(st);
done:
    seen_release(&s);
    b->end();
}

static void
test_many(const struct store_backend *b)
{
    const struct store_ops *ops = b->ops;
    const struct store_config *cfg = b->begin("many");
    const char *n = b->name;
    char err[STORE_ERRLEN] = "", data[32];
    struct seen s = {0};
    struct timespec t0, t1;
    struct store *st;
    int i, fails = 0;

    st = open_case(b, cfg, err);
    if (!tap_ok(st != NULL, "%s: many: open", n))
        goto done;
    for (i = 0; i < b->many; i++) {
        snprintf(data, sizeof(data), "job %d", i);
        fails += add_job(ops, st, (uint64_t)i + 1, (uint64_t)(b->many - i), data, err) != DSJOB_OK;
    }
    tap_is_int(fails, 0, "%s: many: %d adds in one batch", n, b->many);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: many: one flush", n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    tap_diag("%s: many: flush of %d jobs took %.0f ms", n, b->many,
             (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    tap_ok(replay_all(ops, st, &s), "%s: many: replay", n);
    tap_is_int((long long)s.n, b->many, "%s: many: replay counts %d jobs", n, b->many);
    tap_ok(s.seq_sorted, "%s: many: in seq order", n);
    tap_is_int((long long)s.ids[0], b->many, "%s: many: lowest seq first", n);
    ops->close(st);
    st = open_case(b, cfg, err);
    tap_ok(st != NULL && replay_all(ops, st, &s), "%s: many: reopen and replay", n);
    tap_is_int((long long)s.n, b->many, "%s: many: %d jobs after reopen", n, b->many);
    tap_ok(s.seq_sorted && s.ids[0] == (uint64_t)b->many, "%s: many: in seq order after reopen", n);
    ops->close(st);
done:
    seen_release(&s);
    b->end();
}

/*
 * A failed flush: the batch's adds are refused, its remove stays pending
 * (a flush with nothing else then fails too), and once the cause is gone a
 * bare flush lands the remove.
 */
static void
test_flush_fails(const struct store_backend *b)
{
    const struct store_ops *ops = b->ops;
    const struct store_config *cfg = b->begin("fail");
    const char *n = b->name;
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct store *st;

    st = open_case(b, cfg, err);
    if (!tap_ok(st != NULL, "%s: failed flush: open", n))
        goto done;
    add_job(ops, st, 1, 1, "one", err);
    add_job(ops, st, 2, 2, "two", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: failed flush: flush jobs 1 and 2", n);
    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "%s: failed flush: remove job 1", n);
    tap_is_int(add_job(ops, st, 3, 3, "three", err), DSJOB_OK, "%s: failed flush: add job 3", n);
    b->fail_flushes(st, true);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "%s: failed flush: flush fails", n);
    tap_ok(has(err, b->where()), "%s: failed flush: and names '%s' (%s)", n, b->where(), err);
    if (b->fail_says != NULL)
        tap_ok(strncmp(err, b->fail_says, strlen(b->fail_says)) == 0,
               "%s: failed flush: the error says what failed first", n);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE,
               "%s: failed flush: a flush with only the pending remove fails too", n);
    b->fail_flushes(st, false);
    tap_is_int(b->outside(1), 1, "%s: failed flush: job 1 is still stored", n);
    if (!tap_is_int(b->flush_again ? b->flush_again(ops, st, err) : ops->flush(st, err), DSJOB_OK,
                    "%s: failed flush: a bare flush commits the pending remove", n))
        tap_diag("%s", err);
    tap_is_int(b->outside(1), 0, "%s: failed flush: job 1 is gone", n);
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 2,
           "%s: failed flush: only job 2: job 3 was refused, job 1's remove was applied", n);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "%s: failed flush: the next flush has nothing to do",
               n);
    ops->close(st);
    st = open_case(b, cfg, err);
    tap_ok(st != NULL && replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 2,
           "%s: failed flush: the same after reopen", n);
    ops->close(st);
done:
    seen_release(&s);
    b->end();
}

void
store_contract_run(const struct store_backend *b)
{
    char why[256] = "";

    if (b->setup != NULL && !b->setup(why, sizeof(why))) {
        tap_skip(1, "%s: %s", b->name, why);
        return;
    }
    test_roundtrip(b);
    test_remove(b);
    test_order(b);
    test_many(b);
    test_flush_fails(b);
    if (b->teardown != NULL)
        b->teardown();
}
