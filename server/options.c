/*
 * dsjobd's command line and --config-file, read into a struct
 * dsjob_server_config and a struct opts. Option names follow gearmand's, so
 * dsjobd can take its place in an init script; options gearmand has and
 * dsjobd does not need (--threads, --worker-wakeup) are checked and then
 * ignored. The file is read before argv, whose options override it; one
 * switch applies both, and a numeric option is read through its entry in
 * option_bounds[], whose bounds dsjob_server_new checks too.
 */
#include "config.h"
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void
usage(FILE *fp)
{
    fprintf(
        fp,
        "usage: dsjobd [OPTION]...\n"
        "A Gearman-protocol job server.\n"
        "\n"
        "  -L, --listen ADDR          address to listen on (repeatable; default 127.0.0.1)\n"
        "  -p, --port PORT            TCP port (default 4730; 0 picks a free port)\n"
        "      --port-file FILE       write the bound port to FILE\n"
        "      --unix-socket PATH     also listen on a unix socket\n"
        "  -b, --backlog N            listen backlog (default 1024)\n"
        "      --keepalive            enable TCP keepalive on connections\n"
        "      --keepalive-idle S     TCP_KEEPIDLE on connections (implies --keepalive)\n"
        "      --keepalive-interval S TCP_KEEPINTVL on connections (implies --keepalive)\n"
        "      --keepalive-count N    TCP_KEEPCNT on connections (implies --keepalive)\n"
        "      --check-args           check the options and the config file, then exit\n"
        "  -f, --file-descriptors N   raise the open-file limit to N\n"
        "      --libsqlite3-table T   gearmand's queue table in --libsqlite3-db, taken in at\n"
        "                             the first open (default gearman_queue)\n"
        "      --libpq-table T        gearmand's libpq queue table, taken in likewise by the\n"
        "                             postgres store (default queue)\n"
        "      --store-queue-on-shutdown, --hashtable-buckets N, --coredump, --syslog\n"
        "                             accepted for gearmand compatibility (dsjobd(8))\n"
        "  -d, --daemon               run in the background\n"
        "  -P, --pid-file FILE        write the process id to FILE\n"
        "  -u, --user USER            switch to USER after binding\n"
        "  -l, --log-file DEST        stderr (default), none, or a file path\n"
        "      --log-format FORMAT    text (default) or json (one object a line)\n"
        "      --verbose LEVEL        FATAL ALERT CRITICAL ERROR WARNING NOTICE INFO DEBUG\n"
        "                             (default ERROR)\n"
        "  -j, --job-retries N        attempts before a job is failed (0: unlimited)\n"
        "  -R, --round-robin          rotate a worker's functions after each job\n"
        "      --exceptions           forward WORK_EXCEPTION to every client\n"
        "      --reject-no-worker     answer a submit for a function no worker can do with\n"
        "                             ERROR NO_WORKER at once (default: it waits)\n"
        "      --priority ORDER       function (default: newest function first, as gearmand)\n"
        "                             or global (highest priority over all a worker's functions)\n"
        "                             or gearmand-2.0 (that, its functions taking turns)\n"
        "      --priority-aging SECONDS  a job waiting that long counts one priority higher,\n"
        "                             and one more after as long again (default 0: never)\n"
        "      --job-handle-prefix P  handles are P:N (default H:<hostname>)\n"
        "      --max-packet-size SZ   largest packet accepted (default 64M)\n"
        "      --max-output-buffer SZ unread bytes before a peer is dropped (default 256M)\n"
        "      --max-connections N    connections held at once (default 0: no limit)\n"
        "      --max-jobs N           jobs held at once, all functions (default 0: no limit)\n"
        "      --max-queue N          each new function's maxqueue (default 0: none)\n"
        "      --max-unique-size SZ   longest unique key a submit may carry (default 1024)\n"
        "      --idle-timeout SECONDS close a peer whose message stays incomplete that long\n"
        "                             (default 60; 0: never)\n"
        "      --job-timeout SECONDS  take a job back from a worker silent about it that long,\n"
        "                             as CAN_DO_TIMEOUT does (default 0: never)\n"
        "      --retry-on LIST        outcomes that count as a failed attempt, of crash,\n"
        "                             timeout, fail, exception (default crash,timeout)\n"
        "      --retry-backoff B[,M]  seconds before a background retry, doubled each attempt,\n"
        "                             with jitter, at most M (default 0: at once; M 3600)\n"
        "      --max-dead N           keep up to N failed background jobs per function in a\n"
        "                             dead set (default 0: dropped, as gearmand)\n"
        "      --keep-results SECONDS keep a background job's outcome that long (default 0)\n"
        "      --max-result-size SZ   bytes kept of a result or failure text (default 1M)\n"
        "      --max-kept N           kept results held at most, oldest dropped first\n"
        "                             (default 100000)\n"
        "      --dead-max-age SECONDS drop a dead job that old (default 604800; 0: never)\n"
        "      --max-after N          jobs one submit may wait for (OPTION_REQ after=;\n"
        "                             default 1000)\n"
        "      --max-queue-age SECONDS  a job not started that long expires, to the dead set\n"
        "                             (default 0: never; per function: admin maxage)\n"
        "      --unique-for SECONDS   an ended job's unique key stays taken that long\n"
        "                             (default 0; per function: admin uniquefor)\n"
        "      --ssl                  TLS on every TCP connection (the unix socket stays plain)\n"
        "      --ssl-certificate FILE the server's certificate (PEM)\n"
        "      --ssl-key FILE         its private key (PEM)\n"
        "      --ssl-ca-file FILE     CA certificates (PEM) for --ssl-verify-client\n"
        "      --ssl-verify-client    admit only clients with a certificate signed by a CA of\n"
        "                             --ssl-ca-file\n"
        "      --http-port PORT       serve /healthz, /metrics and /api on PORT (default: no\n"
        "                             HTTP; 0 picks a free port)\n"
        "      --http-listen ADDR     address HTTP listens on (default 127.0.0.1)\n"
        "      --http-port-file FILE  write the bound HTTP port to FILE\n"
        "      --http-admin           take the dashboard's POSTs that cancel jobs and retry or\n"
        "                             drop dead ones (from --admin-allow peers; default off)\n"
        "      --http-max-connections N  HTTP connections held at once (default 64)\n"
        "      --http-timeout SECONDS an HTTP request must arrive whole, and its answer be\n"
        "                             sent, within that long (default 10)\n"
        "      --admin-allow A[/BITS] peers allowed the admin commands that change the server\n"
        "                             (repeatable; default loopback and the unix socket)\n"
        "      --limit 'F SETTINGS'   flow control of function F, as the admin command\n"
        "                             \"limit\" takes it: concurrency N, rate N/s|m|h,\n"
        "                             burst N, key-..., paused (repeatable; default none)\n"
        "      --schedule \"NAME 'CRON' FUNCTION [PAYLOAD] [tz=ZONE] [priority=P]\n"
        "                 [missed=skip|once]\"  submit a background job each tick (repeatable)\n"
        "      --schedule-refresh SECONDS  read a shared store's schedules this often\n"
        "                             (default 5)\n"
        "  -q, --store TYPE           none (default), sqlite, memcached, postgres; also\n"
        "                             --queue-type, and gearmand's builtin, libsqlite3,\n"
        "                             libmemcached and Postgres\n"
        "      --work-dir DIR         keep background jobs in DIR/dsjobd.db (implies --store "
        "sqlite)\n"
        "      --libsqlite3-db FILE   keep them in FILE instead (implies --store sqlite)\n"
        "      --store-sync LEVEL     off, normal (survives a crash) or full (default: a power "
        "loss)\n"
        "      --store-batch N        background submits per commit at most (default 10000)\n"
        "      --store-commit-interval MS  wait MS to group a commit (default 0: one loop turn)\n"
        "      --store-async-ends     give a worker more work before its last job's end commits\n"
        "      --store-grab-wait MS   a GRAB_JOB waits MS for its worker's last end to commit,\n"
        "                             then gets NO_JOB (default 10; 0: at once)\n"
        "      --store-stuck-after SECONDS  a commit in flight this long is logged and fails\n"
        "                             /healthz (default 10)\n"
        "      --memcached-servers H:P,...  memcached store's servers (also "
        "--libmemcached-servers)\n"
        "      --memcached-prefix P   prefix of the memcached store's keys (default dsjob)\n"
        "      --pg-dsn DSN           postgres store's libpq connection string (implies --store\n"
        "                             postgres; also --libpq-conninfo)\n"
        "      --pg-lease SECONDS     a server's lease on a job lasts this long unless renewed\n"
        "                             (default 30)\n"
        "      --pg-stop-grace-ms MS  at a stop, give the database MS to answer (default 3000)\n"
        "      --pg-prefetch N        jobs leased beyond the idle workers (default 8)\n"
        "      --pg-poll-ms MS        look for ready jobs this often without a NOTIFY (default "
        "1000)\n"
        "      --pg-take-max N        jobs of a function a lease sized to the workers' rate\n"
        "                             takes at most (default 2048)\n"
        "      --pg-conflict-retries N  send a batch of ends that a deadlock or a serialization\n"
        "                             failure refused again at once, N times (default 3)\n"
        "  -t, --threads N            accepted for gearmand compatibility; ignored\n"
        "  -w, --worker-wakeup N      accepted for gearmand compatibility; ignored\n"
        "      --config-file FILE     read options from FILE first (NAME=VALUE or gearmand's\n"
        "                             --NAME=VALUE, one a line); the command line wins\n"
        "  -h, --help                 show this help\n"
        "  -V, --version              show the version\n"
        "\n"
        "Signals: TERM and INT stop, USR1 stops gracefully, HUP reopens the log file.\n");
}

