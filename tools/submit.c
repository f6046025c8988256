/*
 * dsjob submit: one job. A background job (-b, or --at) goes through the
 * blocking libdsjobclient calls and its handle is printed. A foreground
 * job goes through a one-task task set, whose callbacks stream WORK_DATA
 * to stdout as it arrives, copy warnings to stderr and feed the progress
 * bar, and whose "created" callback tells a job that was accepted and then
 * lost (exit 1) from a job that no server would take (exit 3). A server
 * has --accept-timeout to accept the job (JOB_CREATED), so one that takes
 * the connection and never answers does not hold dsjob for ever. DATA
 * comes from the command line or else from stdin, read whole and binary
 * safe, and no larger than a Gearman packet can carry.
 */
#include "config.h"
#include "dsjob.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <dsjob/client.h>

#include "link/link.h"
#include "progress.h"

#define SUBMIT_CONNECT_MS 5000 /* connect timeout without -t */
#define SUBMIT_ACCEPT_MS 30000 /* --accept-timeout without -t */
#define SUBMIT_UNIQUE_MAX 64   /* longest unique key libdsjobclient (and gearmand) takes */
/* The largest DATA: a packet declares at most 4 GiB - 1 bytes; the rest is for the names. */
#define SUBMIT_DATA_MAX ((size_t)UINT32_MAX - 256)

static const char submit_usage[] =
    "usage: dsjob submit [-s SERVER]... [-t MS] [-b] [-p high|normal|low] [-u UNIQUE]\n"
    "                    [-k KEY] [--at EPOCH] [--expire-in SECONDS | --deadline EPOCH]\n"
    "                    [--accept-timeout MS] [--after H[,H...] [--after-fail POLICY]]\n"
    "                    FUNCTION [DATA]\n"
    "  -b, --background     do not wait: print the job handle\n"
    "  -p, --priority PRIO  high, normal (default) or low\n"
    "  -u, --unique KEY     unique key: jobs with the same key are coalesced\n"
    "                       ('-' coalesces on the payload)\n"
    "  -k, --key KEY        flow control's partition key: the unique key becomes\n"
    "                       KEY:UNIQUE (KEY:random without -u; dsjobd limit key-...)\n"
    "      --at EPOCH       run at that time (seconds since 1970; background)\n"
    "      --expire-in SECONDS  not started within SECONDS (up to 3 decimals), the job\n"
    "                       is not run: dsjobd puts it in the dead set as expired\n"
    "      --deadline EPOCH the same, by that time (seconds since 1970)\n"
    "      --after H[,H...] run only once the jobs with these handles have succeeded\n"
    "                       (dsjobd; with -b): held until then; an H of the form\n"
    "                       unique:FUNCTION:UNIQUE names the job of that unique key\n"
    "      --after-fail POLICY  if one of them fails for good: fail (default: this job\n"
    "                       fails too), cancel (it is dropped), or run (it runs anyway)\n"
    "      --accept-timeout MS  how long a server has to accept the job\n"
    "                       (default: -t, else "
    "30000; 0: no limit)\n"
    "  -s, --server ADDR    host[:port] (4730) or /unix/socket, repeatable\n"
    "  -t, --timeout MS     connect timeout, and how long to wait for the job\n"
    "DATA is read from standard input when it is not given; put -- before DATA\n"
    "that starts with '-'.\n";

/* What the task set's callbacks share with submit_fg. */
struct submit_state {
    struct progress bar; /* the progress bar */
    bool use_bar;        /* draw it */
    bool stdout_tty;     /* stdout is a terminal: blank the bar before writing */
    bool created;        /* a server accepted the job (JOB_CREATED) */
    bool out_failed;     /* writing stdout failed (reported once) */
};

/*
 * Reads all of stdin into a malloc'd buffer. Returns NULL (with errno) on
 * a read error, and with EFBIG (*lenp the bytes seen) once it holds more
 * than SUBMIT_DATA_MAX: a regular file is measured before it is read
 * (*measured: *lenp is its size).
 */
