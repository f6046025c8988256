/*
 * The "sqlite" store: background jobs in one SQLite table, one row per job.
 * Writes are group-committed: the first add or remove after a flush opens a
 * transaction (BEGIN IMMEDIATE), later ones join it through prepared
 * statements, and flush ends it with one COMMIT, so durability costs one
 * commit per loop turn however many jobs arrived in it. The database runs
 * in WAL mode, so a reader never blocks the writer, and with synchronous
 * NORMAL a commit survives a crash of the process (FULL also survives a
 * power loss). An unknown, newer or corrupt database is refused by open,
 * never reset. A file that gearmand's libsqlite3 queue wrote (its one
 * table, gearman_queue or --libsqlite3-table) is taken over at its first
 * open: its jobs become this store's in the transaction that makes the
 * schema, and the table is renamed, never dropped (see import_gearmand).
 */
#include "config.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <sqlite3.h>

#include <dsjob/common.h>

#include "job.h"

#define DB_NAME "dsjobd.db"
#define GEARMAND_TABLE "gearman_queue"       /* gearmand's default --libsqlite3-table */
#define GEARMAND_DONE_SUFFIX "_dsjob_import" /* what the table is renamed to end with */
#define BUSY_TIMEOUT_MS 5000

/*
 * The schema, version SCHEMA_VERSION in PRAGMA user_version. A fresh
 * database (user_version 0, no tables) gets it; a newer one is refused.
 *
 * To change it: bump SCHEMA_VERSION, change SCHEMA_SQL to the new shape
 * (which is what fresh databases get), and add a step to schema_upgrade()
 * that takes a database of the previous version to the new one inside
 * the open transaction (ALTER TABLE, or CREATE a new table, INSERT ...
 * SELECT, DROP the old, RENAME), ending in PRAGMA user_version = new.
 * Keep every older step, so that any old database climbs one version at
 * a time. Never reuse a number. A dsjobd that is older than the database
 * refuses it, so a downgrade needs a copy taken before the upgrade.
 *
 * The flow table (a function's flow control settings, one line of words)
 * is outside the version: every open makes it if it is missing
 * (FLOW_TABLE_SQL), and a dsjobd that does not know it leaves it alone,
 * so a downgrade only forgets the settings.
 */
#define SCHEMA_VERSION 3
#define FLOW_TABLE_SQL                                                                             \
    "CREATE TABLE IF NOT EXISTS flow (name TEXT PRIMARY KEY, settings TEXT NOT NULL)"
#define SCHEMA_SQL                                                                                 \
    "CREATE TABLE jobs ("                                                                          \
    " id INTEGER PRIMARY KEY," /* the number in the handle */                                      \
    " seq INTEGER NOT NULL,"   /* submission order, replayed in it */                              \
    " handle TEXT NOT NULL,"                                                                       \
    " func TEXT NOT NULL,"                                                                         \
    " unique_key BLOB NOT NULL," /* "-" when unique_is_data */                                     \
    " unique_is_data INTEGER NOT NULL,"                                                            \
    " reducer BLOB NOT NULL,"   /* empty unless SUBMIT_REDUCE_JOB */                               \
    " prio INTEGER NOT NULL,"   /* enum job_prio */                                                \
    " run_at INTEGER NOT NULL," /* epoch seconds, 0 for now */                                     \
    " data BLOB NOT NULL," SCHEMA_2_JOB_COLUMNS "," SCHEMA_3_JOB_COLUMNS ");" SCHEMA_3_FUNCS

/* Version 2: a job's state, attempts, failures and kept result; function settings. */
#define SCHEMA_2_JOB_COLUMNS                                                                       \
    " state INTEGER NOT NULL DEFAULT 0," /* enum store_state */                                    \
    " attempts INTEGER NOT NULL DEFAULT 0,"                                                        \
    " first_fail INTEGER NOT NULL DEFAULT 0,"                                                      \
    " last_fail INTEGER NOT NULL DEFAULT 0,"                                                       \
    " result BLOB NOT NULL DEFAULT x'',"                                                           \
    " numerator INTEGER NOT NULL DEFAULT 0,"                                                       \
    " denominator INTEGER NOT NULL DEFAULT 0"
#define SCHEMA_2_FUNCS                                                                             \
    "CREATE TABLE funcs ("                                                                         \
    " name TEXT PRIMARY KEY,"                                                                      \
    " retries INTEGER NOT NULL,"                                                                   \
    " backoff_base_ms INTEGER NOT NULL,"                                                           \
    " backoff_max_ms INTEGER NOT NULL);"
#define UPGRADE_1_TO_2                                                                             \
    "ALTER TABLE jobs ADD COLUMN state INTEGER NOT NULL DEFAULT 0;"                                \
    "ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;"                             \
    "ALTER TABLE jobs ADD COLUMN first_fail INTEGER NOT NULL DEFAULT 0;"                           \
    "ALTER TABLE jobs ADD COLUMN last_fail INTEGER NOT NULL DEFAULT 0;"                            \
    "ALTER TABLE jobs ADD COLUMN result BLOB NOT NULL DEFAULT x'';"                                \
    "ALTER TABLE jobs ADD COLUMN numerator INTEGER NOT NULL DEFAULT 0;"                            \
    "ALTER TABLE jobs ADD COLUMN denominator INTEGER NOT NULL DEFAULT 0;" SCHEMA_2_FUNCS

/* Version 3: a job's deadline (epoch ms; 0 none); a function's maxage and uniquefor. */
#define SCHEMA_3_JOB_COLUMNS " deadline_ms INTEGER NOT NULL DEFAULT 0"
#define SCHEMA_3_FUNCS                                                                             \
    "CREATE TABLE funcs ("                                                                         \
    " name TEXT PRIMARY KEY,"                                                                      \
    " retries INTEGER NOT NULL,"                                                                   \
    " backoff_base_ms INTEGER NOT NULL,"                                                           \
    " backoff_max_ms INTEGER NOT NULL,"                                                            \
    " max_age INTEGER NOT NULL DEFAULT 0,"                                                         \
    " unique_for INTEGER NOT NULL DEFAULT 0);"
#define UPGRADE_2_TO_3                                                                             \
    "ALTER TABLE jobs ADD COLUMN deadline_ms INTEGER NOT NULL DEFAULT 0;"                          \
    "ALTER TABLE funcs ADD COLUMN max_age INTEGER NOT NULL DEFAULT 0;"                             \
    "ALTER TABLE funcs ADD COLUMN unique_for INTEGER NOT NULL DEFAULT 0;"

#define JOB_COLUMNS                                                                                \
    "id, seq, handle, func, unique_key, unique_is_data, reducer, prio, run_at, data, state, "      \
    "attempts, first_fail, last_fail, result, numerator, denominator, deadline_ms"

enum job_col { /* the order of JOB_COLUMNS; bind indexes are these + 1 */
               COL_ID,
               COL_SEQ,
               COL_HANDLE,
               COL_FUNC,
               COL_UNIQUE,
               COL_UNIQUE_IS_DATA,
               COL_REDUCER,
               COL_PRIO,
               COL_RUN_AT,
               COL_DATA,
               COL_STATE,
               COL_ATTEMPTS,
               COL_FIRST_FAIL,
               COL_LAST_FAIL,
               COL_RESULT,
               COL_NUMERATOR,
               COL_DENOMINATOR,
               COL_DEADLINE,
};

