/*
 * Cron expressions and zones (server/cron.c): parsing, the next tick in
 * UTC, and the daylight-saving rules of cron.h checked at the 2026
 * transitions of Europe/Berlin (29 March 02:00 -> 03:00, 25 October
 * 03:00 -> 02:00) and America/New_York, with fixed instants: no clock.
 */
#define _DEFAULT_SOURCE
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/cron.h"
#include "tap.h"

/* "2026-03-29T01:00:00Z" as epoch seconds (timegm reads no TZ). */
static int64_t
at(const char *s)
{
    struct tm tm;

    memset(&tm, 0, sizeof(tm));
    if (strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm) == NULL)
        tap_bail("bad instant %s", s);
    return (int64_t)timegm(&tm);
}

static char *
fmt(int64_t t)
{
    static char buf[8][32];
    static int k;

    if (t < 0)
        return "none";
    k = (k + 1) % 8;
    return cron_format_utc(t, buf[k], sizeof(buf[k]));
}

static struct cron
parse(const char *expr)
{
    struct cron c;
    char err[CRON_ERRLEN];

    if (cron_parse(&c, expr, strlen(expr), err) < 0)
        tap_bail("cron_parse '%s': %s", expr, err);
    return c;
}

/* The ticks of expr in tz from after, count of them, joined by spaces. */
static const char *
ticks(const char *expr, const struct cron_tz *tz, const char *from, int n)
{
    static char out[1024];
    struct cron c = parse(expr);
    int64_t t = at(from);
    size_t len = 0;
    int i;

    out[0] = '\0';
    for (i = 0; i < n; i++) {
        t = cron_next(&c, tz, t);
        len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s", i ? " " : "", fmt(t));
        if (t < 0)
            break;
    }
    return out;
}

/* Ticks of expr in [from, to). */
static int
count(const char *expr, const struct cron_tz *tz, const char *from, const char *to)
{
    struct cron c = parse(expr);
    int64_t t = at(from) - 1, end = at(to);
    int n = 0;

    while ((t = cron_next(&c, tz, t)) >= 0 && t < end)
        n++;
    return n;
}

static void
parsing(void)
{
    char err[CRON_ERRLEN];
    struct cron c;

    tap_ok(cron_parse(&c, "* * * *", 7, err) < 0 && strstr(err, "five fields") != NULL,
           "four fields are refused: %s", err);
    tap_ok(cron_parse(&c, "* * * * * * *", 13, err) < 0, "seven fields are refused");
    tap_ok(cron_parse(&c, "61 * * * *", 10, err) < 0 && strstr(err, "minute") != NULL,
           "minute 61 is refused, the field named: %s", err);
    tap_ok(cron_parse(&c, "* 24 * * *", 10, err) < 0 && strstr(err, "hour") != NULL,
           "hour 24 is refused");
    tap_ok(cron_parse(&c, "*/0 * * * *", 11, err) < 0, "a step of 0 is refused");
    tap_ok(cron_parse(&c, "5-1 * * * *", 11, err) < 0, "a reversed range is refused");
    tap_ok(cron_parse(&c, "1,,2 * * * *", 12, err) < 0, "an empty list item is refused");
    tap_ok(cron_parse(&c, "@often", 6, err) < 0, "an unknown macro is refused");
    c = parse("*/15 9-17 * JAN-mar mon-FRI");
    tap_is_int((long long)c.min, (1LL << 0) | (1LL << 15) | (1LL << 30) | (1LL << 45),
               "*/15: minutes 0, 15, 30, 45");
    tap_is_int(c.mon, 0xe, "JAN-mar: months 1-3");
    tap_is_int(c.wday, 0x3e, "mon-FRI: days 1-5");
    tap_ok(c.sec == 1 && !c.hour_all, "five fields: second 0; hours not all");
    c = parse("*/10 * * * * 7");
    tap_ok(c.sec == ((1ULL << 0) | (1ULL << 10) | (1ULL << 20) | (1ULL << 30) | (1ULL << 40) |
                     (1ULL << 50)) &&
               c.wday == 1 && c.hour_all,
           "six fields: seconds first; day of week 7 is Sunday");
    c = parse("5/20 * * * *");
    tap_is_int((long long)c.min, (1LL << 5) | (1LL << 25) | (1LL << 45), "5/20: 5, 25, 45");
    c = parse("@daily");
    tap_ok(c.min == 1 && c.hour == 1 && c.mday_any && c.wday_any, "@daily is 0 0 * * *");
}