static char *
read_stdin(size_t *lenp, bool *measured)
{
    size_t len = 0, cap = 65536;
    struct stat st;
    char *buf;

    if (fstat(0, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (uintmax_t)st.st_size > SUBMIT_DATA_MAX) {
        *lenp = (size_t)st.st_size;
        *measured = true;
        errno = EFBIG;
        return NULL;
    }
    buf = cli_xmalloc(cap);
    for (;;) {
        ssize_t n;

        if (len > SUBMIT_DATA_MAX) {
            free(buf);
            *lenp = len;
            errno = EFBIG;
            return NULL;
        }
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);

            if (nb == NULL) {
                free(buf);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        n = read(0, buf + len, cap - len);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            free(buf);
            return NULL;
        }
        len += (size_t)n;
    }
    *lenp = len;
    return buf;
}

static void
out_write(struct submit_state *st, const void *data, size_t len)
{
    if (st->use_bar && st->stdout_tty)
        progress_clear(&st->bar);
    if (cli_write_all(1, data, len) < 0 && !st->out_failed) {
        st->out_failed = true;
        cli_err("write to standard output: %s", strerror(errno));
    }
}

static void
on_created(struct dsjob_task *t, const char *handle, void *user)
{
    struct submit_state *st = user;

    (void)t;
    (void)handle;
    st->created = true;
}

static void
on_status(struct dsjob_task *t, unsigned num, unsigned den, void *user)
{
    struct submit_state *st = user;

    (void)t;
    if (st->use_bar)
        progress_update(&st->bar, num, den);
}

static void
on_data(struct dsjob_task *t, const void *data, size_t len, void *user)
{
    (void)t;
    out_write(user, data, len);
}

/* A warning goes to stderr as it is, with a newline added when it has none. */
static void
on_warning(struct dsjob_task *t, const void *data, size_t len, void *user)
{
    struct submit_state *st = user;

    (void)t;
    if (st->use_bar)
        progress_clear(&st->bar);
    cli_write_all(2, data, len);
    if (len == 0 || ((const char *)data)[len - 1] != '\n')
        cli_write_all(2, "\n", 1);
}

static void
on_complete(struct dsjob_task *t, const void *result, size_t len, void *user)
{
    struct submit_state *st = user;

    (void)t;
    if (st->use_bar)
        progress_clear(&st->bar);
    out_write(st, result, len);
}

/* Whether to draw a bar: DSJOB_PROGRESS=force|never, else when stderr is a terminal. */
static bool
want_bar(void)
{
    const char *env = getenv("DSJOB_PROGRESS");

    if (env != NULL && strcmp(env, "force") == 0)
        return true;
    if (env != NULL && strcmp(env, "never") == 0)
        return false;
    return isatty(2) == 1;
}

/* The exit code for a library error; accepted tells whether a server took the job. */
static int
exit_for(int err, bool accepted)
{
    switch (err) {
    case DSJOB_OK: return CLI_OK;
    case DSJOB_ERR_ARG: return CLI_USAGE;
    case DSJOB_ERR_SYS:
    case DSJOB_ERR_CLOSED:
    case DSJOB_ERR_TIMEOUT:
    case DSJOB_ERR_NOTFOUND: return accepted ? CLI_FAILED : CLI_UNREACHABLE;
    default: return CLI_FAILED;
    }
}

/*
 * Runs the task set until the task ends, with accept_ms (0: no limit) for
 * JOB_CREATED and -t for it all. Returns what dsjob_taskset_run did;
 * *accept_late tells a timeout of the accept deadline from one of -t.
 */
static int
run_bounded(struct cli *cli, struct dsjob_taskset *ts, struct submit_state *st, int accept_ms,
            bool *accept_late)
{
    bool by_accept = accept_ms > 0 && (cli->timeout_ms == 0 || accept_ms < cli->timeout_ms);
    int64_t start = link_now_ms(), left;
    int err;

    err = dsjob_taskset_run(ts, by_accept ? accept_ms : cli->timeout_ms);
    *accept_late = err == DSJOB_ERR_TIMEOUT && !st->created && by_accept;
    if (err != DSJOB_ERR_TIMEOUT || !st->created || !by_accept)
        return err;
    /* Accepted in time: what is left of -t (0: no limit) is for the job. */
    if (cli->timeout_ms == 0)
        return dsjob_taskset_run(ts, 0);
    left = cli->timeout_ms - (link_now_ms() - start);
    return left > 0 ? dsjob_taskset_run(ts, (int)left) : DSJOB_ERR_TIMEOUT;
}