struct store {
    sqlite3 *db;                /* the connection */
    char *path;                 /* the database file, for messages */
    sqlite3_stmt *ins;          /* INSERT of one job */
    sqlite3_stmt *del;          /* DELETE of one job by id */
    sqlite3_stmt *sel;          /* every job in seq order */
    sqlite3_stmt *upd;          /* UPDATE of one job's changeable columns by id */
    sqlite3_stmt *fset;         /* INSERT OR REPLACE of one function's settings */
    sqlite3_stmt *fdel;         /* DELETE of one function's settings */
    sqlite3_stmt *fsel;         /* every function's settings */
    sqlite3_stmt *wset;         /* INSERT OR REPLACE of one function's flow settings */
    sqlite3_stmt *wdel;         /* DELETE of one function's flow settings */
    sqlite3_stmt *begin;        /* BEGIN IMMEDIATE and COMMIT of a batch: prepared once, */
    sqlite3_stmt *commit;       /* not parsed again by sqlite3_exec at every commit */
    bool failed;                /* a write of the open batch failed */
    char failure[STORE_ERRLEN]; /* why, for flush to report */
    uint64_t *removes;          /* ids removed since the last good commit */
    size_t nremoves;            /* how many */
    size_t removes_cap;         /* room in removes */
    int lock_fd;                /* flock()ed: one dsjobd per database */
    const char *import;         /* gearmand's queue table to take in at the schema's making,
                                   or NULL (borrowed from the config, for open only) */
    bool batches_made;          /* the batch tables exist and bset ... mdel are prepared */
    bool batches_new;           /* ... made in the open batch: a rollback unmakes them */
    sqlite3_stmt *bset;         /* INSERT OR REPLACE of one batch */
    sqlite3_stmt *bdel;         /* DELETE of one batch */
    sqlite3_stmt *bmdel;        /* DELETE of one batch's members */
    sqlite3_stmt *mins;         /* INSERT of one member */
    sqlite3_stmt *mdel;         /* DELETE of one member by job id */
};

/* Test seams (like beanstalkd's falloc), declared again in t_store_sqlite.c. */
int store_sqlite_test_limit_pages(struct store *st, long pages);
int store_sqlite_test_fail_commits(struct store *st, bool on);

static int member_delete(struct store *st, uint64_t id);
static int member_insert(struct store *st, const struct store_job *sj);
static void batch_tables_unmake(struct store *st);
static void batch_stmts_free(struct store *st);

/* db_error is sqlite's message for rc: errmsg if it is about rc, else the generic text. */
static const char *
db_error(sqlite3 *db, int rc)
{
    if ((sqlite3_errcode(db) & 0xff) == (rc & 0xff))
        return sqlite3_errmsg(db);
    return sqlite3_errstr(rc);
}

static int
db_exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* query_int runs sql, which yields one integer, into *out. */
static int
query_int(sqlite3 *db, const char *sql, long long *out)
{
    sqlite3_stmt *stmt;
    int rc;

    rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(stmt, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(stmt);
    return rc;
}

/* db_path_of picks the database file: cfg->db_path, or dsjobd.db in cfg->work_dir. */
static int
db_path_of(const struct store_config *cfg, char **out, char *err)
{
    const char *dir = cfg->work_dir;
    size_t len;
    int rc;

    if (cfg->db_path != NULL && cfg->db_path[0] != '\0') {
        *out = strdup(cfg->db_path);
    } else if (dir != NULL && dir[0] != '\0') {
        rc = store_make_dir(dir, err);
        if (rc != DSJOB_OK)
            return rc;
        len = strlen(dir);
        *out = malloc(len + sizeof("/" DB_NAME));
        if (*out != NULL)
            sprintf(*out, "%s%s" DB_NAME, dir, dir[len - 1] == '/' ? "" : "/");
    } else {
        return store_say(err, DSJOB_ERR_ARG,
                         "store 'sqlite' needs a work directory or a database path");
    }
    if (*out == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot open store: out of memory");
    return DSJOB_OK;
}

/*
 * is_gearmand_queue says whether the database's only table is gearmand's
 * queue table (st->import): its index, made by its primary key, may be
 * there too. Otherwise st->import is cleared.
 */
static bool
is_gearmand_queue(struct store *st)
{
    sqlite3_stmt *stmt;
    bool found = false, other = false;

    if (sqlite3_prepare_v2(st->db, "SELECT name, tbl_name FROM sqlite_master WHERE type = 'table'",
                           -1, &stmt, NULL) != SQLITE_OK)
        return false;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(stmt, 0);

        if (name != NULL && strcmp(name, st->import) == 0)
            found = true;
        else
            other = true;
    }
    sqlite3_finalize(stmt);
    if (!found || other)
        st->import = NULL;
    return st->import != NULL;
}

/*
 * check_version reads user_version, the first read of the file, so a file
 * that is not a database is found before anything is written to it.
 */
static int
check_version(struct store *st, long long *version, char *err)
{
    long long ntables;
    int rc;

    rc = query_int(st->db, "PRAGMA user_version", version);
    if (rc != SQLITE_OK)
        return store_say(err, DSJOB_ERR_STORE, "cannot open store '%s': %s", st->path,
                         db_error(st->db, rc));
    if (sqlite3_db_readonly(st->db, "main") == 1)
        return store_say(err, DSJOB_ERR_STORE, "cannot open store '%s': file is read-only",
                         st->path);
    if (*version > SCHEMA_VERSION)
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot open store '%s': schema version %lld is newer than this dsjobd's %d", st->path,
            *version, SCHEMA_VERSION);
    if (*version < 0)
        return store_say(err, DSJOB_ERR_STORE,
                         "cannot open store '%s': not a dsjob store (version %lld)", st->path,
                         *version);
    if (*version > 0)
        return DSJOB_OK;
    rc = query_int(st->db, "SELECT count(*) FROM sqlite_master", &ntables);
    if (rc != SQLITE_OK)
        return store_say(err, DSJOB_ERR_STORE, "cannot open store '%s': %s", st->path,
                         db_error(st->db, rc));
    if (ntables != 0 && is_gearmand_queue(st))
        return DSJOB_OK; /* st->import is set: schema_upgrade takes its jobs in */
    if (ntables != 0)
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot open store '%s': not a dsjob store (schema version 0 but %lld tables)",
            st->path, ntables);
    st->import = NULL;
    return DSJOB_OK;
}

/* set_wal switches to WAL and checks that it took: it cannot on some file systems. */
static int
set_wal(struct store *st, char *err)
{
    sqlite3_stmt *stmt;
    const char *mode;
    int rc;

    rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode=WAL", -1, &stmt, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) {
        store_say(err, DSJOB_ERR_STORE, "cannot set wal mode on store '%s': %s", st->path,
                  db_error(st->db, rc));
        goto finalize;
    }
    mode = (const char *)sqlite3_column_text(stmt, 0);
    if (mode == NULL || strcasecmp(mode, "wal") != 0) {
        store_say(err, DSJOB_ERR_STORE, "cannot set wal mode on store '%s': journal mode is '%s'",
                  st->path, mode ? mode : "");
        goto finalize;
    }
    rc = SQLITE_OK;
finalize:
    sqlite3_finalize(stmt);
    return rc == SQLITE_OK ? DSJOB_OK : DSJOB_ERR_STORE;
}

static int
set_sync(struct store *st, int sync, char *err)
{
    static const char *const sql[] = {
        "PRAGMA synchronous=OFF",
        "PRAGMA synchronous=NORMAL",
        "PRAGMA synchronous=FULL",
    };
    int rc;

    if (sync < 0 || sync > 2)
        return store_say(err, DSJOB_ERR_ARG,
                         "invalid store sync level %d (0 off, 1 normal, 2 full)", sync);
    rc = db_exec(st->db, sql[sync]);
    if (rc != SQLITE_OK)
        return store_say(err, DSJOB_ERR_STORE, "cannot set sync level on store '%s': %s", st->path,
                         db_error(st->db, rc));
    return DSJOB_OK;
}

static int bind_job(sqlite3_stmt *stmt, const struct store_job *sj);
static const void *col_bytes(sqlite3_stmt *stmt, int col, size_t *len);

/* quote_name writes name as an SQL identifier in double quotes ("" for "). */
static bool
quote_name(char *buf, size_t size, const char *name, const char *suffix)
{
    size_t n = 0;
    const char *p;

    if (n + 1 >= size)
        return false;
    buf[n++] = '"';
    for (p = name; *p != '\0'; p++) {
        if (n + 3 >= size)
            return false;
        if (*p == '"')
            buf[n++] = '"';
        buf[n++] = *p;
    }
    for (p = suffix; *p != '\0'; p++) {
        if (n + 2 >= size)
            return false;
        buf[n++] = *p;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return true;
}

/* has_column says whether table (quoted) has a column named col. */
static bool
has_column(sqlite3 *db, const char *table, const char *col)
{
    char sql[256];
    sqlite3_stmt *stmt;
    bool found = false;

    snprintf(sql, sizeof(sql), "PRAGMA table_info(%s)", table);
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK)
        return false;
    while (!found && sqlite3_step(stmt) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(stmt, 1);

        found = name != NULL && strcmp(name, col) == 0;
    }
    sqlite3_finalize(stmt);
    return found;
}