static void
utc(void)
{
    struct cron c;
    char err[CRON_ERRLEN];
    struct cron_tz *tz = cron_tz_load("UTC", err);

    tap_ok(tz != NULL, "UTC loads without a file");
    tap_is_str(ticks("0 10 5 12 *", tz, "2026-01-01T00:00:00Z", 2),
               "2026-12-05T10:00:00Z 2027-12-05T10:00:00Z", "a yearly time");
    tap_is_str(ticks("* * * * * *", tz, "2026-12-05T10:00:59Z", 2),
               "2026-12-05T10:01:00Z 2026-12-05T10:01:01Z", "every second");
    tap_is_str(ticks("0 0 29 2 *", tz, "2097-01-01T00:00:00Z", 1), "2104-02-29T00:00:00Z",
               "29 February: 2100 is no leap year");
    c = parse("0 0 30 2 *");
    tap_is_int(cron_next(&c, tz, at("2026-01-01T00:00:00Z")), -1, "30 February never comes");
    /* Both day fields set: either matches. 2026-02-13 is a Friday, 2026-03-13 too. */
    tap_is_str(ticks("0 0 1 * 5", tz, "2026-02-01T00:00:00Z", 3),
               "2026-02-06T00:00:00Z 2026-02-13T00:00:00Z 2026-02-20T00:00:00Z",
               "day 1 or a Friday");
    tap_is_str(ticks("0 0 * * 5", tz, "2026-02-12T00:00:00Z", 1), "2026-02-13T00:00:00Z",
               "day of month *: Fridays only");
    tap_is_str(ticks("0 12 13 * *", tz, "2026-02-14T00:00:00Z", 1), "2026-03-13T12:00:00Z",
               "day of week *: the 13th only");
    tap_is_str(ticks("0 0 1 1 *", tz, "1969-12-31T00:00:00Z", 1), "1970-01-01T00:00:00Z",
               "the epoch itself");
    cron_tz_free(tz);
    tap_ok(cron_tz_load("../../etc/passwd", err) == NULL && strstr(err, "not a time zone") != NULL,
           "a path is not a zone name: %s", err);
    tap_ok(cron_tz_load("Nowhere/Atlantis", err) == NULL && strstr(err, "unknown time zone"),
           "an unknown zone is refused: %s", err);
}

