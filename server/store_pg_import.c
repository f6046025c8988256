/*
 * The postgres store's take-over of gearmand's libpq queue: a table that
 * gearmand's -q Postgres wrote (--libpq-table, "queue" by default) in the
 * database of --pg-dsn becomes jobs of schema dsjob when a server opens
 * the store, in one transaction under an advisory lock, so that of
 * servers starting together one takes it and the others find it gone.
 * gearmand keeps one row per queued background job: unique_key,
 * function_name, priority (0 high, 1 normal, 2 low), data and when_to_run
 * (epoch seconds, 0 for now). The table is renamed TABLE_dsjob_import,
 * never dropped. Kept apart from store_postgres.c, which calls it once,
 * after the schema is made.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include <dsjob/common.h>

#include "store.h"

#define IMPORT_LOCK 0x64736a69 /* "dsji": the advisory lock around the take-over */
#define GEARMAND_TABLE "queue" /* gearmand's default --libpq-table */

/* run executes sql with params, wanting status; on failure says what failed in err. */
static PGresult *
run(PGconn *db, const char *sql, int n, const char *const *params, ExecStatusType want,
    const char *what, char *err)
{
    PGresult *r = PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);

    if (PQresultStatus(r) != want) {
        const char *m = PQresultErrorMessage(r);
        size_t len = strcspn(m, "\n");

        store_say(err, DSJOB_ERR_STORE, "postgres: %s: %.*s", what, (int)len,
                  len ? m : PQerrorMessage(db));
        PQclear(r);
        return NULL;
    }
    return r;
}

int
pg_import_gearmand(struct pg_conn *db, const char *table, char *note, char *err)
{
    char lock[64];
    const char *params[1];
    char *quoted = NULL, *renamed = NULL, *sql = NULL;
    PGresult *r;
    size_t n;
    long long count;
    int rc = DSJOB_ERR_STORE;

    if (table == NULL || table[0] == '\0')
        table = GEARMAND_TABLE;
    /* Cheap and without a lock when there is nothing to take: the common case. */
    params[0] = table;
    r = run(db, "SELECT to_regclass(quote_ident($1)) IS NOT NULL", 1, params, PGRES_TUPLES_OK,
            "looking for gearmand's queue table", err);
    if (r == NULL)
        return DSJOB_ERR_STORE;
    n = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!n)
        return DSJOB_OK;
    if ((r = run(db, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "begin", err)) == NULL)
        return DSJOB_ERR_STORE;
    PQclear(r);
    snprintf(lock, sizeof(lock), "SELECT pg_advisory_xact_lock(%lld)", (long long)IMPORT_LOCK);
    if ((r = run(db, lock, 0, NULL, PGRES_TUPLES_OK, "locking gearmand's queue table", err)) ==
        NULL)
        goto rollback;
    PQclear(r);
    /* Another server may have taken it while this one waited for the lock. */
    r = run(db, "SELECT to_regclass(quote_ident($1)) IS NOT NULL", 1, params, PGRES_TUPLES_OK,
            "looking for gearmand's queue table", err);
    if (r == NULL)
        goto rollback;
    n = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!n) {
        rc = DSJOB_OK;
        goto rollback;
    }
    quoted = PQescapeIdentifier(db, table, strlen(table));
    n = strlen(table) + sizeof("_dsjob_import");
    renamed = malloc(n);
    if (quoted == NULL || renamed == NULL) {
        store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        goto rollback;
    }
    snprintf(renamed, n, "%s_dsjob_import", table);
    n = 2048 + 2 * strlen(quoted);
    sql = malloc(n);
    if (sql == NULL) {
        store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        goto rollback;
    }
    /*
     * Each row a job, in the table's physical order (gearmand's replay
     * reads it unordered, which is that): a handle of its own, as
     * dsjob.submit makes them, its number zero-padded so that no handle is
     * a prefix of another; a unique "-" coalesces on the payload (per
     * server), an empty one on nothing; a live job of the same function
     * and unique already here is the same job (ON CONFLICT DO NOTHING).
     */
    snprintf(sql, n,
             "WITH moved AS (INSERT INTO dsjob.jobs (handle, func, uniq, unique_is_data, data, "
             "prio, run_at) SELECT 'H:gearmand:' || lpad(nextval('dsjob.sql_handle')::text, 20, "
             "'0'), function_name, CASE WHEN unique_key IS NULL OR unique_key IN ('', '-') THEN "
             "NULL ELSE convert_to(unique_key, 'UTF8') END, coalesce(unique_key = '-', false), "
             "coalesce(data, ''), CASE WHEN priority IN (0, 1, 2) THEN priority ELSE 1 END, "
             "CASE WHEN when_to_run > 0 THEN to_timestamp(when_to_run) ELSE now() END FROM %s "
             "WHERE function_name IS NOT NULL AND function_name <> '' ORDER BY ctid "
             "ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM moved",
             quoted);
    if ((r = run(db, sql, 0, NULL, PGRES_TUPLES_OK, "taking gearmand's queue table in", err)) ==
        NULL)
        goto rollback;
    count = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    {
        char *to = PQescapeIdentifier(db, renamed, strlen(renamed));

        if (to == NULL) {
            store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
            goto rollback;
        }
        snprintf(sql, n, "ALTER TABLE %s RENAME TO %s", quoted, to);
        PQfreemem(to);
    }
    if ((r = run(db, sql, 0, NULL, PGRES_COMMAND_OK, "renaming gearmand's queue table", err)) ==
        NULL)
        goto rollback;
    PQclear(r);
    if ((r = run(db, "SELECT pg_notify('dsjob', '')", 0, NULL, PGRES_TUPLES_OK, "notify", err)) ==
        NULL)
        goto rollback;
    PQclear(r);
    if ((r = run(db, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "committing the take-over", err)) == NULL)
        goto out;
    PQclear(r);
    if (note != NULL)
        snprintf(note, STORE_ERRLEN,
                 "store postgres: took %lld jobs of gearmand's queue table %s in; the table is "
                 "now %s",
                 count, table, renamed);
    rc = DSJOB_OK;
    goto out;
rollback:
    PQclear(PQexec(db, "ROLLBACK"));
out:
    PQfreemem(quoted);
    free(renamed);
    free(sql);
    return rc;
}
