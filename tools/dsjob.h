/*
 * What the files of the dsjob command line share: the exit codes, the
 * options every verb takes (servers, timeout, output format), the option
 * parsing helpers that turn getopt's complaints into usage errors naming
 * the option, and one entry point per verb.
 */
#ifndef DSJOB_TOOLS_DSJOB_H
#define DSJOB_TOOLS_DSJOB_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Exit codes: part of the interface that scripts rely on (see dsjob(1)). */
enum cli_exit {
    CLI_OK = 0,          /* the job completed, the admin command succeeded */
    CLI_FAILED = 1,      /* the job failed or raised an exception; a server said ERR */
    CLI_USAGE = 2,       /* bad command line */
    CLI_UNREACHABLE = 3, /* no server could be reached */
};

/* How admin verbs print their rows. */
enum cli_format {
    CLI_FORMAT_TABLE = 0, /* aligned columns under a header, for people */
    CLI_FORMAT_TSV,       /* tab-separated, no header, for scripts */
    CLI_FORMAT_JSON,      /* one JSON array of objects (written by jansson) */
};

/* Long-only options; short ones use their letter. */
enum cli_opt {
    OPT_FORMAT = 256,   /* --format */
    OPT_VERSION,        /* --version */
    OPT_AT,             /* submit --at */
    OPT_GRACEFUL,       /* shutdown --graceful */
    OPT_TZ,             /* schedule add --tz */
    OPT_MISSED,         /* schedule add --missed */
    OPT_STREAM,         /* worker --stream */
    OPT_CHUNK,          /* worker --chunk */
    OPT_WARNINGS,       /* worker --warnings */
    OPT_EXCEPTIONS,     /* worker --exceptions */
    OPT_SSL,            /* --ssl */
    OPT_SSL_CA,         /* --ssl-ca-file */
    OPT_SSL_CERT,       /* --ssl-certificate */
    OPT_SSL_KEY,        /* --ssl-key */
    OPT_ACCEPT_TIMEOUT, /* submit --accept-timeout */
    OPT_LIMIT,          /* limit's --concurrency, --rate, ... */
    OPT_EXPIRE_IN,      /* submit --expire-in */
    OPT_DEADLINE,       /* submit --deadline */
    OPT_AFTER,          /* submit --after */
    OPT_AFTER_FAIL,     /* submit --after-fail */
    OPT_ON_COMPLETE,    /* batch open --on-complete */
    OPT_ON_SUCCESS,     /* batch open --on-success */
    OPT_NUMBERED,       /* batch add --numbered */
};

/* The options every verb takes, and the verb being run. */
struct cli {
    const char *verb;       /* "submit", "worker", ...; borrowed from argv */
    char **servers;         /* the -s addresses (owned, each malloc'd) */
    size_t nservers;        /* entries in servers */
    int timeout_ms;         /* -t; 0 when not given */
    enum cli_format format; /* --format */
    bool ssl;               /* --ssl, or implied by a TLS file option or DSJOB_SSL_* */
    const char *ssl_ca;     /* --ssl-ca-file or DSJOB_SSL_CA_FILE (borrowed), or NULL */
    const char *ssl_cert;   /* --ssl-certificate or DSJOB_SSL_CERTIFICATE (borrowed), or NULL */
    const char *ssl_key;    /* --ssl-key or DSJOB_SSL_KEY (borrowed), or NULL */
    struct ssl_ctx_st *admin_tls; /* the admin verbs' TLS context with --ssl (owned), or NULL */
};

/*
 * The getopt_long entries of the options every verb takes, to be copied
 * first into each verb's table, and their letters for the optstring.
 */
#define CLI_GLOBAL_SHORT "s:t:h"
#define CLI_GLOBAL_LONG                                                                            \
    {"server", required_argument, NULL, 's'}, {"timeout", required_argument, NULL, 't'},           \
        {"help", no_argument, NULL, 'h'}, {"format", required_argument, NULL, OPT_FORMAT},         \
        {"ssl", no_argument, NULL, OPT_SSL}, {"ssl-ca-file", required_argument, NULL, OPT_SSL_CA}, \
        {"ssl-certificate", required_argument, NULL, OPT_SSL_CERT},                                \
    {                                                                                              \
        "ssl-key", required_argument, NULL, OPT_SSL_KEY                                            \
    }

/*
 * cli_usage_error prints "dsjob VERB: MESSAGE" and a hint to stderr and
 * returns CLI_USAGE, for return cli_usage_error(...).
 */
int cli_usage_error(const struct cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * cli_getopt_error turns getopt_long's '?' or ':' (c) into a usage error
 * naming the option in argv; returns CLI_USAGE.
 */
int cli_getopt_error(const struct cli *cli, int c, char **argv);

/*
 * cli_global_opt handles an option every verb takes (c, with its argument
 * arg). Returns 0 when handled, -1 when c is not a global option, or
 * CLI_USAGE after printing why arg is bad. -h is not handled here.
 */
int cli_global_opt(struct cli *cli, int c, const char *arg);

/*
 * cli_servers completes the server list once the command line is read:
 * from DSJOB_SERVERS when no -s was given, else the default. Returns 0 or
 * CLI_USAGE (out of memory is fatal).
 */
int cli_servers(struct cli *cli);

struct dsjob_client;
struct dsjob_worker;

/*
 * cli_tls_client and cli_tls_worker apply --ssl and its files to a client
 * or a worker (nothing without --ssl). Return 0, or CLI_USAGE after saying
 * which file could not be loaded.
 */
int cli_tls_client(const struct cli *cli, struct dsjob_client *c);
int cli_tls_worker(const struct cli *cli, struct dsjob_worker *w);

/* cli_err prints "dsjob: MESSAGE" to stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * cli_reserve_fds opens /dev/null on every closed fd from 0 to highest, so
 * that no socket or pipe opened later takes one of those numbers. It is
 * read-only, so that writing a result to a closed stdout still fails
 * (EBADF, exit 1) instead of reaching a server.
 */
void cli_reserve_fds(int highest);

/* cli_xmalloc is malloc that exits with a message when memory runs out. */
void *cli_xmalloc(size_t n);

/*
 * cli_write_all writes len bytes of buf to fd, retrying short writes and
 * EINTR. Returns 0, or -1 with errno set.
 */
int cli_write_all(int fd, const void *buf, size_t len);

/* cli_parse_uint parses a decimal in [min, max]; returns 0, or -1 when s is not one. */
int cli_parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out);

/*
 * cli_admin_ask sends line (the admin protocol) to server and puts its
 * reply, a line or with listing one ending in ".", in *out (the caller
 * frees it; NULL unless CLI_OK). An ERR answer is printed (CLI_FAILED);
 * a server not reached is CLI_UNREACHABLE. Uses cli->admin_tls.
 */
int cli_admin_ask(struct cli *cli, const char *server, const char *line, bool listing, char **out);

/* The verbs. Each gets argv from the verb's name on and returns an enum cli_exit. */
int submit_main(struct cli *cli, int argc, char **argv);
int batch_main(struct cli *cli, int argc, char **argv);
int runner_main(struct cli *cli, int argc, char **argv);
int admin_main(struct cli *cli, int argc, char **argv);

#endif