/*
 * import_gearmand takes the rows of gearmand's queue table (st->import)
 * into jobs, in the open transaction that makes the schema, so they are
 * taken once or not at all. gearmand's libsqlite3 queue (1.1.20, 2.0)
 * keeps one row per queued background job: unique_key, function_name,
 * priority (0 high, 1 normal, 2 low: enum job_prio's numbers),
 * data and, since 0.20, when_to_run (epoch seconds, 0 for now). Each row
 * becomes a job of its own in rowid order (gearmand's submission order,
 * as its replay reads it): ids and seqs 1, 2, ...; handles PREFIX:N as the
 * server makes them; a unique of "-" coalesces on the payload, as in
 * gearmand; an empty one coalesces with nothing, so rows that share it
 * each keep their payload. The table is renamed TABLE_dsjob_import first
 * (so that any name may be gearmand's), and left for the operator to check
 * and drop; with before, import_gearmand only renames it, and is then
 * called again, after the schema is made, to copy the rows.
 */
static int
import_gearmand(struct store *st, const struct store_config *cfg, bool before, char *err)
{
    char table[160], renamed[200], sql[512];
    const char *prefix = cfg->owner != NULL ? cfg->owner : "H:gearmand";
    sqlite3_stmt *sel = NULL, *ins = NULL;
    uint64_t n = 0;
    bool when;
    int rc;

    if (!quote_name(table, sizeof(table), st->import, "") ||
        !quote_name(renamed, sizeof(renamed), st->import, GEARMAND_DONE_SUFFIX))
        return store_say(err, DSJOB_ERR_ARG, "gearmand queue table name '%s' is too long",
                         st->import);
    if (before) {
        snprintf(sql, sizeof(sql), "ALTER TABLE %s RENAME TO %s", table, renamed);
        rc = db_exec(st->db, sql);
        if (rc != SQLITE_OK)
            return store_say(err, DSJOB_ERR_STORE,
                             "cannot take gearmand's queue table %s of '%s' in: %s", table,
                             st->path, db_error(st->db, rc));
        return DSJOB_OK;
    }
    when = has_column(st->db, renamed, "when_to_run");
    snprintf(sql, sizeof(sql),
             "SELECT unique_key, function_name, priority, data, %s FROM %s ORDER BY rowid",
             when ? "when_to_run" : "0", renamed);
    rc = sqlite3_prepare_v2(st->db, sql, -1, &sel, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db,
                                "INSERT INTO jobs (" JOB_COLUMNS
                                ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                -1, &ins, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
        char handle[JOB_HANDLE_MAX + 24];
        struct store_job sj;
        int len, prio;

        memset(&sj, 0, sizeof(sj));
        sj.id = sj.seq = ++n;
        len = job_handle_format(handle, sizeof(handle), prefix, sj.id);
        sj.handle = handle;
        sj.handle_len = len > 0 ? (size_t)len : 0;
        sj.unique = col_bytes(sel, 0, &sj.unique_len);
        sj.func = col_bytes(sel, 1, &sj.func_len);
        prio = sqlite3_column_int(sel, 2);
        sj.prio = prio >= JOB_PRIO_HIGH && prio <= JOB_PRIO_LOW ? prio : JOB_PRIO_NORMAL;
        sj.data = col_bytes(sel, 3, &sj.data_len);
        sj.when = sqlite3_column_int64(sel, 4) > 0 ? sqlite3_column_int64(sel, 4) : 0;
        sj.unique_is_data = sj.unique_len == 1 && ((const char *)sj.unique)[0] == '-';
        sj.state = STORE_LIVE;
        if (sj.func_len == 0) {
            rc = SQLITE_CONSTRAINT; /* gearmand never wrote one: the file is not its queue */
            break;
        }
        rc = bind_job(ins, &sj);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(ins);
        sqlite3_reset(ins);
        sqlite3_clear_bindings(ins);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    if (rc != SQLITE_OK)
        return store_say(err, DSJOB_ERR_STORE,
                         "cannot take gearmand's queue table %s of '%s' in: %s%s", table, st->path,
                         rc == SQLITE_CONSTRAINT ? "a row without a function, or " : "",
                         db_error(st->db, rc));
    if (cfg->note != NULL)
        snprintf(cfg->note, STORE_ERRLEN,
                 "store sqlite: took %llu jobs of gearmand's queue table %s of '%s' in; the "
                 "table is now %s",
                 (unsigned long long)n, table, st->path, renamed);
    return DSJOB_OK;
}

/*
 * schema_upgrade takes the database from version to SCHEMA_VERSION: a
 * fresh one (0) gets SCHEMA_SQL, an older one climbs one step at a time.
 */
static int
schema_upgrade(struct store *st, const struct store_config *cfg, long long version, char *err)
{
    char set_version[64];
    int rc;

    if (version == SCHEMA_VERSION)
        return DSJOB_OK;
    snprintf(set_version, sizeof(set_version), "PRAGMA user_version = %d", SCHEMA_VERSION);
    rc = db_exec(st->db, "BEGIN IMMEDIATE");
    if (rc == SQLITE_OK && version == 0 && st->import != NULL) {
        /* gearmand's table out of the way, the schema, then its rows: or none of it. */
        int irc = import_gearmand(st, cfg, true, err);

        if (irc == DSJOB_OK && (rc = db_exec(st->db, SCHEMA_SQL)) != SQLITE_OK)
            irc = store_say(err, DSJOB_ERR_STORE, "cannot create schema in store '%s': %s",
                            st->path, db_error(st->db, rc));
        if (irc == DSJOB_OK)
            irc = import_gearmand(st, cfg, false, err);
        if (irc != DSJOB_OK) {
            db_exec(st->db, "ROLLBACK");
            return irc;
        }
    }
    if (rc == SQLITE_OK && version == 0 && st->import == NULL)
        rc = db_exec(st->db, SCHEMA_SQL);
    if (rc == SQLITE_OK && version == 1)
        rc = db_exec(st->db, UPGRADE_1_TO_2);
    if (rc == SQLITE_OK && version >= 1 && version <= 2)
        rc = db_exec(st->db, UPGRADE_2_TO_3);
    if (rc == SQLITE_OK)
        rc = db_exec(st->db, set_version);
    if (rc == SQLITE_OK)
        rc = db_exec(st->db, "COMMIT");
    if (rc == SQLITE_OK)
        return DSJOB_OK;
    store_say(err, DSJOB_ERR_STORE, "cannot create schema in store '%s': %s", st->path,
              db_error(st->db, rc));
    if (!sqlite3_get_autocommit(st->db))
        db_exec(st->db, "ROLLBACK");
    return DSJOB_ERR_STORE;
}

static int
prepare_all(struct store *st, char *err)
{
    static const char ins[] =
        "INSERT INTO jobs (" JOB_COLUMNS ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
    /* The same bind indexes as ins, so bind_job serves both; ?3 and ?4 are not used. */
    static const char upd[] =
        "UPDATE jobs SET seq=?2, unique_key=?5, unique_is_data=?6, reducer=?7, prio=?8, "
        "run_at=?9, data=?10, state=?11, attempts=?12, first_fail=?13, last_fail=?14, "
        "result=?15, numerator=?16, denominator=?17, deadline_ms=?18 WHERE id=?1";
    static const char fset[] = "INSERT OR REPLACE INTO funcs (name, retries, backoff_base_ms, "
                               "backoff_max_ms, max_age, unique_for) VALUES (?,?,?,?,?,?)";
    static const char fdel[] = "DELETE FROM funcs WHERE name = ?";
    static const char wset[] = "INSERT OR REPLACE INTO flow (name, settings) VALUES (?,?)";
    static const char wdel[] = "DELETE FROM flow WHERE name = ?";
    /* A function's row in funcs, flow, or both. */
    static const char fsel[] =
        "SELECT name, MAX(r), MAX(b), MAX(m), MAX(w), MAX(a), MAX(u) FROM (SELECT name, "
        "retries AS r, backoff_base_ms AS b, backoff_max_ms AS m, '' AS w, max_age AS a, "
        "unique_for AS u FROM funcs UNION ALL SELECT name, 0, 0, 0, settings, 0, 0 FROM flow) "
        "GROUP BY name ORDER BY name";
    static const char del[] = "DELETE FROM jobs WHERE id = ?";
    static const char sel[] = "SELECT " JOB_COLUMNS " FROM jobs ORDER BY seq, id";
    int rc;

    rc = db_exec(st->db, FLOW_TABLE_SQL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, ins, -1, &st->ins, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, del, -1, &st->del, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, sel, -1, &st->sel, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, upd, -1, &st->upd, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, fset, -1, &st->fset, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, fdel, -1, &st->fdel, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, fsel, -1, &st->fsel, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, wset, -1, &st->wset, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, wdel, -1, &st->wdel, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, "BEGIN IMMEDIATE", -1, &st->begin, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, "COMMIT", -1, &st->commit, NULL);
    if (rc != SQLITE_OK)
        return store_say(err, DSJOB_ERR_STORE, "cannot open store '%s': %s", st->path,
                         db_error(st->db, rc));
    return DSJOB_OK;
}

/* db_connect opens st->path and makes it a store: version, WAL, sync, schema, statements. */
static int
db_connect(struct store *st, const struct store_config *cfg, char *err)
{
    long long version;
    int rc;

    rc = sqlite3_open_v2(st->path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK)
        return store_say(err, rc == SQLITE_NOMEM ? DSJOB_ERR_NOMEM : DSJOB_ERR_STORE,
                         "cannot open store '%s': %s", st->path,
                         st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
    sqlite3_busy_timeout(st->db, cfg->busy_ms > 0 ? (int)cfg->busy_ms : BUSY_TIMEOUT_MS);
    st->import = cfg->import_table != NULL && cfg->import_table[0] != '\0' ? cfg->import_table
                                                                           : GEARMAND_TABLE;
    rc = check_version(st, &version, err);
    if (rc == DSJOB_OK)
        rc = set_wal(st, err);
    if (rc == DSJOB_OK)
        rc = set_sync(st, cfg->sync, err);
    if (rc == DSJOB_OK)
        rc = schema_upgrade(st, cfg, version, err);
    if (rc == DSJOB_OK)
        rc = prepare_all(st, err);
    return rc;
}

static void
finalize_all(struct store *st)
{
    sqlite3_finalize(st->ins);
    sqlite3_finalize(st->del);
    sqlite3_finalize(st->sel);
    sqlite3_finalize(st->upd);
    sqlite3_finalize(st->fset);
    sqlite3_finalize(st->fdel);
    sqlite3_finalize(st->fsel);
    sqlite3_finalize(st->wset);
    sqlite3_finalize(st->wdel);
    sqlite3_finalize(st->begin);
    sqlite3_finalize(st->commit);
    st->ins = st->del = st->sel = st->upd = st->fset = st->fdel = st->fsel = NULL;
    st->wset = st->wdel = st->begin = st->commit = NULL;
}

/*
 * Two servers replaying one database would each run every job. sqlite's
 * own locks only make them take turns, so hold an flock() on the file for
 * as long as the store is open (sqlite uses fcntl locks, which flock does
 * not disturb).
 */
static int
take_lock(struct store *st, char *err)
{
    st->lock_fd = open(st->path, O_RDONLY | O_CLOEXEC);
    if (st->lock_fd < 0)
        return store_say(err, DSJOB_ERR_STORE, "cannot lock store '%s': %s", st->path,
                         strerror(errno));
    if (flock(st->lock_fd, LOCK_EX | LOCK_NB) < 0)
        return store_say(err, DSJOB_ERR_STORE, "store '%s' is in use by another process: %s",
                         st->path, errno == EWOULDBLOCK ? "locked" : strerror(errno));
    return DSJOB_OK;
}

static int
sqlite_open(struct store **out, const struct store_config *cfg, char *err)
{
    struct store *st;
    int rc;

    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot open store: out of memory");
    rc = db_path_of(cfg, &st->path, err);
    if (rc != DSJOB_OK)
        goto free_st;
    st->lock_fd = -1;
    rc = db_connect(st, cfg, err);
    if (rc != DSJOB_OK)
        goto close_db;
    rc = take_lock(st, err);
    if (rc != DSJOB_OK)
        goto close_db;
    *out = st;
    return DSJOB_OK;
close_db:
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    finalize_all(st);
    sqlite3_close(st->db);
    free(st->path);
free_st:
    free(st);
    return rc;
}

/*
 * Failure of a batch. The first failed write of a batch (BEGIN, an INSERT,
 * a DELETE, or the COMMIT) sinks the whole batch: sqlite may already have
 * rolled the transaction back (SQLITE_FULL can), so nothing written before
 * it can be trusted to commit. From then on adds are refused at once, as
 * their jobs would be lost anyway; removes are only remembered; and the
 * next flush rolls back and reports the first failure. Removes made since
 * the last good commit are kept in st->removes and done again at the start
 * of the next batch, so a finished job cannot come back at a restart.
 * Nothing is left over: the batch after a failure starts clean, and
 * succeeds as soon as the cause (a full disk) is gone.
 */
static void
batch_fail(struct store *st, const char *what, int rc)
{
    if (st->failed)
        return; /* the first cause is the one worth reporting */
    snprintf(st->failure, sizeof(st->failure), "cannot %s store '%s': %s", what, st->path,
             db_error(st->db, rc));
    st->failed = true;
}

/* batch_abandon rolls the failed batch back and reports why; its removes stay pending. */
static int
batch_abandon(struct store *st, char *err)
{
    if (!sqlite3_get_autocommit(st->db))
        db_exec(st->db, "ROLLBACK");
    if (st->batches_new)
        batch_tables_unmake(st);
    st->failed = false;
    return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
}

/* Step a prepared statement with no rows (BEGIN, COMMIT) and reset it: SQLITE_OK or the error. */
static int
db_step(sqlite3_stmt *stmt)
{
    int rc = sqlite3_step(stmt);

    sqlite3_reset(stmt);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int
delete_id(struct store *st, uint64_t id)
{
    int rc;

    if (member_delete(st, id) != 0)
        return -1;

    rc = sqlite3_bind_int64(st->del, 1, (sqlite3_int64)id);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st->del);
    if (rc != SQLITE_DONE)
        batch_fail(st, "remove job from", rc);
    sqlite3_reset(st->del);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* batch_open makes sure a batch transaction is open; false if the batch has failed. */
static bool
batch_open(struct store *st)
{
    size_t i;
    int rc;

    if (st->failed)
        return false;
    if (!sqlite3_get_autocommit(st->db))
        return true;
    rc = db_step(st->begin);
    if (rc != SQLITE_OK) {
        batch_fail(st, "begin a batch in", rc);
        return false;
    }
    /* Removes a failed batch could not commit go first, before this batch's adds. */
    for (i = 0; i < st->nremoves; i++)
        if (delete_id(st, st->removes[i]) != 0)
            return false;
    return true;
}

/* bind_bytes binds len bytes (maybe NULs, maybe none) so that the column is never NULL. */
static int
bind_bytes(sqlite3_stmt *stmt, int col, const void *p, size_t len, bool text)
{
    if (len > INT_MAX)
        return SQLITE_TOOBIG;
    if (p == NULL)
        p = "";
    /* STATIC: the bytes stay valid until sqlite3_clear_bindings, before add returns. */
    if (text)
        return sqlite3_bind_text(stmt, col + 1, p, (int)len, SQLITE_STATIC);
    return sqlite3_bind_blob(stmt, col + 1, p, (int)len, SQLITE_STATIC);
}

static int
bind_job(sqlite3_stmt *stmt, const struct store_job *sj)
{
    int rc;

    rc = sqlite3_bind_int64(stmt, COL_ID + 1, (sqlite3_int64)sj->id);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_SEQ + 1, (sqlite3_int64)sj->seq);
    if (rc == SQLITE_OK)
        rc = bind_bytes(stmt, COL_HANDLE, sj->handle, sj->handle_len, true);
    if (rc == SQLITE_OK)
        rc = bind_bytes(stmt, COL_FUNC, sj->func, sj->func_len, true);
    if (rc == SQLITE_OK)
        rc = bind_bytes(stmt, COL_UNIQUE, sj->unique, sj->unique_len, false);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(stmt, COL_UNIQUE_IS_DATA + 1, sj->unique_is_data);
    if (rc == SQLITE_OK)
        rc = bind_bytes(stmt, COL_REDUCER, sj->reducer, sj->reducer_len, false);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(stmt, COL_PRIO + 1, sj->prio);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_RUN_AT + 1, sj->when);
    if (rc == SQLITE_OK)
        rc = bind_bytes(stmt, COL_DATA, sj->data, sj->data_len, false);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(stmt, COL_STATE + 1, sj->state);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_ATTEMPTS + 1, sj->attempts);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_FIRST_FAIL + 1, sj->first_fail);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_LAST_FAIL + 1, sj->last_fail);
    if (rc == SQLITE_OK)
        rc = bind_bytes(stmt, COL_RESULT, sj->result, sj->result_len, false);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_NUMERATOR + 1, sj->numerator);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_DENOMINATOR + 1, sj->denominator);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(stmt, COL_DEADLINE + 1, sj->deadline_ms);
    return rc;
}

