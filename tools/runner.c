/*
 * dsjob worker: do jobs by running a command for each. The command is
 * started with posix_spawnp (no shell) in a process group of its own, with
 * the payload on its stdin, DSJOB_FUNCTION, DSJOB_HANDLE and DSJOB_UNIQUE in
 * its environment and a pipe on fd 3 for "N/D" status lines; one poll()
 * loop feeds stdin and drains stdout, stderr and fd 3 together, so neither
 * a big payload nor a big result can deadlock. Exit status 0 completes the
 * job with the bytes of stdout, or with --stream sends stdout as WORK_DATA
 * lines or chunks as they come and completes it empty. stderr is copied to
 * ours as it comes (with --warnings also sent as WORK_WARNING lines), and
 * its last lines are kept: a failure sends them with the exit status, as
 * WORK_WARNING before WORK_FAIL, or with --exceptions as WORK_EXCEPTION.
 * -c N runs N threads, each with a struct dsjob_worker of its own (a
 * handle belongs to one thread). SIGINT or SIGTERM stops grabbing and lets
 * the running commands finish; a second one sends them SIGTERM.
 */
#include "config.h"
#include "dsjob.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/worker.h>

#define RUNNER_MAX_THREADS 1024
#define RUNNER_POLL_MS 200     /* how often a running job looks at the hurry flag */
#define RUNNER_STATUS_LINE 256 /* longest fd 3 line kept; longer ones are dropped */
#define RUNNER_CHUNK 65536
#define RUNNER_IDLE_MS 1000 /* wait for a job this long between looks at errmsg */
#define RUNNER_KILL_MS 5000 /* after a hurried SIGTERM, SIGKILL the command's group */

#define RUNNER_LINE_MAX RUNNER_CHUNK /* a longer stdout or stderr line goes out in pieces */
#define RUNNER_CHUNK_MAX 1048576     /* the largest --chunk */
#define RUNNER_TAIL_BYTES 1024       /* how much of the end of stderr a failure reports */
#define RUNNER_TAIL_LINES 4          /* and at most this many lines of it */

extern char **environ;

/* The worker verb's state, shared by its threads and the signal handler. */
struct runner {
    char **argv;             /* COMMAND [ARG]... (borrowed from main's argv) */
    struct dsjob_worker **w; /* one worker per thread (owned) */
    int n;                   /* entries in w: -c */
    atomic_int stopping;     /* a first signal came: dsjob_worker_stop was called */
    atomic_int hurry;        /* a second signal came: terminate the running commands */
    bool stream;             /* --stream: stdout goes out as WORK_DATA as it comes */
    size_t chunk;            /* --chunk: WORK_DATA of this many bytes; 0: one per line */
    bool warnings;           /* --warnings: stderr lines go out as WORK_WARNING */
    bool exceptions;         /* --exceptions: a failure is WORK_EXCEPTION, not WARNING + FAIL */
};

/* The handler needs it: there is only one worker verb per process. */
static struct runner *volatile runner_signalled;

static void
on_signal(int sig)
{
    struct runner *r = runner_signalled;
    int i;

    (void)sig;
    if (r == NULL)
        return;
    if (atomic_exchange(&r->stopping, 1)) {
        atomic_store(&r->hurry, 1);
        return;
    }
    for (i = 0; i < r->n; i++)
        dsjob_worker_stop(r->w[i]);
}

/* What sends one piece of a stream for a job: dsjob_job_data or dsjob_job_warning. */
typedef int (*piece_fn)(struct dsjob_job *job, const void *data, size_t len);

/*
 * A stream cut into packets as it comes: after each newline (lines) and
 * whenever cap bytes are waiting, so memory stays bounded.
 */
struct cutter {
    char *buf;     /* the bytes not sent yet (malloc'd, cap bytes) */
    size_t len;    /* bytes in buf */
    size_t cap;    /* a full buf is sent as it is */
    bool lines;    /* also send after each '\n' (kept in the piece) */
    piece_fn send; /* how a piece goes out */
};

