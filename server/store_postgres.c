/*
 * The "postgres" store: background jobs in one PostgreSQL table that
 * several dsjobd share. Unlike the other stores it is the queue, not a
 * copy of it: a server runs only the jobs it holds a lease on. A submit
 * is inserted with a lease of its server's if that server has a worker
 * for it (so it runs here without a round trip), else without one, and
 * every server that has a worker for it may take it. Each flush is one
 * transaction: the batch's adds in one multi-row INSERT, its removes in
 * one DELETE, its rewrites, its function settings, then the lease op
 * (take ready jobs with FOR UPDATE SKIP LOCKED, renew the leases held),
 * then one NOTIFY if anything was left for other servers. Removes and
 * rewrites apply only to rows this server still holds; the others are
 * reported lost (another server took the job when this one's lease ran
 * out). Unique keys coalesce across servers through a unique index over
 * the live jobs. A second connection, used only by the thread that calls
 * wait_notify, LISTENs for the NOTIFYs of other servers and dsjob.submit.
 */
#include "config.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include <dsjob/common.h>

/*
 * The schema, version SCHEMA_VERSION in dsjob.meta. A database without the
 * dsjob schema gets it (under an advisory lock, so servers starting
 * together make it once); a newer version is refused by name.
 *
 * To change it: bump SCHEMA_VERSION, change SCHEMA_SQL to the new shape,
 * and add a step in schema_make() from the previous version, ending with
 * the meta row set to the new number. Never reuse a number; a step must
 * make of the previous shape exactly what SCHEMA_SQL makes.
 */
#define SCHEMA_VERSION 2
#define SCHEMA_LOCK 0x64736a6f62 /* "dsjob": the advisory lock around creating the schema */
/*
 * A running server holds the session advisory lock (LIVE_LOCK, its start's
 * number) on its writer connection: whoever can take it knows that start
 * is over, and may take the dead set and kept results it left.
 */
#define LIVE_LOCK 0x64736a31 /* "dsj1" */
#define SCHEMA_SQL                                                                                 \
    "CREATE SCHEMA dsjob;"                                                                         \
    "CREATE TABLE dsjob.meta (key text PRIMARY KEY, value text NOT NULL);"                         \
    "CREATE SEQUENCE dsjob.boot;"       /* one number per server start: handles and owner */       \
    "CREATE SEQUENCE dsjob.sql_handle;" /* handles of dsjob.submit() */                            \
    "CREATE TABLE dsjob.jobs ("                                                                    \
    " id bigserial PRIMARY KEY," /* submission order across servers */                             \
    " handle text NOT NULL UNIQUE,"                                                                \
    " func text NOT NULL,"                                                                         \
    " uniq bytea," /* NULL: no unique key, or unique \"-\" (coalesced per server only) */          \
    " unique_is_data boolean NOT NULL DEFAULT false,"                                              \
    " reducer bytea NOT NULL DEFAULT '',"                                                          \
    " data bytea NOT NULL,"                                                                        \
    " prio smallint NOT NULL DEFAULT 1," /* 0 high, 1 normal, 2 low */                             \
    " run_at timestamptz NOT NULL DEFAULT now(),"                                                  \
    " state smallint NOT NULL DEFAULT 0," /* 0 live, 1 dead, 2-4 kept (enum store_state) */        \
    " attempts integer NOT NULL DEFAULT 0,"                                                        \
    " first_fail bigint NOT NULL DEFAULT 0,"                                                       \
    " last_fail bigint NOT NULL DEFAULT 0,"                                                        \
    " result bytea,"                                                                               \
    " numerator integer NOT NULL DEFAULT 0,"                                                       \
    " denominator integer NOT NULL DEFAULT 0,"                                                     \
    " owner text," /* the server holding its lease, or NULL */                                     \
    " lease_until timestamptz,"                                                                    \
    " submitted timestamptz NOT NULL DEFAULT now());"                                              \
    "CREATE UNIQUE INDEX jobs_live_unique ON dsjob.jobs (func, uniq)"                              \
    " WHERE state = 0 AND uniq IS NOT NULL;"                                                       \
    "CREATE INDEX jobs_ready ON dsjob.jobs (func, prio, run_at, id) WHERE state = 0;"              \
    "CREATE INDEX jobs_owner ON dsjob.jobs (owner) WHERE owner IS NOT NULL AND state = 0;"         \
    "CREATE INDEX jobs_ended_owner ON dsjob.jobs (owner) WHERE state <> 0;"                        \
    "CREATE TABLE dsjob.servers (owner text PRIMARY KEY, boot bigint NOT NULL,"                    \
    " started timestamptz NOT NULL DEFAULT now());" /* the starts that may still run */            \
    "CREATE TABLE dsjob.funcs (name text PRIMARY KEY, retries integer NOT NULL,"                   \
    " backoff_base_ms integer NOT NULL, backoff_max_ms integer NOT NULL);" SUBMIT_SQL              \
    "INSERT INTO dsjob.meta VALUES ('schema_version', '2');"

/*
 * Version 1 to 2: the starts that may still run (dsjob.servers, so that
 * a running server finds those that are over without reading the table
 * of jobs), and jobs_owner on live rows only (a renewal no longer reads
 * a server's dead set and kept results), with the ended rows by owner
 * beside it. Starts that own rows are listed, so their ended rows are
 * found when they are over.
 */
#define SCHEMA_STEP_1_2                                                                            \
    "DROP INDEX dsjob.jobs_owner;"                                                                 \
    "CREATE INDEX jobs_owner ON dsjob.jobs (owner) WHERE owner IS NOT NULL AND state = 0;"         \
    "CREATE INDEX jobs_ended_owner ON dsjob.jobs (owner) WHERE state <> 0;"                        \
    "CREATE TABLE dsjob.servers (owner text PRIMARY KEY, boot bigint NOT NULL,"                    \
    " started timestamptz NOT NULL DEFAULT now());"                                                \
    "INSERT INTO dsjob.servers (owner, boot)"                                                      \
    " SELECT DISTINCT owner, substring(owner FROM '\\.([0-9]+)$')::bigint FROM dsjob.jobs"         \
    " WHERE owner ~ '\\.[0-9]+$';"                                                                 \
    "UPDATE dsjob.meta SET value = '2' WHERE key = 'schema_version';"

/*
 * dsjob.submit: enqueue inside the caller's transaction. The job exists if
 * and only if that transaction commits; the NOTIFY is delivered at commit,
 * so a server takes it at once.
 */
#define SUBMIT_SQL                                                                                 \
    "CREATE FUNCTION dsjob.submit(function text, payload bytea, uniq text DEFAULT NULL,"           \
    " priority text DEFAULT 'normal', run_at timestamptz DEFAULT NULL) RETURNS text"               \
    " LANGUAGE plpgsql AS $$"                                                                      \
    "#variable_conflict use_column\n"                                                              \
    "DECLARE h text; p smallint; u bytea := convert_to(submit.uniq, 'UTF8');"                      \
    "BEGIN"                                                                                        \
    " p := CASE lower(submit.priority) WHEN 'high' THEN 0 WHEN 'normal' THEN 1"                    \
    "      WHEN 'low' THEN 2 ELSE NULL END;"                                                       \
    " IF p IS NULL THEN"                                                                           \
    "  RAISE EXCEPTION 'dsjob.submit: priority must be high, normal or low, not %',"               \
    "   submit.priority;"                                                                          \
    " END IF;"                                                                                     \
    " IF submit.function IS NULL OR submit.function = '' THEN"                                     \
    "  RAISE EXCEPTION 'dsjob.submit: function must not be empty';"                                \
    " END IF;"                                                                                     \
    " IF u = '' THEN u := NULL; END IF;"                                                           \
    " LOOP"                                                                                        \
    "  INSERT INTO dsjob.jobs (handle, func, uniq, data, prio, run_at)"                            \
    "   VALUES ('H:sql:' || nextval('dsjob.sql_handle'), submit.function, u,"                      \
    "           coalesce(submit.payload, ''), p, coalesce(submit.run_at, now()))"                  \
    "   ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING"                  \
    "   RETURNING handle INTO h;"                                                                  \
    "  IF h IS NOT NULL THEN"                                                                      \
    "   PERFORM pg_notify('dsjob', submit.function);"                                              \
    "   RETURN h;"                                                                                 \
    "  END IF;"                                                                                    \
    "  SELECT j.handle INTO h FROM dsjob.jobs j"                                                   \
    "   WHERE j.func = submit.function AND j.uniq = u AND j.state = 0;"                            \
    "  IF h IS NOT NULL THEN RETURN h; END IF;"                                                    \
    " END LOOP;"                                                                                   \
    "END $$;"