/*
 * add: a plain INSERT, not INSERT OR REPLACE: an id already stored is a
 * server bug, and refusing the new job is safer than dropping the old.
 */
static int
sqlite_add(struct store *st, const struct store_job *sj, char *err)
{
    int rc;

    if (!batch_open(st))
        goto refuse;
    rc = bind_job(st->ins, sj);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st->ins);
    if (rc != SQLITE_DONE)
        batch_fail(st, "add job to", rc);
    sqlite3_reset(st->ins);
    sqlite3_clear_bindings(st->ins);
    if (rc == SQLITE_DONE && sj->batch_len > 0 && member_insert(st, sj) != 0)
        rc = SQLITE_ERROR;
    if (rc == SQLITE_DONE)
        return DSJOB_OK;
refuse:
    return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
}

/* update: rewrite the row of sj->id; an id that is not stored changes nothing. */
static int
sqlite_update(struct store *st, const struct store_job *sj, char *err)
{
    int rc;

    if (!batch_open(st))
        goto refuse;
    rc = bind_job(st->upd, sj);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st->upd);
    if (rc != SQLITE_DONE)
        batch_fail(st, "update job in", rc);
    sqlite3_reset(st->upd);
    sqlite3_clear_bindings(st->upd);
    /* An end (dead, kept) ends its membership too: the batch counted it in this commit. */
    if (rc == SQLITE_DONE && sj->state != STORE_LIVE && member_delete(st, sj->id) != 0)
        rc = SQLITE_ERROR;
    if (rc == SQLITE_DONE)
        return DSJOB_OK;
