/*
 * dsjob submit: one job. A background job (-b, or --at) goes through the
 * blocking libdsjobclient calls and its handle is printed. A foreground
 * job goes through a one-task task set, whose callbacks stream WORK_DATA
 * to stdout as it arrives, copy warnings to stderr and feed the progress
 * bar, and whose "created" callback tells a job that was accepted and then
 * lost (exit 1) from a job that no server would take (exit 3). DATA comes
 * from the command line or else from stdin, read whole and binary safe.
 */
#include "config.h"
#include "dsjob.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/client.h>

#include "progress.h"

#define SUBMIT_CONNECT_MS 5000 /* connect timeout without -t */
#define SUBMIT_UNIQUE_MAX 64   /* longest unique key libdsjobclient (and gearmand) takes */

static const char submit_usage[] =
    "usage: dsjob submit [-s SERVER]... [-t MS] [-b] [-p high|normal|low] [-u UNIQUE]\n"
    "                    [--at EPOCH] FUNCTION [DATA]\n"
    "  -b, --background     do not wait: print the job handle\n"
    "  -p, --priority PRIO  high, normal (default) or low\n"
    "  -u, --unique KEY     unique key: jobs with the same key are coalesced\n"
    "                       ('-' coalesces on the payload)\n"
    "      --at EPOCH       run at that time (seconds since 1970; background)\n"
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

/* Reads all of stdin into a malloc'd buffer. Returns NULL (with errno) on a read error. */
static char *
read_stdin(size_t *lenp)
{
    size_t len = 0, cap = 65536;
    char *buf = cli_xmalloc(cap);

    for (;;) {
        ssize_t n;

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

static int
submit_fg(struct cli *cli, struct dsjob_client *c, const char *func, const char *unique,
          const void *data, size_t len, enum dsjob_priority prio)
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
    err = dsjob_taskset_run(ts, cli->timeout_ms);
    if (st.use_bar)
        progress_clear(&st.bar);
    if (err == DSJOB_ERR_TIMEOUT) {
        if (st.created)
            cli_err("job %s of '%s' did not end within %d ms", dsjob_task_handle(t), func,
                    cli->timeout_ms);
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
          const void *data, size_t len, enum dsjob_priority prio, bool at, long long epoch)
{
    char handle[DSJOB_HANDLE_MAX];
    int err;

    (void)cli;
    if (at)
        err = dsjob_client_submit_epoch(c, func, unique, data, len, epoch, handle, sizeof(handle));
    else
        err = dsjob_client_submit_bg(c, func, unique, data, len, prio, handle, sizeof(handle));
    if (err != DSJOB_OK) {
        if (exit_for(err, false) == CLI_UNREACHABLE)
            cli_err("no server reachable: %s", dsjob_client_errmsg(c));
        else
            cli_err("submit to '%s': %s", func,
                    dsjob_client_errmsg(c)[0] != '\0' ? dsjob_client_errmsg(c)
                                                      : dsjob_strerror(err));
        return exit_for(err, false);
    }
    printf("%s\n", handle);
    if (fflush(stdout) != 0) {
        cli_err("write to standard output: %s", strerror(errno));
        return CLI_FAILED;
    }
    return CLI_OK;
}

int
submit_main(struct cli *cli, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_GLOBAL_LONG,
        {"background", no_argument, NULL, 'b'},
        {"priority", required_argument, NULL, 'p'},
        {"unique", required_argument, NULL, 'u'},
        {"at", required_argument, NULL, OPT_AT},
        {NULL, 0, NULL, 0},
    };
    enum dsjob_priority prio = DSJOB_PRIO_NORMAL;
    const char *unique = NULL, *func;
    bool background = false, at = false, prio_set = false;
    unsigned long epoch = 0;
    struct dsjob_client *c;
    char *buf = NULL;
    const void *data;
    size_t len, i;
    int ch, r;

    while ((ch = getopt_long(argc, argv, ":" CLI_GLOBAL_SHORT "bp:u:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': fputs(submit_usage, stdout); return CLI_OK;
        case 'b': background = true; break;
        case 'p':
            prio_set = true;
            if (strcmp(optarg, "high") == 0)
                prio = DSJOB_PRIO_HIGH;
            else if (strcmp(optarg, "normal") == 0)
                prio = DSJOB_PRIO_NORMAL;
            else if (strcmp(optarg, "low") == 0)
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
        case OPT_AT:
            if (cli_parse_uint(optarg, 0, 0x7fffffffffffffffUL, &epoch) < 0)
                return cli_usage_error(cli, "option '--at' wants seconds since 1970, not '%s'",
                                       optarg);
            at = true;
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
    r = cli_servers(cli);
    if (r != 0)
        return r;
    if (optind + 1 < argc) {
        data = argv[optind + 1];
        len = strlen(argv[optind + 1]);
    } else {
        buf = read_stdin(&len);
        if (buf == NULL) {
            cli_err("read standard input: %s", strerror(errno));
            return CLI_FAILED;
        }
        data = buf;
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
    if (r == CLI_OK) {
        dsjob_client_set_timeout(c, cli->timeout_ms ? cli->timeout_ms : SUBMIT_CONNECT_MS,
                                 cli->timeout_ms);
        if (background || at)
            r = submit_bg(cli, c, func, unique, data, len, prio, at, (long long)epoch);
        else
            r = submit_fg(cli, c, func, unique, data, len, prio);
    }
    dsjob_client_free(c);
    free(buf);
    return r;
}
