/*
 * Fuzz the SQLite store's open and replay path: what dsjobd reads back
 * from its database at start. The first input byte picks how the input
 * becomes the database file: rows (the rest is decoded into values bound
 * to every column of the jobs table of a fresh database, and optionally
 * a user_version), a fresh database with the input written over it at an
 * offset (a torn or corrupt file), or the whole file. A server is then
 * made on that directory and bound, which opens the store and replays
 * every row into its queue. Refusing the file is fine; crashing, leaking
 * or queueing a job that breaks the server's invariants is not.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include <dsjob/server.h>

#include "fuzz.h"

#define MAX_COLS 32

static char dir[64];
static char db[96];
static char sock[96];        /* the server must listen on something */
static unsigned char *fresh; /* a database with the schema and no rows */
static size_t fresh_len;
static int ncols; /* columns of the jobs table */

static void
remove_db(void)
{
    char p[128];

    unlink(db);
    snprintf(p, sizeof(p), "%s-wal", db);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", db);
    unlink(p);
    snprintf(p, sizeof(p), "%s-journal", db);
    unlink(p);
}

static void
cleanup(void)
{
    remove_db();
    unlink(sock);
    rmdir(dir);
}

static void
write_db(const void *data, size_t len)
{
    FILE *fp = fopen(db, "wb");

    if (fp == NULL || (len > 0 && fwrite(data, 1, len, fp) != len) || fclose(fp) != 0)
        abort();
}

/*
 * Open a server on dir, which replays the store; DSJOB_OK or the failure,
 * whose text goes to why when it is not NULL.
 */
static int
open_server(char *why, size_t why_len)
{
    struct dsjob_server_config cfg;
    struct dsjob_server *s;
    char err[256];
    int rc;

    dsjob_server_config_init(&cfg);
    cfg.port = -1;
    cfg.unix_socket = sock;
    cfg.log_file = "none";
    cfg.store = "sqlite";
    cfg.work_dir = dir;
    cfg.store_sync = 0;
    cfg.job_handle_prefix = "H:f";
    s = dsjob_server_new(&cfg, err, sizeof(err));
    if (s == NULL)
        abort();
    rc = dsjob_server_bind(s);
    if (rc != DSJOB_OK && why != NULL)
        snprintf(why, why_len, "%s", dsjob_server_errmsg(s));
    dsjob_server_free(s);
    return rc;
}

static void
setup(void)
{
    sqlite3 *h;
    sqlite3_stmt *stmt;
    char why[512];
    FILE *fp;
    long len;

    /* In memory where there is a tmpfs: the target writes a file per input. */
    snprintf(dir, sizeof(dir), "%s/dsjob-fuzzstore-%ld",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (long)getpid());
    snprintf(db, sizeof(db), "%s/dsjobd.db", dir);
    snprintf(sock, sizeof(sock), "%s/sock", dir);
    remove_db();
    atexit(cleanup);
    if (open_server(why, sizeof(why)) != DSJOB_OK) {
        fprintf(stderr, "fuzz_store: a fresh store does not open: %s\n", why);
        abort();
    }
    fp = fopen(db, "rb");
    if (fp == NULL || fseek(fp, 0, SEEK_END) != 0 || (len = ftell(fp)) <= 0)
        abort();
    rewind(fp);
    fresh_len = (size_t)len;
    fresh = malloc(fresh_len);
    if (fresh == NULL || fread(fresh, 1, fresh_len, fp) != fresh_len)
        abort();
    fclose(fp);
    /* The columns are asked of the file, so the target follows the schema. */
    if (sqlite3_open(db, &h) != SQLITE_OK ||
        sqlite3_prepare_v2(h, "PRAGMA table_info(jobs)", -1, &stmt, NULL) != SQLITE_OK)
        abort();
    while (sqlite3_step(stmt) == SQLITE_ROW)
        ncols++;
    sqlite3_finalize(stmt);
    sqlite3_close(h);
    if (ncols == 0 || ncols > MAX_COLS)
        abort();
}

/* Take n bytes of the input, or what is left. */
static const uint8_t *
take(const uint8_t **p, const uint8_t *end, size_t *n)
{
    const uint8_t *at = *p;

    if (*n > (size_t)(end - at))
        *n = (size_t)(end - at);
    *p += *n;
    return at;
}