refuse:
    return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
}

/* set_func: one row per function with settings; all zero deletes it. */
static int
sqlite_set_func(struct store *st, const struct store_func *sf, char *err)
{
    bool forget = sf->retries == 0 && sf->backoff_base_ms == 0 && sf->backoff_max_ms == 0 &&
                  sf->max_age == 0 && sf->unique_for == 0;
    sqlite3_stmt *stmt = forget ? st->fdel : st->fset;
    int rc;

    if (!batch_open(st))
        goto refuse;
    rc = bind_bytes(stmt, 0, sf->name, sf->name_len, true);
    if (rc == SQLITE_OK && !forget)
        rc = sqlite3_bind_int64(stmt, 2, sf->retries);
    if (rc == SQLITE_OK && !forget)
        rc = sqlite3_bind_int64(stmt, 3, sf->backoff_base_ms);
    if (rc == SQLITE_OK && !forget)
        rc = sqlite3_bind_int64(stmt, 4, sf->backoff_max_ms);
    if (rc == SQLITE_OK && !forget)
        rc = sqlite3_bind_int64(stmt, 5, sf->max_age);
    if (rc == SQLITE_OK && !forget)
        rc = sqlite3_bind_int64(stmt, 6, sf->unique_for);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE)
        batch_fail(st, "set a function's settings in", rc);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    if (rc != SQLITE_DONE)
        goto refuse;
    /* Its flow settings, a row of their own: "" forgets them. */
    stmt = sf->flow_len == 0 ? st->wdel : st->wset;
    rc = bind_bytes(stmt, 0, sf->name, sf->name_len, true);
    if (rc == SQLITE_OK && sf->flow_len > 0)
        rc = sqlite3_bind_text(stmt, 2, sf->flow, (int)sf->flow_len, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE)
        batch_fail(st, "set a function's settings in", rc);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    if (rc == SQLITE_DONE)
        return DSJOB_OK;
refuse:
    return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
}

static int
sqlite_replay_funcs(struct store *st, store_func_fn *fn, void *arg, char *err)
{
    struct store_func sf;
    int rc;

    while ((rc = sqlite3_step(st->fsel)) == SQLITE_ROW) {
        memset(&sf, 0, sizeof(sf));
        sf.name = (const char *)sqlite3_column_text(st->fsel, 0);
        sf.name_len = (size_t)sqlite3_column_bytes(st->fsel, 0);
        sf.retries = (uint32_t)sqlite3_column_int64(st->fsel, 1);
        sf.backoff_base_ms = (uint32_t)sqlite3_column_int64(st->fsel, 2);
        sf.backoff_max_ms = (uint32_t)sqlite3_column_int64(st->fsel, 3);
        sf.flow = (const char *)sqlite3_column_text(st->fsel, 4);
        sf.flow_len = sf.flow != NULL ? (size_t)sqlite3_column_bytes(st->fsel, 4) : 0;
        sf.max_age = (uint32_t)sqlite3_column_int64(st->fsel, 5);
        sf.unique_for = (uint32_t)sqlite3_column_int64(st->fsel, 6);
        if (sf.name == NULL)
            sf.name = "";
        if (fn(&sf, arg) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    if (rc != SQLITE_DONE)
        store_say(err, DSJOB_ERR_STORE, "cannot read store '%s': %s", st->path,
                  db_error(st->db, rc));
    sqlite3_reset(st->fsel);
    return rc == SQLITE_DONE ? DSJOB_OK : DSJOB_ERR_STORE;
}

/*
 * Schedules (schedule.c) live in a table of their own, made by the first
 * schedule op: an addition beside the schema, not a version of it, so a
 * dsjobd without schedules opens the file as before and ignores the table.
 */
#define SCHED_TABLE                                                                                \
    "CREATE TABLE IF NOT EXISTS schedules ("                                                       \
    " name TEXT PRIMARY KEY,"                                                                      \
    " cron TEXT NOT NULL,"                                                                         \
    " tz TEXT NOT NULL,"                                                                           \
    " func TEXT NOT NULL,"                                                                         \
    " data BLOB NOT NULL,"                                                                         \
    " prio INTEGER NOT NULL,"                                                                      \
    " catch_up INTEGER NOT NULL,"                                                                  \
    " paused INTEGER NOT NULL,"                                                                    \
    " last_tick INTEGER NOT NULL DEFAULT 0)" /* epoch seconds of the last tick fired */

static const void *col_bytes(sqlite3_stmt *stmt, int col, size_t *len);

static const char *const sched_sql[] = {
    [STORE_SCHED_SET] = "INSERT INTO schedules (name, cron, tz, func, data, prio, catch_up, paused)"
                        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (name) DO UPDATE SET"
                        " cron = ?2, tz = ?3, func = ?4, data = ?5, prio = ?6, catch_up = ?7,"
                        " paused = ?8",
    [STORE_SCHED_DELETE] = "DELETE FROM schedules WHERE name = ?1",
    [STORE_SCHED_CLAIM] = "UPDATE schedules SET last_tick = ?9 WHERE name = ?1 AND last_tick < ?9",
};

/*
 * In the open batch: a table beside the schema made (ddl, IF NOT EXISTS),
 * then sql prepared; what names the table for batch_fail.
 */
static int
side_stmt(struct store *st, const char *ddl, const char *what, const char *sql, sqlite3_stmt **stmt)
{
    int rc;

    if (!batch_open(st))
        return SQLITE_ERROR;
    rc = db_exec(st->db, ddl);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, sql, -1, stmt, NULL);
    if (rc != SQLITE_OK)
        batch_fail(st, what, rc);
    return rc;
}

/* The schedules table, then a statement of sched_sql (or the SELECT) prepared. */
static int
sched_stmt(struct store *st, const char *sql, sqlite3_stmt **stmt)
{
    return side_stmt(st, SCHED_TABLE, "make the schedules table in", sql, stmt);
}

static int
sqlite_sched(struct store *st, int what, const struct store_sched *ss, bool *claimed, char *err)
{
    sqlite3_stmt *stmt = NULL;
    int rc;

    *claimed = false;
    if (what < STORE_SCHED_SET || what > STORE_SCHED_CLAIM)
        return store_say(err, DSJOB_ERR_ARG, "unknown schedule op %d", what);
    if (sched_stmt(st, sched_sql[what], &stmt) != SQLITE_OK)
        goto refuse;
    /* Unused numbers are not bound: each statement names those it takes. */
    rc = bind_bytes(stmt, 0, ss->name, ss->name_len, true);
    if (rc == SQLITE_OK && what == STORE_SCHED_SET) {
        rc = bind_bytes(stmt, 1, ss->cron, ss->cron_len, true);
        if (rc == SQLITE_OK)
            rc = bind_bytes(stmt, 2, ss->tz, ss->tz_len, true);
        if (rc == SQLITE_OK)
            rc = bind_bytes(stmt, 3, ss->func, ss->func_len, true);
        if (rc == SQLITE_OK)
            rc = bind_bytes(stmt, 4, ss->data, ss->data_len, false);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(stmt, 6, ss->prio);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(stmt, 7, ss->catch_up);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(stmt, 8, ss->paused);
    }
    if (rc == SQLITE_OK && what == STORE_SCHED_CLAIM)
        rc = sqlite3_bind_int64(stmt, 9, ss->last_tick);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE)
        batch_fail(st, "write a schedule in", rc);
    else
        *claimed = what == STORE_SCHED_CLAIM && sqlite3_changes(st->db) == 1;
    sqlite3_finalize(stmt);
    if (rc == SQLITE_DONE)
        return DSJOB_OK;
refuse:
    sqlite3_finalize(stmt);
    return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
}

