/*
 * The progress bar of dsjob submit (see progress.h). progress_format is a
 * pure function of its arguments so that the test can check the line
 * without a terminal; the drawing half only adds the terminal width, the
 * clock, \r and the blanking. Nothing here decides whether a bar is drawn
 * at all: submit.c does (stderr a terminal, or DSJOB_PROGRESS=force).
 */
#include "config.h"
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "dsjob.h"

#define PROGRESS_MIN_BAR 10 /* narrower than this, the bar is left out */
#define PROGRESS_REDRAW 0.1 /* seconds between redraws */

double
progress_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "M:SS", or "H:MM:SS" from an hour on. */
static void
format_elapsed(char *buf, size_t cap, double secs)
{
    unsigned long s = secs > 0 ? (unsigned long)secs : 0;

    if (s >= 3600)
        snprintf(buf, cap, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, cap, "%lu:%02lu", s / 60, s % 60);
}

size_t
progress_format(char *buf, size_t cap, unsigned num, unsigned den, double elapsed, double rate,
                unsigned width)
{
    char text[128], pct[16], rt[32], el[32];
    size_t tlen, barw = 0, fill = 0, i, n = 0;

    if (cap == 0 || width < 2)
        return 0;
    /* The line (width - 1 columns) must fit buf with its NUL. */
    if (width > cap)
        width = (unsigned)cap;
    /* More than the total (7/3): the text keeps the numbers, the percentage stops at 100. */
    if (den > 0)
        snprintf(pct, sizeof(pct), "%3u%%",
                 num >= den ? 100u : (unsigned)((unsigned long long)num * 100 / den));
    else
        snprintf(pct, sizeof(pct), "  -%%");
    if (rate < 0)
        snprintf(rt, sizeof(rt), "-/s");
    else if (rate < 100)
        snprintf(rt, sizeof(rt), "%.1f/s", rate);
    else
        snprintf(rt, sizeof(rt), "%.0f/s", rate);
    format_elapsed(el, sizeof(el), elapsed);
    snprintf(text, sizeof(text), " %u/%u %s %s %s", num, den, pct, rt, el);
    tlen = strlen(text);
    /* "[" bar "]" text, in width - 1 columns. */
    if (width >= tlen + 3 + PROGRESS_MIN_BAR)
        barw = width - 1 - tlen - 2;
    if (barw > 0) {
        if (den > 0)
            fill = num >= den ? barw : (size_t)((unsigned long long)num * barw / den);
        if (n < cap - 1)
            buf[n++] = '[';
        for (i = 0; i < barw && n < cap - 1; i++)
            buf[n++] = i < fill ? '#' : '.';
        if (n < cap - 1)
            buf[n++] = ']';
    }
    /* Without a bar, the text alone, cut to width - 1 so it never wraps. */
    for (i = barw > 0 ? 0 : 1; i < tlen && n < cap - 1 && n < width - 1; i++)
        buf[n++] = text[i];
    buf[n] = '\0';
    return n;
}

static unsigned
term_width(int fd)
{
    struct winsize ws;
    const char *env;
    unsigned long v;

    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    env = getenv("COLUMNS");
    if (env != NULL && cli_parse_uint(env, 1, 10000, &v) == 0)
        return (unsigned)v;
    return 80;
}

void
progress_init(struct progress *p, int fd)
{
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->start = progress_now();
}

void
progress_update(struct progress *p, unsigned num, unsigned den)
{
    char line[512];
    double now = progress_now(), rate = -1;
    size_t n;

    if (p->first == 0) {
        p->first = now;
        p->first_num = num;
    } else if (now - p->last_draw < PROGRESS_REDRAW && !(den > 0 && num >= den)) {
        return;
    }
    if (now > p->first && num >= p->first_num)
        rate = (double)(num - p->first_num) / (now - p->first);
    line[0] = '\r';
    n = progress_format(line + 1, sizeof(line) - 1, num, den, now - p->start, rate,
                        term_width(p->fd));
    /* Blank what a longer previous line leaves behind. */
    while (n < p->drawn_len && n + 1 < sizeof(line) - 1)
        line[1 + n++] = ' ';
    cli_write_all(p->fd, line, n + 1);
    p->drawn = true;
    p->drawn_len = n;
    p->last_draw = now;
}

void
progress_clear(struct progress *p)
{
    char line[512];
    size_t n = p->drawn_len < sizeof(line) - 2 ? p->drawn_len : sizeof(line) - 2;

    if (!p->drawn)
        return;
    line[0] = '\r';
    memset(line + 1, ' ', n);
    line[n + 1] = '\r';
    cli_write_all(p->fd, line, n + 2);
    p->drawn = false;
    p->drawn_len = 0;
}