static int
submit_fg(struct cli *cli, struct dsjob_client *c, const char *func, const char *unique,
          const void *data, size_t len, enum dsjob_priority prio, int accept_ms)
{
    static const struct dsjob_task_callbacks cb = {
        .created = on_created,
        .status = on_status,
        .data = on_data,
        .warning = on_warning,
        .complete = on_complete,
    };
    struct submit_state st;
    struct dsjob_taskset *ts;
    struct dsjob_task *t;
    bool accept_late;
    int err, r;

    memset(&st, 0, sizeof(st));
    st.use_bar = want_bar();
    st.stdout_tty = isatty(1) == 1;
    progress_init(&st.bar, 2);
    ts = dsjob_taskset_new(c, &cb);
    if (ts == NULL) {
        cli_err("out of memory");
        return CLI_FAILED;
    }
    err = dsjob_taskset_add(ts, func, unique, data, len, prio, 0, &st, &t);
    if (err != DSJOB_OK) {
        cli_err("submit to '%s': %s", func, dsjob_strerror(err));
        dsjob_taskset_free(ts);
        return exit_for(err, false);
    }
    err = run_bounded(cli, ts, &st, accept_ms, &accept_late);
    if (st.use_bar)
        progress_clear(&st.bar);
    if (err == DSJOB_ERR_TIMEOUT) {
        if (st.created)
            cli_err("job %s of '%s' did not end within %d ms", dsjob_task_handle(t), func,
                    cli->timeout_ms);
        else if (accept_late)
            cli_err("no server accepted the job within %d ms (--accept-timeout)", accept_ms);
        else
            cli_err("no server accepted the job within %d ms", cli->timeout_ms);
        r = st.created ? CLI_FAILED : CLI_UNREACHABLE;
    } else if (err == DSJOB_ERR_NOMEM) {
        cli_err("out of memory");
        r = CLI_FAILED;
    } else {
        err = dsjob_task_error(t);
        switch (err) {
        case DSJOB_OK: break;
        case DSJOB_ERR_JOB_FAILED:
            cli_err("job %s of '%s' failed", dsjob_task_handle(t), func);
            break;
        case DSJOB_ERR_JOB_EXCEPTION:
            cli_err("job %s of '%s' raised an exception: %s", dsjob_task_handle(t), func,
                    dsjob_task_errmsg(t));
            break;
        case DSJOB_ERR_SERVER:
            cli_err("the server refused the job: %s", dsjob_task_errmsg(t));
            break;
        default:
            if (st.created)
                cli_err("lost the job: %s", dsjob_task_errmsg(t));
            else
                cli_err("no server reachable: %s", dsjob_task_errmsg(t));
            break;
        }
        /* A server that broke off before taking the job (a refused TLS handshake): unreachable. */
        r = err == DSJOB_ERR_PROTO && !st.created ? CLI_UNREACHABLE : exit_for(err, st.created);
    }
    if (r == CLI_OK && st.out_failed)
        r = CLI_FAILED;
    dsjob_taskset_free(ts);
    return r;
}

