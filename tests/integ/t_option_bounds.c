/*
 * Every bound of option_bounds[] (server/options.h), held the same way by
 * the three doors to a setting: dsjobd's command line, its --config-file,
 * and dsjob_server_new for a program that embeds the server. At each edge
 * (the least value, the most, one under and one over where the field can
 * hold it) the three take or refuse alike, and a refusal names the option
 * in the same words, the file's with FILE:LINE before them. The names of
 * gearmand's queue tables are held to their length likewise. Before the
 * table, the command line and the library had drifted (dsjobd --check-args
 * took --http-timeout 0, the library any store_batch or table name).
 *
 * The command line and the file are read by options_parse (server/options.c,
 * linked in here as in dsjobd): in a forked child where it must refuse,
 * since it exits then, and in this process where it must take the value,
 * so that what it keeps and options_release misses is still there when
 * LeakSanitizer looks, at this process's exit in an ASan build (a child
 * that took it left with _exit, unchecked; a check at each child's exit
 * would cost that build's run half again). dsjobd --check-args is that
 * call and nothing more (main.c). So
 * that the program itself is held too without a process start per edge (a
 * few hundred, minutes on a loaded machine), every edge of a few bounds, one
 * of each kind (a port, a size with suffixes, an unset -1, seconds written
 * as B,M), and the table names run dsjobd --check-args as well, and must
 * answer as options_parse did.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dsjob/server.h>

#include "lib/peer.h"
#include "server/options.h"
#include "tap.h"

static const char *dsjobd;
static char dsjobd_real[4096];
static char dir[] = "/tmp/t_option_bounds.XXXXXX";
static char conf[sizeof(dir) + 16];

/*
 * run runs dsjobd with args (NULL-terminated, after argv[0]), its stderr's
 * first line into line; returns its exit status, or -1 if it did not exit.
 * With exec false, a forked child runs options_parse on them instead (as
 * dsjobd's main does before anything else), and exits 0 if it returns.
 */