/* Bind one value decoded from the input: a tag byte, then its bytes. */
static void
bind_value(sqlite3_stmt *stmt, int col, const uint8_t **p, const uint8_t *end)
{
    unsigned tag = *(*p)++;
    size_t n = tag >> 3;
    const uint8_t *b;
    int64_t v = 0;
    size_t i;

    switch (tag & 7) {
    case 0: sqlite3_bind_null(stmt, col); break;
    case 1: sqlite3_bind_int64(stmt, col, (int64_t)(tag >> 3) - 8); break;
    case 2:
        n = 8;
        b = take(p, end, &n);
        for (i = 0; i < n; i++)
            v = (int64_t)((uint64_t)v << 8 | b[i]);
        sqlite3_bind_int64(stmt, col, v);
        break;
    case 3:
        b = take(p, end, &n);
        sqlite3_bind_text(stmt, col, (const char *)b, (int)n, SQLITE_TRANSIENT);
        break;
    case 4:
        b = take(p, end, &n);
        sqlite3_bind_blob(stmt, col, b, (int)n, SQLITE_TRANSIENT);
        break;
    case 5: sqlite3_bind_double(stmt, col, (double)(tag >> 3) / 4.0 - 2.0); break;
    case 6: sqlite3_bind_zeroblob(stmt, col, (int)n); break;
    default:
        /* A longer text: a length byte first. */
        n = *p < end ? *(*p)++ : 0;
        b = take(p, end, &n);
        sqlite3_bind_text(stmt, col, (const char *)b, (int)n, SQLITE_TRANSIENT);
        break;
    }
}

static void
write_rows(const uint8_t *p, const uint8_t *end, unsigned mode)
{
    char sql[64 + 2 * MAX_COLS];
    sqlite3_stmt *stmt;
    sqlite3 *h;
    int i, len;

    write_db(fresh, fresh_len);
    if (sqlite3_open(db, &h) != SQLITE_OK)
        abort();
    if (mode & 8 && p < end) {
        /* An older, newer or odd schema version. */
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", (int)*p++ - 128);
        sqlite3_exec(h, sql, NULL, NULL, NULL);
    }
    len = snprintf(sql, sizeof(sql), "INSERT INTO jobs VALUES (?");
    for (i = 1; i < ncols; i++)
        len += snprintf(sql + len, sizeof(sql) - (size_t)len, ",?");
    snprintf(sql + len, sizeof(sql) - (size_t)len, ")");
    if (sqlite3_prepare_v2(h, sql, -1, &stmt, NULL) != SQLITE_OK)
        abort();
    sqlite3_exec(h, "BEGIN", NULL, NULL, NULL);
    while (p < end) {
        for (i = 1; i <= ncols; i++) {
            if (p < end)
                bind_value(stmt, i, &p, end);
            else
                sqlite3_bind_null(stmt, i);
        }
        sqlite3_step(stmt); /* a row the schema refuses is just not there */
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
    }
    sqlite3_exec(h, "COMMIT", NULL, NULL, NULL);
    sqlite3_finalize(stmt);
    if (sqlite3_close(h) != SQLITE_OK)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned mode;

    if (fresh == NULL)
        setup();
    if (size < 1)
        return 0;
    mode = data[0];
    data++;
    size--;
    remove_db();
    switch (mode % 3) {
    case 0: write_rows(data, data + size, mode); break;
    case 1: {
        /* The fresh file with the input written over it at an offset. */
        unsigned char *copy = malloc(fresh_len + size + 2);
        size_t at = size >= 2 ? ((size_t)data[0] << 8 | data[1]) % fresh_len : 0;
        size_t n = size >= 2 ? size - 2 : 0;
        size_t len = at + n > fresh_len ? at + n : fresh_len;

        if (copy == NULL)
            abort();
        memcpy(copy, fresh, fresh_len);
        if (n > 0)
            memcpy(copy + at, data + 2, n);
        write_db(copy, len);
        free(copy);
        break;
    }
    default: write_db(data, size); break;
    }
    open_server(NULL, 0);
    return 0;
}
