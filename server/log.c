/*
 * Log lines look like
 *   2026-12-02 17:58:01.123 WARNING conn.c:210 conn_read: 127.0.0.1:40112: bad magic
 *   2026-12-02 17:58:01.124 INFO job submitted handle=H:a:1 function="f" peer=127.0.0.1:40112
 * or, with --log-format json, one object a line:
 *   {"time":"2026-12-02T16:58:01.123Z","level":"WARNING","src":"conn.c:210",
 *    "fn":"conn_read","msg":"127.0.0.1:40112: bad magic"}
 *   {"time":"...","level":"INFO","event":"submitted","peer":"127.0.0.1:40112",
 *    "handle":"H:a:1","function":"f"}
 * Each line is made in a buffer on the stack and written with one fwrite on
 * a line-buffered stream, so lines from one process do not interleave.
 * Strings from peers (function names) are escaped; bytes outside printable
 * ASCII never reach the log as they are.
 */
#include "config.h"
#include "log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static const char *const log_names[] = {
    [DSJOB_LOG_FATAL] = "FATAL", [DSJOB_LOG_ALERT] = "ALERT",     [DSJOB_LOG_CRITICAL] = "CRITICAL",
    [DSJOB_LOG_ERROR] = "ERROR", [DSJOB_LOG_WARNING] = "WARNING", [DSJOB_LOG_NOTICE] = "NOTICE",
    [DSJOB_LOG_INFO] = "INFO",   [DSJOB_LOG_DEBUG] = "DEBUG",
};

const char *
log_level_name(enum dsjob_log_level level)
{
    if ((unsigned)level > DSJOB_LOG_DEBUG)
        return "DEBUG";
    return log_names[level];
}

int
log_level_parse(const char *s)
{
    char *end;
    long n;
    int i;

    for (i = 0; i <= DSJOB_LOG_DEBUG; i++)
        if (strcasecmp(s, log_names[i]) == 0)
            return i;
    n = strtol(s, &end, 10);
    if (*s != '\0' && *end == '\0' && n >= 0 && n <= DSJOB_LOG_DEBUG)
        return (int)n;
    return -1;
}

static int
log_open_path(struct log *lg)
{
    FILE *fp = fopen(lg->path, "a");

    if (fp == NULL)
        return -1;
    setvbuf(fp, NULL, _IOLBF, 0);
    if (lg->fp != NULL && lg->fp != stderr)
        fclose(lg->fp);
    lg->fp = fp;
    return 0;
}

int
log_open(struct log *lg, const char *dest, enum dsjob_log_level level)
{
    lg->level = level;
    lg->path = NULL;
    lg->fp = NULL;
    if (dest == NULL || strcmp(dest, "stderr") == 0) {
        lg->fp = stderr;
        return 0;
    }
    if (strcmp(dest, "none") == 0)
        return 0;
    lg->path = strdup(dest);
    if (lg->path == NULL)
        return -1;
    return log_open_path(lg);
}

int
log_reopen(struct log *lg)
{
    return lg->path ? log_open_path(lg) : 0;
}

void
log_release(struct log *lg)
{
    if (lg->fp != NULL && lg->fp != stderr)
        fclose(lg->fp);
    lg->fp = NULL;
    free(lg->path);
    lg->path = NULL;
}

/* A line being made: at most LOG_LINE_MAX bytes, cut (never overrun) past that. */
#define LOG_LINE_MAX 2048
#define LOG_FIELD_MAX 256 /* bytes of a peer's string shown; the rest is cut */

struct line {
    char buf[LOG_LINE_MAX]; /* the text, not NUL-terminated */
    size_t len;             /* bytes used */
};

static void
put(struct line *l, const char *s, size_t n)
{
    if (n > sizeof(l->buf) - l->len)
        n = sizeof(l->buf) - l->len;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void
put_str(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/*
 * put_escaped appends n bytes of s: as a JSON string's contents (\" \\ and
 * \u00XX), or for a text line (\" \\ and \xXX); either way, only printable
 * ASCII goes through as it is. At most max bytes of s, then "...".
 */
static void
put_escaped(struct line *l, const char *s, size_t n, bool json, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, cut = n > max ? max : n;
    char esc[8];

    for (i = 0; i < cut; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
        } else if (c >= 0x20 && c < 0x7f) {
            put(l, (const char *)&c, 1);
        } else if (json) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            put(l, esc, 6);
        } else {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[c >> 4];
            esc[3] = hex[c & 15];
            put(l, esc, 4);
        }
    }
    if (cut < n)
        put_str(l, "...");
}

