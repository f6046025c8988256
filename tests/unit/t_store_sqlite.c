/*
 * What only the sqlite store has (the contract every backend keeps is in
 * t_store_contract): the schema version is checked and set, newer,
 * foreign and corrupt files are refused untouched, the work directory is
 * made (mode 0750) and db_path wins over it, read-only files and
 * directories are refused with the file named, and a full disk (through
 * max_page_count) fails the batch, rolls back its remove and keeps it
 * pending, and works again once there is room. Each case runs in its own
 * mkdtemp directory.
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
#include "store_backends.h"
#include "tap.h"

/* A test seam in server/store_sqlite.c. */
extern int store_sqlite_test_limit_pages(struct store *st, long pages);

#define BIG_LEN (1024 * 1024)

static const struct store_ops *ops = &store_sqlite_ops;

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

static char *
big_payload(void)
{
    return payload(BIG_LEN);
}

static long long
count_rows(const char *dir)
{
    return sqlite_rows(dir, -1);
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
    tap_is_int(version, 2, "version: user_version is 2 after creation");
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
    tap_ok(has(err, path) && has(err, "99") && has(err, "newer than this dsjobd's 2"),
           "version: the error names the file and both versions");
    tap_ok(has(err, "cannot open store '"), "version: the error says what failed first");
    case_done(dir);
    free(path);
}

/* Version 1's jobs table, as 0.1 made it, with one job in it. */
#define V1_SQL                                                                                     \
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, handle TEXT NOT NULL,"       \
    " func TEXT NOT NULL, unique_key BLOB NOT NULL, unique_is_data INTEGER NOT NULL,"              \
    " reducer BLOB NOT NULL, prio INTEGER NOT NULL, run_at INTEGER NOT NULL,"                      \
    " data BLOB NOT NULL);"                                                                        \
    "INSERT INTO jobs VALUES (7, 3, 'H:x:7', 'f', x'7531', 0, x'', 2, 0, x'00ff');"                \
    "PRAGMA user_version = 1;"

struct upgraded {
    int n;
    struct store_job sj;
    char data[8];
};

static int
upgraded_one(const struct store_job *sj, void *arg)
{
    struct upgraded *u = arg;

    u->n++;
    u->sj = *sj;
    memcpy(u->data, sj->data, sj->data_len < sizeof(u->data) ? sj->data_len : sizeof(u->data));
    return 0;
}

static void
test_upgrade(void)
{
    char *dir = case_dir("upgrade");
    char *path = path_in(dir, "dsjobd.db");
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    struct store_func sf = {.name = "f", .name_len = 1, .retries = 3, .backoff_base_ms = 1000};
    struct upgraded u = {0};
    char err[STORE_ERRLEN];
    struct store *st = NULL;
    sqlite3 *db = NULL;

    if (sqlite3_open(path, &db) == SQLITE_OK)
        sqlite3_exec(db, V1_SQL, NULL, NULL, NULL);
    sqlite3_close(db);
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_OK, "upgrade: a version 1 store opens (%s)", err);
    tap_is_int(ops->replay(st, upgraded_one, &u, err), DSJOB_OK, "upgrade: replay");
    tap_is_int(u.n, 1, "upgrade: its one job is there");
    tap_ok(u.sj.id == 7 && u.sj.seq == 3 && u.sj.prio == 2 && u.sj.data_len == 2 &&
               memcmp(u.data, "\0\xff", 2) == 0,
           "upgrade: with its fields");
    tap_ok(u.sj.state == STORE_LIVE && u.sj.attempts == 0 && u.sj.result_len == 0,
           "upgrade: live, no attempts, no result");
    tap_is_int(ops->set_func(st, &sf, err), DSJOB_OK, "upgrade: the funcs table is there");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "upgrade: and commits");
    ops->close(st);
    tap_is_int(sqlite_rows(dir, -1), 1, "upgrade: still one job");
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
    tap_is_int(add_job(ops, st, 1, 1, "one", err), DSJOB_OK, "full: add job 1");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "full: flush job 1");
    cap = store_sqlite_test_limit_pages(st, 1);
    tap_ok(cap > 0, "full: cap the database at its size (%d pages)", cap);

    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "full: remove job 1");
    tjob_init(&big_job, 2, 2, big, BIG_LEN);
    tap_is_int(ops->add(st, &big_job.sj, err), DSJOB_ERR_STORE, "full: a 1 MiB add fails");
    tap_ok(has(err, "full") && has(err, path), "full: the add says why (%s)", err);
    tap_is_int(add_job(ops, st, 3, 3, "three", err), DSJOB_ERR_STORE,
               "full: a later add of the failed batch is refused at once");
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "full: flush fails");
    tap_ok(has(err, "cannot add job to store '") && has(err, path) && has(err, "full"),
           "full: flush names the file and sqlite's reason (%s)", err);
    tap_is_int(count_rows(dir), 1, "full: job 1 is still on disk (the remove was rolled back)");

    tap_ok(store_sqlite_test_limit_pages(st, 1L << 30) > cap, "full: room again");
    tap_is_int(add_job(ops, st, 4, 4, "four", err), DSJOB_OK, "full: the next add works");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "full: the next flush works");
    tap_is_int(count_rows(dir), 1, "full: one job on disk");
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 4,
           "full: only job 4: the failed batch's adds are gone, its remove was applied");
    ops->close(st);
    st = open_dir(dir, err);
    tap_ok(st != NULL && replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 4,
           "full: the same after reopen");
    ops->close(st);
done:
    seen_release(&s);
    free(big);
    free(path);
    case_done(dir);
}

int
main(void)
{
    umask(022);
    test_version();
    test_upgrade();
    test_foreign();
    test_corrupt();
    test_paths();
    test_readonly();
    test_full();
    return tap_done();
}