static int
submit_bg(struct cli *cli, struct dsjob_client *c, const char *func, const char *unique,
          const void *data, size_t len, enum dsjob_priority prio, bool at, long long epoch,
          int accept_ms)
{
    char handle[DSJOB_HANDLE_MAX];
    const char *msg;
    int err, r;

    if (at)
        err = dsjob_client_submit_epoch(c, func, unique, data, len, epoch, handle, sizeof(handle));
    else
        err = dsjob_client_submit_bg(c, func, unique, data, len, prio, handle, sizeof(handle));
    if (err != DSJOB_OK) {
        msg = dsjob_client_errmsg(c)[0] != '\0' ? dsjob_client_errmsg(c) : dsjob_strerror(err);
        /*
         * A refused TLS handshake, or a server that broke the protocol before
         * taking the job, is a server we could not use (3), as in the
         * foreground; a handle too long for the library came after the job
         * was taken, and libdsjobclient says so in these words (client.c).
         */
        r = err == DSJOB_ERR_PROTO && strstr(msg, "(the job was submitted)") == NULL
                ? CLI_UNREACHABLE
                : exit_for(err, false);
        if (err == DSJOB_ERR_TIMEOUT && accept_ms > 0 && accept_ms != cli->timeout_ms)
            cli_err("no server accepted the job within %d ms (--accept-timeout): %s", accept_ms,
                    msg);
        else if (r == CLI_UNREACHABLE)
            cli_err("no server reachable: %s", msg);
        else
            cli_err("submit to '%s': %s", func, msg);
        return r;
    }
    printf("%s\n", handle);
    if (fflush(stdout) != 0) {
        cli_err("write to standard output: %s", strerror(errno));
        return CLI_FAILED;
    }
    return CLI_OK;
}

/* SECONDS[.FRACTION] as milliseconds (at most ten years); -1 if it is not one. */
static long long
parse_seconds_ms(const char *s)
{
    size_t dot = strcspn(s, "."), i;
    unsigned long whole;
    long long frac = 0, scale = 1000;
    char buf[24];

    if (dot == 0 || dot >= sizeof(buf))
        return -1;
    memcpy(buf, s, dot);
    buf[dot] = '\0';
    if (cli_parse_uint(buf, 0, 315360000UL, &whole) < 0)
        return -1;
    for (i = dot + (s[dot] == '.'); s[i] != '\0'; i++) {
        if (s[i] < '0' || s[i] > '9' || scale == 1)
            return -1;
        frac += (long long)(s[i] - '0') * (scale /= 10);
    }
    return (long long)whole * 1000 + frac;
}

