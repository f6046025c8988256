/*
 * The admin verbs of dsjob: status, workers, jobs, stats, cancel, shutdown
 * and version. libdsjobclient speaks only the binary protocol, so this file has
 * its own small client for the text protocol: connect (TCP or a unix
 * socket) without blocking, send one line, and read the reply with poll()
 * until it is complete (a listing ends with a "." line; every other reply
 * is one line) or the deadline passes. Each server given is asked in turn;
 * listings are parsed into rows (table.c prints them) with a server column
 * when there are several. An "ERR CODE text+with+pluses" reply goes to
 * stderr with the pluses turned back into spaces.
 */
#include "config.h"
#include "dsjob.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "link/addr.h"
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

/* A reply being read. */
struct reply {
    char *buf;  /* the bytes (malloc'd, NUL-terminated) */
    size_t len; /* bytes in buf */
    size_t cap; /* size of buf */
};

static long long
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
left_ms(long long deadline)
{
    long long left = deadline - now_ms();

    return left < 0 ? 0 : (int)left;
}

/* Waits for fd to become ready for events; returns 0, or -1 with errno (ETIMEDOUT). */
static int
wait_fd(int fd, short events, long long deadline)
{
    struct pollfd pfd = {.fd = fd, .events = events};

    for (;;) {
        int r = poll(&pfd, 1, left_ms(deadline));

        if (r > 0)
            return 0;
        if (r == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (errno != EINTR)
            return -1;
    }
}

static int
connect_addr(int family, const struct sockaddr *sa, socklen_t salen, long long deadline)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int soerr = 0;
    socklen_t len = sizeof(soerr);

    if (fd < 0)
        return -1;
    if (connect(fd, sa, salen) == 0)
        return fd;
    if (errno != EINPROGRESS && errno != EAGAIN)
        goto fail;
    if (wait_fd(fd, POLLOUT, deadline) < 0)
        goto fail;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        goto fail;
    if (soerr != 0) {
        errno = soerr;
        goto fail;
    }
    return fd;
fail:
    soerr = errno;
    close(fd);
    errno = soerr;
    return -1;
}

/*
 * Connects to addr ("/path", "host[:port]", "[v6][:port]"; checked by
 * cli_servers, normalized here). Returns the socket, or -1 with the reason
 * in err.
 */
static int
admin_connect(const char *addr, long long deadline, char *err, size_t cap)
{
    struct addrinfo hints, *res = NULL, *ai;
    char host[256], norm[300];
    const char *port;
    int fd = -1, gai;

    if (addr[0] == '/') {
        struct sockaddr_un sun;

        memset(&sun, 0, sizeof(sun));
        sun.sun_family = AF_UNIX;
        memcpy(sun.sun_path, addr, strlen(addr));
        fd = connect_addr(AF_UNIX, (struct sockaddr *)&sun, sizeof(sun), deadline);
        if (fd < 0)
            snprintf(err, cap, "connect: %s", strerror(errno));
        return fd;
    }
    if (addr_normalize(addr, norm, sizeof(norm)) != 0 ||
        (port = addr_split(norm, host, sizeof(host))) == NULL) {
        snprintf(err, cap, "bad server address");
        return -1;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, cap, "resolve: %s", gai_strerror(gai));
        return -1;
    }
    snprintf(err, cap, "connect: no address");
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = connect_addr(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline);
        if (fd < 0)
            snprintf(err, cap, "connect: %s", strerror(errno));
    }
    freeaddrinfo(res);
    return fd;
}

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

/* Whether r holds a whole reply: one line, or for a listing up to a "." line. */
static bool
reply_complete(const struct reply *r, bool listing)
{
    const char *nl = memchr(r->buf, '\n', r->len);

    if (nl == NULL)
        return false;
    if (!listing || is_err_line(r->buf, r->len) || strncmp(r->buf, ".\n", 2) == 0 ||
        strncmp(r->buf, ".\r\n", 3) == 0)
        return true;
    return (r->len >= 3 && memcmp(r->buf + r->len - 3, "\n.\n", 3) == 0) ||
           (r->len >= 4 && memcmp(r->buf + r->len - 4, "\n.\r\n", 4) == 0);
}

/*
 * Sends line to the server on fd and reads its reply into r. Returns 0, or
 * -1 with the reason in err.
 */