/* The claim and the job's row in the open batch: both commit, or neither. */
static int
sqlite_sched_fire(struct store *st, const struct store_sched *ss, const struct store_job *sj,
                  bool *claimed, char *err)
{
    int rc = sqlite_sched(st, STORE_SCHED_CLAIM, ss, claimed, err);

    if (rc != DSJOB_OK || !*claimed)
        return rc;
    return sqlite_add(st, sj, err);
}

static int
sqlite_sched_list(struct store *st, store_sched_fn *fn, void *arg, char *err)
{
    sqlite3_stmt *stmt = NULL;
    long long made = 0;
    int rc;

    /* No table yet: no schedule was ever made here, and reading makes none. */
    rc = query_int(st->db,
                   "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND"
                   " name = 'schedules'",
                   &made);
    if (rc != SQLITE_OK)
        return store_say(err, DSJOB_ERR_STORE, "cannot read the schedules of '%s': %s", st->path,
                         db_error(st->db, rc));
    if (made == 0)
        return DSJOB_OK;
    if (sched_stmt(st,
                   "SELECT name, cron, tz, func, data, prio, catch_up, paused, last_tick"
                   " FROM schedules ORDER BY name",
                   &stmt) != SQLITE_OK)
        return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        struct store_sched ss;

        memset(&ss, 0, sizeof(ss));
        ss.name = col_bytes(stmt, 0, &ss.name_len);
        ss.cron = col_bytes(stmt, 1, &ss.cron_len);
        ss.tz = col_bytes(stmt, 2, &ss.tz_len);
        ss.func = col_bytes(stmt, 3, &ss.func_len);
        ss.data = col_bytes(stmt, 4, &ss.data_len);
        ss.prio = (int)sqlite3_column_int64(stmt, 5);
        ss.catch_up = sqlite3_column_int64(stmt, 6) != 0;
        ss.paused = sqlite3_column_int64(stmt, 7) != 0;
        ss.last_tick = sqlite3_column_int64(stmt, 8);
        if (fn(&ss, arg) != 0) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE)
        return store_say(err, DSJOB_ERR_STORE, "cannot read the schedules of '%s': %s", st->path,
                         db_error(st->db, rc));
    return DSJOB_OK;
}

/*
 * Dependency edges (deps.c) live in a table of their own, made by the
 * first dep op, beside the schema as the schedules are. An edge is
 * written in the batch of its child's add; its state moves in the batch
 * of its parent's end; it goes once its child runs or ends.
 */
#define DEPS_TABLE                                                                                 \
    "CREATE TABLE IF NOT EXISTS deps ("                                                            \
    " child TEXT NOT NULL,"                                                                        \
    " parent TEXT NOT NULL,"                                                                       \
    " policy INTEGER NOT NULL,"                                                                    \
    " state INTEGER NOT NULL DEFAULT 0,"                                                           \
    " PRIMARY KEY (child, parent));"                                                               \
    "CREATE INDEX IF NOT EXISTS deps_parent ON deps (parent)"

static const char *const dep_sql[] = {
    [STORE_DEP_ADD] = "INSERT OR REPLACE INTO deps (child, parent, policy, state)"
                      " VALUES (?1, ?2, ?3, ?4)",
    [STORE_DEP_ENDED] = "UPDATE deps SET state = ?4 WHERE parent = ?2 AND state = 0",
    [STORE_DEP_FORGET] = "DELETE FROM deps WHERE child = ?1",
};

/* The deps table and its index, then sql prepared. */
static int
dep_stmt(struct store *st, const char *sql, sqlite3_stmt **stmt)
{
    return side_stmt(st, DEPS_TABLE, "make the deps table in", sql, stmt);
}

static int
sqlite_dep(struct store *st, int what, const struct store_dep *sd, char *err)
{
    sqlite3_stmt *stmt = NULL;
    int rc;

    if (what < STORE_DEP_ADD || what > STORE_DEP_FORGET)
        return store_say(err, DSJOB_ERR_ARG, "unknown dependency op %d", what);
    if (dep_stmt(st, dep_sql[what], &stmt) != SQLITE_OK)
        goto refuse;
    rc = SQLITE_OK;
    if (what != STORE_DEP_ENDED)
        rc = bind_bytes(stmt, 0, sd->child, sd->child_len, true);
    if (rc == SQLITE_OK && what != STORE_DEP_FORGET)
        rc = bind_bytes(stmt, 1, sd->parent, sd->parent_len, true);
    if (rc == SQLITE_OK && what == STORE_DEP_ADD)
        rc = sqlite3_bind_int64(stmt, 3, sd->policy);
    if (rc == SQLITE_OK && what != STORE_DEP_FORGET)
        rc = sqlite3_bind_int64(stmt, 4, sd->state);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE)
        batch_fail(st, "write a dependency in", rc);
    sqlite3_finalize(stmt);
    if (rc == SQLITE_DONE)
        return DSJOB_OK;
refuse:
    sqlite3_finalize(stmt);
    return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
}

static int
sqlite_dep_list(struct store *st, store_dep_fn *fn, void *arg, char *err)
{
    sqlite3_stmt *stmt = NULL;
    long long made = 0;
    int rc;

    /* No table yet: no dependency was ever made here, and reading makes none. */
    rc = query_int(st->db,
                   "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND"
                   " name = 'deps'",
                   &made);
    if (rc == SQLITE_OK && made == 0)
        return DSJOB_OK;
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db,
                                "SELECT child, parent, policy, state FROM deps"
                                " ORDER BY child, parent",
                                -1, &stmt, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        struct store_dep sd;

        memset(&sd, 0, sizeof(sd));
        sd.child = col_bytes(stmt, 0, &sd.child_len);
        sd.parent = col_bytes(stmt, 1, &sd.parent_len);
        sd.policy = (int)sqlite3_column_int64(stmt, 2);
        sd.state = (int)sqlite3_column_int64(stmt, 3);
        rc = fn(&sd, arg) != 0 ? SQLITE_NOMEM : SQLITE_OK;
    }
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE)
        return store_say(err, DSJOB_ERR_STORE, "cannot read the dependencies of '%s': %s", st->path,
                         db_error(st->db, rc));
    return DSJOB_OK;
}

