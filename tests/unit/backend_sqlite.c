/*
 * The sqlite backend as the store contract sees it: each case gets a
 * fresh mkdtemp work directory, a second connection reads the jobs table
 * from outside, and the backend's commit seam makes flushes fail. Also the
 * directory helpers of the sqlite-only tests.
 */
#include "config.h"
#include "store_backends.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "tap.h"

/* A test seam in server/store_sqlite.c. */
extern int store_sqlite_test_fail_commits(struct store *st, bool on);

char *
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

void
case_done(char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

char *
path_in(const char *dir, const char *name)
{
    char *p;

    if (asprintf(&p, "%s/%s", dir, name) < 0)
        tap_bail("out of memory");
    return p;
}

long long
sqlite_rows(const char *dir, int64_t id)
{
    char *path = path_in(dir, "dsjobd.db");
    const char *sql =
        id < 0 ? "SELECT count(*) FROM jobs" : "SELECT count(*) FROM jobs WHERE id = ?";
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    long long n = -1;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) == SQLITE_OK &&
        (id < 0 || sqlite3_bind_int64(stmt, 1, id) == SQLITE_OK) &&
        sqlite3_step(stmt) == SQLITE_ROW)
        n = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    free(path);
    return n;
}

static char *cur_dir; /* the case's work directory */
static char *cur_db;  /* its dsjobd.db */
static struct store_config cur_cfg;

static const struct store_config *
sqlite_begin(const char *name)
{
    cur_dir = case_dir(name);
    cur_db = path_in(cur_dir, "dsjobd.db");
    cur_cfg = (struct store_config){.work_dir = cur_dir, .sync = 1};
    return &cur_cfg;
}

static void
sqlite_end(void)
{
    case_done(cur_dir);
    free(cur_db);
    cur_dir = cur_db = NULL;
}

static const char *
sqlite_where(void)
{
    return cur_db;
}

static int
sqlite_outside(uint64_t id)
{
    long long n = sqlite_rows(cur_dir, (int64_t)id);

    return n < 0 ? -1 : n > 0;
}

static void
sqlite_fail_flushes(struct store *st, bool on)
{
    store_sqlite_test_fail_commits(st, on);
}

const struct store_backend store_backend_sqlite = {
    .name = "sqlite",
    .ops = &store_sqlite_ops,
    .big = 1024 * 1024,
    .many = 20000,
    .begin = sqlite_begin,
    .end = sqlite_end,
    .where = sqlite_where,
    .fail_says = "cannot commit to store '",
    .outside = sqlite_outside,
    .fail_flushes = sqlite_fail_flushes,
};
