/*
 * The sqlite store: jobs come back byte-exact and in seq order, removes
 * stick, the schema version is checked, newer and corrupt files are
 * refused untouched, and a failed batch (a full disk through
 * max_page_count, or a refused COMMIT) loses its adds but not its removes,
 * and the store works again once the cause is gone. Each case runs in its
 * own mkdtemp directory.
 */
#include "config.h"

#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include <dsjob/common.h>

#include "server/store.h"
#include "tap.h"

/* Test seams in server/store_sqlite.c. */
extern int store_sqlite_test_limit_pages(struct store *st, long pages);
extern int store_sqlite_test_fail_commits(struct store *st, bool on);

#define MAX_COPIES 8
#define BIG_LEN (1024 * 1024)

static const struct store_ops *ops = &store_sqlite_ops;

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

static char *
case_dir(const char *name)
{
    const char *tmp = getenv("TMPDIR");
    char *dir;

    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    if (asprintf(&dir, "%s/t_store_sqlite.%s.XXXXXX", tmp, name) < 0)
        tap_bail("out of memory");
    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp '%s': %s", dir, strerror(errno));
    return dir;
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void
case_done(char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

static char *
path_in(const char *dir, const char *name)
{
    char *p;

    if (asprintf(&p, "%s/%s", dir, name) < 0)
        tap_bail("out of memory");
    return p;
}

static struct store *
open_dir(const char *dir, char *err)
{
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    struct store *st = NULL;
    int rc;

    rc = ops->open(&st, &cfg, err);
    if (rc != DSJOB_OK) {
        tap_diag("open '%s': %s", dir, err);
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
    char err[STORE_ERRLEN];
    int rc;

    seen_release(s);
    s->seq_sorted = true;
    rc = ops->replay(st, collect, s, err);
    if (rc != DSJOB_OK)
        tap_diag("replay: %s", err);
    return rc == DSJOB_OK;
}

/* count_rows counts jobs through a second connection, as another reader would. */
static long long
count_rows(const char *dir)
{
    char *path = path_in(dir, "dsjobd.db");
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    long long n = -1;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM jobs", -1, &stmt, NULL) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
        n = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    free(path);
    return n;
}

static bool
has(const char *err, const char *part)
{
    return strstr(err, part) != NULL;
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
big_payload(void)
{
    char *big = malloc(BIG_LEN);
    size_t i;

    if (big == NULL)
        tap_bail("out of memory");
    for (i = 0; i < BIG_LEN; i++)
        big[i] = (char)(i % 251); /* a NUL every 251 bytes */
    return big;
}

static void
test_roundtrip(void)
{
    static const char data[] = "pay\0lo\0ad";
    static const char unique[] = "u\0niq";
    char *dir = case_dir("roundtrip");
    char err[STORE_ERRLEN];
    struct tjob a, b, c;
    struct seen s = {0};
    struct store *st;
    char *big = big_payload();

    st = open_dir(dir, err);
    tap_ok(st != NULL, "roundtrip: open a fresh work dir");
    if (st == NULL)
        goto done;
    tjob_init(&a, 7, 1, data, sizeof(data) - 1);
    a.sj.unique = unique;
    a.sj.unique_len = sizeof(unique) - 1;
    a.sj.reducer = "red\0x";
    a.sj.reducer_len = 5;
    a.sj.prio = 0;
    a.sj.when = 4102444800; /* 2100-01-01, past 2038 */
    tjob_init(&b, 8, 2, big, BIG_LEN);
    tjob_init(&c, 9, 3, "x", 1);
    c.sj.unique = "-";
    c.sj.unique_len = 1;
    c.sj.unique_is_data = true;
    c.sj.prio = 2;
    c.sj.data = NULL; /* empty payload */
    c.sj.data_len = 0;
    tap_is_int(ops->add(st, &a.sj, err), DSJOB_OK, "roundtrip: add a small job");
    tap_is_int(ops->add(st, &b.sj, err), DSJOB_OK, "roundtrip: add a 1 MiB job");
    tap_is_int(ops->add(st, &c.sj, err), DSJOB_OK, "roundtrip: add an empty job");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "roundtrip: flush");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "roundtrip: flush with nothing open");
    tap_ok(replay_all(st, &s) && s.n == 3, "roundtrip: replay gives 3 jobs");
    if (s.n == 3) {
        check_same_job(&s.copies[0].sj, &a.sj, "small job");
        check_same_job(&s.copies[1].sj, &b.sj, "1 MiB job");
        check_same_job(&s.copies[2].sj, &c.sj, "empty job");
    }
    ops->close(st);

    st = open_dir(dir, err);
    tap_ok(st != NULL, "roundtrip: reopen");
    if (st == NULL)
        goto done;
    tap_ok(replay_all(st, &s) && s.n == 3, "roundtrip: after reopen, 3 jobs");
    if (s.n == 3) {
        check_same_job(&s.copies[0].sj, &a.sj, "small job after reopen");
        tap_is_mem(s.copies[1].sj.data, s.copies[1].sj.data_len, big, BIG_LEN,
                   "1 MiB payload after reopen");
        tap_ok(s.copies[2].sj.unique_is_data, "unique_is_data after reopen");
    }
    ops->close(st);
done:
    seen_release(&s);
    free(big);
    case_done(dir);
}

static void
test_remove(void)
{
    char *dir = case_dir("remove");
    char err[STORE_ERRLEN];
    struct seen s = {0};
    struct store *st;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "remove: open"))
        goto done;
    add_job(st, 1, 1, "one", err);
    add_job(st, 2, 2, "two", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "remove: flush two adds");
    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "remove: remove job 1");
    tap_is_int(ops->remove(st, 12345, err), DSJOB_OK, "remove: an id not stored is fine");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "remove: flush");
    tap_ok(replay_all(st, &s) && s.n == 1 && s.ids[0] == 2, "remove: only job 2 is replayed");
    ops->close(st);
    st = open_dir(dir, err);
    tap_ok(st != NULL && replay_all(st, &s) && s.n == 1 && s.ids[0] == 2,
           "remove: still gone after reopen");
    ops->close(st);
    ops->close(NULL);
    tap_ok(true, "close(NULL) is a no-op");
