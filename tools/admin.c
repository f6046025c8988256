/*
 * The admin verbs of dsjob: status, workers, jobs, job, result, dead,
 * stats, cancel, shutdown and version. libdsjobclient speaks only the binary
 * protocol, so this file has its own small client for the text protocol on
 * libdslink's connection (TCP, TLS with --ssl, or a unix socket, which
 * stays plain): send one line, and read the reply until it is complete (a
 * listing ends with a "." line; show result's bytes follow its line; every
 * other reply is one line) or the deadline passes. Each server given is asked in turn;
 * listings are parsed into rows (table.c prints them) with a server column
 * when there are several. An "ERR CODE text+with+pluses" reply goes to
 * stderr with the pluses turned back into spaces. job, result and dead
 * are dsjobd's: a server without them (gearmand) is named as such.
 */
#include "config.h"
#include "dsjob.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/common.h>

#include "link/link.h"
#include "proto/packet.h"
#include "table.h"

#define ADMIN_TIMEOUT_MS 5000      /* per server, without -t */
#define ADMIN_MAX_REPLY (64 << 20) /* a reply longer than this is refused */

/* How one server's exchange ended. */
enum admin_result {
    ADMIN_OK = 0, /* a complete reply that is not ERR */
    ADMIN_ERR,    /* the server answered ERR */
    ADMIN_DOWN,   /* no connection: the server could not be reached */
    ADMIN_BROKEN, /* connected, but no complete reply (closed or timed out): a failure */
};

/* The shape of the reply awaited. */
enum reply_kind {
    REPLY_LINE = 0, /* one line */
    REPLY_LISTING,  /* lines up to a "." line (or one ERR line) */
    REPLY_RESULT,   /* show result: "OK ... BYTES ...", a newline, BYTES bytes and a newline */
};

/* A reply being read. */
struct reply {
    char *buf;  /* the bytes (malloc'd, NUL-terminated) */
    size_t len; /* bytes in buf */
    size_t cap; /* size of buf */
};

static bool err_code_is(const struct reply *r, const char *code);

/*
 * Whether the first line of buf (len bytes, up to its newline) is an ERR
 * reply: "ERR", alone or followed by a space. A listing row never is, even
 * for a function named "ERR x": rows have tabs, ERR lines do not.
 */
static bool
is_err_line(const char *buf, size_t len)
{
    const char *nl = memchr(buf, '\n', len);
    size_t n = nl ? (size_t)(nl - buf) : len;

    if (n < 3 || memcmp(buf, "ERR", 3) != 0 || memchr(buf, '\t', n) != NULL)
        return false;
    return n == 3 || buf[3] == ' ' || buf[3] == '\r';
}

/* The BYTES of a show result reply's first line, or -1 if it has none. */
static long long
result_bytes(const char *buf)
{
    unsigned long long n;
    int end = 0;

    if (sscanf(buf, "OK %*s %llu %*u %*u %*u%n", &n, &end) != 1 || end == 0 ||
        (buf[end] != '\n' && buf[end] != '\r') || n > ADMIN_MAX_REPLY)
        return -1;
    return (long long)n;
}

/* Whether r holds a whole reply of its kind. */
static bool
reply_complete(const struct reply *r, enum reply_kind kind)
{
    const char *nl = memchr(r->buf, '\n', r->len);
    long long n;

    if (nl == NULL)
        return false;
    if (kind == REPLY_RESULT && (n = result_bytes(r->buf)) >= 0)
        return r->len >= (size_t)(nl + 1 - r->buf) + (size_t)n + 1;
    if (kind != REPLY_LISTING || is_err_line(r->buf, r->len) || strncmp(r->buf, ".\n", 2) == 0 ||
        strncmp(r->buf, ".\r\n", 3) == 0)
        return true;
    return (r->len >= 3 && memcmp(r->buf + r->len - 3, "\n.\n", 3) == 0) ||
           (r->len >= 4 && memcmp(r->buf + r->len - 4, "\n.\r\n", 4) == 0);
}

/*
 * Whether the bytes of r are a binary ERROR packet (what dsjobd --ssl
 * answered a plain text line with before it learned to answer ERR):
 * its code goes to code and "CODE: text" to err.
 */
static bool
binary_error(const struct reply *r, char *code, size_t code_cap, char *err, size_t cap)
{
    struct packet p;
    size_t need = 0, i;
    const char *why = NULL;

    if (r->len < PACKET_HEADER_SIZE || memcmp(r->buf, "\0RES", 4) != 0 ||
        packet_decode((const unsigned char *)r->buf, r->len, ADMIN_MAX_REPLY, &p, &need, &why) !=
            PACKET_OK ||
        p.type != PACKET_ERROR || p.nargs < 2)
        return false;
    snprintf(code, code_cap, "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    snprintf(err, cap, "%.*s: %.*s", (int)p.arg_len[0], (const char *)p.arg[0], (int)p.arg_len[1],
             (const char *)p.arg[1]);
    for (i = 0; err[i] != '\0'; i++) {
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f)
            err[i] = '?';
    }
    return true;
}

/*
 * Sends line to the server on l (connected) and reads its reply into r.
 * Returns 0, or -1 with the reason in err, or -2 when the server refused
 * the connection itself (TLS_REQUIRED: it wants TLS), the reason in err.
 */
static int
admin_exchange(struct link *l, const char *line, enum reply_kind kind, int64_t deadline,
               struct reply *r, char *err, size_t cap)
{
    if (link_queue_raw(l, line, strlen(line)) != DSJOB_OK) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    for (;;) {
        size_t n;
        int rc = link_recv_some(l, deadline);

        if (rc == DSJOB_ERR_TIMEOUT) {
            snprintf(err, cap, "no complete reply in time");
            return -1;
        }
        if (rc == DSJOB_ERR_CLOSED) {
            char code[64];

            /* A server that said why before it closed: its words, not just "closed". */
            if (binary_error(r, code, sizeof(code), err, cap))
                return strcmp(code, "TLS_REQUIRED") == 0 ? -2 : -1;
            snprintf(err, cap, "the server closed the connection before the reply ended");
            return -1;
        }
        if (rc != DSJOB_OK) {
            snprintf(err, cap, "%s", l->err);
            return -1;
        }
        n = l->in_len - l->in_off;
        if (r->len + n + 1 > r->cap) {
            size_t ncap = r->cap ? r->cap : 8192;
            char *nb;

            while (ncap < r->len + n + 1)
                ncap *= 2;
            if (ncap > ADMIN_MAX_REPLY) {
                snprintf(err, cap, "reply longer than %d bytes", ADMIN_MAX_REPLY);
                return -1;
            }
            nb = realloc(r->buf, ncap);
            if (nb == NULL) {
                snprintf(err, cap, "out of memory");
                return -1;
            }
            r->buf = nb;
            r->cap = ncap;
        }
        memcpy(r->buf + r->len, l->in + l->in_off, n);
        l->in_off += n;
        r->len += n;
        r->buf[r->len] = '\0';
        if (reply_complete(r, kind))
            return 0;
    }
}

/* Prints an ERR line (without its line end) with '+' turned into spaces. */
static void
print_err_line(const char *server, const char *line, size_t len)
{
    char *msg = cli_xmalloc(len + 1);
    size_t i;

    for (i = 0; i < len; i++)
        msg[i] = line[i] == '+' ? ' ' : line[i];
    msg[len] = '\0';
    cli_err("%s: %s", server, msg + (strncmp(msg, "ERR ", 4) == 0 ? 4 : 0));
    free(msg);
}