/* What one running command has produced so far. */
struct run {
    char *out;                     /* stdout, without --stream (malloc'd) */
    size_t out_len;                /* bytes in out */
    size_t out_cap;                /* size of out */
    struct cutter data;            /* stdout, with --stream (buf NULL without) */
    struct cutter warn;            /* stderr, with --warnings (buf NULL without) */
    int err_fd;                    /* stderr's read end until its end of file, else -1 */
    char tail[RUNNER_TAIL_BYTES];  /* the last bytes of stderr */
    size_t tail_len;               /* bytes in tail */
    bool tail_cut;                 /* bytes before tail were dropped */
    char line[RUNNER_STATUS_LINE]; /* the fd 3 line being read */
    size_t line_len;               /* bytes in line */
    bool line_long;                /* the current line overflowed: drop it */
};

/*
 * Builds the command's environment: ours without any DSJOB_FUNCTION,
 * DSJOB_HANDLE or DSJOB_UNIQUE, then those three for this job. Caller
 * frees the array and its last three strings.
 */
static char **
job_env(struct dsjob_job *job)
{
    static const char *const names[3] = {"DSJOB_FUNCTION=", "DSJOB_HANDLE=", "DSJOB_UNIQUE="};
    const char *vals[3] = {dsjob_job_function(job), dsjob_job_handle(job), dsjob_job_unique(job)};
    size_t n = 0, k = 0, i, j;
    char **env;

    while (environ[n] != NULL)
        n++;
    env = cli_xmalloc((n + 4) * sizeof(*env));
    for (i = 0; i < n; i++) {
        bool ours = false;

        for (j = 0; j < 3; j++)
            ours = ours || strncmp(environ[i], names[j], strlen(names[j])) == 0;
        if (!ours)
            env[k++] = environ[i];
    }
    for (j = 0; j < 3; j++) {
        size_t nl = strlen(names[j]), vl = strlen(vals[j]);
        char *s = cli_xmalloc(nl + vl + 1);

        memcpy(s, names[j], nl);
        memcpy(s + nl, vals[j], vl + 1);
        env[k++] = s;
    }
    env[k] = NULL;
    return env;
}

static void
env_free(char **env)
{
    size_t n = 0;

    while (env[n] != NULL)
        n++;
    /* The last three are ours; the rest are borrowed from environ. */
    free(env[n - 1]);
    free(env[n - 2]);
    free(env[n - 3]);
    free(env);
}

/* Starts the command with fds 0, 1, 2 and 3 on the given pipe ends. Returns 0 or an errno. */
static int
spawn_command(struct runner *r, char **env, const int fds[4], pid_t *pid)
{
    int i;

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, dfl;
    int err;

    /* The pipe ends are all above 3 (runner_main makes sure), so dup2 clears close-on-exec. */
    posix_spawn_file_actions_init(&fa);
    for (i = 0; i < 4; i++)
        posix_spawn_file_actions_adddup2(&fa, fds[i], i);
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    /* A group of its own: a terminal's ^C stops dsjob gracefully, not the job. */
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    err = posix_spawnp(pid, r->argv[0], &fa, &attr, r->argv, env);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return err;
}

/* Sends one complete fd 3 line as WORK_STATUS, or warns about it. */
static void
status_line(struct dsjob_job *job, const char *line, size_t len)
{
    char buf[RUNNER_STATUS_LINE + 1];
    unsigned long num, den;
    char *slash;

    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    while (len > 0 && (line[0] == ' ' || line[0] == '\t')) {
        line++;
        len--;
    }
    if (len == 0)
        return;
    memcpy(buf, line, len);
    buf[len] = '\0';
    slash = strchr(buf, '/');
    if (slash != NULL)
        *slash = '\0';
    if (slash == NULL || cli_parse_uint(buf, 0, 0xffffffffUL, &num) < 0 ||
        cli_parse_uint(slash + 1, 0, 0xffffffffUL, &den) < 0) {
        if (slash != NULL)
            *slash = '/';
        cli_err("job %s: ignored a status line on fd 3 that is not N/D: '%s'",
                dsjob_job_handle(job), buf);
        return;
    }
    dsjob_job_status(job, (unsigned)num, (unsigned)den);
}

static void
status_bytes(struct dsjob_job *job, struct run *run, const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (run->line_long)
                cli_err("job %s: ignored a status line longer than %d bytes on fd 3",
                        dsjob_job_handle(job), RUNNER_STATUS_LINE);
            else
                status_line(job, run->line, run->line_len);
            run->line_len = 0;
            run->line_long = false;
        } else if (run->line_len < sizeof(run->line)) {
            run->line[run->line_len++] = p[i];
        } else {
            run->line_long = true;
        }
    }
}