static int
remember_remove(struct store *st, uint64_t id)
{
    return store_ids_push(&st->removes, &st->nremoves, &st->removes_cap, id);
}

/*
 * remove: the id is remembered until a commit covers it, so DSJOB_OK even
 * when the batch has failed; that failure is flush's to report. Deleting
 * an id that is not stored deletes nothing, which is fine.
 */
static int
sqlite_remove(struct store *st, uint64_t id, char *err)
{
    if (remember_remove(st, id) != 0) {
        /* Not remembered: still delete in this batch, and say it may be lost. */
        if (batch_open(st))
            delete_id(st, id);
        return store_say(err, DSJOB_ERR_NOMEM,
                         "cannot remove job %llu from store '%s': out of memory",
                         (unsigned long long)id, st->path);
    }
    if (batch_open(st))
        delete_id(st, id);
    return DSJOB_OK;
}

/*
 * flush: commit the open batch. With no batch open it still commits the
 * removes a failed batch left pending, so they land even when no new job
 * arrives; otherwise there is nothing to do.
 */
static int
sqlite_flush(struct store *st, char *err)
{
    int rc;

    if (!st->failed && sqlite3_get_autocommit(st->db)) {
        if (st->nremoves == 0)
            return DSJOB_OK;
        batch_open(st);
    }
    if (!st->failed) {
        rc = db_step(st->commit);
        if (rc != SQLITE_OK)
            batch_fail(st, "commit to", rc);
    }
    if (st->failed)
        return batch_abandon(st, err);
    st->nremoves = 0;
    st->batches_new = false;
    return DSJOB_OK;
}

/* col_bytes gives a column's bytes, "" for empty ones (sqlite gives NULL for those). */
static const void *
col_bytes(sqlite3_stmt *stmt, int col, size_t *len)
{
    const void *p = sqlite3_column_blob(stmt, col);

    *len = (size_t)sqlite3_column_bytes(stmt, col);
    return p != NULL ? p : "";
}

static void
row_to_job(sqlite3_stmt *stmt, struct store_job *sj)
{
    memset(sj, 0, sizeof(*sj));
    sj->id = (uint64_t)sqlite3_column_int64(stmt, COL_ID);
    sj->seq = (uint64_t)sqlite3_column_int64(stmt, COL_SEQ);
    sj->handle = col_bytes(stmt, COL_HANDLE, &sj->handle_len);
    sj->func = col_bytes(stmt, COL_FUNC, &sj->func_len);
    sj->unique = col_bytes(stmt, COL_UNIQUE, &sj->unique_len);
    sj->unique_is_data = sqlite3_column_int(stmt, COL_UNIQUE_IS_DATA) != 0;
    sj->reducer = col_bytes(stmt, COL_REDUCER, &sj->reducer_len);
    sj->prio = sqlite3_column_int(stmt, COL_PRIO);
    sj->when = sqlite3_column_int64(stmt, COL_RUN_AT);
    sj->data = col_bytes(stmt, COL_DATA, &sj->data_len);
    sj->state = sqlite3_column_int(stmt, COL_STATE);
    sj->attempts = (uint32_t)sqlite3_column_int64(stmt, COL_ATTEMPTS);
    sj->first_fail = sqlite3_column_int64(stmt, COL_FIRST_FAIL);
    sj->last_fail = sqlite3_column_int64(stmt, COL_LAST_FAIL);
    sj->result = col_bytes(stmt, COL_RESULT, &sj->result_len);
    sj->numerator = (uint32_t)sqlite3_column_int64(stmt, COL_NUMERATOR);
    sj->denominator = (uint32_t)sqlite3_column_int64(stmt, COL_DENOMINATOR);
    sj->deadline_ms = sqlite3_column_int64(stmt, COL_DEADLINE);
}