/* The length of the line at p (of n bytes) without its \n or \r\n; *next gets what follows. */
static size_t
line_len(const char *p, size_t n, const char **next)
{
    const char *nl = memchr(p, '\n', n);
    size_t len = nl ? (size_t)(nl - p) : n;

    *next = nl ? nl + 1 : p + n;
    if (len > 0 && p[len - 1] == '\r')
        len--;
    return len;
}

/*
 * Asks one server. On ADMIN_OK, *r holds the reply; on ADMIN_ERR the ERR
 * line has been printed; on ADMIN_DOWN and ADMIN_BROKEN the reason.
 */
static enum admin_result
admin_ask(const struct cli *cli, const char *server, const char *line, enum reply_kind kind,
          struct reply *r, bool quiet_err)
{
    int timeout = cli->timeout_ms ? cli->timeout_ms : ADMIN_TIMEOUT_MS;
    int64_t deadline = link_deadline(timeout);
    struct link l;
    char err[LINK_ERR_LEN];
    const char *next;

    memset(r, 0, sizeof(*r));
    if (link_init(&l, server) != DSJOB_OK) {
        cli_err("%s: bad server address", server);
        return ADMIN_DOWN;
    }
    link_set_tls(&l, cli->admin_tls, 0);
    if (link_connect(&l, timeout) != DSJOB_OK) {
        /* A failed TLS handshake too, as for submit: exit 3. */
        cli_err("%s: %s", server, l.err);
        link_release(&l);
        return ADMIN_DOWN;
    }
    switch (admin_exchange(&l, line, kind, deadline, r, err, sizeof(err))) {
    case 0: break;
    case -2:
        /* Refused for want of TLS, as a failed handshake is: not reached (exit 3). */
        link_release(&l);
        cli_err("%s: %s", server, err);
        return ADMIN_DOWN;
    default:
        link_release(&l);
        cli_err("%s: %s", server, err);
        return ADMIN_BROKEN; /* it was reached: exit 1, not 3 */
    }
    link_release(&l);
    if (err_code_is(r, "TLS_REQUIRED")) {
        print_err_line(server, r->buf, line_len(r->buf, r->len, &next));
        return ADMIN_DOWN;
    }
    if (is_err_line(r->buf, r->len)) {
        if (!quiet_err)
            print_err_line(server, r->buf, line_len(r->buf, r->len, &next));
        return ADMIN_ERR;
    }
    return ADMIN_OK;
}

int
cli_admin_ask(struct cli *cli, const char *server, const char *line, bool listing, char **out)
{
    struct reply r;
    enum admin_result res =
        admin_ask(cli, server, line, listing ? REPLY_LISTING : REPLY_LINE, &r, false);

    *out = NULL;
    if (res == ADMIN_OK) {
        *out = r.buf;
        return CLI_OK;
    }
    free(r.buf);
    return res == ADMIN_DOWN ? CLI_UNREACHABLE : CLI_FAILED;
}

/* Splits a status or show jobs line on tabs into exactly n cells. */
static bool
split_tabs(const char *p, size_t len, size_t n, const char **cells, size_t *lens)
{
    size_t k = 0;
    const char *end = p + len;

    while (k < n) {
        const char *tab = memchr(p, '\t', (size_t)(end - p));
        const char *e = tab ? tab : end;

        cells[k] = p;
        lens[k] = (size_t)(e - p);
        k++;
        if (tab == NULL)
            break;
        p = tab + 1;
    }
    return k == n && memchr(cells[n - 1], '\t', lens[n - 1]) == NULL;
}

/* "FD IP CLIENTID : F1 F2": the id may be empty or hold spaces; " :" ends it. */
static bool
split_worker(const char *p, size_t len, const char **cells, size_t *lens)
{
    const char *end = p + len, *sp, *q;

    sp = memchr(p, ' ', len);
    if (sp == NULL)
        return false;
    cells[0] = p;
    lens[0] = (size_t)(sp - p);
    p = sp + 1;
    sp = memchr(p, ' ', (size_t)(end - p));
    if (sp == NULL)
        return false;
    cells[1] = p;
    lens[1] = (size_t)(sp - p);
    p = sp + 1;
    /* The id ends at the first ':' that follows a space (or starts the rest) and ends a word. */
    for (q = p; q < end; q++) {
        if (*q == ':' && (q == p || q[-1] == ' ') && (q + 1 == end || q[1] == ' '))
            break;
    }
    if (q == end)
        return false;
    cells[2] = p;
    lens[2] = q > p ? (size_t)(q - 1 - p) : 0;
    q++;
    while (q < end && *q == ' ')
        q++;
    cells[3] = q;
    lens[3] = (size_t)(end - q);
    return true;
}

/* "name value": show job's lines; the value may hold spaces, or be absent. */
static bool
split_field(const char *p, size_t len, const char **cells, size_t *lens)
{
    const char *sp = memchr(p, ' ', len);

    cells[0] = p;
    lens[0] = sp ? (size_t)(sp - p) : len;
    cells[1] = sp ? sp + 1 : p + len;
    lens[1] = sp ? len - lens[0] - 1 : 0;
    return lens[0] > 0;
}

static int
hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/*
 * A copy (malloc'd) of a unique key or error text as dsjobd escapes them,
 * unescaped: "\xHH" is the byte HH, except a NUL, which stays "\x00" (cells
 * are strings), and a lone "-" is empty. *len is updated.
 */
static char *
unescape(const char *s, size_t *len)
{
    char *u = cli_xmalloc(*len + 1);
    size_t i, k = 0;

    if (*len == 1 && s[0] == '-')
        *len = 0;
    for (i = 0; i < *len; i++) {
        int hi = i + 3 < *len && s[i] == '\\' && s[i + 1] == 'x' ? hex_digit(s[i + 2]) : -1;
        int lo = hi >= 0 ? hex_digit(s[i + 3]) : -1;

        if (lo >= 0 && hi * 16 + lo != 0) {
            u[k++] = (char)(hi * 16 + lo);
            i += 3;
        } else {
            u[k++] = s[i];
        }
    }
    *len = k;
    return u;
}

/* Whether r is "ERR CODE" followed by a space or the line end. */
static bool
err_code_is(const struct reply *r, const char *code)
{
    size_t n = strlen(code);

    return r->len > 4 + n && strncmp(r->buf, "ERR ", 4) == 0 && strncmp(r->buf + 4, code, n) == 0 &&
           strchr(" \r\n", r->buf[4 + n]) != NULL;
}

/*
 * Prints the ERR reply r of server; for ext, a dsjobd command, also says
 * so when the server does not know it (gearmand answers UNKNOWN_COMMAND,
 * UNKNOWN_SHOW_ARGUMENTS, or for "drop dead" an incomplete "drop").
 */
static void
report_err(const char *server, const struct reply *r, const char *ext)
{
    const char *next;

    print_err_line(server, r->buf, line_len(r->buf, r->len, &next));
    if (ext != NULL &&
        (err_code_is(r, "UNKNOWN_COMMAND") || err_code_is(r, "UNKNOWN_SHOW_ARGUMENTS") ||
         (err_code_is(r, "INVALID_ARGUMENTS") && strstr(r->buf, "incomplete"))))
        cli_err("%s: the server does not have '%s', a dsjobd admin command (gearmand lacks it)",
                server, ext);
}

/* "NAME{LABELS} VALUE": the value is after the last space (a label may hold spaces). */
static bool
split_stat(const char *p, size_t len, const char **cells, size_t *lens)
{
    size_t i = len;

    while (i > 0 && p[i - 1] != ' ')
        i--;
    if (i < 2 || i == len)
        return false;
    cells[0] = p;
    lens[0] = i - 1;
    cells[1] = p + i;
    lens[1] = len - i;
    return true;
}