static void
out_bytes(struct run *run, const char *p, size_t n)
{
    if (run->out_len + n > run->out_cap) {
        size_t cap = run->out_cap ? run->out_cap : RUNNER_CHUNK;
        char *nb;

        while (cap < run->out_len + n)
            cap *= 2;
        nb = realloc(run->out, cap);
        if (nb == NULL) {
            cli_err("out of memory");
            exit(CLI_FAILED);
        }
        run->out = nb;
        run->out_cap = cap;
    }
    memcpy(run->out + run->out_len, p, n);
    run->out_len += n;
}

/* Sends what c holds, if anything, as one piece. */
static void
cutter_flush(struct cutter *c, struct dsjob_job *job)
{
    /* A send that fails means the connection is gone: the server requeues the job anyway. */
    if (c->len > 0)
        c->send(job, c->buf, c->len);
    c->len = 0;
}

/* Adds n bytes to c, sending each piece as soon as it is whole. */
static void
cutter_feed(struct cutter *c, struct dsjob_job *job, const char *p, size_t n)
{
    while (n > 0) {
        size_t take = n < c->cap - c->len ? n : c->cap - c->len;
        const char *nl = c->lines ? memchr(p, '\n', take) : NULL;

        if (nl != NULL)
            take = (size_t)(nl - p) + 1;
        memcpy(c->buf + c->len, p, take);
        c->len += take;
        p += take;
        n -= take;
        if (nl != NULL || c->len == c->cap)
            cutter_flush(c, job);
    }
}

/* Sets c up to cut lines (chunk 0) or chunks, sent by fn. Returns -1 when out of memory. */
static int
cutter_init(struct cutter *c, size_t chunk, piece_fn fn)
{
    c->cap = chunk > 0 ? chunk : RUNNER_LINE_MAX;
    c->lines = chunk == 0;
    c->len = 0;
    c->send = fn;
    c->buf = malloc(c->cap);
    return c->buf != NULL ? 0 : -1;
}

/* What stderr gave: copied to ours as it is, kept in the tail, sent with --warnings. */
static void
err_bytes(struct dsjob_job *job, struct run *run, const char *p, size_t n)
{
    size_t keep = n < RUNNER_TAIL_BYTES ? n : RUNNER_TAIL_BYTES;

    /* The operator reads it as before; a closed stderr of ours is no reason to fail the job. */
    (void)cli_write_all(2, p, n);
    if (run->warn.buf != NULL)
        cutter_feed(&run->warn, job, p, n);
    if (run->tail_len + keep > RUNNER_TAIL_BYTES) {
        size_t drop = run->tail_len + keep - RUNNER_TAIL_BYTES;

        memmove(run->tail, run->tail + drop, run->tail_len - drop);
        run->tail_len -= drop;
        run->tail_cut = true;
    }
    if (keep < n)
        run->tail_cut = true;
    memcpy(run->tail + run->tail_len, p + n - keep, keep);
    run->tail_len += keep;
}

/*
 * One read of stderr. Returns 1 after some bytes, 0 when there are none
 * now, -1 once it is at its end (run->err_fd is then closed).
 */
static int
err_read(struct dsjob_job *job, struct run *run, char *buf, size_t cap)
{
    ssize_t n;

    do
        n = read(run->err_fd, buf, cap);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        err_bytes(job, run, buf, (size_t)n);
        return 1;
    }
    if (n < 0 && errno == EAGAIN)
        return 0;
    close(run->err_fd);
    run->err_fd = -1;
    if (run->warn.buf != NULL)
        cutter_flush(&run->warn, job);
    return -1;
}

/*
 * Feeds the payload to fd in and reads fds out and st until both reach
 * end of file, and stderr (run->err_fd) meanwhile. A command that exits
 * without reading all its input is no error here (EPIPE just ends the
 * feeding); its exit status decides.
 */
