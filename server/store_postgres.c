/*
 * The "postgres" store: background jobs in one PostgreSQL table that
 * several dsjobd share. Unlike the other stores it is the queue, not a
 * copy of it: a server runs only the jobs it holds a lease on. A submit
 * is inserted with a lease of its server's if that server has a worker
 * for it (so it runs here without a round trip), else without one, and
 * every server that has a worker for it may take it. Each flush is one
 * transaction: the batch's adds in one INSERT from arrays, its removes in
 * one DELETE, its rewrites, its function settings, then the lease op
 * (take ready jobs with FOR UPDATE SKIP LOCKED, renew the leases held),
 * then one NOTIFY if anything was left for other servers. The batch's
 * ops apply in order (a remove of a row it adds cancels the add). Removes
 * and rewrites apply only to rows this server still holds; the others are
 * reported lost (another server took the job when this one's lease ran
 * out). Unique keys coalesce across servers through a unique index over
 * the live jobs. A second connection, used only by the thread that calls
 * wait_notify, LISTENs for the NOTIFYs of other servers and dsjob.submit.
 * Every value goes as a statement parameter, never in SQL text; every
 * wait for the database is bounded (keepalives, tried locks, pg_stop).
 */
#include "config.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <dsjob/common.h>

/* The statements, pg_sql_NAME from server/sql/NAME.sql (server/sql/embed.sh). */
#include "server/pg_sql.h"

/*
 * The schema, version SCHEMA_VERSION in dsjob.meta (server/sql/schema.sql,
 * which says how to change it). A database without the dsjob schema gets
 * it (under an advisory lock, so servers starting together make it once);
 * an older version is brought up step by step (schema_1_2.sql); a newer
 * one is refused by name.
 */
#define SCHEMA_VERSION 5
#define SCHEMA_LOCK 0x64736a6f62 /* "dsjob": the advisory lock around creating the schema */
/*
 * A running server holds the session advisory lock (LIVE_LOCK, its start's
 * number) on its writer connection: whoever can take it knows that start
 * is over, and may take the dead set and kept results it left.
 */
#define LIVE_LOCK 0x64736a31 /* "dsj1" */
/*
 * Bounds on waiting for PostgreSQL. The connection ones are libpq's
 * parameters, set unless the DSN sets them (conn_params); dsjobd(8) lists
 * them.
 */
#define PG_KEEPALIVE_IDLE 10     /* s idle before the first TCP keepalive probe */
#define PG_KEEPALIVE_INTERVAL 5  /* s between probes; 3 unanswered end the connection */
#define PG_CONNECT_TIMEOUT 10    /* s for a connection to be made */
#define PG_USER_TIMEOUT_MS 30000 /* ms data may stay unacknowledged (tcp_user_timeout) */
#define PG_LOCK_RETRY_MS 100     /* between tries of this start's live lock */
#define PG_STR_(x) #x
#define PG_STR(x) PG_STR_(x)

/*
 * What main.sql's rows are, by their first column. The numbers are
 * written in main.sql too.
 */
enum row_kind {
    ROW_ADDED = 1,    /* an add inserted: its handle */
    ROW_REMOVED = 2,  /* a remove deleted: its handle */
    ROW_TAKEN = 3,    /* a job the lease op took: its columns (take_row) */
    ROW_NOTIFIED = 4, /* the NOTIFY was sent */
    ROW_RELEASED = 5, /* a lease given up: its handle */
    ROW_COUNTED = 6,  /* a batch member's end, counted by dsjob.ended */
};

/*
 * A growing buffer of bytes: a parameter's value being built (an array).
 * oom is sticky, so the value is checked once.
 */
struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

/*
 * The values of one statement, sent apart from its text (PQexecParams):
 * the text (server/sql) names them $1, $2, ..., in the order they are
 * added here. Strings and bytes go in binary format
 * (their bytes as they are), numbers as decimal text, arrays in
 * PostgreSQL's binary array format. Nothing a client sent is ever part of
 * the SQL text.
 */
#define PARAMS_MAX 24
struct params {
    int n;                     /* values so far */
    const char *v[PARAMS_MAX]; /* each value, or NULL for SQL NULL */
    int len[PARAMS_MAX];       /* its bytes (binary format) */
    int fmt[PARAMS_MAX];       /* 1 binary, 0 text */
    Oid type[PARAMS_MAX];      /* its type */
    char *own[PARAMS_MAX];     /* what params_free frees */
    char num[PARAMS_MAX][24];  /* the text of numbers */
    bool oom;                  /* a value could not be added */
};

/* The type OIDs the statements use (pg_type.dat; fixed since PostgreSQL 7). */
#define OID_BOOL 16
#define OID_BYTEA 17
#define OID_INT8 20
#define OID_INT2 21
#define OID_INT4 23
#define OID_TEXT 25
#define OID_BOOL_ARRAY 1000
#define OID_BYTEA_ARRAY 1001
#define OID_INT2_ARRAY 1005
#define OID_INT4_ARRAY 1007
#define OID_TEXT_ARRAY 1009
#define OID_INT8_ARRAY 1016

/* A one-dimensional array in binary format, built element by element. */
struct arr {
    struct buf b; /* header (20 bytes, written by arr_end), then the elements */
    uint32_t n;   /* elements */
    Oid elem;     /* their type */
    bool hasnull; /* one is NULL */
};

/* The columns of the adds' INSERT (add.sql, main.sql), one array each, in this order. */
enum add_col {
    AC_HANDLE,
    AC_FUNC,
    AC_UNIQ,
    AC_UDATA,
    AC_REDUCER,
    AC_DATA,
    AC_PRIO,
    AC_WHEN,
    AC_LEASED,
    AC_N
};

/*
 * What PostgreSQL refuses in a row, checked at add so that the submitter
 * alone is told: a unique key and function name too long for a btree
 * index entry (jobs_live_unique is on both; an entry holds at most 2704
 * bytes with 8 kB pages, less its headers and alignment), and a time
 * past timestamptz's range (year 294276; to_timestamp refuses it).
 */
#define PG_KEY_MAX 2600
#define PG_EPOCH_MAX INT64_C(9224318015999)

/* An add waiting for the flush: its row, and where to say what became of it. */
struct pend_add {
    char *handle; /* owned copy; the other fields point into the same allocation */
    size_t handle_len;
    char *func;
    size_t func_len;
    void *uniq; /* NULL: no unique key in the row */
    size_t uniq_len;
    bool unique_is_data;
    void *reducer;
    size_t reducer_len;
    void *data;
    size_t data_len;
    int prio;
    int64_t when;
    int64_t deadline_ms; /* epoch ms it must start by (deadline_set.sql), or 0 */
    bool leased;
    char *batch;   /* the batch it joins (add.sql), in the same allocation, or NULL */
    char *alias;   /* the server's, see struct store_job */
    bool *lost;    /* the server's: set when this row alone was refused */
    char *why;     /* the server's (the add's err): why it was refused */
    bool conflict; /* the INSERT coalesced it onto a live job */
    bool gone;     /* removed in the same batch: never written */
};

/* A remove waiting for the flush. */
struct pend_row {
    char *handle; /* owned copy */
    bool *lost;   /* the server's, or NULL (a remove kept from a failed batch) */
    int outcome;  /* a job's end: its enum store_state, which a batch counts; 0 none */
};

/* A dependency edge waiting for the flush (deps_add.sql). */
struct pend_dep {
    char *child;  /* owned: the child's handle, then the parent's in the same allocation */
    char *parent; /* in child's allocation */
    int policy;   /* enum deps_policy */
};

/* A rewrite of a job, or a function's settings, waiting for the flush. */
struct pend_upd {
    char *handle; /* owned copy: the job's handle, or the function's name */
    bool *lost;   /* the server's, or NULL */
    bool func;    /* a function's settings (retries, base, max), not a job */
    bool after;   /* the job's add is in this batch: run after the INSERT */
    bool gone;    /* its add was removed in this batch: not run */
    int prio;     /* the job's fields, see struct store_job */
    int state;
    uint32_t attempts, numerator, denominator;
    int64_t first_fail, last_fail, when;
    int64_t deadline_ms; /* the job's, 0: none */
    void *result;        /* owned copy, or NULL */
    size_t result_len;
    uint32_t retries, backoff_base_ms, backoff_max_ms; /* a function's */
    char *flow; /* owned: a function's flow control settings ("": none), or NULL */
};

/*
 * How many jobs a lease op takes of a function: what the server asks for
 * (its idle workers and --pg-prefetch), or, when its workers ran through
 * the last lease's jobs faster, what they take in PG_TAKE_FLUSHES flushes
 * at that rate, so that a drain's workers find jobs in the queue rather
 * than each few of them waiting for a lease statement of their own. A
 * rate older than PG_TAKE_STALE_MS counts for nothing. Leased jobs of a
 * server that dies wait for its lease to run out: they are at most what
 * its workers would have run in those few flushes, and the lease op's
 * take_max (--pg-take-max).
 */
#define PG_TAKE_FLUSHES 4
#define PG_TAKE_STALE_MS 2000
#define PG_DEMAND_MAX 64 /* functions whose last take is kept */
/*
 * A batch of submits alone is inserted without ON CONFLICT (add_new.sql)
 * unless one of its adds has a unique key and, in the last
 * PG_ARBITER_BATCHES such batches, one coalesced onto a live job: then
 * with it (add.sql). A coalescing add seen by add_new.sql costs its batch
 * a failed statement before add.sql; a site whose submits coalesce often
 * stays on add.sql.
 */
#define PG_ARBITER_BATCHES 64

/* A function's last take: how many jobs, and when it committed. */
struct demand {
    char *func; /* owned copy, or NULL */
    uint32_t took;
    double at_ms; /* now_ms() */
};

/*
 * The statements every batch sends, prepared once a connection (named
 * dsjob_NAME): PostgreSQL parses and plans them once, not per batch.
 */
static const struct {
    const char *sql, *name;
} prep[] = {
    {pg_sql_add, "dsjob_add"}, {pg_sql_add_new, "dsjob_add_new"}, {pg_sql_main, "dsjob_main"}};
#define PREP_N (sizeof(prep) / sizeof(prep[0]))

struct store {
    PGconn *db;       /* the writer's connection */
    PGconn *listen;   /* wait_notify's connection (its thread alone) */
    char **kw, **val; /* the connection parameters (conn_params), NULL-terminated */
    char *owner;      /* owned copy: this server's name in leases */
    uint64_t boot;    /* this start's number (dsjob.boot), once known */
    unsigned lease;   /* seconds */
    unsigned grace;   /* ms the database has to answer once dsjobd stops (--pg-stop-grace-ms) */
    int pid;          /* the backend of the writer's last connection, or 0 */
    struct demand demand[PG_DEMAND_MAX]; /* the last takes, by function */
    unsigned *take;                      /* the open lease op's take of each function */
    unsigned *granted;                   /* tokens flow_before took of each function */
    unsigned *ktake;                     /* key_take's take of each function (main.sql's is 0) */
    size_t take_cap;                     /* entries take holds */
    double flush_ms;                     /* a flush's time, smoothed */
    unsigned arbiter_left;     /* batches of adds with unique keys still sent as add.sql */
    bool txn;                  /* this flush runs in a transaction, which a failed
                                  add_new.sql would abort: it goes behind a savepoint */
    bool join_in_add;          /* add.sql and add_new.sql join the adds to their batches
                                  (else flush_joins does, after the INSERT) */
    unsigned conn_gen;         /* connections made so far */
    unsigned prep_gen[PREP_N]; /* conn_gen when each of prep[] was prepared */
    struct pend_add *adds;
    size_t nadds, adds_cap;
    struct pend_row *rms; /* removes: this batch's, then those kept from failed ones */
    size_t nrms, rms_cap, nkept;
    struct pend_upd *upds; /* rewrites and settings, in the batch's order */
    size_t nupds, upds_cap;
    struct store_lease *ls;  /* the open batch's lease op, or NULL */
    bool notify;             /* the batch leaves jobs for other servers: NOTIFY */
    bool due_wanted;         /* the lease op took fewer jobs than it asked for: read_due */
    bool each;               /* this flush writes its adds one by one (a batch failed) */
    int wake[2];             /* pg_stop's wake-up for the writer's waits */
    _Atomic int64_t stop_ms; /* when pg_stop was called (CLOCK_MONOTONIC ms), or 0 */
    bool sched_made;         /* dsjob.schedules is known to exist */
    struct pend_dep *deps;   /* the batch's new edges, in order */
    size_t ndeps, deps_cap;

    /* A batch refused by a lock conflict goes again (pg_flush). */
    unsigned conflict_retries; /* --pg-conflict-retries */
    char sqlstate[6];          /* the SQLSTATE of the last statement that failed, or "" */
    /*
     * add_params' arrays (the columns, then the batches), kept from one
     * statement to the next: a burst's batches, hundreds of rows each,
     * then allocate nothing. A statement's values point into them until
     * it has run (one statement is built at a time).
     */
    struct buf add_bufs[AC_N + 1];
};

static void
buf_add(struct buf *b, const void *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *p;

        while (cap < b->len + n)
            cap *= 2;
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, s, n);
    b->len += n;
}

/*
 * Room for n more bytes: a value whose size is known before it is built
 * (add_params) grows once, not by a series of reallocs that each copy
 * what came before. A quarter more than asked, so that a kept buffer
 * (struct store's add_bufs) stops growing after a few batches of about
 * the same size; a new block, not realloc, which would copy all of the
 * old one when only its first len bytes are in use.
 */
static void
buf_reserve(struct buf *b, size_t n)
{
    size_t cap = b->len + n;
    char *p;

    if (b->oom || cap <= b->cap)
        return;
    cap += cap / 4;
    p = malloc(cap);
    if (p == NULL) {
        b->oom = true;
        return;
    }
    if (b->len > 0)
        memcpy(p, b->p, b->len);
    free(b->p);
    b->p = p;
    b->cap = cap;
}

static void
put_be32(struct buf *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};

    buf_add(b, x, 4);
}

static void
arr_init(struct arr *a, Oid elem)
{
    static const char header[20];

    memset(a, 0, sizeof(*a));
    a->elem = elem;
    buf_add(&a->b, header, sizeof(header));
}

static void
arr_put(struct arr *a, const void *v, size_t len)
{
    put_be32(&a->b, (uint32_t)len);
    buf_add(&a->b, v, len);
    a->n++;
}

static void
arr_null(struct arr *a)
{
    put_be32(&a->b, UINT32_MAX); /* -1 */
    a->hasnull = true;
    a->n++;
}

static void
arr_int(struct arr *a, int64_t v, size_t bytes)
{
    unsigned char x[8];
    size_t i;

    for (i = 0; i < bytes; i++)
        x[i] = (unsigned char)((uint64_t)v >> (8 * (bytes - 1 - i)));
    arr_put(a, x, bytes);
}

static void
arr_bool(struct arr *a, bool v)
{
    unsigned char x = v ? 1 : 0;

    arr_put(a, &x, 1);
}

/* arr_init, in keep's buffer (emptied) instead of a new one: par_arr_keep gives it back. */
static void
arr_init_in(struct arr *a, Oid elem, struct buf *keep)
{
    static const char header[20];

    memset(a, 0, sizeof(*a));
    a->elem = elem;
    a->b.p = keep->p;
    a->b.cap = keep->cap;
    keep->p = NULL;
    keep->cap = 0;
    buf_add(&a->b, header, sizeof(header));
}

/* Fill in the header: ndim, flags, element type, then the one dimension (n, from 1). */
static void
arr_end(struct arr *a)
{
    unsigned char *h = (unsigned char *)a->b.p;
    uint32_t words[5] = {a->n > 0, a->hasnull, a->elem, a->n, 1};
    int i;

    if (a->b.oom)
        return;
    for (i = 0; i < 5; i++) {
        h[4 * i] = (unsigned char)(words[i] >> 24);
        h[4 * i + 1] = (unsigned char)(words[i] >> 16);
        h[4 * i + 2] = (unsigned char)(words[i] >> 8);
        h[4 * i + 3] = (unsigned char)words[i];
    }
    if (a->n == 0)
        a->b.len = 12; /* an empty array has no dimension */
}

/* Add a value to p: the next $k. */
static void
par(struct params *p, Oid type, const void *v, size_t len, int fmt, char *own)
{
    int k = p->n;

    if (k >= PARAMS_MAX || len > INT32_MAX) {
        free(own);
        p->oom = true;
        return;
    }
    p->v[k] = v;
    p->len[k] = (int)len;
    p->fmt[k] = fmt;
    p->type[k] = type;
    p->own[k] = own;
    p->n++;
}

static void
par_text(struct params *p, const char *s, size_t len)
{
    par(p, OID_TEXT, len > 0 ? s : "", len, 1, NULL);
}

/* Bytes, or SQL NULL when v is NULL. */
static void
par_bytea(struct params *p, const void *v, size_t len)
{
    par(p, OID_BYTEA, v == NULL ? NULL : len > 0 ? v : "", len, 1, NULL);
}

/* A text that may be SQL NULL (s NULL). */
static void
par_text_or_null(struct params *p, const char *s)
{
    par(p, OID_TEXT, s, s != NULL ? strlen(s) : 0, 1, NULL);
}

static void
par_int(struct params *p, int64_t v)
{
    int k = p->n;

    if (k < PARAMS_MAX)
        snprintf(p->num[k], sizeof(p->num[k]), "%" PRId64, v);
    par(p, OID_INT8, k < PARAMS_MAX ? p->num[k] : NULL, 0, 0, NULL);
}

