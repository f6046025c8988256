/*
 * TAP output for dsjob's test programs. Deliberately tiny: one counter of
 * tests run and one of failures, lines flushed at once so that a test that
 * hangs or crashes still shows how far it got.
 */
#include "config.h"
#include "tap.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static int tap_run;    /* tests reported so far */
static int tap_failed; /* of which failed */
static int tap_planned = -1;

static void
tap_vline(bool cond, const char *fmt, va_list ap)
{
    tap_run++;
    if (!cond)
        tap_failed++;
    printf("%sok %d - ", cond ? "" : "not ", tap_run);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
}

void
tap_plan(int n)
{
    tap_planned = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

void
tap_skip_all(const char *fmt, ...)
{
    va_list ap;

    printf("1..0 # SKIP ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(0);
}

bool
tap_ok(bool cond, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tap_vline(cond, fmt, ap);
    va_end(ap);
    return cond;
}

bool
tap_is_int(long long got, long long want, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tap_vline(got == want, fmt, ap);
    va_end(ap);
    if (got != want)
        tap_diag("  got %lld, want %lld", got, want);
    return got == want;
}

bool
tap_is_str(const char *got, const char *want, const char *fmt, ...)
{
    va_list ap;
    bool same = got && want ? strcmp(got, want) == 0 : got == want;

    va_start(ap, fmt);
    tap_vline(same, fmt, ap);
    va_end(ap);
    if (!same)
        tap_diag("  got '%s', want '%s'", got ? got : "(null)", want ? want : "(null)");
    return same;
}

bool
tap_is_mem(const void *got, size_t got_len, const void *want, size_t want_len, const char *fmt, ...)
{
    va_list ap;
    bool same = got_len == want_len && (got_len == 0 || memcmp(got, want, got_len) == 0);

    va_start(ap, fmt);
    tap_vline(same, fmt, ap);
    va_end(ap);
    if (!same)
        tap_diag("  got %zu bytes, want %zu bytes%s", got_len, want_len,
                 got_len == want_len ? " (contents differ)" : "");
    return same;
}

bool
tap_todo(bool cond, const char *reason, const char *fmt, ...)
{
    va_list ap;

    tap_run++;
    printf("%sok %d - ", cond ? "" : "not ", tap_run);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" # TODO %s\n", reason);
    fflush(stdout);
    return cond;
}

void
tap_skip(int n, const char *fmt, ...)
{
    va_list ap;

    while (n-- > 0) {
        tap_run++;
        printf("ok %d # SKIP ", tap_run);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

void
tap_diag(const char *fmt, ...)
{
    va_list ap;

    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

void
tap_bail(const char *fmt, ...)
{
    va_list ap;

    printf("Bail out! ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(1);
}

int
tap_done(void)
{
    if (tap_planned < 0)
        printf("1..%d\n", tap_run);
    else if (tap_planned != tap_run)
        printf("# planned %d tests but ran %d\n", tap_planned, tap_run);
    fflush(stdout);
    return tap_failed == 0 && (tap_planned < 0 || tap_planned == tap_run) ? 0 : 1;
}

/* --- parts ------------------------------------------------------------- */

struct tap_part {
    pid_t pid;       /* the child running the part */
    int fd;          /* the read end of its stdout, or -1 at its end */
    char *buf;       /* what it wrote that is not printed yet */
    size_t len, cap; /* of buf */
    bool bailed;     /* it printed "Bail out!" */
};

static struct tap_part tap_parts[TAP_MAX_PARTS];
static int tap_nparts;

void
tap_part(void (*fn)(void *), void *arg)
{
    struct tap_part *t;
    int fds[2], i;

    if (tap_nparts == TAP_MAX_PARTS)
        tap_parts_end();
    if (pipe(fds) < 0)
        tap_bail("tap_part: pipe: %s", strerror(errno));
    fflush(stdout);
    t = &tap_parts[tap_nparts];
    memset(t, 0, sizeof(*t));
    t->pid = fork();
    if (t->pid < 0)
        tap_bail("tap_part: fork: %s", strerror(errno));
    if (t->pid == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test killed by its alarm takes its parts along */
#endif
        for (i = 0; i < tap_nparts; i++)
            close(tap_parts[i].fd);
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(99);
        close(fds[1]);
        tap_nparts = 0;
        tap_run = tap_failed = 0;
        tap_planned = -1;
        fn(arg);
        fflush(stdout);
        _exit(0);
    }
    close(fds[1]);
    t->fd = fds[0];
    tap_nparts++;
}

/* One line of a part, renumbered into this test's count. */
static void
part_line(struct tap_part *t, char *line)
{
    char *rest;
    bool ok;

    if (strncmp(line, "ok ", 3) == 0 || strncmp(line, "not ok ", 7) == 0) {
        ok = line[0] == 'o';
        strtol(line + (ok ? 3 : 7), &rest, 10);
        tap_run++;
        if (!ok && strstr(rest, " # TODO") == NULL)
            tap_failed++;
        printf("%sok %d%s\n", ok ? "" : "not ", tap_run, rest);
    } else if (strncmp(line, "Bail out!", 9) == 0) {
        t->bailed = true;
        tap_ok(false, "a part bailed out:%s", line + 9);
    } else if (strncmp(line, "1..", 3) != 0) {
        printf("%s\n", line);
    }
}

/* Prints t's whole lines (and, at its end, what is left); false while more may come. */
static bool
part_flush(struct tap_part *t)
{
    char *nl, *start = t->buf;
    size_t left;

    while (start != NULL && (nl = memchr(start, '\n', t->len - (size_t)(start - t->buf))) != NULL) {
        *nl = '\0';
        part_line(t, start);
        start = nl + 1;
    }
    left = start != NULL ? t->len - (size_t)(start - t->buf) : 0;
    if (left > 0)
        memmove(t->buf, start, left);
    t->len = left;
    if (t->fd >= 0) {
        fflush(stdout);
        return false;
    }
    if (t->len > 0) {
        t->buf[t->len] = '\0';
        part_line(t, t->buf);
    }
    fflush(stdout);
    return true;
}

/* Reads what part t has to say now; at its end closes fd. */
static void
part_read(struct tap_part *t)
{
    ssize_t n;

    if (t->cap - t->len < 4097) {
        t->cap = t->cap * 2 + 8192;
        t->buf = realloc(t->buf, t->cap);
        if (t->buf == NULL)
            tap_bail("tap_part: out of memory");
    }
    n = read(t->fd, t->buf + t->len, t->cap - t->len - 1);
    if (n < 0 && errno == EINTR)
        return;
    if (n <= 0) {
        close(t->fd);
        t->fd = -1;
        return;
    }
    t->len += (size_t)n;
}

void
tap_parts_end(void)
{
    struct pollfd pfd[TAP_MAX_PARTS];
    int idx[TAP_MAX_PARTS];
    int cur = 0, n, i, status;

    while (cur < tap_nparts) {
        struct tap_part *t = &tap_parts[cur];

        if (!part_flush(t)) {
            for (i = cur, n = 0; i < tap_nparts; i++) {
                if (tap_parts[i].fd < 0)
                    continue;
                pfd[n].fd = tap_parts[i].fd;
                pfd[n].events = POLLIN;
                idx[n++] = i;
            }
            if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR)
                tap_bail("tap_parts_end: poll: %s", strerror(errno));
            for (i = 0; i < n; i++)
                if (pfd[i].revents != 0)
                    part_read(&tap_parts[idx[i]]);
            continue;
        }
        while (waitpid(t->pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (WIFSIGNALED(status))
            tap_ok(false, "part %d was killed by signal %d", cur + 1, WTERMSIG(status));
        else if (WEXITSTATUS(status) != 0 && !t->bailed)
            tap_ok(false, "part %d exited %d", cur + 1, WEXITSTATUS(status));
        free(t->buf);
        cur++;
    }
    tap_nparts = 0;
}

static void
part_fn(void *arg)
{
    (*(void (*const *)(void))arg)();
}

void
tap_parts_run(void (*const fns[])(void), size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        tap_part(part_fn, (void *)&fns[i]);
    tap_parts_end();
}