done:
    seen_release(&s);
    case_done(dir);
}

static void
test_order(void)
{
    char *dir = case_dir("order");
    char err[STORE_ERRLEN];
    struct seen s = {0};
    struct store *st;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "order: open"))
        goto done;
    /* ids and insertion order both disagree with seq */
    add_job(st, 10, 30, "c", err);
    add_job(st, 20, 10, "a", err);
    add_job(st, 5, 20, "b", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "order: flush");
    tap_ok(replay_all(st, &s) && s.n == 3, "order: 3 jobs");
    tap_ok(s.ids[0] == 20 && s.ids[1] == 5 && s.ids[2] == 10, "order: replay is in seq order");
    seen_release(&s);
    s.stop_after = 2;
    tap_is_int(ops->replay(st, collect, &s, err), DSJOB_OK, "order: fn stopping replay is ok");
    tap_is_int((long long)s.n, 2, "order: replay stopped after 2");
    ops->close(st);
done:
    seen_release(&s);
    case_done(dir);
}

static void
test_many(void)
{
    enum { N = 20000 };
    char *dir = case_dir("many");
    char err[STORE_ERRLEN], data[32];
    struct seen s = {0};
    struct store *st;
    int i, fails = 0;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "many: open"))
        goto done;
    for (i = 0; i < N; i++) {
        snprintf(data, sizeof(data), "job %d", i);
        fails += add_job(st, (uint64_t)i + 1, (uint64_t)(N - i), data, err) != DSJOB_OK;
    }
    tap_is_int(fails, 0, "many: %d adds in one batch", N);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "many: one flush");
    tap_ok(replay_all(st, &s), "many: replay");
    tap_is_int((long long)s.n, N, "many: replay counts %d jobs", N);
    tap_ok(s.seq_sorted, "many: in seq order");
    tap_is_int((long long)s.ids[0], N, "many: lowest seq first");
    ops->close(st);
done:
    seen_release(&s);
    case_done(dir);
}

static void
test_version(void)
{
    char *dir = case_dir("version");
    char *path = path_in(dir, "dsjobd.db");
    char err[STORE_ERRLEN];
    struct store *st;
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    int version = -1;
    char mode[16] = "";

    st = open_dir(dir, err);
    tap_ok(st != NULL, "version: create");
    ops->close(st);
    if (sqlite3_open(path, &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, NULL) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
        version = sqlite3_column_int(stmt, 0);
    sqlite3_finalize(stmt);
    stmt = NULL;
    tap_is_int(version, 1, "version: user_version is 1 after creation");
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, NULL) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
        snprintf(mode, sizeof(mode), "%s", (const char *)sqlite3_column_text(stmt, 0));
    sqlite3_finalize(stmt);
    tap_is_str(mode, "wal", "version: journal mode is wal");
    tap_is_int(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK,
               "version: set user_version 99");
    sqlite3_close(db);

    st = NULL;
    {
        struct store_config cfg = {.work_dir = dir, .sync = 1};
        tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE, "version: 99 is refused");
    }
    tap_diag("%s", err);
    tap_ok(has(err, path) && has(err, "99") && has(err, "newer than this dsjobd's 1"),
           "version: the error names the file and both versions");
    tap_ok(has(err, "cannot open store '"), "version: the error says what failed first");
    case_done(dir);
    free(path);
}