enum {
    OPT_PORT_FILE = 256,
    OPT_UNIX_SOCKET,
    OPT_KEEPALIVE,
    OPT_CHECK_ARGS,
    OPT_SQLITE_TABLE,
    OPT_PQ_TABLE,
    OPT_STORE_ON_SHUTDOWN,
    OPT_COREDUMP,
    OPT_SYSLOG,
    OPT_PROTOCOL,
    OPT_VERBOSE,
    OPT_HANDLE_PREFIX,
    OPT_ADMIN_ALLOW,
    OPT_LIMIT,
    OPT_EXCEPTIONS,
    OPT_WORK_DIR,
    OPT_SQLITE_DB,
    OPT_STORE_SYNC,
    OPT_MC_SERVERS,
    OPT_MC_PREFIX,
    OPT_RETRY_ON,
    OPT_RETRY_BACKOFF,
    OPT_REJECT_NO_WORKER,
    OPT_PRIORITY,
    OPT_CONFIG_FILE,
    OPT_LOG_FORMAT,
    OPT_SSL,
    OPT_SSL_CERT,
    OPT_SSL_KEY,
    OPT_SSL_CA,
    OPT_SSL_VERIFY,
    OPT_HTTP_LISTEN,
    OPT_HTTP_PORT_FILE,
    OPT_PG_DSN,
    OPT_HTTP_ADMIN,
    OPT_STORE_ASYNC_ENDS,
    OPT_SCHEDULE,
    OPT_FILE_DONE, /* not an option: the config file's options are all applied */
};