/* A listing verb: its command, its columns (after "server") and how a line splits. */
struct listing {
    const char *verb;             /* dsjob's word */
    const char *command;          /* the admin line sent, or NULL: made from the arguments */
    const struct table_col *cols; /* server first, then the reply's columns */
    size_t ncols;                 /* entries in cols, server included */
    unsigned escaped;             /* bit i: cols[i] holds dsjobd's escapes (see unescape) */
    const char *ext;              /* the dsjobd command, or NULL for one gearmand has too */
    bool any;                     /* one job: done when a server knows it; ERRs only if none */
};

static const struct table_col status_cols[] = {
    {"server", TABLE_STR},  {"function", TABLE_STR}, {"total", TABLE_NUM},
    {"running", TABLE_NUM}, {"workers", TABLE_NUM},
};
static const struct table_col workers_cols[] = {
    {"server", TABLE_STR}, {"fd", TABLE_NUM},         {"ip", TABLE_STR},
    {"id", TABLE_STR},     {"functions", TABLE_LIST},
};
static const struct table_col jobs_cols[] = {
    {"server", TABLE_STR}, {"handle", TABLE_STR}, {"retries", TABLE_NUM},
    {"ignore", TABLE_NUM}, {"queued", TABLE_NUM},
};
static const struct table_col detail_cols[] = {
    {"server", TABLE_STR},   {"handle", TABLE_STR},     {"function", TABLE_STR},
    {"priority", TABLE_STR}, {"state", TABLE_STR},      {"attempts", TABLE_NUM},
    {"run_at", TABLE_NUM},   {"background", TABLE_NUM}, {"unique", TABLE_STR},
};
static const struct table_col dead_cols[] = {
    {"server", TABLE_STR},       {"handle", TABLE_STR},   {"function", TABLE_STR},
    {"priority", TABLE_STR},     {"attempts", TABLE_NUM}, {"first_failure", TABLE_NUM},
    {"last_failure", TABLE_NUM}, {"size", TABLE_NUM},     {"unique", TABLE_STR},
    {"error", TABLE_TEXT},       {"dropped", TABLE_NUM},
};
static const struct table_col schedule_cols[] = {
    {"server", TABLE_STR},   {"name", TABLE_STR},     {"cron", TABLE_STR},    {"tz", TABLE_STR},
    {"function", TABLE_STR}, {"priority", TABLE_STR}, {"missed", TABLE_STR},  {"state", TABLE_STR},
    {"next_run", TABLE_STR}, {"last_run", TABLE_STR}, {"outcome", TABLE_STR}, {"fires", TABLE_NUM},
};
static const struct table_col field_cols[] = {
    {"server", TABLE_STR},
    {"field", TABLE_STR},
    {"value", TABLE_TEXT},
};
static const struct table_col stats_cols[] = {
    {"server", TABLE_STR},
    {"name", TABLE_STR},
    {"value", TABLE_NUM},
};
static const struct table_col limit_cols[] = {
    {"server", TABLE_STR},  {"function", TABLE_STR}, {"settings", TABLE_TEXT},
    {"running", TABLE_NUM}, {"queued", TABLE_NUM},   {"tokens", TABLE_STR},
    {"keys", TABLE_NUM},    {"held", TABLE_STR},     {"started", TABLE_NUM},
};
static const struct table_col version_cols[] = {
    {"server", TABLE_STR},
    {"version", TABLE_STR},
};

static const struct listing status_listing = {"status", "status\n", status_cols, 5, 0, NULL, false};
static const struct listing workers_listing = {"workers", "workers\n", workers_cols, 5,
                                               0,         NULL,        false};
static const struct listing jobs_listing = {"jobs",  "show jobs detail\n", detail_cols, 9,
                                            1u << 8, "show jobs detail",   false};
static const struct listing version_listing = {"version", "version\n", version_cols, 2,
                                               0,         NULL,        false};
static const struct listing dead_listing = {"dead",      NULL, dead_cols, 11, 1u << 8 | 1u << 9,
                                            "show dead", false};
static const struct listing job_listing = {"job", NULL, field_cols, 3, 0, "show job", true};
static const struct listing schedule_listing = {"schedule", "schedule list\n", schedule_cols, 12,
                                                0,          "schedule list",   false};
static const struct listing stats_listing = {"stats", "stats\n", stats_cols, 3, 0, "stats", false};
static const struct listing limit_listing = {"limit", NULL, limit_cols, 9, 0, "limit", false};

/* jobs of a server without "show jobs detail" (gearmand). */
static const struct listing old_jobs = {"jobs", "show jobs\n", jobs_cols, 5, 0, NULL, false};

/* The fields of show job that JSON gets as numbers. */
static const char *const job_nums[] = {
    "background",    "attempts",     "run_at", "payload_size", "waiters",
    "first_failure", "last_failure", "ended",  "result_size",  NULL,
};

/* Adds the rows of one server's reply to t; returns false on a line that does not parse. */
static bool
parse_reply(const struct listing *ls, const char *server, const struct reply *r, struct table *t)
{
    const char *cells[12], *p = r->buf, *end = r->buf + r->len, *next;
    size_t lens[12];

    cells[0] = server;
    lens[0] = strlen(server);
    if (ls->cols == version_cols) {
        size_t n = line_len(p, r->len, &next);

        if (n < 3 || strncmp(p, "OK ", 3) != 0)
            return false;
        cells[1] = p + 3;
        lens[1] = n - 3;
        table_add(t, cells, lens);
        return true;
    }
    while (p < end) {
        size_t n = line_len(p, (size_t)(end - p), &next), k;
        char *copy[12] = {NULL};
        bool ok;

        if (n == 1 && p[0] == '.')
            return true;
        if (ls->cols == workers_cols)
            ok = split_worker(p, n, cells + 1, lens + 1);
        else if (ls->cols == field_cols)
            ok = split_field(p, n, cells + 1, lens + 1);
        else if (ls->cols == stats_cols)
            ok = split_stat(p, n, cells + 1, lens + 1);
        else
            ok = split_tabs(p, n, ls->ncols - 1, cells + 1, lens + 1);
        if (!ok) {
            cli_err("%s: cannot parse the %s line '%.*s'", server, ls->verb, (int)n, p);
            return false;
        }
        for (k = 1; k < ls->ncols; k++) {
            if ((ls->escaped & 1u << k) || (ls->cols == field_cols && k == 2 &&
                                            ((lens[1] == 6 && memcmp(cells[1], "unique", 6) == 0) ||
                                             (lens[1] == 5 && memcmp(cells[1], "error", 5) == 0))))
                cells[k] = copy[k] = unescape(cells[k], &lens[k]);
        }
        table_add(t, cells, lens);
        for (k = 0; k < ls->ncols; k++)
            free(copy[k]);
        p = next;
    }
    return false;
}

/* The row of old, a show jobs line, in jobs' detail columns: what it has. */
static void
add_old_row(struct table *t, const struct table *old, size_t row)
{
    char *const *o = old->cells + row * old->ncols;
    const char *cells[9] = {o[0], o[1], "", "", "", o[2], "", o[4], ""};
    size_t lens[9], k;

    for (k = 0; k < 9; k++)
        lens[k] = strlen(cells[k]);
    table_add(t, cells, lens);
}

/*
 * A listing from every server. For jobs, a server without "show jobs
 * detail" (gearmand) is asked "show jobs": with no server that had it, its
 * old columns are printed, else those rows fill what they have.
 */
