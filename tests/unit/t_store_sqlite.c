/*
 * What only the sqlite store has (the contract every backend keeps is in
 * t_store_contract): the schema version is checked and set; newer,
 * negative, foreign, half-made and corrupt files are refused untouched;
 * the work directory is made (mode 0750) and db_path wins over it;
 * read-only files and directories are refused with the file named (as
 * nobody when the tests run as root); a store another process has open is
 * refused, and one whose write lock another connection holds fails its
 * batch; a full disk (through max_page_count) fails the batch, rolls back
 * its remove and keeps it pending, and works again once there is room;
 * rewrites and function settings; damaged rows fail the replay; and I/O
 * errors at open, through the test VFS tests/soak/cutvfs.c, leave a file a
 * later open takes. Each case runs in its own mkdtemp directory.
 */
#include "config.h"

#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include <dsjob/common.h>

#include "server/store.h"
#include "store_backends.h"
#include "tap.h"
#include "tests/soak/cutvfs.h"

/* A test seam in server/store_sqlite.c. */
extern int store_sqlite_test_limit_pages(struct store *st, long pages);
extern int store_sqlite_test_fail_commits(struct store *st, bool on);

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
    tap_is_int(version, 3, "version: user_version is 3 after creation");
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
    tap_ok(has(err, path) && has(err, "99") && has(err, "newer than this dsjobd's 3"),
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

/*
 * ops->open as user uid (a child process that drops root's privileges
 * first, since root ignores file modes), closing what it opened; the
 * open's result, with its error in err.
 */
static int
open_as(uid_t uid, const struct store_config *cfg, char *err)
{
    struct store *st = NULL;
    int fds[2], rc = DSJOB_ERR_SYS, status;
    pid_t pid;

    if (uid == geteuid()) {
        rc = ops->open(&st, cfg, err);
        if (rc == DSJOB_OK)
            ops->close(st);
        return rc;
    }
    if (pipe(fds) < 0 || (pid = fork()) < 0)
        tap_bail("pipe or fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        if (setgid(uid) < 0 || setuid(uid) < 0)
            _exit(1);
        rc = ops->open(&st, cfg, err);
        if (rc == DSJOB_OK)
            ops->close(st);
        if (write(fds[1], &rc, sizeof(rc)) != sizeof(rc) ||
            write(fds[1], err, STORE_ERRLEN) != STORE_ERRLEN)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], &rc, sizeof(rc)) != sizeof(rc) || read(fds[0], err, STORE_ERRLEN) <= 0)
        snprintf(err, STORE_ERRLEN, "the child could not run as uid %ld", (long)uid);
    close(fds[0]);
    waitpid(pid, &status, 0);
    return rc;
}

static void
test_readonly(void)
{
    char *dir = case_dir("readonly");
    char *path = path_in(dir, "dsjobd.db");
    char *fresh = path_in(dir, "ro");
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    uid_t uid = geteuid() == 0 ? 65534 : geteuid(); /* root tries as nobody */
    char err[STORE_ERRLEN] = "";

    if (chown(dir, uid, uid) < 0)
        tap_bail("chown: %s", strerror(errno));
    tap_is_int(open_as(uid, &cfg, err), DSJOB_OK, "readonly: as uid %ld the store is made (%s)",
               (long)uid, err);
    chmod(path, 0444);
    tap_is_int(open_as(uid, &cfg, err), DSJOB_ERR_STORE, "readonly: a read-only file is refused");
    tap_ok(has(err, path) && has(err, "read-only"), "readonly: the error names it (%s)", err);
    chmod(dir, 0555);
    tap_is_int(open_as(uid, &cfg, err), DSJOB_ERR_STORE,
               "readonly: a read-only file in a read-only directory is refused");
    tap_ok(has(err, path), "readonly: the error names the file (%s)", err);
    chmod(dir, 0700);
    mkdir(fresh, 0500);
    if (chown(fresh, uid, uid) < 0)
        tap_bail("chown: %s", strerror(errno));
    cfg.work_dir = fresh;
    tap_ok(open_as(uid, &cfg, err) != DSJOB_OK,
           "readonly: a new database in a read-only directory is refused");
    tap_ok(has(err, fresh), "readonly: the error names the file (%s)", err);
    chmod(fresh, 0700);
    case_done(dir);
    free(path);
    free(fresh);
}