#define INSERT_COLUMNS                                                                             \
    "handle, func, uniq, unique_is_data, reducer, data, prio, run_at, owner, lease_until"
/*
 * The main statement's rows: a kind (1 added, 2 removed, 3 taken, 4 notified,
 * 5 given up), CLAIM_COLUMNS.
 */
#define NULL_REST                                                                                  \
    ", NULL::text, NULL::bytea, NULL::bool, NULL::bytea, NULL::bytea, NULL::int2, NULL::int8,"     \
    " NULL::int4, NULL::int8, NULL::int8, NULL::int8"
#define NULL_COLUMNS ", NULL::text" NULL_REST
#define CLAIM_COLUMNS                                                                              \
    "j.handle, j.func, j.uniq, j.unique_is_data, j.reducer, j.data, j.prio,"                       \
    " extract(epoch from j.run_at)::bigint, j.attempts, j.first_fail, j.last_fail, j.id"

/* A growing text buffer; oom is sticky, so a batch checks once. */
struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

/* An add waiting for the flush: where to say what it coalesced onto. */
struct pend_add {
    char *handle; /* owned copy */
    char *func;   /* owned copy */
    void *uniq;   /* owned copy, or NULL */
    size_t uniq_len;
    char *alias;   /* the server's, see struct store_job */
    size_t row_at; /* where its VALUES row starts in st->ins */
    size_t row_len;
    bool conflict; /* the INSERT coalesced it onto a live job */
};

/* A remove or rewrite waiting for the flush. */
struct pend_row {
    char *handle; /* owned copy */
    bool *lost;   /* the server's, or NULL (a remove kept from a failed batch) */
};

struct store {
    PGconn *db;      /* the writer's connection */
    PGconn *listen;  /* wait_notify's connection (its thread alone) */
    char *dsn;       /* owned copy */
    char *owner;     /* owned copy: this server's name in leases */
    uint64_t boot;   /* this start's number (dsjob.boot), once known */
    unsigned lease;  /* seconds */
    struct sbuf ins; /* the VALUES of the open batch's adds */
    struct pend_add *adds;
    size_t nadds, adds_cap;
    struct pend_row *rms; /* removes: this batch's, then those kept from failed ones */
    size_t nrms, rms_cap, nkept;
    struct sbuf upd; /* the open batch's rewrites and settings: statements, NUL-separated */
    struct pend_row *upds;
    size_t nupds, upds_cap, nfuncs;
    struct store_lease *ls; /* the open batch's lease op, or NULL */
    bool notify;            /* the batch leaves jobs for other servers: NOTIFY */
    bool due_wanted;        /* the lease op took fewer jobs than it asked for: read_due */
};

static void
sb_add(struct sbuf *b, const void *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *p;

        while (cap < b->len + n + 1)
            cap *= 2;
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void
sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void __attribute__((format(printf, 2, 3))) sb_printf(struct sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A text literal: 'it''s'. The server runs with standard_conforming_strings. */
static void
sb_lit(struct sbuf *b, const char *s, size_t n)
{
    size_t i, from = 0;

    sb_add(b, "'", 1);
    for (i = 0; i < n; i++) {
        if (s[i] == '\'') {
            sb_add(b, s + from, i + 1 - from);
            sb_add(b, "'", 1);
            from = i + 1;
        }
    }
    sb_add(b, s + from, n - from);
    sb_add(b, "'", 1);
}

/* A bytea literal: '\x6869'::bytea. */
static void
sb_bytea(struct sbuf *b, const void *data, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = data;
    size_t i;

    sb_add(b, "'\\x", 3);
    if (b->oom)
        return;
    for (i = 0; i < n; i++) {
        char two[2] = {hex[p[i] >> 4], hex[p[i] & 15]};

        sb_add(b, two, 2);
    }
    sb_add(b, "'::bytea", 8);
}

static void
sb_reset(struct sbuf *b)
{
    b->len = 0;
    b->oom = false;
    if (b->p != NULL)
        b->p[0] = '\0';
}

/* Whether s is valid UTF-8 without NULs: what a text column takes. */
static bool
utf8_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < n) {
        unsigned c = p[i], more, k;

        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            more = 1;
        else if (c >= 0xe0 && c <= 0xef)
            more = 2;
        else if (c >= 0xf0 && c <= 0xf4)
            more = 3;
        else
            return false;
        if (i + more >= n)
            return false;
        for (k = 1; k <= more; k++)
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
        /* No overlong forms, surrogates or code points past U+10FFFF. */
        if ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] >= 0xa0) ||
            (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] >= 0x90))
            return false;
        i += more + 1;
    }
    return true;
}

static char *
memdup0(const void *s, size_t n)
{
    char *p = malloc(n + 1);

    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Grow an array of elem-sized entries to hold one more. */
static int
grow(void **arr, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap)
        return 0;
    {
        size_t more = *cap ? *cap * 2 : 64;
        void *p = realloc(*arr, more * elem);

        if (p == NULL)
            return -1;
        *arr = p;
        *cap = more;
    }
    return 0;
}

/* The connection's last error, one line. */
static int
pg_say(char *err, int code, PGconn *db, const char *what)
{
    const char *m = db != NULL ? PQerrorMessage(db) : "no connection";
    size_t n = strcspn(m, "\n");

    return store_say(err, code, "postgres: %s: %.*s", what, (int)n, m);
}

/* Run sql; PGRES_COMMAND_OK or TUPLES_OK, else err. The result is cleared. */
static int
exec_ok(PGconn *db, const char *sql, const char *what, char *err)
{
    PGresult *r = PQexec(db, sql);
    ExecStatusType s = PQresultStatus(r);
    int rc = DSJOB_OK;

    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        const char *m = PQresultErrorMessage(r);
        size_t n = strcspn(m, "\n");

        rc = store_say(err, DSJOB_ERR_STORE, "postgres: %s: %.*s", what, (int)n,
                       n ? m : PQerrorMessage(db));
    }
    PQclear(r);
    return rc;
}

/*
 * Run the statement built in q, and free it: binary asks for binary rows.
 * DSJOB_OK with *out holding the result when its status is want; else
 * err says why (out of memory while q was built, or the server's error,
 * after what), and *out is NULL.
 */