/* replay: every stored job in seq order; fn stopping it early is not an error. */
static int
sqlite_replay(struct store *st, store_replay_fn *fn, void *arg, char *err)
{
    struct store_job sj;
    int rc;

    while ((rc = sqlite3_step(st->sel)) == SQLITE_ROW) {
        row_to_job(st->sel, &sj);
        if (fn(&sj, arg) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }
    if (rc != SQLITE_DONE)
        store_say(err, DSJOB_ERR_STORE, "cannot read store '%s': %s", st->path,
                  db_error(st->db, rc));
    sqlite3_reset(st->sel);
    return rc == SQLITE_DONE ? DSJOB_OK : DSJOB_ERR_STORE;
}

static void
sqlite_close(struct store *st)
{
    char err[STORE_ERRLEN];

    if (st == NULL)
        return;
    (void)sqlite_flush(st, err); /* best effort: nobody is left to tell */
    finalize_all(st);
    batch_stmts_free(st);
    sqlite3_close(st->db);
    if (st->lock_fd >= 0)
        close(st->lock_fd);
    free(st->removes);
    free(st->path);
    free(st);
}

/*
 * store_sqlite_test_limit_pages caps the database at pages pages (PRAGMA
 * max_page_count; sqlite will not go below the current size), so that a
 * test sees SQLITE_FULL as on a full disk. Returns the cap now in force,
 * or -1. For tests only.
 */
int
store_sqlite_test_limit_pages(struct store *st, long pages)
{
    char sql[64];
    long long now;

    snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %ld", pages);
    if (query_int(st->db, sql, &now) != SQLITE_OK)
        return -1;
    return now > INT_MAX ? INT_MAX : (int)now;
}

static int
refuse_commit(void *arg)
{
    (void)arg;
    return 1; /* non-zero turns the COMMIT into a ROLLBACK */
}

/*
 * store_sqlite_test_fail_commits makes every COMMIT fail (on) or work
 * again (off), through sqlite3_commit_hook, so that a test reaches the
 * path where the adds succeeded and the commit did not. For tests only.
 */
int
store_sqlite_test_fail_commits(struct store *st, bool on)
{
    sqlite3_commit_hook(st->db, on ? refuse_commit : NULL, NULL);
    return 0;
}

/*
 * Batches (batch.c) live in two tables of their own, made by the first
 * batch op or member, beside the schema as the schedules are: batches,
 * one row per batch with its counters, and batch_jobs, one row per member
 * job that has not ended, written in the same transaction as its job's
 * add and its job's end (remove, or the rewrite to dead or kept).
 */
#define BATCH_TABLES                                                                               \
    "CREATE TABLE IF NOT EXISTS batches ("                                                         \
    " id TEXT PRIMARY KEY,"                                                                        \
    " on_complete TEXT NOT NULL,"                                                                  \
    " on_success TEXT NOT NULL,"                                                                   \
    " failed BLOB NOT NULL," /* handles of failed members, each ended by a newline */              \
    " total INTEGER NOT NULL,"                                                                     \
    " done INTEGER NOT NULL,"                                                                      \
    " failed_n INTEGER NOT NULL,"                                                                  \
    " dead INTEGER NOT NULL,"                                                                      \
    " closed INTEGER NOT NULL,"                                                                    \
    " fired_complete INTEGER NOT NULL,"                                                            \
    " fired_success INTEGER NOT NULL,"                                                             \
    " created INTEGER NOT NULL);"                                                                  \
    "CREATE TABLE IF NOT EXISTS batch_jobs ("                                                      \
    " job_id INTEGER PRIMARY KEY,"                                                                 \
    " batch TEXT NOT NULL)" /* no index on batch: only a drop reads by it */

static void
batch_stmts_free(struct store *st)
{
    sqlite3_finalize(st->bset);
    sqlite3_finalize(st->bdel);
    sqlite3_finalize(st->bmdel);
    sqlite3_finalize(st->mins);
    sqlite3_finalize(st->mdel);
    st->bset = st->bdel = st->bmdel = st->mins = st->mdel = NULL;
}

/* The tables were made in a batch that rolled back: they are gone again. */
static void
batch_tables_unmake(struct store *st)
{
    batch_stmts_free(st);
    st->batches_made = st->batches_new = false;
}

static int
batch_stmts(struct store *st)
{
    int rc;

    rc = sqlite3_prepare_v2(st->db,
                            "INSERT OR REPLACE INTO batches (id, on_complete, on_success, failed,"
                            " total, done, failed_n, dead, closed, fired_complete, fired_success,"
                            " created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                            -1, &st->bset, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, "DELETE FROM batches WHERE id = ?", -1, &st->bdel, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, "DELETE FROM batch_jobs WHERE batch = ?", -1, &st->bmdel,
                                NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db,
                                "INSERT OR REPLACE INTO batch_jobs (job_id, batch) VALUES (?,?)",
                                -1, &st->mins, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(st->db, "DELETE FROM batch_jobs WHERE job_id = ?", -1, &st->mdel,
                                NULL);
    if (rc != SQLITE_OK)
        batch_stmts_free(st);
    return rc;
}

/* In the open batch: the batch tables made, their statements prepared. */
static int
batch_tables(struct store *st)
{
    int rc;

    if (st->batches_made)
        return SQLITE_OK;
    rc = db_exec(st->db, BATCH_TABLES);
    if (rc == SQLITE_OK)
        rc = batch_stmts(st);
    if (rc != SQLITE_OK) {
        batch_fail(st, "make the batch tables in", rc);
        return rc;
    }
    st->batches_made = st->batches_new = true;
    return SQLITE_OK;
}

/* Step stmt once (its binds done by the caller), then reset it; 0, or -1 (the batch failed). */
static int
step_once(struct store *st, sqlite3_stmt *stmt, int rc, const char *what)
{
    if (rc == SQLITE_OK)
        rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE)
        batch_fail(st, what, rc);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return rc == SQLITE_DONE ? 0 : -1;
}

static int
member_insert(struct store *st, const struct store_job *sj)
{
    int rc = batch_tables(st);

    if (rc != SQLITE_OK)
        return -1;
    rc = sqlite3_bind_int64(st->mins, 1, (sqlite3_int64)sj->id);
    if (rc == SQLITE_OK)
        rc = bind_bytes(st->mins, 1, sj->batch, sj->batch_len, true);
    return step_once(st, st->mins, rc, "add a batch member to");
}

static int
member_delete(struct store *st, uint64_t id)
{
    if (!st->batches_made)
        return 0;
    return step_once(st, st->mdel, sqlite3_bind_int64(st->mdel, 1, (sqlite3_int64)id),
                     "remove a batch member from");
}

static int
sqlite_batch(struct store *st, int what, const struct store_batch *sb, char *err)
{
    sqlite3_stmt *b;
    int rc;

    if (what != STORE_BATCH_SET && what != STORE_BATCH_DELETE)
        return store_say(err, DSJOB_ERR_ARG, "unknown batch op %d", what);
    if (!batch_open(st) || batch_tables(st) != SQLITE_OK)
        goto refuse;
    b = st->bset;
    if (what == STORE_BATCH_DELETE) {
        rc = bind_bytes(st->bdel, 0, sb->id, sb->id_len, true);
        if (step_once(st, st->bdel, rc, "delete a batch in") != 0)
            goto refuse;
        rc = bind_bytes(st->bmdel, 0, sb->id, sb->id_len, true);
        if (step_once(st, st->bmdel, rc, "delete a batch in") != 0)
            goto refuse;
        return DSJOB_OK;
    }
    rc = bind_bytes(b, 0, sb->id, sb->id_len, true);
    if (rc == SQLITE_OK)
        rc = bind_bytes(b, 1, sb->on_complete, sb->on_complete_len, true);
    if (rc == SQLITE_OK)
        rc = bind_bytes(b, 2, sb->on_success, sb->on_success_len, true);
    if (rc == SQLITE_OK)
        rc = bind_bytes(b, 3, sb->failed, sb->failed_len, false);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(b, 5, (sqlite3_int64)sb->total);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(b, 6, (sqlite3_int64)sb->done);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(b, 7, (sqlite3_int64)sb->failed_n);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(b, 8, (sqlite3_int64)sb->dead);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(b, 9, sb->closed);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(b, 10, sb->fired_complete);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(b, 11, sb->fired_success);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(b, 12, sb->created);
    if (step_once(st, b, rc, "write a batch in") == 0)
        return DSJOB_OK;
refuse:
    return store_say(err, DSJOB_ERR_STORE, "%s", st->failure);
}

static int
sqlite_batch_replay(struct store *st, store_batch_fn *fn, store_member_fn *mfn, void *arg,
                    char *err)
{
    sqlite3_stmt *stmt = NULL;
    long long made = 0;
    int rc;

    rc = query_int(st->db,
                   "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND"
                   " name = 'batch_jobs'",
                   &made);
    if (rc != SQLITE_OK)
        goto fail;
    if (made == 0)
        return DSJOB_OK; /* no batch was ever made here, and reading makes none */
    if (!st->batches_made) {
        rc = batch_stmts(st);
        if (rc != SQLITE_OK)
            goto fail;
        st->batches_made = true;
    }
    rc = sqlite3_prepare_v2(st->db,
                            "SELECT id, on_complete, on_success, failed, total, done, failed_n,"
                            " dead, closed, fired_complete, fired_success, created FROM batches"
                            " ORDER BY created, id",
                            -1, &stmt, NULL);
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        struct store_batch sb;

        if ((rc = sqlite3_step(stmt)) != SQLITE_ROW)
            break;

        memset(&sb, 0, sizeof(sb));
        sb.id = col_bytes(stmt, 0, &sb.id_len);
        sb.on_complete = col_bytes(stmt, 1, &sb.on_complete_len);
        sb.on_success = col_bytes(stmt, 2, &sb.on_success_len);
        sb.failed = col_bytes(stmt, 3, &sb.failed_len);
        sb.total = (uint64_t)sqlite3_column_int64(stmt, 4);
        sb.done = (uint64_t)sqlite3_column_int64(stmt, 5);
        sb.failed_n = (uint64_t)sqlite3_column_int64(stmt, 6);
        sb.dead = (uint64_t)sqlite3_column_int64(stmt, 7);
        sb.closed = sqlite3_column_int(stmt, 8) != 0;
        sb.fired_complete = sqlite3_column_int(stmt, 9) != 0;
        sb.fired_success = sqlite3_column_int(stmt, 10) != 0;
        sb.created = sqlite3_column_int64(stmt, 11);
        if (fn(&sb, arg) != 0) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(stmt);
    stmt = NULL;
    if (rc != SQLITE_DONE)
        goto fail;
    rc = sqlite3_prepare_v2(st->db, "SELECT batch, job_id FROM batch_jobs ORDER BY job_id", -1,
                            &stmt, NULL);
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        size_t len;
        const char *id;

        if ((rc = sqlite3_step(stmt)) != SQLITE_ROW)
            break;
        id = col_bytes(stmt, 0, &len);
        if (mfn(id, len, (uint64_t)sqlite3_column_int64(stmt, 1), arg) != 0) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(stmt);
    if (rc == SQLITE_DONE)
        return DSJOB_OK;
fail:
    return store_say(err, DSJOB_ERR_STORE, "cannot read the batches of '%s': %s", st->path,
                     db_error(st->db, rc));
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = sqlite_open,
    .add = sqlite_add,
    .remove = sqlite_remove,
    .flush = sqlite_flush,
    .replay = sqlite_replay,
    .close = sqlite_close,
    .update = sqlite_update,
    .set_func = sqlite_set_func,
    .replay_funcs = sqlite_replay_funcs,
    .sched = sqlite_sched,
    .sched_list = sqlite_sched_list,
    .sched_fire = sqlite_sched_fire,
    .dep = sqlite_dep,
    .dep_list = sqlite_dep_list,
    .batch = sqlite_batch,
    .batch_replay = sqlite_batch_replay,
};