/* A numeric option's value in long_options is OPT_BOUNDED + its index in option_bounds[]. */
#define OPT_BOUNDED 0x800
_Static_assert(OPT_FILE_DONE < OPT_BOUNDED && OPT_BOUNDED + OPTION_NBOUNDS < 0x1000,
               "getopt values of three kinds overlap");

#define SHORT_OPTIONS "L:p:b:dP:u:l:j:Rt:w:q:hVf:r:"

/*
 * Options of gearmand's queues that dsjobd does not have (MySQL, Redis,
 * Drizzle, Tokyo Cabinet): each is refused with its name and why, not as
 * unknown, so that a gearmand init script that carries one says what to
 * change. Their values in long_options are OPT_GEARMAND_REFUSED and up.
 */
#define OPT_GEARMAND_REFUSED 0x1000
static const struct option long_options[] = {
    {"listen", required_argument, NULL, 'L'},
    {"port", required_argument, NULL, 'p'},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"unix-socket", required_argument, NULL, OPT_UNIX_SOCKET},
    {"backlog", required_argument, NULL, 'b'},
    {"keepalive", no_argument, NULL, OPT_KEEPALIVE},
    {"keepalive-idle", required_argument, NULL, OPT_BOUNDED + OPTION_KEEPALIVE_IDLE},
    {"keepalive-interval", required_argument, NULL, OPT_BOUNDED + OPTION_KEEPALIVE_INTERVAL},
    {"keepalive-count", required_argument, NULL, OPT_BOUNDED + OPTION_KEEPALIVE_COUNT},
    {"check-args", no_argument, NULL, OPT_CHECK_ARGS},
    {"file-descriptors", required_argument, NULL, 'f'},
    {"libsqlite3-table", required_argument, NULL, OPT_SQLITE_TABLE},
    {"libpq-table", required_argument, NULL, OPT_PQ_TABLE},
    {"store-queue-on-shutdown", no_argument, NULL, OPT_STORE_ON_SHUTDOWN},
    {"hashtable-buckets", required_argument, NULL, OPT_BOUNDED + OPTION_HASHTABLE_BUCKETS},
    {"coredump", no_argument, NULL, OPT_COREDUMP},
    {"syslog", no_argument, NULL, OPT_SYSLOG},
    {"protocol", required_argument, NULL, 'r'},
    {"libmemcached-prefix", required_argument, NULL, OPT_MC_PREFIX},
    {"mysql-host", required_argument, NULL, OPT_GEARMAND_REFUSED + 0},
    {"mysql-port", required_argument, NULL, OPT_GEARMAND_REFUSED + 1},
    {"mysql-user", required_argument, NULL, OPT_GEARMAND_REFUSED + 2},
    {"mysql-password", required_argument, NULL, OPT_GEARMAND_REFUSED + 3},
    {"mysql-db", required_argument, NULL, OPT_GEARMAND_REFUSED + 4},
    {"mysql-table", required_argument, NULL, OPT_GEARMAND_REFUSED + 5},
    {"redis-server", required_argument, NULL, OPT_GEARMAND_REFUSED + 6},
    {"redis-port", required_argument, NULL, OPT_GEARMAND_REFUSED + 7},
    {"redis-password", required_argument, NULL, OPT_GEARMAND_REFUSED + 8},
    {"redis-prefix", required_argument, NULL, OPT_GEARMAND_REFUSED + 9},
    {"libdrizzle-host", required_argument, NULL, OPT_GEARMAND_REFUSED + 10},
    {"libdrizzle-port", required_argument, NULL, OPT_GEARMAND_REFUSED + 11},
    {"libdrizzle-uds", required_argument, NULL, OPT_GEARMAND_REFUSED + 12},
    {"libdrizzle-user", required_argument, NULL, OPT_GEARMAND_REFUSED + 13},
    {"libdrizzle-password", required_argument, NULL, OPT_GEARMAND_REFUSED + 14},
    {"libdrizzle-db", required_argument, NULL, OPT_GEARMAND_REFUSED + 15},
    {"libdrizzle-table", required_argument, NULL, OPT_GEARMAND_REFUSED + 16},
    {"libdrizzle-mysql", required_argument, NULL, OPT_GEARMAND_REFUSED + 17},
    {"libtokyocabinet-file", required_argument, NULL, OPT_GEARMAND_REFUSED + 18},
    {"libtokyocabinet-optimize", no_argument, NULL, OPT_GEARMAND_REFUSED + 19},
    {"daemon", no_argument, NULL, 'd'},
    {"pid-file", required_argument, NULL, 'P'},
    {"user", required_argument, NULL, 'u'},
    {"log-file", required_argument, NULL, 'l'},
    {"verbose", required_argument, NULL, OPT_VERBOSE},
    {"job-retries", required_argument, NULL, 'j'},
    {"round-robin", no_argument, NULL, 'R'},
    {"exceptions", no_argument, NULL, OPT_EXCEPTIONS},
    {"reject-no-worker", no_argument, NULL, OPT_REJECT_NO_WORKER},
    {"priority", required_argument, NULL, OPT_PRIORITY},
    {"priority-aging", required_argument, NULL, OPT_BOUNDED + OPTION_PRIORITY_AGING},
    {"store", required_argument, NULL, 'q'},
    {"queue-type", required_argument, NULL, 'q'},
    {"work-dir", required_argument, NULL, OPT_WORK_DIR},
    {"libsqlite3-db", required_argument, NULL, OPT_SQLITE_DB},
    {"store-sync", required_argument, NULL, OPT_STORE_SYNC},
    {"store-batch", required_argument, NULL, OPT_BOUNDED + OPTION_STORE_BATCH},
    {"store-commit-interval", required_argument, NULL, OPT_BOUNDED + OPTION_STORE_INTERVAL},
    {"store-grab-wait", required_argument, NULL, OPT_BOUNDED + OPTION_STORE_GRAB_WAIT},
    {"memcached-servers", required_argument, NULL, OPT_MC_SERVERS},
    {"libmemcached-servers", required_argument, NULL, OPT_MC_SERVERS},
    {"memcached-prefix", required_argument, NULL, OPT_MC_PREFIX},
    {"pg-dsn", required_argument, NULL, OPT_PG_DSN},
    {"libpq-conninfo", required_argument, NULL, OPT_PG_DSN},
    {"pg-lease", required_argument, NULL, OPT_BOUNDED + OPTION_PG_LEASE},
    {"pg-prefetch", required_argument, NULL, OPT_BOUNDED + OPTION_PG_PREFETCH},
    {"pg-poll-ms", required_argument, NULL, OPT_BOUNDED + OPTION_PG_POLL},
    {"pg-take-max", required_argument, NULL, OPT_BOUNDED + OPTION_PG_TAKE_MAX},
    {"pg-conflict-retries", required_argument, NULL, OPT_BOUNDED + OPTION_PG_CONFLICT_RETRIES},
    {"job-handle-prefix", required_argument, NULL, OPT_HANDLE_PREFIX},
    {"max-packet-size", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_PACKET},
    {"max-output-buffer", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_OUTPUT},
    {"max-connections", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_CONNECTIONS},
    {"max-jobs", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_JOBS},
    {"max-queue", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_QUEUE},
    {"admin-allow", required_argument, NULL, OPT_ADMIN_ALLOW},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"schedule-refresh", required_argument, NULL, OPT_BOUNDED + OPTION_SCHEDULE_REFRESH},
    {"http-port", required_argument, NULL, OPT_BOUNDED + OPTION_HTTP_PORT},
    {"http-listen", required_argument, NULL, OPT_HTTP_LISTEN},
    {"http-port-file", required_argument, NULL, OPT_HTTP_PORT_FILE},
    {"http-admin", no_argument, NULL, OPT_HTTP_ADMIN},
    {"http-max-connections", required_argument, NULL, OPT_BOUNDED + OPTION_HTTP_MAX_CONNECTIONS},
    {"http-timeout", required_argument, NULL, OPT_BOUNDED + OPTION_HTTP_TIMEOUT},
    {"max-unique-size", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_UNIQUE},
    {"store-async-ends", no_argument, NULL, OPT_STORE_ASYNC_ENDS},
    {"store-stuck-after", required_argument, NULL, OPT_BOUNDED + OPTION_STORE_STUCK},
    {"pg-stop-grace-ms", required_argument, NULL, OPT_BOUNDED + OPTION_PG_STOP_GRACE},
    {"idle-timeout", required_argument, NULL, OPT_BOUNDED + OPTION_IDLE_TIMEOUT},
    {"job-timeout", required_argument, NULL, OPT_BOUNDED + OPTION_JOB_TIMEOUT},
    {"retry-on", required_argument, NULL, OPT_RETRY_ON},
    {"retry-backoff", required_argument, NULL, OPT_RETRY_BACKOFF},
    {"max-dead", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_DEAD},
    {"keep-results", required_argument, NULL, OPT_BOUNDED + OPTION_KEEP_RESULTS},
    {"max-result-size", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_RESULT},
    {"max-kept", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_KEPT},
    {"dead-max-age", required_argument, NULL, OPT_BOUNDED + OPTION_DEAD_MAX_AGE},
    {"max-after", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_AFTER},
    {"max-queue-age", required_argument, NULL, OPT_BOUNDED + OPTION_MAX_QUEUE_AGE},
    {"unique-for", required_argument, NULL, OPT_BOUNDED + OPTION_UNIQUE_FOR},
    {"ssl", no_argument, NULL, OPT_SSL},
    {"ssl-certificate", required_argument, NULL, OPT_SSL_CERT},
    {"ssl-key", required_argument, NULL, OPT_SSL_KEY},
    {"ssl-ca-file", required_argument, NULL, OPT_SSL_CA},
    {"ssl-verify-client", no_argument, NULL, OPT_SSL_VERIFY},
    {"threads", required_argument, NULL, 't'},
    {"worker-wakeup", required_argument, NULL, 'w'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"config-file", required_argument, NULL, OPT_CONFIG_FILE},
    {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
    {NULL, 0, NULL, 0},
};