static int
run(bool exec, const char *const *args, char *line, size_t len)
{
    const char *argv[8];
    int fds[2], status, n = 0;
    size_t got = 0;
    ssize_t r;
    pid_t pid;

    argv[n++] = dsjobd;
    while (*args != NULL && n < 7)
        argv[n++] = *args++;
    argv[n] = NULL;
    fflush(NULL); /* the child's exit must not write the TAP lines buffered here again */
    if (pipe(fds) < 0)
        tap_bail("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (!exec) {
            struct dsjob_server_config cfg;
            struct opts o = {0};

            optind = 0; /* glibc: getopt starts again, not from parse_here's state */
            options_parse(n, (char **)argv, &cfg, &o);
            options_release(&o);
            _exit(0); /* no exit handlers: nothing is buffered, and they cost a fork its CPU */
        }
        execv(dsjobd, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    while (got + 1 < len && (r = read(fds[0], line + got, len - 1 - got)) > 0)
        got += (size_t)r;
    line[got] = '\0';
    line[strcspn(line, "\n")] = '\0';
    close(fds[0]);
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/*
 * parse_here runs options_parse on args (as run does, after argv[0]) in
 * this process, where it must return (a refusal would end the test, with
 * its message), then options_release: 0.
 */
static int
parse_here(const char *const *args)
{
    struct dsjob_server_config cfg;
    struct opts o = {0};
    const char *argv[8];
    int n = 0;

    argv[n++] = dsjobd;
    while (*args != NULL && n < 7)
        argv[n++] = *args++;
    argv[n] = NULL;
    fflush(NULL); /* a refusal's exit must not lose the TAP lines buffered here */
    optind = 0;   /* glibc: getopt starts again, not from the last parse's state */
    options_parse(n, (char **)argv, &cfg, &o);
    options_release(&o);
    return 0;
}

/* The text of v as the command line writes b's value. */
static void
value_text(const struct option_bound *b, unsigned long long v, bool minus_one, char *buf,
           size_t len)
{
    char s[32];

    if (minus_one)
        snprintf(s, sizeof(s), "-1");
    else if (b->flags & OPTION_SECONDS)
        option_seconds(v, s, sizeof(s));
    else
        snprintf(s, sizeof(s), "%llu", v);
    /* --retry-backoff B,M: the longest wait is the second number. */
    snprintf(buf, len, "%s%s", b == &option_bounds[OPTION_RETRY_BACKOFF_MAX] ? "0," : "", s);
}

/*
 * api tries v (or -1) in b's field of an otherwise default config: 1 if
 * dsjob_server_new takes it, 0 if it refuses it (why in err), -1 if the
 * field cannot hold v.
 */
static int
api(const struct option_bound *b, unsigned long long v, bool minus_one, char *err, size_t len)
{
    struct dsjob_server_config cfg;
    struct dsjob_server *srv;
    unsigned long long most = b->kind == OPTION_UINT  ? UINT_MAX
                              : b->kind == OPTION_INT ? INT_MAX
                                                      : SIZE_MAX;

    if (b->kind == OPTION_NOFIELD || (!minus_one && v > most))
        return -1;
    dsjob_server_config_init(&cfg);
    cfg.log_file = "none";
    /* Room for any packet size, and the least packet for any output buffer. */
    cfg.max_packet_size = OPTION_MIN_PACKET;
    cfg.max_output_buffer = SIZE_MAX;
    option_store(&cfg, b, minus_one ? (unsigned long long)-1 : v);
    err[0] = '\0';
    srv = dsjob_server_new(&cfg, err, len);
    dsjob_server_free(srv);
    return srv != NULL;
}

/*
 * door tries --name=text on the command line and name = text in a config
 * file (written already), through dsjobd --check-args when exec is true,
 * else through options_parse: taken when want is true, else refused with
 * expect (the file's with FILE:LINE before it).
 */
static void
door(bool exec, const char *name, const char *text, bool want, const char *expect)
{
    const char *who = exec ? "dsjobd --check-args" : "options_parse";
    char arg[200], line[512], full[600];
    const char *args[4];
    int rc;

    snprintf(arg, sizeof(arg), "--%s=%s", name, text);
    args[0] = "--check-args";
    args[1] = arg;
    args[2] = NULL;
    rc = !exec && want ? parse_here(args) : run(exec, args, line, sizeof(line));
    tap_is_int(rc, want ? 0 : 2, "%s, command line: %s is %s", who, arg,
               want ? "taken" : "refused");
    if (!want) {
        snprintf(full, sizeof(full), "dsjobd: %s", expect);
        tap_is_str(line, full, "%s, command line: %s says why as the library does", who, arg);
    }

    args[1] = "--config-file";
    args[2] = conf;
    args[3] = NULL;
    rc = !exec && want ? parse_here(args) : run(exec, args, line, sizeof(line));
    tap_is_int(rc, want ? 0 : 2, "%s, config file: %s = %s is %s", who, name, text,
               want ? "taken" : "refused");
    if (!want) {
        snprintf(full, sizeof(full), "dsjobd: %s:2: %s", conf, expect);
        tap_is_str(line, full, "%s, config file: %s = %s says why, with its line", who, name, text);
    }
}

/*
 * doors tries --name=text on dsjobd's command line and name = text in a
 * config file, through options_parse and, when exec is true, through
 * dsjobd --check-args too.
 */
static void
doors(const char *name, const char *text, bool want, const char *expect, bool exec)
{
    FILE *fp;

    fp = fopen(conf, "w");
    if (fp == NULL)
        tap_bail("%s: %s", conf, strerror(errno));
    fprintf(fp, "# bounds\n%s = %s\n", name, text);
    fclose(fp);
    door(false, name, text, want, expect);
    if (exec)
        door(true, name, text, want, expect);
}

/*
 * table_edge tries a name of gearmand's queue table (--libsqlite3-table,
 * --libpq-table) of len bytes through the three doors, and dsjobd.
 */
static void
table_edge(const char *name, size_t offset, size_t len, bool want)
{
    struct dsjob_server_config cfg;
    struct dsjob_server *srv;
    char text[OPTION_MAX_TABLE + 2], err[256];

    memset(text, 'q', len);
    text[len] = '\0';
    dsjob_server_config_init(&cfg);
    cfg.log_file = "none";
    *(const char **)(void *)((char *)&cfg + offset) = text;
    err[0] = '\0';
    srv = dsjob_server_new(&cfg, err, sizeof(err));
    dsjob_server_free(srv);
    tap_is_int(srv != NULL, want, "API: a %s of %zu bytes is %s%s%s", name, len,
               want ? "taken" : "refused", srv ? "" : ": ", srv ? "" : err);
    doors(name, text, want, err, true);
}

/* One bound of each kind, run through dsjobd --check-args too. */
static bool
exec_sample(const struct option_bound *b)
{
    return b == &option_bounds[OPTION_PORT] || b == &option_bounds[OPTION_KEEPALIVE_IDLE] ||
           b == &option_bounds[OPTION_MAX_PACKET] || b == &option_bounds[OPTION_RETRY_BACKOFF_MAX];
}

/*
 * edge checks one value of b: taken by all three doors when want is true,
 * else refused by all with the same words. cli is false where the command
 * line has no way to write the value (-1 of a port). The edges of the
 * bounds in exec_sample that refuse, and their most, go through dsjobd too.
 */
static void
edge(const struct option_bound *b, unsigned long long v, bool minus_one, bool want, bool cli)
{
    char text[64], err[256], expect[300];
    int took;

    value_text(b, v, minus_one, text, sizeof(text));
    took = api(b, v, minus_one, err, sizeof(err));
    if (took >= 0) {
        tap_is_int(took, want, "API: %s %s is %s%s%s", b->name, text, want ? "taken" : "refused",
                   took ? "" : ": ", took ? "" : err);
    }
    if (!cli)
        return;
    /* The expected refusal: the library's words, or the table's where the library has none. */
    if (took == 0) {
        snprintf(expect, sizeof(expect), "%s", err);
    } else {
        const char *shown = strchr(text, ',') ? strchr(text, ',') + 1 : text;

        option_range_error(b, shown, expect, sizeof(expect));
    }

    doors(b->name, text, want, expect, exec_sample(b) && (!want || v == b->max));
}

int
main(void)
{
    const struct option_bound *b;

    dsjobd = getenv("DSJOBD");
    if (dsjobd == NULL || access(dsjobd, X_OK) != 0)
        tap_skip_all("DSJOBD is not set to dsjobd");
    /* The program itself, not libtool's wrapper: it is run some thirty times. */
    if (peer_unwrap_libtool(dsjobd, dsjobd_real, sizeof(dsjobd_real)))
        dsjobd = dsjobd_real;
    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    snprintf(conf, sizeof(conf), "%s/b.conf", dir);

    for (b = option_bounds; b < option_bounds + OPTION_NBOUNDS; b++) {
        edge(b, b->min, false, true, true);
        edge(b, b->max, false, true, true);
        if (b->min > 0)
            edge(b, b->min - 1, false, false, true);
        if (b->max < ULLONG_MAX)
            edge(b, b->max + 1, false, false, true);
        if (b->flags & OPTION_UNSET) /* -1: the system's, through every door */
            edge(b, 0, true, true, true);
        if (b->flags & OPTION_OFF_API) /* -1: off, in the library only */
            edge(b, 0, true, true, false);
    }
    table_edge("libsqlite3-table", offsetof(struct dsjob_server_config, libsqlite3_table),
               OPTION_MAX_TABLE, true);
    table_edge("libsqlite3-table", offsetof(struct dsjob_server_config, libsqlite3_table),
               OPTION_MAX_TABLE + 1, false);
    table_edge("libpq-table", offsetof(struct dsjob_server_config, libpq_table), 0, false);
    table_edge("libpq-table", offsetof(struct dsjob_server_config, libpq_table),
               OPTION_MAX_TABLE + 1, false);
    unlink(conf);
    rmdir(dir);
    return tap_done();
}