/* put_field appends ,"name":"value" (JSON; null for NULL) or " name=value" (text). */
static void
put_field(struct line *l, bool json, const char *name, const char *v, size_t n, bool quote)
{
    put_str(l, json ? ",\"" : " ");
    put_str(l, name);
    put_str(l, json ? "\":" : "=");
    if (v == NULL) {
        put_str(l, json ? "null" : "-");
        return;
    }
    quote = quote || json;
    if (quote)
        put(l, "\"", 1);
    put_escaped(l, v, n, json, LOG_FIELD_MAX);
    if (quote)
        put(l, "\"", 1);
}

/* The line's start: time and level. JSON time is UTC (ISO 8601), text local. */
static void
put_start(struct line *l, bool json, enum dsjob_log_level level)
{
    char when[48];
    struct timeval tv;
    struct tm tm;

    gettimeofday(&tv, NULL);
    if (json) {
        gmtime_r(&tv.tv_sec, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        put_str(l, "{\"time\":\"");
        put_str(l, when);
        snprintf(when, sizeof(when), ".%03ldZ\",\"level\":\"", (long)(tv.tv_usec / 1000));
        put_str(l, when);
        put_str(l, log_level_name(level));
        put(l, "\"", 1);
        return;
    }
    localtime_r(&tv.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    put_str(l, when);
    snprintf(when, sizeof(when), ".%03ld ", (long)(tv.tv_usec / 1000));
    put_str(l, when);
    put_str(l, log_level_name(level));
}

/* The line's end; a cut line still ends as a line (and, in JSON, as an object). */
static void
put_end(struct log *lg, struct line *l)
{
    const char *end = lg->json ? "}\n" : "\n";
    size_t n = strlen(end);

    if (l->len > sizeof(l->buf) - n)
        l->len = sizeof(l->buf) - n;
    put(l, end, n);
    fwrite(l->buf, 1, l->len, lg->fp);
}

void
log_job(struct log *lg, enum dsjob_log_level level, const char *event, const char *peer,
        const char *handle, const char *func, size_t func_len, const char *why)
{
    struct line l;
    int saved = errno;

    l.len = 0;
    put_start(&l, lg->json, level);
    if (lg->json) {
        put_field(&l, true, "event", event, strlen(event), true);
    } else {
        put_str(&l, " job ");
        put_str(&l, event);
    }
    if (lg->json)
        put_field(&l, true, "peer", peer, peer ? strlen(peer) : 0, false);
    put_field(&l, lg->json, "handle", handle, handle ? strlen(handle) : 0, false);
    put_field(&l, lg->json, "function", func, func_len, true);
    if (!lg->json)
        put_field(&l, false, "peer", peer, peer ? strlen(peer) : 0, false);
    if (why != NULL)
        put_field(&l, lg->json, "why", why, strlen(why), true);
    put_end(lg, &l);
    errno = saved;
}

void
log_write(struct log *lg, enum dsjob_log_level level, const char *file, int line, const char *func,
          const char *fmt, ...)
{
    char msg[1024];
    char where[32];
    struct line l;
    const char *base = strrchr(file, '/');
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    base = base ? base + 1 : file;
    l.len = 0;
    put_start(&l, lg->json, level);
    if (lg->json) {
        snprintf(where, sizeof(where), "%s:%d", base, line);
        put_field(&l, true, "src", where, strlen(where), true);
        put_field(&l, true, "fn", func, strlen(func), true);
        put_str(&l, ",\"msg\":\"");
        put_escaped(&l, msg, strlen(msg), true, sizeof(msg));
        put_str(&l, "\"");
    } else {
        snprintf(where, sizeof(where), " %s:%d ", base, line);
        put_str(&l, where);
        put_str(&l, func);
        put_str(&l, ": ");
        put_str(&l, msg);
    }
    put_end(lg, &l);
    errno = saved;
}
