/*
 * dsjob: the command line of the dsjob job server. One binary, one verb per
 * task: submit a job (submit.c), run a command as a worker (runner.c), and
 * the admin verbs over the text protocol (admin.c). This file reads the
 * options that come before the verb, finds the verb, and holds the helpers
 * the verbs share: usage errors that name the offending option, the server
 * list (-s, else DSJOB_SERVERS, else 127.0.0.1:4730), and small I/O
 * utilities. Exit codes are listed in dsjob.h and dsjob(1).
 */
#include "config.h"
#include "dsjob.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/client.h>
#include <dsjob/common.h>
#include <dsjob/worker.h>

#include "link/addr.h"
#include "proto/decimal.h"

#define CLI_DEFAULT_SERVER "127.0.0.1:4730"

static const char usage_text[] =
    "usage: dsjob [-s SERVER]... [-t MS] VERB [OPTIONS] [ARGS]\n"
    "\n"
    "verbs:\n"
    "  submit [-b] [-p high|normal|low] [-u UNIQUE] [-k KEY] [--at EPOCH]\n"
    "         [--accept-timeout MS] [--expire-in SECONDS | --deadline EPOCH]\n"
    "         [--after H[,H...] [--after-fail fail|cancel|run]] FUNCTION [DATA]\n"
    "                       run a job (DATA from stdin when absent)\n"
    "  worker [-c N] [-i ID] [--stream] [--chunk BYTES] [--warnings] [--exceptions]\n"
    "         -f FUNCTION... -- COMMAND [ARG]...\n"
    "                       do jobs by running COMMAND for each\n"
    "  status               functions: jobs, running jobs, workers\n"
    "  workers              connections and their functions\n"
    "  jobs                 jobs: function, priority, state, run-at time\n"
    "  job HANDLE | job -f FUNCTION -u UNIQUE\n"
    "                       one job, field by field (dsjobd)\n"
    "  result HANDLE | result -f FUNCTION -u UNIQUE\n"
    "                       a kept result's bytes (dsjobd --keep-results)\n"
    "  dead list [FUNCTION] | dead retry|drop HANDLE|FUNCTION\n"
    "                       failed background jobs (dsjobd --max-dead)\n"
    "  stats                the server's counters (dsjobd), one per row\n"
    "  limit [FUNCTION] [--concurrency N] [--rate N/s|m|h] [--burst N] [--key-...]\n"
    "        [--sequence[=hold|skip]]\n"
    "                       show or set flow control, sequences (dsjobd)\n"
    "  pause FUNCTION | resume FUNCTION\n"
    "                       start no more of its jobs, or start them again (dsjobd)\n"
    "  maxage FUNCTION [SECONDS]\n"
    "                       a job not started that long expires (dsjobd)\n"
    "  uniquefor FUNCTION [SECONDS]\n"
    "                       an ended job's unique key stays taken that long (dsjobd)\n"
    "  schedule add [--tz ZONE] [-p high|normal|low] [--missed skip|once]\n"
    "         NAME 'CRON' FUNCTION [PAYLOAD]\n"
    "  schedule list | schedule pause|resume|rm NAME\n"
    "                       periodic jobs, one per tick of a cron expression (dsjobd)\n"
    "  batch open [--on-complete FUNCTION] [--on-success FUNCTION] ID\n"
    "  batch add [-n N] [-u UNIQUE] ID FUNCTION [DATA] | batch close|status|drop ID\n"
    "  batch list           background jobs counted together, with callbacks (dsjobd)\n"
    "  cancel HANDLE        cancel a job\n"
    "  shutdown [--graceful]\n"
    "                       stop the server (dsjobd)\n"
    "  version              the server's version\n"
    "\n"
    "options of every verb:\n"
    "  -s, --server ADDR    host[:port] (4730) or /unix/socket, repeatable\n"
    "                       (default: $DSJOB_SERVERS, else " CLI_DEFAULT_SERVER ")\n"
    "  -t, --timeout MS     connect and reply timeout in milliseconds\n"
    "      --format FMT     table, tsv or json (admin verbs)\n"
    "      --ssl            TLS to TCP servers (every verb; a unix socket stays plain)\n"
    "      --ssl-ca-file FILE  CAs the server's certificate is checked against\n"
    "                       (default: the system's; also $DSJOB_SSL_CA_FILE)\n"
    "      --ssl-certificate FILE, --ssl-key FILE\n"
    "                       a client certificate and its key (also $DSJOB_SSL_CERTIFICATE,\n"
    "                       $DSJOB_SSL_KEY); each of the three implies --ssl\n"
    "  -h, --help           this text, or a verb's with dsjob VERB --help\n"
    "      --version        dsjob's version\n"
    "\n"
    "exit status: 0 done, 1 job failed or server error, 2 usage, 3 no server reachable\n";