/*
 * A negative user_version is nobody's schema: refused as not a dsjob
 * store rather than upgraded.
 */
static void
test_negative_version(void)
{
    char *dir = case_dir("negative");
    char *path = path_in(dir, "dsjobd.db");
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    char err[STORE_ERRLEN] = "";
    struct store *st = NULL;
    sqlite3 *db = NULL;

    if (sqlite3_open(path, &db) == SQLITE_OK)
        sqlite3_exec(db, "PRAGMA user_version = -1", NULL, NULL, NULL);
    sqlite3_close(db);
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE, "negative version: refused");
    tap_ok(has(err, path) && has(err, "not a dsjob store (version -1)"),
           "negative version: and says so (%s)", err);
    case_done(dir);
    free(path);
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

/* Runs sql on the file at path through a connection of its own; false if it fails. */
static bool
exec_on(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    char *msg = NULL;
    bool ok = sqlite3_open(path, &db) == SQLITE_OK &&
              sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK;

    if (!ok)
        tap_diag("%s: %s", sql, msg ? msg : db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_free(msg);
    sqlite3_close(db);
    return ok;
}

/*
 * A database that says it is version 3 but whose tables are not ours (a
 * hand-made file, or one a newer dsjobd half-made) is refused at open,
 * naming the file, instead of failing at the first add.
 */
static void
test_bad_schema(void)
{
    char *dir = case_dir("badschema");
    char *path = path_in(dir, "dsjobd.db");
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    char err[STORE_ERRLEN] = "";
    struct store *st = NULL;

    exec_on(path, "CREATE TABLE jobs (id INTEGER PRIMARY KEY); PRAGMA user_version = 3;");
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE,
               "bad schema: a version 3 file without our columns is refused");
    tap_ok(has(err, path) && has(err, "cannot open store"), "bad schema: and says which (%s)", err);
    tap_is_int(sqlite_rows(dir, -1), 0, "bad schema: the file is left as it was");
    case_done(dir);
    free(path);
}

/* An in-memory database cannot run in WAL mode: refused, not silently not durable. */
static void
test_not_wal(void)
{
    struct store_config cfg = {.db_path = ":memory:", .sync = 1};
    char err[STORE_ERRLEN] = "";
    struct store *st = NULL;

    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE, "not wal: :memory: is refused");
    tap_ok(has(err, "cannot set wal mode") && has(err, "journal mode is 'memory'"),
           "not wal: it says the journal mode it got (%s)", err);
}

/* db_path "" means none: the work directory's dsjobd.db, also when it ends in '/'. */
static void
test_path_forms(void)
{
    char *dir = case_dir("pathforms");
    char *slash = path_in(dir, "");
    char *db = path_in(dir, "dsjobd.db");
    struct store_config cfg = {.work_dir = slash, .db_path = "", .sync = 1};
    char err[STORE_ERRLEN] = "";
    struct store *st = NULL;
    struct stat sb;

    tap_is_int(ops->open(&st, &cfg, err), DSJOB_OK, "path forms: work dir with a trailing /");
    tap_ok(st != NULL && add_job(ops, st, 1, 1, "x", err) == DSJOB_OK &&
               ops->flush(st, err) == DSJOB_OK,
           "path forms: and a job stored in it");
    ops->close(st);
    tap_ok(stat(db, &sb) == 0 && sqlite_rows(dir, 1) == 1, "path forms: in dir/dsjobd.db");
    cfg.work_dir = "";
    st = NULL;
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_ARG, "path forms: an empty work dir (%s)", err);
    ops->close(NULL); /* closing no store is a no-op */
    case_done(dir);
    free(slash);
    free(db);
}