/* The config file line being applied ("FILE:LINE: "), so that errors say where; else "". */
static char where[PATH_MAX + 32];

void
options_die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "dsjobd: %s", where);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'dsjobd --help'.\n");
    exit(2);
}

/* out_of_bounds exits with b's bounds and the value given, as dsjob_server_new says them. */
static void __attribute__((noreturn))
out_of_bounds(const struct option_bound *b, const char *value, int len)
{
    char text[64], msg[256];

    snprintf(text, sizeof(text), "%.*s", len, value);
    option_range_error(b, text, msg, sizeof(msg));
    options_die("%s", msg);
}

/*
 * parse_bounded reads s as the value of b: a decimal number (with k, M or
 * G after it for a size, or -1 where that means the system's) within b's
 * bounds. Text that is no such number is an invalid value; a number out of
 * bounds is refused with the bounds.
 */
static unsigned long long
parse_bounded(const struct option_bound *b, const char *s)
{
    unsigned long long v;
    unsigned shift = 0;
    char *end;

    if ((b->flags & OPTION_UNSET) && strcmp(s, "-1") == 0)
        return (unsigned long long)-1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (end == s || errno != 0 || s[0] == '-')
        goto bad;
    if ((b->flags & OPTION_SUFFIX) && *end != '\0') {
        switch (*end) {
        case 'k':
        case 'K': shift = 10; break;
        case 'm':
        case 'M': shift = 20; break;
        case 'g':
        case 'G': shift = 30; break;
        default: goto bad;
        }
        end++;
    }
    if (*end != '\0')
        goto bad;
    if (v > (b->max >> shift) || v << shift < b->min)
        out_of_bounds(b, s, (int)strlen(s));
    return v << shift;

bad:
    options_die("--%s: invalid value '%s'", b->name, s);
}

