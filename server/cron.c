/*
 * Cron expressions and the zones they run in (see cron.h for the rules).
 * A zone is read from its TZif file (RFC 8536) by this module rather than
 * through localtime_r and the TZ variable: TZ is one setting for the whole
 * process, and the store's writer thread and libpq run beside the loop, so
 * switching it per schedule would race. The file's 64-bit transitions are
 * kept as one sorted array of (instant, offset), and its POSIX footer
 * (e.g. "CET-1CEST,M3.5.0,M10.5.0/3") is spelled out into more transitions
 * up to 2200, so a lookup is a binary search. The next tick walks the
 * stretches of constant offset: in each, local time is UTC plus the
 * offset, so the first matching local time is found by calendar arithmetic
 * alone.
 */
#include "config.h"
#include "cron.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DAY 86400
#define TZ_MAX_FILE (1 << 20)  /* a TZif file larger than this is refused */
#define TZ_RULE_LAST_YEAR 2200 /* a footer rule is spelled out up to this year */
#define CRON_SEARCH_YEARS 9    /* a tick further than this is none (Feb 29 needs 8) */

struct cron_tz {
    char name[64]; /* as loaded */
    int32_t off0;  /* the offset before the first transition */
    size_t n;      /* transitions */
    int64_t *at;   /* when each happens, ascending */
    int32_t *off;  /* the offset from then on */
};

/* --- calendar arithmetic (proleptic Gregorian, Howard Hinnant's algorithms) --- */

static int64_t
days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void
civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    int64_t era;
    unsigned doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = (unsigned)(z - era * 146097);
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static int64_t
floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* 0 Sunday ... 6 Saturday; day 0 (1970-01-01) was a Thursday. */
static unsigned
weekday(int64_t days)
{
    return (unsigned)(((days % 7) + 11) % 7);
}