/*
 * Another dsjobd has the database open: the second is refused (two
 * servers replaying one store would each run every job), and gets it
 * once the first is gone.
 */
static void
test_locked(void)
{
    char *dir = case_dir("locked");
    char *path = path_in(dir, "dsjobd.db");
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    char err[STORE_ERRLEN] = "";
    struct store *st = NULL;
    int ready[2], go[2], status = -1;
    char byte = 0;
    pid_t pid;

    if (pipe(ready) < 0 || pipe(go) < 0)
        tap_bail("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (pid == 0) { /* the other dsjobd: open, say so, hold it until told */
        byte = ops->open(&st, &cfg, err) == DSJOB_OK ? 'y' : 'n';
        if (write(ready[1], &byte, 1) != 1 || read(go[0], &byte, 1) < 0)
            _exit(2);
        ops->close(st);
        _exit(0);
    }
    if (read(ready[0], &byte, 1) != 1)
        byte = 0;
    tap_is_int(byte, 'y', "locked: another process opens the store");
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_ERR_STORE, "locked: a second open is refused");
    tap_ok(has(err, path) && has(err, "in use by another process: locked"),
           "locked: and says who has it (%s)", err);
    if (write(go[1], &byte, 1) != 1)
        tap_bail("cannot tell the child");
    waitpid(pid, &status, 0);
    tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "locked: the other one closes it");
    st = NULL;
    err[0] = '\0';
    tap_is_int(ops->open(&st, &cfg, err), DSJOB_OK, "locked: then it opens %s", err);
    ops->close(st);
    close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
    case_done(dir);
    free(path);
}

/*
 * Another connection holds the write lock (a sqlite3 shell in a
 * transaction): after the busy timeout the batch fails with "locked",
 * nothing is lost that was committed, its removes stay pending, and the
 * next batch works once the lock is gone.
 */
static void
test_busy(void)
{
    char *dir = case_dir("busy");
    char *path = path_in(dir, "dsjobd.db");
    char err[STORE_ERRLEN] = "";
    struct store_config cfg = {.work_dir = dir, .sync = 1, .busy_ms = 100};
    struct seen s = {0};
    struct store *st = NULL;
    sqlite3 *other = NULL;
    int rc;

    /* The lock is held until the ROLLBACK below: the busy timeout runs out however long it is. */
    rc = ops->open(&st, &cfg, err);
    if (!tap_ok(rc == DSJOB_OK, "busy: open")) {
        tap_diag("%s", err);
        goto done;
    }
    tap_ok(add_job(ops, st, 1, 1, "one", err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "busy: job 1 stored");
    if (sqlite3_open(path, &other) != SQLITE_OK ||
        sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        tap_bail("busy: cannot take the write lock");
    tap_is_int(ops->remove(st, 1, err), DSJOB_OK, "busy: a remove is taken (and remembered)");
    tap_is_int(add_job(ops, st, 2, 2, "two", err), DSJOB_ERR_STORE,
               "busy: an add is refused while another holds the lock");
    tap_ok(has(err, "cannot begin a batch in store '") && has(err, "locked"),
           "busy: it says the store is locked (%s)", err);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "busy: the flush reports it");
    sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(other);
    tap_is_int(sqlite_rows(dir, 1), 1, "busy: job 1 is still stored");
    tap_is_int(add_job(ops, st, 3, 3, "three", err), DSJOB_OK, "busy: the lock gone, adds work");
    tap_is_int(ops->flush(st, err), DSJOB_OK, "busy: and commit");
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 3,
           "busy: job 3 only: the pending remove of job 1 went with it");
    ops->close(st);
done:
    seen_release(&s);
    case_done(dir);
    free(path);
}