/*
 * The value of the unlabelled sample name in server's admin "stats", or -1
 * when the server has no such sample (gearmand) or does not answer.
 */
static long
server_stat(struct cli *cli, const char *server, const char *name)
{
    size_t nlen = strlen(name);
    struct reply r;
    const char *p;
    long v = -1;

    if (admin_ask(cli, server, "stats\n", REPLY_LISTING, &r, true) == ADMIN_OK) {
        p = r.buf;
        while (p != NULL && *p != '\0') {
            if (strncmp(p, name, nlen) == 0 && p[nlen] == ' ') {
                v = strtol(p + nlen + 1, NULL, 10);
                break;
            }
            p = strchr(p, '\n');
            if (p != NULL)
                p++;
        }
    }
    free(r.buf);
    return v;
}

static int
run_listing(struct cli *cli, const struct listing *ls, const char *line)
{
    struct reply *errs = cli_xmalloc(cli->nservers * sizeof(*errs));
    struct table t, old;
    size_t i, ndown = 0, nok = 0, nold = 0;
    int rc = CLI_OK;

    table_init(&t, ls->cols, ls->ncols);
    table_init(&old, old_jobs.cols, old_jobs.ncols);
    for (i = 0; i < cli->nservers; i++) {
        const char *server = cli->servers[i];
        struct reply r;
        enum admin_result res = admin_ask(
            cli, server, line, ls->cols != version_cols ? REPLY_LISTING : REPLY_LINE, &r, true);

        memset(&errs[i], 0, sizeof(errs[i]));
        if (res == ADMIN_ERR && ls->cols == detail_cols &&
            err_code_is(&r, "UNKNOWN_SHOW_ARGUMENTS")) {
            free(r.buf);
            res = admin_ask(cli, server, old_jobs.command, REPLY_LISTING, &r, true);
            if (res == ADMIN_OK) {
                size_t from = old.nrows;

                nold++;
                if (!parse_reply(&old_jobs, server, &r, &old))
                    rc = CLI_FAILED;
                for (; from < old.nrows; from++)
                    add_old_row(&t, &old, from);
            }
        } else if (res == ADMIN_OK) {
            nok++;
            if (!parse_reply(ls, server, &r, &t)) {
                if (ls->cols == version_cols)
                    cli_err("%s: unexpected reply to version: '%.*s'", server,
                            (int)strcspn(r.buf, "\r\n"), r.buf);
                rc = CLI_FAILED;
            }
        }
        if (res == ADMIN_ERR) {
            errs[i] = r; /* reported below */
            r.buf = NULL;
        }
        if (res != ADMIN_OK && !ls->any)
            rc = CLI_FAILED;
        if (res == ADMIN_DOWN)
            ndown++;
        free(r.buf);
    }
    for (i = 0; i < cli->nservers; i++) {
        if (errs[i].buf != NULL && (!ls->any || nok == 0))
            report_err(cli->servers[i], &errs[i], ls->ext);
        free(errs[i].buf);
    }
    free(errs);
    if (ls->any && nok == 0)
        rc = CLI_FAILED;
    if (ndown == cli->nservers)
        rc = CLI_UNREACHABLE;
    /*
     * An empty dead set is also what a server without --max-dead (the
     * default) shows: each dsjobd says in its stats whether it keeps any;
     * a server without them (gearmand) gets the hint.
     */
    if (ls->cols == dead_cols && nok > 0 && t.nrows == 0 && cli->format == CLI_FORMAT_TABLE) {
        for (i = 0; i < cli->nservers; i++) {
            long n = server_stat(cli, cli->servers[i], "dsjob_max_dead");

            if (n == 0)
                cli_err("%s: no dead jobs: the server keeps none (it runs without --max-dead)",
                        cli->servers[i]);
            else if (n < 0)
                cli_err("%s: no dead jobs; dsjobd keeps failed background jobs only when "
                        "started with --max-dead N (the default, 0, drops them as gearmand "
                        "does)",
                        cli->servers[i]);
        }
    }
    /* JSON readers get a document even with no answer: the empty array. */
    if (nok > 0 || nold > 0 || cli->format == CLI_FORMAT_JSON) {
        const struct table *shown = ls->cols == detail_cols && nok == 0 && nold > 0 ? &old : &t;
        int w = ls->cols == field_cols && cli->format == CLI_FORMAT_JSON
                    ? table_print_records(shown, job_nums, stdout)
                    : table_print(shown, cli->format, cli->nservers > 1 ? 0 : 1, stdout);

        if (w < 0) {
            cli_err("write to standard output: %s", strerror(errno));
            rc = CLI_FAILED;
        }
    }
    table_release(&old);
    table_release(&t);
    return rc;
}

/*
 * Asks every server line, about one job or function that a handle does not
 * place: the answers in rs and res. Returns how many answered OK; when none
 * did, prints their ERR lines (ext as for report_err). *ndown gets how many
 * could not be reached.
 */
static size_t
ask_every(struct cli *cli, const char *line, enum reply_kind kind, const char *ext,
          struct reply *rs, enum admin_result *res, size_t *ndown)
{
    size_t i, nok = 0;

    *ndown = 0;
    for (i = 0; i < cli->nservers; i++) {
        res[i] = admin_ask(cli, cli->servers[i], line, kind, &rs[i], true);
        if (res[i] == ADMIN_OK)
            nok++;
        if (res[i] == ADMIN_DOWN)
            (*ndown)++;
    }
    for (i = 0; i < cli->nservers && nok == 0; i++) {
        if (res[i] == ADMIN_ERR)
            report_err(cli->servers[i], &rs[i], ext);
    }
    return nok;
}

static void
free_replies(struct cli *cli, struct reply *rs, enum admin_result *res)
{
    size_t i;

    for (i = 0; i < cli->nservers; i++)
        free(rs[i].buf);
    free(rs);
    free(res);
}

static const struct table_col retried_cols[] = {
    {"server", TABLE_STR},
    {"retried", TABLE_NUM},
    {"left", TABLE_NUM},
};
static const struct table_col dropped_cols[] = {
    {"server", TABLE_STR},
    {"dropped", TABLE_NUM},
};
static const struct table_col result_cols[] = {
    {"server", TABLE_STR},      {"outcome", TABLE_STR}, {"numerator", TABLE_NUM},
    {"denominator", TABLE_NUM}, {"size", TABLE_NUM},    {"kept", TABLE_NUM},
    {"result", TABLE_STR},
};

/*
 * cancel, dead retry and dead drop: a handle does not name its server, so
 * every server is asked; it is done when one of them knew the job (or the
 * function). dead prints each such server's count ("OK N", and for retry
 * "(M not: why)" when some stay dead: then it fails).
 */
