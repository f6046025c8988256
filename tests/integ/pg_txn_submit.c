/*
 * pg_txn_submit: an application's transactional enqueue, for
 * tests/integ/t_pg_txn.sh. In one transaction of its own it writes a row of
 * an application table (pg_txn_app, made if missing), calls
 * dsjob.submit(function, payload, uniq, priority) with the payload as a
 * binary bytea parameter, writes the handle back into its row, and then
 * commits or rolls back. It prints the handle dsjob.submit returned and
 * the id of the application's row, "HANDLE ROW-ID", whatever the ending.
 *
 * usage: pg_txn_submit CONNINFO commit|rollback FUNCTION PAYLOAD [UNIQ [PRIORITY]]
 * An empty UNIQ is NULL (no unique key). Exit 0 when every statement and
 * the ending succeeded, 1 with libpq's message on stderr otherwise, 2 on
 * usage.
 */
#include <libpq-fe.h>

#include <stdio.h>
#include <string.h>

static int
fail(PGconn *db, const char *what)
{
    fprintf(stderr, "pg_txn_submit: %s: %s", what, PQerrorMessage(db));
    PQfinish(db);
    return 1;
}

/* exec: one statement without parameters; 0 if it did what it should. */
static int
exec(PGconn *db, const char *sql, ExecStatusType want)
{
    PGresult *r = PQexec(db, sql);
    int ok = PQresultStatus(r) == want;
    PQclear(r);
    return ok ? 0 : -1;
}

int
main(int argc, char **argv)
{
    if (argc < 5 || argc > 7 ||
        (strcmp(argv[2], "commit") != 0 && strcmp(argv[2], "rollback") != 0)) {
        fprintf(
            stderr,
            "usage: pg_txn_submit CONNINFO commit|rollback FUNCTION PAYLOAD [UNIQ [PRIORITY]]\n");
        return 2;
    }
    const char *end = argv[2];
    const char *uniq = argc > 5 && argv[5][0] ? argv[5] : NULL;
    const char *prio = argc > 6 ? argv[6] : "normal";

    PGconn *db = PQconnectdb(argv[1]);
    if (PQstatus(db) != CONNECTION_OK)
        return fail(db, "connect");
    if (exec(db, "SET client_min_messages = warning", PGRES_COMMAND_OK) != 0 ||
        exec(db,
             "CREATE TABLE IF NOT EXISTS pg_txn_app (id serial PRIMARY KEY, note text NOT NULL, "
             "handle text)",
             PGRES_COMMAND_OK) != 0)
        return fail(db, "create the application's table");

    if (exec(db, "BEGIN", PGRES_COMMAND_OK) != 0)
        return fail(db, "BEGIN");

    /* The application's own write, before the job. */
    const char *note[1] = {argv[4]};
    PGresult *r = PQexecParams(db, "INSERT INTO pg_txn_app (note) VALUES ($1) RETURNING id", 1,
                               NULL, note, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        PQclear(r);
        return fail(db, "INSERT INTO pg_txn_app");
    }
    char row[32];
    snprintf(row, sizeof row, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);

    /* The job: the payload goes as binary, so any byte survives. */
    const char *vals[4] = {argv[3], argv[4], uniq, prio};
    int lens[4] = {0, (int)strlen(argv[4]), 0, 0};
    int fmts[4] = {0, 1, 0, 0};
    r = PQexecParams(db, "SELECT dsjob.submit($1::text, $2::bytea, $3::text, $4::text)", 4, NULL,
                     vals, lens, fmts, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQgetisnull(r, 0, 0)) {
        PQclear(r);
        return fail(db, "SELECT dsjob.submit");
    }
    char handle[256];
    snprintf(handle, sizeof handle, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);

    /* And another write of the application's, after it, naming the job. */
    const char *upd[2] = {handle, row};
    r = PQexecParams(db, "UPDATE pg_txn_app SET handle = $1 WHERE id = $2::int", 2, NULL, upd, NULL,
                     NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        PQclear(r);
        return fail(db, "UPDATE pg_txn_app");
    }
    PQclear(r);

    if (exec(db, strcmp(end, "commit") == 0 ? "COMMIT" : "ROLLBACK", PGRES_COMMAND_OK) != 0)
        return fail(db, end);
    printf("%s %s\n", handle, row);
    PQfinish(db);
    return 0;
}