/* A replay callback that copies function settings out; stops after stop_after if set. */
struct fseen {
    int n, stop_after;
    char names[4][16];
    uint32_t retries[4];
};

static int
collect_func(const struct store_func *sf, void *arg)
{
    struct fseen *fs = arg;

    if (fs->n < 4) {
        snprintf(fs->names[fs->n], sizeof(fs->names[0]), "%.*s", (int)sf->name_len, sf->name);
        fs->retries[fs->n] = sf->retries;
    }
    fs->n++;
    return fs->stop_after != 0 && fs->n >= fs->stop_after;
}

/*
 * Function settings: set, replaced, forgotten when all zero; a replay that
 * its callback stops is not an error; a row with a NULL name (a hand-edited
 * file) comes back as the empty name rather than crashing the replay.
 */
static void
test_funcs(void)
{
    char *dir = case_dir("funcs");
    char *path = path_in(dir, "dsjobd.db");
    struct store_func a = {.name = "a", .name_len = 1, .retries = 3, .backoff_base_ms = 10};
    struct store_func b = {.name = "b", .name_len = 1, .retries = 5, .backoff_max_ms = 99};
    struct store_func gone = {.name = "a", .name_len = 1};
    char err[STORE_ERRLEN] = "";
    struct fseen fs = {0};
    struct store *st;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "funcs: open"))
        goto done;
    tap_ok(ops->set_func(st, &a, err) == DSJOB_OK && ops->set_func(st, &b, err) == DSJOB_OK &&
               ops->flush(st, err) == DSJOB_OK,
           "funcs: two functions' settings stored");
    b.retries = 7;
    tap_ok(ops->set_func(st, &b, err) == DSJOB_OK && ops->set_func(st, &gone, err) == DSJOB_OK &&
               ops->flush(st, err) == DSJOB_OK,
           "funcs: b changed, a set to all zero");
    tap_is_int(ops->replay_funcs(st, collect_func, &fs, err), DSJOB_OK, "funcs: replay");
    tap_ok(fs.n == 1 && strcmp(fs.names[0], "b") == 0 && fs.retries[0] == 7,
           "funcs: only b is left, with its new retries (%d rows)", fs.n);
    /* No retries but a backoff is still a setting worth keeping. */
    b.retries = 0;
    gone.backoff_base_ms = 5;
    tap_ok(ops->set_func(st, &b, err) == DSJOB_OK && ops->set_func(st, &gone, err) == DSJOB_OK &&
               ops->flush(st, err) == DSJOB_OK,
           "funcs: a and b with a backoff but no retries");
    memset(&fs, 0, sizeof(fs));
    tap_ok(ops->replay_funcs(st, collect_func, &fs, err) == DSJOB_OK && fs.n == 2 &&
               strcmp(fs.names[0], "a") == 0 && strcmp(fs.names[1], "b") == 0,
           "funcs: both are kept (%d rows)", fs.n);
    gone.backoff_base_ms = 0;
    tap_ok(ops->set_func(st, &gone, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "funcs: a forgotten again");
    ops->close(st);
    exec_on(
        path,
        "INSERT INTO funcs (name, retries, backoff_base_ms, backoff_max_ms) VALUES ('c', 1, 0, 0);"
        "INSERT INTO funcs (name, retries, backoff_base_ms, backoff_max_ms) "
        "VALUES (NULL, 2, 0, 0)");
    st = open_dir(dir, err);
    memset(&fs, 0, sizeof(fs));
    tap_ok(st != NULL && ops->replay_funcs(st, collect_func, &fs, err) == DSJOB_OK && fs.n == 3 &&
               strcmp(fs.names[0], "") == 0 && fs.retries[0] == 2,
           "funcs: a NULL name replays as the empty name (%d rows)", fs.n);
    memset(&fs, 0, sizeof(fs));
    fs.stop_after = 1;
    tap_ok(st != NULL && ops->replay_funcs(st, collect_func, &fs, err) == DSJOB_OK && fs.n == 1,
           "funcs: a callback may stop the replay");
    ops->close(st);
done:
    case_done(dir);
    free(path);
}