static void
test_foreign(void)
{
    char *dir = case_dir("foreign");
    char *path = path_in(dir, "dsjobd.db");
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    char err[STORE_ERRLEN];
    struct store *st = NULL;
    sqlite3 *db = NULL;

    if (sqlite3_open(path, &db) == SQLITE_OK)
        sqlite3_exec(db, "CREATE TABLE other (x)", NULL, NULL, NULL);
    sqlite3_close(db);
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE,
               "foreign: a database with tables but no version is refused");
    tap_ok(has(err, path) && has(err, "not a dsjob store"), "foreign: and says so (%s)", err);
    case_done(dir);
    free(path);
}

static bool
read_file(const char *path, unsigned char *buf, size_t len)
{
    FILE *f = fopen(path, "rb");
    bool ok;

    if (f == NULL)
        return false;
    ok = fread(buf, 1, len, f) == len && fgetc(f) == EOF;
    fclose(f);
    return ok;
}

static void
test_corrupt(void)
{
    char *dir = case_dir("corrupt");
    char *path = path_in(dir, "dsjobd.db");
    char *wal = path_in(dir, "dsjobd.db-wal");
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    unsigned char junk[4096], after[4096];
    uint32_t x = 2463534242u;
    char err[STORE_ERRLEN];
    struct store *st = NULL;
    struct stat sb;
    FILE *f;
    size_t i;

    for (i = 0; i < sizeof(junk); i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5; /* xorshift32 */
        junk[i] = (unsigned char)x;
    }
    f = fopen(path, "wb");
    if (f == NULL || fwrite(junk, 1, sizeof(junk), f) != sizeof(junk) || fclose(f) != 0)
        tap_bail("cannot write '%s'", path);
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE, "corrupt: refused");
    tap_ok(has(err, "not a database") && has(err, path),
           "corrupt: says 'not a database' and names the file (%s)", err);
    tap_ok(read_file(path, after, sizeof(after)) && memcmp(junk, after, sizeof(junk)) == 0,
           "corrupt: the file is untouched");
    tap_ok(stat(wal, &sb) != 0, "corrupt: no wal file was made beside it");
    case_done(dir);
    free(path);
    free(wal);
}

static void
test_paths(void)
{
    char *dir = case_dir("paths");
    char *deep = path_in(dir, "a/b/c");
    char *db = path_in(dir, "a/b/c/dsjobd.db");
    char *file = path_in(dir, "plain");
    char *under = path_in(dir, "plain/sub");
    char *own = path_in(dir, "own.db");
    char err[STORE_ERRLEN];
    struct store_config cfg = {.work_dir = deep, .sync = 2};
    struct store *st = NULL;
    struct stat sb;
    FILE *f;

    tap_is_int(ops->open(&st, &cfg, err), DSJOB_OK, "paths: a missing work dir is created");
    ops->close(st);
    tap_ok(stat(deep, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0750,
           "paths: it is a directory, mode 0750");
    tap_ok(stat(db, &sb) == 0 && S_ISREG(sb.st_mode), "paths: dsjobd.db is in it");

    f = fopen(file, "w");
    if (f != NULL)
        fclose(f);
    cfg.work_dir = under;
    st = NULL;
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_SYS, "paths: work dir under a file fails");
    tap_ok(has(err, under) && has(err, "cannot create work directory"), "paths: and names it (%s)",
           err);

    cfg.work_dir = "/nonexistent-should-not-be-used";
    cfg.db_path = own;
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_OK, "paths: db_path wins over work_dir");
    ops->close(st);
    tap_ok(stat(own, &sb) == 0, "paths: the database is at db_path");

    cfg.sync = 3;
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_ARG, "paths: sync 3 is refused (%s)", err);
    cfg.sync = 1;
    cfg.work_dir = NULL;
    cfg.db_path = NULL;
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_ARG, "paths: no dir and no path (%s)", err);
    case_done(dir);
    free(deep), free(db), free(file), free(under), free(own);
}

static void
test_readonly(void)
{
    char *dir = case_dir("readonly");
    char *path = path_in(dir, "dsjobd.db");
    char *fresh = path_in(dir, "ro");
    struct store_config cfg = {.work_dir = fresh, .sync = 1};
    char err[STORE_ERRLEN];
    struct store *st;

    if (geteuid() == 0) {
        tap_skip(6, "readonly: root ignores file modes");
        goto done;
    }
    st = open_dir(dir, err);
    ops->close(st);
    chmod(path, 0444);
    st = open_dir(dir, err);
    tap_ok(st == NULL, "readonly: a read-only file is refused");
    tap_ok(has(err, path) && has(err, "read-only"), "readonly: the error names it (%s)", err);
    ops->close(st);
    chmod(dir, 0555);
    st = open_dir(dir, err);
    tap_ok(st == NULL, "readonly: a read-only file in a read-only directory is refused");
    tap_ok(has(err, path), "readonly: the error names the file (%s)", err);
    ops->close(st);
    chmod(dir, 0700);
    mkdir(fresh, 0500);
    st = NULL;
    tap_ok(ops->open(&st, &cfg, err) != DSJOB_OK,
           "readonly: a new database in a read-only directory is refused");
    tap_ok(has(err, fresh), "readonly: the error names the file (%s)", err);
    chmod(fresh, 0700);
done:
    case_done(dir);
    free(path);
    free(fresh);
}