/* parse_table checks a name of gearmand's queue table. */
static const char *
parse_table(const char *opt, const char *s)
{
    char msg[256];

    if (option_table_error(opt, s, msg, sizeof(msg)))
        options_die("%s", msg);
    return s;
}

/* refused_name is the name of the refused gearmand option whose value is opt. */
static const char *
refused_name(int opt)
{
    const struct option *lo;

    for (lo = long_options; lo->name != NULL; lo++)
        if (lo->val == opt)
            return lo->name;
    return "?";
}

/* Paths given relative to the start directory stay valid after a daemon's chdir("/"). */
static char *
absolute(const char *path)
{
    char cwd[PATH_MAX];
    char *out;

    if (path == NULL || path[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
        return path ? strdup(path) : NULL;
    out = malloc(strlen(cwd) + strlen(path) + 2);
    if (out != NULL)
        sprintf(out, "%s/%s", cwd, path);
    return out;
}

/* One option of the config file, kept until argv is parsed after it. */
struct file_opt {
    int val;       /* the option, as getopt_long returns it */
    char *value;   /* its value, in opts.config_text, or NULL */
    unsigned line; /* its line, for error messages */
};

void
options_release(struct opts *o)
{
    free(o->pid_file);
    free(o->port_file);
    free(o->http_port_file);
    free(o->log_file);
    free(o->unix_socket);
    free(o->work_dir);
    free(o->store_db);
    free(o->config_text);
    free(o->file_opts);
    free(o->ssl_cert);
    free(o->ssl_key);
    free(o->ssl_ca);
}

/*
 * set_path keeps the absolute form of a path option's value in *slot; a
 * repeated option replaces (and frees) the earlier value. An empty value is
 * a usage error, not "the current directory".
 */
static char *
set_path(char **slot, const char *opt, const char *arg)
{
    if (arg[0] == '\0')
        options_die("%s: the path is empty", opt);
    free(*slot);
    *slot = absolute(arg);
    if (*slot == NULL) {
        fprintf(stderr, "dsjobd: %s: out of memory\n", opt);
        exit(1);
    }
    return *slot;
}

/* parse_retry_on reads "crash,timeout,fail,exception" (any of them) into DSJOB_RETRY_* bits. */
static unsigned
parse_retry_on(const char *s)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {
        {"crash", DSJOB_RETRY_CRASH},
        {"timeout", DSJOB_RETRY_TIMEOUT},
        {"fail", DSJOB_RETRY_FAIL},
        {"exception", DSJOB_RETRY_EXCEPTION},
    };
    unsigned bits = 0;
    size_t i, len;

    for (;;) {
        len = strcspn(s, ",");
        for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strlen(names[i].name) == len && strncmp(names[i].name, s, len) == 0)
                break;
        if (i == sizeof(names) / sizeof(names[0]))
            options_die("--retry-on: '%.*s' is not crash, timeout, fail or exception", (int)len, s);
        bits |= names[i].bit;
        if (s[len] == '\0')
            return bits;
        s += len + 1;
    }
}

/*
 * parse_seconds_ms reads SECONDS[.FRACTION] (len bytes of s) as the
 * milliseconds of b, within its bounds.
 */
static unsigned
parse_seconds_ms(const struct option_bound *b, const char *s, size_t len)
{
    unsigned long long ms = 0, scale = 1000;
    size_t i = 0;

    if (len == 0)
        options_die("--%s: a number of seconds is missing", b->name);
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        ms = ms * 10 + (unsigned)(s[i] - '0');
        if (ms > b->max / 1000)
            out_of_bounds(b, s, (int)len);
    }
    ms *= 1000;
    if (i < len && s[i] == '.')
        for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++)
            if (scale > 1)
                ms += (unsigned)(s[i] - '0') * (scale /= 10);
    if (i != len)
        options_die("--%s: '%.*s' is not a number of seconds", b->name, (int)len, s);
    if (ms < b->min || ms > b->max)
        out_of_bounds(b, s, (int)len);
    return (unsigned)ms;
}

#define CONFIG_MAX_SIZE (1 << 20) /* a config file larger than this is refused */

/* find_long returns the long_options[] entry named name (len bytes), or NULL. */
static const struct option *
find_long(const char *name, size_t len)
{
    const struct option *lo;

    for (lo = long_options; lo->name != NULL; lo++)
        if (strlen(lo->name) == len && strncmp(lo->name, name, len) == 0)
            return lo;
    return NULL;
}

/* find_short returns the long_options[] entry of the short option c, or NULL. */
static const struct option *
find_short(int c)
{
    const struct option *lo;

    for (lo = long_options; lo->name != NULL; lo++)
        if (lo->val == c)
            return lo;
    return NULL;
}

/*
 * config_add keeps the option lo of the config file's current line, with
 * its value (NULL if none was written), for next_option. What cannot be
 * in a file, a missing value and a value for a flag are usage errors.
 */
