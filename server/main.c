/*
 * dsjobd: options, daemonizing, pid and port files, signals; the server
 * itself is libdsjobserver. Option names follow gearmand's, so dsjobd can
 * take its place in an init script; options gearmand has and dsjobd does
 * not need (--threads, --worker-wakeup) are checked and then ignored.
 * --config-file is read before argv, whose options override it. Built with
 * libsystemd, it tells systemd (NOTIFY_SOCKET) when it is ready and stopping.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dsjob/server.h>
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static struct dsjob_server *the_server; /* for the signal handlers */

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
        "  -q, --store TYPE           none (default), sqlite, memcached, postgres; also\n"
        "                             --queue-type, and gearmand's builtin, libsqlite3,\n"
        "                             libmemcached and Postgres\n"
        "      --work-dir DIR         keep background jobs in DIR/dsjobd.db (implies --store "
        "sqlite)\n"
        "      --libsqlite3-db FILE   keep them in FILE instead (implies --store sqlite)\n"
        "      --store-sync LEVEL     off, normal (default: survives a crash) or full (power "
        "loss)\n"
        "      --store-batch N        background submits per commit at most (default 10000)\n"
        "      --store-commit-interval MS  wait MS to group a commit (default 0: one loop turn)\n"
        "      --store-async-ends     give a worker more work before its last job's end commits\n"
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
    OPT_KEEPALIVE_IDLE, /* gearmand's options, for a drop-in start: */
    OPT_KEEPALIVE_INTERVAL,
    OPT_KEEPALIVE_COUNT,
    OPT_CHECK_ARGS,
    OPT_SQLITE_TABLE,
    OPT_PQ_TABLE,
    OPT_STORE_ON_SHUTDOWN,
    OPT_HASHTABLE_BUCKETS,
    OPT_COREDUMP,
    OPT_SYSLOG,
    OPT_PROTOCOL,
    OPT_VERBOSE,
    OPT_HANDLE_PREFIX,
    OPT_MAX_PACKET,
    OPT_MAX_OUTPUT,
    OPT_MAX_CONNS,
    OPT_MAX_JOBS,
    OPT_MAX_QUEUE,
    OPT_ADMIN_ALLOW,
    OPT_EXCEPTIONS,
    OPT_WORK_DIR,
    OPT_SQLITE_DB,
    OPT_STORE_SYNC,
    OPT_STORE_BATCH,
    OPT_STORE_INTERVAL,
    OPT_MC_SERVERS,
    OPT_MC_PREFIX,
    OPT_IDLE_TIMEOUT,
    OPT_JOB_TIMEOUT,
    OPT_RETRY_ON,
    OPT_RETRY_BACKOFF,
    OPT_MAX_DEAD,
    OPT_KEEP_RESULTS,
    OPT_MAX_RESULT,
    OPT_REJECT_NO_WORKER,
    OPT_PRIORITY,
    OPT_PRIORITY_AGING,
    OPT_CONFIG_FILE,
    OPT_LOG_FORMAT,
    OPT_SSL,
    OPT_SSL_CERT,
    OPT_SSL_KEY,
    OPT_SSL_CA,
    OPT_SSL_VERIFY,
    OPT_HTTP_PORT,
    OPT_HTTP_LISTEN,
    OPT_HTTP_PORT_FILE,
    OPT_PG_DSN,
    OPT_PG_LEASE,
    OPT_PG_PREFETCH,
    OPT_PG_POLL,
    OPT_HTTP_ADMIN,
    OPT_STORE_ASYNC_ENDS,
    OPT_STORE_STUCK,
    OPT_PG_STOP_GRACE,
    OPT_HTTP_MAX_CONNS,
    OPT_HTTP_TIMEOUT,
    OPT_MAX_UNIQUE,
    OPT_FILE_DONE, /* not an option: the config file's options are all applied */
};

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
    {"keepalive-idle", required_argument, NULL, OPT_KEEPALIVE_IDLE},
    {"keepalive-interval", required_argument, NULL, OPT_KEEPALIVE_INTERVAL},
    {"keepalive-count", required_argument, NULL, OPT_KEEPALIVE_COUNT},
    {"check-args", no_argument, NULL, OPT_CHECK_ARGS},
    {"file-descriptors", required_argument, NULL, 'f'},
    {"libsqlite3-table", required_argument, NULL, OPT_SQLITE_TABLE},
    {"libpq-table", required_argument, NULL, OPT_PQ_TABLE},
    {"store-queue-on-shutdown", no_argument, NULL, OPT_STORE_ON_SHUTDOWN},
    {"hashtable-buckets", required_argument, NULL, OPT_HASHTABLE_BUCKETS},
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
    {"priority-aging", required_argument, NULL, OPT_PRIORITY_AGING},
    {"store", required_argument, NULL, 'q'},
    {"queue-type", required_argument, NULL, 'q'},
    {"work-dir", required_argument, NULL, OPT_WORK_DIR},
    {"libsqlite3-db", required_argument, NULL, OPT_SQLITE_DB},
    {"store-sync", required_argument, NULL, OPT_STORE_SYNC},
    {"store-batch", required_argument, NULL, OPT_STORE_BATCH},
    {"store-commit-interval", required_argument, NULL, OPT_STORE_INTERVAL},
    {"memcached-servers", required_argument, NULL, OPT_MC_SERVERS},
    {"libmemcached-servers", required_argument, NULL, OPT_MC_SERVERS},
    {"memcached-prefix", required_argument, NULL, OPT_MC_PREFIX},
    {"pg-dsn", required_argument, NULL, OPT_PG_DSN},
    {"libpq-conninfo", required_argument, NULL, OPT_PG_DSN},
    {"pg-lease", required_argument, NULL, OPT_PG_LEASE},
    {"pg-prefetch", required_argument, NULL, OPT_PG_PREFETCH},
    {"pg-poll-ms", required_argument, NULL, OPT_PG_POLL},
    {"job-handle-prefix", required_argument, NULL, OPT_HANDLE_PREFIX},
    {"max-packet-size", required_argument, NULL, OPT_MAX_PACKET},
    {"max-output-buffer", required_argument, NULL, OPT_MAX_OUTPUT},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNS},
    {"max-jobs", required_argument, NULL, OPT_MAX_JOBS},
    {"max-queue", required_argument, NULL, OPT_MAX_QUEUE},
    {"admin-allow", required_argument, NULL, OPT_ADMIN_ALLOW},
    {"http-port", required_argument, NULL, OPT_HTTP_PORT},
    {"http-listen", required_argument, NULL, OPT_HTTP_LISTEN},
    {"http-port-file", required_argument, NULL, OPT_HTTP_PORT_FILE},
    {"http-admin", no_argument, NULL, OPT_HTTP_ADMIN},
    {"http-max-connections", required_argument, NULL, OPT_HTTP_MAX_CONNS},
    {"http-timeout", required_argument, NULL, OPT_HTTP_TIMEOUT},
    {"max-unique-size", required_argument, NULL, OPT_MAX_UNIQUE},
    {"store-async-ends", no_argument, NULL, OPT_STORE_ASYNC_ENDS},
    {"store-stuck-after", required_argument, NULL, OPT_STORE_STUCK},
    {"pg-stop-grace-ms", required_argument, NULL, OPT_PG_STOP_GRACE},
    {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
    {"job-timeout", required_argument, NULL, OPT_JOB_TIMEOUT},
    {"retry-on", required_argument, NULL, OPT_RETRY_ON},
    {"retry-backoff", required_argument, NULL, OPT_RETRY_BACKOFF},
    {"max-dead", required_argument, NULL, OPT_MAX_DEAD},
    {"keep-results", required_argument, NULL, OPT_KEEP_RESULTS},
    {"max-result-size", required_argument, NULL, OPT_MAX_RESULT},
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

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The config file line being applied ("FILE:LINE: "), so that errors say where; else "". */
static char where[PATH_MAX + 32];

static void
die_usage(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "dsjobd: %s", where);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'dsjobd --help'.\n");
    exit(2);
}