static void
pump(struct runner *r, struct dsjob_job *job, struct run *run, pid_t pid, int in, int out, int st)
{
    size_t len, off = 0;
    const char *payload = dsjob_job_payload(job, &len);
    char buf[RUNNER_CHUNK];
    bool killed = false;

    if (len == 0) {
        close(in);
        in = -1;
    }
    while (out >= 0 || st >= 0) {
        struct pollfd pfd[4];
        int np = 0, k;

        if (in >= 0)
            pfd[np++] = (struct pollfd){.fd = in, .events = POLLOUT};
        if (out >= 0)
            pfd[np++] = (struct pollfd){.fd = out, .events = POLLIN};
        if (st >= 0)
            pfd[np++] = (struct pollfd){.fd = st, .events = POLLIN};
        if (run->err_fd >= 0)
            pfd[np++] = (struct pollfd){.fd = run->err_fd, .events = POLLIN};
        if (poll(pfd, (nfds_t)np, RUNNER_POLL_MS) < 0 && errno != EINTR) {
            cli_err("poll: %s", strerror(errno));
            break;
        }
        if (atomic_load(&r->hurry) && !killed) {
            kill(-pid, SIGTERM);
            killed = true;
        }
        for (k = 0; k < np; k++) {
            ssize_t n;

            if (pfd[k].revents == 0)
                continue;
            if (pfd[k].fd == in) {
                n = write(in, payload + off, len - off);
                if (n > 0)
                    off += (size_t)n;
                if ((n < 0 && errno != EAGAIN && errno != EINTR) || off == len) {
                    close(in);
                    in = -1;
                }
                continue;
            }
            if (pfd[k].fd == run->err_fd) {
                err_read(job, run, buf, sizeof(buf));
                continue;
            }
            n = read(pfd[k].fd, buf, sizeof(buf));
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (n <= 0) {
                if (pfd[k].fd == out) {
                    out = -1;
                    if (run->data.buf != NULL)
                        cutter_flush(&run->data, job); /* the unterminated last line */
                } else {
                    st = -1;
                }
                close(pfd[k].fd);
                continue;
            }
            if (pfd[k].fd == out && run->data.buf != NULL)
                cutter_feed(&run->data, job, buf, (size_t)n);
            else if (pfd[k].fd == out)
                out_bytes(run, buf, (size_t)n);
            else
                status_bytes(job, run, buf, (size_t)n);
        }
    }
    if (run->line_len > 0 && !run->line_long)
        status_line(job, run->line, run->line_len);
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (st >= 0)
        close(st);
}

/* A monotonic clock in milliseconds. */
static long
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Waits for the command to exit, reading its stderr meanwhile, then what
 * is left of it in the pipe (a process the command left behind may hold
 * it open: it is not waited for). A command may close stdout and fd 3 and
 * go on running, so the wait polls: a second signal (hurry) still reaches
 * its process group, with SIGKILL RUNNER_KILL_MS after the SIGTERM.
 * Returns 0 with *status set, or -1 after reporting a waitpid error.
 */
static int
wait_command(struct runner *r, struct dsjob_job *job, struct run *run, pid_t pid, int *status)
{
    long start = now_ms(), waited_ms = 0, kill_at = -1; /* kill_at: when to SIGKILL, -1 not due */
    bool termed = false;
    char buf[RUNNER_CHUNK];
    int i;

    for (;;) {
        pid_t got = waitpid(pid, status, WNOHANG);
        int step;

        if (got == pid)
            break;
        if (got < 0 && errno != EINTR) {
            cli_err("job %s: waitpid: %s", dsjob_job_handle(job), strerror(errno));
            return -1;
        }
        if (!termed && atomic_load(&r->hurry)) {
            kill(-pid, SIGTERM);
            termed = true;
            kill_at = waited_ms + RUNNER_KILL_MS;
        } else if (kill_at >= 0 && waited_ms >= kill_at) {
            kill(-pid, SIGKILL);
            kill_at = -1;
        }
        /* Short sleeps first: most commands are gone by the time pump returns. */
        step = waited_ms < 100 ? 1 : 20;
        if (run->err_fd >= 0) {
            struct pollfd pfd = {.fd = run->err_fd, .events = POLLIN};

            if (poll(&pfd, 1, step) > 0)
                err_read(job, run, buf, sizeof(buf));
        } else {
            struct timespec ts = {0, step * 1000000L};

            nanosleep(&ts, NULL);
        }
        waited_ms = now_ms() - start;
    }
    /* What it wrote before it exited; a pipe holds at most a few reads' worth. */
    i = 0;
    while (run->err_fd >= 0 && i++ < 16 && err_read(job, run, buf, sizeof(buf)) > 0)
        continue;
    if (run->err_fd >= 0) {
        close(run->err_fd);
        run->err_fd = -1;
        if (run->warn.buf != NULL)
            cutter_flush(&run->warn, job);
    }
    return 0;
}