static void
config_add(struct opts *o, const struct option *lo, char *value, unsigned line)
{
    struct file_opt *fo;

    if (lo->val == OPT_CONFIG_FILE || lo->val == 'h' || lo->val == 'V')
        options_die("--%s cannot be used in a config file", lo->name);
    if (lo->has_arg == required_argument && value == NULL)
        options_die("--%s needs a value", lo->name);
    if (lo->has_arg == no_argument && value != NULL)
        options_die("--%s takes no value, but has '%s'", lo->name, value);
    fo = realloc(o->file_opts, (o->nfile_opts + 1) * sizeof(*fo));
    if (fo == NULL)
        options_die("--config-file: out of memory");
    o->file_opts = fo;
    fo += o->nfile_opts++;
    fo->val = lo->val;
    fo->value = value;
    fo->line = line;
}

static bool
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* next_word ends the word at *p with a NUL and returns it; *p moves past it. NULL at the end. */
static char *
next_word(char **p)
{
    char *w = *p;

    while (is_space(*w))
        w++;
    if (*w == '\0')
        return NULL;
    *p = w + strcspn(w, " \t\r");
    if (**p != '\0')
        *(*p)++ = '\0';
    return w;
}

/*
 * config_words reads a line in gearmand's form: command-line words
 * separated by blanks, such as "--port=4730 -q sqlite", as gearmand reads
 * its --config-file. A word starting with # ends the line.
 */
static void
config_words(struct opts *o, char *line, unsigned lineno)
{
    const struct option *lo;
    char *w, *value;

    while ((w = next_word(&line)) != NULL && w[0] != '#') {
        if (w[0] != '-' || w[1] == '\0')
            options_die("unexpected '%s': an option starts with - or --", w);
        if (w[1] == '-') {
            value = strchr(w + 2, '=');
            lo = find_long(w + 2, value ? (size_t)(value - w - 2) : strlen(w + 2));
            if (lo == NULL)
                options_die("unknown option '%.*s'", value ? (int)(value - w) : (int)strlen(w), w);
            if (value != NULL)
                value++;
        } else {
            lo = find_short(w[1]);
            if (lo == NULL)
                options_die("unknown option '-%c'", w[1]);
            value = w[2] != '\0' ? w + 2 : NULL;
        }
        if (value == NULL && lo->has_arg == required_argument)
            value = next_word(&line);
        config_add(o, lo, value, lineno);
    }
}

/* config_line reads one line: blank, # comment, gearmand's words or NAME [= VALUE]. */
static void
config_line(struct opts *o, char *line, unsigned lineno)
{
    const struct option *lo;
    char *end, *value;
    size_t len;

    while (is_space(*line))
        line++;
    if (*line == '\0' || *line == '#')
        return;
    if (*line == '-') {
        config_words(o, line, lineno);
        return;
    }
    end = line + strlen(line);
    while (end > line && is_space(end[-1]))
        *--end = '\0';
    len = strcspn(line, " \t\r=");
    lo = find_long(line, len);
    if (lo == NULL)
        options_die("unknown option '%.*s'", (int)len, line);
    value = line + len;
    while (is_space(*value))
        value++;
    if (*value == '=') {
        for (value++; is_space(*value); value++)
            ;
    } else if (*value != '\0') {
        options_die("'%s': expected %s = VALUE", line, lo->name);
    } else {
        value = NULL;
    }
    config_add(o, lo, value, lineno);
}

/*
 * read_config finds --config-file in argv (the last one counts) and reads
 * that file whole into o->config_text, which keeps the values, and its
 * options into o->file_opts; next_option returns them before argv's.
 */
static void
read_config(int argc, char **argv, struct opts *o)
{
    char *line, *next;
    unsigned lineno = 1;
    size_t n;
    FILE *fp;
    int opt;

    opterr = 0; /* the second pass, next_option's, reports argv's errors */
    while ((opt = getopt_long(argc, argv, SHORT_OPTIONS, long_options, NULL)) != -1)
        if (opt == OPT_CONFIG_FILE)
            o->config_file = optarg;
    opterr = 1;
    optind = 0; /* glibc: start again from argv[1] */
    if (o->config_file == NULL)
        return;
    fp = fopen(o->config_file, "r");
    if (fp == NULL)
        options_die("--config-file: cannot open '%s': %s", o->config_file, strerror(errno));
    o->config_text = malloc(CONFIG_MAX_SIZE + 1);
    if (o->config_text == NULL)
        options_die("--config-file: out of memory");
    n = fread(o->config_text, 1, CONFIG_MAX_SIZE + 1, fp);
    if (ferror(fp))
        options_die("--config-file: cannot read '%s': %s", o->config_file, strerror(errno));
    fclose(fp);
    if (n > CONFIG_MAX_SIZE)
        options_die("--config-file: '%s' is larger than %d bytes", o->config_file, CONFIG_MAX_SIZE);
    if (memchr(o->config_text, '\0', n) != NULL)
        options_die("--config-file: '%s' has a NUL byte: not a text file", o->config_file);
    o->config_text[n] = '\0';
    for (line = o->config_text; line != NULL; line = next, lineno++) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        snprintf(where, sizeof(where), "%s:%u: ", o->config_file, lineno);
        config_line(o, line, lineno);
    }
    where[0] = '\0';
}

/*
 * next_option returns the next option as getopt_long does, its value in
 * optarg: the config file's first, then OPT_FILE_DONE once, then argv's.
 * While it returns the file's, errors name their FILE:LINE.
 */
static int
next_option(int argc, char **argv, struct opts *o)
{
    if (o->next_file_opt < o->nfile_opts) {
        const struct file_opt *fo = &o->file_opts[o->next_file_opt++];

        snprintf(where, sizeof(where), "%s:%u: ", o->config_file, fo->line);
        optarg = fo->value;
        return fo->val;
    }
    where[0] = '\0';
    if (o->next_file_opt++ == o->nfile_opts)
        return OPT_FILE_DONE;
    return getopt_long(argc, argv, SHORT_OPTIONS, long_options, NULL);
}