void
cli_err(const char *fmt, ...)
{
    va_list ap;

    /* Worker threads report too: keep each message one piece. */
    flockfile(stderr);
    fputs("dsjob: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}

int
cli_usage_error(const struct cli *cli, const char *fmt, ...)
{
    va_list ap;

    if (cli->verb != NULL)
        fprintf(stderr, "dsjob %s: ", cli->verb);
    else
        fputs("dsjob: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fprintf(stderr, "Try 'dsjob %s%s--help'.\n", cli->verb ? cli->verb : "", cli->verb ? " " : "");
    return CLI_USAGE;
}

int
cli_getopt_error(const struct cli *cli, int c, char **argv)
{
    /* getopt leaves the offending word at optind - 1 (or the word it was in). */
    const char *word = optind > 0 ? argv[optind - 1] : "";
    char name[64];

    if (word != NULL && strncmp(word, "--", 2) == 0) {
        size_t n = strcspn(word, "=");

        snprintf(name, sizeof(name), "%.*s", (int)(n < 60 ? n : 60), word);
    } else if (optopt > 0 && optopt < 256) {
        snprintf(name, sizeof(name), "-%c", optopt);
    } else {
        snprintf(name, sizeof(name), "%.60s", word ? word : "");
    }
    if (c == ':')
        return cli_usage_error(cli, "option '%s' needs an argument", name);
    return cli_usage_error(cli, "unknown option '%s'", name);
}

void *
cli_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL) {
        cli_err("out of memory");
        exit(CLI_FAILED);
    }
    return p;
}

static char *
xstrndup(const char *s, size_t n)
{
    char *p = cli_xmalloc(n + 1);

    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

int
cli_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int
cli_parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
    uint64_t v;

    if (s == NULL || decimal_parse(s, strlen(s), max, &v) != 0 || v < min)
        return -1;
    *out = (unsigned long)v;
    return 0;
}

/* Adds each non-empty, space-trimmed entry of a comma-separated list. */
static void
add_server_list(struct cli *cli, const char *list)
{
    const char *p = list;

    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        const char *s = p, *e = p + n;

        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > s) {
            char **ns = realloc(cli->servers, (cli->nservers + 1) * sizeof(*ns));

            if (ns == NULL) {
                cli_err("out of memory");
                exit(CLI_FAILED);
            }
            cli->servers = ns;
            cli->servers[cli->nservers++] = xstrndup(s, (size_t)(e - s));
        }
        p += n;
        if (*p == ',')
            p++;
    }
}

/* The address forms the libraries take (link/addr.h): /path, host[:port], [v6][:port]. */
static bool
server_addr_ok(const char *a)
{
    size_t cap = strlen(a) + ADDR_EXTRA;
    char *norm = malloc(cap);
    bool ok = norm != NULL && addr_normalize(a, norm, cap) == 0;

    free(norm);
    return ok;
}

int
cli_servers(struct cli *cli)
{
    size_t i;

    const struct {
        const char *name;  /* the environment variable */
        const char **slot; /* the option it stands in for */
    } tls_env[] = {
        {"DSJOB_SSL_CA_FILE", &cli->ssl_ca},
        {"DSJOB_SSL_CERTIFICATE", &cli->ssl_cert},
        {"DSJOB_SSL_KEY", &cli->ssl_key},
    };

    for (i = 0; i < sizeof(tls_env) / sizeof(tls_env[0]); i++) {
        const char *v = getenv(tls_env[i].name);

        if (*tls_env[i].slot == NULL && v != NULL && *v != '\0') {
            *tls_env[i].slot = v;
            cli->ssl = true;
        }
    }
    if (cli->nservers == 0) {
        const char *env = getenv("DSJOB_SERVERS");

        if (env != NULL)
            add_server_list(cli, env);
        if (cli->nservers == 0)
            add_server_list(cli, CLI_DEFAULT_SERVER);
    }
    for (i = 0; i < cli->nservers; i++) {
        if (!server_addr_ok(cli->servers[i]))
            return cli_usage_error(cli, "bad server address '%s' (want host[:port] or /path)",
                                   cli->servers[i]);
    }
    return 0;
}