int
submit_main(struct cli *cli, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_GLOBAL_LONG,
        {"background", no_argument, NULL, 'b'},
        {"priority", required_argument, NULL, 'p'},
        {"unique", required_argument, NULL, 'u'},
        {"key", required_argument, NULL, 'k'},
        {"at", required_argument, NULL, OPT_AT},
        {"accept-timeout", required_argument, NULL, OPT_ACCEPT_TIMEOUT},
        {"expire-in", required_argument, NULL, OPT_EXPIRE_IN},
        {"deadline", required_argument, NULL, OPT_DEADLINE},
        {"after", required_argument, NULL, OPT_AFTER},
        {"after-fail", required_argument, NULL, OPT_AFTER_FAIL},
        {NULL, 0, NULL, 0},
    };
    enum dsjob_priority prio = DSJOB_PRIO_NORMAL;
    const char *unique = NULL, *func, *key = NULL;
    char keyed[SUBMIT_UNIQUE_MAX + 1];
    bool background = false, at = false, prio_set = false;
    unsigned long epoch = 0, accept = 0;
    bool accept_set = false, measured = false;
    long long expire_ms = -1;
    char *after = NULL;
    const char *after_h[1024];
    size_t nafter = 0;
    int after_fail = -1;
    struct dsjob_client *c;
    char *buf = NULL;
    const void *data;
    size_t len = 0, i;
    int ch, r;

    while ((ch = getopt_long(argc, argv, ":" CLI_GLOBAL_SHORT "bp:u:k:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': fputs(submit_usage, stdout); return CLI_OK;
        case 'b': background = true; break;
        case 'p':
            prio_set = true;
            /* In any case, as the admin command priority takes them. */
            if (strcasecmp(optarg, "high") == 0)
                prio = DSJOB_PRIO_HIGH;
            else if (strcasecmp(optarg, "normal") == 0)
                prio = DSJOB_PRIO_NORMAL;
            else if (strcasecmp(optarg, "low") == 0)
                prio = DSJOB_PRIO_LOW;
            else
                return cli_usage_error(cli, "option '-p' wants high, normal or low, not '%s'",
                                       optarg);
            break;
        case 'u':
            /* The limit of gearmand and of libdsjobclient, said here with the option's name. */
            if (strlen(optarg) > SUBMIT_UNIQUE_MAX)
                return cli_usage_error(cli, "option '-u' wants at most %d bytes, not %zu",
                                       SUBMIT_UNIQUE_MAX, strlen(optarg));
            unique = optarg;
            break;
        case 'k':
            if (*optarg == '\0' || strchr(optarg, ':') != NULL)
                return cli_usage_error(cli, "option '-k' wants a key without ':', not '%s'",
                                       optarg);
            key = optarg;
            break;
        case OPT_AT:
            if (cli_parse_uint(optarg, 0, 0x7fffffffffffffffUL, &epoch) < 0)
                return cli_usage_error(cli, "option '--at' wants seconds since 1970, not '%s'",
                                       optarg);
            at = true;
            break;
        case OPT_EXPIRE_IN:
            if ((expire_ms = parse_seconds_ms(optarg)) <= 0)
                return cli_usage_error(
                    cli, "option '--expire-in' wants seconds (0.001 to 315360000), not '%s'",
                    optarg);
            break;
        case OPT_DEADLINE: {
            unsigned long t;
            struct timeval now;

            if (cli_parse_uint(optarg, 1, 0x7fffffffUL * 2, &t) < 0)
                return cli_usage_error(
                    cli, "option '--deadline' wants seconds since 1970, not '%s'", optarg);
            gettimeofday(&now, NULL);
            /* Sent as the time left: the clocks of client and server need not agree to the ms. */
            expire_ms = (long long)t * 1000 - ((long long)now.tv_sec * 1000 + now.tv_usec / 1000);
            if (expire_ms < 1)
                expire_ms = 1; /* past already: it expires at once, it is not run */
            break;
        }
        case OPT_AFTER: {
            char *h, *save = NULL;

            /* Split in place: argv's strings are the program's to change. */
            after = optarg;
            nafter = 0;
            for (h = strtok_r(optarg, ",", &save); h != NULL; h = strtok_r(NULL, ",", &save)) {
                if (nafter == sizeof(after_h) / sizeof(after_h[0]))
                    return cli_usage_error(cli, "option '--after' takes at most %zu handles",
                                           sizeof(after_h) / sizeof(after_h[0]));
                after_h[nafter++] = h;
            }
            if (nafter == 0)
                return cli_usage_error(cli, "option '--after' wants job handles");
            break;
        }
        case OPT_AFTER_FAIL:
            if (strcmp(optarg, "fail") == 0)
                after_fail = DSJOB_AFTER_FAIL;
            else if (strcmp(optarg, "cancel") == 0)
                after_fail = DSJOB_AFTER_CANCEL;
            else if (strcmp(optarg, "run") == 0)
                after_fail = DSJOB_AFTER_RUN;
            else
                return cli_usage_error(
                    cli, "option '--after-fail' wants fail, cancel or run, not '%s'", optarg);
            break;
        case OPT_ACCEPT_TIMEOUT:
            if (cli_parse_uint(optarg, 0, 86400000, &accept) < 0)
                return cli_usage_error(
                    cli, "option '--accept-timeout' wants milliseconds (0 to 86400000), not '%s'",
                    optarg);
            accept_set = true;
            break;
        case OPT_FORMAT:
            /* A result is bytes, not rows: say so rather than ignore the option. */
            return cli_usage_error(cli, "option '--format' is for the admin verbs");
        case '?':
        case ':': return cli_getopt_error(cli, ch, argv);
        default:
            r = cli_global_opt(cli, ch, optarg);
            if (r != 0)
                return r < 0 ? cli_getopt_error(cli, '?', argv) : r;
            break;
        }
    }
    if (after_fail >= 0 && after == NULL)
        return cli_usage_error(cli, "option '--after-fail' wants '--after'");
    if (after != NULL && !background && !at)
        return cli_usage_error(cli, "option '--after' wants '-b' (or '--at')");
    if (at && prio_set)
        return cli_usage_error(cli, "option '--at' cannot be combined with '-p' "
                                    "(the server runs scheduled jobs at normal priority)");
    if (optind >= argc)
        return cli_usage_error(cli, "missing FUNCTION");
    if (argc - optind > 2)
        return cli_usage_error(cli, "too many arguments from '%s' on (DATA is one argument)",
                               argv[optind + 2]);
    func = argv[optind];
    if (*func == '\0')
        return cli_usage_error(cli, "empty FUNCTION");
    if (key != NULL) {
        /* The partition key before the default separator; a random rest keeps jobs apart. */
        int n;

        if (unique != NULL) {
            n = snprintf(keyed, sizeof(keyed), "%s:%s", key, unique);
        } else {
            FILE *ur = fopen("/dev/urandom", "rb");
            unsigned char rnd[8] = {0};
            size_t got = ur != NULL ? fread(rnd, 1, sizeof(rnd), ur) : 0;

            if (ur != NULL)
                fclose(ur);
            if (got != sizeof(rnd))
                return cli_usage_error(cli, "option '-k' without '-u': cannot read /dev/urandom");
            n = snprintf(keyed, sizeof(keyed), "%s:%02x%02x%02x%02x%02x%02x%02x%02x", key, rnd[0],
                         rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
        }
        if (n < 0 || (size_t)n >= sizeof(keyed))
            return cli_usage_error(cli, "options '-k' and '-u' make more than %d bytes",
                                   SUBMIT_UNIQUE_MAX);
        unique = keyed;
    }
    r = cli_servers(cli);
    if (r != 0)
        return r;
    if (optind + 1 < argc) {
        data = argv[optind + 1];
        len = strlen(argv[optind + 1]);
    } else {
        buf = read_stdin(&len, &measured);
        if (buf == NULL && errno != EFBIG) {
            cli_err("read standard input: %s", strerror(errno));
            return CLI_FAILED;
        }
        data = buf;
    }
    /* Said here, before any server sees a byte of it. */
    if (len > SUBMIT_DATA_MAX) {
        free(buf);
        return cli_usage_error(cli,
                               "DATA of %s%zu bytes is over the %zu a Gearman packet can carry",
                               measured ? "" : "more than ", len, SUBMIT_DATA_MAX);
    }
    c = dsjob_client_new();
    if (c == NULL) {
        free(buf);
        cli_err("out of memory");
        return CLI_FAILED;
    }
    r = CLI_OK;
    for (i = 0; i < cli->nservers && r == CLI_OK; i++) {
        if (dsjob_client_add_server(c, cli->servers[i]) != DSJOB_OK)
            r = cli_usage_error(cli, "bad server address '%s'", cli->servers[i]);
    }
    if (r == CLI_OK)
        r = cli_tls_client(cli, c);
    if (r == CLI_OK && expire_ms > 0)
        dsjob_client_set_expire_in(c, expire_ms);
    if (r == CLI_OK && after != NULL &&
        dsjob_client_set_after(c, after_h, nafter,
                               after_fail < 0 ? DSJOB_AFTER_FAIL
                                              : (enum dsjob_after_fail)after_fail) != DSJOB_OK) {
        cli_err("%s", dsjob_client_errmsg(c));
        r = CLI_FAILED;
    }
    if (!accept_set)
        accept = cli->timeout_ms ? (unsigned long)cli->timeout_ms : SUBMIT_ACCEPT_MS;
    if (r == CLI_OK) {
        /* A background submit waits for JOB_CREATED only: the accept deadline is its I/O bound. */
        dsjob_client_set_timeout(c, cli->timeout_ms ? cli->timeout_ms : SUBMIT_CONNECT_MS,
                                 background || at ? (int)accept : cli->timeout_ms);
        if (background || at)
            r = submit_bg(cli, c, func, unique, data, len, prio, at, (long long)epoch, (int)accept);
        else
            r = submit_fg(cli, c, func, unique, data, len, prio, (int)accept);
    }
    dsjob_client_free(c);
    free(buf);
    return r;
}