static void
par_bool(struct params *p, bool v)
{
    par(p, OID_BOOL, v ? "t" : "f", 0, 0, NULL);
}

/* An array: p takes its buffer. */
static void
par_arr(struct params *p, struct arr *a, Oid type)
{
    arr_end(a);
    if (a->b.oom) {
        free(a->b.p);
        p->oom = true;
        return;
    }
    par(p, type, a->b.p, a->b.len, 1, a->b.p);
    a->b.p = NULL;
}

/*
 * par_arr for an array made by arr_init_in: p points into it and keep has
 * it back, unless it grew past PG_ARR_KEEP bytes (a batch of large
 * payloads): then p owns it, as par_arr's, and frees it after the
 * statement.
 */
#define PG_ARR_KEEP (1024 * 1024)
static void
par_arr_keep(struct params *p, struct arr *a, Oid type, struct buf *keep)
{
    if (a->b.cap > PG_ARR_KEEP) {
        par_arr(p, a, type);
        return;
    }
    arr_end(a);
    keep->p = a->b.p;
    keep->cap = a->b.cap;
    keep->len = 0;
    if (a->b.oom) {
        p->oom = true;
        return;
    }
    par(p, type, a->b.p, a->b.len, 1, NULL);
}

static void
params_free(struct params *p)
{
    int i;

    for (i = 0; i < p->n; i++)
        free(p->own[i]);
    p->n = 0;
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
        if (n > 0)
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

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC in milliseconds, with their fraction. */
static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/*
 * Wait for fd (or, with fd < 0, for ms milliseconds alone). 1: ready; 0:
 * ms passed; -1: dsjobd is stopping and gave the database --pg-stop-grace-ms
 * since (pg_stop), or poll failed.
 */
static int
wait_io(struct store *st, int fd, short events, int ms)
{
    int64_t end = ms >= 0 ? mono_ms() + ms : -1;

    for (;;) {
        struct pollfd p[2] = {{fd, events, 0}, {st->wake[0], POLLIN, 0}};
        int64_t now = mono_ms(), stop = st->stop_ms, left = -1;
        int rc;

        if (stop > 0 && now >= stop + (int64_t)st->grace)
            return -1;
        if (end >= 0)
            left = end > now ? end - now : 0;
        if (stop > 0 && (left < 0 || left > stop + (int64_t)st->grace - now))
            left = stop + (int64_t)st->grace - now;
        /* Once stopping, the wake-up stays readable: poll fd alone. */
        rc = poll(p, stop > 0 ? 1 : 2, (int)left);
        if (rc < 0 && errno != EINTR)
            return -1;
        if (rc > 0 && p[0].revents != 0 && fd >= 0)
            return 1;
        if (end >= 0 && mono_ms() >= end)
            return 0;
    }
}

/* The connection's last error, one line. */
static int
pg_say(char *err, int code, PGconn *db, const char *what)
{
    const char *m = db != NULL ? PQerrorMessage(db) : "no connection";
    size_t n = strcspn(m, "\n");

    return store_say(err, code, "postgres: %s: %.*s", what, (int)n, m);
}

/*
 * Send sql (with p's values, if p) on the writer's connection and wait for
 * its results, bounded by pg_stop. The last result comes back (the first
 * that failed, if one did); NULL if the wait was given up (the
 * connection is then closed: it is mid-statement) or libpq is out of
 * memory. binary asks for binary rows. One of prep[] is prepared first
 * if this connection has not yet, and then run by name.
 */
static PGresult *wait_results(struct store *st);

static PGresult *
exec_wait(struct store *st, const char *sql, const struct params *p, bool binary)
{
    size_t k;
    int ok;

    if (st->db == NULL)
        return NULL;
    for (k = 0; p != NULL && k < PREP_N && prep[k].sql != sql; k++)
        ;
    if (p != NULL && k < PREP_N && st->prep_gen[k] != st->conn_gen) {
        PGresult *r;

        if (!PQsendPrepare(st->db, prep[k].name, sql, p->n, p->type))
            return NULL;
        r = wait_results(st);
        if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK)
            return r;
        PQclear(r);
        st->prep_gen[k] = st->conn_gen;
    }
    if (p != NULL && k < PREP_N)
        ok = PQsendQueryPrepared(st->db, prep[k].name, p->n, p->v, p->len, p->fmt, binary ? 1 : 0);
    else if (p != NULL || binary)
        ok = PQsendQueryParams(st->db, sql, p ? p->n : 0, p ? p->type : NULL, p ? p->v : NULL,
                               p ? p->len : NULL, p ? p->fmt : NULL, binary ? 1 : 0);
    else
        ok = PQsendQuery(st->db, sql);
    if (!ok)
        return NULL;
    return wait_results(st);
}

/* The results of what was sent: the last one, or the first that failed (exec_wait). */
static PGresult *
wait_results(struct store *st)
{
    PGresult *r, *keep = NULL;

    for (;;) {
        while (PQisBusy(st->db)) {
            if (wait_io(st, PQsocket(st->db), POLLIN, -1) < 0) {
                PQclear(keep);
                PQfinish(st->db);
                st->db = NULL;
                return NULL;
            }
            if (!PQconsumeInput(st->db))
                break;
        }
        r = PQgetResult(st->db);
        if (r == NULL)
            return keep;
        if (keep != NULL && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
            PQclear(r);
            continue;
        }
        PQclear(keep);
        keep = r;
    }
}

/* Why the last statement failed: its result's error, else the connection's. */
static int
res_say(char *err, int code, struct store *st, PGresult *r, const char *what)
{
    const char *m = r != NULL ? PQresultErrorMessage(r) : "";
    const char *state = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    size_t n = strcspn(m, "\n");

    snprintf(st->sqlstate, sizeof(st->sqlstate), "%s", state != NULL ? state : "");
    if (n > 0)
        return store_say(err, code, "postgres: %s: %.*s", what, (int)n, m);
    if (st->db == NULL && st->stop_ms > 0)
        return store_say(err, code,
                         "postgres: %s: dsjobd is stopping and the database did not "
                         "answer within %u ms (--pg-stop-grace-ms)",
                         what, st->grace);
    return pg_say(err, code, st->db, what);
}

/* Run sql on the writer's connection; PGRES_COMMAND_OK or TUPLES_OK, else err. */
static int
exec_ok(struct store *st, const char *sql, const char *what, char *err)
{
    PGresult *r = exec_wait(st, sql, NULL, false);
    ExecStatusType s = PQresultStatus(r);
    int rc = DSJOB_OK;

    if (r == NULL || (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK))
        rc = res_say(err, DSJOB_ERR_STORE, st, r, what);
    PQclear(r);
    return rc;
}

/*
 * Run the statement sql (server/sql) with p's values, then free them:
 * binary asks for binary rows. DSJOB_OK with *out holding the result when
 * its status is want; else err says why (out of memory while p was
 * built, or the server's error, after what), and *out is NULL.
 */
static int
run(struct store *st, const char *sql, struct params *p, bool binary, ExecStatusType want,
    const char *what, PGresult **out, char *err)
{
    PGresult *r;
    int rc;

    *out = NULL;
    if (p->oom) {
        params_free(p);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    r = exec_wait(st, sql, p, binary);
    params_free(p);
    if (r == NULL || PQresultStatus(r) != want) {
        rc = res_say(err, DSJOB_ERR_STORE, st, r, what);
        PQclear(r);
        return rc;
    }
    *out = r;
    return DSJOB_OK;
}

/* run for a statement whose rows are not read. */
static int
run_ok(struct store *st, const char *sql, struct params *p, const char *what, char *err)
{
    PGresult *r;
    int rc = run(st, sql, p, false, PGRES_COMMAND_OK, what, &r, err);

    PQclear(r);
    return rc;
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

/*
 * The connection parameters of both connections: the DSN as given, then
 * what every connection must have, so that a reconnect (PQreset, which
 * uses them again) has it too:
 * - standard_conforming_strings on (the server's default; the statements'
 *   own constants assume it) and client_encoding UTF8 (the text values
 *   sent are UTF-8), whatever the database's or role's defaults say;
 *   the DSN's or PGOPTIONS' options come first;
 * - unless the DSN sets them: TCP keepalives (a peer gone without a
 *   word is found in about PG_KEEPALIVE_IDLE + 3 * PG_KEEPALIVE_INTERVAL
 *   seconds), tcp_user_timeout (data unacknowledged that long fails the
 *   connection; libpq 12 and later), connect_timeout, and the
 *   application_name dsjobd.
 */
static int
conn_params(struct store *st, const char *dsn, char *err)
{
    static const char *const dflt[][2] = {
        {"keepalives", "1"},
        {"keepalives_idle", PG_STR(PG_KEEPALIVE_IDLE)},
        {"keepalives_interval", PG_STR(PG_KEEPALIVE_INTERVAL)},
        {"keepalives_count", "3"},
        {"connect_timeout", PG_STR(PG_CONNECT_TIMEOUT)},
        {"tcp_user_timeout", PG_STR(PG_USER_TIMEOUT_MS)},
    };
    PQconninfoOption *given, *o;
    char *msg = NULL;
    const char *options = getenv("PGOPTIONS");
    size_t n = 0, i;
    int rc = DSJOB_OK;

    given = PQconninfoParse(dsn, &msg);
    if (given == NULL) {
        size_t len = msg != NULL ? strcspn(msg, "\n") : 0;

        rc = store_say(err, DSJOB_ERR_ARG, "postgres: --pg-dsn: %.*s", (int)len,
                       msg != NULL ? msg : "out of memory");
        PQfreemem(msg);
        return rc;
    }
    st->kw = calloc(16, sizeof(*st->kw));
    st->val = calloc(16, sizeof(*st->val));
    if (st->kw == NULL || st->val == NULL)
        goto nomem;
#define SET(k, v)                                                                                  \
    do {                                                                                           \
        st->kw[n] = strdup(k);                                                                     \
        st->val[n] = (v);                                                                          \
        if (st->kw[n] == NULL || st->val[n] == NULL)                                               \
            goto nomem;                                                                            \
        n++;                                                                                       \
    } while (0)
    SET("dbname", strdup(dsn));
    for (o = given; o->keyword != NULL; o++)
        if (strcmp(o->keyword, "options") == 0 && o->val != NULL)
            options = o->val;
    {
        const char *mine = "-c standard_conforming_strings=on";
        size_t len = (options != NULL ? strlen(options) + 1 : 0) + strlen(mine) + 1;
        char *v = malloc(len);

        if (v != NULL)
            snprintf(v, len, "%s%s%s", options != NULL ? options : "", options != NULL ? " " : "",
                     mine);
        SET("options", v);
    }
    SET("client_encoding", strdup("UTF8"));
    SET("fallback_application_name", strdup("dsjobd"));
    for (i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++) {
        bool set = false;

        if (strcmp(dflt[i][0], "tcp_user_timeout") == 0 && PQlibVersion() < 120000)
            continue;
        for (o = given; o->keyword != NULL; o++)
            if (strcmp(o->keyword, dflt[i][0]) == 0 && o->val != NULL)
                set = true;
        if (!set)
            SET(dflt[i][0], strdup(dflt[i][1]));
    }
#undef SET
    PQconninfoFree(given);
    return DSJOB_OK;
nomem:
    PQconninfoFree(given);
    return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
}

/* The connection's connect_timeout in ms (the DSN's, else PG_CONNECT_TIMEOUT's). */
static int64_t
connect_ms(PGconn *db)
{
    PQconninfoOption *o, *all = PQconninfo(db);
    int64_t ms = PG_CONNECT_TIMEOUT * 1000;

    for (o = all; o != NULL && o->keyword != NULL; o++)
        if (strcmp(o->keyword, "connect_timeout") == 0 && o->val != NULL && atoi(o->val) > 0)
            ms = (int64_t)atoi(o->val) * 1000;
    PQconninfoFree(all);
    return ms;
}

/*
 * Connect the writer (again, with reset): without blocking, so that the
 * wait ends at connect_timeout and at pg_stop's bound. True once
 * connected.
 */
static bool
connect_db(struct store *st, bool reset)
{
    PostgresPollingStatusType s = PGRES_POLLING_WRITING;
    int64_t end;

    st->conn_gen++; /* nothing is prepared on it yet */
    if (reset ? !PQresetStart(st->db)
              : (st->db = PQconnectStartParams((const char *const *)st->kw,
                                               (const char *const *)st->val, 1)) == NULL)
        return false;
    if (PQstatus(st->db) == CONNECTION_BAD)
        return false;
    PQsetNoticeProcessor(st->db, quiet, NULL);
    end = mono_ms() + connect_ms(st->db);
    while (s != PGRES_POLLING_OK) {
        int64_t left = end - mono_ms();

        if (s == PGRES_POLLING_FAILED || left <= 0 ||
            wait_io(st, PQsocket(st->db), s == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                    (int)left) <= 0)
            return false;
        s = reset ? PQresetPoll(st->db) : PQconnectPoll(st->db);
    }
    return true;
}

static bool conn_lost(const struct store *st);
static void member_refused(struct pend_add *a);

/* The second key of a start's live lock (advisory locks take two int4 keys). */
static int
live_key(uint64_t boot)
{
    return (int)(boot % 2147483647u);
}

/*
 * Hold this start's live lock on the writer connection and list the start
 * in dsjob.servers (again, after a reconnect: a server that found the lock
 * free meanwhile took it off). The lock is tried, never waited for: after
 * a connection was lost while its backend lives on (a NAT or firewall
 * that forgot the flow, a proxy that cut only this side), that backend
 * still holds it, for as long as its TCP keepalives take. That backend is
 * this server's own old session, so it is ended (pg_terminate_backend, as
 * the same role may); the lock is tried every PG_LOCK_RETRY_MS for a
 * third of --pg-lease, and then the connection counts as failed, with
 * the backend that holds the lock named.
 */
static int
hold_live(struct store *st, char *err)
{
    int64_t end = mono_ms() + (int64_t)st->lease * 1000 / 3;
    bool ended = false;
    int holder = 0;

    for (;;) {
        struct params p = {0};
        PGresult *r;
        int rc;

        par_int(&p, LIVE_LOCK);
        par_int(&p, live_key(st->boot));
        if ((rc = run(st, pg_sql_live_lock, &p, false, PGRES_TUPLES_OK,
                      "taking this start's live lock", &r, err)) != DSJOB_OK)
            return rc;
        if (PQgetvalue(r, 0, 0)[0] == 't') {
            PQclear(r);
            break;
        }
        holder = atoi(PQgetvalue(r, 0, 1));
        PQclear(r);
        if (!ended && holder != 0 && holder == st->pid) {
            /* This server's own lost session: end it. */
            par_int(&p, holder);
            rc = run(st, pg_sql_end_backend, &p, false, PGRES_TUPLES_OK,
                     "ending this server's lost session", &r, err);
            if (rc != DSJOB_OK && conn_lost(st))
                return rc;
            PQclear(r);
            ended = true;
        }
        if (mono_ms() >= end)
            return store_say(err, DSJOB_ERR_STORE,
                             "postgres: this start's live lock is held by backend %d (%s) after "
                             "%u s of tries; not writing until it is free",
                             holder,
                             holder == st->pid ? "this server's lost connection, not ended"
                                               : "another session",
                             st->lease / 3);
        if (wait_io(st, -1, 0, PG_LOCK_RETRY_MS) < 0)
            return store_say(err, DSJOB_ERR_STORE,
                             "postgres: dsjobd is stopping: gave up taking this start's live lock");
    }
    {
        struct params p = {0};

        par_text(&p, st->owner, strlen(st->owner));
        par_int(&p, (int64_t)st->boot);
        return run_ok(st, pg_sql_list_start, &p, "listing this start", err);
    }
}

/* Connect (again) if the connection is not up, holding this start's live lock. */
static int
ensure_conn(struct store *st, char *err)
{
    if (st->db != NULL && PQstatus(st->db) == CONNECTION_OK)
        return DSJOB_OK;
    if (st->stop_ms > 0 && mono_ms() >= st->stop_ms + (int64_t)st->grace)
        return store_say(err, DSJOB_ERR_STORE,
                         "postgres: dsjobd is stopping: not connecting again");
    if (!connect_db(st, st->db != NULL)) {
        if (st->db == NULL)
            return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        if (PQstatus(st->db) != CONNECTION_BAD) {
            /* Given up waiting: the next try starts again. */
            PQfinish(st->db);
            st->db = NULL;
            return store_say(err, DSJOB_ERR_STORE,
                             "postgres: cannot connect: no answer within the connect timeout");
        }
        return pg_say(err, DSJOB_ERR_STORE, st->db, "cannot connect");
    }
    if (st->boot != 0 && hold_live(st, err) != DSJOB_OK) {
        if (st->db != NULL)
            PQfinish(st->db); /* connected without it is not connected: start again next time */
        st->db = NULL;
        return DSJOB_ERR_STORE;
    }
    /* pg_open takes the lock once the start has its number. */
    st->pid = PQbackendPID(st->db);
    return DSJOB_OK;
}

static int
schema_make(struct store *st, char *err)
{
    PGresult *r;
    char sql[128];
    int rc, version = 0;

    if ((rc = exec_ok(st, "BEGIN", "begin", err)) != DSJOB_OK)
        return rc;
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%lld)", (long long)SCHEMA_LOCK);
    if ((rc = exec_ok(st, sql, "locking the schema", err)) != DSJOB_OK)
        goto rollback;
    r = exec_wait(st, "SELECT to_regclass('dsjob.meta') IS NOT NULL", NULL, false);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = res_say(err, DSJOB_ERR_STORE, st, r, "reading the schema");
        PQclear(r);
        goto rollback;
    }
    if (PQgetvalue(r, 0, 0)[0] == 't') {
        PQclear(r);
        r = exec_wait(st, "SELECT value FROM dsjob.meta WHERE key = 'schema_version'", NULL, false);
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
            (rc = exec_ok(st, pg_sql_schema_1_2, "upgrading schema dsjob from version 1 to 2",
                          err)) != DSJOB_OK)
            goto rollback;
        if (version < 3 &&
            (rc = exec_ok(st, pg_sql_schema_2_3, "upgrading schema dsjob from version 2 to 3",
                          err)) != DSJOB_OK)
            goto rollback;
        if (version < 4 &&
            (rc = exec_ok(st, pg_sql_schema_3_4, "upgrading schema dsjob from version 3 to 4",
                          err)) != DSJOB_OK)
            goto rollback;
        if (version < 5 &&
            (rc = exec_ok(st, pg_sql_schema_4_5, "upgrading schema dsjob from version 4 to 5",
                          err)) != DSJOB_OK)
            goto rollback;
    } else {
        PQclear(r);
        if ((rc = exec_ok(st, pg_sql_schema, "creating schema dsjob", err)) != DSJOB_OK)
            goto rollback;
    }
    if ((rc = exec_ok(st, pg_sql_flow_table, "creating table dsjob.flow", err)) != DSJOB_OK ||
        (rc = exec_ok(st, pg_sql_flow_bucket_table, "creating table dsjob.flow_bucket", err)) !=
            DSJOB_OK ||
        (rc = exec_ok(st, pg_sql_flow_key_bucket_table, "creating table dsjob.flow_key_bucket",
                      err)) != DSJOB_OK)
        goto rollback;
    return exec_ok(st, "COMMIT", "committing the schema", err);