/*
 * Rows are updated in place (the state of a job that failed, died or
 * kept a result); an update in a batch that already failed is refused at
 * once, and one that does not fit fails its batch.
 */
static void
test_update(void)
{
    char *dir = case_dir("update");
    char err[STORE_ERRLEN] = "";
    struct store_func f = {.name = "f", .name_len = 1, .retries = 1};
    struct seen s = {0};
    struct tjob tj;
    struct store *st;
    char *big = big_payload();

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "update: open"))
        goto done;
    tap_ok(add_job(ops, st, 1, 1, "one", err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "update: job 1 stored");
    tjob_init(&tj, 1, 1, "one", 3);
    tj.sj.state = STORE_DEAD;
    tj.sj.attempts = 4;
    tj.sj.result = "why";
    tj.sj.result_len = 3;
    tap_ok(ops->update(st, &tj.sj, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "update: job 1 rewritten as dead");
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.copies[0].sj.state == STORE_DEAD &&
               s.copies[0].sj.attempts == 4 && s.copies[0].sj.result_len == 3,
           "update: it replays dead, with its attempts and its result");
    tjob_init(&tj, 1, 1, "one", 3);
    tj.sj.handle_len = (size_t)INT_MAX + 1;
    tap_is_int(ops->update(st, &tj.sj, err), DSJOB_ERR_STORE,
               "update: a field over INT_MAX bytes is refused");
    tap_ok(has(err, "too big"), "update: as too big (%s)", err);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "update: and sinks its batch");
    f.name_len = (size_t)INT_MAX + 1;
    tap_is_int(ops->set_func(st, &f, err), DSJOB_ERR_STORE,
               "update: so does a function name over INT_MAX bytes");
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "update: in its batch");
    f.name_len = 1;
    tap_ok(store_sqlite_test_limit_pages(st, 1) > 0, "update: the disk is full");
    {
        struct store_func huge = {.name = big, .name_len = BIG_LEN, .retries = 1};

        tap_is_int(ops->set_func(st, &huge, err), DSJOB_ERR_STORE,
                   "update: a setting that does not fit fails");
        tap_ok(has(err, "cannot set a function's settings in store '"), "update: and says so (%s)",
               err);
        tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "update: its batch fails");
    }
    tjob_init(&tj, 1, 1, big, BIG_LEN);
    tap_is_int(ops->update(st, &tj.sj, err), DSJOB_ERR_STORE, "update: a 1 MiB rewrite fails");
    tap_ok(has(err, "cannot update job in store '"), "update: and says so (%s)", err);
    tjob_init(&tj, 1, 1, "x", 1);
    tap_is_int(ops->update(st, &tj.sj, err), DSJOB_ERR_STORE,
               "update: a later one in the failed batch is refused at once");
    tap_is_int(ops->set_func(st, &f, err), DSJOB_ERR_STORE, "update: so is a function's setting");
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "update: the batch fails");
    store_sqlite_test_limit_pages(st, 1L << 30);
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.copies[0].sj.state == STORE_DEAD &&
               s.copies[0].sj.data_len == 3,
           "update: the job is as it was before the failed batch");
    ops->close(st);
done:
    seen_release(&s);
    free(big);
    case_done(dir);
}

/*
 * A field longer than SQLite can bind (over INT_MAX bytes; the protocol's
 * limits keep the server far below) fails the add with "too big" and
 * sinks only its batch. The length is checked before the bytes are read.
 */