static int
set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/*
 * Writes into buf (cap bytes) why the command failed: "'CMD' exited with
 * status N" or "'CMD' was killed by signal N", then, with tail, a newline
 * and the last RUNNER_TAIL_LINES lines of its stderr within the last
 * RUNNER_TAIL_BYTES ("..." first when that cut a line). Returns the length.
 */
static size_t
failure_text(const struct runner *r, const struct run *run, int status, bool tail, char *buf,
             size_t cap)
{
    size_t n, end = run->tail_len, from;
    int lines = 0, w;

    if (WIFSIGNALED(status))
        w = snprintf(buf, cap, "'%s' was killed by signal %d", r->argv[0], WTERMSIG(status));
    else
        w = snprintf(buf, cap, "'%s' exited with status %d", r->argv[0], WEXITSTATUS(status));
    n = w < 0 ? 0 : (size_t)w < cap ? (size_t)w : cap - 1;
    while (end > 0 && (run->tail[end - 1] == '\n' || run->tail[end - 1] == '\r'))
        end--;
    if (!tail || end == 0)
        return n;
    for (from = end; from > 0; from--) {
        if (run->tail[from - 1] == '\n' && ++lines == RUNNER_TAIL_LINES)
            break;
    }
    w = snprintf(buf + n, cap - n, "\n%s%.*s", from == 0 && run->tail_cut ? "..." : "",
                 (int)(end - from), run->tail + from);
    n += w < 0 ? 0 : (size_t)w < cap - n ? (size_t)w : cap - n - 1;
    return n;
}

/* Ends a job whose command failed: WORK_EXCEPTION, or WORK_WARNING and WORK_FAIL. */
static int
job_failed(struct runner *r, struct dsjob_job *job, const struct run *run, int status)
{
    char text[RUNNER_TAIL_BYTES + PATH_MAX + 64];
    size_t n;

    if (WIFSIGNALED(status))
        cli_err("job %s: '%s' was killed by signal %d", dsjob_job_handle(job), r->argv[0],
                WTERMSIG(status));
    else
        cli_err("job %s: '%s' exited with status %d", dsjob_job_handle(job), r->argv[0],
                WEXITSTATUS(status));
    /* With --warnings the client has had stderr line by line already. */
    n = failure_text(r, run, status, r->exceptions || !r->warnings, text, sizeof(text));
    if (!r->exceptions) {
        /* A line, as those of --warnings are (text has room for the newline). */
        text[n++] = '\n';
        dsjob_job_warning(job, text, n);
        return DSJOB_WORK_FAIL;
    }
    if (dsjob_job_set_result(job, text, n) != DSJOB_OK) {
        cli_err("job %s: out of memory", dsjob_job_handle(job));
        return DSJOB_WORK_FAIL;
    }
    return DSJOB_WORK_EXCEPTION;
}

/* The job callback: runs the command for one job. */
static int
run_job(struct dsjob_job *job, void *user)
{
    struct runner *r = user;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1}, st[2] = {-1, -1};
    struct run run;
    char **env;
    pid_t pid;
    int err, status, ret = DSJOB_WORK_FAIL;

    memset(&run, 0, sizeof(run));
    run.err_fd = -1;
    if ((r->stream && cutter_init(&run.data, r->chunk, dsjob_job_data) < 0) ||
        (r->warnings && cutter_init(&run.warn, 0, dsjob_job_warning) < 0)) {
        cli_err("job %s: out of memory", dsjob_job_handle(job));
        goto out_pipes;
    }
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0 ||
        pipe2(st, O_CLOEXEC) < 0) {
        cli_err("job %s: pipe: %s", dsjob_job_handle(job), strerror(errno));
        goto out_pipes;
    }
    env = job_env(job);
    err = spawn_command(r, env, (const int[4]){in[0], out[1], er[1], st[1]}, &pid);
    env_free(env);
    if (err != 0) {
        /* Not the job's fault: hand it back, so that it runs once the command is there. */
        cli_err("job %s: cannot run '%s': %s; giving the job back", dsjob_job_handle(job),
                r->argv[0], strerror(err));
        ret = DSJOB_WORK_GIVE_BACK;
        goto out_pipes;
    }
    close(in[0]);
    close(out[1]);
    close(er[1]);
    close(st[1]);
    set_nonblock(in[1]);
    set_nonblock(out[0]);
    set_nonblock(er[0]);
    set_nonblock(st[0]);
    run.err_fd = er[0];
    pump(r, job, &run, pid, in[1], out[0], st[0]);
    in[0] = in[1] = out[0] = out[1] = er[0] = er[1] = st[0] = st[1] = -1;
    if (wait_command(r, job, &run, pid, &status) < 0)
        goto out_pipes;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        /* With --stream every byte went out as WORK_DATA: the result repeats none. */
        if (dsjob_job_set_result(job, run.out ? run.out : "", run.out_len) == DSJOB_OK)
            ret = DSJOB_WORK_COMPLETE;
        else
            cli_err("job %s: out of memory", dsjob_job_handle(job));
    } else {
        ret = job_failed(r, job, &run, status);
    }