static unsigned long long
parse_number(const char *opt, const char *s, unsigned long long max, bool sizes)
{
    unsigned long long v;
    char *end;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (end == s || errno != 0 || s[0] == '-')
        goto bad;
    if (sizes && *end != '\0') {
        unsigned shift = 0;

        switch (*end) {
        case 'k':
        case 'K': shift = 10; break;
        case 'm':
        case 'M': shift = 20; break;
        case 'g':
        case 'G': shift = 30; break;
        default: goto bad;
        }
        if (end[1] != '\0' || v > (max >> shift))
            goto bad;
        v <<= shift;
        end++;
    }
    if (*end != '\0' || v > max)
        goto bad;
    return v;

bad:
    die_usage("%s: invalid value '%s'", opt, s);
}

/* parse_keepalive reads a keepalive setting: -1 (the system's), or 1 to max. */
static int
parse_keepalive(const char *opt, const char *s, int max)
{
    if (strcmp(s, "-1") == 0)
        return -1;
    if (parse_number(opt, s, (unsigned long long)max, false) == 0)
        die_usage("%s: must be -1 or 1 to %d", opt, max);
    return atoi(s);
}

/* parse_table checks a gearmand queue table name: SQL quotes it, but it must be a name. */
static const char *
parse_table(const char *opt, const char *s)
{
    if (s[0] == '\0' || strlen(s) > 63)
        die_usage("%s: '%s' must be 1 to 63 bytes", opt, s);
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

static int
write_file_atomically(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    FILE *fp;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return -1;
    fp = fopen(tmp, "w");
    if (fp == NULL)
        return -1;
    if (fputs(text, fp) < 0 || fclose(fp) != 0) {
        unlink(tmp);
        return -1;
    }
    return rename(tmp, path);
}

static void
on_stop(int sig)
{
    dsjob_server_stop(the_server, sig == SIGUSR1);
}

static void
on_hup(int sig)
{
    (void)sig;
    dsjob_server_reopen_log(the_server);
}

static void
install_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

/*
 * Fork into the background. The parent waits until the child reports, on a
 * pipe, that it is serving (exit 0) or why it could not (message, exit 1),
 * so that "dsjobd -d" fails visibly when the port is taken.
 */
static int
daemonize(void)
{
    int fds[2];
    pid_t pid;
    char msg[600];
    ssize_t n;

    if (pipe(fds) < 0) {
        perror("dsjobd: pipe");
        exit(1);
    }
    pid = fork();
    if (pid < 0) {
        perror("dsjobd: fork");
        exit(1);
    }
    if (pid > 0) {
        close(fds[1]);
        n = read(fds[0], msg, sizeof(msg) - 1);
        if (n > 0 && msg[0] == 'K')
            exit(0);
        if (n > 0) {
            msg[n] = '\0';
            fprintf(stderr, "%s\n", msg + 1);
        } else {
            fprintf(stderr, "dsjobd: the daemon exited before it was ready\n");
        }
        exit(1);
    }
    close(fds[0]);
    setsid();
    if (chdir("/") < 0) {
        /* Staying in the start directory is harmless. */
    }
    return fds[1];
}

/*
 * notify_systemd sends state ("READY=1", "STOPPING=1") to the service
 * manager when there is one (NOTIFY_SOCKET is set) and dsjobd was built
 * with libsystemd; otherwise nothing.
 */
static void
notify_systemd(const char *state)
{
#ifdef HAVE_SYSTEMD
    (void)sd_notify(0, state);
#else
    (void)state;
#endif
}

static void
report_ready(int fd, const char *err)
{
    char msg[600];
    ssize_t n;

    if (fd < 0) {
        if (err != NULL)
            fprintf(stderr, "%s\n", err);
        return;
    }
    snprintf(msg, sizeof(msg), "%c%s", err ? 'E' : 'K', err ? err : "");
    n = write(fd, msg, strlen(msg));
    (void)n;
    close(fd);
}

/* One option of the config file, kept until argv is parsed after it. */
struct file_opt {
    int val;       /* the option, as getopt_long returns it */
    char *value;   /* its value, in opts.config_text, or NULL */
    unsigned line; /* its line, for error messages */
};

/* What main needs beside the server's config; the strings are owned here. */
struct opts {
    char *pid_file, *port_file, *log_file, *unix_socket; /* absolute paths, or NULL */
    char *http_port_file;                                /* absolute path, or NULL */
    char *work_dir, *store_db;                           /* absolute paths, or NULL */
    const char *user;                  /* --user, borrowed from argv or config_text */
    uid_t uid;                         /* --user's uid, looked up before binding */
    gid_t gid;                         /* and its group */
    bool daemon_mode;                  /* --daemon */
    bool check_args;                   /* --check-args: check the options, then exit */
    bool syslog;                       /* --syslog was given: warned about, not applied */
    rlim_t file_descriptors;           /* --file-descriptors, or 0 */
    const char *protocol;              /* --protocol: refused after --check-args, as gearmand */
    const char *config_file;           /* --config-file, borrowed from argv */
    char *config_text;                 /* the config file's text, split in place */
    struct file_opt *file_opts;        /* the config file's options, in order */
    size_t nfile_opts;                 /* entries in file_opts */
    size_t next_file_opt;              /* the next one next_option returns */
    char *ssl_cert, *ssl_key, *ssl_ca; /* absolute paths, or NULL */
};

/*
 * find_user looks --user up before anything is bound, so that a name that
 * does not exist, or a switch that needs root, is a usage error (exit 2).
 */
static void
find_user(struct opts *o)
{
    struct passwd *pw;

    pw = getpwnam(o->user);
    if (pw == NULL)
        die_usage("--user: no such user '%s'", o->user);
    o->uid = pw->pw_uid;
    o->gid = pw->pw_gid;
    if (geteuid() != 0 && geteuid() != o->uid)
        die_usage("--user %s: switching to another user needs root", o->user);
}

/*
 * drop_privileges switches to --user's uid, gid and supplementary groups;
 * nothing to do when dsjobd already runs as that user. glibc's setuid
 * changes every thread, the store's writer included.
 */
static int
drop_privileges(const struct opts *o, char *err, size_t errlen)
{
    if (geteuid() == o->uid && getuid() == o->uid)
        return 0;
    if (setgid(o->gid) < 0 || initgroups(o->user, o->gid) < 0 || setuid(o->uid) < 0) {
        snprintf(err, errlen, "dsjobd: --user %s: %s", o->user, strerror(errno));
        return -1;
    }
    return 0;
}

static void
opts_release(struct opts *o)
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
        die_usage("%s: the path is empty", opt);
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
            die_usage("--retry-on: '%.*s' is not crash, timeout, fail or exception", (int)len, s);
        bits |= names[i].bit;
        if (s[len] == '\0')
            return bits;
        s += len + 1;
    }
}