/* bounded_id is the option_bounds[] index of the option getopt returned as opt, or -1. */
static int
bounded_id(int opt)
{
    switch (opt) {
    case 'p': return OPTION_PORT;
    case 'b': return OPTION_BACKLOG;
    case 'j': return OPTION_JOB_RETRIES;
    case 'f': return OPTION_FILE_DESCRIPTORS;
    case 't': return OPTION_THREADS;
    case 'w': return OPTION_WORKER_WAKEUP;
    }
    if (opt >= OPT_BOUNDED && opt < OPT_BOUNDED + OPTION_NBOUNDS)
        return opt - OPT_BOUNDED;
    return -1;
}

/* set_bounded reads arg as b's value into its field of cfg, or of o for dsjobd's own. */
static void
set_bounded(struct dsjob_server_config *cfg, struct opts *o, const struct option_bound *b,
            const char *arg)
{
    unsigned long long v = parse_bounded(b, arg);

    if (b->kind != OPTION_NOFIELD)
        option_store(cfg, b, v);
    else if (b == &option_bounds[OPTION_FILE_DESCRIPTORS])
        o->file_descriptors = (rlim_t)v;
    /* --threads, --worker-wakeup, --hashtable-buckets: checked as gearmand does, then unused. */
}

/*
 * The file's options come first (next_option), then argv's; a repeatable
 * one starts its list again at the first given on the command line.
 */