out_pipes:
    for (err = 0; err < 2; err++) {
        if (in[err] >= 0)
            close(in[err]);
        if (out[err] >= 0)
            close(out[err]);
        if (er[err] >= 0)
            close(er[err]);
        if (st[err] >= 0)
            close(st[err]);
    }
    if (run.err_fd >= 0)
        close(run.err_fd);
    free(run.out);
    free(run.data.buf);
    free(run.warn.buf);
    return ret;
}

/* What a thread runs: one worker until it is stopped. */
struct thread_arg {
    struct runner *r; /* the shared state */
    int i;            /* which worker */
    int err;          /* what dsjob_worker_run returned */
};

static void *
thread_main(void *p)
{
    struct thread_arg *a = p;
    struct dsjob_worker *w = a->r->w[a->i];
    char said[256] = "";

    /*
     * dsjob_worker_work, not _run: between jobs, thread 0 says (once per
     * new reason) why a server cannot be reached, since the library keeps
     * retrying it quietly and a worker with no server would look idle.
     */
    for (;;) {
        const char *why;

        a->err = dsjob_worker_work(w, RUNNER_IDLE_MS);
        if (a->err == DSJOB_ERR_STATE && atomic_load(&a->r->stopping)) {
            a->err = DSJOB_OK;
            break;
        }
        if (a->err != DSJOB_OK && a->err != DSJOB_ERR_TIMEOUT)
            break;
        why = dsjob_worker_errmsg(w);
        if (a->i == 0 && why[0] != '\0' && strncmp(why, said, sizeof(said) - 1) != 0) {
            cli_err("worker: %s (retrying)", why);
            snprintf(said, sizeof(said), "%s", why);
        } else if (a->err == DSJOB_OK) {
            said[0] = '\0'; /* a job ran: a server is back, a new failure is news */
        }
    }
    if (a->err != DSJOB_OK) {
        int i;

        /* One failed: the others stop too, as dsjob_worker_run does within one handle. */
        for (i = 0; i < a->r->n; i++)
            dsjob_worker_stop(a->r->w[i]);
    }
    return NULL;
}

static const char runner_usage[] =
    "usage: dsjob worker [-s SERVER]... [-t MS] [-c N] [-i ID] [--stream] [--chunk BYTES]\n"
    "                    [--warnings] [--exceptions] -f FUNCTION [-f FUNCTION]...\n"
    "                    -- COMMAND [ARG]...\n"
    "  -f, --function NAME  a function to do (repeatable)\n"
    "  -c, --concurrency N  run up to N commands at once (default 1)\n"
    "  -i, --id ID          the worker id the server's 'workers' list shows\n"
    "      --stream         send each line of stdout as WORK_DATA as it comes;\n"
    "                       the job then completes with an empty result\n"
    "      --chunk BYTES    with --stream, pieces of BYTES instead of lines\n"
    "      --warnings       send each line of stderr as WORK_WARNING\n"
    "      --exceptions     end a failed job with WORK_EXCEPTION, not WORK_FAIL\n"
    "  -s, --server ADDR    host[:port] (4730) or /unix/socket, repeatable\n"
    "  -t, --timeout MS     connect and I/O timeout\n"
    "COMMAND gets the payload on stdin, DSJOB_FUNCTION, DSJOB_HANDLE and DSJOB_UNIQUE\n"
    "in its environment, and may write N/D lines to fd 3; its stdout is the result,\n"
    "its stderr is copied to dsjob's. A non-zero exit fails the job, with the status\n"
    "and the end of stderr sent as a WORK_WARNING (or as the exception's text).\n"
    "SIGINT/SIGTERM: finish the running jobs and exit.\n";