static void
test_too_big(void)
{
    char *dir = case_dir("toobig");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct tjob tj;
    struct store *st;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "too big: open"))
        goto done;
    tjob_init(&tj, 1, 1, "x", 1);
    tj.sj.handle_len = (size_t)INT_MAX + 1;
    tap_is_int(ops->add(st, &tj.sj, err), DSJOB_ERR_STORE, "too big: the add is refused");
    tap_ok(has(err, "too big"), "too big: as too big (%s)", err);
    tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "too big: its batch fails");
    tap_ok(add_job(ops, st, 2, 2, "two", err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "too big: the next batch works");
    tap_ok(replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 2, "too big: only job 2 is stored");
    ops->close(st);
done:
    seen_release(&s);
    case_done(dir);
}

/*
 * A file damaged past its first page opens (only the header and schema
 * are read then) but cannot be replayed: the replay fails naming the file
 * and sqlite's reason, and the server refuses to start rather than run
 * with part of its jobs. The same for the function settings.
 */
static void
test_corrupt_rows(const char *table)
{
    char *dir = case_dir("corruptrows");
    char *path = path_in(dir, "dsjobd.db");
    char err[STORE_ERRLEN] = "";
    struct seen s = {0};
    struct fseen fs = {0};
    struct store *st;
    unsigned char junk[4096];
    int i, fd, rc;
    off_t size;
    bool jobs = strcmp(table, "jobs") == 0;

    st = open_dir(dir, err);
    if (!tap_ok(st != NULL, "corrupt %s: open", table))
        goto done;
    for (i = 1; i <= 200; i++) {
        char name[32];
        struct store_func sf = {.name = name, .retries = 1};

        snprintf(name, sizeof(name), "function-number-%03d", i);
        sf.name_len = strlen(name);
        if (jobs)
            rc = add_job(ops, st, (uint64_t)i, (uint64_t)i, "some data for a row of its own", err);
        else
            rc = ops->set_func(st, &sf, err);
        if (rc != DSJOB_OK)
            tap_bail("corrupt %s: cannot fill: %s", table, err);
    }
    tap_is_int(ops->flush(st, err), DSJOB_OK, "corrupt %s: 200 rows stored", table);
    ops->close(st); /* the last connection checkpoints the wal into the file */
    memset(junk, 0xa5, sizeof(junk));
    fd = open(path, O_WRONLY);
    size = fd < 0 ? 0 : lseek(fd, 0, SEEK_END);
    /* Every page past the schema's (1 to 4: sqlite_master, jobs, funcs, its index). */
    for (i = 4; fd >= 0 && (off_t)(i + 1) * 4096 <= size; i++)
        if (pwrite(fd, junk, sizeof(junk), (off_t)i * 4096) != (ssize_t)sizeof(junk))
            break;
    tap_ok(fd >= 0 && size >= 8 * 4096 && i > 4, "corrupt %s: pages 5 to %d overwritten", table, i);
    if (fd >= 0)
        close(fd);
    st = open_dir(dir, err);
    tap_ok(st != NULL, "corrupt %s: the file still opens", table);
    if (st != NULL && jobs)
        rc = ops->replay(st, collect, &s, err);
    else if (st != NULL)
        rc = ops->replay_funcs(st, collect_func, &fs, err);
    tap_is_int(rc, DSJOB_ERR_STORE, "corrupt %s: the replay fails", table);
    tap_ok(has(err, "cannot read store '") && has(err, path) && has(err, "malformed"),
           "corrupt %s: naming the file and why (%s)", table, err);
    if (st != NULL && jobs) {
        /* Finding the row to delete reads the damaged pages too. */
        tap_is_int(ops->remove(st, 150, err), DSJOB_OK, "corrupt jobs: a remove is remembered");
        tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "corrupt jobs: its commit fails");
        tap_ok(has(err, "cannot remove job from store '") && has(err, "malformed"),
               "corrupt jobs: saying why (%s)", err);
        tap_is_int(add_job(ops, st, 300, 300, "x", err), DSJOB_ERR_STORE,
                   "corrupt jobs: the next batch, which deletes it first, fails too");
        tap_is_int(ops->flush(st, err), DSJOB_ERR_STORE, "corrupt jobs: and is not committed");
    }
    ops->close(st);