int
cli_global_opt(struct cli *cli, int c, const char *arg)
{
    unsigned long v;

    switch (c) {
    case 's': {
        size_t had = cli->nservers;

        add_server_list(cli, arg);
        /* An empty -s (a variable that was not set, say) is not "the default server". */
        if (cli->nservers == had)
            return cli_usage_error(cli, "option '-s' wants an address, not '%s'", arg);
        return 0;
    }
    case OPT_SSL: cli->ssl = true; return 0;
    case OPT_SSL_CA:
    case OPT_SSL_CERT:
    case OPT_SSL_KEY:
        if (*arg == '\0')
            return cli_usage_error(cli, "option '%s' wants a file, not ''",
                                   c == OPT_SSL_CA     ? "--ssl-ca-file"
                                   : c == OPT_SSL_CERT ? "--ssl-certificate"
                                                       : "--ssl-key");
        *(c == OPT_SSL_CA     ? &cli->ssl_ca
          : c == OPT_SSL_CERT ? &cli->ssl_cert
                              : &cli->ssl_key) = arg;
        cli->ssl = true;
        return 0;
    case 't':
        if (cli_parse_uint(arg, 1, 86400000, &v) < 0)
            return cli_usage_error(cli, "option '-t' wants milliseconds (1 to 86400000), not '%s'",
                                   arg);
        cli->timeout_ms = (int)v;
        return 0;
    case OPT_FORMAT:
        if (strcmp(arg, "table") == 0)
            cli->format = CLI_FORMAT_TABLE;
        else if (strcmp(arg, "tsv") == 0)
            cli->format = CLI_FORMAT_TSV;
        else if (strcmp(arg, "json") == 0)
            cli->format = CLI_FORMAT_JSON;
        else
            return cli_usage_error(cli, "option '--format' wants table, tsv or json, not '%s'",
                                   arg);
        return 0;
    default: return -1;
    }
}

int
cli_tls_client(const struct cli *cli, struct dsjob_client *c)
{
    if (!cli->ssl)
        return 0;
    if (dsjob_client_set_tls(c, cli->ssl_ca, cli->ssl_cert, cli->ssl_key, 0) != DSJOB_OK)
        return cli_usage_error(cli, "--ssl: %s", dsjob_client_errmsg(c));
    return 0;
}

int
cli_tls_worker(const struct cli *cli, struct dsjob_worker *w)
{
    if (!cli->ssl)
        return 0;
    if (dsjob_worker_set_tls(w, cli->ssl_ca, cli->ssl_cert, cli->ssl_key, 0) != DSJOB_OK)
        return cli_usage_error(cli, "--ssl: %s", dsjob_worker_errmsg(w));
    return 0;
}

static void
cli_release(struct cli *cli)
{
    size_t i;

    for (i = 0; i < cli->nservers; i++)
        free(cli->servers[i]);
    free(cli->servers);
}

static const struct verb {
    const char *name;                        /* the word on the command line */
    int (*main)(struct cli *, int, char **); /* its entry point */
} verbs[] = {
    {"submit", submit_main},  {"worker", runner_main},   {"status", admin_main},
    {"workers", admin_main},  {"jobs", admin_main},      {"cancel", admin_main},
    {"shutdown", admin_main}, {"version", admin_main},   {"job", admin_main},
    {"result", admin_main},   {"dead", admin_main},      {"stats", admin_main},
    {"limit", admin_main},    {"pause", admin_main},     {"resume", admin_main},
    {"maxage", admin_main},   {"uniquefor", admin_main}, {"schedule", admin_main},
    {"batch", batch_main},
};

void
cli_reserve_fds(int highest)
{
    for (;;) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

        if (fd < 0)
            return;
        if (fd > highest) {
            close(fd);
            return;
        }
        /* The command of a worker may inherit 0 to 2: keep those ordinary. */
        if (fd <= 2)
            fcntl(fd, F_SETFD, 0);
    }
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_GLOBAL_LONG,
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    struct cli cli;
    size_t i;
    int c, r;

    memset(&cli, 0, sizeof(cli));
    /*
     * With fd 0, 1 or 2 closed, the first socket would take its number and
     * a result "written to stdout" would go to the server. And a closed
     * pipe on stdout is a write error (exit 1), not death by SIGPIPE.
     */
    cli_reserve_fds(2);
    signal(SIGPIPE, SIG_IGN);
    opterr = 0;
    /* '+': stop at the verb; its own options are read by the verb. */
    while ((c = getopt_long(argc, argv, "+:" CLI_GLOBAL_SHORT, longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage_text, stdout);
            cli_release(&cli);
            return CLI_OK;
        case OPT_VERSION:
            printf("dsjob %s (libdsjobclient %s)\n", DSJOB_VERSION_STRING, dsjob_version());
            cli_release(&cli);
            return CLI_OK;
        case '?':
        case ':': r = cli_getopt_error(&cli, c, argv); goto out;
        default:
            r = cli_global_opt(&cli, c, optarg);
            if (r != 0)
                goto out;
            break;
        }
    }
    if (optind >= argc) {
        fputs(usage_text, stderr);
        r = CLI_USAGE;
        goto out;
    }
    for (i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        if (strcmp(argv[optind], verbs[i].name) == 0) {
            cli.verb = verbs[i].name;
            /* The verb parses from its own name on; optind 0 resets getopt. */
            argc -= optind;
            argv += optind;
            optind = 0;
            r = verbs[i].main(&cli, argc, argv);
            goto out;
        }
    }
    r = cli_usage_error(&cli, "unknown verb '%s'", argv[optind]);
out:
    cli_release(&cli);
    return r;
}
