/*
 * Cron expressions and time zones, for the server's schedules: parse five
 * fields (minute hour day-of-month month day-of-week) or six with seconds
 * first, load an IANA zone from the system's tzdata files, and find the
 * next tick after an instant. Pure: no clock, no loop, no global state
 * (the process's TZ is never read or set), so the rules below are
 * unit-tested with fixed instants (tests/unit/t_cron.c).
 *
 * Daylight saving. A schedule whose hour field is not every hour (a daily
 * "30 2 * * *") fires once per matching day whatever the clock does: a
 * matching time that does not exist (the hour skipped in spring) fires at
 * the instant the clock jumps over it, and a time that happens twice (the
 * hour repeated in autumn) fires at its first occurrence only. A schedule
 * whose hour field is every hour ("0/15 * * * *", "* * * * * *") keeps its
 * interval in real time instead: the skipped hour has no ticks and the
 * repeated hour has them twice, as the clock shows them.
 */
#ifndef DSJOB_SERVER_CRON_H
#define DSJOB_SERVER_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRON_ERRLEN 160 /* room for a parse or load error */

/* A parsed expression: one bit per allowed value of each field. */
struct cron {
    uint64_t sec;  /* seconds 0-59 (bit 0 alone with five fields) */
    uint64_t min;  /* minutes 0-59 */
    uint32_t hour; /* hours 0-23 */
    uint32_t mday; /* days of the month 1-31 */
    uint16_t mon;  /* months 1-12 */
    uint8_t wday;  /* days of the week 0-6, Sunday 0 */
    bool mday_any; /* day of month was "*": the day matches by day of week alone */
    bool wday_any; /* day of week was "*": ... by day of month alone */
    bool hour_all; /* every hour allowed: see the daylight saving rule above */
};

/* A loaded zone: its offsets from UTC and when they change. */
struct cron_tz;

/*
 * cron_parse reads expr (len bytes): five or six blank-separated fields of
 * numbers, names (JAN-DEC, SUN-SAT, any case), "*", ranges A-B, lists with
 * commas and steps "/N"; day of week 7 is Sunday too; or one of @yearly,
 * @annually, @monthly, @weekly, @daily, @midnight, @hourly. When both day
 * fields are restricted a day matches if either does (as cron does).
 * 0, or -1 with err (CRON_ERRLEN bytes) saying which field is wrong.
 */
int cron_parse(struct cron *c, const char *expr, size_t len, char *err);

/*
 * cron_tz_load loads zone name ("UTC" or an IANA name such as
 * "Europe/Berlin") from $TZDIR or /usr/share/zoneinfo: the TZif file's
 * transitions, and past the last one its POSIX rule, spelled out up to the
 * year 2200. NULL, or "" is UTC. Returns the zone (caller frees with
 * cron_tz_free), or NULL with err (CRON_ERRLEN bytes) saying why.
 */
struct cron_tz *cron_tz_load(const char *name, char *err);

/* cron_tz_load_file is cron_tz_load of a TZif file by path (tests). */
struct cron_tz *cron_tz_load_file(const char *path, char *err);

/* cron_tz_free frees a zone; NULL is a no-op. */
void cron_tz_free(struct cron_tz *tz);

/* cron_tz_name is the name tz was loaded with (borrowed). */
const char *cron_tz_name(const struct cron_tz *tz);

/* cron_tz_offset is tz's offset from UTC in seconds at instant t (epoch seconds). */
int32_t cron_tz_offset(const struct cron_tz *tz, int64_t t);

/*
 * cron_next returns the first tick of c in tz strictly after instant
 * after (epoch seconds), by the rules above, or -1 if there is none in the
 * next nine years (a 31st of February).
 */
int64_t cron_next(const struct cron *c, const struct cron_tz *tz, int64_t after);

/*
 * cron_format_utc writes instant t as "2026-12-05T10:00:00Z" into buf (at
 * least 32 bytes); returns buf.
 */
char *cron_format_utc(int64_t t, char *buf, size_t len);

#endif