rollback:
    PQclear(exec_wait(st, "ROLLBACK", NULL, false));
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
    st->wake[0] = st->wake[1] = -1;
    st->owner = strdup(cfg->owner != NULL ? cfg->owner : "dsjobd");
    st->lease = cfg->lease_secs ? cfg->lease_secs : 30;
    st->grace = cfg->stop_grace_ms;
    st->conflict_retries = cfg->conflict_retries;
    if (st->owner == NULL) {
        pg_close(st);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    if (pipe2(st->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        rc = store_say(err, DSJOB_ERR_SYS, "postgres: pipe: %s", strerror(errno));
        goto fail;
    }
    if ((rc = conn_params(st, cfg->dsn, err)) != DSJOB_OK)
        goto fail;
    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        goto fail;
    if (PQserverVersion(st->db) < 90500) {
        rc = store_say(err, DSJOB_ERR_STORE,
                       "postgres: server version %d is older than 9.5 (SKIP LOCKED)",
                       PQserverVersion(st->db));
        goto fail;
    }
    if ((rc = schema_make(st, err)) != DSJOB_OK)
        goto fail;
    if ((rc = pg_import_gearmand(st->db, cfg->import_table, cfg->note, err)) != DSJOB_OK)
        goto fail;
    r = exec_wait(st, "SELECT nextval('dsjob.boot')", NULL, false);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = res_say(err, DSJOB_ERR_STORE, st, r, "numbering this start");
        PQclear(r);
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
    size_t len = sj->handle_len + sj->func_len + sj->unique_len + sj->reducer_len + sj->data_len +
                 sj->batch_len + 6;
    char *at;

    if (!utf8_ok(sj->func, sj->func_len) || !utf8_ok(sj->handle, sj->handle_len))
        return store_say(err, DSJOB_ERR_ARG,
                         "postgres: a function name or handle must be UTF-8 text in this store");
    if (sj->func_len + (uniq ? sj->unique_len : 0) > PG_KEY_MAX)
        return store_say(err, DSJOB_ERR_ARG,
                         "postgres: the function name and unique key are %zu bytes together, "
                         "more than the %d this store can index",
                         sj->func_len + (uniq ? sj->unique_len : 0), PG_KEY_MAX);
    if (sj->when > PG_EPOCH_MAX)
        return store_say(err, DSJOB_ERR_ARG,
                         "postgres: run time %" PRId64 " is past what PostgreSQL can store "
                         "(at most %" PRId64 ", in the year 294276)",
                         sj->when, PG_EPOCH_MAX);
    if (grow((void **)&st->adds, st->nadds, &st->adds_cap, sizeof(*st->adds)) < 0 ||
        (at = malloc(len)) == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    a = &st->adds[st->nadds++];
    memset(a, 0, sizeof(*a));
#define COPY(dst, src, n)                                                                          \
    do {                                                                                           \
        (dst) = at;                                                                                \
        if ((n) > 0)                                                                               \
            memcpy(at, (src), (n));                                                                \
        at[(n)] = '\0';                                                                            \
        at += (n) + 1;                                                                             \
    } while (0)
    COPY(a->handle, sj->handle, sj->handle_len);
    COPY(a->func, sj->func, sj->func_len);
    COPY(a->reducer, sj->reducer, sj->reducer_len);
    COPY(a->data, sj->data, sj->data_len);
    if (uniq)
        COPY(a->uniq, sj->unique, sj->unique_len);
    if (sj->batch_len > 0)
        COPY(a->batch, sj->batch, sj->batch_len);
#undef COPY
    a->handle_len = sj->handle_len;
    a->func_len = sj->func_len;
    a->uniq_len = uniq ? sj->unique_len : 0;
    a->unique_is_data = sj->unique_is_data;
    a->reducer_len = sj->reducer_len;
    a->data_len = sj->data_len;
    a->prio = sj->prio;
    a->when = sj->when;
    a->deadline_ms = sj->deadline_ms;
    a->leased = sj->leased;
    a->alias = sj->alias;
    a->lost = sj->lost;
    a->why = err;
    if (a->alias != NULL)
        a->alias[0] = '\0';
    if (a->lost != NULL)
        *a->lost = false;
    if (!sj->leased)
        st->notify = true;
    return DSJOB_OK;
}

/* The pending add of handle h in this batch, or NULL. */
static struct pend_add *
find_add(struct store *st, const char *h, size_t len)
{
    size_t i;

    for (i = st->nadds; i-- > 0;)
        if (!st->adds[i].gone && strlen(st->adds[i].handle) == len &&
            memcmp(st->adds[i].handle, h, len) == 0)
            return &st->adds[i];
    return NULL;
}

/*
 * The adds' columns for adds[from..to) (those not gone) into p, then the
 * owner, the lease and the batches they join ($1-$12 of add.sql and
 * main.sql): the batch's, or one row's. The batches' array is empty when
 * none joins one (the INSERT's unnest pads it with NULLs), so that plain
 * submits build no array for it. Returns how many rows they hold.
 */
static size_t
add_params(struct store *st, size_t from, size_t to, struct params *p)
{
    static const Oid elem[AC_N] = {OID_TEXT,  OID_TEXT, OID_BYTEA, OID_BOOL, OID_BYTEA,
                                   OID_BYTEA, OID_INT2, OID_INT8,  OID_BOOL};
    static const Oid type[AC_N] = {OID_TEXT_ARRAY, OID_TEXT_ARRAY,  OID_BYTEA_ARRAY,
                                   OID_BOOL_ARRAY, OID_BYTEA_ARRAY, OID_BYTEA_ARRAY,
                                   OID_INT2_ARRAY, OID_INT8_ARRAY,  OID_BOOL_ARRAY};
    struct arr c[AC_N], b;
    size_t i, rows = 0, bytes[AC_N] = {0}, bbytes = 0;
    bool joins = false;
    int k;

    for (k = 0; k < AC_N; k++)
        arr_init_in(&c[k], elem[k], &st->add_bufs[k]);
    arr_init_in(&b, OID_TEXT, &st->add_bufs[AC_N]);
    /* Each array's size first: an array grows at most once a statement. */
    for (i = from; i < to; i++) {
        const struct pend_add *a = &st->adds[i];

        if (a->gone)
            continue;
        joins = joins || a->batch != NULL;
        bbytes += 4 + (a->batch != NULL ? strlen(a->batch) : 0);
        bytes[AC_HANDLE] += 4 + a->handle_len;
        bytes[AC_FUNC] += 4 + a->func_len;
        bytes[AC_UNIQ] += 4 + a->uniq_len;
        bytes[AC_UDATA] += 5;
        bytes[AC_REDUCER] += 4 + a->reducer_len;
        bytes[AC_DATA] += 4 + a->data_len;
        bytes[AC_PRIO] += 6;
        bytes[AC_WHEN] += 12;
        bytes[AC_LEASED] += 5;
    }
    for (k = 0; k < AC_N; k++)
        buf_reserve(&c[k].b, bytes[k]);
    if (joins)
        buf_reserve(&b.b, bbytes);
    for (i = from; i < to; i++) {
        const struct pend_add *a = &st->adds[i];

        if (a->gone)
            continue;
        rows++;
        if (joins && a->batch != NULL)
            arr_put(&b, a->batch, strlen(a->batch));
        else if (joins)
            arr_null(&b);
        arr_put(&c[AC_HANDLE], a->handle, a->handle_len);
        arr_put(&c[AC_FUNC], a->func, a->func_len);
        if (a->uniq != NULL)
            arr_put(&c[AC_UNIQ], a->uniq, a->uniq_len);
        else
            arr_null(&c[AC_UNIQ]);
        arr_bool(&c[AC_UDATA], a->unique_is_data);
        arr_put(&c[AC_REDUCER], a->reducer, a->reducer_len);
        arr_put(&c[AC_DATA], a->data, a->data_len);
        arr_int(&c[AC_PRIO], a->prio, 2);
        arr_int(&c[AC_WHEN], a->when, 8);
        arr_bool(&c[AC_LEASED], a->leased);
    }
    for (k = 0; k < AC_N; k++)
        par_arr_keep(p, &c[k], type[k], &st->add_bufs[k]);
    par_text(p, st->owner, strlen(st->owner));
    par_int(p, st->lease);
    par_arr_keep(p, &b, OID_TEXT_ARRAY, &st->add_bufs[AC_N]);
    return rows;
}

static int
push_row(struct pend_row **arr, size_t *n, size_t *cap, const char *handle, size_t len, bool *lost)
{
    char *h;

    if (grow((void **)arr, *n, cap, sizeof(**arr)) < 0 || (h = memdup0(handle, len)) == NULL)
        return -1;
    (*arr)[*n].handle = h;
    (*arr)[*n].lost = lost;
    (*arr)[*n].outcome = 0;
    (*n)++;
    return 0;
}

/*
 * A remove of a job whose add is in this batch: the two cancel out (the
 * batch's ops apply in order; a cancel of a job not yet committed), and
 * a rewrite of it in between is dropped too.
 */
static int
pg_remove_job(struct store *st, const struct store_job *sj, char *err)
{
    struct pend_add *a = find_add(st, sj->handle, sj->handle_len);

    if (sj->lost != NULL)
        *sj->lost = false;
    if (a != NULL) {
        size_t i;

        a->gone = true;
        for (i = 0; i < st->nupds; i++)
            if (st->upds[i].after && strcmp(st->upds[i].handle, a->handle) == 0)
                st->upds[i].gone = true;
        return DSJOB_OK;
    }
    if (push_row(&st->rms, &st->nrms, &st->rms_cap, sj->handle, sj->handle_len, sj->lost) < 0)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    st->rms[st->nrms - 1].outcome = sj->state; /* an end's (storage_settle), for its batch */
    return DSJOB_OK;
}

static int
pg_remove(struct store *st, uint64_t id, char *err)
{
    (void)st;
    (void)id;
    return store_say(err, DSJOB_ERR_ARG, "postgres: remove needs the job's handle");
}

static struct pend_upd *
push_upd(struct store *st, const char *name, size_t len, bool *lost)
{
    struct pend_upd *u;
    char *h;

    if (grow((void **)&st->upds, st->nupds, &st->upds_cap, sizeof(*st->upds)) < 0 ||
        (h = memdup0(name, len)) == NULL)
        return NULL;
    u = &st->upds[st->nupds++];
    memset(u, 0, sizeof(*u));
    u->handle = h;
    u->lost = lost;
    return u;
}

/* A rewrite of a job whose add is in this batch runs after the INSERT (ops apply in order). */
static int
pg_update(struct store *st, const struct store_job *sj, char *err)
{
    struct pend_upd *u;

    if (sj->lost != NULL)
        *sj->lost = false;
    if ((u = push_upd(st, sj->handle, sj->handle_len, sj->lost)) == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    u->after = find_add(st, sj->handle, sj->handle_len) != NULL;
    u->prio = sj->prio;
    u->state = sj->state;
    u->attempts = sj->attempts;
    u->first_fail = sj->first_fail;
    u->last_fail = sj->last_fail;
    u->numerator = sj->numerator;
    u->denominator = sj->denominator;
    u->when = sj->when;
    u->deadline_ms = sj->deadline_ms;
    if (sj->result_len > 0) {
        u->result = memdup0(sj->result, sj->result_len);
        if (u->result == NULL) {
            free(u->handle);
            st->nupds--;
            return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        }
        u->result_len = sj->result_len;
    }
    return DSJOB_OK;
}

static int
pg_set_func(struct store *st, const struct store_func *sf, char *err)
{
    struct pend_upd *u;

    if (!utf8_ok(sf->name, sf->name_len))
        return store_say(err, DSJOB_ERR_ARG, "postgres: a function name must be UTF-8 text");
    if (sf->name_len > PG_KEY_MAX)
        return store_say(err, DSJOB_ERR_ARG,
                         "postgres: a function name of %zu bytes is more than the %d this store "
                         "can index",
                         sf->name_len, PG_KEY_MAX);
    if ((u = push_upd(st, sf->name, sf->name_len, NULL)) == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    u->func = true;
    u->flow = memdup0(sf->flow_len > 0 ? sf->flow : "", sf->flow_len);
    if (u->flow == NULL) {
        free(u->handle);
        st->nupds--;
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    u->retries = sf->retries;
    u->backoff_base_ms = sf->backoff_base_ms;
    u->backoff_max_ms = sf->backoff_max_ms;
    return DSJOB_OK;
}

/* The entry of func in st->demand; with make, the stalest one is given to it if it has none. */
static struct demand *
demand_find(struct store *st, const char *func, bool make)
{
    struct demand *old = &st->demand[0];
    size_t i;

    for (i = 0; i < PG_DEMAND_MAX; i++) {
        struct demand *d = &st->demand[i];

        if (d->func != NULL && strcmp(d->func, func) == 0)
            return d;
        if (d->func == NULL || (old->func != NULL && d->at_ms < old->at_ms))
            old = d;
    }
    if (!make)
        return NULL;
    free(old->func);
    old->func = strdup(func);
    old->took = 0;
    old->at_ms = 0;
    return old->func != NULL ? old : NULL;
}

/* st->take for each function ls asks for (see PG_TAKE_FLUSHES). */
static void
demand_takes(struct store *st, const struct store_lease *ls)
{
    double now = now_ms();
    size_t i;

    for (i = 0; i < ls->nfuncs; i++) {
        const struct demand *d = demand_find(st, ls->funcs[i], false);
        double want;

        st->take[i] = ls->limits[i];
        if (d == NULL || d->took == 0 || now - d->at_ms >= PG_TAKE_STALE_MS)
            continue;
        want = (double)d->took / (now - d->at_ms > 0.1 ? now - d->at_ms : 0.1) * st->flush_ms *
               PG_TAKE_FLUSHES;
        if (want > ls->take_max)
            want = ls->take_max;
        if (want > st->take[i])
            st->take[i] = (unsigned)want;
    }
}

/* After a take committed: how many jobs of each function it took, and when. */
static void
demand_took(struct store *st, const struct store_lease *ls)
{
    double now = now_ms();
    size_t i, k;

    for (i = 0; i < ls->nfuncs; i++) {
        struct demand *d;
        uint32_t n = 0;

        if (!utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            continue;
        for (k = 0; k < ls->njobs; k++)
            n += strcmp(ls->jobs[k].func, ls->funcs[i]) == 0;
        if ((d = demand_find(st, ls->funcs[i], n > 0)) != NULL) {
            d->took = n;
            d->at_ms = now;
        }
    }
}

static int
pg_lease(struct store *st, struct store_lease *ls, char *err)
{
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
    ls->waiting = NULL;
    ls->nwaiting = 0;
    ls->flows = NULL;
    ls->nflows = 0;
    ls->flows_read = false;
    ls->token_ms = -1;
    if (ls->nfuncs > st->take_cap) {
        unsigned *t = realloc(st->take, ls->nfuncs * sizeof(*t)), *g;

        if (t == NULL)
            return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        st->take = t;
        g = realloc(st->granted, ls->nfuncs * sizeof(*g));
        if (g == NULL)
            return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        st->granted = g;
        g = realloc(st->ktake, ls->nfuncs * sizeof(*g));
        if (g == NULL)
            return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        st->ktake = g;
        st->take_cap = ls->nfuncs;
    }
    demand_takes(st, ls);
    st->ls = ls;
    if (ls->nrelease > 0)
        st->notify = true; /* a server with a worker free takes what is given up */
    return DSJOB_OK;
}

/*
 * The live job an add coalesced onto: its handle into alias. If that job
 * ended meanwhile, the add is inserted again (it may then coalesce onto a
 * newer one), joining its batch if that is open; a member whose batch is
 * not open any more is refused, as add.sql would refuse it now. Runs after
 * the batch committed, in statements of its own.
 */
static int
find_alias(struct store *st, size_t i, char *err)
{
    struct pend_add *a = &st->adds[i];
    int tries, rc;

    for (tries = 0; tries < 3; tries++) {
        struct params p = {0};
        PGresult *r;
        bool got = false, open = false;
        int k;

        par_text(&p, a->func, strlen(a->func));
        par_bytea(&p, a->uniq, a->uniq_len);
        if ((rc = run(st, pg_sql_find_alias, &p, false, PGRES_TUPLES_OK,
                      "finding a unique key's job", &r, err)) != DSJOB_OK)
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
        add_params(st, i, i + 1, &p);
        par_bool(&p, false); /* $13: no NOTIFY */
        par_bool(&p, true);  /* $14: joins its batch, if open, and is counted there */
        if ((rc = run(st, pg_sql_add, &p, false, PGRES_TUPLES_OK, "inserting a job again", &r,
                      err)) != DSJOB_OK)
            return rc;
        for (k = 0; k < PQntuples(r); k++) { /* the handle's row; the others: its open batch */
            got = got || !PQgetisnull(r, k, 0);
            open = open || !PQgetisnull(r, k, 1);
        }
        PQclear(r);
        if (got)
            return DSJOB_OK;
        if (a->batch != NULL && !open) {
            member_refused(a); /* its batch closed since: refused, as add.sql refuses it */
            return DSJOB_OK;
        }
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

/* A taken row (binary format, main.sql's columns) into sj, its bytes at *at. */
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

/* The functions ls asks for, then how many of each to take: two arrays. */
static void
funcs_params(struct params *p, const struct store *st, const struct store_lease *ls)
{
    struct arr names, n;
    size_t i;

    arr_init(&names, OID_TEXT);
    arr_init(&n, OID_INT4);
    for (i = 0; ls != NULL && i < ls->nfuncs; i++) {
        /* A name that is not UTF-8 has no rows here (its adds were refused). */
        if (!utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            continue;
        arr_put(&names, ls->funcs[i], strlen(ls->funcs[i]));
        arr_int(&n, st->take[i], 4);
    }
    par_arr(p, &names, OID_TEXT_ARRAY);
    par_arr(p, &n, OID_INT4_ARRAY);
}

/* How many jobs ls asks for in all, of the functions this store can hold. */
static uint64_t
lease_asked(const struct store *st, const struct store_lease *ls)
{
    uint64_t n = 0;
    size_t i;

    for (i = 0; ls != NULL && i < ls->nfuncs; i++)
        if (utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            n += st->take[i];
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
    struct params p = {0};
    char err[STORE_ERRLEN]; /* not reported: the poll finds the job */
    PGresult *r;

    funcs_params(&p, st, ls);
    if (run(st, pg_sql_read_due, &p, false, PGRES_TUPLES_OK, "reading run-at times", &r, err) !=
        DSJOB_OK)
        return;
    if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        ls->due_ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
}

/*
 * Flow control across the servers sharing the table (struct
 * store_flow_cap). A take of a function with a concurrency limit or a
 * rate runs in a transaction that first locks the function's row of
 * dsjob.flow_bucket and takes tokens from it (flow_take.sql), then counts,
 * in a statement of its own whose snapshot sees what the lock's last
 * holder committed, the function's jobs under a lease that has not run
 * out (flow_count.sql): the take is cut to the tokens granted and to the
 * limit less that count. Tokens granted for jobs the take did not find go
 * back (flow_give.sql). Two or three statements per batch that takes
 * jobs of a limited function, none per job; a batch without one costs
 * nothing more.
 */
static bool cap_keyed(const struct store_flow_cap *c);

static bool
cap_any(const struct store_flow_cap *c)
{
    return c->concurrency > 0 || c->rate > 0 || cap_keyed(c);
}

static bool
flow_capped(const struct store *st, const struct store_lease *ls)
{
    size_t i;

    (void)st;
    for (i = 0; ls != NULL && ls->caps != NULL && i < ls->nfuncs; i++)
        if (cap_any(&ls->caps[i]) && utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            return true;
    return false;
}

/* The index in ls->funcs of the function named name, or -1. */
static ssize_t
flow_func(const struct store_lease *ls, const char *name)
{
    size_t i;

    for (i = 0; i < ls->nfuncs; i++)
        if (strcmp(ls->funcs[i], name) == 0)
            return (ssize_t)i;
    return -1;
}

static int
flow_before(struct store *st, struct store_lease *ls, char *err)
{
    struct params p = {0}, q = {0};
    struct arr names, want, rate, period, burst, cnames;
    PGresult *r;
    size_t i;
    int k, rc;

    arr_init(&names, OID_TEXT);
    arr_init(&want, OID_INT4);
    arr_init(&rate, OID_INT4);
    arr_init(&period, OID_INT4);
    arr_init(&burst, OID_INT4);
    arr_init(&cnames, OID_TEXT);
    for (i = 0; i < ls->nfuncs; i++) {
        const struct store_flow_cap *c = &ls->caps[i];

        st->granted[i] = 0;
        if (!cap_any(c) || !utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            continue;
        /* No take sized to the workers' rate: what the server asked for, at most. */
        if (st->take[i] > ls->limits[i])
            st->take[i] = ls->limits[i];
        arr_put(&names, ls->funcs[i], strlen(ls->funcs[i]));
        arr_int(&want, st->take[i], 4);
        arr_int(&rate, c->rate, 4);
        arr_int(&period, c->rate > 0 ? c->period_ms : 0, 4);
        arr_int(&burst, c->burst, 4);
        if (c->concurrency > 0)
            arr_put(&cnames, ls->funcs[i], strlen(ls->funcs[i]));
    }
    par_arr(&p, &names, OID_TEXT_ARRAY);
    par_arr(&p, &want, OID_INT4_ARRAY);
    par_arr(&p, &rate, OID_INT4_ARRAY);
    par_arr(&p, &period, OID_INT4_ARRAY);
    par_arr(&p, &burst, OID_INT4_ARRAY);
    par_arr(&q, &cnames, OID_TEXT_ARRAY);
    if ((rc = run(st, pg_sql_flow_take, &p, false, PGRES_TUPLES_OK, "taking flow tokens", &r,
                  err)) != DSJOB_OK) {
        params_free(&q);
        return rc;
    }
    for (k = 0; k < PQntuples(r); k++) {
        ssize_t at = flow_func(ls, PQgetvalue(r, k, 0));
        long granted = strtol(PQgetvalue(r, k, 1), NULL, 10);
        double tokens = strtod(PQgetvalue(r, k, 2), NULL);
        long rt = strtol(PQgetvalue(r, k, 3), NULL, 10),
             per = strtol(PQgetvalue(r, k, 4), NULL, 10);

        if (at < 0)
            continue;
        if (granted < 0)
            granted = 0;
        if ((unsigned long)granted < st->take[at])
            st->take[at] = (unsigned)granted;
        if (rt > 0) {
            st->granted[at] = (unsigned)granted;
            /* Fewer than asked: when the bucket holds a token again. */
            if ((unsigned long)granted < ls->limits[at] && tokens < 1) {
                int64_t ms = (int64_t)((1 - tokens) * (double)per / (double)rt) + 1;

                if (ls->token_ms < 0 || ms < ls->token_ms)
                    ls->token_ms = ms;
            }
        }
    }
    PQclear(r);
    if ((rc = run(st, pg_sql_flow_count, &q, false, PGRES_TUPLES_OK, "counting leased jobs", &r,
                  err)) != DSJOB_OK)
        return rc;
    for (k = 0; k < PQntuples(r); k++) {
        ssize_t at = flow_func(ls, PQgetvalue(r, k, 0));
        unsigned long n = strtoul(PQgetvalue(r, k, 1), NULL, 10), cap;

        if (at < 0 || ls->caps[at].concurrency == 0)
            continue;
        cap = ls->caps[at].concurrency > n ? ls->caps[at].concurrency - n : 0;
        if (cap < st->take[at])
            st->take[at] = (unsigned)cap;
    }
    PQclear(r);
    return DSJOB_OK;
}

/* After the take, in its transaction: unused tokens back to their buckets. */
static int
flow_after(struct store *st, struct store_lease *ls, char *err)
{
    struct params p = {0};
    struct arr names, n;
    size_t i, j, nback = 0;

    arr_init(&names, OID_TEXT);
    arr_init(&n, OID_INT4);
    for (i = 0; i < ls->nfuncs; i++) {
        unsigned took = 0;

        if (st->granted[i] == 0)
            continue;
        for (j = 0; j < ls->njobs; j++)
            took += strcmp(ls->jobs[j].func, ls->funcs[i]) == 0;
        if (took >= st->granted[i])
            continue;
        arr_put(&names, ls->funcs[i], strlen(ls->funcs[i]));
        arr_int(&n, st->granted[i] - took, 4);
        nback++;
    }
    if (nback == 0) {
        free(names.b.p);
        free(n.b.p);
        return DSJOB_OK;
    }
    par_arr(&p, &names, OID_TEXT_ARRAY);
    par_arr(&p, &n, OID_INT4_ARRAY);
    return run_ok(st, pg_sql_flow_give, &p, "giving flow tokens back", err);
}

/*
 * Keys across the servers: a function with a sequence or a per-key
 * concurrency limit is taken by key_take.sql, after main.sql (whose take
 * of it key_before sets to none) in the same transaction, under the lock
 * flow_take.sql took of its row, so that its takes go one server at a
 * time. Its rows join what main.sql took.
 */
static bool
cap_keyed(const struct store_flow_cap *c)
{
    return c->sequence != 0 || c->key_concurrency > 0 || c->key_rate > 0;
}

/* Move the take of each keyed function from main.sql's to key_take's. */
static void
key_before(struct store *st, const struct store_lease *ls)
{
    size_t i;

    for (i = 0; i < ls->nfuncs; i++) {
        st->ktake[i] = 0;
        if (!cap_keyed(&ls->caps[i]) || !utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            continue;
        st->ktake[i] = st->take[i];
        st->take[i] = 0;
    }
}

/* The bytes of sj's strings, each with its NUL (as take_row lays them out). */
static size_t
job_bytes(const struct store_job *sj)
{
    return sj->handle_len + sj->func_len + sj->unique_len + sj->reducer_len + sj->data_len + 5;
}

/* Copy sj's strings to *at, pointing sj at the copies. */
static void
job_move(struct store_job *sj, char **at)
{
#define MOVE(field)                                                                                \
    do {                                                                                           \
        memcpy(*at, sj->field, sj->field##_len + 1);                                               \
        sj->field = *at;                                                                           \
        *at += sj->field##_len + 1;                                                                \
    } while (0)
    MOVE(handle);
    MOVE(func);
    MOVE(unique);
    MOVE(reducer);
    MOVE(data);
#undef MOVE
}

/*
 * Before the transaction of a lease op that takes keyed functions
 * (key_take.sql), in one of its own: the keys of the functions it asks
 * for, in the jobs' column k, written by dsjob.key_fill (key_fill.sql) for
 * a function new to the table or whose separator changed; a statement that
 * writes nothing otherwise. Not in the batch's transaction: the first
 * fill makes the trigger jobs_keyed (CREATE TRIGGER locks dsjob.jobs in
 * SHARE ROW EXCLUSIVE mode) and a fill takes the keys' advisory lock
 * exclusive, each held until its transaction ends, and every other
 * server's INSERT waits for both; here that is one statement's time, not
 * the rest of a transaction that also holds row locks those inserts'
 * transactions may wait for. A row inserted after it commits is keyed by
 * the trigger.
 */
static int
key_fill(struct store *st, const struct store_lease *ls, char *err)
{
    struct params p = {0};
    struct arr names, sep;
    PGresult *r;
    size_t i, n = 0;
    int rc;

    if (ls == NULL || ls->caps == NULL)
        return DSJOB_OK;
    arr_init(&names, OID_TEXT);
    arr_init(&sep, OID_TEXT);
    for (i = 0; i < ls->nfuncs; i++) {
        const struct store_flow_cap *c = &ls->caps[i];

        if (!cap_keyed(c) || ls->limits[i] == 0 || !utf8_ok(ls->funcs[i], strlen(ls->funcs[i])))
            continue;
        arr_put(&names, ls->funcs[i], strlen(ls->funcs[i]));
        arr_put(&sep, c->sep, strnlen(c->sep, sizeof(c->sep)));
        n++;
    }
    if (n == 0) {
        free(names.b.p);
        free(sep.b.p);
        return DSJOB_OK;
    }
    par_arr(&p, &names, OID_TEXT_ARRAY);
    par_arr(&p, &sep, OID_TEXT_ARRAY);
    if ((rc = run(st, pg_sql_key_fill, &p, false, PGRES_TUPLES_OK, "keying jobs", &r, err)) !=
        DSJOB_OK)
        return rc;
    PQclear(r);
    return DSJOB_OK;
}

static int
key_take(struct store *st, struct store_lease *ls, char *err)
{
    struct params p = {0};
    struct arr names, n, sep, sq, kc, kr, kp, kb;
    struct store_job *jobs;
    size_t i, nk = 0, bytes = 0;
    PGresult *r;
    char *mem, *at;
    int k, rows, rc;

    arr_init(&names, OID_TEXT);
    arr_init(&n, OID_INT4);
    arr_init(&sep, OID_TEXT);
    arr_init(&sq, OID_INT4);
    arr_init(&kc, OID_INT4);
    arr_init(&kr, OID_INT4);
    arr_init(&kp, OID_INT4);
    arr_init(&kb, OID_INT4);
    for (i = 0; i < ls->nfuncs; i++) {
        const struct store_flow_cap *c = &ls->caps[i];

        if (st->ktake[i] == 0)
            continue;
        arr_put(&names, ls->funcs[i], strlen(ls->funcs[i]));
        arr_int(&n, st->ktake[i], 4);
        arr_put(&sep, c->sep, strnlen(c->sep, sizeof(c->sep)));
        arr_int(&sq, c->sequence, 4);
        arr_int(&kc, c->key_concurrency, 4);
        arr_int(&kr, c->key_rate, 4);
        arr_int(&kp, c->key_rate > 0 ? c->key_period_ms : 0, 4);
        arr_int(&kb, c->key_burst, 4);
        nk++;
    }
    par_arr(&p, &names, OID_TEXT_ARRAY);
    par_arr(&p, &n, OID_INT4_ARRAY);
    par_arr(&p, &sep, OID_TEXT_ARRAY);
    par_arr(&p, &sq, OID_INT4_ARRAY);
    par_arr(&p, &kc, OID_INT4_ARRAY);
    par_text(&p, st->owner, strlen(st->owner));
    par_int(&p, st->lease);
    par_arr(&p, &kr, OID_INT4_ARRAY);
    par_arr(&p, &kp, OID_INT4_ARRAY);
    par_arr(&p, &kb, OID_INT4_ARRAY);
    if (nk == 0) {
        params_free(&p);
        return DSJOB_OK;
    }
    if ((rc = run(st, pg_sql_key_take, &p, true, PGRES_TUPLES_OK, "taking jobs by key", &r, err)) !=
        DSJOB_OK)
        return rc;
    if ((rows = PQntuples(r)) == 0) {
        PQclear(r);
        return DSJOB_OK;
    }
    /* One array and one block for main.sql's jobs and these. */
    for (i = 0; i < ls->njobs; i++)
        bytes += job_bytes(&ls->jobs[i]);
    for (k = 0; k < rows; k++)
        for (i = 1; i <= 6; i++)
            bytes += (size_t)PQgetlength(r, k, (int)i) + 1;
    jobs = calloc(ls->njobs + (size_t)rows, sizeof(*jobs));
    mem = malloc(bytes);
    if (jobs == NULL || mem == NULL) {
        free(jobs);
        free(mem);
        PQclear(r);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    at = mem;
    for (i = 0; i < ls->njobs; i++) {
        jobs[i] = ls->jobs[i];
        job_move(&jobs[i], &at);
    }
    for (k = 0; k < rows; k++) {
        struct store_job *sj = &jobs[ls->njobs++];

        take_row(r, k, sj, &at);
        if (!PQgetisnull(r, k, 13))
            sj->deadline_ms = (int64_t)be64(PQgetvalue(r, k, 13));
    }
    PQclear(r);
    free(ls->jobs);
    free(ls->mem);
    ls->jobs = jobs;
    ls->mem = mem;
    qsort(ls->jobs, ls->njobs, sizeof(*ls->jobs), cmp_claimed);
    return DSJOB_OK;
}

/*
 * After flow_read: a function whose stored settings differ from those the
 * op was made with (ls->lines) is taken by none of this op's statements:
 * another server changed them, and this server takes it again once it
 * follows them (flow_ctl_sync, when the op is done), not the old way.
 */
static void
flow_stale(struct store *st, const struct store_lease *ls)
{
    size_t i, k;

    if (ls->lines == NULL)
        return;
    for (i = 0; i < ls->nfuncs; i++) {
        const char *at = ls->flows;

        for (k = 0; k < ls->nflows; k++) {
            const char *name = at, *line = at + strlen(at) + 1;

            at = line + strlen(line) + 1;
            if (strcmp(name, ls->funcs[i]) != 0)
                continue;
            if (strcmp(line, ls->lines[i]) != 0)
                st->take[i] = 0;
            break;
        }
    }
}

/* Every function's stored flow settings, into ls->flows. */
static int
flow_read(struct store *st, struct store_lease *ls, char *err)
{
    struct params p = {0};
    PGresult *r;
    size_t bytes = 0;
    char *at;
    int k, rc;

    if ((rc = run(st, pg_sql_flow_read, &p, false, PGRES_TUPLES_OK, "reading flow settings", &r,
                  err)) != DSJOB_OK)
        return rc;
    for (k = 0; k < PQntuples(r); k++)
        bytes += (size_t)PQgetlength(r, k, 0) + (size_t)PQgetlength(r, k, 1) + 2;
    free(ls->flows);
    ls->flows = malloc(bytes + 1);
    if (ls->flows == NULL) {
        PQclear(r);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    at = ls->flows;
    for (k = 0; k < PQntuples(r); k++) {
        int c;

        for (c = 0; c < 2; c++) {
            size_t len = (size_t)PQgetlength(r, k, c);

            memcpy(at, PQgetvalue(r, k, c), len);
            at[len] = '\0';
            at += len + 1;
        }
    }
    ls->nflows = (size_t)PQntuples(r);
    ls->flows_read = true;
    PQclear(r);
    flow_stale(st, ls);
    return DSJOB_OK;
}

/* The adds of this batch with a deadline (none written yet). */
static size_t
adds_deadlines(const struct store *st)
{
    size_t i, n = 0;

    for (i = 0; i < st->nadds; i++)
        n += !st->adds[i].gone && st->adds[i].deadline_ms != 0;
    return n;
}

/*
 * After the INSERT, in its transaction: the deadlines of the adds that
 * have one (deadline_set.sql), so that the INSERT stays as it is and a
 * batch without deadlines costs nothing more.
 */
static int
flush_deadlines(struct store *st, char *err)
{
    struct params p = {0};
    struct arr h, d;
    size_t i;

    arr_init(&h, OID_TEXT);
    arr_init(&d, OID_INT8);
    for (i = 0; i < st->nadds; i++) {
        const struct pend_add *a = &st->adds[i];

        if (a->gone || a->deadline_ms == 0)
            continue;
        arr_put(&h, a->handle, strlen(a->handle));
        arr_int(&d, a->deadline_ms, 8);
    }
    par_arr(&p, &h, OID_TEXT_ARRAY);
    par_arr(&p, &d, OID_INT8_ARRAY);
    return run_ok(st, pg_sql_deadline_set, &p, "writing deadlines", err);
}

/* The adds of this batch that join a batch (none joined yet). */
static size_t
adds_batches(const struct store *st)
{
    size_t i, n = 0;

    for (i = 0; i < st->nadds; i++)
        n += !st->adds[i].gone && st->adds[i].batch != NULL;
    return n;
}

/* Whether batch id b is among r's rows (the batches batch_join.sql refused). */
static bool
batch_refused(PGresult *r, const char *b)
{
    int k;

    for (k = 0; k < PQntuples(r); k++)
        if (strcmp(PQgetvalue(r, k, 0), b) == 0)
            return true;
    return false;
}

/*
 * A batch member's add refused alone: its batch is not open (or it was not
 * inserted for that reason), so it has no row and its submitter hears why.
 */
static void
member_refused(struct pend_add *a)
{
    a->gone = true;
    a->conflict = false;
    if (a->lost != NULL)
        *a->lost = true;
    if (a->why != NULL)
        snprintf(a->why, STORE_ERRLEN,
                 "postgres: batch %s is not open (no such batch on any server, or closed)",
                 a->batch);
}

/*
 * After the INSERT of main.sql, or of adds that also write dependency
 * edges (flush_deps, which may refuse a row), in its transaction, when
 * add.sql did not join them itself (st->join_in_add; the INSERT wrote each
 * member's batch): each batch's total grows by the rows its adds made
 * (batch_join.sql, one UPDATE a batch). An add whose batch is not open
 * there (never opened on any server, dropped, or closed) has its row
 * deleted (batch_refuse.sql) and is refused alone, saying so.
 */
static int
flush_joins(struct store *st, char *err)
{
    struct params p = {0};
    struct arr ids, counts, gone;
    const char **v;
    PGresult *r;
    size_t i, j, n = 0, ngone = 0;
    int rc;

    if ((v = malloc(st->nadds * sizeof(*v))) == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    for (i = 0; i < st->nadds; i++)
        if (!st->adds[i].gone && !st->adds[i].conflict && st->adds[i].batch != NULL)
            v[n++] = st->adds[i].batch;
    qsort(v, n, sizeof(*v), store_cmp_strs);
    arr_init(&ids, OID_TEXT);
    arr_init(&counts, OID_INT8);
    for (i = 0; i < n; i = j) {
        for (j = i + 1; j < n && strcmp(v[j], v[i]) == 0; j++)
            ;
        arr_put(&ids, v[i], strlen(v[i]));
        arr_int(&counts, (int64_t)(j - i), 8);
    }
    free(v);
    if (n == 0) { /* every member coalesced or was refused */
        free(ids.b.p);
        free(counts.b.p);
        return DSJOB_OK;
    }
    par_arr(&p, &ids, OID_TEXT_ARRAY);
    par_arr(&p, &counts, OID_INT8_ARRAY);
    if ((rc = run(st, pg_sql_batch_join, &p, false, PGRES_TUPLES_OK, "joining batches", &r, err)) !=
        DSJOB_OK)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return DSJOB_OK;
    }
    arr_init(&gone, OID_TEXT);
    for (i = 0; i < st->nadds; i++) {
        struct pend_add *a = &st->adds[i];

        if (a->gone || a->conflict || a->batch == NULL || !batch_refused(r, a->batch))
            continue;
        arr_put(&gone, a->handle, strlen(a->handle));
        ngone++;
        member_refused(a);
    }
    PQclear(r);
    if (ngone == 0) {
        free(gone.b.p);
        return DSJOB_OK;
    }
    par_arr(&p, &gone, OID_TEXT_ARRAY);
    return run_ok(st, pg_sql_batch_refuse, &p, "refusing adds to batches", err);
}

/*
 * After the INSERT (and before the batches' joins), in its transaction:
 * the edges of the children this batch adds (deps_add.sql). A child refused
 * there (a parent unknown, or failed and its policy not run) is refused
 * alone, saying why; one still waiting is held in the table.
 */
static int
key_hex(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* Decode n bytes of %XX escapes (deps.c's) from in to out (room for n); its length, or -1. */
static ssize_t
key_unescape(const char *in, size_t n, char *out)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        if (in[i] != '%') {
            out[o++] = in[i];
            continue;
        }
        if (i + 2 >= n || key_hex(in[i + 1]) < 0 || key_hex(in[i + 2]) < 0)
            return -1;
        out[o++] = (char)(key_hex(in[i + 1]) * 16 + key_hex(in[i + 2]));
        i += 2;
    }
    return (ssize_t)o;
}

/*
 * A parent named "unique:FUNCTION:UNIQUE" that its child's server does not
 * hold (deps.c's by_unique): the handle of the table's job of that
 * function and key, live first, else the newest ended one (kept or dead),
 * any server's, this batch's adds included. One not found stays as it is:
 * deps_add refuses its child, naming it.
 */
static int
deps_by_key(struct store *st, struct pend_dep *d, char *err)
{
    const char *e = d->parent, *colon = strchr(e + 7, ':');
    size_t el = strlen(e), cl = strlen(d->child);
    char *buf = malloc(el + 1), *at;
    ssize_t fl, ul;
    struct params p = {0};
    PGresult *r;
    int rc;

    if (buf == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    if (colon == NULL || (fl = key_unescape(e + 7, (size_t)(colon - e - 7), buf)) <= 0 ||
        (ul = key_unescape(colon + 1, (size_t)(e + el - colon - 1), buf + fl)) <= 0 ||
        !utf8_ok(buf, (size_t)fl)) {
        free(buf);
        return DSJOB_OK;
    }
    par_text(&p, buf, (size_t)fl);
    par_bytea(&p, buf + fl, (size_t)ul);
    par_text(&p, d->child, cl); /* not the child itself, inserted with that key just before */
    rc = run(st, pg_sql_dep_by_key, &p, false, PGRES_TUPLES_OK,
             "finding a parent by its unique key", &r, err);
    free(buf);
    if (rc != DSJOB_OK)
        return rc;
    if (PQntuples(r) == 1 && (at = malloc(cl + 2 + (size_t)PQgetlength(r, 0, 0))) != NULL) {
        memcpy(at, d->child, cl + 1);
        memcpy(at + cl + 1, PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0) + 1);
        free(d->child);
        d->child = at;
        d->parent = at + cl + 1;
    } else if (PQntuples(r) == 1) {
        rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    PQclear(r);
    return rc;
}

static int
flush_deps(struct store *st, char *err)
{
    struct params p = {0};
    struct arr c, pa, po;
    PGresult *r;
    size_t i;
    int k, rc;

    for (i = 0; i < st->ndeps; i++)
        if (strncmp(st->deps[i].parent, "unique:", 7) == 0 &&
            (rc = deps_by_key(st, &st->deps[i], err)) != DSJOB_OK)
            return rc;
    arr_init(&c, OID_TEXT);
    arr_init(&pa, OID_TEXT);
    arr_init(&po, OID_INT2);
    for (i = 0; i < st->ndeps; i++) {
        arr_put(&c, st->deps[i].child, strlen(st->deps[i].child));
        arr_put(&pa, st->deps[i].parent, strlen(st->deps[i].parent));
        arr_int(&po, st->deps[i].policy, 2);
    }
    par_arr(&p, &c, OID_TEXT_ARRAY);
    par_arr(&p, &pa, OID_TEXT_ARRAY);
    par_arr(&p, &po, OID_INT2_ARRAY);
    if ((rc = run(st, pg_sql_deps_add, &p, false, PGRES_TUPLES_OK, "writing dependencies", &r,
                  err)) != DSJOB_OK)
        return rc;
    for (k = 0; k < PQntuples(r); k++) {
        struct pend_add *a = find_add(st, PQgetvalue(r, k, 0), (size_t)PQgetlength(r, k, 0));

        if (a == NULL)
            continue;
        a->gone = true;
        if (a->lost != NULL)
            *a->lost = true;
        if (a->why != NULL)
            snprintf(a->why, STORE_ERRLEN, "%s", PQgetvalue(r, k, 1));
    }
    PQclear(r);
    return DSJOB_OK;
}

/* The handles of rows[0..n) as a text[] value. */
static void
handles_param(struct params *p, const struct pend_row *rows, size_t n)
{
    struct arr a;
    size_t i;

    arr_init(&a, OID_TEXT);
    for (i = 0; i < n; i++)
        arr_put(&a, rows[i].handle, strlen(rows[i].handle));
    par_arr(p, &a, OID_TEXT_ARRAY);
}

/* Adds of the batch still to write. */
static size_t
live_adds(const struct store *st)
{
    size_t i, n = 0;

    for (i = 0; i < st->nadds; i++)
        n += !st->adds[i].gone;
    return n;
}

/*
 * The values of the batch's one statement (main.sql): its adds (none if
 * each writes them one by one), removes, the functions its lease op takes
 * jobs of, the leases it gives up, and whether it NOTIFYs.
 */
static void
main_params(struct store *st, struct params *p)
{
    struct store_lease *ls = st->ls;
    struct arr rel, out;
    size_t i;

    add_params(st, 0, st->each ? 0 : st->nadds, p);
    handles_param(p, st->rms, st->nrms);
    funcs_params(p, st, ls);
    arr_init(&rel, OID_TEXT);
    for (i = 0; ls != NULL && i < ls->nrelease; i++)
        arr_put(&rel, ls->release[i], strlen(ls->release[i]));
    par_arr(p, &rel, OID_TEXT_ARRAY);
    par_bool(p, st->notify);
    arr_init(&out, OID_INT2);
    for (i = 0; i < st->nrms; i++)
        arr_int(&out, st->rms[i].outcome, 2);
    par_arr(p, &out, OID_INT2_ARRAY);
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

/* An add the INSERT did not return (added: the handles it did, sorted) coalesced onto a job. */
static void
mark_conflicts(struct store *st, char **added, size_t nadded)
{
    size_t i;

    for (i = 0; i < st->nadds; i++)
        st->adds[i].conflict = !st->adds[i].gone && !found(added, nadded, st->adds[i].handle);
}

/* Whether an add of the batch has a unique key, which may coalesce. */
static bool
adds_uniq(const struct store *st)
{
    size_t i;

    for (i = 0; i < st->nadds; i++)
        if (!st->adds[i].gone && st->adds[i].uniq != NULL)
            return true;
    return false;
}

/*
 * After add.sql or add_new.sql joined the adds to their batches: r's
 * column col holds the ids of the batches open (NULL in the other rows).
 * An add of a batch not among them was not inserted: it is refused alone,
 * saying so.
 */
static void
mark_refused(struct store *st, PGresult *r, int col)
{
    int n = PQntuples(r), *open = malloc(((size_t)n + 1) * sizeof(*open)), nopen = 0, k;
    size_t i;

    /* The rows that name an open batch (add.sql's also hold a row a handle). */
    for (k = 0; k < n; k++) {
        if (open == NULL)
            nopen++;
        else if (!PQgetisnull(r, k, col))
            open[nopen++] = k;
    }
    for (i = 0; i < st->nadds; i++) {
        struct pend_add *a = &st->adds[i];

        if (a->gone || a->batch == NULL)
            continue;
        for (k = 0; k < nopen; k++) {
            int row = open != NULL ? open[k] : k; /* out of memory: every row, slowly */

            if (!PQgetisnull(r, row, col) && strcmp(PQgetvalue(r, row, col), a->batch) == 0)
                break;
        }
        if (k < nopen)
            continue;
        member_refused(a);
    }
    free(open);
}

/*
 * add_new.sql for a batch of adds alone: true if it inserted them all.
 * False, with *coalesce false, if it failed for another reason (err says
 * why); with *coalesce true if an add's unique key is a live job's (the
 * statement did nothing).
 */
static bool
adds_new(struct store *st, bool *coalesce, int *rc, char *err)
{
    struct params p = {0};
    PGresult *r;
    const char *state, *constraint;
    size_t i;

    *coalesce = false;
    add_params(st, 0, st->nadds, &p);
    par_bool(&p, st->notify);
    par_bool(&p, st->join_in_add);
    if (p.oom) {
        params_free(&p);
        *rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        return false;
    }
    r = exec_wait(st, pg_sql_add_new, &p, false);
    params_free(&p);
    if (r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK) {
        for (i = 0; i < st->nadds; i++)
            st->adds[i].conflict = false;
        if (st->join_in_add)
            mark_refused(st, r, 0);
        PQclear(r);
        *rc = DSJOB_OK;
        return true;
    }
    state = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    constraint = r != NULL ? PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME) : NULL;
    *coalesce = state != NULL && strcmp(state, "23505") == 0 && constraint != NULL &&
                strcmp(constraint, "jobs_live_unique") == 0 && !conn_lost(st);
    *rc = res_say(err, DSJOB_ERR_STORE, st, r, "writing the batch");
    PQclear(r);
    return false;
}

/*
 * A batch of adds alone (a submit burst): the INSERT, with the NOTIFY in
 * the same statement (one implicit transaction) when it leaves jobs for
 * other servers. Cheaper for PostgreSQL to plan than the main statement.
 * Without ON CONFLICT (add_new.sql) unless an add may coalesce
 * (PG_ARBITER_BATCHES).
 */
static int
flush_adds_only(struct store *st, char *err)
{
    struct params p = {0};
    PGresult *r;
    char **added = NULL;
    size_t nadded = 0;
    bool uniq = adds_uniq(st), coalesce;
    int k, rc;

    if (!uniq || st->arbiter_left == 0) {
        /* In a transaction, a failed statement aborts it: a savepoint keeps the rest. */
        if (st->txn && (rc = exec_ok(st, "SAVEPOINT dsjob_add_new", "savepoint", err)) != DSJOB_OK)
            return rc;
        if (adds_new(st, &coalesce, &rc, err) || !coalesce)
            return rc;
        if (st->txn && (rc = exec_ok(st, "ROLLBACK TO SAVEPOINT dsjob_add_new",
                                     "rollback to savepoint", err)) != DSJOB_OK)
            return rc;
        st->arbiter_left = PG_ARBITER_BATCHES;
    }
    add_params(st, 0, st->nadds, &p);
    par_bool(&p, st->notify);
    par_bool(&p, st->join_in_add);
    if ((rc = run(st, pg_sql_add, &p, false, PGRES_TUPLES_OK, "writing the batch", &r, err)) !=
        DSJOB_OK)
        return rc;
    added = malloc(((size_t)PQntuples(r) + 1) * sizeof(*added));
    if (added == NULL) {
        PQclear(r);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    for (k = 0; k < PQntuples(r); k++)
        if (!PQgetisnull(r, k, 0))
            added[nadded++] = PQgetvalue(r, k, 0);
    qsort(added, nadded, sizeof(*added), store_cmp_strs);
    mark_conflicts(st, added, nadded);
    if (st->join_in_add)
        mark_refused(st, r, 1);
    if (uniq && nadded < live_adds(st))
        st->arbiter_left = PG_ARBITER_BATCHES; /* one coalesced: keep add.sql */
    else if (uniq && st->arbiter_left > 0)
        st->arbiter_left--;
    free(added);
    PQclear(r);
    return DSJOB_OK;
}

/*
 * The adds one by one, each behind a savepoint, in the transaction of a
 * batch that failed whole: a row PostgreSQL refuses (a constraint or
 * trigger of the site's, a limit the checks at add did not foresee) is
 * refused alone, its submitter told why, and the others are written.
 */
static int
flush_adds_each(struct store *st, char *err)
{
    size_t i;
    int rc;

    for (i = 0; i < st->nadds; i++) {
        struct pend_add *a = &st->adds[i];
        struct params p = {0};
        PGresult *r;

        if (a->gone)
            continue;
        if ((rc = exec_ok(st, "SAVEPOINT dsjob_add", "savepoint", err)) != DSJOB_OK)
            return rc;
        add_params(st, i, i + 1, &p);
        par_bool(&p, false);
        par_bool(&p, st->join_in_add);
        rc = run(st, pg_sql_add, &p, false, PGRES_TUPLES_OK, "writing a job", &r, a->why);
        if (rc == DSJOB_OK) {
            int k;

            for (k = 0; k < PQntuples(r) && PQgetisnull(r, k, 0); k++)
                ;
            a->conflict = k == PQntuples(r);
            if (st->join_in_add && a->batch != NULL) {
                for (k = 0; k < PQntuples(r); k++)
                    if (!PQgetisnull(r, k, 1) && strcmp(PQgetvalue(r, k, 1), a->batch) == 0)
                        break;
                if (k == PQntuples(r)) { /* its batch is not open */
                    a->conflict = false;
                    a->gone = true;
                    if (a->lost != NULL)
                        *a->lost = true;
                    snprintf(a->why, STORE_ERRLEN,
                             "postgres: batch %s is not open (no such batch on any server, or "
                             "closed)",
                             a->batch);
                }
            }
            PQclear(r);
            continue;
        }
        if (rc != DSJOB_ERR_STORE || st->db == NULL || PQstatus(st->db) != CONNECTION_OK) {
            snprintf(err, STORE_ERRLEN, "%s", a->why);
            return rc;
        }
        /* This row alone: its submitter is told a->why. */
        if ((rc = exec_ok(st, "ROLLBACK TO SAVEPOINT dsjob_add", "savepoint", err)) != DSJOB_OK)
            return rc;
        a->gone = true;
        if (a->lost != NULL)
            *a->lost = true;
    }
    return DSJOB_OK;
}

/* The kind of main.sql's row k (its first column, an int2 in binary format). */
static enum row_kind
row_kind(PGresult *r, int k)
{
    const unsigned char *v = (const unsigned char *)PQgetvalue(r, k, 0);

    return (enum row_kind)(v[0] << 8 | v[1]);
}

/* Run the batch's one statement and sort out what came back. */
static int
flush_main(struct store *st, char *err)
{
    struct store_lease *ls = st->ls;
    struct params p = {0};
    PGresult *r;
    char **added = NULL, **removed = NULL, *at;
    size_t nadded = 0, nremoved = 0, ntaken = 0, bytes = 0, nadds = st->each ? 0 : live_adds(st), i;
    int k, n, rc = DSJOB_OK;

    if (nadds == 0 && st->nrms == 0 && !lease_reads(ls) && !st->notify)
        return DSJOB_OK;
    if (nadds > 0 && st->nrms == 0 && !lease_reads(ls))
        return flush_adds_only(st, err);
    main_params(st, &p);
    if ((rc = run(st, pg_sql_main, &p, true, PGRES_TUPLES_OK, "writing the batch", &r, err)) !=
        DSJOB_OK)
        return rc;
    n = PQntuples(r);
    added = malloc(((size_t)n + 1) * sizeof(*added));
    removed = malloc(((size_t)n + 1) * sizeof(*removed));
    if (added == NULL || removed == NULL) {
        rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
        goto out;
    }
    for (k = 0; k < n; k++) {
        switch (row_kind(r, k)) {
        case ROW_ADDED: added[nadded++] = PQgetvalue(r, k, 1); break;
        case ROW_REMOVED: removed[nremoved++] = PQgetvalue(r, k, 1); break;
        case ROW_RELEASED: ls->nreleased++; break;
        case ROW_TAKEN:
            ntaken++;
            for (i = 1; i <= 6; i++)
                bytes += (size_t)PQgetlength(r, k, (int)i) + 1;
            break;
        case ROW_NOTIFIED: break;
        case ROW_COUNTED: break;
        }
    }
    qsort(added, nadded, sizeof(*added), store_cmp_strs);
    qsort(removed, nremoved, sizeof(*removed), store_cmp_strs);
    mark_lost(removed, nremoved, st->rms, st->nrms);
    st->due_wanted = lease_takes(ls) && ntaken < lease_asked(st, ls);
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
            if (row_kind(r, k) == ROW_TAKEN) {
                struct store_job *sj = &ls->jobs[ls->njobs++];

                take_row(r, k, sj, &at);
                if (!PQgetisnull(r, k, 13))
                    sj->deadline_ms = (int64_t)be64(PQgetvalue(r, k, 13));
            }
        qsort(ls->jobs, ls->njobs, sizeof(*ls->jobs), cmp_claimed);
    }
    if (nadds > 0)
        mark_conflicts(st, added, nadded);
out:
    free(added);
    free(removed);
    PQclear(r);
    return rc;
}

/*
 * Whether u, a rewrite of a stored job, goes with the batch's other live
 * rewrites in one statement (flush_live): it leaves the job live, and no
 * other rewrite of the batch touches that job (their order then matters).
 */
static bool
upd_live(const struct store *st, const struct pend_upd *u)
{
    size_t i;

    if (u->func || u->after || u->gone || u->state != STORE_LIVE || u->result_len > 0)
        return false;
    for (i = 0; i < st->nupds; i++)
        if (&st->upds[i] != u && !st->upds[i].func && strcmp(st->upds[i].handle, u->handle) == 0)
            return false;
    return true;
}

/*
 * The live rewrites of stored jobs (upd_live) in one statement
 * (update_live.sql): a job with a deadline that starts costs a share of
 * one UPDATE a batch, not one of its own.
 */
static int
flush_live(struct store *st, char *err)
{
    struct params p = {0};
    struct arr h, pr, at, ff, lf, nu, de, ra, dl;
    const char **done = NULL;
    size_t i, n = 0;
    PGresult *r;
    int rc, k;

    for (i = 0; i < st->nupds; i++)
        n += upd_live(st, &st->upds[i]);
    if (n == 0)
        return DSJOB_OK;
    arr_init(&h, OID_TEXT);
    arr_init(&pr, OID_INT2);
    arr_init(&at, OID_INT8);
    arr_init(&ff, OID_INT8);
    arr_init(&lf, OID_INT8);
    arr_init(&nu, OID_INT8);
    arr_init(&de, OID_INT8);
    arr_init(&ra, OID_INT8);
    arr_init(&dl, OID_INT8);
    for (i = 0; i < st->nupds; i++) {
        const struct pend_upd *u = &st->upds[i];

        if (!upd_live(st, u))
            continue;
        arr_put(&h, u->handle, strlen(u->handle));
        arr_int(&pr, u->prio, 2);
        arr_int(&at, u->attempts, 8);
        arr_int(&ff, u->first_fail, 8);
        arr_int(&lf, u->last_fail, 8);
        arr_int(&nu, u->numerator, 8);
        arr_int(&de, u->denominator, 8);
        arr_int(&ra, u->when > 0 ? u->when : 0, 8);
        arr_int(&dl, u->deadline_ms, 8);
    }
    par_arr(&p, &h, OID_TEXT_ARRAY);
    par_arr(&p, &pr, OID_INT2_ARRAY);
    par_arr(&p, &at, OID_INT8_ARRAY);
    par_arr(&p, &ff, OID_INT8_ARRAY);
    par_arr(&p, &lf, OID_INT8_ARRAY);
    par_arr(&p, &nu, OID_INT8_ARRAY);
    par_arr(&p, &de, OID_INT8_ARRAY);
    par_arr(&p, &ra, OID_INT8_ARRAY);
    par_arr(&p, &dl, OID_INT8_ARRAY);
    par_text(&p, st->owner, strlen(st->owner));
    if ((rc = run(st, pg_sql_update_live, &p, false, PGRES_TUPLES_OK, "rewriting jobs", &r, err)) !=
        DSJOB_OK)
        return rc;
    /* A rewrite whose row is missing: the row was no longer this server's. */
    if (PQntuples(r) < (int)n &&
        (done = malloc(((size_t)PQntuples(r) + 1) * sizeof(*done))) == NULL) {
        PQclear(r);
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    for (k = 0; done != NULL && k < PQntuples(r); k++)
        done[k] = PQgetvalue(r, k, 0);
    if (done != NULL)
        qsort(done, (size_t)PQntuples(r), sizeof(*done), store_cmp_strs);
    for (i = 0; i < st->nupds; i++) {
        struct pend_upd *u = &st->upds[i];
        const char *key = u->handle;

        if (u->lost != NULL && upd_live(st, u))
            *u->lost = done != NULL && bsearch(&key, done, (size_t)PQntuples(r), sizeof(*done),
                                               store_cmp_strs) == NULL;
    }
    free(done);
    PQclear(r);
    return DSJOB_OK;
}

/*
 * The batch's rewrites and function settings, one statement each (they
 * are few), but the live rewrites of stored jobs, which go in one
 * (flush_live): with after false those of jobs already stored (before the
 * main statement, which may delete them), with after true those of jobs
 * this batch adds (after it). A job's rewrite applies only to a row this
 * server holds; one of a row this batch made is its own.
 */
static int
flush_updates(struct store *st, bool after, char *err)
{
    size_t i;
    int rc;

    if (!after && (rc = flush_live(st, err)) != DSJOB_OK)
        return rc;
    for (i = 0; i < st->nupds; i++) {
        struct pend_upd *u = &st->upds[i];
        struct params p = {0};
        const char *sql;
        PGresult *r;

        if (u->after != after || u->gone || upd_live(st, u))
            continue;
        if (u->func && u->retries == 0 && u->backoff_base_ms == 0 && u->backoff_max_ms == 0) {
            sql = pg_sql_func_delete;
            par_text(&p, u->handle, strlen(u->handle));
        } else if (u->func) {
            sql = pg_sql_func_set;
            par_text(&p, u->handle, strlen(u->handle));
            par_int(&p, u->retries);
            par_int(&p, u->backoff_base_ms);
            par_int(&p, u->backoff_max_ms);
        } else {
            sql = pg_sql_update_job;
            par_int(&p, u->prio);
            par_int(&p, u->state);
            par_int(&p, u->attempts);
            par_int(&p, u->first_fail);
            par_int(&p, u->last_fail);
            par_int(&p, u->numerator);
            par_int(&p, u->denominator);
            par_int(&p, u->when > 0 ? u->when : 0);
            par_bytea(&p, u->result_len > 0 ? u->result : NULL, u->result_len);
            par_text(&p, u->handle, strlen(u->handle));
            par_text_or_null(&p, after ? NULL : st->owner);
            par_int(&p, u->deadline_ms);
        }
        if ((rc = run(st, sql, &p, false, PGRES_COMMAND_OK,
                      u->func ? "setting a function" : "rewriting a job", &r, err)) != DSJOB_OK)
            return rc;
        if (u->lost != NULL)
            *u->lost = !after && strcmp(PQcmdTuples(r), "0") == 0;
        PQclear(r);
        if (u->func && u->flow != NULL) {
            struct params q = {0};

            par_text(&q, u->handle, strlen(u->handle));
            if (u->flow[0] != '\0')
                par_text(&q, u->flow, strlen(u->flow));
            if ((rc = run_ok(st, u->flow[0] != '\0' ? pg_sql_flow_set : pg_sql_flow_delete, &q,
                             "setting a function", err)) != DSJOB_OK)
                return rc;
            /* The other servers read the settings again once this commits. */
            q = (struct params){0};
            if ((rc = run(st, pg_sql_flow_notify, &q, false, PGRES_TUPLES_OK,
                          "telling of a function's settings", &r, err)) != DSJOB_OK)
                return rc;
            PQclear(r);
        }
    }
    return DSJOB_OK;
}

/*
 * The functions with jobs ready in the table under no server's lease, and
 * how many of each: work that no server has taken, whether or not any
 * has a worker for it. Read at each renewal (every third of --pg-lease),
 * into ls->waiting behind the held handles.
 */
static PGresult *
read_waiting(struct store *st, char *err)
{
    struct params p = {0};
    PGresult *r;

    if (run(st, pg_sql_waiting, &p, false, PGRES_TUPLES_OK, "counting the jobs waiting", &r, err) !=
        DSJOB_OK)
        return NULL;
    return r;
}

static int
flush_renew(struct store *st, struct store_lease *ls, char *err)
{
    struct params p = {0};
    PGresult *r, *w;
    size_t bytes = 0;
    int n, k, rc = DSJOB_OK;
    char *at;

    if (!ls->renew)
        return DSJOB_OK;
    par_int(&p, st->lease);
    par_text(&p, st->owner, strlen(st->owner));
    if ((rc = run(st, pg_sql_renew, &p, false, PGRES_TUPLES_OK, "renewing leases", &r, err)) !=
        DSJOB_OK)
        return rc;
    if ((w = read_waiting(st, err)) == NULL) {
        PQclear(r);
        return DSJOB_ERR_STORE;
    }
    n = PQntuples(r);
    for (k = 0; k < n; k++)
        bytes += (size_t)PQgetlength(r, k, 0) + 1;
    for (k = 0; k < PQntuples(w); k++)
        bytes += (size_t)PQgetlength(w, k, 0) + (size_t)PQgetlength(w, k, 1) + 2;
    ls->held = malloc(bytes + 1);
    if (ls->held == NULL) {
        PQclear(r);
        PQclear(w);
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
    ls->waiting = at;
    for (k = 0; k < PQntuples(w); k++) {
        size_t len = (size_t)PQgetlength(w, k, 0), clen = (size_t)PQgetlength(w, k, 1);

        memcpy(at, PQgetvalue(w, k, 0), len + 1);
        at += len + 1;
        memcpy(at, PQgetvalue(w, k, 1), clen + 1);
        at += clen + 1;
    }
    ls->nwaiting = (size_t)PQntuples(w);
    PQclear(w);
    /*
     * When the first lease of another server runs out: the server takes
     * that job then, not at its next poll. Leased rows are few (the
     * partial index jobs_owner holds only them).
     */
    par_text(&p, st->owner, strlen(st->owner));
    if ((rc = run(st, pg_sql_expiry, &p, false, PGRES_TUPLES_OK, "reading lease expiries", &r,
                  err)) != DSJOB_OK)
        return rc;
    if (PQntuples(r) == 1)
        ls->expiry_ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    /* Jobs past their deadline under no live lease: to the dead set, and taken just below. */
    if ((rc = run_ok(st, pg_sql_expire, &p, "expiring jobs", err)) != DSJOB_OK)
        return rc;
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

    for (i = 0; i < st->nadds; i++)
        free(st->adds[i].handle);
    st->nadds = 0;
    for (i = 0; i < st->nrms; i++) {
        if (ok) {
            free(st->rms[i].handle);
            continue;
        }
        st->rms[keep].handle = st->rms[i].handle; /* owed: the next batch deletes it */
        st->rms[keep].outcome = st->rms[i].outcome;
        st->rms[keep++].lost = NULL;
    }
    st->nrms = keep;
    for (i = 0; i < st->nupds; i++) {
        free(st->upds[i].handle);
        free(st->upds[i].result);
        free(st->upds[i].flow);
    }
    st->nupds = 0;
    for (i = 0; i < st->ndeps; i++)
        free(st->deps[i].child);
    st->ndeps = 0;
    st->ls = NULL;
    st->notify = false;
    st->due_wanted = false;
    st->each = false;
}

static bool
conn_lost(const struct store *st)
{
    return st->db == NULL || PQstatus(st->db) == CONNECTION_BAD;
}

/* Whether the open batch is submits alone (flush_main sends flush_adds_only's INSERT). */
static bool
adds_only(const struct store *st)
{
    return live_adds(st) > 0 && st->nrms == 0 && !lease_reads(st->ls);
}

/*
 * A batch of submits alone whose connection broke before its answer: it
 * may have committed or not. Connect again and look for its rows: if any
 * is there it committed (an add whose row is missing coalesced onto a live
 * job, as RETURNING would have said); if none is, it is sent again, which
 * is what it would have done had it committed with every add coalesced
 * (ON CONFLICT DO NOTHING). One case runs a job twice: a row another
 * server took, ran and deleted before this check (at least once). Adds
 * that join batches (add.sql joined them) too: a member whose row is
 * missing from a batch that committed was refused, its batch not open,
 * unless its batch was open then and it has a unique key that a live job
 * holds (it coalesced onto that one), as add.sql says.
 */
/*
 * Whether a's batch was open when the adds' statement committed, as
 * add.sql saw it: an add of the same batch has its row (it was inserted),
 * or the batch is open now. A batch opened since the commit (first, or
 * again after a drop) counts as open too: the member then gets the answer
 * add.sql would give it now, which its submitter may get, having had none
 * before the open (and a member that coalesces is counted in no batch).
 */
static int
member_batch_was_open(struct store *st, const struct pend_add *a, bool *open, char *err)
{
    struct params p = {0};
    PGresult *r;
    size_t i;
    int rc;

    *open = false;
    for (i = 0; i < st->nadds; i++) {
        const struct pend_add *o = &st->adds[i];

        if (o != a && !o->gone && !o->conflict && o->batch != NULL &&
            strcmp(o->batch, a->batch) == 0) {
            *open = true;
            return DSJOB_OK;
        }
    }
    par_text(&p, a->batch, strlen(a->batch));
    if ((rc = run(st, pg_sql_batch_read, &p, false, PGRES_TUPLES_OK, "reading a batch", &r, err)) !=
        DSJOB_OK)
        return rc;
    /* batch_read.sql's eighth column: closed. */
    *open = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 7), "f") == 0;
    PQclear(r);
    return DSJOB_OK;
}

/*
 * A batch member missing from a batch of adds that committed: coalesced
 * onto the live job of its unique key if its batch was open (a->conflict
 * stays: pg_flush's find_alias finds that job, or, if it ended since,
 * inserts the member again, joining its batch if open, as after a commit
 * whose answer came), or refused, its batch not open: add.sql inserts,
 * or lets coalesce, only a member of an open batch.
 */
static int
recover_member(struct store *st, struct pend_add *a, char *err)
{
    bool open = false;
    int rc;

    if (a->uniq != NULL && (rc = member_batch_was_open(st, a, &open, err)) != DSJOB_OK)
        return rc;
    if (!open)
        member_refused(a);
    return DSJOB_OK;
}

static int
recover_adds(struct store *st, char *err)
{
    struct params p = {0};
    struct arr a;
    char **there = NULL;
    PGresult *r;
    size_t i;
    int k, n, rc;

    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        return rc;
    arr_init(&a, OID_TEXT);
    for (i = 0; i < st->nadds; i++)
        if (!st->adds[i].gone)
            arr_put(&a, st->adds[i].handle, strlen(st->adds[i].handle));
    par_arr(&p, &a, OID_TEXT_ARRAY);
    if ((rc = run(st, pg_sql_recover, &p, false, PGRES_TUPLES_OK,
                  "checking a batch after a lost connection", &r, err)) != DSJOB_OK)
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
    mark_conflicts(st, there, (size_t)n);
    free(there);
    PQclear(r);
    for (i = 0; i < st->nadds && rc == DSJOB_OK; i++)
        if (st->adds[i].conflict && st->adds[i].batch != NULL)
            rc = recover_member(st, &st->adds[i], err);
    return rc;
}

/*
 * In a transaction that rewrites jobs, or whose adds join batches (batches)
 * and that also rewrites or removes jobs or writes its adds one by one
 * (add.sql joining each in the adds' order): lock the batches its rewrites and removes may
 * end members of, and those its adds join, in the order of their ids
 * (batch_lock.sql), before any of them.
 */
static int
lock_batches(struct store *st, bool batches, char *err)
{
    struct params p = {0};
    struct arr a, b;
    PGresult *r;
    size_t i, n = 0;
    int rc;

    for (i = 0; i < st->nupds; i++)
        n += !st->upds[i].func && !st->upds[i].after && !st->upds[i].gone;
    batches = batches && (n > 0 || st->nrms > 0 || st->each);
    if (n == 0 && !batches)
        return DSJOB_OK; /* main.sql's ends, or batch_join.sql, lock in that order themselves */
    arr_init(&a, OID_TEXT);
    for (i = 0; i < st->nupds; i++)
        if (!st->upds[i].func && !st->upds[i].after && !st->upds[i].gone)
            arr_put(&a, st->upds[i].handle, strlen(st->upds[i].handle));
    for (i = 0; i < st->nrms; i++)
        arr_put(&a, st->rms[i].handle, strlen(st->rms[i].handle));
    par_arr(&p, &a, OID_TEXT_ARRAY);
    arr_init(&b, OID_TEXT);
    for (i = 0; batches && i < st->nadds; i++)
        if (!st->adds[i].gone && st->adds[i].batch != NULL)
            arr_put(&b, st->adds[i].batch, strlen(st->adds[i].batch));
    par_arr(&p, &b, OID_TEXT_ARRAY);
    if ((rc = run(st, pg_sql_batch_lock, &p, false, PGRES_TUPLES_OK, "locking batches", &r, err)) !=
        DSJOB_OK)
        return rc;
    PQclear(r);
    return DSJOB_OK;
}

/* Whether the last statement failed for a deadlock or a serialization failure. */
static bool
lock_conflict(const struct store *st)
{
    return strcmp(st->sqlstate, "40P01") == 0 || strcmp(st->sqlstate, "40001") == 0;
}

/*
 * Write the open batch once: one statement when it can be (adds,
 * removes, the lease's take, the NOTIFY: flush_main, in autocommit; adds
 * alone that join batches, add.sql); a transaction around it when the
 * batch also rewrites jobs, sets functions or renews leases, writes its
 * adds one by one (st->each), or has adds that join batches in the main
 * statement or with dependency edges (flush_joins after).
 */
static int
flush_once(struct store *st, char *err)
{
    bool capped = flow_capped(st, st->ls), deadlines = adds_deadlines(st) > 0;
    bool edges = st->ndeps > 0, batches = adds_batches(st) > 0;
    bool in_add = batches && !edges && (st->each || adds_only(st)), joins = batches && !in_add;
    bool txn = st->nupds > 0 || (st->ls != NULL && st->ls->renew) || st->each || capped ||
               deadlines || joins || edges;
    int rc;

    st->txn = txn;
    st->join_in_add = in_add;
    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        return rc;
    /* Its own transaction, first: a connection that died while idle is made again, once. */
    if (capped && (rc = key_fill(st, st->ls, err)) != DSJOB_OK &&
        (!conn_lost(st) || (rc = ensure_conn(st, err)) != DSJOB_OK ||
         (rc = key_fill(st, st->ls, err)) != DSJOB_OK))
        return rc;
    /* Nothing ran before BEGIN: a connection that died while idle is made again, once. */
    if (txn && (rc = exec_ok(st, "BEGIN", "begin", err)) != DSJOB_OK &&
        (!conn_lost(st) || (rc = ensure_conn(st, err)) != DSJOB_OK ||
         (rc = exec_ok(st, "BEGIN", "begin", err)) != DSJOB_OK))
        return rc;
    if (txn && (rc = lock_batches(st, batches, err)) != DSJOB_OK)
        goto rollback;
    /* The renew comes last, so that the leases it lists include this batch's adds and takes. */
    if (txn && (rc = flush_updates(st, false, err)) != DSJOB_OK)
        goto rollback;
    if (st->each && (rc = flush_adds_each(st, err)) != DSJOB_OK)
        goto rollback;
    if (st->ls != NULL && st->ls->read_flow && (rc = flow_read(st, st->ls, err)) != DSJOB_OK)
        goto rollback;
    if (capped && (rc = flow_before(st, st->ls, err)) != DSJOB_OK)
        goto rollback;
    if (capped)
        key_before(st, st->ls);
    rc = flush_main(st, err);
    if (rc == DSJOB_ERR_STORE && !txn && adds_only(st) && conn_lost(st))
        rc = recover_adds(st, err);
    if (rc == DSJOB_OK && deadlines)
        rc = flush_deadlines(st, err);
    /* Edges before joins: a child refused for its parents leaves no row, so
     * no batch counts it as a member that will never end. */
    if (rc == DSJOB_OK && edges)
        rc = flush_deps(st, err);
    if (rc == DSJOB_OK && joins)
        rc = flush_joins(st, err);
    /*
     * The take by key after the edges and joins: it sees this batch's adds
     * (main.sql's take, one statement, does not), so a child must be held
     * and a refused member gone first, or it would take them.
     */
    if (rc == DSJOB_OK && capped)
        rc = key_take(st, st->ls, err);
    if (rc == DSJOB_OK && capped)
        rc = flow_after(st, st->ls, err);
    if (rc != DSJOB_OK || (txn && (rc = flush_updates(st, true, err)) != DSJOB_OK) ||
        (txn && st->ls != NULL && (rc = flush_renew(st, st->ls, err)) != DSJOB_OK))
        goto rollback;
    if (txn && (rc = exec_ok(st, "COMMIT", "commit", err)) != DSJOB_OK)
        return rc;
    return DSJOB_OK;
rollback:
    if (txn && !conn_lost(st))
        PQclear(exec_wait(st, "ROLLBACK", NULL, false));
    return rc;
}

static int
pg_flush(struct store *st, char *err)
{
    double t0 = now_ms();
    size_t i;
    int rc;

    if (st->nadds == 0 && st->nrms == 0 && st->nupds == 0 && st->ls == NULL && !st->notify)
        return DSJOB_OK;
    st->sqlstate[0] = '\0';
    rc = flush_once(st, err);
    /*
     * A batch without submits (ends, rewrites, a lease op) that a deadlock
     * or a serialization failure refused rolled back whole: send it again
     * at once, --pg-conflict-retries times, rather than fail its ends for
     * a second. (One with submits goes again below, its adds one by one.)
     */
    for (i = 0; rc == DSJOB_ERR_STORE && !conn_lost(st) && lock_conflict(st) &&
                live_adds(st) == 0 && i < st->conflict_retries;
         i++) {
        if (st->ls != NULL)
            store_lease_free(st->ls);
        st->due_wanted = false;
        st->sqlstate[0] = '\0';
        rc = flush_once(st, err);
    }
    /*
     * PostgreSQL refused the batch and is still there: if it had adds, one
     * of them may be the cause (a row the checks at add did not foresee).
     * Write it again with its adds one by one, so that only such a row is
     * refused, not every submitter's of the batch.
     */
    if (rc == DSJOB_ERR_STORE && !conn_lost(st) && live_adds(st) > 0) {
        if (st->ls != NULL)
            store_lease_free(st->ls);
        st->each = true;
        st->due_wanted = false;
        rc = flush_once(st, err);
    }
    if (rc != DSJOB_OK) {
        if (st->ls != NULL)
            store_lease_free(st->ls);
        batch_reset(st, false);
        return rc;
    }
    /* Committed. */
    st->flush_ms = st->flush_ms > 0 ? 0.75 * st->flush_ms + 0.25 * (now_ms() - t0) : now_ms() - t0;
    if (st->ls != NULL && lease_takes(st->ls))
        demand_took(st, st->ls);
    /* A take that fell short learns when the next waiting job is due. */
    if (st->due_wanted && st->ls != NULL)
        read_due(st, st->ls);
    /* Adds that coalesced learn onto which job. */
    for (i = 0; i < st->nadds; i++) {
        if (!st->adds[i].conflict)
            continue;
        rc = find_alias(st, i, err);
        if (rc != DSJOB_OK)
            break; /* the batch is refused; its other adds run anyway (at-least-once) */
    }
    batch_reset(st, rc == DSJOB_OK);
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
    struct params p = {0};
    PGresult *r;
    size_t bytes = 0;
    char *at;
    int k, rc;

    *out = NULL;
    *mem = NULL;
    *n = 0;
    par_text(&p, st->owner, strlen(st->owner));
    par_int(&p, LIVE_LOCK);
    if ((rc = run(st, pg_sql_take_ended, &p, true, PGRES_TUPLES_OK,
                  "taking the dead set and kept results", &r, err)) != DSJOB_OK)
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
    unsigned tries = 0;
    int rc;

    /*
     * The take runs beside other servers' starts and renewals, which take
     * the same rows: one that PostgreSQL refused for a deadlock or a
     * serialization failure rolled back whole and goes again at once,
     * --pg-conflict-retries times, as a batch of ends does, rather than
     * end the start.
     */
    st->sqlstate[0] = '\0';
    while ((rc = take_ended(st, &jobs, &n, &mem, err)) == DSJOB_ERR_STORE && !conn_lost(st) &&
           lock_conflict(st) && tries++ < st->conflict_retries)
        st->sqlstate[0] = '\0';
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
    PGresult *r = exec_wait(st, pg_sql_funcs, NULL, false);
    int i, rc = DSJOB_OK;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = res_say(err, DSJOB_ERR_STORE, st, r, "reading function settings");
        PQclear(r);
        return rc;
    }
    for (i = 0; i < PQntuples(r); i++) {
        struct store_func sf;

        memset(&sf, 0, sizeof(sf));
        sf.name = PQgetvalue(r, i, 0);
        sf.name_len = (size_t)PQgetlength(r, i, 0);
        sf.retries = (uint32_t)strtoul(PQgetvalue(r, i, 1), NULL, 10);
        sf.backoff_base_ms = (uint32_t)strtoul(PQgetvalue(r, i, 2), NULL, 10);
        sf.backoff_max_ms = (uint32_t)strtoul(PQgetvalue(r, i, 3), NULL, 10);
        sf.flow = PQgetvalue(r, i, 4);
        sf.flow_len = (size_t)PQgetlength(r, i, 4);
        if (fn(&sf, arg) != 0)
            break;
    }
    PQclear(r);
    return rc;
}

/*
 * Batches (batch.c) several servers share: one row per batch in
 * dsjob.batches (schema_3_4.sql). The admin's ops run at once, each
 * committed on its own; the counters move in the commits of the members'
 * ends (main.sql, the trigger jobs_ended), and members join in the commit
 * of their adds (flush_joins).
 */

/*
 * Dependencies (deps.c): a child's edges go in the batch of its add, and
 * are written after it (flush_deps); the parents' ends move them in the
 * database (dsjob.ended), so no server keeps a graph and only adds (and
 * a show of a held child) are asked of this op.
 */
/* Append printf's text to sd->out, if it fits (a show's lines). */
static void __attribute__((format(printf, 2, 3)))
show_put(const struct store_dep *sd, const char *fmt, ...)
{
    size_t room = sd->out_room - *sd->out_len;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(sd->out + *sd->out_len, room, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < room)
        *sd->out_len += (size_t)n;
}

/*
 * STORE_DEP_SHOW: a child held in the table (owner '(held)') as admin
 * "show job" prints a job a server holds (admin.c's admin_show_one), its
 * unique key escaped as there, with the parents it still waits for: by
 * handle (sd->child), or by function (sd->parent) and unique key
 * (sd->child) when sd->parent is not "" (dep_show.sql).
 */
static int
dep_show(struct store *st, const struct store_dep *sd, char *err)
{
    bool by_key = sd->parent_len > 0;
    struct params p = {0};
    const char *hex;
    PGresult *r;
    size_t i, n;
    int rc;

    if (sd->out == NULL ||
        !utf8_ok(by_key ? sd->parent : sd->child, by_key ? sd->parent_len : sd->child_len))
        return DSJOB_OK;
    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        return rc;
    if (by_key) {
        par_text_or_null(&p, NULL);
        par_text(&p, sd->parent, sd->parent_len);
        par_bytea(&p, sd->child, sd->child_len);
    } else {
        par_text(&p, sd->child, sd->child_len);
        par_text_or_null(&p, NULL);
        par_bytea(&p, "", 0);
    }
    if ((rc = run(st, pg_sql_dep_show, &p, false, PGRES_TUPLES_OK, "reading a held job", &r,
                  err)) != DSJOB_OK)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return DSJOB_OK; /* not held in the table: unknown */
    }
    show_put(sd, "handle %s\nfunction %s\nstate held\npriority %s\nbackground 1\n",
             PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2));
    show_put(sd, "attempts %s\nunique ", PQgetvalue(r, 0, 3));
    hex = PQgetvalue(r, 0, 4);
    n = strlen(hex) / 2;
    for (i = 0; i < n; i++) {
        unsigned b = (unsigned)(key_hex(hex[2 * i]) * 16 + key_hex(hex[2 * i + 1]));

        if (b > 0x20 && b < 0x7f && b != '\\')
            show_put(sd, "%c", (char)b);
        else
            show_put(sd, "\\x%02x", b);
    }
    show_put(sd, "%s\nrun_at %s\npayload_size %s\nworker -\nstatus 0/0\nwaiters 0\n",
             n == 0 ? "-" : "", PQgetvalue(r, 0, 5), PQgetvalue(r, 0, 6));
    show_put(sd, "after %s\nafter_fail %s\n.\n", PQgetvalue(r, 0, 7), PQgetvalue(r, 0, 8));
    PQclear(r);
    return DSJOB_OK;
}

static int
pg_dep(struct store *st, int what, const struct store_dep *sd, char *err)
{
    struct pend_dep *d;
    char *at;

    if (what == STORE_DEP_SHOW)
        return dep_show(st, sd, err);
    if (what != STORE_DEP_ADD)
        return DSJOB_OK; /* ends and forgets happen in the database */
    if (!utf8_ok(sd->child, sd->child_len) || !utf8_ok(sd->parent, sd->parent_len))
        return store_say(err, DSJOB_ERR_ARG, "postgres: a handle must be UTF-8 text");
    if (grow((void **)&st->deps, st->ndeps, &st->deps_cap, sizeof(*st->deps)) < 0 ||
        (at = malloc(sd->child_len + sd->parent_len + 2)) == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    d = &st->deps[st->ndeps++];
    d->child = at;
    memcpy(at, sd->child, sd->child_len);
    at[sd->child_len] = '\0';
    d->parent = at + sd->child_len + 1;
    memcpy(d->parent, sd->parent, sd->parent_len);
    d->parent[sd->parent_len] = '\0';
    d->policy = sd->policy;
    return DSJOB_OK;
}

/* Row k of batch_read.sql or batch_open.sql (text format) as sb, its strings r's. */
static void
pg_batch_row(PGresult *r, int k, struct store_batch *sb)
{
    memset(sb, 0, sizeof(*sb));
    sb->id = PQgetvalue(r, k, 0);
    sb->id_len = (size_t)PQgetlength(r, k, 0);
    sb->on_complete = PQgetvalue(r, k, 1);
    sb->on_complete_len = (size_t)PQgetlength(r, k, 1);
    sb->on_success = PQgetvalue(r, k, 2);
    sb->on_success_len = (size_t)PQgetlength(r, k, 2);
    sb->total = strtoull(PQgetvalue(r, k, 3), NULL, 10);
    sb->done = strtoull(PQgetvalue(r, k, 4), NULL, 10);
    sb->failed_n = strtoull(PQgetvalue(r, k, 5), NULL, 10);
    sb->dead = strtoull(PQgetvalue(r, k, 6), NULL, 10);
    sb->closed = PQgetvalue(r, k, 7)[0] == 't';
    sb->fired_complete = PQgetvalue(r, k, 8)[0] == 't';
    sb->fired_success = PQgetvalue(r, k, 9)[0] == 't';
    sb->created = strtoll(PQgetvalue(r, k, 10), NULL, 10);
    sb->failed = PQgetvalue(r, k, 11);
    sb->failed_len = (size_t)PQgetlength(r, k, 11);
}

static int
pg_batch_admin(struct store *st, int what, const struct store_batch *sb, store_batch_fn *fn,
               void *arg, char *err)
{
    struct params p = {0};
    const char *sql;
    PGresult *r;
    int k, rc;

    if (!utf8_ok(sb->id, sb->id_len) || !utf8_ok(sb->on_complete, sb->on_complete_len) ||
        !utf8_ok(sb->on_success, sb->on_success_len))
        return store_say(err, DSJOB_ERR_ARG, "postgres: a batch's names must be UTF-8 text");
    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        return rc;
    switch (what) {
    case STORE_BATCH_OPEN:
        sql = pg_sql_batch_open;
        par_text(&p, sb->id, sb->id_len);
        par_text(&p, sb->on_complete, sb->on_complete_len);
        par_text(&p, sb->on_success, sb->on_success_len);
        break;
    case STORE_BATCH_CLOSE:
        sql = "SELECT dsjob.batch_close($1::text)";
        par_text(&p, sb->id, sb->id_len);
        break;
    case STORE_BATCH_DROP:
        sql = "SELECT dsjob.batch_drop($1::text)";
        par_text(&p, sb->id, sb->id_len);
        break;
    case STORE_BATCH_STATUS:
    case STORE_BATCH_LIST:
        sql = pg_sql_batch_read;
        if (what == STORE_BATCH_STATUS)
            par_text(&p, sb->id, sb->id_len);
        else
            par_text_or_null(&p, NULL);
        break;
    default: return store_say(err, DSJOB_ERR_ARG, "postgres: unknown batch op %d", what);
    }
    if ((rc = run(st, sql, &p, false, PGRES_TUPLES_OK, "a batch's admin command", &r, err)) !=
        DSJOB_OK)
        return rc;
    for (k = 0; k < PQntuples(r) && rc == DSJOB_OK; k++) {
        struct store_batch row;

        if (what == STORE_BATCH_CLOSE || what == STORE_BATCH_DROP) {
            if (PQgetvalue(r, k, 0)[0] != 't')
                continue; /* no such batch */
            row = *sb;
        } else {
            pg_batch_row(r, k, &row);
        }
        if (fn(&row, arg) != 0)
            rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
    }
    PQclear(r);
    return rc;
}

/*
 * Schedules (schedule.c): one row per name in dsjob.schedules, which every
 * server sharing the database reads. The table is an addition beside the
 * schema (made by the first schedule op, under the schema's lock), not a
 * version of it: servers without schedules never make it (sched_list only
 * looks whether it exists). Each op is a statement of its own, committed
 * at once, outside the batch: a claim must be decided for all servers
 * before the tick's job is submitted.
 */
#define SCHED_TABLE                                                                                \
    "CREATE TABLE IF NOT EXISTS dsjob.schedules ("                                                 \
    " name text PRIMARY KEY,"                                                                      \
    " cron text NOT NULL,"                                                                         \
    " tz text NOT NULL,"                                                                           \
    " func text NOT NULL,"                                                                         \
    " data bytea NOT NULL,"                                                                        \
    " prio integer NOT NULL,"                                                                      \
    " catch_up boolean NOT NULL,"                                                                  \
    " paused boolean NOT NULL,"                                                                    \
    " last_tick bigint NOT NULL DEFAULT 0)" /* epoch seconds of the last tick fired */

static const char *const pg_sched_sql[] = {
    [STORE_SCHED_SET] = "INSERT INTO dsjob.schedules (name, cron, tz, func, data, prio, catch_up,"
                        " paused) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO"
                        " UPDATE SET cron = $2, tz = $3, func = $4, data = $5, prio = $6,"
                        " catch_up = $7, paused = $8",
    [STORE_SCHED_DELETE] = "DELETE FROM dsjob.schedules WHERE name = $1",
    [STORE_SCHED_CLAIM] = "UPDATE dsjob.schedules SET last_tick = $2 WHERE name = $1 AND"
                          " last_tick < $2",
};

static int
sched_table(struct store *st, char *err)
{
    char sql[128];
    int rc;

    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        return rc;
    if (st->sched_made)
        return DSJOB_OK;
    if ((rc = exec_ok(st, "BEGIN", "begin", err)) != DSJOB_OK)
        return rc;
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%lld)", (long long)SCHEMA_LOCK);
    if ((rc = exec_ok(st, sql, "locking the schema", err)) != DSJOB_OK ||
        (rc = exec_ok(st, SCHED_TABLE, "making dsjob.schedules", err)) != DSJOB_OK) {
        PQclear(exec_wait(st, "ROLLBACK", NULL, false));
        return rc;
    }
    if ((rc = exec_ok(st, "COMMIT", "committing dsjob.schedules", err)) == DSJOB_OK)
        st->sched_made = true;
    return rc;
}

static int
pg_sched(struct store *st, int what, const struct store_sched *ss, bool *claimed, char *err)
{
    struct params p = {0};
    PGresult *r;
    int rc;

    *claimed = false;
    if (what < STORE_SCHED_SET || what > STORE_SCHED_CLAIM)
        return store_say(err, DSJOB_ERR_ARG, "postgres: unknown schedule op %d", what);
    if (!utf8_ok(ss->name, ss->name_len) || !utf8_ok(ss->cron, ss->cron_len) ||
        !utf8_ok(ss->tz, ss->tz_len) || !utf8_ok(ss->func, ss->func_len))
        return store_say(err, DSJOB_ERR_ARG, "postgres: a schedule's names must be UTF-8 text");
    if ((rc = sched_table(st, err)) != DSJOB_OK)
        return rc;
    par_text(&p, ss->name, ss->name_len);
    if (what == STORE_SCHED_SET) {
        par_text(&p, ss->cron, ss->cron_len);
        par_text(&p, ss->tz, ss->tz_len);
        par_text(&p, ss->func, ss->func_len);
        par_bytea(&p, ss->data, ss->data_len);
        par_int(&p, ss->prio);
        par_bool(&p, ss->catch_up);
        par_bool(&p, ss->paused);
    } else if (what == STORE_SCHED_CLAIM) {
        par_int(&p, ss->last_tick);
    }
    rc = run(st, pg_sched_sql[what], &p, false, PGRES_COMMAND_OK, "writing a schedule", &r, err);
    if (rc == DSJOB_OK)
        *claimed = what == STORE_SCHED_CLAIM && strcmp(PQcmdTuples(r), "1") == 0;
    PQclear(r);
    return rc;
}

/* A tick's claim and its job in one statement (sched_fire.sql), committed on its own. */
static int
pg_sched_fire(struct store *st, const struct store_sched *ss, const struct store_job *sj,
              bool *claimed, char *err)
{
    struct params p = {0};
    PGresult *r;
    int rc;

    *claimed = false;
    if (!utf8_ok(ss->name, ss->name_len) || !utf8_ok(sj->func, sj->func_len) ||
        !utf8_ok(sj->handle, sj->handle_len))
        return store_say(err, DSJOB_ERR_ARG, "postgres: a schedule's names must be UTF-8 text");
    if ((rc = sched_table(st, err)) != DSJOB_OK)
        return rc;
    par_text(&p, ss->name, ss->name_len);
    par_int(&p, ss->last_tick);
    par_text(&p, sj->handle, sj->handle_len);
    par_text(&p, sj->func, sj->func_len);
    par_bytea(&p, sj->unique_len > 0 ? sj->unique : NULL, sj->unique_len);
    par_bytea(&p, sj->data, sj->data_len);
    par_int(&p, sj->prio);
    rc =
        run(st, pg_sql_sched_fire, &p, false, PGRES_TUPLES_OK, "firing a schedule's tick", &r, err);
    if (rc == DSJOB_OK)
        *claimed = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "1") == 0;
    PQclear(r);
    return rc;
}

static int
pg_sched_list(struct store *st, store_sched_fn *fn, void *arg, char *err)
{
    struct params p = {0};
    PGresult *r;
    int i, rc;

    if ((rc = ensure_conn(st, err)) != DSJOB_OK)
        return rc;
    if (!st->sched_made) {
        /* No table yet: no schedule was ever made, and reading makes none. */
        r = exec_wait(st, "SELECT to_regclass('dsjob.schedules') IS NOT NULL", NULL, false);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            rc = res_say(err, DSJOB_ERR_STORE, st, r, "reading the schedules");
            PQclear(r);
            return rc;
        }
        st->sched_made = PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        if (!st->sched_made)
            return DSJOB_OK;
    }
    rc = run(st,
             "SELECT name, cron, tz, func, data, prio, catch_up, paused, last_tick"
             " FROM dsjob.schedules ORDER BY name",
             &p, true, PGRES_TUPLES_OK, "reading the schedules", &r, err);
    if (rc != DSJOB_OK)
        return rc;
    for (i = 0; i < PQntuples(r); i++) {
        struct store_sched ss;
        const unsigned char *v;

        memset(&ss, 0, sizeof(ss));
        ss.name = PQgetvalue(r, i, 0);
        ss.name_len = (size_t)PQgetlength(r, i, 0);
        ss.cron = PQgetvalue(r, i, 1);
        ss.cron_len = (size_t)PQgetlength(r, i, 1);
        ss.tz = PQgetvalue(r, i, 2);
        ss.tz_len = (size_t)PQgetlength(r, i, 2);
        ss.func = PQgetvalue(r, i, 3);
        ss.func_len = (size_t)PQgetlength(r, i, 3);
        ss.data = PQgetvalue(r, i, 4);
        ss.data_len = (size_t)PQgetlength(r, i, 4);
        v = (const unsigned char *)PQgetvalue(r, i, 5); /* binary int4 */
        ss.prio = (int)((uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8 | v[3]);
        ss.catch_up = PQgetvalue(r, i, 6)[0] != 0;
        ss.paused = PQgetvalue(r, i, 7)[0] != 0;
        v = (const unsigned char *)PQgetvalue(r, i, 8); /* binary int8 */
        ss.last_tick =
            (int64_t)((uint64_t)v[0] << 56 | (uint64_t)v[1] << 48 | (uint64_t)v[2] << 40 |
                      (uint64_t)v[3] << 32 | (uint64_t)v[4] << 24 | (uint64_t)v[5] << 16 |
                      (uint64_t)v[6] << 8 | v[7]);
        if (fn(&ss, arg) != 0) {
            rc = store_say(err, DSJOB_ERR_NOMEM, "postgres: out of memory");
            break;
        }
    }
    PQclear(r);
    return rc;
}

/*
 * Wait for the LISTEN connection's socket or stop_fd: 1 ready, 0 stop_fd,
 * -1 ms passed (ms < 0: no limit) or poll failed.
 */
static int
listen_wait(struct store *st, short events, int stop_fd, int64_t end)
{
    for (;;) {
        struct pollfd pfd[2] = {{PQsocket(st->listen), events, 0}, {stop_fd, POLLIN, 0}};
        int64_t left = end >= 0 ? end - mono_ms() : -1;
        int rc;

        if (end >= 0 && left <= 0)
            return -1;
        rc = poll(pfd, 2, (int)left);
        if (rc < 0 && errno != EINTR)
            return -1;
        if (rc > 0 && pfd[1].revents != 0)
            return 0;
        if (rc > 0 && pfd[0].revents != 0)
            return 1;
    }
}

/*
 * Make the LISTEN connection: made and LISTEN sent without blocking, so
 * that stop_fd ends the wait at once even when the database does not
 * answer (a thread the server joins as it stops). 1: listening; 0:
 * stop_fd; -1: err says why.
 */
static int
listen_connect(struct store *st, int stop_fd, char *err)
{
    PostgresPollingStatusType s = PGRES_POLLING_WRITING;
    int64_t end;
    PGresult *r;
    bool ok = true;
    int rc;

    if (st->listen != NULL)
        PQfinish(st->listen);
    st->listen = PQconnectStartParams((const char *const *)st->kw, (const char *const *)st->val, 1);
    if (st->listen == NULL || PQstatus(st->listen) == CONNECTION_BAD) {
        pg_say(err, DSJOB_ERR_STORE, st->listen, "cannot connect to LISTEN");
        return -1;
    }
    end = mono_ms() + connect_ms(st->listen);
    while (s != PGRES_POLLING_OK) {
        if (s == PGRES_POLLING_FAILED) {
            pg_say(err, DSJOB_ERR_STORE, st->listen, "cannot connect to LISTEN");
            return -1;
        }
        rc = listen_wait(st, s == PGRES_POLLING_READING ? POLLIN : POLLOUT, stop_fd, end);
        if (rc <= 0) {
            if (rc < 0)
                store_say(err, DSJOB_ERR_STORE,
                          "postgres: cannot connect to LISTEN: no answer within the connect "
                          "timeout");
            return rc;
        }
        s = PQconnectPoll(st->listen);
    }
    PQsetNoticeProcessor(st->listen, quiet, NULL);
    if (!PQsendQuery(st->listen, "LISTEN dsjob")) {
        pg_say(err, DSJOB_ERR_STORE, st->listen, "listen");
        return -1;
    }
    while (PQisBusy(st->listen)) {
        rc = listen_wait(st, POLLIN, stop_fd, end);
        if (rc < 0)
            store_say(err, DSJOB_ERR_STORE,
                      "postgres: listen: no answer within the connect timeout");
        if (rc <= 0)
            return rc;
        if (!PQconsumeInput(st->listen))
            break;
    }
    while ((r = PQgetResult(st->listen)) != NULL) {
        ok = ok && PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
    }
    if (!ok) {
        pg_say(err, DSJOB_ERR_STORE, st->listen, "listen");
        return -1;
    }
    return 1; /* jobs may have come while it was not listening */
}

static int
pg_wait_notify(struct store *st, int stop_fd, char *err)
{
    struct pollfd pfd[2];
    PGnotify *n;

    if (st->listen == NULL || PQstatus(st->listen) != CONNECTION_OK) {
        int rc = listen_connect(st, stop_fd, err);

        if (rc < 0 && st->listen != NULL) {
            PQfinish(st->listen);
            st->listen = NULL;
        }
        return rc;
    }
    for (;;) {
        bool told = false, flow = false;

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
            flow = flow || (n->extra != NULL && strcmp(n->extra, "flow") == 0);
            PQfreemem(n);
        }
        if (told)
            return flow ? 2 : 1;
    }
}

/*
 * dsjobd is stopping (any thread): from now on the writer gives the
 * database --pg-stop-grace-ms to answer, then gives up its statement and
 * its connection, so that a stop ends in bounded time even when the
 * connection hangs.
 */
static void
pg_stop(struct store *st)
{
    char byte = 1;

    if (st->stop_ms == 0)
        st->stop_ms = mono_ms();
    if (write(st->wake[1], &byte, 1) < 0) {
        /* A full pipe already wakes the writer. */
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
        struct params p = {0};

        (void)pg_flush(st, err);
        par_text(&p, st->owner, strlen(st->owner));
        if (st->db != NULL) {
            PGresult *r;

            if (run(st, pg_sql_give_back, &p, false, PGRES_TUPLES_OK, "giving leases back", &r,
                    err) == DSJOB_OK)
                PQclear(r);
        } else {
            params_free(&p);
        }
    }
    batch_reset(st, true);
    for (i = 0; i < st->nrms; i++)
        free(st->rms[i].handle);
    free(st->rms);
    free(st->adds);
    for (i = 0; i <= AC_N; i++)
        free(st->add_bufs[i].p);
    free(st->upds);
    free(st->deps);
    free(st->take);
    free(st->granted);
    free(st->ktake);
    for (i = 0; i < PG_DEMAND_MAX; i++)
        free(st->demand[i].func);
    if (st->db != NULL)
        PQfinish(st->db);
    if (st->listen != NULL)
        PQfinish(st->listen);
    for (i = 0; st->kw != NULL && st->kw[i] != NULL; i++) {
        free(st->kw[i]);
        free(st->val[i]);
    }
    free(st->kw);
    free(st->val);
    if (st->wake[0] >= 0)
        close(st->wake[0]);
    if (st->wake[1] >= 0)
        close(st->wake[1]);
    free(st->owner);
    free(st);
}

const struct store_ops store_postgres_ops = {
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
    .stop = pg_stop,
    .sched = pg_sched,
    .sched_list = pg_sched_list,
    .sched_fire = pg_sched_fire,
    .batch_admin = pg_batch_admin,
    .dep = pg_dep,
};