done:
    seen_release(&s);
    case_done(dir);
    free(path);
}

/*
 * I/O errors at open, through the test VFS: the nth write, sync or open
 * fails, for every n that open reaches, on a fresh file and on a version
 * 1 file being upgraded. Each open either works or fails naming the file;
 * a failed one leaves a file that a later open (without errors) takes,
 * with the version 1 job still in it.
 */
static void
sweep_open(const char *dir, bool v1, enum cutvfs_op op, const char *opname)
{
    char *path = path_in(dir, "dsjobd.db");
    char *wal = path_in(dir, "dsjobd.db-wal");
    char *shm = path_in(dir, "dsjobd.db-shm");
    struct store_config cfg = {.work_dir = dir, .sync = 2};
    const char *what = v1 ? "version 1" : "fresh";
    int n, failed = 0, named = 0, reopened = 0, kept = 0;
    uint64_t base;
    char err[STORE_ERRLEN];

    for (n = 1; n <= 40; n++) {
        struct store *st = NULL;
        struct seen s = {0};
        int rc;

        unlink(path), unlink(wal), unlink(shm);
        if (v1 && !exec_on(path, V1_SQL))
            tap_bail("cannot make a version 1 file");
        base = cutvfs_count(op);
        cutvfs_fail(op, base + (uint64_t)n, 1,
                    op == CUTVFS_OPEN ? SQLITE_CANTOPEN : SQLITE_IOERR_WRITE);
        rc = ops->open(&st, &cfg, err);
        cutvfs_fail(op, 0, 0, 0);
        if (rc == DSJOB_OK) {
            ops->close(st);
            if (cutvfs_count(op) - base < (uint64_t)n)
                break; /* open needs fewer than n: every one was failed once */
            continue;
        }
        failed++;
        named += has(err, path);
        st = NULL;
        if (ops->open(&st, &cfg, err) == DSJOB_OK) {
            reopened++;
            kept += !v1 || (replay_all(ops, st, &s) && s.n == 1 && s.ids[0] == 7);
            ops->close(st);
        } else {
            tap_diag("%s, %s %d: reopen: %s", what, opname, n, err);
        }
        seen_release(&s);
    }
    tap_ok(failed > 0, "open sweep, %s, %s: %d opens failed", what, opname, failed);
    tap_is_int(named, failed, "open sweep, %s, %s: each failure names the file", what, opname);
    tap_is_int(reopened, failed, "open sweep, %s, %s: and a later open works", what, opname);
    tap_is_int(kept, failed, "open sweep, %s, %s: with the stored job kept", what, opname);
    free(path), free(wal), free(shm);
}

static void
test_open_sweep(void)
{
    char *dir = case_dir("sweep");
    char *log = path_in(dir, "cutvfs.log");

    if (cutvfs_register(log) != 0)
        tap_bail("cutvfs_register: %s", strerror(errno));
    cutvfs_skip_fsync(true);
    sweep_open(dir, false, CUTVFS_WRITE, "write");
    sweep_open(dir, false, CUTVFS_SYNC, "sync");
    sweep_open(dir, false, CUTVFS_OPEN, "open");
    sweep_open(dir, true, CUTVFS_WRITE, "write");
    sweep_open(dir, true, CUTVFS_SYNC, "sync");
    sweep_open(dir, true, CUTVFS_OPEN, "open");
    case_done(dir);
    free(log);
}

/* dep_list's rows as "child parent policy state;" lines, for one compare. */
static int
dep_row(const struct store_dep *sd, void *arg)
{
    char *out = arg;
    size_t n = strlen(out);

    snprintf(out + n, 1024 - n, "%.*s %.*s %d %d;", (int)sd->child_len, sd->child,
             (int)sd->parent_len, sd->parent, sd->policy, sd->state);
    return 0;
}