/* parse_seconds_ms reads SECONDS[.FRACTION] (at most max seconds) as milliseconds. */
static unsigned
parse_seconds_ms(const char *opt, const char *s, size_t len, unsigned max)
{
    unsigned long long ms = 0, scale = 1000;
    size_t i = 0;

    if (len == 0)
        die_usage("%s: a number of seconds is missing", opt);
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        ms = ms * 10 + (unsigned)(s[i] - '0');
        if (ms > max)
            die_usage("%s: '%.*s' is over %u seconds", opt, (int)len, s, max);
    }
    ms *= 1000;
    if (i < len && s[i] == '.')
        for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++)
            if (scale > 1)
                ms += (unsigned)(s[i] - '0') * (scale /= 10);
    if (i != len)
        die_usage("%s: '%.*s' is not a number of seconds", opt, (int)len, s);
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
        die_usage("--%s cannot be used in a config file", lo->name);
    if (lo->has_arg == required_argument && value == NULL)
        die_usage("--%s needs a value", lo->name);
    if (lo->has_arg == no_argument && value != NULL)
        die_usage("--%s takes no value, but has '%s'", lo->name, value);
    fo = realloc(o->file_opts, (o->nfile_opts + 1) * sizeof(*fo));
    if (fo == NULL)
        die_usage("--config-file: out of memory");
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
            die_usage("unexpected '%s': an option starts with - or --", w);
        if (w[1] == '-') {
            value = strchr(w + 2, '=');
            lo = find_long(w + 2, value ? (size_t)(value - w - 2) : strlen(w + 2));
            if (lo == NULL)
                die_usage("unknown option '%.*s'", value ? (int)(value - w) : (int)strlen(w), w);
            if (value != NULL)
                value++;
        } else {
            lo = find_short(w[1]);
            if (lo == NULL)
                die_usage("unknown option '-%c'", w[1]);
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
        die_usage("unknown option '%.*s'", (int)len, line);
    value = line + len;
    while (is_space(*value))
        value++;
    if (*value == '=') {
        for (value++; is_space(*value); value++)
            ;
    } else if (*value != '\0') {
        die_usage("'%s': expected %s = VALUE", line, lo->name);
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
        die_usage("--config-file: cannot open '%s': %s", o->config_file, strerror(errno));
    o->config_text = malloc(CONFIG_MAX_SIZE + 1);
    if (o->config_text == NULL)
        die_usage("--config-file: out of memory");
    n = fread(o->config_text, 1, CONFIG_MAX_SIZE + 1, fp);
    if (ferror(fp))
        die_usage("--config-file: cannot read '%s': %s", o->config_file, strerror(errno));
    fclose(fp);
    if (n > CONFIG_MAX_SIZE)
        die_usage("--config-file: '%s' is larger than %d bytes", o->config_file, CONFIG_MAX_SIZE);
    if (memchr(o->config_text, '\0', n) != NULL)
        die_usage("--config-file: '%s' has a NUL byte: not a text file", o->config_file);
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

/*
 * parse_options fills cfg and o: from the --config-file first, if one is
 * given, then from argv, so that the command line overrides the file
 * wherever --config-file stands. An option given again keeps its last
 * value; a repeatable one (--listen, --admin-allow) given on the command
 * line replaces the file's list. It exits for --help, --version (0) and a
 * usage error (2, with a message that names the option, and FILE:LINE for
 * the file's). Strings in cfg are borrowed from argv or from o.
 */
static void
parse_options(int argc, char **argv, struct dsjob_server_config *cfg, struct opts *o)
{
    bool store_given = false, listen_given = false, admin_given = false;
    int opt, rc;

    /* getopt's own messages name argv[0], which may be a long path. */
    argv[0] = "dsjobd";
    dsjob_server_config_init(cfg);
    read_config(argc, argv, o);
    while ((opt = next_option(argc, argv, o)) != -1) {
        switch (opt) {
        case 'L':
            if (!listen_given)
                cfg->nlisten = 0;
            listen_given = true;
            if (cfg->nlisten == DSJOB_SERVER_MAX_LISTEN)
                die_usage("too many --listen addresses (at most %d)", DSJOB_SERVER_MAX_LISTEN);
            cfg->listen[cfg->nlisten++] = optarg;
            break;
        case 'p': cfg->port = (int)parse_number("--port", optarg, 65535, false); break;
        case OPT_PORT_FILE: set_path(&o->port_file, "--port-file", optarg); break;
        case OPT_HTTP_PORT:
            cfg->http_port = (int)parse_number("--http-port", optarg, 65535, false);
            break;
        case OPT_HTTP_LISTEN:
            if (optarg[0] == '\0')
                die_usage("--http-listen: the address is empty");
            cfg->http_listen = optarg;
            break;
        case OPT_HTTP_PORT_FILE: set_path(&o->http_port_file, "--http-port-file", optarg); break;
        case OPT_HTTP_ADMIN: cfg->http_admin = true; break;
        case OPT_HTTP_MAX_CONNS:
            cfg->http_max_connections =
                (unsigned)parse_number("--http-max-connections", optarg, 65536, false);
            break;
        case OPT_HTTP_TIMEOUT:
            cfg->http_timeout = (unsigned)parse_number("--http-timeout", optarg, 3600, false);
            break;
        case OPT_MAX_UNIQUE:
            cfg->max_unique_size =
                (size_t)parse_number("--max-unique-size", optarg, UINT32_MAX, true);
            break;
        case OPT_STORE_ASYNC_ENDS: cfg->store_async_ends = true; break;
        case OPT_STORE_STUCK:
            cfg->store_stuck_secs =
                (unsigned)parse_number("--store-stuck-after", optarg, 86400, false);
            if (cfg->store_stuck_secs < 1)
                die_usage("--store-stuck-after: must be at least %d", 1);
            break;
        case OPT_PG_STOP_GRACE:
            cfg->pg_stop_grace_ms =
                (unsigned)parse_number("--pg-stop-grace-ms", optarg, 600000, false);
            break;
        case OPT_UNIX_SOCKET:
            cfg->unix_socket = set_path(&o->unix_socket, "--unix-socket", optarg);
            break;
        case 'b': cfg->backlog = (int)parse_number("--backlog", optarg, 65535, false); break;
        case OPT_KEEPALIVE: cfg->keepalive = true; break;
        case OPT_KEEPALIVE_IDLE:
            cfg->keepalive_idle = parse_keepalive("--keepalive-idle", optarg, 32767);
            break;
        case OPT_KEEPALIVE_INTERVAL:
            cfg->keepalive_interval = parse_keepalive("--keepalive-interval", optarg, 32767);
            break;
        case OPT_KEEPALIVE_COUNT:
            cfg->keepalive_count = parse_keepalive("--keepalive-count", optarg, 127);
            break;
        case OPT_CHECK_ARGS: o->check_args = true; break;
        case 'f':
            o->file_descriptors =
                (rlim_t)parse_number("--file-descriptors", optarg, 16u << 20, false);
            if (o->file_descriptors == 0)
                die_usage("--file-descriptors: must be at least %d", 1);
            break;
        case OPT_SQLITE_TABLE:
            cfg->libsqlite3_table = parse_table("--libsqlite3-table", optarg);
            break;
        case OPT_PQ_TABLE: cfg->libpq_table = parse_table("--libpq-table", optarg); break;
        case OPT_HASHTABLE_BUCKETS:
            if (parse_number("--hashtable-buckets", optarg, UINT32_MAX, false) == 0)
                die_usage("--hashtable-buckets: must be greater than 0");
            break;
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
                die_usage("--verbose: unknown level '%s'", optarg);
            cfg->verbose = (enum dsjob_log_level)rc;
            break;
        case 'j':
            cfg->job_retries = (unsigned)parse_number("--job-retries", optarg, UINT32_MAX, false);
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
                die_usage("--priority: '%s' is not function, global or gearmand-2.0", optarg);
            break;
        case OPT_PRIORITY_AGING:
            cfg->priority_aging = (unsigned)parse_number("--priority-aging", optarg, 604800, false);
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
                die_usage("--store-sync: '%s' is not off, normal or full", optarg);
            break;
        case OPT_STORE_BATCH:
            cfg->store_batch = (unsigned)parse_number("--store-batch", optarg, 1000000, false);
            if (cfg->store_batch == 0)
                die_usage("--store-batch: must be at least %d", 1);
            break;
        case OPT_MC_SERVERS: cfg->memcached_servers = optarg; break;
        case OPT_MC_PREFIX: cfg->memcached_prefix = optarg; break;
        case OPT_PG_DSN: cfg->pg_dsn = optarg; break;
        case OPT_PG_LEASE:
            cfg->pg_lease = (unsigned)parse_number("--pg-lease", optarg, 86400, false);
            if (cfg->pg_lease < 2)
                die_usage("--pg-lease: must be at least %d seconds", 2);
            break;
        case OPT_PG_PREFETCH:
            cfg->pg_prefetch = (unsigned)parse_number("--pg-prefetch", optarg, 100000, false);
            break;
        case OPT_PG_POLL:
            cfg->pg_poll_ms = (unsigned)parse_number("--pg-poll-ms", optarg, 3600000, false);
            if (cfg->pg_poll_ms < 10)
                die_usage("--pg-poll-ms: must be at least %d", 10);
            break;
        case OPT_STORE_INTERVAL:
            cfg->store_commit_interval_ms =
                (unsigned)parse_number("--store-commit-interval", optarg, 10000, false);
            break;
        case OPT_HANDLE_PREFIX: cfg->job_handle_prefix = optarg; break;
        case OPT_MAX_PACKET:
            cfg->max_packet_size =
                (size_t)parse_number("--max-packet-size", optarg, UINT32_MAX, true);
            break;
        case OPT_MAX_OUTPUT:
            cfg->max_output_buffer =
                (size_t)parse_number("--max-output-buffer", optarg, SIZE_MAX, true);
            break;
        case OPT_MAX_CONNS:
            cfg->max_connections =
                (unsigned)parse_number("--max-connections", optarg, UINT32_MAX, false);
            break;
        case OPT_MAX_JOBS:
            cfg->max_jobs = (unsigned)parse_number("--max-jobs", optarg, UINT32_MAX, false);
            break;
        case OPT_MAX_QUEUE:
            cfg->max_queue = (unsigned)parse_number("--max-queue", optarg, UINT32_MAX, false);
            break;
        case OPT_IDLE_TIMEOUT:
            cfg->idle_timeout = (unsigned)parse_number("--idle-timeout", optarg, 86400, false);
            break;
        case OPT_JOB_TIMEOUT:
            cfg->job_timeout = (unsigned)parse_number("--job-timeout", optarg, 86400, false);
            break;
        case OPT_RETRY_ON: cfg->retry_on = parse_retry_on(optarg); break;
        case OPT_RETRY_BACKOFF: {
            size_t base_len = strcspn(optarg, ",");

            cfg->retry_backoff_base_ms =
                parse_seconds_ms("--retry-backoff", optarg, base_len, 86400);
            cfg->retry_backoff_max_ms =
                optarg[base_len] == ',' ? parse_seconds_ms("--retry-backoff", optarg + base_len + 1,
                                                           strlen(optarg + base_len + 1), 86400 * 7)
                                        : 0;
            if (cfg->retry_backoff_max_ms != 0 &&
                cfg->retry_backoff_max_ms < cfg->retry_backoff_base_ms)
                die_usage("--retry-backoff: the longest wait is shorter than the first");
            break;
        }
        case OPT_MAX_DEAD:
            cfg->max_dead = (unsigned)parse_number("--max-dead", optarg, 100000000, false);
            break;
        case OPT_KEEP_RESULTS:
            cfg->keep_results =
                (unsigned)parse_number("--keep-results", optarg, 86400 * 365, false);
            break;
        case OPT_MAX_RESULT:
            cfg->max_result_size =
                (size_t)parse_number("--max-result-size", optarg, UINT32_MAX, true);
            break;
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
                die_usage("too many --admin-allow ranges (at most %d)",
                          DSJOB_SERVER_MAX_ADMIN_ALLOW);
            cfg->admin_allow[cfg->nadmin_allow++] = optarg;
            break;
        case 't':
        case 'w':
            parse_number(opt == 't' ? "--threads" : "--worker-wakeup", optarg, 1024, false);
            break;
        case 'h':
            usage(stdout);
            opts_release(o);
            exit(0);
        case 'V':
            printf("dsjobd %s\n", DSJOB_VERSION_STRING);
            opts_release(o);
            exit(0);
        case OPT_CONFIG_FILE: break; /* read first, by read_config */
        case OPT_LOG_FORMAT:
            if (strcmp(optarg, "text") == 0)
                cfg->log_format = DSJOB_LOG_FORMAT_TEXT;
            else if (strcmp(optarg, "json") == 0)
                cfg->log_format = DSJOB_LOG_FORMAT_JSON;
            else
                die_usage("--log-format: '%s' is not text or json", optarg);
            break;
        case OPT_FILE_DONE: listen_given = admin_given = false; break;
        default:
            if (opt >= OPT_GEARMAND_REFUSED &&
                opt < OPT_GEARMAND_REFUSED + (int)(sizeof(long_options) / sizeof(long_options[0])))
                die_usage("--%s: gearmand's %.*s queue is not available in dsjobd; its stores "
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
        die_usage("unexpected argument '%s'", argv[optind]);
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
            die_usage("%s and %s name two different stores: say which one with --store", place[0],
                      place[1]);
    }
    if (!store_given && (cfg->work_dir != NULL || cfg->store_db != NULL))
        cfg->store = "sqlite";
    else if (!store_given && cfg->memcached_servers != NULL)
        cfg->store = "memcached";
    else if (!store_given && cfg->pg_dsn != NULL)
        cfg->store = "postgres";
}

/*
 * set_file_limit sets the open-file limit to n (--file-descriptors), the
 * hard limit too when n is over it, which needs privilege; gearmand exits
 * when it cannot, and so does dsjobd.
 */
static int
set_file_limit(rlim_t n, char *err, size_t errlen)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        snprintf(err, errlen, "--file-descriptors: getrlimit: %s", strerror(errno));
        return -1;
    }
    rl.rlim_cur = n;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n)
        rl.rlim_max = n;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        snprintf(err, errlen, "--file-descriptors: cannot set the limit to %llu: %s",
                 (unsigned long long)n, strerror(errno));
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct dsjob_server_config cfg;
    struct opts o = {0};
    char err[600];
    int ready_fd = -1;
    int rc, ret = 1; /* the exit status: 1 unless the server ran and stopped cleanly */
    bool pid_written = false;

    parse_options(argc, argv, &cfg, &o);
    if (o.check_args) { /* as gearmand: the options and the config file read, nothing started */
        opts_release(&o);
        return 0;
    }
    if (o.protocol != NULL)
        die_usage("--protocol: gearmand's '%s' protocol module is not available; dsjobd speaks "
                  "Gearman only (its --http-port serves health, metrics and an admin API, not "
                  "jobs)",
                  o.protocol);
    if (o.user != NULL)
        find_user(&o);
    the_server = dsjob_server_new(&cfg, err, sizeof(err));
    if (the_server == NULL) {
        fprintf(stderr, "dsjobd: %s\n", err);
        ret = 2;
        goto out;
    }
    if (o.syslog)
        fprintf(stderr, "dsjobd: --syslog: dsjobd does not write to syslog; its log goes to "
                        "--log-file (stderr by default, the journal under systemd)\n");
    if (o.file_descriptors > 0 && set_file_limit(o.file_descriptors, err, sizeof(err)) < 0) {
        fprintf(stderr, "dsjobd: %s\n", err);
        goto out;
    }
    if (o.daemon_mode)
        ready_fd = daemonize();
    install_signals();
    rc = dsjob_server_bind(the_server);
    if (rc != DSJOB_OK) {
        snprintf(err, sizeof(err), "dsjobd: %s", dsjob_server_errmsg(the_server));
        report_ready(ready_fd, err);
        goto out;
    }
    if (o.pid_file != NULL) {
        char text[32];

        snprintf(text, sizeof(text), "%ld\n", (long)getpid());
        if (write_file_atomically(o.pid_file, text) < 0) {
            snprintf(err, sizeof(err), "dsjobd: cannot write pid file '%s': %s", o.pid_file,
                     strerror(errno));
            report_ready(ready_fd, err);
            goto out;
        }
        pid_written = true;
    }
    /* Before the port file, which tests wait for: both are there once it is. */
    if (o.http_port_file != NULL) {
        char text[32];

        snprintf(text, sizeof(text), "%d\n", dsjob_server_http_port(the_server));
        if (write_file_atomically(o.http_port_file, text) < 0) {
            snprintf(err, sizeof(err), "dsjobd: cannot write HTTP port file '%s': %s",
                     o.http_port_file, strerror(errno));
            report_ready(ready_fd, err);
            goto out;
        }
    }
    if (o.port_file != NULL) {
        char text[32];

        snprintf(text, sizeof(text), "%d\n", dsjob_server_port(the_server));
        if (write_file_atomically(o.port_file, text) < 0) {
            snprintf(err, sizeof(err), "dsjobd: cannot write port file '%s': %s", o.port_file,
                     strerror(errno));
            report_ready(ready_fd, err);
            goto out;
        }
    }
    if (o.user != NULL && drop_privileges(&o, err, sizeof(err)) < 0) {
        report_ready(ready_fd, err);
        goto out;
    }
    if (o.daemon_mode) {
        int null = open("/dev/null", O_RDWR);

        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            if (strcmp(cfg.log_file, "stderr") != 0)
                dup2(null, 2);
            if (null > 2)
                close(null);
        }
    }
    report_ready(ready_fd, NULL);
    notify_systemd("READY=1"); /* bound, files written, user switched: as --daemon's parent */
    rc = dsjob_server_run(the_server);
    notify_systemd("STOPPING=1");
    if (rc != DSJOB_OK)
        fprintf(stderr, "dsjobd: %s\n", dsjob_server_errmsg(the_server));
    else
        ret = 0;
out:
    /* Every exit after the options goes through here, so nothing leaks (LeakSanitizer). */
    if (pid_written)
        unlink(o.pid_file);
    dsjob_server_free(the_server);
    opts_release(&o);
    return ret;
}