static int
run_change(struct cli *cli, const char *line, const char *ext, const struct table_col *cols)
{
    enum admin_result *res = cli_xmalloc(cli->nservers * sizeof(*res));
    struct reply *rs = cli_xmalloc(cli->nservers * sizeof(*rs));
    size_t i, ndown, nok = ask_every(cli, line, REPLY_LINE, ext, rs, res, &ndown);
    int rc = nok > 0 ? CLI_OK : ndown == cli->nservers ? CLI_UNREACHABLE : CLI_FAILED;
    struct table t;

    table_init(&t, cols, cols == retried_cols ? 3 : 2);
    for (i = 0; i < cli->nservers && cols != NULL; i++) {
        unsigned long done = 0, left = 0;
        const char *cells[3] = {cli->servers[i], NULL, NULL}, *paren;
        char num[2][24];
        size_t lens[3];

        if (res[i] != ADMIN_OK)
            continue;
        paren = strchr(rs[i].buf, '(');
        if (sscanf(rs[i].buf, "OK %lu", &done) != 1 ||
            (paren != NULL && sscanf(paren, "(%lu", &left) != 1)) {
            cli_err("%s: unexpected reply: '%.*s'", cli->servers[i],
                    (int)strcspn(rs[i].buf, "\r\n"), rs[i].buf);
            rc = CLI_FAILED;
            continue;
        }
        if (left > 0) {
            cli_err("%s: %.*s", cli->servers[i], (int)strcspn(paren, "\r\n"), paren);
            rc = CLI_FAILED;
        }
        snprintf(num[0], sizeof(num[0]), "%lu", done);
        snprintf(num[1], sizeof(num[1]), "%lu", left);
        cells[1] = num[0];
        cells[2] = num[1];
        lens[0] = strlen(cells[0]);
        lens[1] = strlen(cells[1]);
        lens[2] = strlen(cells[2]);
        table_add(&t, cells, lens);
    }
    if (cols != NULL && (nok > 0 || cli->format == CLI_FORMAT_JSON) &&
        table_print(&t, cli->format, cli->nservers > 1 ? 0 : 1, stdout) < 0) {
        cli_err("write to standard output: %s", strerror(errno));
        rc = CLI_FAILED;
    }
    table_release(&t);
    free_replies(cli, rs, res);
    return rc;
}

/*
 * result: the first server that kept the job's outcome gives it. In the
 * table format (the default) its bytes go to standard output as they are;
 * tsv and json print a row. Exit 0 for a complete job whose result was
 * kept whole; 1 for a failure, an exception (its text on standard error),
 * or a result cut by --max-result-size.
 */
static int
run_result(struct cli *cli, const char *line, const char *what)
{
    enum admin_result *res = cli_xmalloc(cli->nservers * sizeof(*res));
    struct reply *rs = cli_xmalloc(cli->nservers * sizeof(*rs));
    size_t i, ndown, nok = ask_every(cli, line, REPLY_RESULT, "show result", rs, res, &ndown);
    int rc = nok > 0 ? CLI_OK : ndown == cli->nservers ? CLI_UNREACHABLE : CLI_FAILED;
    char outcome[16], nums[4][24];
    unsigned long long bytes, num, den, size;
    const char *body;
    struct reply *r;

    for (i = 0; i < cli->nservers && res[i] != ADMIN_OK; i++)
        ;
    if (i == cli->nservers)
        goto out;
    r = &rs[i];
    body = (const char *)memchr(r->buf, '\n', r->len) + 1;
    if (sscanf(r->buf, "OK %15s %llu %llu %llu %llu", outcome, &bytes, &num, &den, &size) != 5 ||
        result_bytes(r->buf) < 0 || (size_t)(r->buf + r->len - body) < bytes + 1) {
        cli_err("%s: unexpected reply: '%.*s'", cli->servers[i], (int)strcspn(r->buf, "\r\n"),
                r->buf);
        rc = CLI_FAILED;
        goto out;
    }
    if (cli->format == CLI_FORMAT_TABLE) {
        if (strcmp(outcome, "complete") == 0 && cli_write_all(1, body, bytes) < 0) {
            cli_err("write to standard output: %s", strerror(errno));
            rc = CLI_FAILED;
        }
    } else {
        struct table t;
        const char *cells[7] = {cli->servers[i], outcome, nums[0], nums[1], nums[2], nums[3], NULL};
        char *text = cli_xmalloc(bytes + 1);
        size_t lens[7], k;

        /* A cell is a string: a NUL in the result ends it in tsv and json. */
        memcpy(text, body, bytes);
        text[bytes] = '\0';
        cells[6] = text;
        snprintf(nums[0], sizeof(nums[0]), "%llu", num);
        snprintf(nums[1], sizeof(nums[1]), "%llu", den);
        snprintf(nums[2], sizeof(nums[2]), "%llu", size);
        snprintf(nums[3], sizeof(nums[3]), "%llu", bytes);
        for (k = 0; k < 7; k++)
            lens[k] = strlen(cells[k]);
        table_init(&t, result_cols, 7);
        table_add(&t, cells, lens);
        if (table_print(&t, cli->format, cli->nservers > 1 ? 0 : 1, stdout) < 0) {
            cli_err("write to standard output: %s", strerror(errno));
            rc = CLI_FAILED;
        }
        table_release(&t);
        free(text);
    }
    if (strcmp(outcome, "exception") == 0) {
        cli_err("job %s raised an exception: %.*s", what, (int)bytes, body);
        rc = CLI_FAILED;
    } else if (strcmp(outcome, "complete") != 0) {
        cli_err("job %s failed", what);
        rc = CLI_FAILED;
    } else if (bytes < size) {
        cli_err("job %s: the server kept only %llu of its %llu result bytes (--max-result-size)",
                what, bytes, size);
        rc = CLI_FAILED;
    }
out:
    free_replies(cli, rs, res);
    return rc;
}

/* shutdown: every server given is told; each failure is reported. */
static int
run_shutdown(struct cli *cli, bool graceful)
{
    size_t i, ndown = 0;
    int rc = CLI_OK;

    for (i = 0; i < cli->nservers; i++) {
        struct reply r;
        enum admin_result res =
            admin_ask(cli, cli->servers[i], graceful ? "shutdown graceful\n" : "shutdown\n",
                      REPLY_LINE, &r, false);

        if (res != ADMIN_OK)
            rc = CLI_FAILED;
        if (res == ADMIN_DOWN)
            ndown++;
        free(r.buf);
    }
    return ndown == cli->nservers ? CLI_UNREACHABLE : rc;
}

/* A handle (or a function or unique key) is one word of the text protocol. */
static bool
handle_ok(const char *h)
{
    if (*h == '\0')
        return false;
    for (; *h != '\0'; h++) {
        if ((unsigned char)*h <= ' ' || *h == 0x7f)
            return false;
    }
    return true;
}

/* What an admin verb's command line said, beyond the options every verb takes. */
struct admin_call {
    const char *sub;    /* dead's list, retry or drop; maxage and uniquefor's SECONDS; else NULL */
    const char *arg;    /* the HANDLE or FUNCTION, or NULL */
    const char *func;   /* job and result's -f FUNCTION, or NULL */
    const char *uniq;   /* and -u UNIQUE */
    bool graceful;      /* shutdown's --graceful */
    char settings[512]; /* limit's options as the admin "limit" takes them; "" for none */
    /* schedule add's */
    const char *tz;     /* --tz ZONE, or NULL */
    const char *prio;   /* -p PRIORITY, or NULL */
    const char *missed; /* --missed skip|once, or NULL */
    char *const *words; /* NAME CRON FUNCTION [PAYLOAD] */
    int nwords;         /* entries in words */
};

/* The words an admin verb takes after its options. */
enum admin_args {
    ADMIN_ARGS_NONE,   /* none */
    ADMIN_ARGS_HANDLE, /* HANDLE */
    ADMIN_ARGS_JOB,    /* HANDLE, or -f FUNCTION -u UNIQUE */
    ADMIN_ARGS_DEAD,   /* list [FUNCTION], or retry|drop HANDLE|FUNCTION */
    ADMIN_ARGS_LIMIT,  /* [FUNCTION] (limit) */
    ADMIN_ARGS_FUNC,   /* FUNCTION (pause, resume) */
    ADMIN_ARGS_SECS,   /* FUNCTION [SECONDS] */
    ADMIN_ARGS_SCHED,  /* list, add NAME CRON FUNCTION [PAYLOAD], or pause|resume|rm NAME */
};