/* Dependency edges (deps.c): added, ended, forgotten, in batches; a failed batch keeps nothing. */
static void
test_deps(void)
{
    char *dir = case_dir("deps");
    char err[STORE_ERRLEN], rows[1024];
    struct store *st = open_dir(dir, err);
    struct store_dep ab = {"C1", 2, "P1", 2, 0, STORE_DEP_WAITING, NULL, 0, NULL};
    struct store_dep ac = {"C1", 2, "P2", 2, 0, STORE_DEP_WAITING, NULL, 0, NULL};
    struct store_dep bc = {"C2", 2, "P1", 2, 2, STORE_DEP_WAITING, NULL, 0, NULL};
    struct store_dep end = {"", 0, "P1", 2, 0, STORE_DEP_OK, NULL, 0, NULL};
    struct store_dep forget = {"C1", 2, "", 0, 0, 0, NULL, 0, NULL};

    if (st == NULL)
        tap_bail("deps: open");
    rows[0] = '\0';
    tap_is_int(ops->dep_list(st, dep_row, rows, err), DSJOB_OK, "deps: a store with none lists");
    tap_is_str(rows, "", "deps: none before the first");
    tap_ok(ops->dep(st, STORE_DEP_ADD, &ab, err) == DSJOB_OK &&
               ops->dep(st, STORE_DEP_ADD, &ac, err) == DSJOB_OK &&
               ops->dep(st, STORE_DEP_ADD, &bc, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "deps: three edges commit");
    rows[0] = '\0';
    ops->dep_list(st, dep_row, rows, err);
    tap_is_str(rows, "C1 P1 0 0;C1 P2 0 0;C2 P1 2 0;", "deps: listed by child, with policy");
    tap_ok(ops->dep(st, STORE_DEP_ENDED, &end, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "deps: a parent's end commits");
    rows[0] = '\0';
    ops->dep_list(st, dep_row, rows, err);
    tap_is_str(rows, "C1 P1 0 1;C1 P2 0 0;C2 P1 2 1;", "deps: its edges alone are done");
    end.state = STORE_DEP_FAILED;
    ops->dep(st, STORE_DEP_ENDED, &end, err);
    ops->flush(st, err);
    rows[0] = '\0';
    ops->dep_list(st, dep_row, rows, err);
    tap_is_str(rows, "C1 P1 0 1;C1 P2 0 0;C2 P1 2 1;", "deps: an edge that ended does not move");
    store_sqlite_test_fail_commits(st, true);
    ops->dep(st, STORE_DEP_FORGET, &forget, err);
    tap_ok(ops->flush(st, err) != DSJOB_OK, "deps: a batch whose commit fails is refused");
    store_sqlite_test_fail_commits(st, false);
    rows[0] = '\0';
    ops->dep_list(st, dep_row, rows, err);
    tap_is_str(rows, "C1 P1 0 1;C1 P2 0 0;C2 P1 2 1;", "deps: and forgot nothing");
    ops->dep(st, STORE_DEP_FORGET, &forget, err);
    ops->flush(st, err);
    ops->close(st);
    st = open_dir(dir, err);
    rows[0] = '\0';
    tap_ok(st != NULL && ops->dep_list(st, dep_row, rows, err) == DSJOB_OK,
           "deps: the store opens again");
    tap_is_str(rows, "C2 P1 2 1;", "deps: a forgotten child's edges are gone, the rest kept");
    ops->close(st);
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
    test_negative_version();
    test_full();
    test_bad_schema();
    test_not_wal();
    test_path_forms();
    test_locked();
    test_busy();
    test_funcs();
    test_update();
    test_too_big();
    test_deps();
    test_corrupt_rows("jobs");
    test_corrupt_rows("funcs");
    test_open_sweep(); /* last: the test VFS stays registered */
    return tap_done();
}