static int
admin_exchange(int fd, const char *line, bool listing, long long deadline, struct reply *r,
               char *err, size_t cap)
{
    size_t off = 0, len = strlen(line);

    while (off < len) {
        ssize_t n = send(fd, line + off, len - off, MSG_NOSIGNAL);

        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT, deadline) == 0)
            continue;
        snprintf(err, cap, "send: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        ssize_t n;

        if (r->len + 4096 + 1 > r->cap) {
            size_t ncap = r->cap ? r->cap * 2 : 8192;
            char *nb;

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
        n = recv(fd, r->buf + r->len, r->cap - r->len - 1, 0);
        if (n > 0) {
            r->len += (size_t)n;
            r->buf[r->len] = '\0';
            if (reply_complete(r, listing))
                return 0;
            continue;
        }
        if (n == 0) {
            snprintf(err, cap, "the server closed the connection before the reply ended");
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN && wait_fd(fd, POLLIN, deadline) == 0)
            continue;
        if (errno == ETIMEDOUT)
            snprintf(err, cap, "no complete reply in time");
        else
            snprintf(err, cap, "recv: %s", strerror(errno));
        return -1;
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
admin_ask(const struct cli *cli, const char *server, const char *line, bool listing,
          struct reply *r, bool quiet_err)
{
    long long deadline = now_ms() + (cli->timeout_ms ? cli->timeout_ms : ADMIN_TIMEOUT_MS);
    char err[256];
    const char *next;
    int fd;

    memset(r, 0, sizeof(*r));
    fd = admin_connect(server, deadline, err, sizeof(err));
    if (fd < 0) {
        cli_err("%s: %s", server, err);
        return ADMIN_DOWN;
    }
    if (admin_exchange(fd, line, listing, deadline, r, err, sizeof(err)) < 0) {
        close(fd);
        cli_err("%s: %s", server, err);
        return ADMIN_BROKEN; /* it was reached: exit 1, not 3 */
    }
    close(fd);
    if (is_err_line(r->buf, r->len)) {
        if (!quiet_err)
            print_err_line(server, r->buf, line_len(r->buf, r->len, &next));
        return ADMIN_ERR;
    }
    return ADMIN_OK;
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
    const char *command;          /* the admin line sent */
    const struct table_col *cols; /* server first, then the reply's columns */
    size_t ncols;                 /* entries in cols, server included */
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
static const struct table_col stats_cols[] = {
    {"server", TABLE_STR},
    {"name", TABLE_STR},
    {"value", TABLE_NUM},
};
static const struct table_col version_cols[] = {
    {"server", TABLE_STR},
    {"version", TABLE_STR},
};

static const struct listing listings[] = {
    {"status", "status\n", status_cols, 5}, {"workers", "workers\n", workers_cols, 5},
    {"jobs", "show jobs\n", jobs_cols, 5},  {"version", "version\n", version_cols, 2},
    {"stats", "stats\n", stats_cols, 3},
};

/* Adds the rows of one server's reply to t; returns false on a line that does not parse. */
static bool
parse_reply(const struct listing *ls, const char *server, const struct reply *r, struct table *t)
{
    const char *cells[8], *p = r->buf, *end = r->buf + r->len, *next;
    size_t lens[8];

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
        size_t n = line_len(p, (size_t)(end - p), &next);
        bool ok;

        if (n == 1 && p[0] == '.')
            return true;
        if (ls->cols == workers_cols)
            ok = split_worker(p, n, cells + 1, lens + 1);
        else if (ls->cols == stats_cols)
            ok = split_stat(p, n, cells + 1, lens + 1);
        else
            ok = split_tabs(p, n, ls->ncols - 1, cells + 1, lens + 1);
        if (!ok) {
            cli_err("%s: cannot parse the %s line '%.*s'", server, ls->verb, (int)n, p);
            return false;
        }
        table_add(t, cells, lens);
        p = next;
    }
    return false;
}

static int
run_listing(struct cli *cli, const struct listing *ls)
{
    struct table t;
    size_t i, ndown = 0;
    int rc = CLI_OK;

    table_init(&t, ls->cols, ls->ncols);
    for (i = 0; i < cli->nservers; i++) {
        struct reply r;
        enum admin_result res =
            admin_ask(cli, cli->servers[i], ls->command, ls->cols != version_cols, &r, false);

        if (res == ADMIN_OK && !parse_reply(ls, cli->servers[i], &r, &t)) {
            if (ls->cols == version_cols)
                cli_err("%s: unexpected reply to version: '%.*s'", cli->servers[i],
                        (int)strcspn(r.buf, "\r\n"), r.buf);
            rc = CLI_FAILED;
        }
        if (res == ADMIN_ERR || res == ADMIN_BROKEN)
            rc = CLI_FAILED;
        if (res == ADMIN_DOWN) {
            ndown++;
            rc = CLI_FAILED;
        }
        free(r.buf);
    }
    if (ndown == cli->nservers)
        rc = CLI_UNREACHABLE;
    /* JSON readers get a document even with no server up: the empty array. */
    if ((rc != CLI_UNREACHABLE || cli->format == CLI_FORMAT_JSON) &&
        table_print(&t, cli->format, cli->nservers > 1 ? 0 : 1, stdout) < 0) {
        cli_err("write to standard output: %s", strerror(errno));
        rc = CLI_FAILED;
    }
    table_release(&t);
    return rc;
}

/*
 * cancel: a handle does not name its server, so every server is asked; it
 * is done when one of them knew the job. Errors are printed only then.
 */
static int
run_cancel(struct cli *cli, const char *handle)
{
    enum admin_result *res = cli_xmalloc(cli->nservers * sizeof(*res));
    struct reply *rs = cli_xmalloc(cli->nservers * sizeof(*rs));
    size_t i, ndown = 0, nok = 0;
    size_t hl = strlen(handle);
    char *line = cli_xmalloc(hl + 16);
    int rc;

    snprintf(line, hl + 16, "cancel job %s\n", handle);
    for (i = 0; i < cli->nservers; i++) {
        res[i] = admin_ask(cli, cli->servers[i], line, false, &rs[i], true);
        if (res[i] == ADMIN_OK)
            nok++;
        if (res[i] == ADMIN_DOWN)
            ndown++;
    }
    if (nok > 0) {
        rc = CLI_OK;
    } else {
        for (i = 0; i < cli->nservers; i++) {
            const char *next;

            if (res[i] == ADMIN_ERR)
                print_err_line(cli->servers[i], rs[i].buf, line_len(rs[i].buf, rs[i].len, &next));
        }
        rc = ndown == cli->nservers ? CLI_UNREACHABLE : CLI_FAILED;
    }
    for (i = 0; i < cli->nservers; i++)
        free(rs[i].buf);
    free(rs);
    free(res);
    free(line);
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
            admin_ask(cli, cli->servers[i], graceful ? "shutdown graceful\n" : "shutdown\n", false,
                      &r, false);

        if (res != ADMIN_OK)
            rc = CLI_FAILED;
        if (res == ADMIN_DOWN)
            ndown++;
        free(r.buf);
    }
    return ndown == cli->nservers ? CLI_UNREACHABLE : rc;
}

static void
admin_usage(const char *verb)
{
    if (strcmp(verb, "cancel") == 0)
        printf("usage: dsjob cancel [-s SERVER]... [-t MS] HANDLE\n"
               "Cancels the job on the server that has it (every server is asked).\n");
    else if (strcmp(verb, "shutdown") == 0)
        printf("usage: dsjob shutdown [-s SERVER]... [-t MS] [--graceful]\n"
               "Stops each server; --graceful lets running jobs finish first.\n");
    else
        printf("usage: dsjob %s [-s SERVER]... [-t MS] [--format table|tsv|json]\n", verb);
    printf("  -s, --server ADDR    host[:port] (4730) or /unix/socket, repeatable\n"
           "  -t, --timeout MS     connect and reply timeout per server (default %d)\n",
           ADMIN_TIMEOUT_MS);
}

/* A handle is one word of the text protocol: no space or control byte. */
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

int
admin_main(struct cli *cli, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_GLOBAL_LONG,
        {"graceful", no_argument, NULL, OPT_GRACEFUL},
        {NULL, 0, NULL, 0},
    };
    bool is_cancel = strcmp(cli->verb, "cancel") == 0;
    bool is_shutdown = strcmp(cli->verb, "shutdown") == 0;
    bool graceful = false;
    size_t i;
    int ch, rc, nargs;

    while ((ch = getopt_long(argc, argv, ":" CLI_GLOBAL_SHORT, longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': admin_usage(cli->verb); return CLI_OK;
        case OPT_GRACEFUL:
            if (!is_shutdown)
                return cli_usage_error(cli, "unknown option '--graceful' (only for shutdown)");
            graceful = true;
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
    nargs = argc - optind;
    if (is_cancel && nargs == 0)
        return cli_usage_error(cli, "missing HANDLE");
    if (nargs > (is_cancel ? 1 : 0))
        return cli_usage_error(cli, "unexpected argument '%s'", argv[optind + (is_cancel ? 1 : 0)]);
    if (is_cancel && !handle_ok(argv[optind]))
        return cli_usage_error(cli, "bad HANDLE '%s' (no spaces or control characters)",
                               argv[optind]);
    rc = cli_servers(cli);
    if (rc != 0)
        return rc;
    if (is_cancel)
        return run_cancel(cli, argv[optind]);
    if (is_shutdown)
        return run_shutdown(cli, graceful);
    for (i = 0; i < sizeof(listings) / sizeof(listings[0]); i++) {
        if (strcmp(cli->verb, listings[i].verb) == 0)
            return run_listing(cli, &listings[i]);
    }
    return cli_usage_error(cli, "unknown verb");
}