void
options_parse(int argc, char **argv, struct dsjob_server_config *cfg, struct opts *o)
{
    bool store_given = false, listen_given = false, admin_given = false;
    int opt, id, rc;

    /* getopt's own messages name argv[0], which may be a long path. */
    argv[0] = "dsjobd";
    dsjob_server_config_init(cfg);
    read_config(argc, argv, o);
    while ((opt = next_option(argc, argv, o)) != -1) {
        id = bounded_id(opt);
        if (id >= 0) {
            set_bounded(cfg, o, &option_bounds[id], optarg);
            continue;
        }
        switch (opt) {
        case 'L':
            if (!listen_given)
                cfg->nlisten = 0;
            listen_given = true;
            if (cfg->nlisten == DSJOB_SERVER_MAX_LISTEN)
                options_die("too many --listen addresses (at most %d)", DSJOB_SERVER_MAX_LISTEN);
            cfg->listen[cfg->nlisten++] = optarg;
            break;
        case OPT_PORT_FILE: set_path(&o->port_file, "--port-file", optarg); break;
        case OPT_HTTP_LISTEN:
            if (optarg[0] == '\0')
                options_die("--http-listen: the address is empty");
            cfg->http_listen = optarg;
            break;
        case OPT_HTTP_PORT_FILE: set_path(&o->http_port_file, "--http-port-file", optarg); break;
        case OPT_HTTP_ADMIN: cfg->http_admin = true; break;
        case OPT_STORE_ASYNC_ENDS: cfg->store_async_ends = true; break;
        case OPT_UNIX_SOCKET:
            cfg->unix_socket = set_path(&o->unix_socket, "--unix-socket", optarg);
            break;
        case OPT_KEEPALIVE: cfg->keepalive = true; break;
        case OPT_CHECK_ARGS: o->check_args = true; break;
        case OPT_SQLITE_TABLE:
            cfg->libsqlite3_table = parse_table("--libsqlite3-table", optarg);
            break;
        case OPT_PQ_TABLE: cfg->libpq_table = parse_table("--libpq-table", optarg); break;
        case OPT_STORE_ON_SHUTDOWN: /* every store already holds the queue at shutdown */
        case OPT_COREDUMP: /* no crash handler: cores follow ulimit -c */ break;
        case OPT_SYSLOG: o->syslog = true; break;
        case 'r': o->protocol = optarg; break;
        case 'd': o->daemon_mode = true; break;
        case 'P': set_path(&o->pid_file, "--pid-file", optarg); break;
        case 'u': o->user = optarg; break;
        case 'l':
            if (strcmp(optarg, "stderr") == 0 || strcmp(optarg, "none") == 0) {
                free(o->log_file);
                o->log_file = NULL;
                cfg->log_file = optarg;
            } else {
                cfg->log_file = set_path(&o->log_file, "--log-file", optarg);
            }
            break;
        case OPT_VERBOSE:
            rc = dsjob_server_log_level(optarg);
            if (rc < 0)
                options_die("--verbose: unknown level '%s'", optarg);
            cfg->verbose = (enum dsjob_log_level)rc;
            break;
        case 'R': cfg->round_robin = true; break;
        case OPT_EXCEPTIONS: cfg->exceptions = true; break;
        case OPT_REJECT_NO_WORKER: cfg->reject_no_worker = true; break;
        case OPT_PRIORITY:
            if (strcmp(optarg, "function") == 0)
                cfg->priority = DSJOB_PRIORITY_FUNCTION;
            else if (strcmp(optarg, "global") == 0)
                cfg->priority = DSJOB_PRIORITY_GLOBAL;
            else if (strcmp(optarg, "gearmand-2.0") == 0)
                cfg->priority = DSJOB_PRIORITY_GEARMAND_2;
            else
                options_die("--priority: '%s' is not function, global or gearmand-2.0", optarg);
            break;
        case 'q':
            cfg->store = optarg;
            store_given = true;
            break;
        case OPT_WORK_DIR: cfg->work_dir = set_path(&o->work_dir, "--work-dir", optarg); break;
        case OPT_SQLITE_DB:
            cfg->store_db = set_path(&o->store_db, "--libsqlite3-db", optarg);
            break;
        case OPT_STORE_SYNC:
            if (strcmp(optarg, "off") == 0)
                cfg->store_sync = 0;
            else if (strcmp(optarg, "normal") == 0)
                cfg->store_sync = 1;
            else if (strcmp(optarg, "full") == 0)
                cfg->store_sync = 2;
            else
                options_die("--store-sync: '%s' is not off, normal or full", optarg);
            break;
        case OPT_MC_SERVERS: cfg->memcached_servers = optarg; break;
        case OPT_MC_PREFIX: cfg->memcached_prefix = optarg; break;
        case OPT_PG_DSN: cfg->pg_dsn = optarg; break;
        case OPT_HANDLE_PREFIX: cfg->job_handle_prefix = optarg; break;
        case OPT_RETRY_ON: cfg->retry_on = parse_retry_on(optarg); break;
        case OPT_RETRY_BACKOFF: {
            size_t base_len = strcspn(optarg, ",");
            const char *max = optarg[base_len] == ',' ? optarg + base_len + 1 : NULL;

            cfg->retry_backoff_base_ms =
                parse_seconds_ms(&option_bounds[OPTION_RETRY_BACKOFF], optarg, base_len);
            cfg->retry_backoff_max_ms =
                max ? parse_seconds_ms(&option_bounds[OPTION_RETRY_BACKOFF_MAX], max, strlen(max))
                    : 0;
            if (cfg->retry_backoff_max_ms != 0 &&
                cfg->retry_backoff_max_ms < cfg->retry_backoff_base_ms)
                options_die("--retry-backoff: the longest wait is shorter than the first");
            break;
        }
        case OPT_SSL: cfg->ssl = true; break;
        case OPT_SSL_CERT:
            cfg->ssl_certificate = set_path(&o->ssl_cert, "--ssl-certificate", optarg);
            break;
        case OPT_SSL_KEY: cfg->ssl_key = set_path(&o->ssl_key, "--ssl-key", optarg); break;
        case OPT_SSL_CA: cfg->ssl_ca_file = set_path(&o->ssl_ca, "--ssl-ca-file", optarg); break;
        case OPT_SSL_VERIFY: cfg->ssl_verify_client = true; break;
        case OPT_ADMIN_ALLOW:
            if (!admin_given)
                cfg->nadmin_allow = 0;
            admin_given = true;
            if (cfg->nadmin_allow == DSJOB_SERVER_MAX_ADMIN_ALLOW)
                options_die("too many --admin-allow ranges (at most %d)",
                            DSJOB_SERVER_MAX_ADMIN_ALLOW);
            cfg->admin_allow[cfg->nadmin_allow++] = optarg;
            break;
        case OPT_LIMIT:
            if (cfg->nlimits == DSJOB_SERVER_MAX_LIMITS)
                options_die("too many --limit lines (at most %d)", DSJOB_SERVER_MAX_LIMITS);
            cfg->limits[cfg->nlimits++] = optarg;
            break;
        case OPT_SCHEDULE:
            if (cfg->nschedule == DSJOB_SERVER_MAX_SCHEDULES)
                options_die("too many --schedule lines (at most %d; add more with the admin "
                            "command schedule add)",
                            DSJOB_SERVER_MAX_SCHEDULES);
            cfg->schedule[cfg->nschedule++] = optarg;
            break;
        case 'h':
            usage(stdout);
            options_release(o);
            exit(0);
        case 'V':
            printf("dsjobd %s\n", DSJOB_VERSION_STRING);
            options_release(o);
            exit(0);
        case OPT_CONFIG_FILE: break; /* read first, by read_config */
        case OPT_LOG_FORMAT:
            if (strcmp(optarg, "text") == 0)
                cfg->log_format = DSJOB_LOG_FORMAT_TEXT;
            else if (strcmp(optarg, "json") == 0)
                cfg->log_format = DSJOB_LOG_FORMAT_JSON;
            else
                options_die("--log-format: '%s' is not text or json", optarg);
            break;
        case OPT_FILE_DONE: listen_given = admin_given = false; break;
        default:
            if (opt >= OPT_GEARMAND_REFUSED &&
                opt < OPT_GEARMAND_REFUSED + (int)(sizeof(long_options) / sizeof(long_options[0])))
                options_die("--%s: gearmand's %.*s queue is not available in dsjobd; its stores "
                            "are sqlite (libsqlite3), memcached (libmemcached) and postgres "
                            "(Postgres)",
                            refused_name(opt), (int)strcspn(refused_name(opt), "-"),
                            refused_name(opt));
            /* getopt_long has printed which option it did not know. */
            fprintf(stderr, "Try 'dsjobd --help'.\n");
            exit(2);
        }
    }
    if (optind < argc)
        options_die("unexpected argument '%s'", argv[optind]);
    /*
     * A place for the database says which store is wanted; places of two
     * stores are a mistake to point out, not a choice to make silently.
     */
    if (!store_given) {
        const char *place[3];
        int n = 0;

        if (cfg->work_dir != NULL || cfg->store_db != NULL)
            place[n++] = cfg->work_dir != NULL ? "--work-dir" : "--libsqlite3-db";
        if (cfg->memcached_servers != NULL)
            place[n++] = "--memcached-servers";
        if (cfg->pg_dsn != NULL)
            place[n++] = "--pg-dsn";
        if (n > 1)
            options_die("%s and %s name two different stores: say which one with --store", place[0],
                        place[1]);
    }
    if (!store_given && (cfg->work_dir != NULL || cfg->store_db != NULL))
        cfg->store = "sqlite";
    else if (!store_given && cfg->memcached_servers != NULL)
        cfg->store = "memcached";
    else if (!store_given && cfg->pg_dsn != NULL)
        cfg->store = "postgres";
}
