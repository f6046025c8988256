/*
 * TAP output for dsjob's test programs. Deliberately tiny: one counter of
 * tests run and one of failures, lines flushed at once so that a test that
 * hangs or crashes still shows how far it got.
 */
#include "config.h"
#include "tap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