static int
run(struct store *st, struct sbuf *q, bool binary, ExecStatusType want, const char *what,
    PGresult **out, char *err)
{
    PGresult *r;
    int rc;

    *out = NULL;
    if (q->oom) {
        free(q->p);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    r = binary ? PQexecParams(st->db, q->p, 0, NULL, NULL, NULL, NULL, 1) : PQexec(st->db, q->p);
    free(q->p);
    if (PQresultStatus(r) != want) {
        rc = pg_say(err, DSJOB_ERR_STORE, st->db, what);
        PQclear(r);
        return rc;
    }
    *out = r;
    return DSJOB_OK;
}

/*
 * libpq prints the server's notices and warnings (a shutdown's "terminating
 * connection") to stderr; the store reports what failed through err.
 */
static void
quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* The second key of a start's live lock (advisory locks take two int4 keys). */
static int
live_key(uint64_t boot)
{
    return (int)(boot % 2147483647u);
}

/*
 * Hold this start's live lock on the writer connection and list the start
 * in dsjob.servers (again, after a reconnect: a server that found the lock
 * free meanwhile took it off).
 */
static int
hold_live(struct store *st, char *err)
{
    struct sbuf q = {0};
    PGresult *r;
    int rc;

    sb_printf(&q,
              "SELECT pg_advisory_lock(%d, %d); INSERT INTO dsjob.servers (owner, boot)"
              " VALUES (",
              LIVE_LOCK, live_key(st->boot));
    sb_lit(&q, st->owner, strlen(st->owner));
    sb_printf(&q, ", %" PRIu64 ") ON CONFLICT (owner) DO NOTHING", st->boot);
    if ((rc = run(st, &q, false, PGRES_COMMAND_OK, "taking this start's live lock", &r, err)) !=
        DSJOB_OK)
        return rc;
    PQclear(r);
    return DSJOB_OK;
}

/* Connect (again) if the connection is not up, holding this start's live lock. */
static int
ensure_conn(struct store *st, char *err)
{
    if (st->db != NULL && PQstatus(st->db) == CONNECTION_OK)
        return DSJOB_OK;
    if (st->db != NULL)
        PQreset(st->db);
    else
        st->db = PQconnectdb(st->dsn);
    if (st->db == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    PQsetNoticeProcessor(st->db, quiet, NULL);
    if (PQstatus(st->db) != CONNECTION_OK)
        return pg_say(err, DSJOB_ERR_STORE, st->db, "cannot connect");
    if (st->boot == 0)
        return DSJOB_OK; /* pg_open takes it once the start has its number */
    if (hold_live(st, err) != DSJOB_OK) {
        PQfinish(st->db); /* connected without it is not connected: start again next time */
        st->db = NULL;
        return DSJOB_ERR_STORE;
    }
    return DSJOB_OK;
}

static int
schema_make(struct store *st, char *err)
{
    PGresult *r;
    char sql[128];
    int rc, version = 0;

    if ((rc = exec_ok(st->db, "BEGIN", "begin", err)) != DSJOB_OK)
        return rc;
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%lld)", (long long)SCHEMA_LOCK);
    if ((rc = exec_ok(st->db, sql, "locking the schema", err)) != DSJOB_OK)
        goto rollback;
    r = PQexec(st->db, "SELECT to_regclass('dsjob.meta') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        PQclear(r);
        rc = pg_say(err, DSJOB_ERR_STORE, st->db, "reading the schema");
        goto rollback;
    }
    if (PQgetvalue(r, 0, 0)[0] == 't') {
        PQclear(r);
        r = PQexec(st->db, "SELECT value FROM dsjob.meta WHERE key = 'schema_version'");
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            PQclear(r);
            rc = store_say(err, DSJOB_ERR_STORE,
                           "postgres: schema dsjob has no schema_version in dsjob.meta: not "
                           "made by dsjobd, refused");
            goto rollback;
        }
        version = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
        if (version > SCHEMA_VERSION) {
            rc = store_say(err, DSJOB_ERR_STORE,
                           "postgres: schema dsjob is version %d, newer than this dsjobd's %d: "
                           "refused (run a newer dsjobd)",
                           version, SCHEMA_VERSION);
            goto rollback;
        }
        /* Version N to N + 1, each in this transaction. */
        if (version < 2 &&
            (rc = exec_ok(st->db, SCHEMA_STEP_1_2, "upgrading schema dsjob from version 1 to 2",
                          err)) != DSJOB_OK)
            goto rollback;
    } else {
        PQclear(r);
        if ((rc = exec_ok(st->db, SCHEMA_SQL, "creating schema dsjob", err)) != DSJOB_OK)
            goto rollback;
    }
    return exec_ok(st->db, "COMMIT", "committing the schema", err);
rollback:
    PQclear(PQexec(st->db, "ROLLBACK"));
    return rc;
}

static void pg_close(struct store *st);
static int take_ended(struct store *st, struct store_job **out, size_t *n, void **mem, char *err);

static int
pg_open(struct store **out, const struct store_config *cfg, char *err)
{
    struct store *st;
    PGresult *r;
    int rc;

    if (cfg->dsn == NULL)
        return store_say(err, DSJOB_ERR_ARG, "store postgres needs --pg-dsn");
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    st->dsn = strdup(cfg->dsn);
    st->owner = strdup(cfg->owner != NULL ? cfg->owner : "dsjobd");
    st->lease = cfg->lease_secs ? cfg->lease_secs : 30;
    if (st->dsn == NULL || st->owner == NULL) {
        pg_close(st);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        goto fail;
    if (PQserverVersion(st->db) < 90500) {
        rc = store_say(err, DSJOB_ERR_STORE,
                       "postgres: server version %d is older than 9.5 (SKIP LOCKED)",
                       PQserverVersion(st->db));
        goto fail;
    }
    if ((rc = exec_ok(st->db, "SET standard_conforming_strings = on", "set", err)) != DSJOB_OK)
        goto fail;
    if ((rc = schema_make(st, err)) != DSJOB_OK)
        goto fail;
    if ((rc = pg_import_gearmand(st->db, cfg->import_table, cfg->note, err)) != DSJOB_OK)
        goto fail;
    r = PQexec(st->db, "SELECT nextval('dsjob.boot')");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        PQclear(r);
        rc = pg_say(err, DSJOB_ERR_STORE, st->db, "numbering this start");
        goto fail;
    }
    {
        /* The owner of this start's leases: the server's name and the number. */
        uint64_t boot = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
        size_t n = strlen(st->owner) + 24;
        char *owner = malloc(n);

        PQclear(r);
        if (owner == NULL) {
            rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
            goto fail;
        }
        snprintf(owner, n, "%s.%" PRIu64, st->owner, boot);
        free(st->owner);
        st->owner = owner;
        if (cfg->boot != NULL)
            *cfg->boot = boot;
        st->boot = boot;
    }
    if ((rc = hold_live(st, err)) != DSJOB_OK)
        goto fail;
    *out = st;
    return DSJOB_OK;
fail:
    pg_close(st);
    return rc;
}