/*
 * A full disk: max_page_count stops the 1 MiB add with SQLITE_FULL. The
 * batch (which also removed job 1) is lost; the remove must come back in
 * the next batch, which succeeds once there is room.
 */
static void
test_full(void)
{
    char *dir = case_dir("full");
    char *path = path_in(dir, "dsjobd.db");
    char err[STORE_ERRLEN];
    struct seen s = {0};
    struct tjob big_job;
    struct store *st;
    char *big = big_payload();
    int cap;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "full: open"))
        goto done;
    tap_is_int(add_job(st, 1, 1, "one", err), DSJOB_OK, "full: add job 1");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "full: flush job 1");
    cap = store_sqlite_test_limit_pages(st, 1);
    tap_ok(cap > 0, "full: cap the database at its size (%d pages)", cap);

    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "full: remove job 1");
    tjob_init(&big_job, 2, 2, big, BIG_LEN);
    tap_is_int(ops->add(st, &big_job.sj, err), DSJOB_ERR_STORE, "full: a 1 MiB add fails");
    tap_ok(has(err, "full") && has(err, path), "full: the add says why (%s)", err);
    tap_is_int(add_job(st, 3, 3, "three", err), DSJOB_ERR_STORE,
               "full: a later add of the failed batch is refused at once");
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "full: flush fails");
    tap_ok(has(err, "cannot add job to store '") && has(err, path) && has(err, "full"),
           "full: flush names the file and sqlite's reason (%s)", err);
    tap_is_int(count_rows(dir), 1, "full: job 1 is still on disk (the remove was rolled back)");

    tap_ok(store_sqlite_test_limit_pages(st, 1L << 30) > cap, "full: room again");
    tap_is_int(add_job(st, 4, 4, "four", err), DSJOB_OK, "full: the next add works");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "full: the next flush works");
    tap_is_int(count_rows(dir), 1, "full: one job on disk");
    tap_ok(replay_all(st, &s) && s.n == 1 && s.ids[0] == 4,
           "full: only job 4: the failed batch's adds are gone, its remove was applied");
    ops->close(st);
    st = open_dir(dir, err);
    tap_ok(st != NULL && replay_all(st, &s) && s.n == 1 && s.ids[0] == 4,
           "full: the same after reopen");
    ops->close(st);
done:
    seen_release(&s);
    free(big);
    free(path);
    case_done(dir);
}

/*
 * A refused COMMIT (the adds went in, the commit did not). The pending
 * remove lands at the next flush even though no new job arrives.
 */
static void
test_commit_fails(void)
{
    char *dir = case_dir("commit");
    char *path = path_in(dir, "dsjobd.db");
    char err[STORE_ERRLEN];
    struct seen s = {0};
    struct store *st;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "commit: open"))
        goto done;
    add_job(st, 1, 1, "one", err);
    tap_is_int(ops->flush(st, err), DSJOB_OK, "commit: flush job 1");
    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "commit: remove job 1");
    tap_is_int(add_job(st, 2, 2, "two", err), DSJOB_OK, "commit: add job 2");
    store_sqlite_test_fail_commits(st, true);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "commit: flush fails");
    tap_ok(has(err, "cannot commit to store '") && has(err, path),
           "commit: the error names the file (%s)", err);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE,
               "commit: a flush with only the pending remove fails too");
    store_sqlite_test_fail_commits(st, false);
    tap_is_int(count_rows(dir), 1, "commit: job 1 is still on disk");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "commit: a bare flush commits the pending remove");
    tap_is_int(count_rows(dir), 0, "commit: nothing on disk");
    tap_ok(replay_all(st, &s) && s.n == 0, "commit: nothing replayed (job 2 was refused)");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "commit: the next flush has nothing to do");
    ops->close(st);
done:
    seen_release(&s);
    free(path);
    case_done(dir);
}

int
main(void)
{
    umask(022);
    test_roundtrip();
    test_remove();
    test_order();
    test_many();
    test_version();
    test_foreign();
    test_corrupt();
    test_paths();
    test_readonly();
    test_full();
    test_commit_fails();
    return tap_done();
}