struct admin_verb;
typedef int (*admin_run_fn)(struct cli *cli, const struct admin_verb *v,
                            const struct admin_call *call);

/* One admin verb of dsjob. */
struct admin_verb {
    const char *name;         /* the word on the command line */
    enum admin_args args;     /* the words after its options */
    bool graceful;            /* takes --graceful */
    const struct listing *ls; /* what it lists, or NULL */
    admin_run_fn run;         /* asks the servers, once the command line is read */
    const char *usage;        /* its usage after "usage: dsjob NAME", or NULL for a listing's */
    const char *what;         /* a line on what it does, or NULL */
};

/* admin_xprintf is snprintf into a buffer of its own, which the caller frees. */
static char *__attribute__((format(printf, 1, 2))) admin_xprintf(const char *fmt, ...)
{
    va_list ap;
    char *buf;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    buf = cli_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(buf, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return buf;
}

/* status, workers, jobs, version and stats: a listing with a fixed command. */
static int
verb_listing(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    (void)call;
    return run_listing(cli, v->ls, v->ls->command);
}

static int
verb_shutdown(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    (void)v;
    return run_shutdown(cli, call->graceful);
}

static int
verb_cancel(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    char *line = admin_xprintf("cancel job %s\n", call->arg);
    int rc = run_change(cli, line, NULL, NULL);

    (void)v;
    free(line);
    return rc;
}

/* The show job or show result line of a handle, or of a function's unique key. */
static char *
job_line(const struct admin_verb *v, const struct admin_call *call)
{
    if (call->func != NULL)
        return admin_xprintf("show %s unique %s %s\n", v->name, call->func, call->uniq);
    return admin_xprintf("show %s %s\n", v->name, call->arg);
}

static int
verb_job(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    char *line = job_line(v, call);
    int rc = run_listing(cli, v->ls, line);

    free(line);
    return rc;
}

static int
verb_result(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    char *line = job_line(v, call), *what;
    int rc;

    if (call->func != NULL)
        what = admin_xprintf("of '%s' with unique key '%s'", call->func, call->uniq);
    else
        what = admin_xprintf("%s", call->arg);
    rc = run_result(cli, line, what);
    free(what);
    free(line);
    return rc;
}

/* dead list [FUNCTION], dead retry|drop HANDLE|FUNCTION. */
static int
verb_dead(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    bool retry = strcmp(call->sub, "retry") == 0;
    char *line;
    int rc;

    if (strcmp(call->sub, "list") == 0) {
        line = admin_xprintf("show dead%s%s\n", call->arg ? " " : "", call->arg ? call->arg : "");
        rc = run_listing(cli, v->ls, line);
    } else {
        line = admin_xprintf("%s dead %s\n", call->sub, call->arg);
        rc = run_change(cli, line, retry ? "retry dead" : "drop dead",
                        retry ? retried_cols : dropped_cols);
    }
    free(line);
    return rc;
}

/*
 * limit [FUNCTION] [settings], pause FUNCTION, resume FUNCTION: flow
 * control. Showing lists every server's line; a change goes to every
 * server (each keeps its own settings), and fails if one refuses it.
 */
static int
verb_limit(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    enum admin_result *res;
    struct reply *rs;
    size_t i, ndown, nok;
    char *line;
    int rc;

    if (strcmp(v->name, "limit") == 0 && call->settings[0] == '\0') {
        line = admin_xprintf("limit%s%s\n", call->arg ? " " : "", call->arg ? call->arg : "");
        rc = run_listing(cli, v->ls, line);
        free(line);
        return rc;
    }
    if (strcmp(v->name, "limit") == 0)
        line = admin_xprintf("limit %s %s\n", call->arg, call->settings);
    else
        line = admin_xprintf("%s %s\n", v->name, call->arg);
    res = cli_xmalloc(cli->nservers * sizeof(*res));
    rs = cli_xmalloc(cli->nservers * sizeof(*rs));
    nok = ask_every(cli, line, REPLY_LINE, "limit", rs, res, &ndown);
    rc = nok == cli->nservers ? CLI_OK : ndown == cli->nservers ? CLI_UNREACHABLE : CLI_FAILED;
    for (i = 0; i < cli->nservers && nok > 0; i++)
        if (res[i] == ADMIN_ERR)
            report_err(cli->servers[i], &rs[i], "limit");
    free_replies(cli, rs, res);
    free(line);
    return rc;
}

/* Adds "NAME VALUE" to call->settings for a limit option; a usage error if it does not fit. */
static int
limit_opt(struct cli *cli, struct admin_call *call, const char *name, const char *value)
{
    size_t n = strlen(call->settings);
    int w;

    if (value != NULL && !handle_ok(value))
        return cli_usage_error(cli, "option '--%s' wants one word, not '%s'", name, value);
    w = snprintf(call->settings + n, sizeof(call->settings) - n, "%s%s%s%s", n ? " " : "", name,
                 value ? " " : "", value ? value : "");
    if (w < 0 || (size_t)w >= sizeof(call->settings) - n)
        return cli_usage_error(cli, "too many limit options");
    return 0;
}

/*
 * maxage and uniquefor: FUNCTION SECONDS sets the function's on every
 * server given; FUNCTION alone prints each server's setting (seconds; 0:
 * the server's --max-queue-age or --unique-for applies).
 */
static int
verb_secs(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    char *line = call->sub != NULL ? admin_xprintf("%s %s %s\n", v->name, call->arg, call->sub)
                                   : admin_xprintf("%s %s\n", v->name, call->arg);
    size_t i, ndown = 0;
    int rc = CLI_OK;

    for (i = 0; i < cli->nservers; i++) {
        struct reply r;
        enum admin_result res = admin_ask(cli, cli->servers[i], line, REPLY_LINE, &r, false);
        unsigned long n;

        if (res != ADMIN_OK)
            rc = CLI_FAILED;
        if (res == ADMIN_DOWN)
            ndown++;
        if (res == ADMIN_OK && call->sub == NULL) {
            if (sscanf(r.buf, "OK %lu", &n) != 1) {
                cli_err("%s: unexpected reply: '%.*s'", cli->servers[i],
                        (int)strcspn(r.buf, "\r\n"), r.buf);
                rc = CLI_FAILED;
            } else if (cli->nservers > 1) {
                printf("%s\t%lu\n", cli->servers[i], n);
            } else {
                printf("%lu\n", n);
            }
        }
        free(r.buf);
    }
    free(line);
    return ndown == cli->nservers ? CLI_UNREACHABLE : rc;
}

/* A word of a schedule line in quotes it does not hold; NULL if it holds both or a newline. */
static char *
sched_quote(const char *w)
{
    char q = strchr(w, '\'') == NULL ? '\'' : '"';

    if (strchr(w, q) != NULL || strpbrk(w, "\r\n") != NULL)
        return NULL;
    return admin_xprintf("%c%s%c", q, w, q);
}

/* schedule list, add NAME 'CRON' FUNCTION [PAYLOAD], pause|resume|rm NAME. */
static int
verb_schedule(struct cli *cli, const struct admin_verb *v, const struct admin_call *call)
{
    char *line, *cron, *payload = NULL;
    int rc;

    if (strcmp(call->sub, "list") == 0)
        return run_listing(cli, v->ls, v->ls->command);
    if (strcmp(call->sub, "add") != 0) {
        line = admin_xprintf("schedule %s %s\n", call->sub, call->arg);
        rc = run_change(cli, line, "schedule", NULL);
        free(line);
        return rc;
    }
    cron = sched_quote(call->words[1]);
    if (call->nwords > 3 && (payload = sched_quote(call->words[3])) == NULL) {
        free(cron);
        return cli_usage_error(cli, "PAYLOAD holds both quote characters or a newline");
    }
    if (cron == NULL) {
        free(payload);
        return cli_usage_error(cli, "CRON holds a quote character or a newline");
    }
    line = admin_xprintf("schedule add %s %s %s%s%s%s%s%s%s%s%s\n", call->words[0], cron,
                         call->words[2], payload ? " " : "", payload ? payload : "",
                         call->tz ? " tz=" : "", call->tz ? call->tz : "",
                         call->prio ? " priority=" : "", call->prio ? call->prio : "",
                         call->missed ? " missed=" : "", call->missed ? call->missed : "");
    rc = run_change(cli, line, "schedule", NULL);
    free(line);
    free(cron);
    free(payload);
    return rc;
}

#define LISTING_USAGE " [-s SERVER]... [-t MS] [--format table|tsv|json]\n"

static const struct admin_verb admin_verbs[] = {
    {"status", ADMIN_ARGS_NONE, false, &status_listing, verb_listing, NULL, NULL},
    {"workers", ADMIN_ARGS_NONE, false, &workers_listing, verb_listing, NULL, NULL},
    {"jobs", ADMIN_ARGS_NONE, false, &jobs_listing, verb_listing, NULL, NULL},
    {"version", ADMIN_ARGS_NONE, false, &version_listing, verb_listing, NULL, NULL},
    {"stats", ADMIN_ARGS_NONE, false, &stats_listing, verb_listing, NULL, NULL},
    {"job", ADMIN_ARGS_JOB, false, &job_listing, verb_job,
     LISTING_USAGE "       HANDLE | -f FUNCTION -u UNIQUE\n", NULL},
    {"result", ADMIN_ARGS_JOB, false, NULL, verb_result,
     LISTING_USAGE "       HANDLE | -f FUNCTION -u UNIQUE\n", NULL},
    {"dead", ADMIN_ARGS_DEAD, false, &dead_listing, verb_dead,
     " list [FUNCTION]  (dsjobd --max-dead)\n"
     "       dsjob dead retry|drop HANDLE|FUNCTION\n"
     "  [-s SERVER]... [-t MS] [--format table|tsv|json]\n",
     NULL},
    {"limit", ADMIN_ARGS_LIMIT, false, &limit_listing, verb_limit,
     " [-s SERVER]... [-t MS] [--format table|tsv|json] [FUNCTION]\n"
     "       dsjob limit FUNCTION [--concurrency N] [--rate N/s|m|h [--burst N]]\n"
     "         [--key-concurrency N] [--key-rate N/s|m|h [--key-burst N]]\n"
     "         [--key-separator S] [--keyed] [--sequence[=hold|skip|off]] [--off]\n",
     "Without settings, shows flow control: settings, running and queued jobs,\n"
     "tokens, keys, why jobs are held back, starts. With settings, sets them on\n"
     "every server (dsjobd; an --admin-allow peer): 0 or off removes a limit,\n"
     "--off every limit. Keys are the part of a job's unique key before the\n"
     "separator (default ':'). --sequence runs each key's jobs one at a time in\n"
     "submission order; a failed job holds its key through its retries and, with\n"
     "hold (the default), in the dead set until it is retried or dropped; with\n"
     "skip, the next job runs once it is dead.\n"},
    {"pause", ADMIN_ARGS_FUNC, false, NULL, verb_limit, " [-s SERVER]... [-t MS] FUNCTION\n",
     "Starts no more jobs of FUNCTION on every server; submits are still taken\n"
     "and running jobs finish. Kept by a durable store across restarts.\n"},
    {"resume", ADMIN_ARGS_FUNC, false, NULL, verb_limit, " [-s SERVER]... [-t MS] FUNCTION\n",
     "Starts FUNCTION's jobs again after dsjob pause.\n"},
    {"schedule", ADMIN_ARGS_SCHED, false, &schedule_listing, verb_schedule,
     " add [--tz ZONE] [-p high|normal|low] [--missed skip|once]\n"
     "         NAME 'CRON' FUNCTION [PAYLOAD]\n"
     "       dsjob schedule list\n"
     "       dsjob schedule pause|resume|rm NAME\n"
     "  [-s SERVER]... [-t MS] [--format table|tsv|json]\n",
     "Periodic schedules (dsjobd): each tick of CRON (five fields, or six with seconds\n"
     "first; in ZONE, default UTC) submits a background job of FUNCTION with PAYLOAD\n"
     "and the unique key sched:NAME:TICK. --missed once runs one missed tick after the\n"
     "server was down (default skip). Every server given is told; list asks them all.\n"
     "      --tz ZONE        an IANA zone such as Europe/Berlin (default UTC)\n"
     "  -p, --priority P     high, normal (default) or low\n"
     "      --missed M       skip (default) or once\n"},
    {"cancel", ADMIN_ARGS_HANDLE, false, NULL, verb_cancel, " [-s SERVER]... [-t MS] HANDLE\n",
     "Cancels the job on the server that has it (every server is asked).\n"},
    {"maxage", ADMIN_ARGS_SECS, false, NULL, verb_secs,
     " [-s SERVER]... [-t MS] FUNCTION [SECONDS]\n",
     "Sets (or prints) how long a job of FUNCTION may wait to start before it\n"
     "expires to the dead set; 0 gives it back to dsjobd --max-queue-age.\n"},
    {"uniquefor", ADMIN_ARGS_SECS, false, NULL, verb_secs,
     " [-s SERVER]... [-t MS] FUNCTION [SECONDS]\n",
     "Sets (or prints) how long an ended job's unique key stays taken: a submit\n"
     "with it gets the ended job's handle and outcome; 0 gives it back to\n"
     "dsjobd --unique-for.\n"},
    {"shutdown", ADMIN_ARGS_NONE, true, NULL, verb_shutdown,
     " [-s SERVER]... [-t MS] [--graceful]\n",
     "Stops each server; --graceful lets running jobs finish first.\n"},
};

static void
admin_usage(const struct admin_verb *v)
{
    printf("usage: dsjob %s%s%s", v->name, v->usage ? v->usage : LISTING_USAGE,
           v->what ? v->what : "");
    printf("  -s, --server ADDR    host[:port] (4730) or /unix/socket, repeatable\n"
           "  -t, --timeout MS     connect and reply timeout per server (default %d)\n",
           ADMIN_TIMEOUT_MS);
}

/*
 * admin_words reads the words after v's options (argv from *optind, nargs
 * of them) into call; returns 0 or a usage error.
 */
static int
admin_words(struct cli *cli, const struct admin_verb *v, char **argv, int nargs,
            struct admin_call *call)
{
    bool listing = false;
    int want = 0;

    if (v->args == ADMIN_ARGS_SCHED) {
        if (nargs == 0)
            return cli_usage_error(cli, "missing add, list, pause, resume or rm");
        call->sub = *argv++;
        nargs--;
        if (strcmp(call->sub, "add") == 0) {
            if (nargs < 3 || nargs > 4)
                return cli_usage_error(cli, "schedule add takes NAME 'CRON' FUNCTION [PAYLOAD]");
            if (!handle_ok(argv[0]) || !handle_ok(argv[2]))
                return cli_usage_error(cli, "NAME and FUNCTION are one word each");
            call->words = argv;
            call->nwords = nargs;
            return 0;
        }
        if (call->tz || call->prio || call->missed)
            return cli_usage_error(cli, "--tz, --priority and --missed are for schedule add");
        if (strcmp(call->sub, "list") == 0)
            want = 0;
        else if (strcmp(call->sub, "pause") == 0 || strcmp(call->sub, "resume") == 0 ||
                 strcmp(call->sub, "rm") == 0)
            want = 1;
        else
            return cli_usage_error(cli,
                                   "unknown 'schedule %s' (want add, list, pause, resume "
                                   "or rm)",
                                   call->sub);
        if (nargs != want)
            return cli_usage_error(cli, want ? "missing NAME" : "unexpected argument '%s'",
                                   want ? "" : argv[0]);
        call->arg = want ? argv[0] : NULL;
        if (call->arg != NULL && !handle_ok(call->arg))
            return cli_usage_error(cli, "bad NAME '%s'", call->arg);
        return 0;
    }
    if (v->args == ADMIN_ARGS_DEAD) {
        if (nargs == 0)
            return cli_usage_error(cli, "missing list, retry or drop");
        call->sub = *argv++;
        nargs--;
        listing = strcmp(call->sub, "list") == 0;
        if (!listing && strcmp(call->sub, "retry") != 0 && strcmp(call->sub, "drop") != 0)
            return cli_usage_error(cli, "unknown 'dead %s' (want list, retry or drop)", call->sub);
        want = !listing;
    }
    if (v->args == ADMIN_ARGS_HANDLE || v->args == ADMIN_ARGS_FUNC)
        want = 1;
    if (v->args == ADMIN_ARGS_LIMIT) {
        if (nargs > 1)
            return cli_usage_error(cli, "unexpected argument '%s'", argv[1]);
        if (nargs == 0 && call->settings[0] != '\0')
            return cli_usage_error(cli, "missing FUNCTION");
        listing = true;
        want = nargs;
    }
    if (v->args == ADMIN_ARGS_SECS) {
        unsigned long secs;

        if (nargs < 1)
            return cli_usage_error(cli, "missing FUNCTION");
        if (nargs > 2)
            return cli_usage_error(cli, "unexpected argument '%s'", argv[2]);
        if (!handle_ok(argv[0]))
            return cli_usage_error(cli, "bad FUNCTION '%s' (no spaces or control characters)",
                                   argv[0]);
        if (nargs == 2 && cli_parse_uint(argv[1], 0, 86400 * 365, &secs) < 0)
            return cli_usage_error(cli, "SECONDS wants 0 to 31536000, not '%s'", argv[1]);
        call->arg = argv[0];
        call->sub = nargs == 2 ? argv[1] : NULL;
        return 0;
    }
    if (v->args == ADMIN_ARGS_JOB) {
        if ((call->func != NULL) != (call->uniq != NULL))
            return cli_usage_error(cli, "options '-f' and '-u' go together");
        want = call->func == NULL;
    }
    if (nargs < want)
        return cli_usage_error(cli, "missing %s",
                               v->args == ADMIN_ARGS_DEAD   ? "HANDLE or FUNCTION"
                               : v->args == ADMIN_ARGS_FUNC ? "FUNCTION"
                                                            : "HANDLE");
    if (listing && nargs >= 1)
        want = 1; /* dead list FUNCTION */
    if (nargs > want)
        return cli_usage_error(cli, "unexpected argument '%s'", argv[want]);
    call->arg = want ? argv[0] : NULL;
    if (call->arg != NULL && !handle_ok(call->arg))
        return cli_usage_error(cli, "bad %s '%s' (no spaces or control characters)",
                               listing || v->args == ADMIN_ARGS_FUNC ? "FUNCTION" : "HANDLE",
                               call->arg);
    return 0;
}

int
admin_main(struct cli *cli, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_GLOBAL_LONG,
        {"graceful", no_argument, NULL, OPT_GRACEFUL},
        {"function", required_argument, NULL, 'f'},
        {"unique", required_argument, NULL, 'u'},
        {"concurrency", required_argument, NULL, OPT_LIMIT},
        {"rate", required_argument, NULL, OPT_LIMIT},
        {"burst", required_argument, NULL, OPT_LIMIT},
        {"key-concurrency", required_argument, NULL, OPT_LIMIT},
        {"key-rate", required_argument, NULL, OPT_LIMIT},
        {"key-burst", required_argument, NULL, OPT_LIMIT},
        {"key-separator", required_argument, NULL, OPT_LIMIT},
        {"keyed", no_argument, NULL, OPT_LIMIT},
        {"sequence", optional_argument, NULL, OPT_LIMIT},
        {"off", no_argument, NULL, OPT_LIMIT},
        {"tz", required_argument, NULL, OPT_TZ},
        {"priority", required_argument, NULL, 'p'},
        {"missed", required_argument, NULL, OPT_MISSED},
        {NULL, 0, NULL, 0},
    };
    int idx = -1;
    const struct admin_verb *v = admin_verbs;
    struct admin_call call = {0};
    int ch, rc;

    while (strcmp(v->name, cli->verb) != 0)
        if (++v == admin_verbs + sizeof(admin_verbs) / sizeof(admin_verbs[0]))
            return cli_usage_error(cli, "unknown verb");
    while ((ch = getopt_long(argc, argv, ":f:u:p:" CLI_GLOBAL_SHORT, longopts, &idx)) != -1) {
        switch (ch) {
        case OPT_LIMIT:
            if (v->args != ADMIN_ARGS_LIMIT)
                return cli_usage_error(cli, "unknown option '--%s' (only for limit)",
                                       longopts[idx].name);
            rc = limit_opt(cli, &call, longopts[idx].name,
                           optarg == NULL && strcmp(longopts[idx].name, "sequence") == 0 ? "hold"
                                                                                         : optarg);
            if (rc != 0)
                return rc;
            break;
        case OPT_TZ:
        case OPT_MISSED:
        case 'p':
            if (v->args != ADMIN_ARGS_SCHED)
                return cli_usage_error(cli, "unknown option '%s' (only for schedule add)",
                                       argv[optind - 1]);
            if (!handle_ok(optarg))
                return cli_usage_error(cli, "option '%s' wants one word", argv[optind - 1]);
            *(ch == OPT_TZ ? &call.tz : ch == 'p' ? &call.prio : &call.missed) = optarg;
            break;
        case 'h': admin_usage(v); return CLI_OK;
        case OPT_GRACEFUL:
            if (!v->graceful)
                return cli_usage_error(cli, "unknown option '--graceful' (only for shutdown)");
            call.graceful = true;
            break;
        case 'f':
        case 'u':
            if (v->args != ADMIN_ARGS_JOB)
                return cli_usage_error(cli, "unknown option '-%c' (only for job and result)", ch);
            if (!handle_ok(optarg))
                return cli_usage_error(cli, "option '-%c' wants one word, not '%s'", ch, optarg);
            *(ch == 'f' ? &call.func : &call.uniq) = optarg;
            break;
        case '?':
        case ':': return cli_getopt_error(cli, ch, argv);
        default:
            rc = cli_global_opt(cli, ch, optarg);
            if (rc != 0)
                return rc < 0 ? cli_getopt_error(cli, '?', argv) : rc;
            break;
        }
    }
    rc = admin_words(cli, v, argv + optind, argc - optind, &call);
    if (rc != 0)
        return rc;
    rc = cli_servers(cli);
    if (rc != 0)
        return rc;
    if (cli->ssl) {
        char err[LINK_ERR_LEN];

        cli->admin_tls =
            link_tls_new(cli->ssl_ca, cli->ssl_cert, cli->ssl_key, 0, err, sizeof(err));
        if (cli->admin_tls == NULL)
            return cli_usage_error(cli, "--ssl: %s", err);
    }
    rc = v->run(cli, v, &call);
    link_tls_free(cli->admin_tls);
    cli->admin_tls = NULL;
    return rc;
}