static int
pg_add(struct store *st, const struct store_job *sj, char *err)
{
    struct pend_add *a;
    bool uniq = sj->unique_len > 0 && !sj->unique_is_data;

    if (!utf8_ok(sj->func, sj->func_len) || !utf8_ok(sj->handle, sj->handle_len))
        return store_say(err, DSJOB_ERR_ARG,
                         "postgres: a function name or handle must be UTF-8 text in this store");
    if (grow((void **)&st->adds, st->nadds, &st->adds_cap, sizeof(*st->adds)) < 0)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    a = &st->adds[st->nadds];
    memset(a, 0, sizeof(*a));
    a->handle = memdup0(sj->handle, sj->handle_len);
    a->func = memdup0(sj->func, sj->func_len);
    a->uniq = uniq ? memdup0(sj->unique, sj->unique_len) : NULL;
    a->uniq_len = uniq ? sj->unique_len : 0;
    a->alias = sj->alias;
    if (a->handle == NULL || a->func == NULL || (uniq && a->uniq == NULL)) {
        free(a->handle);
        free(a->func);
        free(a->uniq);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    if (a->alias != NULL)
        a->alias[0] = '\0';
    if (st->nadds > 0)
        sb_str(&st->ins, ",");
    a->row_at = st->ins.len;
    sb_str(&st->ins, "(");
    sb_lit(&st->ins, sj->handle, sj->handle_len);
    sb_str(&st->ins, ",");
    sb_lit(&st->ins, sj->func, sj->func_len);
    sb_str(&st->ins, ",");
    if (uniq)
        sb_bytea(&st->ins, sj->unique, sj->unique_len);
    else
        sb_str(&st->ins, "NULL");
    sb_str(&st->ins, sj->unique_is_data ? ",true," : ",false,");
    sb_bytea(&st->ins, sj->reducer, sj->reducer_len);
    sb_str(&st->ins, ",");
    sb_bytea(&st->ins, sj->data, sj->data_len);
    if (sj->when > 0)
        sb_printf(&st->ins, ",%d,to_timestamp(%" PRId64 "),", sj->prio, sj->when);
    else
        sb_printf(&st->ins, ",%d,now(),", sj->prio);
    if (sj->leased) {
        sb_lit(&st->ins, st->owner, strlen(st->owner));
        sb_printf(&st->ins, ",now() + interval '%u seconds')", st->lease);
    } else {
        sb_str(&st->ins, "NULL,NULL)");
        st->notify = true;
    }
    a->row_len = st->ins.len - a->row_at;
    st->nadds++;
    if (st->ins.oom)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    return DSJOB_OK;
}

static int
push_row(struct pend_row **arr, size_t *n, size_t *cap, const char *handle, size_t len, bool *lost)
{
    char *h;

    if (grow((void **)arr, *n, cap, sizeof(**arr)) < 0 || (h = memdup0(handle, len)) == NULL)
        return -1;
    (*arr)[*n].handle = h;
    (*arr)[*n].lost = lost;
    (*n)++;
    return 0;
}

static int
pg_remove_job(struct store *st, const struct store_job *sj, char *err)
{
    if (sj->lost != NULL)
        *sj->lost = false;
    if (push_row(&st->rms, &st->nrms, &st->rms_cap, sj->handle, sj->handle_len, sj->lost) < 0)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    return DSJOB_OK;
}

static int
pg_remove(struct store *st, uint64_t id, char *err)
{
    (void)st;
    (void)id;
    return store_say(err, DSJOB_ERR_ARG, "postgres: remove needs the job's handle");
}

static int
pg_update(struct store *st, const struct store_job *sj, char *err)
{
    size_t mark = st->upd.len;

    if (sj->lost != NULL)
        *sj->lost = false;
    sb_printf(&st->upd, "UPDATE dsjob.jobs SET prio = %d, state = %d, attempts = %" PRIu32,
              sj->prio, sj->state, sj->attempts);
    sb_printf(&st->upd, ", first_fail = %" PRId64 ", last_fail = %" PRId64, sj->first_fail,
              sj->last_fail);
    sb_printf(&st->upd, ", numerator = %" PRIu32 ", denominator = %" PRIu32, sj->numerator,
              sj->denominator);
    if (sj->when > 0)
        sb_printf(&st->upd, ", run_at = to_timestamp(%" PRId64 ")", sj->when);
    sb_str(&st->upd, ", result = ");
    if (sj->result_len > 0)
        sb_bytea(&st->upd, sj->result, sj->result_len);
    else
        sb_str(&st->upd, "NULL");
    sb_str(&st->upd, " WHERE handle = ");
    sb_lit(&st->upd, sj->handle, sj->handle_len);
    sb_str(&st->upd, " AND owner = ");
    sb_lit(&st->upd, st->owner, strlen(st->owner));
    sb_add(&st->upd, "", 1); /* the NUL between statements */
    if (st->upd.oom ||
        push_row(&st->upds, &st->nupds, &st->upds_cap, sj->handle, sj->handle_len, sj->lost) < 0) {
        st->upd.len = mark;
        st->upd.oom = false;
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    return DSJOB_OK;
}

static int
pg_set_func(struct store *st, const struct store_func *sf, char *err)
{
    size_t mark = st->upd.len;

    if (!utf8_ok(sf->name, sf->name_len))
        return store_say(err, DSJOB_ERR_ARG, "postgres: a function name must be UTF-8 text");
    if (sf->retries == 0 && sf->backoff_base_ms == 0 && sf->backoff_max_ms == 0) {
        sb_str(&st->upd, "DELETE FROM dsjob.funcs WHERE name = ");
        sb_lit(&st->upd, sf->name, sf->name_len);
    } else {
        sb_str(&st->upd, "INSERT INTO dsjob.funcs VALUES (");
        sb_lit(&st->upd, sf->name, sf->name_len);
        sb_printf(&st->upd, ", %" PRIu32 ", %" PRIu32 ", %" PRIu32 ")", sf->retries,
                  sf->backoff_base_ms, sf->backoff_max_ms);
        sb_str(&st->upd, " ON CONFLICT (name) DO UPDATE SET retries = excluded.retries,"
                         " backoff_base_ms = excluded.backoff_base_ms,"
                         " backoff_max_ms = excluded.backoff_max_ms");
    }
    sb_add(&st->upd, "", 1);
    if (st->upd.oom ||
        push_row(&st->upds, &st->nupds, &st->upds_cap, sf->name, sf->name_len, NULL) < 0) {
        st->upd.len = mark;
        st->upd.oom = false;
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    return DSJOB_OK;
}

static int
pg_lease(struct store *st, struct store_lease *ls, char *err)
{
    (void)err;
    ls->jobs = NULL;
    ls->njobs = 0;
    ls->held = NULL;
    ls->nheld = 0;
    ls->renewed = false;
    ls->mem = NULL;
    ls->nreleased = 0;
    ls->expiry_ms = -1;
    ls->due_ms = -1;
    ls->ended = NULL;
    ls->nended = 0;
    ls->ended_mem = NULL;
    st->ls = ls;
    if (ls->nrelease > 0)
        st->notify = true; /* a server with a worker free takes what is given up */
    return DSJOB_OK;
}

/*
 * The live job an add coalesced onto: its handle into alias. If that job
 * ended meanwhile, the add is inserted again (it may then coalesce onto a
 * newer one). Runs after the batch committed, in statements of its own.
 */
static int
find_alias(struct store *st, struct pend_add *a, const char *row, char *err)
{
    int tries, rc;

    for (tries = 0; tries < 3; tries++) {
        struct sbuf q = {0};
        PGresult *r;
        bool got = false;

        sb_str(&q, "SELECT handle FROM dsjob.jobs WHERE state = 0 AND func = ");
        sb_lit(&q, a->func, strlen(a->func));
        sb_str(&q, " AND uniq = ");
        sb_bytea(&q, a->uniq, a->uniq_len);
        if ((rc = run(st, &q, false, PGRES_TUPLES_OK, "finding a unique key's job", &r, err)) !=
            DSJOB_OK)
            return rc;
        if (PQntuples(r) == 1) {
            if (a->alias != NULL)
                snprintf(a->alias, STORE_HANDLE_MAX, "%s", PQgetvalue(r, 0, 0));
            got = true;
        }
        PQclear(r);
        if (got)
            return DSJOB_OK;
        /* Gone since the INSERT: insert this one again. */
        q = (struct sbuf){0};
        sb_str(&q, "INSERT INTO dsjob.jobs (" INSERT_COLUMNS ") VALUES ");
        sb_str(&q, row);
        sb_str(&q, " ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING");
        if ((rc = run(st, &q, false, PGRES_COMMAND_OK, "inserting a job again", &r, err)) !=
            DSJOB_OK)
            return rc;
        got = strcmp(PQcmdTuples(r), "1") == 0;
        PQclear(r);
        if (got)
            return DSJOB_OK;
    }
    return store_say(err, DSJOB_ERR_STORE, "postgres: job %s's unique key keeps changing hands",
                     a->handle);
}

static bool
found(char **v, size_t n, const char *h)
{
    return bsearch(&h, v, n, sizeof(*v), store_cmp_strs) != NULL;
}

static uint64_t
be64(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    uint64_t v = 0;
    int i;

    for (i = 0; i < 8; i++)
        v = v << 8 | u[i];
    return v;
}

static uint32_t
be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;

    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

/* A taken row (binary format, MAIN_COLUMNS) into sj, its bytes at *at. */
static void
take_row(PGresult *r, int row, struct store_job *sj, char **at)
{
#define BYTES(col, field)                                                                          \
    do {                                                                                           \
        size_t n_ = PQgetisnull(r, row, col) ? 0 : (size_t)PQgetlength(r, row, col);               \
        memcpy(*at, PQgetvalue(r, row, col), n_);                                                  \
        (*at)[n_] = '\0';                                                                          \
        sj->field = *at;                                                                           \
        sj->field##_len = n_;                                                                      \
        *at += n_ + 1;                                                                             \
    } while (0)
    memset(sj, 0, sizeof(*sj));
    BYTES(1, handle);
    BYTES(2, func);
    BYTES(3, unique);
    sj->unique_is_data = PQgetvalue(r, row, 4)[0] != 0;
    BYTES(5, reducer);
    BYTES(6, data);
#undef BYTES
    sj->prio = (int16_t)((unsigned char)PQgetvalue(r, row, 7)[0] << 8 |
                         (unsigned char)PQgetvalue(r, row, 7)[1]);
    sj->when = (int64_t)be64(PQgetvalue(r, row, 8));
    sj->attempts = be32(PQgetvalue(r, row, 9));
    sj->first_fail = (int64_t)be64(PQgetvalue(r, row, 10));
    sj->last_fail = (int64_t)be64(PQgetvalue(r, row, 11));
    sj->seq = be64(PQgetvalue(r, row, 12));
    sj->state = STORE_LIVE;
    sj->leased = true;
}

static int
cmp_claimed(const void *a, const void *b)
{
    const struct store_job *x = a, *y = b;

    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    if (x->when != y->when)
        return x->when < y->when ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Whether ls asks for jobs of any function this store can hold (UTF-8 names). */
static bool
lease_takes(const struct store_lease *ls)
{
    size_t i;

    for (i = 0; ls != NULL && i < ls->nfuncs; i++)
        if (utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            return true;
    return false;
}

/* Whether ls needs the main statement: jobs to take, or leases to give up. */
static bool
lease_reads(const struct store_lease *ls)
{
    return lease_takes(ls) || (ls != NULL && ls->nrelease > 0);
}

/* The functions ls asks for, with how many of each: "(VALUES (name, n), ...) AS f(name, n)". */
static void
funcs_values(struct sbuf *q, const struct store_lease *ls)
{
    const char *vsep = "";
    size_t i;

    sb_str(q, "(VALUES ");
    for (i = 0; i < ls->nfuncs; i++) {
        /* A name that is not UTF-8 has no rows here (its adds were refused). */
        if (!utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            continue;
        sb_str(q, vsep);
        vsep = ",";
        sb_str(q, "(");
        sb_lit(q, ls->funcs[i], strlen(ls->funcs[i]));
        sb_printf(q, ",%u)", ls->limits[i]);
    }
    sb_str(q, ") AS f(name, n)");
}

/* How many jobs ls asks for in all, of the functions this store can hold. */
static uint64_t
lease_asked(const struct store_lease *ls)
{
    uint64_t n = 0;
    size_t i;

    for (i = 0; ls != NULL && i < ls->nfuncs; i++)
        if (utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            n += ls->limits[i];
    return n;
}

/*
 * After a take that fell short: when the first job of its functions that
 * waits for its run-at time is due, into ls->due_ms, for a timer. Such a
 * job is an epoch job, or the retry backoff of a server whose lease ran
 * out (a live server's retries wait in its own queue). One index probe per
 * function and priority, in a statement of its own after the commit, so
 * that a take that got all it asked for (a backlog: its workers ask again
 * as they finish) costs nothing more. A failure leaves due_ms at -1: the
 * poll finds the job.
 */
static void
read_due(struct store *st, struct store_lease *ls)
{
    struct sbuf q = {0};
    PGresult *r;

    sb_str(&q, "SELECT ceil(extract(epoch FROM min(d.run_at) - now()) * 1000)::int8 FROM ");
    funcs_values(&q, ls);
    sb_str(&q, " CROSS JOIN (VALUES (0::int2), (1::int2), (2::int2)) AS p(prio),"
               " LATERAL (SELECT run_at FROM dsjob.jobs WHERE state = 0 AND func = f.name"
               " AND prio = p.prio AND run_at > now() AND (owner IS NULL OR lease_until < now())"
               " ORDER BY run_at LIMIT 1) d");
    if (q.oom) {
        free(q.p);
        return;
    }
    r = PQexec(st->db, q.p);
    free(q.p);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        ls->due_ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
}

/*
 * The batch's one statement: its adds (INSERT), removes (DELETE), the jobs
 * its lease op takes (UPDATE ... FOR UPDATE SKIP LOCKED) or gives up (rows
 * under this server's lease that its queue lacks) and its NOTIFY, as
 * data-modifying CTEs whose RETURNING rows come back tagged (1 added, 2
 * removed, 3 taken, 5 given up). No two of them touch one row: the
 * INSERT's rows are new, the DELETE's are this server's and in its queue,
 * those given up are this server's and not in its queue, and the take
 * skips this server's (its own expired leases are renewed, not taken).
 * Returns the SQL in q.
 */
static void
main_sql(struct store *st, struct sbuf *q)
{
    struct store_lease *ls = st->ls;
    const char *sep = "";
    bool take = lease_takes(ls), release = ls != NULL && ls->nrelease > 0;
    size_t i;

    sb_str(q, "WITH ");
    if (st->nadds > 0) {
        sb_str(q, "ins AS (INSERT INTO dsjob.jobs (" INSERT_COLUMNS ") VALUES ");
        sb_add(q, st->ins.p, st->ins.len);
        sb_str(q, " ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING"
                  " RETURNING handle)");
        sep = ", ";
    }
    if (st->nrms > 0) {
        sb_str(q, sep);
        sb_str(q, "del AS (DELETE FROM dsjob.jobs WHERE owner = ");
        sb_lit(q, st->owner, strlen(st->owner));
        sb_str(q, " AND handle IN (");
        for (i = 0; i < st->nrms; i++) {
            if (i > 0)
                sb_str(q, ",");
            sb_lit(q, st->rms[i].handle, strlen(st->rms[i].handle));
        }
        sb_str(q, ") RETURNING handle)");
        sep = ", ";
    }
    if (take) {
        sb_str(q, sep);
        sb_str(q, "cl AS (UPDATE dsjob.jobs j SET owner = ");
        sb_lit(q, st->owner, strlen(st->owner));
        sb_printf(q, ", lease_until = now() + interval '%u seconds'", st->lease);
        sb_str(q, " FROM (SELECT c.id FROM ");
        funcs_values(q, ls);
        sb_str(q, ", LATERAL (SELECT id FROM dsjob.jobs WHERE state = 0"
                  " AND func = f.name AND run_at <= now()"
                  " AND (owner IS NULL OR (lease_until < now() AND owner <> ");
        sb_lit(q, st->owner, strlen(st->owner));
        sb_str(q, ")) ORDER BY prio, run_at, id LIMIT f.n FOR UPDATE SKIP LOCKED) c) s"
                  " WHERE j.id = s.id RETURNING " CLAIM_COLUMNS ")");
        sep = ", ";
    }
    if (release) {
        /* Rows under this server's lease that it lost track of: for any server to take. */
        sb_str(q, sep);
        sb_str(q, "rel AS (UPDATE dsjob.jobs SET owner = NULL, lease_until = NULL"
                  " WHERE state = 0 AND owner = ");
        sb_lit(q, st->owner, strlen(st->owner));
        sb_str(q, " AND handle IN (");
        for (i = 0; i < ls->nrelease; i++) {
            if (i > 0)
                sb_str(q, ",");
            sb_lit(q, ls->release[i], strlen(ls->release[i]));
        }
        sb_str(q, ") RETURNING handle)");
        sep = ", ";
    }
    if (*sep == '\0')
        sb_str(q, "none AS (SELECT 1)");
    sb_str(q, " SELECT 0::int2" NULL_COLUMNS " WHERE false");
    if (st->nadds > 0)
        sb_str(q, " UNION ALL SELECT 1::int2, handle" NULL_REST " FROM ins");
    if (st->nrms > 0)
        sb_str(q, " UNION ALL SELECT 2::int2, handle" NULL_REST " FROM del");
    if (take)
        sb_str(q, " UNION ALL SELECT 3::int2, * FROM cl");
    if (release)
        sb_str(q, " UNION ALL SELECT 5::int2, handle" NULL_REST " FROM rel");
    if (st->notify)
        sb_str(q, " UNION ALL SELECT 4::int2" NULL_COLUMNS " FROM pg_notify('dsjob', '')");
}

/* Mark each row of rows[0..n) whose handle got (n_got, sorted) lacks as lost. */
static void
mark_lost(char **got, size_t n_got, struct pend_row *rows, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (rows[i].lost != NULL)
            *rows[i].lost = !found(got, n_got, rows[i].handle);
}

/*
 * A batch of adds alone (a submit burst): a plain INSERT ... RETURNING
 * handle, and its NOTIFY in the same query string (one implicit
 * transaction). Cheaper for PostgreSQL to parse and plan than the CTE.
 */
static int
flush_adds_only(struct store *st, char *err)
{
    struct sbuf q = {0};
    PGresult *r, *ins = NULL;
    char **added = NULL;
    size_t nadded = 0, i;
    int k, rc = DSJOB_OK;

    sb_str(&q, "INSERT INTO dsjob.jobs (" INSERT_COLUMNS ") VALUES ");
    sb_add(&q, st->ins.p, st->ins.len);
    sb_str(&q, " ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING"
               " RETURNING handle");
    if (st->notify)
        sb_str(&q, "; NOTIFY dsjob");
    if (q.oom || st->ins.oom) {
        free(q.p);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    if (!PQsendQuery(st->db, q.p)) {
        free(q.p);
        return pg_say(err, DSJOB_ERR_STORE, st->db, "writing the batch");
    }
    free(q.p);
    while ((r = PQgetResult(st->db)) != NULL) {
        ExecStatusType t = PQresultStatus(r);

        if (t != PGRES_TUPLES_OK && t != PGRES_COMMAND_OK && rc == DSJOB_OK)
            rc = pg_say(err, DSJOB_ERR_STORE, st->db, "writing the batch");
        if (t == PGRES_TUPLES_OK && ins == NULL)
            ins = r;
        else
            PQclear(r);
    }
    if (rc != DSJOB_OK || ins == NULL) {
        PQclear(ins);
        return rc != DSJOB_OK ? rc : store_say(err, DSJOB_ERR_STORE, "postgres: no rows back");
    }
    if ((size_t)PQntuples(ins) < st->nadds) {
        added = malloc(((size_t)PQntuples(ins) + 1) * sizeof(*added));
        if (added == NULL) {
            PQclear(ins);
            return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        }
        for (k = 0; k < PQntuples(ins); k++)
            added[nadded++] = PQgetvalue(ins, k, 0);
        qsort(added, nadded, sizeof(*added), store_cmp_strs);
        for (i = 0; i < st->nadds; i++)
            st->adds[i].conflict = !found(added, nadded, st->adds[i].handle);
        free(added);
    }
    PQclear(ins);
    return DSJOB_OK;
}

/* Run the batch's one statement and sort out what came back. */
static int
flush_main(struct store *st, char *err)
{
    struct store_lease *ls = st->ls;
    struct sbuf q = {0};
    PGresult *r;
    char **added = NULL, **removed = NULL, *at;
    size_t nadded = 0, nremoved = 0, ntaken = 0, bytes = 0, i;
    int k, n, rc = DSJOB_OK;

    if (st->nadds == 0 && st->nrms == 0 && !lease_reads(ls) && !st->notify)
        return DSJOB_OK;
    if (st->nadds > 0 && st->nrms == 0 && !lease_reads(ls))
        return flush_adds_only(st, err);
    main_sql(st, &q);
    q.oom = q.oom || st->ins.oom;
    if ((rc = run(st, &q, true, PGRES_TUPLES_OK, "writing the batch", &r, err)) != DSJOB_OK)
        return rc;
    n = PQntuples(r);
    added = malloc(((size_t)n + 1) * sizeof(*added));
    removed = malloc(((size_t)n + 1) * sizeof(*removed));
    if (added == NULL || removed == NULL) {
        rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        goto out;
    }
    for (k = 0; k < n; k++) {
        int kind = (unsigned char)PQgetvalue(r, k, 0)[1];

        if (kind == 1)
            added[nadded++] = PQgetvalue(r, k, 1);
        else if (kind == 2)
            removed[nremoved++] = PQgetvalue(r, k, 1);
        else if (kind == 5)
            ls->nreleased++;
        else if (kind == 3) {
            ntaken++;
            for (i = 1; i <= 6; i++)
                bytes += (size_t)PQgetlength(r, k, (int)i) + 1;
        }
    }
    qsort(added, nadded, sizeof(*added), store_cmp_strs);
    qsort(removed, nremoved, sizeof(*removed), store_cmp_strs);
    mark_lost(removed, nremoved, st->rms, st->nrms);
    st->due_wanted = lease_takes(ls) && ntaken < lease_asked(ls);
    if (ntaken > 0) {
        ls->jobs = calloc(ntaken, sizeof(*ls->jobs));
        ls->mem = malloc(bytes);
        if (ls->jobs == NULL || ls->mem == NULL) {
            /* Taken but not run here: they run when this server's leases run out. */
            rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
            goto out;
        }
        at = ls->mem;
        for (k = 0; k < n; k++)
            if ((unsigned char)PQgetvalue(r, k, 0)[1] == 3)
                take_row(r, k, &ls->jobs[ls->njobs++], &at);
        qsort(ls->jobs, ls->njobs, sizeof(*ls->jobs), cmp_claimed);
    }
    /* An add the INSERT did not return coalesced onto a live job: which (after the commit). */
    for (i = 0; i < st->nadds; i++)
        st->adds[i].conflict = nadded < st->nadds && !found(added, nadded, st->adds[i].handle);
out:
    free(added);
    free(removed);
    PQclear(r);
    return rc;
}

/* The batch's rewrites and function settings, one statement each (they are few). */
static int
flush_updates(struct store *st, char *err)
{
    const char *s = st->upd.p;
    size_t i;

    for (i = 0; i < st->nupds; i++) {
        PGresult *r = PQexec(st->db, s);
        ExecStatusType t = PQresultStatus(r);

        if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) {
            int rc = pg_say(err, DSJOB_ERR_STORE, st->db, "rewriting a job");

            PQclear(r);
            return rc;
        }
        if (st->upds[i].lost != NULL)
            *st->upds[i].lost = strcmp(PQcmdTuples(r), "0") == 0;
        PQclear(r);
        s += strlen(s) + 1;
    }
    return DSJOB_OK;
}

static int
flush_renew(struct store *st, struct store_lease *ls, char *err)
{
    struct sbuf q = {0};
    PGresult *r;
    size_t bytes = 0;
    int n, k, rc = DSJOB_OK;
    char *at;

    if (!ls->renew)
        return DSJOB_OK;
    sb_printf(&q,
              "UPDATE dsjob.jobs SET lease_until = now() + interval '%u seconds' WHERE owner = ",
              st->lease);
    sb_lit(&q, st->owner, strlen(st->owner));
    sb_str(&q, " AND state = 0 RETURNING handle");
    if ((rc = run(st, &q, false, PGRES_TUPLES_OK, "renewing leases", &r, err)) != DSJOB_OK)
        return rc;
    n = PQntuples(r);
    for (k = 0; k < n; k++)
        bytes += (size_t)PQgetlength(r, k, 0) + 1;
    ls->held = malloc(bytes + 1);
    if (ls->held == NULL) {
        PQclear(r);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    at = ls->held;
    for (k = 0; k < n; k++) {
        size_t len = (size_t)PQgetlength(r, k, 0);

        memcpy(at, PQgetvalue(r, k, 0), len + 1);
        at += len + 1;
    }
    ls->nheld = (size_t)n;
    PQclear(r);
    /*
     * When the first lease of another server runs out: the server takes
     * that job then, not at its next poll. Leased rows are few (the
     * partial index jobs_owner holds only them).
     */
    q = (struct sbuf){0};
    sb_str(&q, "SELECT coalesce(greatest(ceil(extract(epoch FROM min(lease_until) - now()) * 1000),"
               " 0)::bigint, -1) FROM dsjob.jobs WHERE state = 0 AND owner IS NOT NULL"
               " AND owner <> ");
    sb_lit(&q, st->owner, strlen(st->owner));
    if ((rc = run(st, &q, false, PGRES_TUPLES_OK, "reading lease expiries", &r, err)) != DSJOB_OK)
        return rc;
    if (PQntuples(r) == 1)
        ls->expiry_ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    if ((rc = take_ended(st, &ls->ended, &ls->nended, &ls->ended_mem, err)) != DSJOB_OK)
        return rc;
    ls->renewed = true;
    return DSJOB_OK;
}

/* Forget the open batch; removes go on to the next one unless done. */
static void
batch_reset(struct store *st, bool ok)
{
    size_t i, keep = 0;

    for (i = 0; i < st->nadds; i++) {
        free(st->adds[i].handle);
        free(st->adds[i].func);
        free(st->adds[i].uniq);
    }
    st->nadds = 0;
    sb_reset(&st->ins);
    for (i = 0; i < st->nrms; i++) {
        if (ok) {
            free(st->rms[i].handle);
            continue;
        }
        st->rms[keep].handle = st->rms[i].handle; /* owed: the next batch deletes it */
        st->rms[keep++].lost = NULL;
    }
    st->nrms = keep;
    for (i = 0; i < st->nupds; i++)
        free(st->upds[i].handle);
    st->nupds = 0;
    sb_reset(&st->upd);
    st->ls = NULL;
    st->notify = false;
    st->due_wanted = false;
}

/*
 * One statement for the batch when it can be (adds, removes, the lease's
 * take, the NOTIFY: flush_main, in autocommit); a transaction around it
 * when the batch also rewrites jobs, sets functions or renews leases.
 */
static bool
conn_lost(const struct store *st)
{
    return st->db == NULL || PQstatus(st->db) == CONNECTION_BAD;
}

/* Whether the open batch is submits alone (flush_main sends flush_adds_only's INSERT). */
static bool
adds_only(const struct store *st)
{
    return st->nadds > 0 && st->nrms == 0 && !lease_reads(st->ls);
}

/*
 * A batch of submits alone whose connection broke before its answer: it
 * may have committed or not. Connect again and look for its rows: if any
 * is there it committed (an add whose row is missing coalesced onto a live
 * job, as RETURNING would have said); if none is, it is sent again, which
 * is what it would have done had it committed with every add coalesced
 * (ON CONFLICT DO NOTHING). One case runs a job twice: a row another
 * server took, ran and deleted before this check (at least once).
 */
static int
recover_adds(struct store *st, char *err)
{
    struct sbuf q = {0};
    char **there = NULL;
    PGresult *r;
    size_t i;
    int k, n, rc;

    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        return rc;
    sb_str(&q, "SELECT handle FROM dsjob.jobs WHERE handle IN (");
    for (i = 0; i < st->nadds; i++) {
        if (i > 0)
            sb_str(&q, ",");
        sb_lit(&q, st->adds[i].handle, strlen(st->adds[i].handle));
    }
    sb_str(&q, ")");
    if ((rc = run(st, &q, false, PGRES_TUPLES_OK, "checking a batch after a lost connection", &r,
                  err)) != DSJOB_OK)
        return rc;
    n = PQntuples(r);
    if (n == 0) {
        PQclear(r);
        return flush_adds_only(st, err);
    }
    there = malloc((size_t)n * sizeof(*there));
    if (there == NULL) {
        PQclear(r);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    for (k = 0; k < n; k++)
        there[k] = PQgetvalue(r, k, 0);
    qsort(there, (size_t)n, sizeof(*there), store_cmp_strs);
    for (i = 0; i < st->nadds; i++)
        st->adds[i].conflict = !found(there, (size_t)n, st->adds[i].handle);
    free(there);
    PQclear(r);
    return DSJOB_OK;
}

static int
pg_flush(struct store *st, char *err)
{
    bool txn = st->nupds > 0 || (st->ls != NULL && st->ls->renew);
    size_t i;
    int rc;

    if (st->nadds == 0 && st->nrms == 0 && st->nupds == 0 && st->ls == NULL && !st->notify)
        return DSJOB_OK;
    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        goto fail;
    /* Nothing ran before BEGIN: a connection that died while idle is made again, once. */
    if (txn && (rc = exec_ok(st->db, "BEGIN", "begin", err)) != DSJOB_OK &&
        (!conn_lost(st) || (rc = ensure_conn(st, err)) != DSJOB_OK ||
         (rc = exec_ok(st->db, "BEGIN", "begin", err)) != DSJOB_OK))
        goto fail;
    /* The renew comes last, so that the leases it lists include this batch's adds and takes. */
    if (txn && (rc = flush_updates(st, err)) != DSJOB_OK)
        goto rollback;
    rc = flush_main(st, err);
    if (rc == DSJOB_ERR_STORE && !txn && adds_only(st) && conn_lost(st))
        rc = recover_adds(st, err);
    if (rc != DSJOB_OK ||
        (txn && st->ls != NULL && (rc = flush_renew(st, st->ls, err)) != DSJOB_OK))
        goto rollback;
    if (txn && (rc = exec_ok(st->db, "COMMIT", "commit", err)) != DSJOB_OK)
        goto fail;
    /* Committed. A take that fell short learns when the next waiting job is due. */
    if (st->due_wanted && st->ls != NULL)
        read_due(st, st->ls);
    /* Adds that coalesced learn onto which job. */
    for (i = 0; i < st->nadds; i++) {
        struct pend_add *a = &st->adds[i];
        char *row;

        if (!a->conflict)
            continue;
        row = memdup0(st->ins.p + a->row_at, a->row_len);
        rc = row != NULL ? find_alias(st, a, row, err)
                         : store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        free(row);
        if (rc != DSJOB_OK)
            break; /* the batch is refused; its other adds run anyway (at-least-once) */
    }
    batch_reset(st, rc == DSJOB_OK);
    return rc;
rollback:
    if (txn)
        PQclear(PQexec(st->db, "ROLLBACK"));
fail:
    if (st->ls != NULL)
        store_lease_free(st->ls);
    batch_reset(st, false);
    return rc;
}

/*
 * Take the dead jobs and kept results no running server holds: those with
 * no owner (a server gave them up as it stopped) and those of starts that
 * are over (their live lock is free: killed, or cut off from the
 * database). Those starts leave dsjob.servers. The rows come back in *out
 * with their bytes in *mem, in submission order.
 */
static int
take_ended(struct store *st, struct store_job **out, size_t *n, void **mem, char *err)
{
    struct sbuf q = {0};
    PGresult *r;
    size_t bytes = 0;
    char *at;
    int k, rc;

    *out = NULL;
    *mem = NULL;
    *n = 0;
    sb_str(&q, "WITH gone AS (DELETE FROM dsjob.servers s WHERE CASE WHEN s.owner <> ");
    sb_lit(&q, st->owner, strlen(st->owner));
    sb_printf(&q,
              " THEN pg_try_advisory_xact_lock(%d, (s.boot %% 2147483647)::int) ELSE false END"
              " RETURNING s.owner), t AS (UPDATE dsjob.jobs j SET owner = ",
              LIVE_LOCK);
    sb_lit(&q, st->owner, strlen(st->owner));
    sb_str(&q, ", lease_until = NULL WHERE j.state <> 0 AND (j.owner IS NULL OR j.owner IN"
               " (SELECT owner FROM gone)) RETURNING 0::int2, " CLAIM_COLUMNS ", j.state,"
               " j.result, j.numerator, j.denominator) SELECT * FROM t ORDER BY id");
    if ((rc = run(st, &q, true, PGRES_TUPLES_OK, "taking the dead set and kept results", &r,
                  err)) != DSJOB_OK)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return DSJOB_OK;
    }
    for (k = 0; k < PQntuples(r); k++)
        bytes += (size_t)PQgetlength(r, k, 1) + PQgetlength(r, k, 2) + PQgetlength(r, k, 3) +
                 PQgetlength(r, k, 5) + PQgetlength(r, k, 6) + PQgetlength(r, k, 14) + 6;
    *out = calloc((size_t)PQntuples(r), sizeof(**out));
    *mem = malloc(bytes);
    if (*out == NULL || *mem == NULL) {
        /* Taken, not shown: the next start takes them again once this one is over. */
        PQclear(r);
        free(*out);
        free(*mem);
        *out = NULL;
        *mem = NULL;
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    at = *mem;
    for (k = 0; k < PQntuples(r); k++) {
        struct store_job *sj = &(*out)[k];
        const char *v = PQgetvalue(r, k, 13);
        size_t len = (size_t)PQgetlength(r, k, 14);

        take_row(r, k, sj, &at);
        sj->id = sj->seq;
        sj->leased = false;
        sj->state = (int16_t)((unsigned char)v[0] << 8 | (unsigned char)v[1]);
        if (!PQgetisnull(r, k, 14)) {
            memcpy(at, PQgetvalue(r, k, 14), len);
            at[len] = '\0';
            sj->result = at;
            sj->result_len = len;
            at += len + 1;
        }
        sj->numerator = be32(PQgetvalue(r, k, 15));
        sj->denominator = be32(PQgetvalue(r, k, 16));
    }
    *n = (size_t)PQntuples(r);
    PQclear(r);
    return DSJOB_OK;
}

/*
 * Live jobs are taken by lease, never replayed. What is replayed is the
 * dead set and the kept results no running server holds (take_ended);
 * this server takes them, so that it shows them and may retry or drop
 * them. While it runs, each renewal takes those of starts found over.
 */
static int
pg_replay(struct store *st, store_replay_fn *fn, void *arg, char *err)
{
    struct store_job *jobs;
    void *mem;
    size_t n, i;
    int rc = take_ended(st, &jobs, &n, &mem, err);

    for (i = 0; i < n && rc == DSJOB_OK; i++)
        if (fn(&jobs[i], arg) != 0)
            rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: replay stopped at job %s",
                           jobs[i].handle);
    free(jobs);
    free(mem);
    return rc;
}

static int
pg_replay_funcs(struct store *st, store_func_fn *fn, void *arg, char *err)
{
    PGresult *r =
        PQexec(st->db, "SELECT name, retries, backoff_base_ms, backoff_max_ms FROM dsjob.funcs");
    int i, rc = DSJOB_OK;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = pg_say(err, DSJOB_ERR_STORE, st->db, "reading function settings");
        PQclear(r);
        return rc;
    }
    for (i = 0; i < PQntuples(r); i++) {
        struct store_func sf;

        sf.name = PQgetvalue(r, i, 0);
        sf.name_len = (size_t)PQgetlength(r, i, 0);
        sf.retries = (uint32_t)strtoul(PQgetvalue(r, i, 1), NULL, 10);
        sf.backoff_base_ms = (uint32_t)strtoul(PQgetvalue(r, i, 2), NULL, 10);
        sf.backoff_max_ms = (uint32_t)strtoul(PQgetvalue(r, i, 3), NULL, 10);
        if (fn(&sf, arg) != 0)
            break;
    }
    PQclear(r);
    return rc;
}

static int
pg_wait_notify(struct store *st, int stop_fd, char *err)
{
    struct pollfd pfd[2];
    PGnotify *n;

    if (st->listen == NULL || PQstatus(st->listen) != CONNECTION_OK) {
        if (st->listen != NULL)
            PQfinish(st->listen);
        st->listen = PQconnectdb(st->dsn);
        if (st->listen != NULL)
            PQsetNoticeProcessor(st->listen, quiet, NULL);
        if (st->listen == NULL || PQstatus(st->listen) != CONNECTION_OK) {
            pg_say(err, DSJOB_ERR_STORE, st->listen, "cannot connect to LISTEN");
            return -1;
        }
        if (exec_ok(st->listen, "LISTEN dsjob", "listen", err) != DSJOB_OK)
            return -1;
        return 1; /* jobs may have come while it was not listening */
    }
    for (;;) {
        bool told = false;

        pfd[0].fd = PQsocket(st->listen);
        pfd[0].events = POLLIN;
        pfd[1].fd = stop_fd;
        pfd[1].events = POLLIN;
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return store_say(err, -1, "postgres: poll: %s", strerror(errno));
        }
        if (pfd[1].revents != 0)
            return 0;
        if (PQconsumeInput(st->listen) == 0) {
            pg_say(err, DSJOB_ERR_STORE, st->listen, "LISTEN connection");
            PQfinish(st->listen);
            st->listen = NULL;
            return -1;
        }
        while ((n = PQnotifies(st->listen)) != NULL) {
            told = true;
            PQfreemem(n);
        }
        if (told)
            return 1;
    }
}

static void
pg_close(struct store *st)
{
    size_t i;

    if (st == NULL)
        return;
    if (st->db != NULL && PQstatus(st->db) == CONNECTION_OK) {
        char err[STORE_ERRLEN];
        struct sbuf q = {0};

        (void)pg_flush(st, err);
        /* Give back what this server holds, so that the others take it at once. */
        /* Its dead set and kept results too: the next server to start takes them. */
        sb_str(&q, "UPDATE dsjob.jobs SET owner = NULL, lease_until = NULL WHERE owner = ");
        sb_lit(&q, st->owner, strlen(st->owner));
        sb_str(&q, "; DELETE FROM dsjob.servers WHERE owner = ");
        sb_lit(&q, st->owner, strlen(st->owner));
        sb_str(&q, "; NOTIFY dsjob");
        if (!q.oom)
            PQclear(PQexec(st->db, q.p));
        free(q.p);
    }
    batch_reset(st, true);
    for (i = 0; i < st->nrms; i++)
        free(st->rms[i].handle);
    free(st->rms);
    free(st->adds);
    free(st->upds);
    free(st->ins.p);
    free(st->upd.p);
    if (st->db != NULL)
        PQfinish(st->db);
    if (st->listen != NULL)
        PQfinish(st->listen);
    free(st->dsn);
    free(st->owner);
    free(st);
}

const struct store_ops store_postgres_ops = {
    .version = STORE_OPS_VERSION,
    .name = "postgres",
    .open = pg_open,
    .add = pg_add,
    .remove = pg_remove,
    .flush = pg_flush,
    .replay = pg_replay,
    .close = pg_close,
    .update = pg_update,
    .set_func = pg_set_func,
    .replay_funcs = pg_replay_funcs,
    .remove_job = pg_remove_job,
    .lease = pg_lease,
    .wait_notify = pg_wait_notify,
};