static int
runner_start(struct cli *cli, struct runner *r, char **funcs, size_t nfuncs, const char *id)
{
    struct thread_arg *args;
    pthread_t *tids;
    struct sigaction sa, old_int, old_term;
    sigset_t all, old;
    int i, started = 0, rc = CLI_OK;
    size_t k, f;

    r->w = calloc((size_t)r->n, sizeof(*r->w));
    if (r->w == NULL) {
        cli_err("out of memory");
        exit(CLI_FAILED);
    }
    for (i = 0; i < r->n; i++) {
        r->w[i] = dsjob_worker_new();
        if (r->w[i] == NULL) {
            cli_err("out of memory");
            exit(CLI_FAILED);
        }
        for (k = 0; k < cli->nservers; k++) {
            if (dsjob_worker_add_server(r->w[i], cli->servers[k]) != DSJOB_OK)
                return cli_usage_error(cli, "bad server address '%s'", cli->servers[k]);
        }
        for (f = 0; f < nfuncs; f++) {
            int err = dsjob_worker_register(r->w[i], funcs[f], run_job, r, 0);

            /* A function given twice is registered once. */
            if (err != DSJOB_OK && err != DSJOB_ERR_ARG) {
                cli_err("register '%s': %s", funcs[f], dsjob_strerror(err));
                return CLI_FAILED;
            }
        }
        if (cli_tls_worker(cli, r->w[i]) != 0)
            return CLI_USAGE;
        if (id != NULL && dsjob_worker_set_id(r->w[i], id) != DSJOB_OK)
            return cli_usage_error(cli, "bad worker id '%s'", id);
        if (cli->timeout_ms > 0)
            dsjob_worker_set_timeout(r->w[i], cli->timeout_ms, cli->timeout_ms);
    }

    runner_signalled = r;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    /* The other threads block every signal: the handler runs in this one. */
    args = cli_xmalloc((size_t)r->n * sizeof(*args));
    tids = cli_xmalloc((size_t)r->n * sizeof(*tids));
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (i = 1; i < r->n; i++) {
        args[i] = (struct thread_arg){.r = r, .i = i, .err = DSJOB_OK};
        if (pthread_create(&tids[i], NULL, thread_main, &args[i]) != 0) {
            int j;

            cli_err("cannot start thread %d of %d", i + 1, r->n);
            /* Stop the ones started; not on_signal, which would make a ^C mean "hurry". */
            for (j = 0; j < r->n; j++)
                dsjob_worker_stop(r->w[j]);
            break;
        }
        started = i;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    args[0] = (struct thread_arg){.r = r, .i = 0, .err = DSJOB_OK};
    thread_main(&args[0]);
    for (i = 1; i <= started; i++)
        pthread_join(tids[i], NULL);
    for (i = 0; i <= started; i++) {
        if (args[i].err != DSJOB_OK) {
            cli_err("worker: %s: %s", dsjob_strerror(args[i].err), dsjob_worker_errmsg(r->w[i]));
            rc = CLI_FAILED;
        }
    }
    if (started + 1 < r->n)
        rc = CLI_FAILED;
    /* A signal from now on acts as it did before: the workers are done. */
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    runner_signalled = NULL;
    free(args);
    free(tids);
    return rc;
}

/*
 * find_command tells whether posix_spawnp would find cmd: a path with a
 * slash names the file itself, a bare name is looked for in PATH (the
 * system's default path when PATH is unset). It must be an executable
 * regular file. On failure why says what is wrong.
 */
static bool
find_command(const char *cmd, const char **why)
{
    const char *path = getenv("PATH"), *p, *end;
    char buf[PATH_MAX], def[256];
    struct stat sb;

    *why = "not found in PATH";
    if (strchr(cmd, '/') != NULL) {
        if (stat(cmd, &sb) != 0) {
            *why = strerror(errno);
            return false;
        }
        *why = "not an executable file";
        return S_ISREG(sb.st_mode) && access(cmd, X_OK) == 0;
    }
    if (path == NULL) {
        size_t n = confstr(_CS_PATH, def, sizeof(def));

        path = n > 0 && n <= sizeof(def) ? def : "/bin:/usr/bin";
    }
    for (p = path; *p != '\0'; p = *end ? end + 1 : end) {
        size_t dlen;

        end = strchr(p, ':');
        if (end == NULL)
            end = p + strlen(p);
        dlen = (size_t)(end - p);
        if (snprintf(buf, sizeof(buf), "%.*s/%s", (int)dlen, dlen ? p : ".", cmd) >=
            (int)sizeof(buf))
            continue;
        if (stat(buf, &sb) == 0 && S_ISREG(sb.st_mode) && access(buf, X_OK) == 0)
            return true;
    }
    return false;
}

int
runner_main(struct cli *cli, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_GLOBAL_LONG,
        {"function", required_argument, NULL, 'f'},
        {"concurrency", required_argument, NULL, 'c'},
        {"id", required_argument, NULL, 'i'},
        {"stream", no_argument, NULL, OPT_STREAM},
        {"chunk", required_argument, NULL, OPT_CHUNK},
        {"warnings", no_argument, NULL, OPT_WARNINGS},
        {"exceptions", no_argument, NULL, OPT_EXCEPTIONS},
        {NULL, 0, NULL, 0},
    };
    struct runner r;
    char **funcs = NULL;
    const char *id = NULL;
    size_t nfuncs = 0;
    unsigned long n = 1, chunk;
    const char *why;
    int ch, rc, i;

    memset(&r, 0, sizeof(r));
    /* '+': the command's own options are not ours. */
    while ((ch = getopt_long(argc, argv, "+:" CLI_GLOBAL_SHORT "f:c:i:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            fputs(runner_usage, stdout);
            free(funcs);
            return CLI_OK;
        case 'f':
            if (*optarg == '\0') {
                free(funcs);
                return cli_usage_error(cli, "option '-f' wants a function name");
            }
            {
                char **nf = realloc(funcs, (nfuncs + 1) * sizeof(*funcs));

                if (nf == NULL) {
                    free(funcs);
                    cli_err("out of memory");
                    return CLI_FAILED;
                }
                funcs = nf;
                funcs[nfuncs++] = optarg;
                break;
            }
        case 'c':
            if (cli_parse_uint(optarg, 1, RUNNER_MAX_THREADS, &n) < 0) {
                free(funcs);
                return cli_usage_error(cli, "option '-c' wants a number from 1 to %d, not '%s'",
                                       RUNNER_MAX_THREADS, optarg);
            }
            break;
        case 'i': id = optarg; break;
        case OPT_STREAM: r.stream = true; break;
        case OPT_CHUNK:
            if (cli_parse_uint(optarg, 1, RUNNER_CHUNK_MAX, &chunk) < 0) {
                free(funcs);
                return cli_usage_error(cli, "option '--chunk' wants bytes from 1 to %d, not '%s'",
                                       RUNNER_CHUNK_MAX, optarg);
            }
            r.chunk = chunk;
            r.stream = true;
            break;
        case OPT_WARNINGS: r.warnings = true; break;
        case OPT_EXCEPTIONS: r.exceptions = true; break;
        case OPT_FORMAT:
            free(funcs);
            return cli_usage_error(cli, "option '--format' is for the admin verbs");
        case '?':
        case ':': free(funcs); return cli_getopt_error(cli, ch, argv);
        default:
            rc = cli_global_opt(cli, ch, optarg);
            if (rc != 0) {
                free(funcs);
                return rc < 0 ? cli_getopt_error(cli, '?', argv) : rc;
            }
            break;
        }
    }
    if (nfuncs == 0) {
        free(funcs);
        return cli_usage_error(cli, "missing '-f FUNCTION'");
    }
    if (optind >= argc) {
        free(funcs);
        return cli_usage_error(cli, "missing '-- COMMAND'");
    }
    if (!find_command(argv[optind], &why)) {
        free(funcs);
        return cli_usage_error(cli, "cannot run '%s': %s", argv[optind], why);
    }
    rc = cli_servers(cli);
    if (rc != 0) {
        free(funcs);
        return rc;
    }
    /* fd 3 too: every pipe made later is then above 3, and dup2 onto 3 is safe. */
    cli_reserve_fds(3);
    r.argv = argv + optind;
    r.n = (int)n;
    rc = runner_start(cli, &r, funcs, nfuncs, id);
    if (r.w != NULL) {
        for (i = 0; i < r.n; i++)
            dsjob_worker_free(r.w[i]);
    }
    free(r.w);
    free(funcs);
    return rc;
}