static void
berlin(struct cron_tz *tz)
{
    /* Spring: 02:00 CET (01:00Z) becomes 03:00 CEST. 02:30 does not exist. */
    tap_is_str(ticks("30 2 * * *", tz, "2026-03-27T12:00:00Z", 3),
               "2026-03-28T01:30:00Z 2026-03-29T01:00:00Z 2026-03-30T00:30:00Z",
               "daily 02:30 fires once on 29 March: at the jump, 03:00 CEST");
    tap_is_int(count("30 2 * * *", tz, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"), 1,
               "daily 02:30: one tick in the short local day of 29 March");
    tap_is_str(ticks("0 2 * * *", tz, "2026-03-28T12:00:00Z", 2),
               "2026-03-29T01:00:00Z 2026-03-30T00:00:00Z",
               "daily 02:00, the gap's first second, fires at the jump");
    tap_is_str(ticks("30 3 * * *", tz, "2026-03-28T12:00:00Z", 1), "2026-03-29T01:30:00Z",
               "daily 03:30 is untouched");
    tap_is_str(ticks("30 * * * *", tz, "2026-03-29T00:00:00Z", 3),
               "2026-03-29T00:30:00Z 2026-03-29T01:30:00Z 2026-03-29T02:30:00Z",
               "every hour at :30: the skipped hour has none, the interval stays an hour");
    tap_is_int(count("0 * * * *", tz, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"), 23,
               "hourly: 23 ticks in the 23-hour day");
    tap_is_str(ticks("* * * * * *", tz, "2026-03-29T00:59:58Z", 3),
               "2026-03-29T00:59:59Z 2026-03-29T01:00:00Z 2026-03-29T01:00:01Z",
               "every second goes straight through the jump");

    /* Autumn: 03:00 CEST (01:00Z) becomes 02:00 CET. 02:30 happens twice. */
    tap_is_str(ticks("30 2 * * *", tz, "2026-10-23T12:00:00Z", 3),
               "2026-10-24T00:30:00Z 2026-10-25T00:30:00Z 2026-10-26T01:30:00Z",
               "daily 02:30 fires once on 25 October: at its first occurrence");
    tap_is_int(count("30 2 * * *", tz, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"), 1,
               "daily 02:30: one tick in the long local day of 25 October");
    tap_is_str(ticks("0 3 * * *", tz, "2026-10-24T12:00:00Z", 1), "2026-10-25T02:00:00Z",
               "daily 03:00 (shown once, in CET)");
    tap_is_str(ticks("0 2 * * *", tz, "2026-10-24T12:00:00Z", 2),
               "2026-10-25T00:00:00Z 2026-10-26T01:00:00Z", "daily 02:00: its first occurrence");
    tap_is_str(ticks("*/30 * * * *", tz, "2026-10-24T23:00:00Z", 6),
               "2026-10-24T23:30:00Z 2026-10-25T00:00:00Z 2026-10-25T00:30:00Z "
               "2026-10-25T01:00:00Z 2026-10-25T01:30:00Z 2026-10-25T02:00:00Z",
               "every half hour: the repeated hour twice, the interval stays 30 minutes");
    tap_is_int(count("0 * * * *", tz, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"), 25,
               "hourly: 25 ticks in the 25-hour day");
    tap_is_int(count("* * * * * *", tz, "2026-10-25T00:59:00Z", "2026-10-25T01:01:00Z"), 120,
               "every second: 120 ticks in two minutes across the change");
    tap_is_str(ticks("0 30 2 * * *", tz, "2026-10-25T00:30:00Z", 1), "2026-10-26T01:30:00Z",
               "six fields, 02:30:00: the repeat does not fire");

    /* Past the file's explicit transitions, the POSIX rule. */
    tap_is_int(cron_tz_offset(tz, at("2100-07-01T00:00:00Z")), 7200, "summer 2100: +2 (rule)");
    tap_is_int(cron_tz_offset(tz, at("2100-01-01T00:00:00Z")), 3600, "winter 2100: +1 (rule)");
    tap_is_str(ticks("30 2 * * *", tz, "2090-03-25T12:00:00Z", 2),
               "2090-03-26T01:00:00Z 2090-03-27T00:30:00Z",
               "2090's spring gap (last Sunday of March, 26th) by the rule too");
}

int
main(void)
{
    const char *dir = getenv("TZDIR");
    char path[512], err[CRON_ERRLEN];
    struct cron_tz *tz;

    parsing();
    utc();
    snprintf(path, sizeof(path), "%s/Europe/Berlin", dir ? dir : "/usr/share/zoneinfo");
    if (access(path, R_OK) != 0) {
        tap_skip(1, "no tzdata (%s): the zone cases", path);
        return tap_done();
    }
    tz = cron_tz_load("Europe/Berlin", err);
    if (!tap_ok(tz != NULL, "Europe/Berlin loads: %s", tz ? "" : err))
        return tap_done();
    berlin(tz);
    cron_tz_free(tz);
    tz = cron_tz_load("America/New_York", err);
    tap_ok(tz != NULL, "America/New_York loads");
    if (tz != NULL) {
        /* 2026-03-08 02:00 EST (07:00Z) becomes 03:00 EDT. */
        tap_is_str(ticks("15 2 * * *", tz, "2026-03-07T12:00:00Z", 2),
                   "2026-03-08T07:00:00Z 2026-03-09T06:15:00Z", "New York: 02:15 at the jump");
        cron_tz_free(tz);
    }
    tz = cron_tz_load("Australia/Sydney", err);
    if (tz != NULL) {
        tap_is_int(cron_tz_offset(tz, at("2150-01-15T00:00:00Z")), 39600,
                   "Sydney, January 2150: +11 (the rule's summer spans the new year)");
        tap_is_int(cron_tz_offset(tz, at("2150-07-15T00:00:00Z")), 36000, "Sydney, July 2150: +10");
        cron_tz_free(tz);
    }
    return tap_done();
}