static bool
leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static unsigned
month_days(int64_t y, unsigned m)
{
    static const unsigned n[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

    return m == 2 && leap(y) ? 29 : n[m - 1];
}

char *
cron_format_utc(int64_t t, char *buf, size_t len)
{
    int64_t days = floor_div(t, DAY), sod = t - days * DAY, y;
    unsigned m, d;

    civil_from_days(days, &y, &m, &d);
    snprintf(buf, len, "%04" PRId64 "-%02u-%02uT%02u:%02u:%02uZ", y, m, d, (unsigned)(sod / 3600),
             (unsigned)(sod / 60 % 60), (unsigned)(sod % 60));
    return buf;
}

/* --- parsing ------------------------------------------------------------ */

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

struct field {
    const char *name;         /* for errors */
    unsigned lo, hi;          /* the values allowed */
    const char *const *names; /* three-letter names of lo, lo+1, ..., or NULL */
    unsigned nnames;
};

static const struct field fields[6] = {
    {"second", 0, 59, NULL, 0},        {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},          {"day of month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, 12}, {"day of week", 0, 7, day_names, 7},
};

/* A number or a name at *p (up to end); advances *p. -1 if neither. */
static int
field_value(const struct field *f, const char **p, const char *end)
{
    const char *s = *p;
    unsigned v = 0, i;

    if (s < end && s[0] >= '0' && s[0] <= '9') {
        while (s < end && s[0] >= '0' && s[0] <= '9' && v < 1000)
            v = v * 10 + (unsigned)(s++[0] - '0');
        *p = s;
        return (int)v;
    }
    for (i = 0; i < f->nnames; i++) {
        if (end - s >= 3 && strncasecmp(s, f->names[i], 3) == 0) {
            *p = s + 3;
            return (int)(f->lo + i);
        }
    }
    return -1;
}

/* One field of len bytes at s into *bits; -1 with err if it is wrong. */
static int
field_parse(const struct field *f, const char *s, size_t len, uint64_t *bits, bool *any, char *err)
{
    const char *p = s, *end = s + len;

    *bits = 0;
    *any = len == 1 && s[0] == '*';
    while (p < end) {
        int a, b, step = 1, v;

        if (*p == '*' || *p == '?') {
            a = (int)f->lo;
            b = (int)f->hi;
            p++;
        } else {
            if ((a = field_value(f, &p, end)) < 0)
                goto bad;
            b = a;
            if (p < end && *p == '-') {
                p++;
                if ((b = field_value(f, &p, end)) < 0)
                    goto bad;
            } else if (p < end && *p == '/') {
                b = (int)f->hi; /* "A/N": from A to the end, as cronie reads it */
            }
        }
        if (p < end && *p == '/') {
            p++;
            if (p >= end || *p < '0' || *p > '9')
                goto bad;
            for (step = 0; p < end && *p >= '0' && *p <= '9' && step < 1000; p++)
                step = step * 10 + (*p - '0');
            if (step == 0)
                goto bad;
        }
        if (p < end && *p != ',')
            goto bad;
        if (p < end)
            p++;
        if (a < (int)f->lo || b > (int)f->hi || a > b) {
            snprintf(err, CRON_ERRLEN, "%s field '%.*s': out of range %u-%u", f->name, (int)len, s,
                     f->lo, f->hi);
            return -1;
        }
        for (v = a; v <= b; v += step)
            *bits |= (uint64_t)1 << v;
    }
    if (*bits == 0)
        goto bad;
    return 0;
bad:
    snprintf(err, CRON_ERRLEN, "%s field '%.*s' is not a cron field", f->name, (int)len, s);
    return -1;
}

static const struct {
    const char *name;
    const char *expr;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

int
cron_parse(struct cron *c, const char *expr, size_t len, char *err)
{
    const char *w[6];
    size_t wl[6], i, n = 0, at = 0;
    uint64_t bits[6];
    bool any[6];

    while (len > 0 && (expr[len - 1] == ' ' || expr[len - 1] == '\t'))
        len--;
    while (len > 0 && (*expr == ' ' || *expr == '\t'))
        expr++, len--;
    if (len > 0 && expr[0] == '@') {
        for (i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
            if (strlen(macros[i].name) == len && strncasecmp(expr, macros[i].name, len) == 0)
                return cron_parse(c, macros[i].expr, strlen(macros[i].expr), err);
        snprintf(err, CRON_ERRLEN, "'%.*s' is not a cron macro", (int)(len > 40 ? 40 : len), expr);
        return -1;
    }
    while (at < len) {
        size_t s = at;

        while (at < len && expr[at] != ' ' && expr[at] != '\t')
            at++;
        if (n == 6) {
            n++;
            break;
        }
        w[n] = expr + s;
        wl[n++] = at - s;
        while (at < len && (expr[at] == ' ' || expr[at] == '\t'))
            at++;
    }
    if (n != 5 && n != 6) {
        snprintf(err, CRON_ERRLEN,
                 "'%.*s': a cron expression has five fields, or six with seconds first",
                 (int)(len > 60 ? 60 : len), expr);
        return -1;
    }
    bits[0] = 1; /* five fields: second 0 */
    any[0] = false;
    for (i = 0; i < n; i++) {
        size_t k = i + 6 - n;

        if (field_parse(&fields[k], w[i], wl[i], &bits[k], &any[k], err) < 0)
            return -1;
    }
    memset(c, 0, sizeof(*c));
    c->sec = bits[0];
    c->min = bits[1];
    c->hour = (uint32_t)bits[2];
    c->mday = (uint32_t)bits[3];
    c->mon = (uint16_t)bits[4];
    c->wday = (uint8_t)((bits[5] | (bits[5] >> 7)) & 0x7f); /* 7 is Sunday too */
    c->mday_any = any[3];
    c->wday_any = any[5];
    c->hour_all = c->hour == 0xffffffu;
    return 0;
}

/* --- zones ---------------------------------------------------------------- */

static uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t
be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

static int
tz_push(struct cron_tz *tz, size_t *cap, int64_t at, int32_t off)
{
    int32_t before = tz->n > 0 ? tz->off[tz->n - 1] : tz->off0;

    if (tz->n > 0 && at <= tz->at[tz->n - 1])
        return 0; /* out of order: the file's own transitions win */
    if (off == before)
        return 0; /* only the abbreviation changed: no transition for us */
    if (tz->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 256;
        int64_t *a = realloc(tz->at, ncap * sizeof(*a));
        int32_t *o;

        if (a == NULL)
            return -1;
        tz->at = a;
        o = realloc(tz->off, ncap * sizeof(*o));
        if (o == NULL)
            return -1;
        tz->off = o;
        *cap = ncap;
    }
    tz->at[tz->n] = at;
    tz->off[tz->n++] = off;
    return 0;
}

/* POSIX TZ pieces: a name ("CET" or "<+03>"). */
static const char *
posix_name(const char *p)
{
    if (*p == '<') {
        while (*p != '\0' && *p != '>')
            p++;
        return *p == '>' ? p + 1 : NULL;
    }
    while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
        p++;
    return p;
}

/* [+-]hh[:mm[:ss]] in seconds; NULL if not one. */
static const char *
posix_hms(const char *p, int32_t *out)
{
    int sign = 1, part = 0;
    int32_t v[3] = {0, 0, 0};

    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    if (*p < '0' || *p > '9')
        return NULL;
    for (;;) {
        while (*p >= '0' && *p <= '9' && v[part] < 1000)
            v[part] = v[part] * 10 + (*p++ - '0');
        if (*p != ':' || part == 2)
            break;
        p++;
        part++;
    }
    *out = sign * (v[0] * 3600 + v[1] * 60 + v[2]);
    return p;
}

struct posix_rule {
    char kind;    /* 'M', 'J' or 'n' */
    int m, w, d;  /* Mm.w.d, or the day in d */
    int32_t time; /* local seconds after midnight (default 2:00) */
};

static const char *
posix_rule(const char *p, struct posix_rule *r)
{
    r->time = 7200;
    r->m = r->w = r->d = 0;
    if (*p == 'M') {
        r->kind = 'M';
        if (sscanf(p + 1, "%d.%d.%d", &r->m, &r->w, &r->d) != 3 || r->m < 1 || r->m > 12 ||
            r->w < 1 || r->w > 5 || r->d < 0 || r->d > 6)
            return NULL;
        p++;
        while ((*p >= '0' && *p <= '9') || *p == '.')
            p++;
    } else {
        r->kind = *p == 'J' ? 'J' : 'n';
        if (*p == 'J')
            p++;
        if (*p < '0' || *p > '9')
            return NULL;
        while (*p >= '0' && *p <= '9') {
            r->d = r->d * 10 + (*p++ - '0');
            if (r->d > 365) /* Jn is 1-365, n 0-365: an untrusted zone file says more */
                return NULL;
        }
    }
    if (*p == '/' && (p = posix_hms(p + 1, &r->time)) == NULL)
        return NULL;
    return p;
}

/* The day (since the epoch) rule r names in year y. */
static int64_t
rule_day(const struct posix_rule *r, int64_t y)
{
    int64_t first;

    if (r->kind == 'J') /* 1-365, February 29 never counted */
        return days_from_civil(y, 1, 1) + r->d - 1 + (leap(y) && r->d >= 60);
    if (r->kind == 'n')
        return days_from_civil(y, 1, 1) + r->d;
    first = days_from_civil(y, (unsigned)r->m, 1);
    first += (r->d - (int)weekday(first) + 7) % 7; /* the first such weekday */
    first += 7 * (r->w - 1);
    while (first >= days_from_civil(y, (unsigned)r->m, 1) + month_days(y, (unsigned)r->m))
        first -= 7; /* week 5: the last */
    return first;
}

/*
 * The footer: "STDoffset[DST[offset][,start[/time],end[/time]]]". Its
 * transitions from the year of the file's last one to TZ_RULE_LAST_YEAR.
 * POSIX offsets count west of Greenwich: "CET-1" is UTC+1.
 */
static int
tz_footer(struct cron_tz *tz, size_t *cap, const char *s)
{
    struct posix_rule start, end;
    int32_t std, dst;
    int64_t y, y0;
    const char *p;

    if ((p = posix_name(s)) == NULL || p == s || (p = posix_hms(p, &std)) == NULL)
        return -1;
    std = -std;
    if (*p == '\0') {
        if (tz->n == 0)
            tz->off0 = std;
        return tz_push(tz, cap, tz->n > 0 ? tz->at[tz->n - 1] + 1 : INT64_MIN + 1, std);
    }
    s = p;
    if ((p = posix_name(s)) == NULL || p == s)
        return -1;
    dst = std + 3600;
    if (*p != ',' && *p != '\0') {
        if ((p = posix_hms(p, &dst)) == NULL)
            return -1;
        dst = -dst;
    }
    if (*p != ',' || (p = posix_rule(p + 1, &start)) == NULL || *p != ',' ||
        (p = posix_rule(p + 1, &end)) == NULL)
        return -1;
    y0 = 1970;
    if (tz->n > 0) {
        unsigned m, d;

        civil_from_days(floor_div(tz->at[tz->n - 1], DAY), &y0, &m, &d);
    }
    for (y = y0; y <= TZ_RULE_LAST_YEAR; y++) {
        int64_t on = rule_day(&start, y) * DAY + start.time - std;
        int64_t off = rule_day(&end, y) * DAY + end.time - dst;

        /* The southern hemisphere's summer spans the new year: order them. */
        if (on < off) {
            if (tz_push(tz, cap, on, dst) < 0 || tz_push(tz, cap, off, std) < 0)
                return -1;
        } else if (tz_push(tz, cap, off, std) < 0 || tz_push(tz, cap, on, dst) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Parse TZif data of len bytes into tz. */
static int
tz_parse(struct cron_tz *tz, const unsigned char *b, size_t len, char *err)
{
    size_t isut, isstd, leapn, timen, typen, charn, v1, need, i, cap = 0;
    const unsigned char *h, *times, *idx, *types;

    if (len < 44 || memcmp(b, "TZif", 4) != 0)
        goto bad;
    if (b[4] < '2') {
        snprintf(err, CRON_ERRLEN, "zone '%s': a version 1 TZif file, without 64-bit times",
                 tz->name);
        return -1;
    }
#define COUNTS(p)                                                                                  \
    (isut = be32(p + 20), isstd = be32(p + 24), leapn = be32(p + 28), timen = be32(p + 32),        \
     typen = be32(p + 36), charn = be32(p + 40))
    COUNTS(b);
    v1 = 44 + timen * 5 + typen * 6 + charn + leapn * 8 + isstd + isut;
    if (v1 + 44 > len)
        goto bad;
    h = b + v1;
    if (memcmp(h, "TZif", 4) != 0)
        goto bad;
    COUNTS(h);
#undef COUNTS
    need = 44 + timen * 9 + typen * 6 + charn + leapn * 12 + isstd + isut;
    if (typen == 0 || v1 + need > len)
        goto bad;
    times = h + 44;
    idx = times + timen * 8;
    types = idx + timen;
    tz->off0 = (int32_t)be32(types);
    for (i = 0; i < timen; i++) {
        if (idx[i] >= typen)
            goto bad;
        if (tz_push(tz, &cap, be64(times + i * 8), (int32_t)be32(types + idx[i] * 6)) < 0)
            goto nomem;
    }
    /* The footer, between newlines after the data: the rule for later times. */
    h += need;
    if ((size_t)(h - b) < len && *h == '\n') {
        const unsigned char *e = memchr(h + 1, '\n', len - (size_t)(h + 1 - b));
        char rule[128];

        if (e != NULL && e - h - 1 > 0 && (size_t)(e - h - 1) < sizeof(rule)) {
            memcpy(rule, h + 1, (size_t)(e - h - 1));
            rule[e - h - 1] = '\0';
            if (tz_footer(tz, &cap, rule) < 0) {
                snprintf(err, CRON_ERRLEN, "zone '%.60s': cannot read its rule '%.60s'", tz->name,
                         rule);
                return -1;
            }
        }
    }
    return 0;
bad:
    snprintf(err, CRON_ERRLEN, "zone '%s': not a TZif file", tz->name);
    return -1;
nomem:
    snprintf(err, CRON_ERRLEN, "zone '%s': out of memory", tz->name);
    return -1;
}

static struct cron_tz *
tz_new(const char *name)
{
    struct cron_tz *tz = calloc(1, sizeof(*tz));

    if (tz != NULL)
        snprintf(tz->name, sizeof(tz->name), "%s", name);
    return tz;
}

struct cron_tz *
cron_tz_load_file(const char *path, char *err)
{
    struct cron_tz *tz = tz_new(path);
    unsigned char *buf = NULL;
    size_t len = 0;
    FILE *fp;

    if (tz == NULL) {
        snprintf(err, CRON_ERRLEN, "out of memory");
        return NULL;
    }
    fp = fopen(path, "rb");
    if (fp == NULL) {
        snprintf(err, CRON_ERRLEN, "zone file '%s': %s", path, strerror(errno));
        goto fail;
    }
    buf = malloc(TZ_MAX_FILE);
    if (buf != NULL)
        len = fread(buf, 1, TZ_MAX_FILE, fp);
    fclose(fp);
    if (buf == NULL) {
        snprintf(err, CRON_ERRLEN, "out of memory");
        goto fail;
    }
    if (tz_parse(tz, buf, len, err) < 0)
        goto fail;
    free(buf);
    return tz;
fail:
    free(buf);
    cron_tz_free(tz);
    return NULL;
}

struct cron_tz *
cron_tz_load(const char *name, char *err)
{
    const char *dir = getenv("TZDIR");
    struct cron_tz *tz;
    char path[512];
    size_t i;

    if (name == NULL || name[0] == '\0' || strcmp(name, "UTC") == 0) {
        tz = tz_new("UTC");
        if (tz == NULL)
            snprintf(err, CRON_ERRLEN, "out of memory");
        return tz;
    }
    /* A name, not a path: no "..", no leading "/", letters and "_+-/" only. */
    for (i = 0; name[i] != '\0'; i++) {
        char ch = name[i];

        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '+' || (ch == '/' && i > 0 && name[i - 1] != '/')))
            break;
    }
    if (name[i] != '\0' || name[0] == '/' || i >= 60 || strstr(name, "..") != NULL) {
        snprintf(err, CRON_ERRLEN, "'%.60s' is not a time zone name (such as Europe/Berlin)", name);
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/%s",
             dir != NULL && dir[0] != '\0' ? dir : "/usr/share/zoneinfo", name);
    tz = cron_tz_load_file(path, err);
    if (tz != NULL)
        snprintf(tz->name, sizeof(tz->name), "%s", name);
    else if (strstr(err, "No such file") != NULL)
        snprintf(err, CRON_ERRLEN, "unknown time zone '%s' (no %.80s)", name, path);
    return tz;
}

void
cron_tz_free(struct cron_tz *tz)
{
    if (tz == NULL)
        return;
    free(tz->at);
    free(tz->off);
    free(tz);
}

const char *
cron_tz_name(const struct cron_tz *tz)
{
    return tz->name;
}

/* The last transition at or before t, or -1 if none. */
static ptrdiff_t
tz_find(const struct cron_tz *tz, int64_t t)
{
    size_t lo = 0, hi = tz->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (tz->at[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

int32_t
cron_tz_offset(const struct cron_tz *tz, int64_t t)
{
    ptrdiff_t i = tz_find(tz, t);

    return i < 0 ? tz->off0 : tz->off[i];
}

/* --- the next tick ---------------------------------------------------------- */

static bool
day_ok(const struct cron *c, unsigned mday, unsigned wday)
{
    bool md = (c->mday >> mday) & 1, wd = (c->wday >> wday) & 1;

    if (c->mday_any || c->wday_any)
        return md && wd; /* the "*" one allows every day */
    return md || wd;
}

/*
 * The first local wall-clock time at or after local (seconds, as if UTC)
 * that c matches, or -1 if none before limit.
 */
static int64_t
next_local(const struct cron *c, int64_t local, int64_t limit)
{
    int64_t t = local;

    while (t <= limit) {
        int64_t days = floor_div(t, DAY), sod = t - days * DAY, y;
        unsigned m, d, h, mi, s;

        civil_from_days(days, &y, &m, &d);
        if (!((c->mon >> m) & 1)) {
            t = (m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1)) * DAY;
            continue;
        }
        if (!day_ok(c, d, weekday(days))) {
            t = (days + 1) * DAY;
            continue;
        }
        h = (unsigned)(sod / 3600);
        mi = (unsigned)(sod / 60 % 60);
        s = (unsigned)(sod % 60);
        if (!((c->hour >> h) & 1)) {
            t = days * DAY + (h + 1) * 3600;
            continue;
        }
        if (!((c->min >> mi) & 1)) {
            t = days * DAY + h * 3600 + (mi + 1) * 60;
            continue;
        }
        if (!((c->sec >> s) & 1)) {
            t++;
            continue;
        }
        return t;
    }
    return -1;
}

int64_t
cron_next(const struct cron *c, const struct cron_tz *tz, int64_t after)
{
    int64_t u = after + 1, limit = after + (int64_t)CRON_SEARCH_YEARS * 366 * DAY;

    while (u <= limit) {
        ptrdiff_t i = tz_find(tz, u);
        int32_t off = i < 0 ? tz->off0 : tz->off[i];
        int32_t prev = i <= 0 ? tz->off0 : tz->off[i - 1];
        int64_t start = i < 0 ? INT64_MIN : tz->at[i];
        int64_t end = (size_t)(i + 1) < tz->n ? tz->at[i + 1] : INT64_MAX;
        int64_t local = next_local(c, u + off, limit + off + DAY);

        if (local < 0)
            return -1;
        if (end == INT64_MAX || local < end + off) {
            /* A time the clock showed already, before it was set back: once only. */
            if (!c->hour_all && i >= 0 && prev > off && local < start + prev) {
                u = start + (prev - off);
                continue;
            }
            return local - off;
        }
        /* None in this stretch. If the clock jumps forward at its end, the times it skips
           fire at the jump. */
        if (!c->hour_all && tz->off[i + 1] > off && local < end + tz->off[i + 1])
            return end;
        u = end;
    }
    return -1;
}
